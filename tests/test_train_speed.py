"""benchmarks.train_speed: the nanoGPT side runs from a copy of a checkout, on our data file, and
both sides' evaluation lines are read with their times (a fake nanoGPT here: no download)."""

from __future__ import annotations

import textwrap
import time

from edgeformer.benchmarks.train_speed import NANOGPT_CPU_ARGS, OUR_EVAL, nanogpt
from edgeformer.train.trainer import epoch_line

FAKE_TRAIN = textwrap.dedent(
    """
    import sys, time
    assert "--device=cpu" in sys.argv and open("data/shakespeare_char/train.bin").read() == "ok"
    for step, val in ((0, 4.2), (250, 2.3), (500, 1.8), (750, 1.7)):
        print(f"step {step}: train loss {val - 0.1:.4f}, val loss {val:.4f}", flush=True)
        time.sleep(0.05)
    """
)
FAKE_PREPARE = "import pathlib; assert pathlib.Path('input.txt').stat().st_size > 1e6\n"
FAKE_PREPARE += "pathlib.Path('train.bin').write_text('ok')\n"


def test_nanogpt_runs_from_a_copy_and_its_evals_are_timed(tmp_path):
    checkout = tmp_path / "nanoGPT"
    (checkout / "data" / "shakespeare_char").mkdir(parents=True)
    (checkout / "config").mkdir()
    (checkout / "train.py").write_text(FAKE_TRAIN)
    (checkout / "model.py").write_text("")
    (checkout / "config" / "train_shakespeare_char.py").write_text("")
    (checkout / "data" / "shakespeare_char" / "prepare.py").write_text(FAKE_PREPARE)
    work = tmp_path / "work"
    work.mkdir()
    run = nanogpt(checkout, work, tmp_path / "log")
    assert [e[1] for e in run.evals] == [0, 250, 500, 750]
    assert run.time_to(1.874) == run.evals[2][0] and run.time_to(1.0) is None
    assert run.evals[0][0] < run.evals[-1][0] <= run.total_s
    assert not (checkout / "data" / "shakespeare_char" / "input.txt").exists()  # a copy ran
    assert "--max_iters=2000" in NANOGPT_CPU_ARGS


def test_our_evaluation_line_is_read():
    class Cfg:
        lowercase = False

    class Run:
        cfg = Cfg()

    record = dict(iter=750, train_loss=1.71, val_loss=1.86, ppl=6.4, lr=1e-3, tokens_per_s=9000,
                  elapsed=time.time() % 100)  # fmt: skip
    m = OUR_EVAL.search(epoch_line(Run(), record, 2500, unit="iter"))  # type: ignore[arg-type]
    assert m and (int(m.group(1)), float(m.group(3))) == (750, 1.86)
