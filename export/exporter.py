"""export_package: checkpoint folder -> model package folder (see edgeformer.core.format).

The package is built in a temporary folder beside OUT_DIR and renamed at the end, so a failed
export leaves nothing behind (and a killed one's folder is removed by the next export). An
existing OUT_DIR is replaced only with force=True and only when it is an edgeformer package;
never the checkpoint itself or a folder that holds it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ..core.data import TrainingData
from ..core.files import sha256
from ..core.format import (
    CONFIG_FILE,
    GENAI_CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    GOLDEN_FILE,
    PACKAGE_FORMAT,
    SOURCE_TOKENIZER_FILE,
    TOKENIZER_FILE,
    io_names,
)
from ..core.generation_config import default_generation_config, generation_settings
from ..core.schema import PackageConfig, SpecialTokens, VariantEntry
from ..models.checkpoint import GENERATION_CONFIG, SOURCE_TOKENIZER, TOKENIZER, load_checkpoint
from .builder import OPSET, build_graphs
from .gptq import CALIBRATION_EXAMPLES, Hessians, layer_hessians
from .quality import calibration_batches
from .recipes import VARIANT_SPECS, variant_spec
from .verify import golden_record
from .writer import genai_config, write_graphs


def _log(verbose: bool, msg: str) -> None:
    if verbose:
        print(msg, file=sys.stderr, flush=True)


def check_variants(variants: str | list[str] | tuple[str, ...]) -> list[str]:
    """Validate variant names (a list, or a comma-separated string) -> list without repeats."""
    if isinstance(variants, str):
        variants = [v.strip() for v in variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANT_SPECS]
    if bad:
        raise ValueError(f"unknown quantization {bad}; valid: {', '.join(VARIANT_SPECS)}")
    return list(dict.fromkeys(variants))


def unk_id(tokenizer_json: Path) -> int | None:
    """The tokenizer's unknown-token id (None when its model has no unk token)."""
    from tokenizers import Tokenizer

    model = json.loads(tokenizer_json.read_text()).get("model", {})
    if isinstance(model.get("unk_id"), int):  # Unigram
        return model["unk_id"]
    token = model.get("unk_token")
    return None if token is None else Tokenizer.from_file(str(tokenizer_json)).token_to_id(token)


def is_package(path: Path) -> bool:
    """A folder whose config.json says it is an edgeformer package (what --force may replace)."""
    try:
        return json.loads((path / CONFIG_FILE).read_text()).get("format") == PACKAGE_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def check_target(checkpoint_dir: Path, out_dir: Path, force: bool) -> None:
    """Refuse an OUT_DIR that export must not replace: existing without force, not a package,
    or the checkpoint itself (or a folder that holds it)."""
    src, dst = checkpoint_dir.resolve(), out_dir.resolve()
    if dst == src or dst in src.parents:
        raise ValueError(f"{out_dir} is or contains the checkpoint being exported; choose another")
    if not out_dir.exists() and not out_dir.is_symlink():
        return
    if not force:
        raise FileExistsError(f"{out_dir} already exists (use force=True / --force to replace it)")
    if out_dir.is_symlink() or not out_dir.is_dir() or not is_package(out_dir):
        raise FileExistsError(
            f"{out_dir} exists and is not an edgeformer model package (no package config.json): "
            "--force replaces packages only; remove it yourself or choose another folder"
        )


PID_FILE = ".export-pid"


def remove_stale_temporaries(out_dir: Path) -> None:
    """Delete `.NAME.tmp-*` folders left by killed exports (their exporting process is gone)."""
    for tmp in out_dir.parent.glob(f".{out_dir.name}.tmp-*"):
        try:
            pid = int((tmp / PID_FILE).read_text())
            os.kill(pid, 0)  # still running: another export's folder
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except (OSError, ValueError):
            continue  # no readable PID file: not ours to judge


def make_temporary(out_dir: Path) -> Path:
    """A hidden folder beside OUT_DIR with the user's umask (mkdtemp makes it 0700)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)
    (tmp / PID_FILE).write_text(str(os.getpid()))
    return tmp


def write_run_configs(folder: Path, checkpoint_dir: Path, config: PackageConfig) -> None:
    """generation_config.json (the checkpoint's own, e.g. a converted Hugging Face model's, or
    greedy defaults) and, for an LM, genai_config.json (onnxruntime-genai runs decoder.onnx)."""
    own = checkpoint_dir / GENERATION_CONFIG
    if own.is_file():
        # the runtime's reading of it must work: checked now, not at a user's first load
        generation_settings(json.loads(own.read_text()), config, str(own))
        shutil.copyfile(own, folder / GENERATION_CONFIG_FILE)
    else:
        text = json.dumps(default_generation_config(config), indent=2)
        (folder / GENERATION_CONFIG_FILE).write_text(text)
    if config.family == "decoder-only":
        (folder / GENAI_CONFIG_FILE).write_text(json.dumps(genai_config(config), indent=2))


def measure_variants(
    folder: Path, config: PackageConfig, data: TrainingData | None, verbose: bool
) -> PackageConfig:
    """Each variant's agreement with PyTorch's golden run and its ms/token on this machine
    (runtime.verify), and its held-out BLEU / perplexity when the checkpoint's training data is
    bundled (export.quality), recorded in the config: what variant="auto" chooses from."""
    from ..runtime.verify import verify
    from .quality import held_out_quality

    held = held_out_quality(folder, data, list(config.variants), verbose)
    measured = {}
    for c in verify(folder):
        if c.error is None:
            measured[c.variant] = dataclasses.replace(
                config.variants[c.variant],
                measured={
                    "agreement": c.agreement,
                    "max_logit_diff": c.max_diff,
                    "ms_per_token": c.ms_per_token,
                    **held.get(c.variant, {}),
                },
            )
            _log(
                verbose, f"{c.variant}: agreement {c.agreement:.3f}, {c.ms_per_token:.3f} ms/token"
            )
    return dataclasses.replace(config, variants={**config.variants, **measured})


def calibrate(
    model, checkpoint_dir: Path, data: TrainingData | None, variants: list[str], verbose: bool
) -> tuple[Hessians, str | None]:
    """GPTQ's input Hessians and their description, when a variant wants them and the
    checkpoint's training data is at hand; else (None, None): scales fitted per block."""
    if not any(VARIANT_SPECS[v].gptq for v in variants):
        return None, None
    found = calibration_batches(model, checkpoint_dir, data, CALIBRATION_EXAMPLES)
    if found is None:
        _log(verbose, "int4: no bundled training data for GPTQ: scales fitted to each block")
        return None, None
    t = time.perf_counter()
    batches, what = found
    hessians = layer_hessians(model, batches)
    _log(verbose, f"int4: {what} ({time.perf_counter() - t:.1f} s)")
    return hessians, what


def export_package(
    checkpoint_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    variants: tuple[str, ...] | list[str] | str = ("fp32",),
    force: bool = False,
    verbose: bool = True,
) -> Path:
    """Export a checkpoint to a model package in `out_dir`; returns its path.

    variants: names of export.recipes.VARIANT_SPECS ("fp32" is always written).
    """
    import torch

    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    variants = ["fp32", *[v for v in check_variants(variants) if v != "fp32"]]
    check_target(checkpoint_dir, out_dir, force)
    model, ckpt_config = load_checkpoint(checkpoint_dir)
    data = TrainingData.of_checkpoint(ckpt_config)
    cfg = model.cfg

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out_dir)
    tmp = make_temporary(out_dir)
    try:
        t0 = time.perf_counter()
        shutil.copyfile(checkpoint_dir / TOKENIZER, tmp / TOKENIZER_FILE)
        tokenizers = [TOKENIZER_FILE]
        if (checkpoint_dir / SOURCE_TOKENIZER).is_file():  # sources with their own (Marian)
            shutil.copyfile(checkpoint_dir / SOURCE_TOKENIZER, tmp / SOURCE_TOKENIZER_FILE)
            tokenizers.append(SOURCE_TOKENIZER_FILE)
        entries: dict[str, VariantEntry] = {}
        hessians, calibration = calibrate(model, checkpoint_dir, data, variants, verbose)
        with torch.no_grad():
            for variant in variants:
                t = time.perf_counter()
                spec = variant_spec(variant, cfg.family, calibration)
                graphs, _ = build_graphs(model, spec, hessians)
                files = write_graphs(tmp, variant, {name: g.proto() for name, g in graphs.items()})
                weights = files.pop("weights")
                entries[variant] = VariantEntry(files, weights, spec.io_dtype, spec.description)
                size = sum((tmp / f).stat().st_size for f in [*files.values(), weights]) / 1e6
                _log(verbose, f"{variant}: {size:.1f} MB, {time.perf_counter() - t:.1f} s")
        golden = golden_record(model)
        (tmp / GOLDEN_FILE).write_text(json.dumps(golden.to_json()))
        listed = [*tokenizers, GOLDEN_FILE, GENERATION_CONFIG_FILE]
        if cfg.family == "decoder-only":
            listed.append(GENAI_CONFIG_FILE)
        for entry in entries.values():
            listed += [*entry.files.values(), entry.weights]
        config = PackageConfig(
            family=cfg.family,
            model=cfg,
            special_tokens=SpecialTokens(
                cfg.pad_id, cfg.bos_id, cfg.eos_id, unk_id(tmp / TOKENIZER_FILE)
            ),
            graphs=io_names(cfg.family, cfg.n_decoder_layers),
            variants=entries,
            files={},
            task=ckpt_config.get("task", {}),  # e.g. {"kind": "translation", "src_lang": "en"}
            opset=OPSET,
        )
        write_run_configs(tmp, checkpoint_dir, config)
        config = dataclasses.replace(config, files={name: sha256(tmp / name) for name in listed})
        (tmp / CONFIG_FILE).write_text(json.dumps(config.to_json(), indent=2))
        config = measure_variants(tmp, config, data, verbose)
        (tmp / CONFIG_FILE).write_text(json.dumps(config.to_json(), indent=2))
        (tmp / PID_FILE).unlink()
        check_target(checkpoint_dir, out_dir, force)  # again: OUT_DIR may have changed meanwhile
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _log(verbose, f"wrote {out_dir} in {time.perf_counter() - t0:.1f} s")
    return out_dir
