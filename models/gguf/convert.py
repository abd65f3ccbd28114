"""convert_gguf: a GGUF file -> an edgeformer checkpoint that keeps the file's quantized blocks.

load (gguf-py's reader, every extent checked: reader.py) -> map (families.py: config.json and
transformers' tensor names) -> the Hugging Face converter (models/hf: validate, map onto our
modules, save) -> the file's raw quantized tensors beside the weights (GGUF_BLOCKS), which
export's `gguf` variant keeps as they are (export/gguf_blocks.py).

The fp32 weights are the file dequantized by gguf-py, as transformers' and llama.cpp's own
loaders compute them; the tokenizer is transformers' conversion of the file's vocabulary
(`AutoTokenizer.from_pretrained(dir, gguf_file=...)`: the same ids by construction; it needs
transformers), with the chat template and EOS ids from the metadata.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from .families import family_of, layer_count
from .reader import GGUFFile

GGUF_BLOCKS = "gguf_blocks.safetensors"  # in the checkpoint: raw tensors, by GGUF name
END_KEYS = ("eos", "eot", "eom")  # tokenizer.ggml.{key}_token_id: llama.cpp's end-of-generation
TYPES_TEXT_MAX = 160  # the checkpoint's and package's source fields hold 200 characters


def write_hf_folder(f: GGUFFile, out: Path) -> dict:
    """config.json, model.safetensors (float32), tokenizer files and generation_config.json of
    the file's model into `out`; returns the config."""
    from safetensors.numpy import save_file

    arch, family = family_of(f)
    cfg = family.config(f, arch)
    family.check_shapes(f, cfg)
    n_layers = layer_count(cfg)
    tensors = {}
    for name in f.tensors:
        if name in family.config_tensors or (
            name == "output.weight" and cfg["tie_word_embeddings"]
        ):
            continue  # read into the config / the embedding's copy
        hf = family.hf_name(name, n_layers)
        tensors[hf] = np.ascontiguousarray(family.hf_tensor(name, f.dequantized(name), cfg))
    save_file(tensors, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    write_tokenizer(f, out)
    ends = [f.metadata(f"tokenizer.ggml.{k}_token_id", None) for k in END_KEYS]
    eos = list(dict.fromkeys(int(e) for e in ends if e is not None))  # type: ignore[call-overload]
    generation = {"bos_token_id": cfg.get("bos_token_id"), "pad_token_id": cfg.get("pad_token_id")}
    if eos:
        generation["eos_token_id"] = eos if len(eos) > 1 else eos[0]
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2))
    return cfg


def write_tokenizer(f: GGUFFile, out: Path) -> None:
    """tokenizer.json, tokenizer_config.json and the chat template, as transformers converts
    the file's vocabulary (the ids transformers gives for the same file)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ImportError(
            "converting a GGUF file's tokenizer needs transformers (pip install "
            "'transformers>=5.20'; nothing is downloaded)"
        ) from None
    try:
        tok = AutoTokenizer.from_pretrained(str(f.path.parent), gguf_file=f.path.name)
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise ValueError(f"{f.path}: the tokenizer in its metadata cannot be read ({e})") from None
    template = f.metadata("tokenizer.chat_template", None)
    if isinstance(template, str):
        tok.chat_template = template
    tok.save_pretrained(str(out))


def save_blocks(f: GGUFFile, folder: Path) -> None:
    """The file's raw tensors, (rows, row_bytes) uint8 by GGUF name, with their GGML types and
    shapes in the safetensors metadata, into the checkpoint folder."""
    from safetensors.numpy import save_file

    raw = {name: np.ascontiguousarray(t.raw) for name, t in f.tensors.items()}
    meta = {name: json.dumps({"type": t.type_name, "shape": t.shape}) for name, t in
            f.tensors.items()}  # fmt: skip
    save_file(raw, str(folder / GGUF_BLOCKS), metadata=meta)


def convert_gguf(
    src: str | os.PathLike, out: str | os.PathLike, force: bool = False, verbose: bool = False
) -> Path:
    """Convert the GGUF file `src` into the edgeformer checkpoint `out`."""
    from ..hf.convert import check_out, convert_hf

    check_out(Path(src), Path(out), force)  # before any work: never over the file's folder
    f = GGUFFile(src)
    arch, family = family_of(f)
    with tempfile.TemporaryDirectory(prefix="edgeformer-gguf-") as tmp:
        write_hf_folder(f, Path(tmp))
        source = {"format": "gguf", "file": f.path.name, "architecture": family.architecture,
                  "gguf_architecture": arch, "types": types_text(f)}  # fmt: skip
        path = convert_hf(
            tmp, out, force=force, verbose=False, source=source,
            extra=lambda folder: save_blocks(f, folder),
        )  # fmt: skip
    if verbose:
        print(f"converted {f.path.name} ({arch}: {types_text(f)}) -> {path}", file=sys.stderr,
              flush=True)  # fmt: skip
    return path


def types_text(f: GGUFFile) -> str:
    """How many tensors of each GGML type the file holds: "Q4_1 210, F32 61, Q8_0 1"."""
    out: dict[str, int] = {}
    for t in f.tensors.values():
        out[t.type_name] = out.get(t.type_name, 0) + 1
    parts = [(k, n) for k, n in sorted(out.items(), key=lambda kv: -kv[1])]
    text = ""
    for keep in range(len(parts), 0, -1):  # the source fields are short: say what is left out
        rest = parts[keep:]
        more = [f"{len(rest)} more types ({sum(n for _, n in rest)} tensors)"] if rest else []
        text = ", ".join([f"{k} {n}" for k, n in parts[:keep]] + more)
        if len(text) <= TYPES_TEXT_MAX:
            break
    return text
