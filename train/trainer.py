"""The training loops: translation (Multi30k, epochs of token-count batches) and language
modelling (Tiny Shakespeare, nanoGPT-style random windows and iterations).

    OUT/best/       checkpoint with the lowest validation loss
    OUT/last/       latest checkpoint + train_state.safetensors / train_state.json (--resume)
    OUT/averaged/   mean of the weights of the last `average_last` evaluations
    OUT/epochs/     the weights being averaged (epoch_NNN.safetensors)
    OUT/log.jsonl   one JSON line per epoch (LM: per evaluation) and a final summary
    OUT/loss.png    train / val loss curves
    OUT/samples.md  translations (source | reference | prediction) or generated text

OUT must be missing or empty for a new run: one that holds a run (or anything else) is refused
before anything is touched (check_out). With --force a run folder is replaced, safely: the new
run trains in a staging folder beside OUT (core.files.staging_folder) that takes OUT's place
once its first checkpoint is saved (take_place); until then OUT holds the older run, whole.

Resuming is exact: the data order and the dropout RNG are reseeded from (seed, epoch) at the
start of each epoch, and the optimizer state is saved as tensors, so no RNG state is stored.
"""

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
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from safetensors.torch import load_file, load_model, save_file, save_model
from tqdm import tqdm

from edgeformer.core.data import CHECKPOINT_KEY, load_multi30k, load_shakespeare
from edgeformer.core.files import recover, staging_folder, swap_in
from edgeformer.core.metrics import bleu_scores
from edgeformer.core.progress import Progress
from edgeformer.models import DecoderOnly, EncoderDecoder, ModelConfig, build_model
from edgeformer.models.batch import collate, make_pairs
from edgeformer.models.checkpoint import (
    CHECKPOINT_FORMAT,
    CONFIG,
    GENERATION_CONFIG,
    SOURCE_TOKENIZER,
    TOKENIZER,
    WEIGHTS,
    load_checkpoint,
    save_checkpoint,
)

from .config import TrainConfig
from .distill import (
    DISTILLED,
    TEACHER_PACKAGE,
    check_distilled,
    checkpoint_teacher,
    distill,
    shrunk_config,
    shrunk_weights,
    spaced_layers,
)
from .evaluate import lm_samples, translate_texts
from .tokenizer import (
    PAD_ID,
    encode,
    encode_stream,
    load_tokenizer,
    train_bpe,
    train_char,
)

STATE_TENSORS, STATE_JSON = "train_state.safetensors", "train_state.json"
LOCK = ".lock"  # OUT/.lock: the PID of the training writing into OUT
CHECKPOINTS = ("best", "last", "averaged")

# ----------------------------------------------------------------------------- batches and loss


def pair_lengths(pairs: list) -> list[int]:
    """A (source, target) pair's padded length in a batch: the longer of the source and the
    target with BOS / EOS (token_batches' lengths)."""
    return [max(len(s), len(t) + 1) for s, t in pairs]


def token_batches(
    lengths: list[int], batch_tokens: int, seed: int | None = None
) -> list[list[int]]:
    """Indices grouped by length into batches of <= batch_tokens padded tokens, then shuffled.

    With a seed, equal lengths are ordered at random and the batch order is shuffled."""
    lengths_ = np.asarray(lengths)
    rng = np.random.default_rng(seed) if seed is not None else None
    ties = rng.random(len(lengths_)) if rng is not None else np.arange(len(lengths_))
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in np.lexsort((ties, lengths_)):
        longest_with_i = max(longest, int(lengths_[i]))
        if cur and longest_with_i * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur, longest_with_i = [], int(lengths_[i])
        cur.append(int(i))
        longest = longest_with_i
    if cur:
        batches.append(cur)
    if rng is not None:
        rng.shuffle(batches)
    return batches


class _MixedTargetLoss(torch.autograd.Function):
    """Sum over real positions of sum_j w_j * -log softmax(x)_j / (real positions), for the
    target distribution w = (1 - a) * ((1 - e) * onehot(target) + e / V) + a * q, q the
    teacher's top-K probabilities at ids (a = 0: label-smoothed cross-entropy). Its gradient is
    (softmax(x) - w) / N, so forward and backward each take one pass over the (N, V) logits
    (F.cross_entropy plus a KL from log_softmax and gathers: 2.4x as long on a 2,400 x 6,000
    batch on the CPU; the vocabulary is most of a small model's cost)."""

    @staticmethod
    def forward(ctx, x, target, ids, q, eps: float, a: float, pad_id: int):
        # x (N, V) float, target (N,), ids (N, K), q (N, K) or both None when a = 0
        keep = target != pad_id
        t = target.clamp_min(0)[:, None]  # pad_id may be -100 (LM): any index, masked below
        lse = torch.logsumexp(x, -1)  # (N,)
        loss = (1 - eps) * (lse - x.gather(-1, t).squeeze(-1))
        if eps:
            loss = loss + eps * (lse - x.mean(-1))
        if a:
            kl = (torch.xlogy(q, q) - q * (x.gather(-1, ids) - lse[:, None])).sum(-1)
            loss = (1 - a) * loss + a * kl
        n = keep.sum().clamp_min(1)
        ctx.save_for_backward(x, t, ids, q, lse, keep, n)
        ctx.eps, ctx.a = eps, a
        return (loss * keep).sum() / n

    @staticmethod
    def backward(ctx, grad_out):
        x, t, ids, q, lse, keep, n = ctx.saved_tensors
        eps, a = ctx.eps, ctx.a
        grad = torch.exp(x - lse[:, None])  # softmax(x)
        if eps:
            grad.sub_((1 - a) * eps / x.shape[-1])
        hit = torch.full(t.shape, -(1 - a) * (1 - eps), dtype=x.dtype, device=x.device)
        grad.scatter_add_(-1, t, hit)
        if a:
            grad.scatter_add_(-1, ids, -a * q)
        grad.mul_(keep[:, None] * (grad_out / n))
        return grad, None, None, None, None, None, None


def smoothed_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    smoothing: float = 0.0,
    pad_id: int = PAD_ID,
    kd: tuple[torch.Tensor, torch.Tensor] | None = None,
    kd_weight: float = 0.0,
) -> torch.Tensor:
    """Mean label-smoothed cross-entropy over the non-padding targets; with kd = the teacher's
    top-K (ids, probabilities summing to 1), (1 - kd_weight) x that + kd_weight x KL(teacher ||
    student) (Kim & Rush's Word-KD; K = vocabulary: the exact KL).
    (B, T, V), (B, T)[, ((B, T, K), (B, T, K))] -> ()"""
    ids, q = (None, None) if kd is None else (kd[0].flatten(0, 1), kd[1].flatten(0, 1).float())
    return _MixedTargetLoss.apply(
        logits.flatten(0, 1).float(),
        target.flatten(),
        ids,
        q,
        smoothing,
        kd_weight if kd is not None else 0.0,
        pad_id,
    )


def lr_at(step: int, cfg: TrainConfig, total_steps: int) -> float:
    """Linear warm-up to cfg.lr, then lr * sqrt(warmup / step) or a cosine down to min_lr."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    if cfg.schedule == "inverse-sqrt":
        return cfg.lr * math.sqrt(cfg.warmup / (step + 1))
    progress = min(1.0, (step - cfg.warmup) / max(1, total_steps - cfg.warmup))
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not biases, LayerNorms). Fused (one kernel over
    all parameters) where torch has it: on the CPU the per-parameter loop took 8 % of a
    shakespeare-char-cpu step (docs/training.md, training speed)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return torch.optim.AdamW(
        groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=1e-9, fused=fused or None
    )


# ---------------------------------------------------------------- train state (no pickle)


def save_train_state(path: Path, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Optimizer tensors -> train_state.safetensors; step, epoch, history... -> train_state.json."""
    sd = optimizer.state_dict()
    tensors, scalars = {}, {}
    for idx, st in sd["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"{idx}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{k}"] = v
    save_file(tensors, str(path / STATE_TENSORS))
    meta = {"optimizer": {"param_groups": sd["param_groups"], "scalars": scalars}, **state}
    (path / STATE_JSON).write_text(json.dumps(meta, indent=1))


def load_train_state(path: Path, optimizer: torch.optim.Optimizer) -> dict:
    """Restore the optimizer from `path`; returns the JSON state (step, epoch, history, ...)."""
    for name in (STATE_TENSORS, STATE_JSON):
        if not (path / name).is_file():
            raise FileNotFoundError(f"cannot resume: {path / name} not found")
    meta = json.loads((path / STATE_JSON).read_text())
    opt = meta.pop("optimizer")
    state: dict[int, dict] = {}
    for key, v in load_file(str(path / STATE_TENSORS)).items():
        idx, k = key.split(".", 1)
        state.setdefault(int(idx), {})[k] = v
    for key, v in opt["scalars"].items():
        idx, k = key.split(".", 1)
        state.setdefault(int(idx), {})[k] = v
    for g in opt["param_groups"]:
        g["betas"] = tuple(g["betas"])
    optimizer.load_state_dict({"state": state, "param_groups": opt["param_groups"]})
    return meta


def average_weights(paths: list[Path], model: nn.Module) -> None:
    """Load the element-wise mean of the weights files `paths` into `model`."""
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        load_model(model, str(p))
        sd = {k: v.detach().double().clone() for k, v in model.state_dict().items()}
        total = {k: total[k] + sd[k] for k in total} if total else sd
    model.load_state_dict({k: (v / len(paths)).float() for k, v in total.items()})


# ----------------------------------------------------------------------------- the run


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


# ----------------------------------------------------------------------------- OUT must be free

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


# ----------------------------------------------------------------------------- OUT/.lock


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


def prepare_tokenizer(run: Run, texts: list[str]):
    """The resumed checkpoint's tokenizer, or a new one trained by rank 0 -> OUT/tokenizer.json."""
    cfg, path = run.cfg, run.out / "tokenizer.json"
    if cfg.resume is not None:
        path = Path(cfg.resume) / "tokenizer.json"
    elif run.main:
        if cfg.tokenizer == "char":
            train_char("".join(texts), path)
        else:
            train_bpe(texts, cfg.model.vocab_size, path, cfg.lowercase)
    run.barrier()
    return load_tokenizer(path), path


def build(run: Run, vocab_size: int) -> tuple[EncoderDecoder | DecoderOnly, ModelConfig]:
    """The model: from the resumed checkpoint's config.json, else from the TrainConfig."""
    cfg = run.cfg
    if cfg.resume is not None:
        model, config = load_checkpoint(cfg.resume)
        return model.to(run.device), ModelConfig.from_dict(config["model"])
    mcfg = cfg.model_config(vocab_size)
    torch.manual_seed(cfg.seed)
    model = build_model(mcfg)
    return model.to(run.device), mcfg


def start_from_teacher(
    run: Run, teacher: Path
) -> tuple[Any, Path, EncoderDecoder | DecoderOnly, ModelConfig]:
    """--init-from-teacher: the teacher checkpoint's tokenizer (copied to OUT/tokenizer.json)
    and the teacher cut to the run's layer counts (train/distill.py); run.cfg's model becomes
    that shape, so that the checkpoints record the model they hold."""
    cfg = run.cfg
    t_model, t_config = load_checkpoint(teacher)
    t_cfg = ModelConfig.from_dict(t_config["model"])
    s_cfg = shrunk_config(t_cfg, cfg.model)
    path = run.out / "tokenizer.json"
    if run.main:
        shutil.copyfile(teacher / "tokenizer.json", path)
    run.barrier()
    model = build_model(s_cfg)
    model.load_state_dict(shrunk_weights(t_model.state_dict(), t_cfg, s_cfg, model.state_dict()))
    run.cfg = replace(cfg, model=s_cfg)
    wider = s_cfg.decoder_ffn > t_cfg.decoder_ffn
    run.say(
        f"student: the teacher {teacher} ({t_cfg.n_encoder_layers}+{t_cfg.n_decoder_layers} "
        f"layers) cut to {s_cfg.n_encoder_layers}+{s_cfg.n_decoder_layers}: encoder layers "
        f"{spaced_layers(t_cfg.n_encoder_layers, s_cfg.n_encoder_layers)}, decoder layers "
        f"{spaced_layers(t_cfg.n_decoder_layers, s_cfg.n_decoder_layers)}; its tokenizer "
        f"({t_cfg.vocab_size:,}), width {t_cfg.d_model}, FFN {t_cfg.d_ff}"
        + (f", decoder FFN widened to {s_cfg.decoder_ffn}" if wider else "")
    )
    return load_tokenizer(path), path, model.to(run.device), s_cfg


@dataclass(frozen=True)
class TeacherTopK:
    """--word-kd: at each target position of every training pair, the teacher's K most likely
    next tokens and their probabilities (renormalized over the K). The teacher runs in eval mode
    (no dropout) on pairs that do not change, so these are the same every epoch: worked out once,
    and an epoch costs what it costs without distillation."""

    ids: list[torch.Tensor]  # per pair (T_i, K) int32, T_i = its target length + 1 (EOS)
    probs: list[torch.Tensor]  # per pair (T_i, K) float32

    def batch(
        self, idx: list[int], length: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pairs idx -> ids (B, length, K) int64, probs (B, length, K); padding rows 0."""
        k = self.ids[idx[0]].shape[1]
        ids = torch.zeros(len(idx), length, k, dtype=torch.long)
        probs = torch.zeros(len(idx), length, k)
        for row, i in enumerate(idx):
            n = self.ids[i].shape[0]
            ids[row, :n], probs[row, :n] = self.ids[i], self.probs[i]
        return ids.to(device), probs.to(device)


def teacher_topk(run: Run, pairs: list) -> TeacherTopK:
    """The teacher checkpoint (--teacher), frozen in eval mode, over all training pairs once:
    its top --word-kd-topk next tokens at each target position."""
    cfg = run.cfg
    teacher, t_config = load_checkpoint(checkpoint_teacher(Path(str(cfg.teacher))), run.device)
    teacher.eval()
    k = min(cfg.word_kd_topk, t_config["model"]["vocab_size"])
    t0, mass, positions = time.time(), 0.0, 0
    ids: list[torch.Tensor] = [torch.empty(0)] * len(pairs)
    probs: list[torch.Tensor] = [torch.empty(0)] * len(pairs)
    batches = token_batches(pair_lengths(pairs), cfg.batch_tokens)
    bar = run.progress("word-level distillation: the teacher's top tokens", len(batches), "batches")
    with torch.no_grad():
        for idx in bar.iterate(batches):
            src, tgt_in, tgt_out = (x.to(run.device) for x in collate([pairs[i] for i in idx]))
            with run.autocast():
                logits = teacher(src, tgt_in)
            top_p, top_ids = logits.float().softmax(-1).topk(k, dim=-1)  # (B, T, K)
            kept = top_p.sum(-1, keepdim=True)
            mass += float(kept[tgt_out != PAD_ID].sum())
            top_p, top_ids = (top_p / kept).cpu(), top_ids.to(torch.int32).cpu()  # one copy
            for row, i in enumerate(idx):
                n = len(pairs[i][1]) + 1
                ids[i], probs[i] = top_ids[row, :n].clone(), top_p[row, :n].clone()
                positions += n
    bar.close()
    run.say(
        f"word-level distillation: the teacher's top {k} tokens at {positions:,} target "
        f"positions in {time.time() - t0:.0f} s (they hold {mass / positions:.1%} of its "
        "probability on average)"
    )
    return TeacherTopK(ids, probs)


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


def epoch_line(run: Run, r: dict, total: int, unit: str = "epoch") -> str:
    parts = [f"{unit} {r[unit]}/{total}", f"train {r['train_loss']:.3f}"]
    parts += [f"val {r['val_loss']:.3f}", f"ppl {r['ppl']:.1f}"]
    if r.get("bleu") is not None:
        parts.append(f"bleu{' (lc)' if run.cfg.lowercase else ''} {r['bleu']:.1f}")
    parts += [f"lr {r['lr']:.2e}", f"{r['tokens_per_s']:,.0f} tok/s"]
    parts.append(
        time.strftime("%M:%S" if r["elapsed"] < 3600 else "%H:%M:%S", time.gmtime(r["elapsed"]))
    )
    return " | ".join(parts)


def plot_losses(history: list[dict], path: Path, unit: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r[unit] for r in history]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(x, [r["train_loss"] for r in history], "o-", label="train")
    ax.plot(x, [r["val_loss"] for r in history], "o-", label="val")
    ax.set_xlabel(unit)
    ax.set_ylabel("loss")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def wrap(run: Run, model: nn.Module) -> nn.Module:
    if run.world == 1:
        return model
    ids = [run.device.index] if run.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def optimize(
    model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, lr: float, clip: float
) -> None:
    """One update at learning rate `lr`, the gradient norm clipped to `clip` (0: not clipped)."""
    for g in optimizer.param_groups:
        g["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip > 0:
        nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()


def train(cfg: TrainConfig, force: bool = False) -> nn.Module:
    """Train by `cfg` (see module docstring for the outputs); returns the trained model.
    `force`: a new run replaces the run in OUT, once it has saved its first checkpoint."""
    cfg.check_teacher()
    if cfg.init_from_teacher and cfg.resume is None:  # a package teacher fails before OUT is made
        checkpoint_teacher(Path(str(cfg.teacher)))
    if cfg.distilled is not None:
        check_distilled(Path(cfg.distilled), cfg.src_lang, cfg.tgt_lang)
    run = setup(cfg, force)
    try:
        return train_lm(run) if cfg.task == "lm" else train_translation(run)
    finally:
        close_out(run)
        if run.world > 1 and dist.is_initialized():
            dist.destroy_process_group()


# ----------------------------------------------------------------------------- translation


@torch.no_grad()
def translation_val_loss(run: Run, model: nn.Module, pairs) -> float:
    """Mean NLL (no smoothing) per target token over `pairs`."""
    model.eval()
    total, count = 0.0, 0
    for idx in token_batches(pair_lengths(pairs), run.cfg.batch_tokens):
        src, tgt_in, tgt_out = (x.to(run.device) for x in collate([pairs[i] for i in idx]))
        with run.autocast():
            logits = model(src, tgt_in)
        n = int((tgt_out != PAD_ID).sum())
        total += float(smoothed_loss(logits, tgt_out)) * n
        count += n
    return total / count


def train_translation(run: Run) -> nn.Module:
    cfg = run.cfg
    train_src, train_tgt = load_multi30k(
        "train", cfg.src_lang, cfg.tgt_lang, cfg.data_dir, cfg.max_sentences
    )
    shrink = cfg.init_from_teacher and cfg.resume is None
    if cfg.teacher is not None:
        train_src, train_tgt = distilled_pairs(run, train_src, train_tgt)
    val_src, val_tgt = load_multi30k("val", cfg.src_lang, cfg.tgt_lang, cfg.data_dir)
    if shrink:
        tok, tok_path, model, mcfg = start_from_teacher(run, Path(str(cfg.teacher)))
        cfg = run.cfg
    else:
        tok, tok_path = prepare_tokenizer(run, train_src + train_tgt)
        model, mcfg = build(run, tok.get_vocab_size())
    train_pairs, dropped = make_pairs(encode(tok, train_src), encode(tok, train_tgt), mcfg.max_len)
    val_pairs, val_dropped = make_pairs(encode(tok, val_src), encode(tok, val_tgt), mcfg.max_len)
    if dropped or val_dropped:
        run.say(
            f"filtered out {dropped} train / {val_dropped} val pairs longer than "
            f"max_len={mcfg.max_len} (val loss and BLEU are on the rest)"
        )
    if not train_pairs:
        raise ValueError(f"empty dataset: no training pair fits max_len={mcfg.max_len}")
    bleu_n = min(cfg.bleu_sentences, len(val_src))
    fits = [len(ids) < mcfg.max_len for ids in encode(tok, val_src)]
    bleu_idx = [i for i, ok in enumerate(fits) if ok]
    bleu_src = [val_src[i] for i in bleu_idx[:bleu_n]]
    bleu_ref = [val_tgt[i] for i in bleu_idx[:bleu_n]]
    meta = {
        "task": {"kind": "translation", "src_lang": cfg.src_lang, "tgt_lang": cfg.tgt_lang},
        "train": cfg.to_dict(),
        CHECKPOINT_KEY: cfg.training_data().to_json(),
    }
    run.say(
        f"translation {cfg.direction}: {len(train_pairs):,} train pairs, {len(val_pairs):,} "
        f"val, vocab {tok.get_vocab_size():,}, {model.num_params() / 1e6:.2f}M parameters, "
        f"{run.device}" + (f" x {run.world} processes" if run.world > 1 else "")
    )
    if bleu_n:
        run.say(f"bleu: {bleu_label(cfg, len(bleu_src))}")

    optimizer = make_optimizer(model, cfg)
    state = restore(run, optimizer)
    ddp = wrap(run, model)
    kd = teacher_topk(run, train_pairs) if cfg.word_kd else None
    lengths = pair_lengths(train_pairs)
    steps_per_epoch = len(token_batches(lengths, cfg.batch_tokens)) // run.world
    total_steps = cfg.epochs * steps_per_epoch
    step = state["step"]
    for epoch in range(state["epoch"], cfg.epochs):
        torch.manual_seed(cfg.seed + 1000 * (epoch + 1) + run.rank)  # dropout
        batches = token_batches(lengths, cfg.batch_tokens, seed=cfg.seed + epoch)
        batches = batches[: len(batches) // run.world * run.world][run.rank :: run.world]
        ddp.train()
        t_epoch, loss_sum, tok_sum, seen = time.time(), 0.0, 0, 0
        bar = run.progress(f"epoch {epoch + 1}/{cfg.epochs}", len(batches), "batches")
        for idx in bar.iterate(batches):
            src, tgt_in, tgt_out = (
                x.to(run.device) for x in collate([train_pairs[i] for i in idx])
            )
            lr = lr_at(step, cfg, total_steps)
            with run.autocast():
                logits = ddp(src, tgt_in)
            top = None if kd is None else kd.batch(idx, tgt_out.shape[1], run.device)
            loss = smoothed_loss(
                logits, tgt_out, cfg.label_smoothing, kd=top, kd_weight=cfg.word_kd
            )
            optimize(ddp, optimizer, loss, lr, cfg.clip)
            step += 1
            n = int((tgt_out != PAD_ID).sum())
            loss_sum, tok_sum = loss_sum + loss.item() * n, tok_sum + n
            seen += int((src != PAD_ID).sum()) + n
            bar.note(f"loss {loss.item():.3f}, lr {lr:.1e}")
        bar.close()
        tokens_per_s = seen * run.world / (time.time() - t_epoch)
        if run.main:
            val_loss = translation_val_loss(run, model, val_pairs)
            bleu = None
            if bleu_n:
                label = None if cfg.quiet else f"epoch {epoch + 1} val BLEU"
                hyps = translate_texts(model, tok, bleu_src, progress=label)
                bleu = val_bleu(hyps, bleu_ref, cfg.lowercase)
            record = {
                "epoch": epoch + 1,
                "step": step,
                "train_loss": loss_sum / tok_sum,
                "val_loss": val_loss,
                "ppl": math.exp(min(val_loss, 50)),
                "bleu": bleu,
                "lr": lr,
                "tokens_per_s": tokens_per_s,
                "elapsed": time.time() - run.t0,
            }
            run.history.append(record)
            run.log(record)
            run.say(epoch_line(run, record, cfg.epochs))
            state = {"epoch": epoch + 1, "step": step, "best": min(state["best"], val_loss)}
            save_epoch(run, model, tok_path, meta, optimizer, state)
        run.barrier()

    if run.main:
        finish_translation(run, model, tok, tok_path, meta, val_pairs, bleu_src, bleu_ref)
    run.barrier()
    return model


def distilled_pairs(
    run: Run, sources: list[str], references: list[str]
) -> tuple[list[str], list[str]]:
    """(sources, the teacher's translations): made by rank 0 (train/distill.py); the other
    ranks wait, then read rank 0's OUT/distilled (or --distilled)."""
    cfg = run.cfg

    def pairs(say) -> tuple[list[str], list[str]]:
        d = distill(sources, run.out, cfg, say, references)
        return d.sources, d.targets

    if run.main:
        result = pairs(run.say)
    run.barrier()
    return result if run.main else pairs(lambda _: None)


def val_bleu(hyps: list[str], refs: list[str], lowercase: bool) -> float:
    """The run's BLEU (core.metrics, as export's held-out check): cased sacreBLEU 13a, or
    lowercased for a --lowercase run, whose outputs are lowercase."""
    return bleu_scores(hyps, refs)["bleu_lc" if lowercase else "bleu"]


def bleu_label(cfg: TrainConfig, sentences: int) -> str:
    """What the BLEU figures of a run are: decoding, sentences, split, casing."""
    case = "lowercased" if cfg.lowercase else "cased"
    return f"greedy, {sentences:,} Multi30k val sentences {cfg.direction}, {case} sacreBLEU"


def finish_translation(run, model, tok, tok_path, meta, val_pairs, bleu_src, bleu_ref) -> None:
    """Average the last checkpoints, compare with best, write samples.md and loss.png."""
    cfg = run.cfg
    scores: dict[str, dict[str, Any]] = {}
    for name in ("best", "averaged"):
        m = save_averaged(run, model, tok_path, meta) if name == "averaged" else None
        m = m if m is not None else load_checkpoint(run.out / "best", run.device)[0]
        hyps = translate_texts(m, tok, bleu_src) if bleu_src else []
        bleu = val_bleu(hyps, bleu_ref, cfg.lowercase) if bleu_src else None
        scores[name] = {"val_loss": translation_val_loss(run, m, val_pairs), "bleu": bleu}
        scores[name]["hyps"] = hyps
    key = "bleu" if bleu_src else "val_loss"
    sign = -1 if key == "bleu" else 1
    pick = min(scores, key=lambda n: sign * scores[n][key])
    summary = {n: {k: v for k, v in s.items() if k != "hyps"} for n, s in scores.items()}
    run.log({"final": summary, "samples_from": pick, "elapsed": time.time() - run.t0})
    for n, s in summary.items():
        bleu_note = (
            f", val BLEU {s['bleu']:.2f} ({bleu_label(cfg, len(bleu_src))})"
            if s["bleu"] is not None
            else ""
        )
        run.say(f"{n:>8}: val loss {s['val_loss']:.3f}{bleu_note}")
    rows = ["| source | reference | prediction |", "|---|---|---|"]
    cell = lambda s: s.replace("|", "\\|")  # noqa: E731
    for s, r, h in list(zip(bleu_src, bleu_ref, scores[pick]["hyps"]))[: cfg.samples]:
        rows.append(f"| {cell(s)} | {cell(r)} | {cell(h)} |")
    title = f"# Samples: {cfg.direction}, {pick} checkpoint, greedy, Multi30k val\n\n"
    (run.out / "samples.md").write_text(title + "\n".join(rows) + "\n")
    plot_losses(run.history, run.out / "loss.png", "epoch")
    run.say(
        f"done in {time.time() - run.t0:.0f}s: {run.out}/{{best,last,averaged}}, "
        f"log.jsonl, loss.png, samples.md"
    )


# ----------------------------------------------------------------------------- language model


def lm_update(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
    cfg: TrainConfig, lr: float, autocast: Callable[[], AbstractContextManager] = nullcontext,
) -> torch.Tensor:  # fmt: skip
    """One language-model training step on (B, T) inputs and targets; returns the loss (what
    train_lm runs, and benchmarks/train_speed.py times)."""
    with autocast():
        logits, _ = model(x)
    loss = smoothed_loss(logits, y, cfg.label_smoothing, pad_id=-100)
    optimize(model, optimizer, loss, lr, cfg.clip)
    return loss


def get_batch(data: np.ndarray, block: int, batch: int, rng: np.random.Generator):
    """Random windows: x (B, block), y = x shifted left by one."""
    ix = rng.integers(0, len(data) - block - 1, size=batch)
    x = np.stack([data[i : i + block] for i in ix])
    y = np.stack([data[i + 1 : i + 1 + block] for i in ix])
    return torch.from_numpy(x).long(), torch.from_numpy(y).long()


@torch.no_grad()
def lm_loss(run: Run, model: nn.Module, data: np.ndarray, seed: int) -> float:
    """Mean loss over eval_iters random batches drawn with a fixed seed."""
    model.eval()
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(run.cfg.eval_iters):
        x, y = (
            t.to(run.device) for t in get_batch(data, run.cfg.block_size, run.cfg.batch_size, rng)
        )
        with run.autocast():
            logits, _ = model(x)
        losses.append(float(smoothed_loss(logits, y, pad_id=-100)))
    model.train()
    return float(np.mean(losses))


def train_lm(run: Run) -> nn.Module:
    cfg = run.cfg
    train_text, val_text = load_shakespeare(cfg.data_dir)
    tok, tok_path = prepare_tokenizer(run, [train_text])
    model, mcfg = build(run, tok.get_vocab_size())
    block = mcfg.max_len
    train_ids = np.asarray(encode_stream(tok, train_text), dtype=np.int64)
    val_ids = np.asarray(encode_stream(tok, val_text), dtype=np.int64)
    for name, ids in (("train", train_ids), ("val", val_ids)):
        if len(ids) <= block + 1:
            raise ValueError(
                f"empty dataset: the {name} split has {len(ids)} tokens, "
                f"fewer than block_size + 2 = {block + 2}"
            )
    meta = {
        "task": {"kind": "lm"},
        "train": cfg.to_dict(),
        CHECKPOINT_KEY: cfg.training_data().to_json(),
    }
    run.say(
        f"language model: {len(train_ids):,} train / {len(val_ids):,} val tokens, vocab "
        f"{tok.get_vocab_size()}, {model.num_params() / 1e6:.2f}M parameters, {run.device}"
    )

    optimizer = make_optimizer(model, cfg)
    state = restore(run, optimizer)
    ddp = wrap(run, model)
    n_evals = math.ceil(cfg.max_iters / cfg.eval_interval)
    step = state["step"]
    for ev in range(state["epoch"], n_evals):
        torch.manual_seed(cfg.seed + 1000 * (ev + 1) + run.rank)
        rng = np.random.default_rng([cfg.seed, ev, run.rank])
        t_eval, losses = time.time(), []
        iters = range(ev * cfg.eval_interval, min(cfg.max_iters, (ev + 1) * cfg.eval_interval))
        bar = run.progress(f"iters {iters[0]}-{iters[-1] + 1}", len(iters), "iters")
        ddp.train()
        for it in bar.iterate(iters):
            x, y = (t.to(run.device) for t in get_batch(train_ids, block, cfg.batch_size, rng))
            lr = lr_at(it, cfg, cfg.max_iters)
            loss = lm_update(ddp, optimizer, x, y, cfg, lr, run.autocast)
            step = it + 1
            losses.append(loss.item())
            bar.note(f"loss {losses[-1]:.3f}, lr {lr:.1e}")
        bar.close()
        tokens_per_s = len(losses) * cfg.batch_size * block * run.world / (time.time() - t_eval)
        if run.main:
            val_loss = lm_loss(run, model, val_ids, cfg.seed)
            record = {
                "iter": step,
                "train_loss": lm_loss(run, model, train_ids, cfg.seed),
                "val_loss": val_loss,
                "ppl": math.exp(val_loss),
                "lr": lr,
                "tokens_per_s": tokens_per_s,
                "elapsed": time.time() - run.t0,
            }
            run.history.append(record)
            run.log(record)
            run.say(epoch_line(run, record, cfg.max_iters, unit="iter"))
            state = {"epoch": ev + 1, "step": step, "best": min(state["best"], val_loss)}
            save_epoch(run, model, tok_path, meta, optimizer, state)
        run.barrier()

    if run.main:
        best = load_checkpoint(run.out / "best", run.device)[0]
        avg = save_averaged(run, model, tok_path, meta)
        final = {
            n: lm_loss(run, m, val_ids, cfg.seed) for n, m in (("best", best), ("averaged", avg))
        }
        run.log(
            {
                "final": {n: {"val_loss": v} for n, v in final.items()},
                "elapsed": time.time() - run.t0,
            }
        )
        for n, v in final.items():
            run.say(f"{n:>8}: val loss {v:.3f}")
        pick = min(final, key=final.__getitem__)
        texts = lm_samples(
            best if pick == "best" else avg, tok, n=max(1, cfg.samples // 2), seed=cfg.seed
        )
        body = "\n\n".join(f"## Sample {i + 1}\n\n```text\n{t}\n```" for i, t in enumerate(texts))
        (run.out / "samples.md").write_text(
            f"# Samples: {pick} checkpoint, temperature 0.8\n\n{body}\n"
        )
        plot_losses(run.history, run.out / "loss.png", "iter")
        run.say(f"done in {time.time() - run.t0:.0f}s: {run.out}")
    run.barrier()
    return model
