"""Sequence-level distillation (train/distill.py): a teacher's beam translations through the
runtime become a student's targets; cached, checked, at toy size."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

pytest.importorskip("torch", reason="needs PyTorch (the train extra)")
from conftest import multi30k_slice

from edgeformer.core.data import load_multi30k
from edgeformer.runtime import Translator
from edgeformer.train.config import TrainConfig
from edgeformer.train.distill import DISTILLED, KEY_FILE, TEACHER_PACKAGE
from edgeformer.train.trainer import train

N_TRAIN = 120


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return multi30k_slice(tmp_path_factory.mktemp("data"), N_TRAIN, 20)


def small(data_dir, out, **kw) -> TrainConfig:
    base = dict(
        data_dir=str(data_dir), out=str(out), vocab_size=200, d_model=32, n_heads=4,
        n_encoder_layers=1, n_decoder_layers=1, d_ff=64, max_len=48, batch_tokens=600,
        epochs=3, warmup=10, lr=5e-3, bleu_sentences=0, samples=2, quiet=True, threads=1,
    )  # fmt: skip
    return TrainConfig.from_dict(base | kw)


@pytest.fixture(scope="module")
def teacher(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("teacher")
    train(small(data_dir, out))
    return out / "averaged"


@pytest.fixture(scope="module")
def student(data_dir, teacher, tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    cfg = small(data_dir, out, teacher=str(teacher), teacher_beams=3, n_encoder_layers=2)
    train(cfg)
    return out


def test_student_learns_the_teachers_beam_translations(data_dir, student):
    folder = student / DISTILLED
    sources = (folder / "train.en").read_text().splitlines()
    targets = (folder / "train.de").read_text().splitlines()
    key = json.loads((folder / KEY_FILE).read_text())
    assert key["beams"] == 3 and len(sources) == len(targets) == N_TRAIN - key["dropped"]
    # the targets are what the runtime gives for the exported teacher, not the references
    teacher = Translator(student / TEACHER_PACKAGE, threads=1)
    assert teacher.translate_batch(sources[:8], num_beams=3) == targets[:8]
    refs = load_multi30k("train", "en", "de", str(data_dir))[1]
    assert targets[:8] != refs[:8]
    # the student is a normal translation run on those pairs, with its own architecture
    config = json.loads((student / "averaged" / "config.json").read_text())
    assert config["model"]["n_encoder_layers"] == 2
    assert config["train"]["teacher"].endswith("averaged")


def test_a_new_run_reuses_the_translations(data_dir, teacher, student, monkeypatch, capsys):
    import edgeformer.runtime

    def boom(*a, **k):
        raise AssertionError("translated again")

    monkeypatch.setattr(edgeformer.runtime, "Translator", boom)
    cfg = small(data_dir, student, teacher=str(teacher), teacher_beams=3, epochs=1)
    train(cfg, force=True)  # replaces the run in its folder: its caches are carried over
    assert "same teacher" in capsys.readouterr().out


def test_students_in_other_folders_share_the_translations(data_dir, teacher, student, tmp_path,
                                                         monkeypatch, capsys):  # fmt: skip
    import edgeformer.runtime

    shared = student / DISTILLED
    monkeypatch.setattr(edgeformer.runtime, "Translator", lambda *a, **k: 1 / 0)
    cfg = small(data_dir, tmp_path / "b", teacher=str(teacher), teacher_beams=3, epochs=1,
                distilled=str(shared))  # fmt: skip
    train(cfg)  # its own teacher-package export, the same teacher: the translations are reused
    assert "same teacher" in capsys.readouterr().out
    assert not (tmp_path / "b" / DISTILLED).exists()
    with pytest.raises(ValueError, match="distilled .* needs teacher"):
        TrainConfig(distilled=str(shared))


def test_a_package_teacher_is_used_as_it_is(data_dir, student, tmp_path):
    cfg = small(data_dir, tmp_path, teacher=str(student / TEACHER_PACKAGE), epochs=1)
    train(cfg)
    assert not (tmp_path / TEACHER_PACKAGE).exists()
    assert (tmp_path / DISTILLED / "train.de").is_file()


def test_bad_teachers_are_named(data_dir, teacher, tmp_path):
    with pytest.raises(ValueError, match="neither a model package"):
        train(small(data_dir, tmp_path / "a", teacher=str(tmp_path)))
    with pytest.raises(ValueError, match="translates en-de, the run is de-en"):
        train(small(data_dir, tmp_path / "b", teacher=str(teacher), direction="de-en"))
    with pytest.raises(ValueError, match="teacher .distillation. is for translation"):
        TrainConfig(task="lm", tokenizer="char", teacher=str(teacher))


def test_a_refused_checkpoint_teacher_leaves_nothing_in_out(data_dir, lm_checkpoint, teacher,
                                                            tmp_path):  # fmt: skip
    """A checkpoint teacher of another task or direction is refused before it is exported:
    OUT holds no teacher package afterwards."""
    for name, bad, match in (("lm", lm_checkpoint, "not a translation model"),
                             ("de-en", teacher, "translates en-de")):  # fmt: skip
        out = tmp_path / name
        direction = "de-en" if name == "de-en" else "en-de"
        with pytest.raises(ValueError, match=match):
            train(small(data_dir, out, teacher=str(bad), direction=direction))
        assert not (out / TEACHER_PACKAGE).exists() and not list(out.glob(".teacher*"))


def test_the_student_preset_needs_a_teacher(capsys):
    from edgeformer.cli import main

    assert main(["train", "--preset", "multi30k-en-de-student", "--epochs", "1"]) == 2
    assert "give --teacher" in capsys.readouterr().err


def test_a_changed_checkpoint_teacher_is_exported_again(student, teacher, capsys):
    from edgeformer.train.distill import teacher_package

    stamp = student / f"{TEACHER_PACKAGE}.from"
    stamp.write_text("another checkpoint")  # as if the teacher had been retrained
    assert teacher_package(teacher, student, print) == student / TEACHER_PACKAGE
    assert "exporting" in capsys.readouterr().out
    assert stamp.read_text().startswith(str(teacher.resolve()))
    assert Translator(student / TEACHER_PACKAGE, threads=1).translate("A dog runs.")


# ---- --init-from-teacher: the student starts as the teacher cut to its layer counts


def test_spaced_layers_keep_the_first_and_the_last():
    from edgeformer.train.distill import spaced_layers

    assert spaced_layers(4, 1) == [0]
    assert spaced_layers(4, 2) == [0, 3]
    assert spaced_layers(12, 3) == [0, 6, 11]  # distilBART's choice
    assert spaced_layers(4, 4) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="cannot keep 5 of 4"):
        spaced_layers(4, 5)


def test_a_shrunk_student_holds_the_teachers_layers():
    import torch

    from edgeformer.models import ModelConfig, build_model
    from edgeformer.train.distill import shrunk_config, shrunk_weights

    t_cfg = ModelConfig(vocab_size=50, d_model=16, n_heads=2, n_encoder_layers=2,
                        n_decoder_layers=3, d_ff=32, max_len=20, dropout=0.3)  # fmt: skip
    teacher = build_model(t_cfg)
    wanted = ModelConfig(vocab_size=9, d_model=64, n_heads=4, n_encoder_layers=2,
                         n_decoder_layers=2, d_ff=8, dropout=0.1)  # fmt: skip
    s_cfg = shrunk_config(t_cfg, wanted)
    assert (s_cfg.d_model, s_cfg.vocab_size, s_cfg.d_ff, s_cfg.n_decoder_layers) == (16, 50, 32, 2)
    assert s_cfg.dropout == 0.1  # the student's own
    student = build_model(s_cfg)
    student.load_state_dict(shrunk_weights(teacher.state_dict(), t_cfg, s_cfg))  # strict
    t, s = teacher.state_dict(), student.state_dict()
    assert torch.equal(s["decoder.0.ffn.up.weight"], t["decoder.0.ffn.up.weight"])
    assert torch.equal(s["decoder.1.ffn.up.weight"], t["decoder.2.ffn.up.weight"])  # the last
    assert torch.equal(s["encoder.1.attn.qkv.weight"], t["encoder.1.attn.qkv.weight"])
    # a student without linear biases starts from the teacher's weights without them
    lean = replace(wanted, bias=False)
    weights = shrunk_weights(teacher.state_dict(), t_cfg, shrunk_config(t_cfg, lean))
    build_model(shrunk_config(t_cfg, lean)).load_state_dict(weights)  # strict
    assert "decoder.0.ffn.up.bias" not in weights and "decoder.0.res_ffn.norm.bias" in weights
    with pytest.raises(ValueError, match="n_decoder_layers .4. is more than the teacher's .3."):
        shrunk_config(t_cfg, ModelConfig(n_encoder_layers=2, n_decoder_layers=4))


def test_a_wider_decoder_ffn_starts_as_the_cut_teacher():
    """--decoder-d-ff wider than the teacher's: the teacher's units, then fresh ones whose down
    projection is zero, so the student computes what the cut teacher computes, and can learn."""
    import torch

    from edgeformer.models import ModelConfig, build_model
    from edgeformer.train.distill import shrunk_config, shrunk_weights

    t_cfg = ModelConfig(vocab_size=50, d_model=16, n_heads=2, n_encoder_layers=2,
                        n_decoder_layers=2, d_ff=32, max_len=20, dropout=0.0)  # fmt: skip
    torch.manual_seed(0)
    teacher = build_model(t_cfg).eval()
    cut_cfg = shrunk_config(t_cfg, replace(t_cfg, n_decoder_layers=1))
    wide_cfg = shrunk_config(t_cfg, replace(t_cfg, n_decoder_layers=1, decoder_d_ff=128))
    assert (wide_cfg.d_ff, wide_cfg.decoder_ffn) == (32, 128)
    cut, wide = build_model(cut_cfg).eval(), build_model(wide_cfg).eval()
    cut.load_state_dict(shrunk_weights(teacher.state_dict(), t_cfg, cut_cfg))
    fresh = build_model(wide_cfg).state_dict()
    wide.load_state_dict(shrunk_weights(teacher.state_dict(), t_cfg, wide_cfg, fresh))  # strict
    src, tgt = torch.randint(3, 50, (2, 7)), torch.randint(3, 50, (2, 5))
    with torch.no_grad():
        assert (wide(src, tgt) - cut(src, tgt)).abs().max() < 1e-5
    w, up = wide.state_dict(), "decoder.0.ffn.up.weight"
    assert torch.equal(w[up][:32], teacher.state_dict()[up])
    assert torch.equal(w[up][32:], fresh[up][32:])
    assert not w["decoder.0.ffn.down.weight"][:, 32:].any()
    with pytest.raises(ValueError, match="can only widen it"):
        shrunk_config(t_cfg, replace(t_cfg, decoder_d_ff=16))


@pytest.fixture(scope="module")
def deep_teacher(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("deep-teacher")
    train(small(data_dir, out, n_encoder_layers=2))
    return out / "averaged"


def test_init_from_teacher_starts_the_student_from_the_teachers_weights(data_dir, deep_teacher,
                                                                         tmp_path):  # fmt: skip
    from safetensors.torch import load_file

    # a student asking for another width and vocabulary gets the teacher's; lr ~0 keeps the
    # teacher's weights through its one epoch
    cfg = small(data_dir, tmp_path, teacher=str(deep_teacher), init_from_teacher=True,
                n_encoder_layers=1, d_model=64, vocab_size=150, lr=1e-12, epochs=1,
                dropout=0.0)  # fmt: skip
    train(cfg)
    config = json.loads((tmp_path / "averaged" / "config.json").read_text())
    teacher_config = json.loads((deep_teacher / "config.json").read_text())
    assert config["model"] == teacher_config["model"] | {"n_encoder_layers": 1, "dropout": 0.0}
    assert config["train"]["model"] == config["model"]  # the run records the model it trained
    assert (tmp_path / "averaged" / "tokenizer.json").read_text() == (
        deep_teacher / "tokenizer.json"
    ).read_text()
    t, s = (
        load_file(deep_teacher / "model.safetensors"),
        load_file(tmp_path / "averaged" / "model.safetensors"),
    )
    for name in ("embed.weight", "encoder.0.attn.qkv.weight", "decoder.0.cross.q.weight"):
        assert (s[name] - t[name]).abs().max() < 1e-6, name
    assert set(s) == {n for n in t if not n.startswith("encoder.1.")}


def test_the_student_preset_starts_from_its_teacher(data_dir, deep_teacher, tmp_path):
    from edgeformer.cli import main

    # the command at toy size: the preset brings the cut, the pick and word-level KD
    out = tmp_path / "kd"
    args = ["train", "--preset", "multi30k-en-de-student", "--teacher", str(deep_teacher),
            "--out", str(out), "--data-dir", str(data_dir), "--n-encoder-layers", "2",
            "--epochs", "1", "--batch-tokens", "600", "--teacher-beams", "2", "--word-kd-topk",
            "8", "--bleu-sentences", "0", "--threads", "1", "--quiet"]  # fmt: skip
    assert main(args) == 0
    config = json.loads((out / "averaged" / "config.json").read_text())
    teacher_config = json.loads((deep_teacher / "config.json").read_text())
    assert config["model"]["d_model"] == teacher_config["model"]["d_model"]
    assert config["model"]["n_decoder_layers"] == 1 and config["model"]["bias"] is False
    train_cfg = config["train"]
    assert train_cfg["init_from_teacher"] and train_cfg["word_kd"] == 0.5
    assert json.loads((out / DISTILLED / KEY_FILE).read_text())["pick"] == "closest"


def test_the_student_preset_asks_for_a_checkpoint_teacher(tmp_path, capsys):
    from edgeformer.cli import main

    args = ["train", "--preset", "multi30k-en-de-student", "--out", str(tmp_path / "kd")]
    assert main(args) == 2
    assert "give --teacher with its checkpoint folder" in capsys.readouterr().err
    assert not (tmp_path / "kd").exists()


def test_init_from_teacher_needs_a_checkpoint_teacher(data_dir, student, tmp_path):
    package = student / TEACHER_PACKAGE
    cfg = small(data_dir, tmp_path / "pkg", teacher=str(package), init_from_teacher=True)
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        train(cfg)
    assert not (tmp_path / "pkg").exists()  # failed before translating, or making OUT
    with pytest.raises(ValueError, match="init_from_teacher needs teacher"):
        train(small(data_dir, tmp_path / "none", init_from_teacher=True))
    assert not (tmp_path / "none").exists()  # refused before the run's folder was made


def test_a_teacher_that_translates_nothing_is_named(data_dir, teacher, tmp_path, monkeypatch):
    import edgeformer.runtime

    class Mute(edgeformer.runtime.Translator):  # an untrained teacher: EOS first, every time
        def translate_iterable(self, texts, **options):
            return iter(["" for _ in texts])

    monkeypatch.setattr(edgeformer.runtime, "Translator", Mute)
    cfg = small(data_dir, tmp_path, teacher=str(teacher))
    with pytest.raises(ValueError, match="translated none of the 120 training sources"):
        train(cfg)
    assert not (tmp_path / DISTILLED / KEY_FILE).exists()


def test_word_kd_loss_is_the_kl_divergence_over_real_targets():
    import torch

    from edgeformer.train.loss import smoothed_loss

    torch.manual_seed(0)
    student, teacher = torch.randn(2, 3, 7), torch.randn(2, 3, 7)
    target = torch.tensor([[4, 5, 0], [6, 0, 0]])  # 0: padding

    def kd_loss(logits, kd):  # word_kd 1: the KL alone
        return smoothed_loss(logits, target, 0.1, kd=kd, kd_weight=1.0).item()

    q_all, ids_all = teacher.softmax(-1).sort(-1, descending=True)  # K = V: the exact KL
    assert kd_loss(teacher, (ids_all, q_all)) == pytest.approx(0.0, abs=1e-6)
    p, q = student.log_softmax(-1), teacher.log_softmax(-1)
    kl = (q.exp() * (q - p)).sum(-1)  # (B, T)
    expected = (kl[0, 0] + kl[0, 1] + kl[1, 0]) / 3
    assert kd_loss(student, (ids_all, q_all)) == pytest.approx(expected.item(), rel=1e-5)
    student[0, 2] += 100  # a padded position changes nothing
    assert kd_loss(student, (ids_all, q_all)) == pytest.approx(expected.item(), rel=1e-5)
    # K = 2: the KL from the teacher's two most likely tokens, renormalized
    q2 = q_all[..., :2] / q_all[..., :2].sum(-1, keepdim=True)
    kl2 = (q2 * (q2.log() - p.gather(-1, ids_all[..., :2]))).sum(-1)
    expected2 = (kl2[0, 0] + kl2[0, 1] + kl2[1, 0]) / 3
    assert kd_loss(student, (ids_all[..., :2], q2)) == pytest.approx(expected2.item(), rel=1e-5)
    # word_kd 0.3: 0.7 x the smoothed cross-entropy + 0.3 x the KL, and its gradient
    x = student.clone().requires_grad_(True)
    mixed = smoothed_loss(x, target, 0.1, kd=(ids_all[..., :2], q2), kd_weight=0.3)
    (grad,) = torch.autograd.grad(mixed, x)
    y = student.clone().requires_grad_(True)
    keep = target != 0
    kl_y = (q2 * (q2.log() - y.log_softmax(-1).gather(-1, ids_all[..., :2]))).sum(-1)[keep].mean()
    ce_y = torch.nn.functional.cross_entropy(
        y.flatten(0, 1), target.flatten(), ignore_index=0, label_smoothing=0.1
    )
    by_hand = 0.7 * ce_y + 0.3 * kl_y
    (grad_by_hand,) = torch.autograd.grad(by_hand, y)
    assert mixed.item() == pytest.approx(by_hand.item(), rel=1e-5)
    assert torch.allclose(grad, grad_by_hand, atol=1e-6)


def test_word_kd_alone_is_zero_for_a_student_that_is_its_teacher(data_dir, teacher, tmp_path):
    # the student is the whole teacher (no layer cut, no dropout): its next-token distributions
    # are the teacher's, so with word_kd 1 (no cross-entropy on the translations) the training
    # loss is zero; the cross-entropy alone would not be
    cfg = small(data_dir, tmp_path, teacher=str(teacher), init_from_teacher=True, word_kd=1.0,
                word_kd_topk=100_000, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                epochs=1, max_len=128, batch_tokens=2000)  # fmt: skip
    train(cfg)  # K above the vocabulary: the teacher's whole distribution, the exact KL
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert log[0]["train_loss"] == pytest.approx(0.0, abs=1e-5)
    # its 4 most likely tokens only: KL = -log(the probability they hold), > 0
    train(replace(cfg, word_kd_topk=4, out=str(tmp_path / "top4")))
    log = [json.loads(line) for line in (tmp_path / "top4" / "log.jsonl").read_text().splitlines()]
    assert log[0]["train_loss"] > 1e-3
    train(replace(cfg, word_kd=0.0, out=str(tmp_path / "ce")))
    log = [json.loads(line) for line in (tmp_path / "ce" / "log.jsonl").read_text().splitlines()]
    assert log[0]["train_loss"] > 0.5
    with pytest.raises(ValueError, match="word_kd needs init_from_teacher"):
        TrainConfig(teacher=str(teacher), word_kd=0.5)


def test_the_translations_key_ignores_the_reference_logits(tmp_path):
    from edgeformer.train.distill import distill_key

    def key(files: dict) -> dict:
        (tmp_path / "config.json").write_text(json.dumps({"files": files}))
        return distill_key(tmp_path, ["A dog."], 5)

    files = {"decoder.onnx": "aa", "weights.data": "bb", "golden.json": "cc"}
    # golden.json's last bits follow export's thread count: the same teacher, the same key
    assert key(files) == key(files | {"golden.json": "dd"})
    assert key(files) != key(files | {"weights.data": "ee"})


def test_closest_pick_takes_the_beam_hypothesis_nearest_the_reference(data_dir, teacher,
                                                                      tmp_path):  # fmt: skip
    """--teacher-pick closest (Kim & Rush's interpolated sequence-level distillation): each
    target is, of the teacher's n-best, the hypothesis with the highest sentence BLEU."""
    from edgeformer.core.metrics import sentence_bleu

    cfg = small(data_dir, tmp_path, teacher=str(teacher), teacher_beams=3,
                teacher_pick="closest", epochs=1)  # fmt: skip
    train(cfg)
    folder = tmp_path / DISTILLED
    key = json.loads((folder / KEY_FILE).read_text())
    assert key["pick"] == "closest" and "references_sha256" in key
    sources = (folder / "train.en").read_text().splitlines()
    targets = (folder / "train.de").read_text().splitlines()
    reference = dict(zip(*load_multi30k("train", "en", "de", str(data_dir))))
    nbest = Translator(tmp_path / TEACHER_PACKAGE, threads=1).translate_batch_nbest(
        sources, num_beams=3, num_hypotheses=3
    )
    for source, target, hyps in zip(sources, targets, nbest):
        texts = [h for h, _ in hyps]
        ref = reference[source]
        assert target in texts
        assert sentence_bleu(target, ref) == max(sentence_bleu(h, ref) for h in texts)
    assert any(target != hyps[0][0] for target, hyps in zip(targets, nbest))  # not the top
    with pytest.raises(ValueError, match="teacher_pick='best'"):
        TrainConfig(teacher=str(teacher), teacher_pick="best")


def test_translations_cached_before_the_pick_existed_are_the_top_ones(student):
    from edgeformer.train.distill import read_cached

    folder = student / DISTILLED
    key = json.loads((folder / KEY_FILE).read_text())
    older = {k: v for k, v in key.items() if k != "pick"}
    (folder / KEY_FILE).write_text(json.dumps(older))
    try:
        wanted = {k: key[k] for k in ("teacher_files_sha256", "sources_sha256", "beams")}
        assert read_cached(folder, wanted | {"pick": "top"}, "en", "de") is not None
        assert read_cached(folder, wanted | {"pick": "closest"}, "en", "de") is None
    finally:
        (folder / KEY_FILE).write_text(json.dumps(key))


def test_the_loss_cost_benchmark_times_every_loss_on_the_same_batches(data_dir, teacher, tmp_path):
    from edgeformer.benchmarks.loss_cost import main as loss_cost

    args = ["--teacher", str(teacher), "--layers", "1,1", "--bias", "--batches", "2"]
    args += ["--rounds", "1", "--threads", "1", "--data-dir", str(data_dir)]
    assert loss_cost(args + ["--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "latest.json").read_text())
    assert set(record["ms_per_batch"]) == {
        "cross-entropy, F.cross_entropy", "cross-entropy, one pass",
        "+ KL, teacher forward per batch", "+ KL, cached top 64",
    }  # fmt: skip
    assert all(len(v) == 1 and v[0] > 0 for v in record["ms_per_batch"].values())
    assert record["batches"] == 2 and 0 < record["topk_pairs"] <= record["pairs"]
