"""benchmarks.train_speed: the nanoGPT side runs from a copy of a checkout, on our data file, and
both sides' evaluation lines are read with their times (a fake nanoGPT here: no download)."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

pytest.importorskip("torch", reason="needs PyTorch (the train extra)")
pytest.importorskip(
    "edgeformer.benchmarks", reason="needs the edgeformer-bench distribution (./benchmarks)"
)

from edgeformer.benchmarks.train_speed import NANOGPT_CPU_ARGS, OUR_EVAL, main, nanogpt, our_step
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


# nanoGPT's model.py interface as the step timer uses it: GPTConfig(**kw), GPT(config)(x, y) ->
# (logits, loss), configure_optimizers(decay, lr, betas, device_type); it prints, as nanoGPT's
FAKE_MODEL = textwrap.dedent(
    """
    from dataclasses import dataclass
    import torch

    @dataclass
    class GPTConfig:
        block_size: int; vocab_size: int; n_layer: int; n_head: int; n_embd: int
        dropout: float; bias: bool

    class GPT(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            assert (config.n_layer, config.n_embd, config.bias) == (4, 128, False)
            self.emb = torch.nn.Embedding(config.vocab_size, config.vocab_size)
            self.steps = 0

        def forward(self, x, y):
            self.steps += 1
            logits = self.emb(x)
            return logits, torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.view(-1))

        def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
            print("num decayed parameter tensors: 1")
            return torch.optim.AdamW(self.parameters(), lr=learning_rate, betas=betas)
    """
)


def test_steps_mode_times_both_steps_in_alternating_rounds(tmp_path, capsys, one_torch_thread):
    (tmp_path / "model.py").write_text(FAKE_MODEL)
    assert main(["--nanogpt", str(tmp_path), "--steps", "2", "--rounds", "2", "--out",
                 str(tmp_path / "out")]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "num decayed" not in printed and "ours / nanoGPT ms a step:" in printed
    record = json.loads((tmp_path / "out" / "steps.json").read_text())
    times = record["ms_per_step"]
    assert set(times) == {"nanoGPT", "edgeformer shakespeare-char-cpu"}
    assert all(len(t) == 2 and min(t) > 0 for t in times.values())


def test_steps_mode_needs_a_language_model_and_a_checkout(tmp_path):
    with pytest.raises(ValueError, match="language-model preset"):
        our_step("multi30k-en-de-cpu", 65)
    with pytest.raises(FileNotFoundError, match="no model.py"):
        main(["--nanogpt", str(tmp_path), "--steps", "2", "--out", str(tmp_path / "out")])
