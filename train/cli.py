"""`edgeformer train`: train from a preset (any TrainConfig field can be overridden by a flag),
list the presets, or evaluate a checkpoint."""

from __future__ import annotations

import argparse
import json
import types
import typing
from dataclasses import fields

from edgeformer.core.config import ModelConfig

from .config import DERIVED, PRESETS, TrainConfig, preset

SHORT_HELP = {
    "lowercase": "BPE: lowercase all text (data, package inputs and outputs)",
    "epochs": "translation epochs",
    "max_iters": "LM training iterations",
    "batch_tokens": "padded tokens per translation batch",
    "lr": "peak learning rate",
    "device": "cpu | cuda",
    "resume": "checkpoint folder to resume from (e.g. OUT/last)",
    "out": "output folder",
    "data_dir": "folder with multi30k/ and tinyshakespeare/ (default: the bundled data)",
    "direction": "en-de | de-en",
    "max_sentences": "use only the first N training pairs",
    "quiet": "no progress bars",
    "threads": "torch CPU threads (0: all cores)",
    "vocab_size": "BPE vocabulary size (the model gets the tokenizer's)",
    "max_len": "longest source / target (an LM uses --block-size)",
}


def flag_fields() -> list:
    """The fields that are flags: TrainConfig's (but `model`) and ModelConfig's (but DERIVED)."""
    train = [f for f in fields(TrainConfig) if f.name != "model"]
    return train + [f for f in fields(ModelConfig) if f.name not in DERIVED]


def _flag_type(f) -> type:
    hints = typing.get_type_hints(TrainConfig) | typing.get_type_hints(ModelConfig)
    t = hints[f.name]
    if isinstance(t, types.UnionType):  # X | None
        t = next(a for a in t.__args__ if a is not type(None))
    return t


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    parser.add_argument(
        "--preset",
        help=f"one of {', '.join(PRESETS)} (default: tiny, or with --resume the resumed config)",
    )
    parser.add_argument("--list-presets", action="store_true", help="list the presets and exit")
    parser.add_argument("--evaluate", metavar="CKPT", help="evaluate a checkpoint and exit")
    parser.add_argument("--split", default="test_2016_flickr", help="--evaluate: Multi30k split")
    parser.add_argument("--beams", default="1,5", help="--evaluate: beam sizes, e.g. 1,5")
    group = parser.add_argument_group(
        "TrainConfig and ModelConfig overrides (default: the preset's value)"
    )
    for f in flag_fields():
        t = _flag_type(f)
        name = "--" + f.name.replace("_", "-")
        help_text = SHORT_HELP.get(f.name, f"{f.name} ({t.__name__})")
        if t is bool:
            group.add_argument(
                name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            group.add_argument(name, type=t, default=None, help=help_text)


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The preset (or, resuming without --preset, the run's saved config) + the flags given."""
    overrides = {f.name: getattr(args, f.name) for f in flag_fields()}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if args.resume and args.preset is None:
        from edgeformer.models.checkpoint import read_config

        saved = read_config(args.resume).get("train")
        if saved is None:
            raise ValueError(f"{args.resume} has no training config to resume; give --preset")
        return TrainConfig.from_dict(saved | overrides)
    return preset(args.preset or "tiny", **overrides)


def list_presets() -> str:
    lines = []
    for name, t in PRESETS.items():
        c = t.model
        if t.task == "lm":
            what = (
                f"lm, {t.tokenizer}, {c.n_decoder_layers} layers x {c.d_model}, "
                f"block {t.block_size}, {t.max_iters} iters"
            )
        else:
            what = (
                f"translation {t.direction}, {c.n_encoder_layers}+{c.n_decoder_layers} layers "
                f"x {c.d_model}, vocab {c.vocab_size}, {t.epochs} epochs"
            )
        lines.append(f"{name:<22} {what}")
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

    train(config_from_args(args))
    return 0
