"""A training run's folder (OUT) and what every loop shares (Run): the device and process
group, OUT refused unless free (check_out) or replaced safely with --force (a staging folder
that takes its place once the first checkpoint is saved), OUT/.lock, and the checkpoints the
loops save into it (last / best / epochs / averaged) and resume from."""

from __future__ import annotations

import copy
import json
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import save_model
from tqdm import tqdm

from edgeformer.core.files import recover, staging_folder, swap_in
from edgeformer.core.progress import Progress
from edgeformer.models import DecoderOnly, EncoderDecoder
from edgeformer.models.checkpoint import (
    CHECKPOINT_FORMAT,
    CONFIG,
    GENERATION_CONFIG,
    SOURCE_TOKENIZER,
    TOKENIZER,
    WEIGHTS,
    save_checkpoint,
)

from .config import TrainConfig
from .distill import (
    DISTILLED,
    TEACHER_PACKAGE,
)
from .state import STATE_JSON, STATE_TENSORS, average_weights, load_train_state, save_train_state

LOCK = ".lock"  # OUT/.lock: the PID of the training writing into OUT
CHECKPOINTS = ("best", "last", "averaged")


@dataclass
class Run:
    """What every loop shares: config, output folder, device, distributed rank, the log."""

    cfg: TrainConfig
    out: Path
    device: torch.device
    rank: int = 0
    world: int = 1
    t0: float = field(default_factory=time.time)
    history: list[dict] = field(default_factory=list)
    lock: Path | None = None  # OUT/.lock, held by rank 0
    # --force: the older run's folder that `out`, a staging folder beside it, replaces once the
    # first checkpoint is saved (take_place), and the lock rank 0 holds on it until then
    replaces: Path | None = None
    old_lock: Path | None = None
    staging: Path | None = None  # where `out` was before take_place (see current)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def current(self, path: Path) -> Path:
        """Where `path` is now: a file written into a --force run's staging folder is in OUT
        once that folder has replaced the older run (take_place)."""
        if self.staging is not None and path.is_relative_to(self.staging):
            return self.out / path.relative_to(self.staging)
        return path

    def say(self, msg: str) -> None:
        if self.main:
            tqdm.write(msg, file=sys.stdout)

    def log(self, record: dict) -> None:
        if self.main:
            with open(self.out / "log.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def progress(self, label: str, total: int, unit: str) -> Progress:
        """A bar on a terminal, a line every 30 s in a log (core.progress); nothing with
        --quiet or on the other ranks."""
        return Progress(label, total, unit, quiet=self.cfg.quiet or not self.main)

    def autocast(self):
        if self.device.type == "cuda" and self.cfg.amp:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return nullcontext()


def setup(cfg: TrainConfig, force: bool = False) -> Run:
    """Device, process group (under torchrun / WORLD_SIZE > 1), output folder (check_out; with
    --force over an older run, a staging folder beside it)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA GPU is available")
    device = torch.device(cfg.device)
    if cfg.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cfg.device == "cuda" else "gloo")
    run = Run(cfg, Path(cfg.out), device, rank, world)
    if run.main:
        replace_old = check_out(cfg, force)
        run.out.mkdir(parents=True, exist_ok=True)
        run.lock = acquire_lock(run.out)
        try:
            if replace_old:  # the older run stays as it is until take_place
                staging = staging_folder(run.out)
                run.replaces, run.old_lock, run.out = run.out, run.lock, staging
                run.lock = acquire_lock(run.out)
                run.say(
                    f"--force: training in {run.out}, which replaces the run in {run.replaces} "
                    "once its first checkpoint is saved"
                )
                if cfg.teacher is not None:
                    copy_teacher_caches(run.replaces, run.out)
            clean_out(run)
        except BaseException:
            close_out(run)
            raise
    if world > 1:  # the other ranks read rank 0's tokenizer (and distilled pairs) in run.out
        where = [str(run.out)]
        dist.broadcast_object_list(where, src=0)
        run.out = Path(where[0])
    return run


def clean_out(run: Run) -> None:
    """Remove what a killed save left (.last.XXXX temp folders) in a resumed run's folder."""
    for name in CHECKPOINTS:
        for tmp in run.out.glob(f".{name}.*"):
            shutil.rmtree(tmp, ignore_errors=True)
    for tmp in (run.out / "epochs").glob(".epoch_*.tmp"):
        tmp.unlink()


def copy_teacher_caches(old: Path, new: Path) -> None:
    """A distillation run's caches in the older run (the teacher's translations, its exported
    package), copied into the new run's folder: each is used only while its key matches
    (train/distill.py), and the teacher's translations take minutes to make again."""
    for name in (DISTILLED, TEACHER_PACKAGE):
        if (old / name).is_dir():
            shutil.copytree(old / name, new / name, symlinks=True)
    if (old / f"{TEACHER_PACKAGE}.from").is_file():
        shutil.copyfile(old / f"{TEACHER_PACKAGE}.from", new / f"{TEACHER_PACKAGE}.from")


def take_place(run: Run) -> None:
    """--force: the new run has saved its first checkpoint, so its staging folder replaces the
    older run (core.files.swap_in: crash-safe) and the run goes on in OUT."""
    staging, out = run.out, run.replaces
    assert out is not None
    swap_in(staging, out)  # the older run's folder goes, our lock on it with it
    run.out, run.staging, run.replaces, run.old_lock = out, staging, None, None
    run.lock = out / LOCK
    run.say(f"the new run replaced the older one in {out}")


def close_out(run: Run) -> None:
    """At the end of train(): release OUT/.lock; a --force run that ends before its first
    checkpoint removes its staging folder (the older run in OUT was never touched)."""
    if run.replaces is not None and run.out != run.replaces:
        shutil.rmtree(run.out, ignore_errors=True)
        release_lock(run.old_lock)
    release_lock(run.lock)


# what a run writes at its top, and what a file browser leaves in a folder it shows
RUN_FILES = ("log.jsonl", "loss.png", "samples.md", "tokenizer.json", LOCK,
             ".DS_Store", "Thumbs.db")  # fmt: skip


CHECKPOINT_FILES = (WEIGHTS, CONFIG, TOKENIZER, SOURCE_TOKENIZER, GENERATION_CONFIG, STATE_TENSORS,
                    STATE_JSON)  # fmt: skip


class OutputExists(FileExistsError):
    """OUT holds something a new run would overwrite (check_out)."""


LEFTOVER = re.compile(r"\.(.+\.(tmp|new|old)-\d+(-.*)?|(best|last|averaged)\..*)")


def _leftover(name: str) -> bool:
    """A hidden folder of an interrupted safe write: core.files' .NAME.{tmp,new,old}-PID[-...]
    (removed by recover), or clean_out's .best.* / .last.* / .averaged.*."""
    return LEFTOVER.fullmatch(name) is not None


def not_a_run(out: Path) -> str | None:
    """Why --force must not replace the folder `out` (None: it holds only what a training run
    writes, and packages exported into it, so replacing it loses nothing of the user's)."""
    from edgeformer.export.exporter import not_a_package

    def not_a_checkpoint(folder: Path) -> str | None:
        try:
            config = json.loads((folder / CONFIG).read_text())
        except (OSError, ValueError):
            return f"{folder.name}/ has no readable {CONFIG}"
        if not isinstance(config, dict) or config.get("format") != CHECKPOINT_FORMAT:
            return f"{folder.name}/ is not an edgeformer checkpoint"
        extra = [p.name for p in folder.iterdir() if p.name not in CHECKPOINT_FILES]
        return f"{folder.name}/{extra[0]} is not one of a checkpoint's files" if extra else None

    def only(folder: Path, ok: Callable[[str], bool]) -> str | None:
        extra = [p.name for p in folder.iterdir() if not ok(p.name) or p.is_symlink()]
        return f"{folder.name}/{extra[0]} is not one of a training run's files" if extra else None

    if not out.is_dir():
        return "it is not a folder"
    for entry in sorted(out.iterdir()):
        name, folder = entry.name, entry.is_dir() and not entry.is_symlink()
        if entry.is_symlink():
            return f"{name} is a link"
        if name in (*RUN_FILES, f"{TEACHER_PACKAGE}.from") and entry.is_file():
            continue
        if _leftover(name):
            continue
        if name in CHECKPOINTS and folder:
            why = not_a_checkpoint(entry)
        elif name == "epochs" and folder:
            why = only(entry, lambda n: n.startswith(("epoch_", ".epoch_")))
        elif name == DISTILLED and folder:
            why = only(entry, lambda n: n.startswith(("train.", "key.json", ".train.", ".key.")))
        elif folder and not_a_package(entry) is None:  # OUT/teacher-package, an export
            why = None
        else:
            why = f"{name} is not one of a training run's files"
        if why is not None:
            return why
    return None


def check_out(cfg: TrainConfig, force: bool) -> bool:
    """Refuse, before anything is touched, an OUT that this run must not write into: for a new
    run anything but a missing or empty folder, unless `force` and OUT holds only a run (and
    none of the run's inputs); for a resumed run another folder than the resumed run's that is
    not empty. True: OUT holds a run that this one replaces (setup, take_place)."""
    out = Path(cfg.out)
    if out.is_symlink() and not out.exists() or out.exists() and not out.is_dir():
        raise OutputExists(f"--out {out} exists and is not a folder; give another --out")
    check_unlocked(out)
    recover(out)  # a crash-safe swap that a killed process left half done
    entries = sorted(out.iterdir()) if out.is_dir() else []
    if cfg.resume is not None:
        if force:
            raise ValueError(
                "--force starts a new run over an older one; --resume continues a run in its "
                "own folder: give one of the two"
            )
        home = Path(cfg.resume).parent
        if entries and out.resolve() != home.resolve():
            raise OutputExists(
                f"--resume {cfg.resume} continues the run in {home}, but --out {out} holds "
                f"something else: give --out {home}, or a new --out"
            )
        return False
    if not entries:
        return False
    why = not_a_run(out)
    if why is not None:
        if force:
            raise OutputExists(
                f"{out} exists and --force replaces only a training run's folder: {why}; "
                "remove it yourself or give another --out"
            )
        raise OutputExists(f"{out} is not empty ({why}): give a new or empty --out")
    if force and out.is_symlink():  # swap_in would replace the link, not the run
        raise OutputExists(f"--force does not replace {out}, a link: give the folder it names")
    if not force:
        last = out / "last"
        resume = f"continue it with --resume {last}, " if (last / STATE_JSON).is_file() else ""
        raise OutputExists(
            f"{out} already holds a training run: {resume}train into a new --out, or replace "
            "it with --force"
        )
    for flag in ("teacher", "distilled", "data_dir"):
        given = getattr(cfg, flag)
        if given is not None and out.resolve() in (p := Path(given).resolve(), *p.parents):
            raise OutputExists(
                f"--force would replace {out}, which holds --{flag.replace('_', '-')} {given}; "
                "give another --out"
            )
    return True


class OutputLocked(FileExistsError):
    """OUT is being written by another live training (OUT/.lock holds its PID)."""


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists (signal 0 checks without sending anything)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def lock_owner(lock: Path) -> int | None:
    """The PID in a lock file; None if it is gone, empty or not a number."""
    try:
        return int(lock.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def locked_error(out: Path, pid: int) -> OutputLocked:
    return OutputLocked(
        f"output folder {out} is in use by another training (PID {pid}, see {out / LOCK}); "
        "wait for it to end or give another --out"
    )


def check_unlocked(out: Path) -> None:
    """Refuse OUT while a live training holds its lock (nothing is written: acquire_lock takes
    the lock later)."""
    pid = lock_owner(out / LOCK)
    if pid is not None and pid != os.getpid() and pid_alive(pid):
        raise locked_error(out, pid)


def acquire_lock(out: Path) -> Path:
    """Create OUT/.lock (O_EXCL) holding our PID, so that two trainings never share OUT.

    A lock whose PID is not running (a killed run) is stale: it is taken over with a notice.
    A live one is a clear error naming the folder and the PID."""
    lock = out / LOCK
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            pid = lock_owner(lock)
            try:
                age = time.time() - lock.stat().st_mtime
            except FileNotFoundError:  # released meanwhile
                continue
            if pid is None and age < 5:
                time.sleep(0.5)  # just created, its PID not yet written
                continue
            if pid is not None and pid != os.getpid() and pid_alive(pid):
                raise locked_error(out, pid) from None
            why = f"PID {pid} is not running" if pid != os.getpid() else f"PID {pid} is us"
            why = why if pid is not None else "it holds no PID"
            print(f"taking over the stale lock {lock} ({why})", flush=True)
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()}\n")
        return lock
    raise OutputLocked(f"cannot lock output folder {out}: {lock} keeps coming back")


def release_lock(lock: Path | None) -> None:
    """Remove our lock (only if it still holds our PID)."""
    if lock is not None and lock_owner(lock) == os.getpid():
        lock.unlink(missing_ok=True)


def restore(run: Run, optimizer: torch.optim.Optimizer) -> dict:
    if run.cfg.resume is None:
        return {"epoch": 0, "step": 0, "best": math.inf, "history": []}
    state = load_train_state(Path(run.cfg.resume), optimizer)
    run.history = state["history"]
    run.say(f"resumed from {run.cfg.resume} at epoch {state['epoch']}, step {state['step']}")
    return state


def save_epoch(
    run: Run,
    model: EncoderDecoder | DecoderOnly,
    tok_path: Path,
    meta: dict,
    optimizer,
    state: dict,
):
    """OUT/last (+ train state), OUT/best when val loss improved, OUT/epochs/epoch_NNN."""
    if not run.main:
        return
    tok_path = run.current(tok_path)
    train_state = {**state, "history": run.history}
    write_state = lambda folder: save_train_state(folder, optimizer, train_state)  # noqa: E731
    save_checkpoint(run.out / "last", model, tok_path, meta, extra=write_state)
    if state["best"] == run.history[-1]["val_loss"]:
        save_checkpoint(run.out / "best", model, tok_path, meta)
    epochs = run.out / "epochs"
    epochs.mkdir(exist_ok=True)
    path = epochs / f"epoch_{state['epoch']:03d}.safetensors"
    tmp = epochs / f".{path.name}.tmp"
    save_model(model, str(tmp))
    os.replace(tmp, path)  # never a half-written epoch file to average
    for old in sorted(epochs.glob("epoch_*.safetensors"))[: -run.cfg.average_last]:
        old.unlink()
    if run.replaces is not None:  # --force: the first checkpoint is saved
        take_place(run)


def save_averaged(
    run: Run, model: EncoderDecoder | DecoderOnly, tok_path: Path, meta: dict
) -> EncoderDecoder | DecoderOnly:
    tok_path = run.current(tok_path)
    paths = sorted((run.out / "epochs").glob("epoch_*.safetensors"))[-run.cfg.average_last :]
    model = copy.deepcopy(model)
    average_weights(paths, model)
    save_checkpoint(run.out / "averaged", model, tok_path, {**meta, "averaged": len(paths)})
    return model
