"""What export reads: a checkpoint folder as it is, a training run folder (the one of its best/
and averaged/ checkpoints with the lower validation loss), or a Hugging Face model folder
(converted into a temporary checkpoint first). export_package's first stage: load, then
build and check the package (exporter.py, verify.py), then put it in place."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("edgeformer")


def final_val_losses(log_file: Path) -> dict[str, float]:
    """{"best": loss, "averaged": loss} from the last final record of a run's log.jsonl."""
    losses: dict[str, float] = {}
    for line in log_file.read_text().splitlines():
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


@contextlib.contextmanager
def checkpoint_folder(path: str | os.PathLike, verbose: bool = False) -> Iterator[Path]:
    """The checkpoint folder to export from `path`, for the time of the `with` block: a
    Hugging Face model folder or a GGUF file is converted into a temporary checkpoint (removed
    at the end); a
    training run folder gives its better checkpoint (pick_checkpoint), which is said on the
    `edgeformer` logger (a warning, so that the command line shows it by default)."""
    from ..models.gguf import convert_gguf, is_gguf_file
    from ..models.hf import convert_hf, is_hf_model_dir

    if is_gguf_file(path):
        with tempfile.TemporaryDirectory(prefix="edgeformer-convert-") as tmp:
            yield Path(convert_gguf(path, Path(tmp) / "checkpoint", verbose=verbose))
        return
    if is_hf_model_dir(path):
        with tempfile.TemporaryDirectory(prefix="edgeformer-convert-") as tmp:
            yield Path(convert_hf(path, Path(tmp) / "checkpoint", verbose=verbose))
        return
    picked, why = pick_checkpoint(str(path))
    if why is not None:
        log.warning(why)
    yield Path(picked)
