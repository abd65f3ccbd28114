"""`python -m edgeformer.train.average RUN --epochs 21-30 --out CKPT`: the element-wise mean of a
training run's saved epoch weights (RUN/epochs/epoch_NNN.safetensors) as a checkpoint, as
training makes RUN/averaged/ (train.state.average_weights), for any range of the epochs that
are still saved (a run keeps its last --average-last). The model, its config and tokenizer are
RUN/last's; the checkpoint's config.json records how many epochs it averages."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edgeformer.models.checkpoint import (
    SOURCE_TOKENIZER,
    TOKENIZER,
    load_checkpoint,
    save_checkpoint,
)

from .state import average_weights


def epoch_files(run: Path, first: int, last: int) -> list[Path]:
    """RUN/epochs/epoch_NNN.safetensors for first..last; a missing one is an error naming it."""
    if not 1 <= first <= last:
        raise ValueError(f"--epochs {first}-{last}: give FIRST-LAST with 1 <= FIRST <= LAST")
    paths = [run / "epochs" / f"epoch_{n:03d}.safetensors" for n in range(first, last + 1)]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{run / 'epochs'} has no {missing[0]} (a run keeps its last --average-last epochs)"
        )
    return paths


def average_run(run: Path, first: int, last: int, out: Path) -> Path:
    """The mean of epochs first..last of `run`, saved as a checkpoint in `out`."""
    paths = epoch_files(run, first, last)
    model, config = load_checkpoint(run / "last")
    average_weights(paths, model)
    meta = {k: v for k, v in config.items() if k not in ("format", "model")}
    meta["averaged"] = len(paths)
    source = run / "last" / SOURCE_TOKENIZER
    return save_checkpoint(
        out,
        model,
        run / "last" / TOKENIZER,
        meta,
        source_tokenizer_json=source if source.is_file() else None,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m edgeformer.train.average", description=__doc__)
    parser.add_argument("run", type=Path, help="a training run's folder (OUT of edgeformer train)")
    parser.add_argument(
        "--epochs",
        required=True,
        metavar="FIRST-LAST",
        help="the saved epochs to average, e.g. 21-30 (LM: evaluations)",
    )
    parser.add_argument("--out", required=True, type=Path, help="the checkpoint folder to write")
    args = parser.parse_args(argv)
    try:
        first, _, last = args.epochs.partition("-")
        path = average_run(args.run, int(first), int(last or first), args.out)
    except (ValueError, FileNotFoundError) as e:
        print(f"edgeformer.train.average: error: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
