"""`edgeformer export CHECKPOINT OUT_DIR [--quantize int8,int4] [--force]`.

CHECKPOINT may also be a training run folder (OUT of `edgeformer train`: best/, averaged/,
log.jsonl): the checkpoint with the lower validation loss in the run's final record is exported;
or a Hugging Face model folder (see `edgeformer convert`): it is converted into a temporary
checkpoint first, which the parity check then compares against.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

from ..core.format import GRAPH_FORMATS, VARIANTS


def add_arguments(parser: argparse.ArgumentParser, command: str = "export") -> None:
    parser.add_argument(
        "checkpoint",
        help="checkpoint folder, a training run folder (its best/ or averaged/, lower val loss) "
        "or a Hugging Face model folder (edgeformer convert)",
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


def final_val_losses(log: Path) -> dict[str, float]:
    """{"best": loss, "averaged": loss} from the last final record of a run's log.jsonl."""
    losses: dict[str, float] = {}
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a killed run
            continue
        if isinstance(record, dict) and isinstance(record.get("final"), dict):
            losses = {
                name: float(s["val_loss"])
                for name, s in record["final"].items()
                if isinstance(s, dict) and isinstance(s.get("val_loss"), int | float)
            }
    return {name: v for name, v in losses.items() if math.isfinite(v)}


def pick_checkpoint(path: str) -> tuple[str, str | None]:
    """(checkpoint folder, why): a checkpoint folder as it is (why None); a training run folder
    -> best/ or averaged/, whichever has the lower val loss in log.jsonl."""
    run = Path(path)
    if (run / "config.json").is_file() or not (run / "log.jsonl").is_file():
        return path, None
    names = [n for n in ("best", "averaged") if (run / n / "config.json").is_file()]
    if not names:
        raise FileNotFoundError(f"training run {run} has no best/ or averaged/ checkpoint")
    losses = {n: v for n, v in final_val_losses(run / "log.jsonl").items() if n in names}
    if not losses:
        pick = names[0]
        why = "log.jsonl has no final val losses (unfinished run?)"
    else:
        pick = min(losses, key=losses.__getitem__)  # a tie keeps best/
        why = "lower val loss: " + ", ".join(f"{n}/ {v:.4f}" for n, v in losses.items())
        if len(losses) == 1:
            why = f"the only one with a final val loss: {pick}/ {losses[pick]:.4f}"
    return str(run / pick), f"training run {run}: exporting {pick}/ ({why})"


def run(args: argparse.Namespace) -> int:
    from ..models.hf import convert_hf, is_hf_model_dir

    if not is_hf_model_dir(args.checkpoint):
        return export_and_verify(args)
    with tempfile.TemporaryDirectory(prefix="edgeformer-convert-") as tmp:
        hf = args.checkpoint
        args.checkpoint = str(convert_hf(hf, Path(tmp) / "checkpoint", verbose=not args.quiet))
        return export_and_verify(args)


class ParityError(ValueError):
    """The fp32 graphs do not reproduce PyTorch's logits."""


FP32_PARITY = 1e-4  # largest |logit difference| of the fp32 graphs against PyTorch


def export_and_verify(args: argparse.Namespace) -> int:
    """Export, then check every variant against PyTorch before the package takes OUT_DIR's
    place: a failed fp32 check leaves no package behind (exit 1)."""
    from .exporter import check_variants, export_package
    from .verify import verify_package

    variants = ["fp32", *check_variants(args.quantize)]
    args.checkpoint, why = pick_checkpoint(args.checkpoint)
    if why is not None:
        print(f"edgeformer export: {why}", file=sys.stderr)

    def parity(package: Path) -> None:
        for variant in variants:
            d = verify_package(package, args.checkpoint, variant)
            if not args.quiet:
                print(f"verify {variant}: max |logit diff| vs PyTorch {d:.2e}", file=sys.stderr)
            if variant == "fp32" and not d <= FP32_PARITY:
                raise ParityError(
                    f"fp32 parity check failed: max |logit diff| vs PyTorch {d:.2e} > "
                    f"{FP32_PARITY:g}; no package was written"
                )

    try:
        path = export_package(
            args.checkpoint, args.out_dir, variants=variants, force=args.force,
            verbose=not args.quiet, check=None if args.no_verify else parity,
            graph_format=args.format,
        )  # fmt: skip
    except ParityError as e:
        print(f"edgeformer export: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0
