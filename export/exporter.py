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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.data import TrainingData
from ..core.files import atomic_folder, sha256
from ..core.format import (
    ATTENTION_HEAD_SIZE_KEY,
    CONFIG_FILE,
    GENAI_CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    GOLDEN_FILE,
    PACKAGE_FORMAT,
    SOURCE_TOKENIZER_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    WEB_VARIANTS,
    attention_head_size,
    graph_metadata,
    io_names,
)
from ..core.generation_config import default_generation_config, generation_settings
from ..core.schema import PackageConfig, SpecialTokens, VariantEntry
from ..models.checkpoint import (
    GENERATION_CONFIG,
    SOURCE_TOKENIZER,
    TOKENIZER,
    TOKENIZER_CONFIG,
    load_checkpoint,
)
from ..models.gguf.reader import is_gguf_file
from ..models.hf.encoders import is_encoder_folder
from ..runtime.tokenizer import genai_tokenizer_problem, make_probe
from .builder import OPSET, build_graphs
from .encoder import check_variants as encoder_variants
from .encoder import write_encoder_package
from .gptq import CALIBRATION_EXAMPLES, Hessians, layer_hessians
from .ort_format import to_ort_format
from .quality import calibration_batches, calibration_text, text_calibration_batches
from .recipes import VARIANT_SPECS, variant_spec
from .settings import ExportSettings
from .source import checkpoint_folder
from .verify import check_parity, golden_record
from .writer import (
    byte_level_char_tokenizer,
    genai_config,
    write_accuracy_variant,
    write_graphs,
)


def _log(verbose: bool, msg: str) -> None:
    if verbose:
        print(msg, file=sys.stderr, flush=True)


def check_variants(variants: str | list[str] | tuple[str, ...]) -> list[str]:
    """Validate variant names (a list, or a comma-separated string) -> list without repeats,
    each web variant's base (the variant whose weights it reads) before it."""
    if isinstance(variants, str):
        variants = [v.strip() for v in variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANT_SPECS]
    if bad:
        raise ValueError(f"unknown quantization {bad}; valid: {', '.join(VARIANT_SPECS)}")
    out: list[str] = []
    for v in variants:  # a web variant reads its base's weights: the base is written first
        base = VARIANT_SPECS[v].weights_of
        out += [base, v] if base else [v]
    return list(dict.fromkeys(out))


def unk_id(tokenizer_json: Path) -> int | None:
    """The tokenizer's unknown-token id (None when its model has no unk token)."""
    from tokenizers import Tokenizer

    model = json.loads(tokenizer_json.read_text()).get("model", {})
    if isinstance(model.get("unk_id"), int):  # Unigram
        return model["unk_id"]
    token = model.get("unk_token")
    return None if token is None else Tokenizer.from_file(str(tokenizer_json)).token_to_id(token)


def not_a_package(path: Path) -> str | None:
    """Why --force must not replace the folder `path` (None: it is a package, every file of it
    listed by its config.json, so replacing it loses nothing of the user's)."""
    if path.is_symlink() or not path.is_dir():
        return "it is not a folder"
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return f"it has no readable {CONFIG_FILE}"
    files = config.get("files") if isinstance(config, dict) else None
    if config.get("format") != PACKAGE_FORMAT or not isinstance(files, dict):
        return f"its {CONFIG_FILE} is not an edgeformer package's"
    for entry in sorted(path.iterdir()):
        if entry.name != CONFIG_FILE and (entry.name not in files or not entry.is_file()):
            return f"{entry.name} is not one of the package's files"
    return None


def check_target(checkpoint_dir: Path, out_dir: Path, force: bool) -> None:
    """Refuse an OUT_DIR that export must not replace: existing without force, not a package
    (or holding anything its config.json does not list), or the checkpoint itself (or a folder
    that holds it)."""
    src, dst = checkpoint_dir.resolve(), out_dir.resolve()
    if dst == src or dst in src.parents:
        raise ValueError(f"{out_dir} is or contains the checkpoint being exported; choose another")
    if not out_dir.exists() and not out_dir.is_symlink():
        return
    if not force:
        raise FileExistsError(f"{out_dir} already exists (use force=True / --force to replace it)")
    why = not_a_package(out_dir)
    if why is not None:
        raise FileExistsError(
            f"{out_dir} exists and --force replaces only an edgeformer package, whole: {why}; "
            "remove it yourself or choose another folder"
        )


def write_tokenizer_config(folder: Path, checkpoint_dir: Path, cfg) -> None:
    """tokenizer_config.json: the checkpoint's own (a converted model's chat template and
    special-token strings; the template must compile: checked now, not at a user's first chat),
    or the special tokens of the model's tokenizer, which is what onnxruntime-genai's and
    transformers' tokenizers need beside tokenizer.json."""
    from tokenizers import Tokenizer

    from ..runtime.chat import ChatTemplateError, chat_template_of

    own = checkpoint_dir / TOKENIZER_CONFIG
    if own.is_file():
        try:
            data = json.loads(own.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            chat_template_of(data)
        except (ValueError, ChatTemplateError) as e:
            raise ValueError(f"{own}: {e}") from None
        shutil.copyfile(own, folder / TOKENIZER_CONFIG_FILE)
        return
    tok = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    ids = {"bos_token": cfg.bos_id, "eos_token": cfg.eos_id, "pad_token": cfg.pad_id,
           "unk_token": unk_id(folder / TOKENIZER_FILE)}  # fmt: skip
    data = {
        k: tok.id_to_token(i)
        for k, i in ids.items()
        if i is not None and tok.id_to_token(i) is not None
    }
    data |= {"clean_up_tokenization_spaces": False, "tokenizer_class": "PreTrainedTokenizerFast"}
    (folder / TOKENIZER_CONFIG_FILE).write_text(json.dumps(data, indent=2, ensure_ascii=False))


def write_run_configs(folder: Path, checkpoint_dir: Path, config: PackageConfig) -> None:
    """generation_config.json (the checkpoint's own, e.g. a converted Hugging Face model's, or
    greedy defaults) and, for an LM, genai_config.json (onnxruntime-genai runs decoder.onnx)."""
    own = checkpoint_dir / GENERATION_CONFIG
    if own.is_file():
        # the runtime's reading of it must work: checked now, not at a user's first load
        settings = json.loads(own.read_text())
        generation_settings(settings, config, str(own))
        shutil.copyfile(own, folder / GENERATION_CONFIG_FILE)
    else:
        settings = default_generation_config(config)
        (folder / GENERATION_CONFIG_FILE).write_text(json.dumps(settings, indent=2))
    if config.family == "decoder-only":
        eos = settings.get("eos_token_id")
        end_ids = eos if isinstance(eos, list) and eos else [config.special_tokens.eos_id]
        text = json.dumps(genai_config(config, end_ids=end_ids), indent=2)
        (folder / GENAI_CONFIG_FILE).write_text(text)


def measure_variants(
    folder: Path, config: PackageConfig, data: TrainingData | None, verbose: bool
) -> PackageConfig:
    """Each variant's agreement with PyTorch's golden run and its ms/token on this machine
    (runtime.verify), and its held-out BLEU / perplexity when the checkpoint's training data is
    bundled (export.quality), recorded in the config: what variant="auto" chooses from."""
    from ..runtime.verify import verify
    from .quality import held_out_quality

    # web variants: fp32 compute is 15-40x slower on the CPU provider (design notes); their
    # held-out quality is their base's within a rounding, the golden run shows how close
    held = held_out_quality(folder, data, [v for v in config.variants if v not in WEB_VARIANTS],
                            verbose)  # fmt: skip
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
                verbose,
                f"{c.variant}: agreement {c.agreement:.3f}, max |logit diff| {c.max_diff:.2e} "
                f"(golden.json: PyTorch's greedy run, its top-16 logits), {c.ms_per_token:.3f} "
                "ms/token: what edgeformer info shows",
            )
    return dataclasses.replace(config, variants={**config.variants, **measured})


def native_rows(checkpoint_dir: Path):
    """The GGUF file's rows for the `gguf` variant (export/gguf_blocks.py); an error when the
    checkpoint was not converted from a GGUF file."""
    from .gguf_blocks import NativeRows

    found = NativeRows.of_checkpoint(checkpoint_dir)
    if found is None:
        raise ValueError(
            "the gguf variant keeps a GGUF file's own blocks: export a .gguf file, or a "
            "checkpoint made by `edgeformer convert gguf`"
        )
    return found


def kept_text(kept: dict[str, dict], bits: int = 8) -> str:
    """What the gguf variant kept of each type, per graph weight (a packed Q/K/V is one):
    "Q4_1: 120 weights (max |error| 3.6e-02), Q8_0: 1 weight (exact), F16: 3 weights
    (re-quantized at 8 bits, max |error| 2.1e-03)"."""
    parts = []
    for what, r in sorted(kept.items(), key=lambda kv: -kv[1]["tensors"]):
        n = f"{r['tensors']} weight{'s' if r['tensors'] != 1 else ''}"
        err = "exact" if r["max_error"] == 0 else f"max |error| {r['max_error']:.1e}"
        if r.get("kept", True):
            parts.append(f"{what}: {n} ({err})")
        else:
            parts.append(f"{what}: {n} (re-quantized at {bits} bits, {err})")
    return ", ".join(parts)


def calibrate(
    model,
    checkpoint_dir: Path,
    data: TrainingData | None,
    variants: list[str],
    verbose: bool,
    text: tuple[str, str] | None = None,
) -> tuple[Hessians, str | None]:
    """GPTQ's input Hessians and their description, when a variant wants them and there is a
    calibration text (`text`: (text, what), a decoder-only model) or the checkpoint's training
    data is at hand; else (None, None): scales fitted per block."""
    if not any(VARIANT_SPECS[v].gptq for v in variants):
        return None, None
    if text is not None:
        found = text_calibration_batches(model, checkpoint_dir / TOKENIZER, *text)
    else:
        found = calibration_batches(model, checkpoint_dir, data, CALIBRATION_EXAMPLES)
    if found is None:
        _log(verbose, "int4: no bundled training data for GPTQ (--calibrate TEXT gives one): "
             "scales fitted to each block")  # fmt: skip
        return None, None
    t = time.perf_counter()
    batches, what = found
    hessians = layer_hessians(model, batches)
    _log(verbose, f"int4: {what} ({time.perf_counter() - t:.1f} s)")
    return hessians, what


def write_package(
    tmp: Path,
    model,
    ckpt_config: dict,
    checkpoint_dir: Path,
    variants: list[str],
    settings: ExportSettings,
    calibration: tuple[str, str] | None = None,
) -> None:
    """Every file of the package into the empty folder `tmp`: tokenizers, each variant's graphs
    and weights (as ORT-format graphs with settings.graph_format "ort"), golden.json, the run
    configs, config.json with checksums and measurements. variants: the checked names, in
    writing order; calibration: GPTQ's (text, what it is)."""
    verbose = settings.verbose
    import torch
    from tokenizers import Tokenizer

    data = TrainingData.of_checkpoint(ckpt_config)
    cfg = model.cfg
    shutil.copyfile(checkpoint_dir / TOKENIZER, tmp / TOKENIZER_FILE)
    tokenizers = [TOKENIZER_FILE]
    if (checkpoint_dir / SOURCE_TOKENIZER).is_file():  # sources with their own (Marian)
        shutil.copyfile(checkpoint_dir / SOURCE_TOKENIZER, tmp / SOURCE_TOKENIZER_FILE)
        tokenizers.append(SOURCE_TOKENIZER_FILE)
    if cfg.family == "decoder-only":
        if byte_level_char_tokenizer(tmp / TOKENIZER_FILE):  # onnxruntime-genai reads it so
            _log(verbose, "tokenizer: characters written in byte-level form (the same ids)")
        write_tokenizer_config(tmp, checkpoint_dir, cfg)
        problem = genai_tokenizer_problem(tmp / TOKENIZER_FILE)
        if problem is not None:
            _log(verbose, f"note: {problem}")
    entries: dict[str, VariantEntry] = {}
    hessians, how = calibrate(model, checkpoint_dir, data, variants, verbose, calibration)
    native = native_rows(checkpoint_dir) if "gguf" in variants else None
    # the sizes load checks config.json against, and the head size the graphs' attention and
    # K/V tensors have (the model's, zero-padded where GroupQueryAttention needs it)
    head_size = attention_head_size(cfg.head_dim)
    metadata = {**graph_metadata(cfg), ATTENTION_HEAD_SIZE_KEY: str(head_size)}
    if head_size != cfg.head_dim:
        _log(verbose, f"attention heads of {cfg.head_dim} dims run zero-padded to {head_size} "
             "(onnxruntime's GroupQueryAttention takes multiples of 8; exact)")  # fmt: skip
    with torch.no_grad():
        for variant in variants:
            t = time.perf_counter()
            spec = variant_spec(variant, cfg.family, how, bool(ckpt_config.get("source")))
            if spec.weights_of is not None:  # the base's graphs, other attributes
                base = entries[spec.weights_of]
                files = write_accuracy_variant(tmp, base.files, variant, spec.accuracy_level)
                description = (
                    f"{base.description.replace('int8 compute', 'fp32 compute')}: "
                    f"{spec.weights_of}'s graphs and {base.weights} with accuracy_level "
                    f"{spec.accuracy_level}, as onnxruntime-web's wasm computes (slow on the "
                    "CPU provider)"
                )
                entries[variant] = VariantEntry(files, base.weights, spec.io_dtype, description)
                _log(verbose, f"{variant}: {spec.weights_of}'s graphs, accuracy_level "
                     f"{spec.accuracy_level}")  # fmt: skip
                continue
            graphs, _, kept = build_graphs(model, spec, hessians, native)
            protos = {name: g.proto() for name, g in graphs.items()}
            files = write_graphs(tmp, variant, protos, metadata)
            weights = files.pop("weights")
            description = spec.description
            if kept:
                said = kept_text(kept, spec.bits or 8)
                description += f"; kept from {ckpt_config['source']['file']}: {said}"
                _log(verbose, f"{variant}: {said}")
            entries[variant] = VariantEntry(files, weights, spec.io_dtype, description)
            size = sum((tmp / f).stat().st_size for f in [*files.values(), weights]) / 1e6
            _log(verbose, f"{variant}: {size:.1f} MB, {time.perf_counter() - t:.1f} s")
    probes = [make_probe(Tokenizer.from_file(str(tmp / name)), name) for name in tokenizers]
    golden = dataclasses.replace(golden_record(model), probes=probes)
    (tmp / GOLDEN_FILE).write_text(json.dumps(golden.to_json()))
    listed = [*tokenizers, GOLDEN_FILE, GENERATION_CONFIG_FILE]
    if cfg.family == "decoder-only":
        listed += [GENAI_CONFIG_FILE, TOKENIZER_CONFIG_FILE]
    for entry in entries.values():
        listed += entry.file_names
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
        source=ckpt_config.get("source", {}),  # a converted model's format and architecture
    )
    write_run_configs(tmp, checkpoint_dir, config)
    config = dataclasses.replace(config, files={name: sha256(tmp / name) for name in listed})
    (tmp / CONFIG_FILE).write_text(json.dumps(config.to_json(), indent=2))
    if settings.graph_format == "ort":
        config = to_ort_format(tmp, config, verbose)
    config = measure_variants(tmp, config, data, verbose)
    (tmp / CONFIG_FILE).write_text(json.dumps(config.to_json(), indent=2))


def export_package(
    checkpoint_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    settings: ExportSettings | None = None,
    *,
    check: Callable[[Path], None] | None = None,
    **changes: Any,
) -> Path:
    """Export a checkpoint to a model package in `out_dir`; returns its path.

    checkpoint_dir: a checkpoint folder, a training run folder (its best/ or averaged/, the
    lower final val loss: export.source) or a Hugging Face model folder (converted into a
    temporary checkpoint first). settings: what to write and how (export.settings.ExportSettings;
    `changes` are its fields by name, e.g. variants="int8,int4", force=True). Every variant is
    checked against PyTorch before the package takes `out_dir`'s place (export.verify.
    check_parity): fp32 beyond FP32_PARITY is a ParityError and nothing is written. check: a
    further check of the finished package, run after that one; an error there leaves nothing
    behind too. The package appears whole or not at all (core.files.atomic_folder).
    """
    if settings is not None and not isinstance(settings, ExportSettings):
        raise TypeError(f"export_package's third argument is an ExportSettings, not "
                        f"{type(settings).__name__} {settings!r}: name the variants "
                        "(variants=\"int8,int4\")")  # fmt: skip
    s = dataclasses.replace(settings or ExportSettings(), **changes)
    source, out_dir = Path(checkpoint_dir), Path(out_dir)
    if is_encoder_folder(source):  # BERT & co: a sentence-embedding package (export/encoder.py)
        if s.graph_format != "onnx" or s.calibrate_on is not None or check is not None:
            raise ValueError("an encoder (sentence-embedding) package is exported as ONNX graphs, "
                             "without --format ort or --calibrate")  # fmt: skip
        return export_encoder(source, out_dir, s.variants, s.force, s.verbose)
    variants = ["fp32", *[v for v in check_variants(s.variants) if v != "fp32"]]
    if is_gguf_file(source) and "gguf" not in variants:  # the file's own blocks, kept
        variants.append("gguf")
    calibration = None
    if s.calibrate_on is not None:
        if not any(VARIANT_SPECS[v].gptq for v in variants):
            raise ValueError("a calibration text is for GPTQ in the int4 variant: add int4 to "
                             "the variants (--quantize int4)")  # fmt: skip
        calibration = calibration_text(s.calibrate_on)
    check_target(source, out_dir, s.force)  # before a Hugging Face folder's conversion
    with checkpoint_folder(source, s.verbose) as checkpoint_dir:
        check_target(checkpoint_dir, out_dir, s.force)
        model, ckpt_config = load_checkpoint(checkpoint_dir)
        t0 = time.perf_counter()
        with atomic_folder(out_dir) as tmp:
            write_package(tmp, model, ckpt_config, checkpoint_dir, variants, s, calibration)
            if s.verify:
                check_parity(tmp, checkpoint_dir, variants, s.verbose)
            if check is not None:
                check(tmp)
            check_target(checkpoint_dir, out_dir, s.force)  # again: OUT_DIR may have changed
    _log(s.verbose, f"wrote {out_dir} in {time.perf_counter() - t0:.1f} s")
    return out_dir


def export_encoder(
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    variants: tuple[str, ...] | list[str] | str = ("fp32",),
    force: bool = False,
    verbose: bool = True,
) -> Path:
    """An encoder-only Hugging Face folder (BERT, DistilBERT, RoBERTa, XLM-R; sentence-
    transformers' layout) -> an encoder package in `out_dir` (export/encoder.py), whole or not
    at all; export_package sends such a folder here."""
    source, out_dir = Path(source), Path(out_dir)
    chosen = encoder_variants(variants)
    check_target(source, out_dir, force)
    t0 = time.perf_counter()
    with atomic_folder(out_dir) as tmp:
        write_encoder_package(source, tmp, chosen, verbose)
        check_target(source, out_dir, force)  # again: OUT_DIR may have changed
    _log(verbose, f"wrote {out_dir} in {time.perf_counter() - t0:.1f} s")
    return out_dir
