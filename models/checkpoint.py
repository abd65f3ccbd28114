"""Checkpoints: a folder with safetensors weights, a JSON config and the tokenizer. No pickle.

- `model.safetensors`: weights (tied embeddings stored once)
- `config.json`: {"format": "edgeformer-checkpoint", "model": {ModelConfig}, "task": ..., ...}
- `tokenizer.json`: the `tokenizers` tokenizer the model was trained with (its target side)
- `source_tokenizer.json` (optional): the tokenizer of the sources, when they have their own
  (a converted Marian model: source.spm and target.spm); absent, sources use tokenizer.json
- `generation_config.json` (optional): default decoding settings, Hugging Face's file (a
  converted model keeps its own); export copies it into the package
- `tokenizer_config.json` (optional): a converted model's chat template and special-token
  strings (Hugging Face's file, the keys runtime.chat reads); export copies it
- `train_state.*`: optimizer / scheduler state for resuming (written by edgeformer.train)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from ..core.config import ModelConfig
from ..core.files import atomic_folder, hub_id_hint
from ..core.format import CHECKPOINT_FORMAT
from .transformer import DecoderOnly, EncoderDecoder, build_model

WEIGHTS, CONFIG, TOKENIZER = "model.safetensors", "config.json", "tokenizer.json"
SOURCE_TOKENIZER = "source_tokenizer.json"  # optional
GENERATION_CONFIG = "generation_config.json"  # optional: default decoding settings (HF's file)
TOKENIZER_CONFIG = "tokenizer_config.json"  # optional: chat template, special-token strings


@contextlib.contextmanager
def os_errors(path: Path) -> Iterator[None]:
    """safetensors' I/O failures (SafetensorError "... (os error 28)": a full disk) as the
    OSError they are, naming `path`: the commands print an OSError as one line."""
    try:
        yield
    except SafetensorError as e:
        found = re.search(r"(?:os error|code:) (\d+)", str(e))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from None


def save_checkpoint(
    path: str | os.PathLike,
    model: EncoderDecoder | DecoderOnly,
    tokenizer_json: str | os.PathLike,
    meta: dict | None = None,
    extra: Callable[[Path], None] | None = None,
    source_tokenizer_json: str | os.PathLike | None = None,
) -> Path:
    """Write model + config + tokenizer (+ the source tokenizer, when the sources have their
    own) to `path` whole or not at all (core.files.atomic_folder).

    `extra(folder)` may write more files (the training state) into the folder before it is
    renamed into place; if it fails, nothing is left and an older `path` is kept intact."""
    path = Path(path)
    with os_errors(path), atomic_folder(path) as tmp:
        save_model(model, str(tmp / WEIGHTS))
        config = {"format": CHECKPOINT_FORMAT, "model": model.cfg.to_dict(), **(meta or {})}
        (tmp / CONFIG).write_text(json.dumps(config, indent=2))
        shutil.copyfile(tokenizer_json, tmp / TOKENIZER)
        if source_tokenizer_json is not None:
            shutil.copyfile(source_tokenizer_json, tmp / SOURCE_TOKENIZER)
        if extra is not None:
            extra(tmp)
    return path


def read_config(path: str | os.PathLike) -> dict:
    """The checkpoint's config.json, with a clear error for a missing or foreign folder."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint folder not found: {path}{hub_id_hint(path)}")
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
    for name, t in model.state_dict().items():  # a diverged run's weights: never exported
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise ValueError(
                f"checkpoint {path}: weight {name!r} holds {bad} NaN or infinite values of "
                f"{t.numel()} (a diverged training run?)"
            )
    return model.to(device).eval(), config
