"""Training: batching, loss, schedule, train state, overfitting, resume, end-to-end runs."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("torch", reason="needs PyTorch (the train extra)")
import torch
from conftest import multi30k_slice
from safetensors.torch import load_file

from edgeformer.cli import main
from edgeformer.core.data import TrainingData
from edgeformer.models import build_model
from edgeformer.models.batch import collate, make_pairs, teacher_forcing
from edgeformer.models.checkpoint import load_checkpoint, save_checkpoint
from edgeformer.train.batches import token_batches
from edgeformer.train.config import PRESETS, TrainConfig, preset
from edgeformer.train.loss import smoothed_loss
from edgeformer.train.state import load_train_state, lr_at, make_optimizer, save_train_state
from edgeformer.train.trainer import train

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A few hundred real Multi30k pairs (plain text)."""
    return multi30k_slice(tmp_path_factory.mktemp("data"), 300, 40)


def small(data_dir, out, **kw) -> TrainConfig:
    """A ~50k-parameter model, no BLEU, a couple of epochs: seconds on a CPU."""
    base = dict(
        data_dir=str(data_dir), out=str(out), vocab_size=300, d_model=32, n_heads=4,
        n_encoder_layers=1, n_decoder_layers=1, d_ff=64, max_len=64, batch_tokens=600,
        epochs=2, warmup=20, lr=3e-3, bleu_sentences=0, samples=3, quiet=True,
    )  # fmt: skip
    return TrainConfig.from_dict(base | kw)


def test_teacher_forcing_shift():
    tgt_in, tgt_out = teacher_forcing([7, 8, 9])
    assert tgt_in == [1, 7, 8, 9] and tgt_out == [7, 8, 9, 2]
    src, tin, tout = collate([([5, 2], [7]), ([5, 6, 6, 2], [7, 8, 9])])
    assert src.tolist() == [[5, 2, 0, 0], [5, 6, 6, 2]]
    assert tin.tolist() == [[1, 7, 0, 0], [1, 7, 8, 9]]
    assert tout.tolist() == [[7, 2, 0, 0], [7, 8, 9, 2]]


def test_long_pairs_are_filtered_and_counted():
    pairs, dropped = make_pairs([[4] * 3, [4] * 9, [4]], [[5] * 3, [5], [5] * 9], max_len=5)
    assert pairs == [([4, 4, 4, 2], [5, 5, 5])] and dropped == 2


def test_token_batches_cover_all_within_budget():
    lengths = [3, 10, 4, 7, 7, 2, 9, 1, 5, 8] * 10
    for seed in (None, 0, 1):
        batches = token_batches(lengths, 40, seed)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        assert all(max(lengths[i] for i in b) * len(b) <= 40 for b in batches)
    assert token_batches(lengths, 40, 0) == token_batches(lengths, 40, 0)
    assert token_batches(lengths, 40, 0) != token_batches(lengths, 40, 1)


def test_loss_ignores_padding_and_smooths():
    torch.manual_seed(0)
    logits, target = torch.randn(2, 3, 11), torch.tensor([[4, 5, 6], [7, 8, 9]])
    padded_logits = torch.cat((logits, 100 * torch.randn(2, 2, 11)), dim=1)
    padded_target = torch.cat((target, torch.zeros(2, 2, dtype=torch.long)), dim=1)
    for eps in (0.0, 0.1):
        a, b = smoothed_loss(logits, target, eps), smoothed_loss(padded_logits, padded_target, eps)
        assert torch.allclose(a, b)
    logp = logits.log_softmax(-1)
    nll = -logp.gather(-1, target[..., None]).mean()
    expected = 0.9 * nll + 0.1 * -logp.mean()
    assert torch.allclose(smoothed_loss(logits, target, 0.1), expected, atol=1e-6)
    # its gradient (worked out in one pass, not by autograd) is F.cross_entropy's, padding and
    # an LM's ignore index (-100) included
    for pad_id in (0, -100):
        tgt = padded_target.masked_fill(padded_target == 0, pad_id)
        for eps in (0.0, 0.1):
            x = padded_logits.clone().requires_grad_(True)
            (ours,) = torch.autograd.grad(smoothed_loss(x, tgt, eps, pad_id=pad_id), x)
            ref = torch.nn.functional.cross_entropy(
                x.flatten(0, 1), tgt.flatten(), ignore_index=pad_id, label_smoothing=eps
            )
            (theirs,) = torch.autograd.grad(ref, x)
            assert torch.allclose(ours, theirs, atol=1e-7)


def test_lr_schedules():
    inv = TrainConfig(lr=1e-3, warmup=100, schedule="inverse-sqrt")
    assert lr_at(0, inv, 1000) == pytest.approx(1e-5)
    assert lr_at(99, inv, 1000) == pytest.approx(1e-3)
    assert lr_at(399, inv, 1000) == pytest.approx(5e-4)
    cos = TrainConfig(lr=1e-3, min_lr=1e-4, warmup=100, schedule="cosine")
    assert lr_at(100, cos, 1000) == pytest.approx(1e-3)
    assert lr_at(550, cos, 1000) == pytest.approx(5.5e-4)
    assert lr_at(5000, cos, 1000) == pytest.approx(1e-4)


def tiny_model(family="encoder-decoder"):
    cfg = TrainConfig.from_dict(dict(
        task="lm" if family == "decoder-only" else "translation",
        tokenizer="char" if family == "decoder-only" else "bpe",
        d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=64, dropout=0.0,
        max_len=32, block_size=32, label_smoothing=0.0, lr=3e-3, warmup=10,
    ))  # fmt: skip
    torch.manual_seed(0)
    return build_model(cfg.model_config(vocab_size=50)), cfg


def test_overfits_a_small_batch():
    model, cfg = tiny_model()
    g = torch.Generator().manual_seed(0)
    pairs = [
        (
            torch.randint(4, 50, (n,), generator=g).tolist() + [2],
            torch.randint(4, 50, (m,)).tolist(),
        )
        for n, m in ((5, 6), (8, 4), (3, 9), (7, 7))
    ]
    src, tgt_in, tgt_out = collate(pairs)
    opt = make_optimizer(model, cfg)
    model.train()
    for step in range(300):
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step, cfg, 300)
        loss = smoothed_loss(model(src, tgt_in), tgt_out)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05


def test_checkpoint_and_optimizer_state_round_trip(tmp_path, tokenizer_json):
    model, cfg = tiny_model()
    src, tgt_in, tgt_out = collate([([5, 6, 7, 2], [8, 9]), ([10, 2], [11, 12, 13])])
    opt = make_optimizer(model, cfg)

    def step(m, o):
        loss = smoothed_loss(m(src, tgt_in), tgt_out)
        o.zero_grad()
        loss.backward()
        o.step()
        return loss.item()

    for _ in range(3):
        step(model, opt)
    path = save_checkpoint(tmp_path / "ck", model, tokenizer_json, {"task": {"kind": "x"}})
    save_train_state(path, opt, {"step": 3, "epoch": 1})
    assert not list(path.glob("*.pt")) and not list(path.glob("*.pkl"))  # no pickle

    loaded, config = load_checkpoint(path)
    opt2 = make_optimizer(loaded, cfg)
    assert load_train_state(path, opt2) == {"step": 3, "epoch": 1}
    model.eval()
    assert torch.equal(model(src, tgt_in), loaded(src, tgt_in))
    s1, s2 = opt.state_dict(), opt2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    for i in s1["state"]:
        for k in s1["state"][i]:
            assert torch.equal(s1["state"][i][k], s2["state"][i][k])
    model.train(), loaded.train()
    assert step(model, opt) == step(loaded, opt2)  # the next step is identical too
    for p, q in zip(model.parameters(), loaded.parameters()):
        assert torch.equal(p, q)


def test_resume_continues_like_an_uninterrupted_run(data_dir, tmp_path):
    full = small(data_dir, tmp_path / "full", dropout=0.1, epochs=2)
    train(full)
    train(small(data_dir, tmp_path / "cut", dropout=0.1, epochs=1))
    train(
        small(data_dir, tmp_path / "cut", dropout=0.1, epochs=2, resume=str(tmp_path / "cut/last"))
    )
    logs = [
        [json.loads(x) for x in (tmp_path / name / "log.jsonl").read_text().splitlines()]
        for name in ("full", "cut")
    ]
    epochs = [[r for r in log if "epoch" in r] for log in logs]
    assert [r["epoch"] for r in epochs[1]] == [1, 2]
    for a, b in zip(*epochs):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-6)
        assert a["val_loss"] == pytest.approx(b["val_loss"], abs=1e-6)
        assert a["step"] == b["step"]
    wa, wb = (load_file(str(tmp_path / n / "last/model.safetensors")) for n in ("full", "cut"))
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


def test_tiny_preset_end_to_end_via_cli(data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--preset", "tiny", "--data-dir", str(data_dir), "--out", str(out)]
    args += ["--epochs", "3", "--bleu-sentences", "8", "--quiet", "--max-sentences", "200"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "epoch 3/3" in printed and "bleu" in printed and "tok/s" in printed
    for name in ("best", "last", "averaged"):
        assert (out / name / "model.safetensors").is_file() and (
            out / name / "tokenizer.json"
        ).is_file()
    config = json.loads((out / "best/config.json").read_text())
    assert config["task"] == {"kind": "translation", "src_lang": "en", "tgt_lang": "de"}
    assert config["train"]["max_sentences"] == 200
    # the typed record export reads (GPTQ's examples, held-out BLEU): here, not the bundled data
    assert TrainingData.of_checkpoint(config) == TrainingData(
        "multi30k", bundled=False, tokenizer="bpe", src_lang="en", tgt_lang="de"
    )
    assert "bleu: greedy, 8 Multi30k val sentences en-de, cased sacreBLEU" in printed
    log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log if "epoch" in r] == [1, 2, 3]
    assert all(math.isfinite(r["val_loss"]) and r["bleu"] is not None for r in log if "epoch" in r)
    assert log[-1]["final"]["averaged"]["val_loss"] > 0
    assert (out / "loss.png").read_bytes()[:4] == b"\x89PNG"
    samples = (out / "samples.md").read_text().splitlines()
    assert "| source | reference | prediction |" in samples and len(samples) >= 2 + 3
    assert len(list((out / "epochs").glob("*.safetensors"))) == PRESETS["tiny"].average_last
    # resuming without --preset continues the saved config (data dir, out, ...) for one more epoch
    assert main(["train", "--resume", str(out / "last"), "--epochs", "4"]) == 0
    assert "resumed from" in capsys.readouterr().out
    log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log if "epoch" in r] == [1, 2, 3, 4]


def test_lm_end_to_end_and_evaluate(tmp_path):
    from edgeformer.train.evaluate import evaluate_lm

    text = "".join(f"line {i}: to be or not to be, that is the question.\n" for i in range(400))
    (tmp_path / "data/tinyshakespeare").mkdir(parents=True)
    (tmp_path / "data/tinyshakespeare/input.txt").write_text(text)
    cfg = preset(
        "shakespeare-char-cpu", data_dir=str(tmp_path / "data"), out=str(tmp_path / "lm"),
        d_model=32, n_decoder_layers=1, d_ff=64, block_size=32, max_iters=60, eval_interval=30,
        eval_iters=2, warmup=10, quiet=True, samples=2,
    )  # fmt: skip
    train(cfg)
    out = tmp_path / "lm"
    log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in log if "iter" in r] == [30, 60]
    assert log[1]["val_loss"] < log[0]["val_loss"] < math.log(30)
    config = json.loads((out / "best/config.json").read_text())
    assert config["task"] == {"kind": "lm"}
    assert TrainingData.of_checkpoint(config) == TrainingData("tinyshakespeare", False, "char")
    assert "## Sample 1" in (out / "samples.md").read_text()
    result = evaluate_lm(out / "best", data_dir=tmp_path / "data")
    assert result["tokens"] == len(text) - int(len(text) * 0.9) - 1
    assert result["ppl"] == pytest.approx(math.exp(result["val_loss"]), rel=1e-3)


def test_evaluate_translation(data_dir, tmp_path):
    from edgeformer.train.evaluate import evaluate_translation

    train(small(data_dir, tmp_path / "run", epochs=1))
    result = evaluate_translation(
        tmp_path / "run/best", split="val", beams=(1, 2), data_dir=data_dir, max_sentences=5
    )
    assert result["sentences"] == 5 and result["direction"] == "en-de"
    for name in ("greedy", "beam2"):
        assert 0 <= result[name]["bleu"] <= 100 and 0 <= result[name]["bleu_lc"] <= 100


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(task="mt"), "task"),
        (dict(direction="en-fr"), "direction"),
        (dict(schedule="linear"), "schedule"),
        (dict(epochs=0), "epochs"),
        (dict(lr=-1.0), "lr"),
        (dict(d_model=30, n_heads=4), "divisible"),
        (dict(tokenizer="char"), "translation needs"),
        (dict(batch_tokens=10), "batch_tokens"),
        (dict(task="lm", tokenizer="char", lowercase=True), "lowercase needs"),
    ],
)
def test_bad_config_gives_clear_error(kw, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig.from_dict(kw)


def test_cli_errors_and_presets(capsys, tmp_path):
    assert main(["train", "--list-presets"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in PRESETS)
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--preset", "nope"])
    assert exit_.value.code == 2
    assert "invalid choice: 'nope' (choose from 'tiny'" in capsys.readouterr().err
    assert main(["train", "--preset", "tiny", "--lr", "0", "--out", str(tmp_path)]) == 2
    assert "invalid TrainConfig: lr=0.0" in capsys.readouterr().err
    assert main(["train", "--data-dir", str(tmp_path / "none"), "--out", str(tmp_path)]) == 2
    assert "data folder not found" in capsys.readouterr().err
    assert main(["train", "--evaluate", str(tmp_path / "nockpt")]) == 2
    assert "checkpoint folder not found" in capsys.readouterr().err


def test_lowercase_run_lowercases_data_and_outputs(data_dir, tmp_path, capsys):
    """--lowercase: the run's tokenizer lowercases, its vocabulary and translations have no
    uppercase letter, and the log's BLEU is the lowercased one."""
    from edgeformer.train.evaluate import translate_texts
    from edgeformer.train.tokenizer import load_tokenizer

    out = tmp_path / "lc"
    train(small(data_dir, out, epochs=1, lowercase=True, bleu_sentences=4, quiet=False))
    assert "bleu (lc)" in capsys.readouterr().out
    tok = load_tokenizer(out / "tokenizer.json")
    assert not any(c.isupper() for piece in tok.get_vocab() for c in piece if "[" not in piece)
    model = load_checkpoint(out / "best")[0]
    hyps = translate_texts(model, tok, ["A MAN IS RIDING A BIKE.", "Two dogs."])
    assert all(h == h.lower() for h in hyps)
    assert tok.encode("A MAN").ids == tok.encode("a man").ids
