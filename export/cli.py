"""`edgeformer export CHECKPOINT OUT_DIR [--quantize int8,int4] [--force]`: the flags of
export_package (export/exporter.py), which does the whole job.

CHECKPOINT may also be a training run folder (OUT of `edgeformer train`: best/, averaged/,
log.jsonl): the checkpoint with the lower validation loss in the run's final record is exported;
or a Hugging Face model folder (see `edgeformer convert`): it is converted into a temporary
checkpoint first, which the parity check then compares against (export/source.py).
"""

from __future__ import annotations

import argparse
import sys

from ..core.format import GRAPH_FORMATS, VARIANTS
from .settings import ExportSettings
from .source import final_val_losses, pick_checkpoint
from .verify import FP32_PARITY, ParityError

# torch-free at import (`edgeformer export --help` without the train extra); the names export
# used to define here stay importable from it
__all__ = ["FP32_PARITY", "ParityError", "add_arguments", "final_val_losses", "pick_checkpoint",
           "run"]  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser, command: str = "export") -> None:
    parser.add_argument(
        "checkpoint",
        help="checkpoint folder, a training run folder (its best/ or averaged/, lower val loss), "
        "a Hugging Face model folder or a GGUF file (edgeformer convert; a GGUF file's package "
        "gets the gguf variant: its own blocks)",
    )
    parser.add_argument("out_dir", help="model package folder to create")
    parser.add_argument(
        "--quantize",
        default="",
        metavar="LIST",
        help="quantized variants to write beside fp32, comma-separated: "
        f"{','.join(v for v in VARIANTS if v != 'fp32')} (default: none)",
    )
    parser.add_argument(
        "--format",
        choices=GRAPH_FORMATS,
        default="onnx",
        help="graph file format: onnx (graphs share one weights file per variant), or ort: "
        "onnxruntime's ORT format for mobile and reduced builds (each graph holds its weights; "
        "writes required_operators.config) (default: onnx)",
    )
    parser.add_argument(
        "--calibrate",
        default=None,
        metavar="TEXT",
        help="GPTQ for int4 of a decoder-only model on this text: shakespeare or multi30k (their "
        "training splits, bundled) or a UTF-8 text file (default: the model's bundled training "
        "data when it has some; a converted model: none, scales fitted to each block)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace an existing OUT_DIR package (default: refuse)"
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the parity check against PyTorch (default: run it)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress lines (default: progress on stderr)"
    )


def settings_of(args: argparse.Namespace) -> ExportSettings:
    """The flags as one ExportSettings (bad values are refused there, before any work)."""
    return ExportSettings(
        variants=args.quantize, graph_format=args.format, verify=not args.no_verify,
        calibrate_on=args.calibrate, force=args.force, verbose=not args.quiet,
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """The flags mapped onto export_package, which does the whole job (export.source, the
    parity check of export.verify); a failed fp32 parity check is exit status 1."""
    from .exporter import export_package

    try:
        path = export_package(args.checkpoint, args.out_dir, settings_of(args))
    except ParityError as e:
        print(f"edgeformer export: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0
