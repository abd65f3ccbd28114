"""`edgeformer export CHECKPOINT OUT_DIR [--quantize int8,int4] [--force]`."""

from __future__ import annotations

import argparse
import sys

from ..runtime.package import VARIANTS


def add_arguments(parser: argparse.ArgumentParser, command: str = "export") -> None:
    parser.add_argument("checkpoint", help="checkpoint folder (written by `edgeformer train`)")
    parser.add_argument("out_dir", help="model package folder to create")
    parser.add_argument(
        "--quantize",
        default="",
        metavar="LIST",
        help=f"extra variants, comma-separated: {','.join(v for v in VARIANTS if v != 'fp32')}",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing OUT_DIR")
    parser.add_argument(
        "--no-verify", action="store_true", help="skip the PyTorch vs onnxruntime parity check"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    from .exporter import check_variants, export_package

    variants = ["fp32", *check_variants(args.quantize)]
    path = export_package(
        args.checkpoint,
        args.out_dir,
        variants=variants,
        force=args.force,
        verbose=not args.quiet,
    )
    if not args.no_verify:
        from .verify import verify_package

        for variant in variants:
            d = verify_package(path, args.checkpoint, variant)
            ok = d <= 1e-4 or variant != "fp32"
            if not args.quiet or not ok:
                print(f"verify {variant}: max |logit diff| vs PyTorch {d:.2e}", file=sys.stderr)
            if not ok:
                print(
                    f"edgeformer export: fp32 parity check failed ({d:.2e} > 1e-4)", file=sys.stderr
                )
                return 1
    print(path)
    return 0
