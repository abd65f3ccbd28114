"""Checkpoints: a folder with safetensors weights, a JSON config and the tokenizer. No pickle.

- `model.safetensors`: weights (tied embeddings stored once)
- `config.json`: {"format": "edgeformer-checkpoint", "model": {ModelConfig}, "task": ..., ...}
- `tokenizer.json`: the `tokenizers` tokenizer the model was trained with
- `train_state.*`: optimizer / scheduler state for resuming (written by edgeformer.train)
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from .config import ModelConfig
from .transformer import DecoderOnly, EncoderDecoder, build_model

CHECKPOINT_FORMAT = "edgeformer-checkpoint"
WEIGHTS, CONFIG, TOKENIZER = "model.safetensors", "config.json", "tokenizer.json"


def save_checkpoint(
    path: str | os.PathLike,
    model: EncoderDecoder | DecoderOnly,
    tokenizer_json: str | os.PathLike,
    meta: dict | None = None,
) -> Path:
    """Write model + config + tokenizer to `path` atomically (temp folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        save_model(model, str(tmp / WEIGHTS))
        config = {"format": CHECKPOINT_FORMAT, "model": model.cfg.to_dict(), **(meta or {})}
        (tmp / CONFIG).write_text(json.dumps(config, indent=2))
        shutil.copyfile(tokenizer_json, tmp / TOKENIZER)
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def read_config(path: str | os.PathLike) -> dict:
    """The checkpoint's config.json, with a clear error for a missing or foreign folder."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint folder not found: {path}")
    for name in (WEIGHTS, CONFIG, TOKENIZER):
        if not (path / name).is_file():
            raise FileNotFoundError(f"checkpoint {path} is missing {name}")
    try:
        config = json.loads((path / CONFIG).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"checkpoint {path}: {CONFIG} is not valid JSON ({e})") from None
    if config.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"checkpoint {path}: {CONFIG} is not an edgeformer checkpoint config")
    return config


def load_checkpoint(
    path: str | os.PathLike, device: str | torch.device = "cpu"
) -> tuple[EncoderDecoder | DecoderOnly, dict]:
    """(model in eval mode, config dict). Errors name the file and the mismatch."""
    path = Path(path)
    config = read_config(path)
    model = build_model(ModelConfig.from_dict(config["model"]))
    try:
        missing, unexpected = load_model(
            model, str(path / WEIGHTS), strict=False, device=str(device)
        )
    except (SafetensorError, OSError) as e:
        raise ValueError(f"checkpoint {path}: cannot read {WEIGHTS} ({e})") from None
    except RuntimeError as e:  # shape mismatch between config and weights
        raise ValueError(f"checkpoint {path}: weights do not match config.json ({e})") from None
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {path}: weights do not match config.json "
            f"(missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]})"
        )
    return model.to(device).eval(), config
