"""Sequence-level distillation (train/distill.py): a teacher's beam translations through the
runtime become a student's targets; cached, checked, at toy size."""

from __future__ import annotations

import json

import pytest
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
    train(cfg)
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


def test_the_student_preset_needs_a_teacher(capsys):
    from edgeformer.runtime.cli import main

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
