"""convert_hf: a Hugging Face model folder -> an edgeformer checkpoint, without transformers.

load (config.json, safetensors) -> validate (the architecture's loader maps the config exactly
and every tensor, or names what it cannot) -> save (models.checkpoint.save_checkpoint, whole or
nothing). Pickled `.bin` weights are refused (never unpickled).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ...core.config import ModelConfig
from ...core.files import hub_id_hint
from ...core.progress import duration
from ..checkpoint import CHECKPOINT_FORMAT, GENERATION_CONFIG, TOKENIZER_CONFIG, save_checkpoint
from ..transformer import build_model
from . import files
from .loaders import Loader, WeightReader, Weights, loader_for

HF_CONFIG, HF_WEIGHTS, HF_INDEX = "config.json", "model.safetensors", "model.safetensors.index.json"
PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def _config_format(path: str | os.PathLike) -> object:
    """The "format" of a folder's config.json; "huggingface" for a Hugging Face model config
    (it has architectures / model_type), None for no readable config."""
    try:
        config = json.loads((Path(path) / HF_CONFIG).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    if "format" not in config and ("architectures" in config or "model_type" in config):
        return "huggingface"
    return config.get("format")


def is_hf_model_dir(path: str | os.PathLike) -> bool:
    """A folder whose config.json is a Hugging Face model config (architectures / model_type)."""
    return _config_format(path) == "huggingface"


def read_hf_config(src: Path) -> dict:
    if not src.exists():
        raise FileNotFoundError(f"{src}: no such folder{hub_id_hint(src)}")
    if not src.is_dir():
        raise ValueError(f"{src} is a file, not a Hugging Face model folder")
    if not (src / HF_CONFIG).is_file():
        raise FileNotFoundError(f"{src} has no {HF_CONFIG}: not a Hugging Face model folder")
    files.check_links(src)  # every file read from here on stays inside the folder
    return files.read_json(src / HF_CONFIG)


def hf_model_config(src: str | os.PathLike) -> tuple[str, ModelConfig]:
    """(architecture, ModelConfig) of a Hugging Face folder; errors name the field."""
    hf = read_hf_config(Path(src))
    arch, loader = loader_for(hf)
    return arch, loader.config(loader.fields(hf, arch))


def load_weights(src: Path) -> Weights:
    """All tensors of the folder's safetensors file(s), as float32, their headers checked first
    (models.hf.files); shards named by the index stay inside the folder. Pickles are refused."""
    if (src / HF_WEIGHTS).is_file():
        shards: dict[Path, set[str] | None] = {src / HF_WEIGHTS: None}
    elif (src / HF_INDEX).is_file():
        shards = dict(index_shards(src))
    elif any((src / name).is_file() for name in PICKLED):
        raise ValueError(
            f"{src} holds pickled PyTorch weights (pytorch_model.bin), which edgeformer never "
            "unpickles. Convert them to safetensors first, in an environment you trust: "
            "`AutoModelForCausalLM.from_pretrained(SRC).save_pretrained(SRC, "
            "safe_serialization=True)`, or the `convert` Space of the safetensors project"
        )
    else:
        raise FileNotFoundError(f"{src} has no {HF_WEIGHTS} (or {HF_INDEX})")
    headers: dict[Path, dict[str, dict]] = {}
    seen: dict[str, Path] = {}
    for file, listed in shards.items():
        headers[file] = files.read_header(file)
        for name in headers[file]:
            if name in seen:
                raise ValueError(f"{src}: tensor {name!r} is in both {seen[name].name} and {file}")
            seen[name] = file
        for name in sorted(listed or ()):
            if name not in headers[file]:
                raise ValueError(f"{src / HF_INDEX} puts tensor {name!r} in {file}, which lacks it")
    weights: Weights = {}
    for file, header in headers.items():
        tensors = files.load_tensors(file, header)
        files.check_finite(tensors, set(tensors), str(file))
        weights.update(tensors)
    return weights


def index_shards(src: Path) -> dict[Path, set[str]]:
    """{shard file: the tensors the index puts in it}, each shard inside the folder."""
    index = files.read_json(src / HF_INDEX)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{src / HF_INDEX}: weight_map is not a map of tensor names to files")
    shards: dict[Path, set[str]] = {}
    for tensor, name in weight_map.items():
        file = files.inside(src, name, f"{HF_INDEX} (tensor {tensor!r})")
        shards.setdefault(file, set()).add(tensor)
    for file in shards:
        if not file.is_file():
            raise FileNotFoundError(f"{src}: {file.name} (listed in {HF_INDEX}) is missing")
    return dict(sorted(shards.items()))


def map_weights(arch: str, loader: Loader, weights: Weights, cfg: ModelConfig) -> Weights:
    """Our state dict; a missing tensor, or one nobody maps, is an error naming it."""
    w = WeightReader(weights, loader.prefix)
    try:
        sd, ignored = loader.weights(w, cfg)
    except KeyError as e:
        raise ValueError(f"{arch} weights: missing tensor {e.args[0]!r}") from None
    extra = sorted(set(w) - w.read - ignored)
    if extra:
        raise ValueError(f"{arch} weights: tensors edgeformer does not model: {extra[:5]}")
    return sd


# A model's embedding may have more rows than its tokenizer has tokens (padded to a multiple of
# 64 or 128, reserved rows: Qwen2.5 151,936 for 151,665 tokens, T5 32,128 for 32,100); a table
# with more than twice the tokenizer's rows is a tokenizer of another model.
MOST_PADDING = 2.0


def check_tokenizer_fits(src: Path, tokens: int, rows: int) -> None:
    """A tokenizer of `tokens` tokens fits a model of `rows` vocabulary rows: no more tokens
    than rows, and not so few that the model would mostly generate ids it cannot decode."""
    if tokens > rows:
        raise ValueError(
            f"{src}: the tokenizer has {tokens} tokens, more than the model's vocab_size {rows}"
        )
    if tokens * MOST_PADDING < rows:
        raise ValueError(
            f"{src}: the tokenizer has {tokens} tokens and the model's vocab_size is {rows}: "
            "they are not of one model (the model would generate ids the tokenizer decodes to "
            "nothing); save the model with vocab_size set to the tokenizer's size"
        )


def check_out(src: Path, out: Path, force: bool) -> None:
    """Refuse an OUT that would replace the source, or anything but a checkpoint without force."""
    if out.resolve() == src.resolve() or out.resolve() in src.resolve().parents:
        raise ValueError(f"{out} is or contains the Hugging Face folder {src}; choose another")
    if out.exists() or out.is_symlink():
        if not force:
            raise FileExistsError(f"{out} already exists (use force=True / --force to replace it)")
        if _config_format(out) != CHECKPOINT_FORMAT:
            raise FileExistsError(
                f"{out} exists and is not an edgeformer checkpoint: --force replaces checkpoints "
                "only; remove it yourself or choose another folder"
            )


def generation_config(src: Path, cfg: ModelConfig, end_ids: list[int]) -> dict | None:
    """The checkpoint's generation_config.json: the folder's own, or, when it has none and
    config.json lists several EOS ids (Llama 3), the special ids as transformers'
    GenerationConfig.from_model_config would take them; None: nothing to write."""
    if (src / GENERATION_CONFIG).is_file():
        return None  # copied as it is
    if len(end_ids) < 2:
        return None
    return {"bos_token_id": cfg.bos_id, "eos_token_id": end_ids, "pad_token_id": cfg.pad_id}


# what the checkpoint keeps of the folder's tokenizer_config.json: the chat template, the
# special tokens' strings it may name, and what transformers / genai read to load tokenizer.json
TOKENIZER_CONFIG_KEYS = (
    "chat_template", "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
    "mask_token", "clean_up_tokenization_spaces", "model_max_length",
)  # fmt: skip
CHAT_TEMPLATE_FILE, CHAT_TEMPLATE_JSON = "chat_template.jinja", "chat_template.json"


def _json_object(path: Path) -> dict:
    return files.read_json(path)


def tokenizer_config(src: Path) -> dict | None:
    """The checkpoint's tokenizer_config.json: the keys of TOKENIZER_CONFIG_KEYS from the
    folder's tokenizer_config.json (and special_tokens_map.json, which older folders keep the
    special tokens in), the chat template as transformers loads it (chat_template.jinja wins
    over the config's entry; a list of named templates gives its "default"); None when the
    folder has none of these."""
    config: dict = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        if (src / name).is_file():
            config |= _json_object(src / name)
    if (src / CHAT_TEMPLATE_JSON).is_file():
        config["chat_template"] = _json_object(src / CHAT_TEMPLATE_JSON).get("chat_template")
    if (src / CHAT_TEMPLATE_FILE).is_file():
        try:
            config["chat_template"] = (src / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{src / CHAT_TEMPLATE_FILE} is not UTF-8 text ({e})") from None
    kept = {k: config[k] for k in TOKENIZER_CONFIG_KEYS if config.get(k) is not None}
    template = kept.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use"}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        kept["chat_template"] = named.get("default")
    if "chat_template" in kept and not isinstance(kept["chat_template"], str):
        raise ValueError(f"{src}: the chat template is not a string (or has no default)")
    if not kept:
        return None
    return kept | {"tokenizer_class": "PreTrainedTokenizerFast"}


def _run_configs(
    src: Path, written: dict | None, tokenizer: dict | None, extra: Callable[[Path], None] | None
) -> Callable[[Path], None]:
    """Write the model's generation_config.json (default decoding settings) and its
    tokenizer_config.json (chat template, special-token strings) into the folder, then what
    `extra` writes."""

    def write(folder: Path) -> None:
        if extra is not None:
            extra(folder)
        if (src / GENERATION_CONFIG).is_file():
            shutil.copyfile(src / GENERATION_CONFIG, folder / GENERATION_CONFIG)
        elif written is not None:
            (folder / GENERATION_CONFIG).write_text(json.dumps(written, indent=2))
        if tokenizer is not None:
            text = json.dumps(tokenizer, indent=2, ensure_ascii=False)
            (folder / TOKENIZER_CONFIG).write_text(text, encoding="utf-8")

    return write


def convert_hf(
    src: str | os.PathLike,
    out: str | os.PathLike,
    force: bool = False,
    verbose: bool = False,
    source: dict | None = None,
    extra: Callable[[Path], None] | None = None,
) -> Path:
    """Convert the Hugging Face folder `src` into the edgeformer checkpoint `out`. source: the
    checkpoint's record of where it came from (default: this folder's architecture); extra:
    writes more files into the checkpoint (the GGUF converter's raw blocks)."""
    src, out = Path(src), Path(out)
    started = time.perf_counter()
    check_out(src, out, force)
    hf = read_hf_config(src)
    arch, loader = loader_for(hf)
    f = loader.fields(hf, arch)
    cfg = loader.config(f)
    end_ids = loader.end_ids(f, cfg)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, source_tokenizer = loader.tokenizers(src, Path(tmp), arch)
        if (src / GENERATION_CONFIG).is_file():
            files.check_generation_config(src / GENERATION_CONFIG, cfg)
        sd = map_weights(arch, loader, load_weights(src), cfg)
        files.check_sizes(sd, cfg, str(src))  # config.json against the tensors, no allocation
        # then the tokenizers against the sizes config.json and the tensors agree on
        for file, rows in ((tokenizer, cfg.vocab_size), (source_tokenizer, cfg.source_vocab)):
            if file is not None:
                check_tokenizer_fits(src, files.check_tokenizer(file).get_vocab_size(), rows)
        model = build_model(cfg)
        try:
            model.load_state_dict(sd, strict=True)
        except RuntimeError as e:  # shapes that config.json does not explain
            raise ValueError(f"{src}: weights do not match config.json ({e})") from None
        kind = "translation" if cfg.family == "encoder-decoder" else "lm"
        task = {"kind": kind, **loader.task(src, source_tokenizer or tokenizer, cfg)}
        source = source or {"format": "huggingface", "architecture": arch}
        meta = {"task": task, "source": source}
        written = generation_config(src, cfg, end_ids)
        tok_config = tokenizer_config(src) if cfg.family == "decoder-only" else None
        with torch.no_grad():
            path = save_checkpoint(
                out, model.eval(), tokenizer, meta,
                extra=_run_configs(src, written, tok_config, extra),
                source_tokenizer_json=source_tokenizer,
            )  # fmt: skip
    if verbose:
        n = model.num_params() / 1e6
        took = duration(time.perf_counter() - started)
        print(f"converted {arch} ({n:.1f} M parameters) -> {path} in {took}", file=sys.stderr,
              flush=True)  # fmt: skip
    return path
