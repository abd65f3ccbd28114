"""export_package: checkpoint folder -> model package folder (see edgeformer.runtime.package).

The package is built in a temporary folder beside OUT_DIR and renamed at the end, so a failed
export leaves nothing behind and an existing package is only replaced with force=True.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

from ..models.checkpoint import TOKENIZER, load_checkpoint
from ..runtime.package import (
    CONFIG_FILE,
    FORMAT_VERSION,
    PACKAGE_FORMAT,
    TOKENIZER_FILE,
    graph_file,
    io_names,
    sha256,
)
from .quantize import VARIANTS, check_variants, quantize

MIN_OPSET = 23  # the fused ONNX Attention op
MIN_ONNXRUNTIME = "1.23.0"  # first release with a CPU kernel for Attention-23


def _log(verbose: bool, msg: str) -> None:
    if verbose:
        print(msg, file=sys.stderr, flush=True)


def _mb(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.1f} MB"


@contextlib.contextmanager
def _quiet():
    """Silence the exporter's and quantizers' warnings and INFO logs."""
    names = ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "onnxruntime")
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)


def unk_id(tokenizer_json: Path) -> int | None:
    """The tokenizer's unknown-token id (None when its model has no unk token)."""
    from tokenizers import Tokenizer

    model = json.loads(tokenizer_json.read_text()).get("model", {})
    if isinstance(model.get("unk_id"), int):  # Unigram
        return model["unk_id"]
    token = model.get("unk_token")
    return None if token is None else Tokenizer.from_file(str(tokenizer_json)).token_to_id(token)


def export_package(
    checkpoint_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    variants: tuple[str, ...] | list[str] = ("fp32",),
    force: bool = False,
    opset: int = 23,
    verbose: bool = True,
) -> Path:
    """Export a checkpoint to an ONNX model package in `out_dir`; returns its path.

    variants: any of VARIANTS ("fp32" is always written: the quantizers start from it).
    """
    import onnx
    import torch

    from .graphs import graph_specs, to_onnx

    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    if opset < MIN_OPSET:
        raise ValueError(
            f"opset {opset} is not supported: the fused ONNX Attention op needs opset >= "
            f"{MIN_OPSET}"
        )
    variants = ["fp32", *[v for v in check_variants(variants) if v != "fp32"]]
    if out_dir.exists() and not force:
        raise FileExistsError(f"{out_dir} already exists (use force=True / --force to replace it)")
    model, ckpt_config = load_checkpoint(checkpoint_dir)
    cfg = model.cfg
    names = io_names(cfg.family, cfg.n_decoder_layers)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        t0 = time.perf_counter()
        shutil.copyfile(checkpoint_dir / TOKENIZER, tmp / TOKENIZER_FILE)
        files: dict[str, dict[str, str]] = {v: {} for v in variants}
        with _quiet(), torch.no_grad():
            for graph, (wrapper, args, dims) in graph_specs(model).items():
                t = time.perf_counter()
                io = names[graph]
                proto = to_onnx(wrapper, args, dims, io["inputs"], io["outputs"], opset)
                path = tmp / graph_file(graph, "fp32")
                onnx.save_model(proto, path)  # weights inline (< 2 GB)
                files["fp32"][graph] = path.name
                _log(verbose, f"{graph} fp32: {_mb(path)}, {time.perf_counter() - t:.1f} s")
            for variant in variants[1:]:
                for graph in names:
                    t = time.perf_counter()
                    src, dst = tmp / graph_file(graph, "fp32"), tmp / graph_file(graph, variant)
                    quantize(src, dst, variant)
                    files[variant][graph] = dst.name
                    _log(verbose, f"{graph} {variant}: {_mb(dst)}, {time.perf_counter() - t:.1f} s")
        config = {
            "format": PACKAGE_FORMAT,
            "format_version": FORMAT_VERSION,
            "family": cfg.family,
            "task": ckpt_config.get("task", {}),  # e.g. {"kind": "translation", "src_lang": "en"}
            "model": cfg.to_dict(),
            "special_tokens": {
                "pad_id": cfg.pad_id,
                "bos_id": cfg.bos_id,
                "eos_id": cfg.eos_id,
                "unk_id": unk_id(tmp / TOKENIZER_FILE),
            },
            "opset": opset,
            "graphs": names,
            "variants": {
                v: {
                    "files": files[v],
                    "io_dtype": VARIANTS[v]["io_dtype"],
                    "description": VARIANTS[v]["description"],
                }
                for v in variants
            },
            "files": {
                name: sha256(tmp / name)
                for name in [TOKENIZER_FILE, *(f for v in variants for f in files[v].values())]
            },
            "min_onnxruntime": MIN_ONNXRUNTIME,
        }
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2))
        if out_dir.exists():
            shutil.rmtree(out_dir) if out_dir.is_dir() else out_dir.unlink()
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _log(verbose, f"wrote {out_dir} in {time.perf_counter() - t0:.1f} s")
    return out_dir
