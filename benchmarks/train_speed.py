"""Training speed against nanoGPT: wall time until the validation loss first reaches a target.

    python -m edgeformer.benchmarks.train_speed --nanogpt PATH/TO/nanoGPT
    python -m edgeformer.benchmarks.train_speed --nanogpt PATH --preset shakespeare-char-cpu \
        --target 1.874 --out runs/train-speed

nanoGPT runs from the checkout the user points at (copied to a temporary folder: nothing is
written into it and no nanoGPT code is in this repository) with the CPU settings of its README
(4 layers x 128, block 64, batch 12, 2 000 iterations, eval every 250 on 20 batches); its data is
this project's Tiny Shakespeare (the same file and the same first-90 % / last-10 % split). Ours:
`edgeformer train --preset PRESET`. Both run one after the other on this machine, each as a
subprocess whose stdout is read line by line: the time of a run is the wall time from its start
to the first evaluation line whose val loss is <= the target (and to its end). Prints a table
and writes OUT/latest.json.

    python -m edgeformer.benchmarks.train_speed --nanogpt PATH --steps 50

times a training step instead: nanoGPT's model and optimizer (its model.py, imported from the
checkout, with the CPU settings above) against ours (the preset's model, optimizer and update,
the functions `edgeformer train` runs), alternating rounds of N steps in one process on random
batches of the preset's shape, so that the host's slow and fast minutes fall on both. Prints
the median ms a step of each and their ratio; writes OUT/steps.json.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..core.data import data_root
from ..models.transformer import build_model
from ..train.config import preset
from ..train.state import make_optimizer
from ..train.trainer import lm_update

NANOGPT_TARGET = 1.874  # nanoGPT's CPU config, final val loss on this project's machine
# nanoGPT's README CPU command (train.py config/train_shakespeare_char.py + these)
NANOGPT_CPU_ARGS = [
    "--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1", "--block_size=64",
    "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128", "--max_iters=2000",
    "--lr_decay_iters=2000", "--dropout=0.0",
]  # fmt: skip
_CPU = dict(arg[2:].split("=", 1) for arg in NANOGPT_CPU_ARGS)
# --steps: its GPTConfig from those arguments (bias=False: train.py's default), its batch, and
# config/train_shakespeare_char.py's lr and beta2 with train.py's weight decay
NANOGPT_MODEL: dict[str, int | float | bool] = dict(bias=False, dropout=float(_CPU["dropout"]))
NANOGPT_MODEL |= {k: int(_CPU[k]) for k in ("n_layer", "n_head", "n_embd", "block_size")}
NANOGPT_BATCH = int(_CPU["batch_size"])
NANOGPT_LR, NANOGPT_BETAS, NANOGPT_DECAY = 1e-3, (0.9, 0.99), 0.1
NANOGPT_EVAL = re.compile(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)")
OUR_EVAL = re.compile(r"iter (\d+)/\d+ \| train ([\d.]+) \| val ([\d.]+)")


@dataclass
class Run:
    """One training run: its evaluations (seconds since start, step, train loss, val loss)."""

    name: str
    command: list[str]
    evals: list[tuple[float, int, float, float]] = field(default_factory=list)
    total_s: float = 0.0
    returncode: int = 0

    def time_to(self, target: float) -> float | None:
        return next((t for t, _, _, val in self.evals if val <= target), None)


def run_logged(name: str, command: list[str], cwd: Path, pattern: re.Pattern, log: Path) -> Run:
    """Run `command`, time-stamping each evaluation line it prints (stdout and stderr)."""
    run = Run(name, command)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            m = pattern.search(line)
            if m:
                t = time.perf_counter() - t0
                step, train, val = int(m.group(1)), float(m.group(2)), float(m.group(3))
                run.evals.append((t, step, train, val))
                print(f"  {name}: {t:6.1f} s  step {step:5d}  val {val:.3f}", flush=True)
        run.returncode = proc.wait()
    run.total_s = time.perf_counter() - t0
    if run.returncode != 0:
        raise RuntimeError(f"{name} exited with {run.returncode}: see {log}")
    return run


def nanogpt(checkout: Path, work: Path, log: Path) -> Run:
    """nanoGPT's CPU Shakespeare run from a copy of `checkout`, on this project's data file."""
    if not (checkout / "train.py").is_file() or not (checkout / "model.py").is_file():
        raise FileNotFoundError(f"{checkout} is not a nanoGPT checkout (no train.py / model.py)")
    copy = work / "nanoGPT"
    shutil.copytree(checkout, copy, ignore=shutil.ignore_patterns(".git", "out*"))
    data = copy / "data" / "shakespeare_char"
    shutil.copyfile(data_root() / "tinyshakespeare" / "input.txt", data / "input.txt")
    # prepare.py imports requests only to download input.txt, which is there: a stand-in module
    # spares this environment the package
    stub = work / "stub"
    stub.mkdir(exist_ok=True)
    (stub / "requests.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(stub)}
    subprocess.run([sys.executable, "prepare.py"], cwd=data, check=True, capture_output=True,
                   env=env)  # fmt: skip
    command = [sys.executable, "train.py", "config/train_shakespeare_char.py",
               *NANOGPT_CPU_ARGS, f"--out_dir={work / 'nanogpt-out'}"]  # fmt: skip
    return run_logged("nanoGPT", command, copy, NANOGPT_EVAL, log)


def ours(preset: str, work: Path, log: Path, extra: list[str]) -> Run:
    command = [sys.executable, "-m", "edgeformer.train", "--preset", preset,
               "--out", str(work / "ours"), *extra]  # fmt: skip
    return run_logged(f"edgeformer {preset}", command, work, OUR_EVAL, log)


# ------------------------------------------------------------------ time a step, in one process

Step = Callable[[torch.Tensor, torch.Tensor], None]  # (B, T) inputs, (B, T) targets -> update
CHARS = 65  # Tiny Shakespeare's character vocabulary


def nanogpt_step(checkout: Path, vocab: int) -> tuple[Step, int, int]:
    """nanoGPT's training step (its GPT, configure_optimizers, grad clip 1.0) from
    `checkout`/model.py; returns the step, its batch size and block size."""
    path = checkout / "model.py"
    if not path.is_file():
        raise FileNotFoundError(f"{checkout} is not a nanoGPT checkout (no model.py)")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.GPT(module.GPTConfig(vocab_size=vocab, **NANOGPT_MODEL))
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter counts
        model.train()
        opt = model.configure_optimizers(NANOGPT_DECAY, NANOGPT_LR, NANOGPT_BETAS, "cpu")

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()

    return step, NANOGPT_BATCH, int(NANOGPT_MODEL["block_size"])


def our_step(preset_name: str, vocab: int) -> tuple[Step, int, int]:
    """The preset's training step: the model, optimizer, loss and update `edgeformer train` uses."""
    cfg = preset(preset_name)
    if cfg.task != "lm":
        raise ValueError(f"--steps times a language-model preset; {preset_name!r} is {cfg.task}")
    model = build_model(cfg.model_config(vocab)).train()
    opt = make_optimizer(model, cfg)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        lm_update(model, opt, x, y, cfg, cfg.lr).item()

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    return step, cfg.batch_size, cfg.block_size


def time_steps(steps: dict[str, tuple[Step, int, int]], n: int, rounds: int) -> dict[str, list]:
    """ms a step of each, per round: rounds alternate between the steps, each round `n` steps on
    random characters (after 5 untimed steps)."""
    rng = torch.Generator().manual_seed(0)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(rounds + 1):
        for name, (step, batch, block) in steps.items():
            xy = torch.randint(0, CHARS, (n if r else 5, batch, block + 1), generator=rng)
            # contiguous inputs and targets, as both training loops make them (nanoGPT views)
            batches = [(w[:, :-1].contiguous(), w[:, 1:].contiguous()) for w in xy]
            t0 = time.perf_counter()
            for x, y in batches:
                step(x, y)
            if r:  # round 0 warms up
                times[name].append((time.perf_counter() - t0) * 1e3 / n)
    return times


def step_report(checkout: Path, preset_name: str, n: int, rounds: int, out: Path) -> None:
    steps = {"nanoGPT": nanogpt_step(checkout, CHARS), f"edgeformer {preset_name}":
             our_step(preset_name, CHARS)}  # fmt: skip
    times = time_steps(steps, n, rounds)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"| run | ms a step (median of {rounds} rounds of {n}) | batch x block |\n|---|---|---|")
    for name, (_, batch, block) in steps.items():
        print(f"| {name} | {med[name]:.1f} | {batch} x {block} |")
    ours_ms, theirs_ms = med[f"edgeformer {preset_name}"], med["nanoGPT"]
    threads = torch.get_num_threads()  # the preset's, for both
    print(f"\nours / nanoGPT ms a step: {ours_ms / theirs_ms:.2f} ({threads} threads)")
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpu_count": os.cpu_count(),
            "threads": threads, "preset": preset_name, "steps": n}  # fmt: skip
    (out / "steps.json").write_text(json.dumps({"meta": meta, "ms_per_step": times}, indent=2))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nanogpt", required=True, help="a nanoGPT checkout (run from a copy)")
    p.add_argument(
        "--preset", default="shakespeare-char-cpu", help="our preset (default: %(default)s)"
    )
    p.add_argument(
        "--target",
        type=float,
        default=NANOGPT_TARGET,
        help="val loss to reach (default: %(default)s, nanoGPT's final here)",
    )
    p.add_argument(
        "--out", default="runs/train-speed", help="results folder (default: %(default)s)"
    )
    p.add_argument("--skip-nanogpt", action="store_true", help="run ours only")
    p.add_argument(
        "--steps",
        type=int,
        default=0,
        metavar="N",
        help="time a training step instead, in rounds of N steps (default: off)",
    )
    p.add_argument("--rounds", type=int, default=7, help="--steps: rounds (default: %(default)s)")
    p.add_argument("extra", nargs="*", help="more `edgeformer train` flags for ours (after --)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.steps > 0:
        step_report(Path(args.nanogpt), args.preset, args.steps, args.rounds, out)
        return 0
    runs = []
    with tempfile.TemporaryDirectory(prefix="edgeformer-train-speed-") as tmp:
        work = Path(tmp)
        if not args.skip_nanogpt:
            runs.append(nanogpt(Path(args.nanogpt), work, out / "nanogpt.log"))
        runs.append(ours(args.preset, work, out / "ours.log", args.extra))
    rows = [f"| run | time to val <= {args.target:.3f} | final val | total |",
            "|---|---|---|---|"]  # fmt: skip
    for r in runs:
        t = r.time_to(args.target)
        final = r.evals[-1][3] if r.evals else float("nan")
        shown = f"{t:.1f} s" if t is not None else "not reached"
        rows.append(f"| {r.name} | {shown} | {final:.3f} | {r.total_s:.1f} s |")
    if len(runs) == 2 and all(r.time_to(args.target) for r in runs):
        ratio = runs[1].time_to(args.target) / runs[0].time_to(args.target)  # type: ignore[operator]
        rows.append(f"\nours / nanoGPT time to the target: {ratio:.2f}")
    print("\n".join(rows))
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpu_count": os.cpu_count(),
            "target": args.target, "preset": args.preset}  # fmt: skip
    record = {"meta": meta, "runs": [asdict(r) | {"time_to_target": r.time_to(args.target)}
                                     for r in runs]}  # fmt: skip
    (out / "latest.json").write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
