"""`export --format ort`: a finished package's ONNX graphs -> onnxruntime's ORT format.

    package (onnx)                              package (ort)
    encoder.onnx ──┐                            encoder.ort   weights inside
    decoder.onnx ──┴─ weights.data     ──►      decoder.ort   weights inside
    decoder.int4.onnx ── weights.int4.data      decoder.int4.ort ...
                                                required_operators.config

Each graph is optimised as the runtime would (SkipLayerNormalization fusion off: the unfused
residual + LayerNormalization is faster on CPU) at the *extended* level, which holds no
CPU-specific layout, and saved as ORT; config.json then lists the .ort files and no weights
file. ORT graphs cannot share a weights file, so tensors that an ONNX package stores once
(an encoder-decoder's embedding table) are stored in each graph that reads them: the export
log and `edgeformer info` show the sizes. required_operators.config lists the operators of
every variant, for onnxruntime's reduced build (`--include_ops_by_config`).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import onnxruntime as ort

from ..core.files import sha256
from ..core.format import CONFIG_FILE, GENAI_CONFIG_FILE, ORT_SUFFIX, REQUIRED_OPERATORS_FILE
from ..core.schema import PackageConfig
from ..runtime.session import CPU, session_options


def ort_name(onnx_file: str) -> str:
    """decoder.int4.onnx -> decoder.int4.ort"""
    return onnx_file.removesuffix(".onnx") + ORT_SUFFIX


def save_as_ort(graph: Path, target: Path) -> None:
    """One ONNX graph (with its external weights) -> an ORT-format file holding them."""
    so = session_options(threads=1, spinning=False)  # the runtime's settings, fusions included
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.add_session_config_entry("session.save_model_format", "ORT")
    so.optimized_model_filepath = str(target)
    ort.InferenceSession(str(graph), so, providers=[CPU])


def write_required_operators(folder: Path, graphs: list[str]) -> None:
    """required_operators.config for onnxruntime's reduced build, naming the graphs by file
    name (onnxruntime's tool writes the paths it was given)."""
    import logging

    from onnxruntime.tools.ort_format_model import create_config_from_models

    target = folder / REQUIRED_OPERATORS_FILE
    logger = logging.getLogger("ort_format_model.utils")
    level = logger.level
    logger.setLevel(logging.WARNING)  # its INFO line names the unfinished folder
    try:
        create_config_from_models([folder / f for f in graphs], target, False)
    finally:
        logger.setLevel(level)
    prefix = f"# - {folder}/"
    lines = [line.replace(prefix, "# - ") for line in target.read_text().splitlines()]
    target.write_text("\n".join(lines) + "\n")


def to_ort_format(folder: Path, config: PackageConfig, verbose: bool = True) -> PackageConfig:
    """Rewrite the package in `folder` (export's unfinished folder; `config` its config.json)
    with ORT-format graphs; returns the new config, also written to config.json."""
    before = {
        f: (folder / f).stat().st_size for e in config.variants.values() for f in e.file_names
    }
    variants = {}
    for name, entry in config.variants.items():
        files = {graph: ort_name(file) for graph, file in entry.files.items()}
        for graph, file in entry.files.items():
            save_as_ort(folder / file, folder / files[graph])
        variants[name] = dataclasses.replace(entry, files=files, weights=None)
        if verbose:
            size = sum((folder / f).stat().st_size for f in files.values())
            was = sum(before[f] for f in entry.file_names)
            print(f"{name}: ORT format {size / 1e6:.2f} MB (ONNX {was / 1e6:.2f} MB)",
                  file=sys.stderr, flush=True)  # fmt: skip
    graphs = sorted(f for entry in variants.values() for f in entry.files.values())
    write_required_operators(folder, graphs)
    dropped = [*before, GENAI_CONFIG_FILE]  # genai runs .onnx graphs only
    for name in dropped:
        (folder / name).unlink(missing_ok=True)
    files = {k: v for k, v in config.files.items() if k not in dropped}
    files |= {f: sha256(folder / f) for f in [*graphs, REQUIRED_OPERATORS_FILE]}
    config = dataclasses.replace(config, variants=variants, files=files)
    (folder / CONFIG_FILE).write_text(json.dumps(config.to_json(), indent=2))
    return config
