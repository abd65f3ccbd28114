"""`edgeformer train`: train from a preset (any TrainConfig field can be overridden by a flag),
list the presets, or evaluate a checkpoint."""

from __future__ import annotations

import argparse
import json

from edgeformer.core.config import ModelConfig
from edgeformer.core.data import SPLITS
from edgeformer.core.flags import add_flags, given

from .config import DERIVED, PRESETS, STUDENTS, TrainConfig, preset


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    parser.add_argument(
        "--preset", choices=list(PRESETS), metavar="NAME",
        help=f"one of {', '.join(PRESETS)} (default: tiny, or with --resume the resumed run's "
        "config)",
    )  # fmt: skip
    parser.add_argument(
        "--list-presets", action="store_true", help="list the presets and exit (default: train)"
    )
    parser.add_argument(
        "--evaluate",
        metavar="CKPT",
        help="evaluate a checkpoint on --split with --beam and exit (default: train)",
    )
    parser.add_argument(
        "--split", default="test_2016_flickr", choices=SPLITS,
        help="--evaluate: the Multi30k split (default: test_2016_flickr)",
    )  # fmt: skip
    parser.add_argument(
        "--beam", dest="beams", default="1,5", metavar="N[,N...]",
        help="--evaluate: beam sizes, comma-separated (default: 1,5)",
    )  # fmt: skip
    # the spelling before 2026-11-29 (translate's is --beam): still accepted, not shown
    parser.add_argument("--beams", dest="beams", help=argparse.SUPPRESS)
    parser.add_argument(
        "--force", action="store_true",
        help="replace the training run in --out: the new run trains beside it and takes its "
        "place once its first checkpoint is saved (default: refuse a --out that is not empty)",
    )  # fmt: skip
    run = parser.add_argument_group(
        "the run (TrainConfig; default: the preset's value, `--list-presets` shows them)"
    )
    add_flags(run, TrainConfig, skip=("model",), default="the preset's")
    model = parser.add_argument_group(
        "the model (ModelConfig; default: the preset's value; family and special ids follow "
        "the task and the tokenizer)"
    )
    add_flags(model, ModelConfig, skip=DERIVED, default="the preset's")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The preset (or, resuming without --preset, the run's saved config) + the flags given."""
    overrides = given(args, TrainConfig) | given(args, ModelConfig)
    overrides = {k: v for k, v in overrides.items() if k != "model" and k not in DERIVED}
    if args.resume and args.preset is None:
        from edgeformer.models.checkpoint import read_config

        saved = read_config(args.resume).get("train")
        if saved is None:
            raise ValueError(f"{args.resume} has no training config to resume; give --preset")
        return TrainConfig.from_dict(saved | overrides)
    if args.preset in STUDENTS and overrides.get("teacher") is None:
        raise ValueError(
            f"--preset {args.preset} distils a teacher: give --teacher with its checkpoint "
            "folder (e.g. runs/m30k-long/averaged; a translation package only with "
            "--no-init-from-teacher --word-kd 0)"
        )
    return preset(args.preset or "tiny", **overrides)  # train() checks the teacher first


def list_presets() -> str:
    lines = []
    for name, t in PRESETS.items():
        c = t.model
        if t.task == "lm":
            what = (
                f"lm, {t.tokenizer}, {c.n_decoder_layers} layers x {c.d_model}, "
                f"block {t.block_size}, {t.max_iters} iters"
            )
        elif t.init_from_teacher:  # width and vocabulary are the teacher's
            what = (
                f"translation {t.direction}, the teacher cut to {c.n_encoder_layers}+"
                f"{c.n_decoder_layers} layers, {t.epochs} epochs, needs --teacher (a checkpoint)"
            )
        else:
            what = (
                f"translation {t.direction}, {c.n_encoder_layers}+{c.n_decoder_layers} layers "
                f"x {c.d_model}, vocab {c.vocab_size}, {t.epochs} epochs"
            ) + (", needs --teacher" if name in STUDENTS else "")
        lines.append(f"{name:<24} {what}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.list_presets:
        print(list_presets())
        return 0
    if args.evaluate:
        from edgeformer.models.checkpoint import read_config

        from .evaluate import evaluate_lm, evaluate_translation

        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        kind = read_config(args.evaluate).get("task", {}).get("kind")
        device = args.device or "cpu"
        if kind == "lm":
            result = evaluate_lm(args.evaluate, data_dir=args.data_dir, device=device)
        else:
            beams = tuple(int(b) for b in args.beams.split(","))
            result = evaluate_translation(
                args.evaluate,
                args.split,
                beams,
                data_dir=args.data_dir,
                device=device,
                max_sentences=args.max_sentences,
            )
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    from .trainer import train

    train(config_from_args(args), force=args.force)
    return 0
