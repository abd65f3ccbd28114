"""What `convert hf` reads from a Hugging Face folder, checked before it is trusted.

Every architecture's loader goes through here (convert.convert_hf calls it; a new family needs
nothing of its own): the checks work from the files and from what the loader maps, never from
one family's names.

- Files stay inside the folder: names from model.safetensors.index.json are relative paths
  without `..`; a symlink (the folder's entries, a shard) must resolve inside the folder, or
  inside the Hugging Face cache's `blobs/` when the folder is a cache snapshot
  (`models--ORG--NAME/snapshots/REV`, whose files are links into `../../blobs`).
- JSON files (config.json, the index, generation_config.json, tokenizer_config.json, ...) have
  a size bound and must parse to an object; an error names the file.
- safetensors headers are validated before any tensor is read (`read_header`): the header's
  length, JSON, each tensor's dtype, shape and data offsets (inside the file, contiguous, the
  size its shape and dtype make); truncated files are named with the tensor that is cut.
- config.json's sizes are checked against the tensors (`check_sizes`) before the model is built:
  the loader maps the tensors, and the model that config.json describes is built on PyTorch's
  meta device (no memory) to compare every shape; its buffers (position tables) are bounded, so
  a 1 KB config.json cannot ask for terabytes.
- A folder with only a slow tokenizer's files (mT5's spiece.model, an mBART
  sentencepiece.bpe.model) gets its tokenizer.json from transformers' own conversion
  (`fast_tokenizer`: AutoTokenizer, local files only, no remote code), as CTranslate2's converter
  loads it; then it is checked as any tokenizer.json is.
- tokenizer.json must parse, carry only regexes inside core.patterns' bound and load in the
  tokenizers library (a panic is an error naming the file); generation_config.json must hold
  settings the runtime accepts, its token ids inside the vocabulary.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import torch

from ...core.commandline import pip_extra
from ...core.config import ModelConfig
from ...core.generation_config import generation_settings
from ...core.patterns import refused_what, tokenizer_pattern_problem
from ...core.schema import PackageConfig, PackageError

MAX_JSON_BYTES = 64 << 20  # config.json, index, generation / tokenizer configs
MAX_TOKENIZER_BYTES = 512 << 20
MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
# the safetensors dtypes and their sizes in bytes
DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
    "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip
# buffers (position tables) the model may allocate beyond its weights: this, or the weights'
# own size when that is larger
BUFFER_BYTES_FLOOR = 1 << 30


def roots(src: Path) -> list[Path]:
    """Where the folder's files may resolve: the folder, and the cache's blobs/ for a snapshot."""
    out = [src.resolve()]
    if src.resolve().parent.name == "snapshots":
        blobs = src.resolve().parent.parent / "blobs"
        if blobs.is_dir():
            out.append(blobs.resolve())
    return out


def inside(src: Path, name: object, what: str) -> Path:
    """src / name, refused unless it is a relative path without `..` that stays inside the
    folder (roots) after symlinks; `what` says where the name came from."""
    bad = (
        not isinstance(name, str)
        or not name
        or "\0" in name
        or "\\" in name
        or os.path.isabs(name)
        or any(part in ("", "..") for part in name.split("/"))
    )
    if not bad:
        resolved = (src / str(name)).resolve()
        bad = not any(resolved == r or r in resolved.parents for r in roots(src))
    if bad:
        raise ValueError(
            f"{src}: {what} names {name!r}, which is not a file inside the folder (absolute "
            "paths, '..' and links out of the folder are refused)"
        )
    return src / str(name)


def check_links(src: Path) -> None:
    """Every entry of the folder that is a symlink resolves inside it (roots)."""
    for entry in sorted(src.iterdir()):
        if entry.is_symlink():
            inside(src, entry.name, "the folder")


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> dict:
    """A JSON object file; ValueError naming the file for anything else."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise ValueError(f"{path} is {size} bytes, over the {limit >> 20} MB limit")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON ({e})") from None
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply") from None
    except OSError as e:
        raise ValueError(f"{path} cannot be read ({e.strerror or e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


# ---------------------------------------------------------------- safetensors


def _ints(value: object, n: int | None = None) -> bool:
    return (
        isinstance(value, list)
        and (n is None or len(value) == n)
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    )


def read_header(path: Path) -> dict[str, dict]:
    """A safetensors file's tensors {name: {dtype, shape, data_offsets}}, validated against
    the file: ValueError naming the file (and the tensor) for a damaged or lying header."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ValueError(f"{path} is not a safetensors file ({size} bytes, no header)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or n > size - 8:
                raise ValueError(
                    f"{path}: the safetensors header length {n} is beyond the file "
                    f"({size} bytes) or the {MAX_HEADER_BYTES} byte limit"
                )
            text = f.read(n)
    except OSError as e:
        raise ValueError(f"{path} cannot be read ({e.strerror or e})") from None
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"{path}: the safetensors header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the safetensors header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (
        isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())
    ):
        raise ValueError(f"{path}: the safetensors __metadata__ is not a map of strings")
    data_size = size - 8 - n
    for name, t in header.items():
        _check_tensor(path, name, t, data_size)
    end = 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, stop = t["data_offsets"]
        if begin != end:
            raise ValueError(
                f"{path}: tensor {name!r} starts at byte {begin} of the data, expected {end} "
                "(tensors overlap or leave a gap)"
            )
        end = stop
    if end != data_size:
        raise ValueError(
            f"{path}: the tensors end at byte {end} of the data, the file has {data_size} "
            "bytes of data (a damaged file)"
        )
    return header


def _check_tensor(path: Path, name: str, t: object, data_size: int) -> None:
    where = f"{path}: tensor {name!r}"
    if not isinstance(t, dict):
        raise ValueError(f"{where} is not a JSON object in the header")
    dtype, shape, offsets = t.get("dtype"), t.get("shape"), t.get("data_offsets")
    if dtype not in DTYPE_SIZES:
        raise ValueError(f"{where} has dtype {dtype!r}, not one of {', '.join(DTYPE_SIZES)}")
    if not _ints(shape):
        raise ValueError(f"{where} has shape {shape!r}, not a list of sizes")
    if not _ints(offsets, 2) or offsets[0] > offsets[1]:  # type: ignore[index]
        raise ValueError(f"{where} has data_offsets {offsets!r}, not [begin, end]")
    begin, end = offsets  # type: ignore[misc]
    numel = 1
    for s in shape:  # type: ignore[union-attr]
        numel *= s
    if (end - begin) != numel * DTYPE_SIZES[dtype]:
        raise ValueError(
            f"{where}: shape {shape} of {dtype} is {numel * DTYPE_SIZES[dtype]} bytes, its "
            f"data_offsets span {end - begin}"
        )
    if end > data_size:
        raise ValueError(
            f"{where} ends at byte {end} of the data, the file has {data_size}: the file is "
            "truncated"
        )


def load_tensors(path: Path, header: dict[str, dict]) -> dict[str, torch.Tensor]:
    """The file's tensors as float32 (the header validated by read_header); errors name the
    file and the tensor."""
    from safetensors import safe_open

    out: dict[str, torch.Tensor] = {}
    name = "(opening)"
    try:
        with safe_open(str(path), framework="pt") as f:
            for name in header:
                out[name] = f.get_tensor(name).float()
    except Exception as e:  # SafetensorError, OSError, torch's
        first = (str(e).splitlines() or [""])[0][:200]
        raise ValueError(f"{path}: tensor {name!r} cannot be read ({first})") from None
    return out


def check_finite(weights: dict[str, torch.Tensor], names: set[str], where: str) -> None:
    """The tensors `names` (those the loader mapped) hold no NaN or infinity."""
    for name in sorted(names):
        t = weights.get(name)
        if t is not None and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise ValueError(
                f"{where}: tensor {name!r} holds {bad} NaN or infinite values of {t.numel()}"
            )


# ---------------------------------------------------------------- config.json against the tensors


def check_sizes(sd: dict[str, torch.Tensor], cfg: ModelConfig, where: str) -> None:
    """The model config.json describes, built on the meta device (no memory), against the
    mapped tensors: every parameter's shape, and its buffers (position tables) bounded."""
    from ..transformer import build_model

    with torch.device("meta"):
        model = build_model(cfg)
    want = model.state_dict()
    missing = sorted(set(want) - set(sd))
    if missing:
        raise ValueError(f"{where}: no tensor for {missing[0]!r} of the model config.json gives")
    for key, t in want.items():
        got = sd[key]
        if tuple(got.shape) != tuple(t.shape):
            raise ValueError(
                f"{where}: the tensor mapped to {key!r} has shape {list(got.shape)}, the sizes "
                f"of config.json make it {list(t.shape)}"
            )
    params = sum(t.numel() for t in want.values()) * 4
    buffers = sum(b.numel() for b in model.buffers()) * 4
    if buffers > max(BUFFER_BYTES_FLOOR, params):
        raise ValueError(
            f"{where}: config.json's sizes (max_position_embeddings {cfg.max_len}) ask for "
            f"{buffers / 2**30:.1f} GiB of position tables beside {params / 2**30:.1f} GiB of "
            "weights"
        )


# ---------------------------------------------------------------- files copied into the checkpoint


def check_tokenizer(path: Path) -> Any:
    """The `tokenizers` Tokenizer of a tokenizer.json, checked: parses, regexes inside
    core.patterns' bound, loads (a panic is a ValueError naming the file)."""
    from tokenizers import Tokenizer

    problem = tokenizer_pattern_problem(read_json(path, MAX_TOKENIZER_BYTES))
    if problem:
        raise ValueError(f"{path} has a refused {refused_what(problem)}")
    try:
        return Tokenizer.from_file(str(path))
    except BaseException as e:
        if not (isinstance(e, Exception) or type(e).__name__ == "PanicException"):
            raise
        first = (str(e).splitlines() or [""])[0][:200]
        raise ValueError(f"{path} cannot be loaded by the tokenizers library ({first})") from None


def check_generation_config(path: Path, cfg: ModelConfig) -> None:
    """generation_config.json holds settings the runtime accepts (as the package will), its
    token ids inside the vocabulary; ValueError naming the file and the key."""
    data = read_json(path)
    for key, value in data.items():
        if not key.endswith("token_id") or value is None:
            continue
        ids = value if isinstance(value, list) else [value]
        ok = bool(ids) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
        if not ok or not all(0 <= i < cfg.vocab_size for i in ids):
            raise ValueError(f"{path}: {key} is {value!r}, not token ids in [0, {cfg.vocab_size})")
    package = SimpleNamespace(family=cfg.family, special_tokens=SimpleNamespace(eos_id=cfg.eos_id))
    try:
        generation_settings(data, cast(PackageConfig, package), str(path))
    except PackageError as e:
        raise ValueError(str(e)) from None


# files of a slow (Python / SentencePiece) tokenizer that transformers can make a fast one from
SLOW_TOKENIZER_FILES = ("spiece.model", "sentencepiece.bpe.model", "tokenizer.model",
                        "sentencepiece.model", "vocab.json", "vocab.txt", "merges.txt")  # fmt: skip


def fast_tokenizer(src: Path, out: Path) -> Path:
    """out/tokenizer.json, made by transformers from a folder's slow tokenizer (a folder saved
    without its tokenizer.json: mT5's spiece.model and the like)."""
    have = [f for f in SLOW_TOKENIZER_FILES if (src / f).is_file()]
    advice = (
        "save one with `AutoTokenizer.from_pretrained(SRC).save_pretrained(SRC)` where a fast "
        "tokenizer exists"
    )
    if not have:
        raise FileNotFoundError(
            f"{src} has no tokenizer.json (a `tokenizers` fast tokenizer) and no tokenizer "
            f"files to make one from ({', '.join(SLOW_TOKENIZER_FILES)}): {advice}"
        )
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise FileNotFoundError(
            f"{src} has no tokenizer.json, only {', '.join(have)}: making one needs "
            f"transformers ({pip_extra('bench')}), or {advice}"
        ) from None
    check_links(src)
    try:
        tok = AutoTokenizer.from_pretrained(src, local_files_only=True, trust_remote_code=False)
    except Exception as e:  # transformers raises many kinds: one line naming the folder
        raise ValueError(
            f"{src} has no tokenizer.json and transformers could not load its tokenizer "
            f"({', '.join(have)}): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        ) from None
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        raise FileNotFoundError(
            f"{src} has no tokenizer.json and its {type(tok).__name__} has no fast form in "
            f"transformers: {advice}"
        )
    path = out / "tokenizer.json"
    backend.save(str(path))
    return path
