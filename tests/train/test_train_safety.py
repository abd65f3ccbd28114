"""Issue 14, training side: OUT/.lock, atomic checkpoints + train state, umask permissions,
TrainConfig holding a ModelConfig, `edgeformer export RUN_DIR` picking the better checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="needs PyTorch (the train extra)")
import torch
from conftest import multi30k_slice
from safetensors.torch import load_file
from tokenizers import Tokenizer

from edgeformer.cli import main
from edgeformer.models import ModelConfig, build_model
from edgeformer.models.checkpoint import save_checkpoint
from edgeformer.train import state as train_state
from edgeformer.train import trainer
from edgeformer.train.config import TrainConfig, preset
from edgeformer.train.run_folder import (
    LOCK,
    OutputLocked,
    Run,
    acquire_lock,
    release_lock,
    save_epoch,
)
from edgeformer.train.state import make_optimizer, save_train_state
from edgeformer.train.trainer import train


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return multi30k_slice(tmp_path_factory.mktemp("data"), 120, 10)


def small(data_dir, out, **kw) -> TrainConfig:
    base = dict(
        data_dir=str(data_dir), out=str(out), vocab_size=200, d_model=16, n_heads=2,
        n_encoder_layers=1, n_decoder_layers=1, d_ff=32, max_len=64, batch_tokens=600,
        epochs=1, warmup=5, bleu_sentences=0, samples=1, quiet=True, threads=1,
    )  # fmt: skip
    return TrainConfig.from_dict(base | kw)


def tiny_model(tokenizer_json, seed: int = 0, **kw):
    torch.manual_seed(seed)
    vocab = Tokenizer.from_file(str(tokenizer_json)).get_vocab_size()
    cfg = ModelConfig(vocab_size=vocab, d_model=16, n_heads=2, n_encoder_layers=1, **kw)
    return build_model(ModelConfig(**(cfg.to_dict() | dict(n_decoder_layers=1, d_ff=32))))


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# ----------------------------------------------------------------------------- OUT/.lock


def test_live_lock_is_refused_before_anything_is_touched(tmp_path):
    owner = os.getppid()  # alive, and not us
    (tmp_path / LOCK).write_text(f"{owner}\n")
    (tmp_path / "log.jsonl").write_text('{"epoch": 1}\n')  # a fresh run would delete it
    with pytest.raises(OutputLocked, match=rf"{tmp_path}.*in use.*PID {owner}"):
        train(small(tmp_path / "no-data", tmp_path))
    assert (tmp_path / LOCK).read_text() == f"{owner}\n"
    assert (tmp_path / "log.jsonl").read_text() == '{"epoch": 1}\n'


def test_live_lock_via_cli_is_one_clear_error(tmp_path, capsys):
    (tmp_path / LOCK).write_text(f"{os.getppid()}\n")
    assert main(["train", "--out", str(tmp_path), "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"output folder {tmp_path} is in use" in err and "Traceback" not in err


def test_stale_lock_is_taken_over_with_a_notice(tmp_path, capsys):
    pid = dead_pid()
    (tmp_path / LOCK).write_text(f"{pid}\n")
    lock = acquire_lock(tmp_path)
    assert lock.read_text() == f"{os.getpid()}\n"
    notice = f"taking over the stale lock {lock} (PID {pid} is not running)"
    assert notice in capsys.readouterr().out
    with pytest.raises(OutputLocked):  # held by a live process now (a 2nd process would fail)
        lock.write_text(f"{os.getppid()}\n")
        acquire_lock(tmp_path)
    lock.write_text(f"{os.getpid()}\n")
    release_lock(lock)
    assert not lock.exists()


def test_lock_is_released_when_training_fails(tmp_path):
    with pytest.raises(FileNotFoundError, match="data folder not found"):
        train(small(tmp_path / "no-data", tmp_path / "out"))
    assert not (tmp_path / "out" / LOCK).exists()


def test_run_over_a_stale_lock_trains_and_unlocks(data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK).write_text(f"{dead_pid()}\n")
    (out / ".last.killed").mkdir()  # what a killed save leaves behind
    cfg = small(data_dir, out, tie_embeddings=False, layer_norm_eps=1e-6)
    train(cfg, force=True)  # OUT holds what a killed run left: a new run replaces it
    assert "taking over the stale lock" in capsys.readouterr().out
    assert not (out / LOCK).exists() and not (out / ".last.killed").exists()
    saved = json.loads((out / "best/config.json").read_text())
    assert saved["model"]["tie_embeddings"] is False and saved["model"]["layer_norm_eps"] == 1e-6
    assert TrainConfig.from_dict(saved["train"]) == cfg  # the saved run config round-trips


# --------------------------------------------------------------- atomic writes, permissions


def test_failed_train_state_write_leaves_the_previous_checkpoint(tmp_path, tokenizer_json):
    model = tiny_model(tokenizer_json)
    cfg = TrainConfig(out=str(tmp_path))
    opt = make_optimizer(model, cfg)
    sum(p.square().sum() for p in model.parameters()).backward()
    opt.step()  # optimizer state to save
    run = Run(cfg, tmp_path, torch.device("cpu"))
    run.history = [{"val_loss": 3.0}]
    save_epoch(run, model, tokenizer_json, {}, opt, {"epoch": 1, "step": 5, "best": 3.0})
    before = load_file(str(tmp_path / "last/model.safetensors"))

    def broken_save_file(tensors, path):  # the disk fills up half-way through
        with open(path, "wb") as f:
            f.write(b"\x00" * 10)
        raise OSError("No space left on device")

    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    run.history.append({"val_loss": 2.0})
    saved = train_state.save_file
    train_state.save_file = broken_save_file
    try:
        with pytest.raises(OSError, match="No space left"):
            save_epoch(run, model, tokenizer_json, {}, opt, {"epoch": 2, "step": 9, "best": 2.0})
    finally:
        train_state.save_file = saved
    state = json.loads((tmp_path / "last/train_state.json").read_text())
    assert state["epoch"] == 1 and state["step"] == 5
    after = load_file(str(tmp_path / "last/model.safetensors"))
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert len(load_file(str(tmp_path / "last/train_state.safetensors"))) > 0  # not cut short
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "epochs", "last"]


def test_checkpoint_files_follow_the_umask(tmp_path, tokenizer_json, umask_022):
    model = tiny_model(tokenizer_json)
    opt = make_optimizer(model, TrainConfig())
    path = save_checkpoint(
        tmp_path / "ck",
        model,
        tokenizer_json,
        extra=lambda p: save_train_state(p, opt, {"step": 0}),
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    names = {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.iterdir()}
    assert set(names) >= {"model.safetensors", "config.json", "tokenizer.json", "train_state.json"}
    assert set(names.values()) == {0o644}, names


# ----------------------------------------------------------------------------- TrainConfig


def test_train_config_holds_the_model_config():
    cfg = preset("tiny", tie_embeddings=False, layer_norm_eps=1e-6, d_model=64, max_len=96)
    assert isinstance(cfg.model, ModelConfig)
    assert not {"d_model", "n_heads", "dropout", "max_len"} & set(cfg.__dataclass_fields__)
    model = build_model(cfg.model_config(vocab_size=100))
    assert model.cfg.tie_embeddings is False and model.cfg.d_model == 64
    assert model.cfg.vocab_size == 100 and model.cfg.max_len == 96
    eps = {m.eps for m in model.modules() if isinstance(m, torch.nn.LayerNorm)}
    assert eps == {1e-6}
    lm = preset("shakespeare-char-cpu", block_size=32)
    assert lm.model.family == "decoder-only" and lm.model.max_len == 32
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    flat = {k: v for k, v in cfg.to_dict().items() if k != "model"} | cfg.model.to_dict()
    assert TrainConfig.from_dict(flat) == cfg  # a config saved before the model was nested
    with pytest.raises(ValueError, match="unknown fields"):
        TrainConfig.from_dict({"d_modle": 64})


def test_every_model_field_is_a_train_flag():
    import argparse

    from edgeformer.train.cli import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser, "train")
    args = ["--preset", "tiny", "--d-model", "64", "--no-tie-embeddings"]
    args += ["--layer-norm-eps", "1e-6", "--norm", "pre", "--positional", "rotary"]
    cfg = config_from_args(parser.parse_args(args))
    m = cfg.model
    assert (m.d_model, m.tie_embeddings, m.layer_norm_eps) == (64, False, 1e-6)
    assert (m.norm, m.positional) == ("pre", "rotary")
    from edgeformer.train.config import DERIVED

    flags = {a.dest for a in parser._actions}
    # set by the task / tokenizer (training has one tokenizer: no src_vocab_size)
    assert set(DERIVED) == {"family", "pad_id", "bos_id", "eos_id", "src_vocab_size"}
    assert set(DERIVED).isdisjoint(flags)
    assert {f for f in ModelConfig.__dataclass_fields__ if f not in DERIVED} <= flags


# ----------------------------------------------------------------------------- export RUN_DIR


def fake_run(tmp_path, tokenizer_json, best_loss: float, averaged_loss: float):
    run = tmp_path / "run"
    save_checkpoint(run / "best", tiny_model(tokenizer_json, seed=1), tokenizer_json)
    save_checkpoint(run / "averaged", tiny_model(tokenizer_json, seed=2), tokenizer_json)
    records = [
        {"epoch": 1, "val_loss": 3.0},
        {"epoch": 2, "val_loss": best_loss},
        {"final": {"best": {"val_loss": best_loss}, "averaged": {"val_loss": averaged_loss}}},
    ]
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


@pytest.mark.parametrize("best, averaged, pick", [(2.5, 2.4, "averaged"), (2.3, 2.4, "best")])
def test_pick_checkpoint_of_a_run_folder(tmp_path, tokenizer_json, best, averaged, pick):
    from edgeformer.export.cli import pick_checkpoint

    run = fake_run(tmp_path, tokenizer_json, best, averaged)
    path, why = pick_checkpoint(str(run))
    assert path == str(run / pick)
    assert f"exporting {pick}/" in why and "lower val loss" in why
    assert pick_checkpoint(str(run / "best")) == (str(run / "best"), None)  # a plain checkpoint


def test_export_run_dir_exports_the_better_checkpoint(tmp_path, tokenizer_json, capsys):
    run = fake_run(tmp_path, tokenizer_json, best_loss=2.5, averaged_loss=2.4)
    out = tmp_path / "pkg"
    assert main(["export", str(run), str(out), "-q"]) == 0
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if "exporting" in x]
    assert len(lines) == 1 and "exporting averaged/" in lines[0] and "2.4000" in lines[0]
    assert (out / "config.json").is_file()


def test_the_library_exports_a_run_folder_too(tmp_path, tokenizer_json):
    """export_package takes a run folder as the command does, and says which checkpoint on
    the `edgeformer` logger."""
    import logging

    from edgeformer.export import export_package

    run = fake_run(tmp_path, tokenizer_json, best_loss=2.3, averaged_loss=2.4)
    said: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = said.append  # type: ignore[method-assign]
    logger, level = logging.getLogger("edgeformer"), logging.getLogger("edgeformer").level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        out = export_package(run, tmp_path / "pkg", verbose=False)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert [r.getMessage() for r in said if "exporting" in r.getMessage()] == [
        f"training run {run}: exporting best/ (lower val loss: best/ 2.3000, averaged/ 2.4000)"
    ]
    assert (out / "config.json").is_file()


# ------------------------------------------------------------- an existing OUT (issue 53)

SMALL_FLAGS = [
    "--vocab-size", "200", "--d-model", "16", "--n-heads", "2", "--n-encoder-layers", "1",
    "--n-decoder-layers", "1", "--d-ff", "32", "--max-len", "64", "--batch-tokens", "600",
    "--epochs", "1", "--warmup", "5", "--bleu-sentences", "0", "--samples", "1", "--quiet",
    "--threads", "1",
]  # fmt: skip


def files_of(folder) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones too) and its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def a_run(data_dir, tmp_path_factory):
    """A finished one-epoch run, to copy (each test gets its own)."""
    out = tmp_path_factory.mktemp("a_run") / "run"
    train(small(data_dir, out, seed=1))
    return out


@pytest.fixture
def old_run(a_run, tmp_path):
    out = tmp_path / "runs" / "old"
    shutil.copytree(a_run, out)
    return out


def test_train_into_an_existing_run_refuses_and_touches_nothing(data_dir, old_run, capsys):
    before = files_of(old_run)
    args = ["train", "--data-dir", str(data_dir), "--out", str(old_run), *SMALL_FLAGS]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"{old_run} already holds a training run" in err
    assert f"--resume {old_run / 'last'}" in err and "--out" in err and "--force" in err
    assert files_of(old_run) == before
    assert sorted(p.name for p in old_run.parent.iterdir()) == ["old"]  # nothing beside it


def test_train_into_a_folder_of_other_files_refuses_even_with_force(data_dir, tmp_path, capsys):
    mine = tmp_path / "mine"
    (mine / "best").mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    (mine / "best/model.safetensors").write_bytes(b"not a checkpoint")
    before = files_of(mine)
    args = ["train", "--data-dir", str(data_dir), "--out", str(mine), *SMALL_FLAGS]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{mine} is not empty" in err and "--force" not in err
    assert main([*args, "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--force replaces only a training run" in err
    assert files_of(mine) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_force_replaces_a_run_only_once_the_new_one_has_a_checkpoint(
    data_dir, old_run, monkeypatch
):
    before = files_of(old_run)
    real_val_loss = trainer.translation_val_loss
    seen = []

    def interrupted(run, model, pairs):  # the first epoch's training is done: stop here
        seen.append(files_of(old_run))  # what a kill at this moment would leave in OUT
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "translation_val_loss", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(small(data_dir, old_run, seed=2), force=True)
    assert seen and {k: v for k, v in seen[0].items() if k != LOCK} == before
    assert files_of(old_run) == before  # intact, and nothing left beside it
    assert sorted(p.name for p in old_run.parent.iterdir()) == ["old"]
    from edgeformer.export.cli import pick_checkpoint
    from edgeformer.models.checkpoint import load_checkpoint

    load_checkpoint(pick_checkpoint(str(old_run))[0])  # what `edgeformer export OLD` reads

    monkeypatch.setattr(trainer, "translation_val_loss", real_val_loss)
    train(small(data_dir, old_run, seed=2), force=True)
    after = files_of(old_run)
    assert after["last/model.safetensors"] != before["last/model.safetensors"]  # the new run
    records = [json.loads(x) for x in after["log.jsonl"].decode().splitlines()]
    assert [r["epoch"] for r in records if "epoch" in r] == [1]  # none of the old run's lines
    assert LOCK not in after
    assert sorted(p.name for p in old_run.parent.iterdir()) == ["old"]


def test_force_takes_exported_packages_but_nothing_else(old_run):
    from edgeformer.core.format import CONFIG_FILE, PACKAGE_FORMAT
    from edgeformer.train.run_folder import not_a_run

    package = old_run / "package"  # `make demo` exports into its run folder
    package.mkdir()
    (package / "decoder.onnx").write_bytes(b"graph")
    files = {"decoder.onnx": "sha256"}
    (package / CONFIG_FILE).write_text(json.dumps({"format": PACKAGE_FORMAT, "files": files}))
    (old_run / ".last.tmp-123-abc").mkdir()  # a killed save's folder
    assert not_a_run(old_run) is None
    (package / "notes.txt").write_text("mine")
    assert not_a_run(old_run) == "package is not one of a training run's files"
    (package / "notes.txt").unlink()
    (old_run / "epochs/notes.txt").write_text("mine")
    assert not_a_run(old_run) == "epochs/notes.txt is not one of a training run's files"


def test_resume_or_force_never_writes_over_another_folder(data_dir, old_run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(old_run, other)
    before = files_of(other)
    with pytest.raises(FileExistsError, match=f"continues the run in {old_run}, but --out"):
        train(small(data_dir, other, resume=str(old_run / "last"), epochs=2))
    teacher = str(other / "best")  # --force would delete the run's own input
    with pytest.raises(FileExistsError, match=f"--force would replace {other}, which holds"):
        train(small(data_dir, other, teacher=teacher), force=True)
    assert files_of(other) == before


def test_distilled_never_overwrites_what_no_distillation_made(data_dir, old_run, tmp_path):
    mine = tmp_path / "mine"  # a user's data where --distilled would write
    mine.mkdir()
    (mine / "train.en").write_text("my own sentences\n")
    teacher = str(old_run / "best")
    with pytest.raises(FileExistsError, match="not a teacher's translations"):
        train(small(data_dir, tmp_path / "new", teacher=teacher, distilled=str(mine)))
    assert (mine / "train.en").read_text() == "my own sentences\n"
    assert not (tmp_path / "new").exists()


# ------------------------------------------------- python -m edgeformer.train.average (issue 52)


def test_average_a_range_of_a_runs_saved_epochs(tmp_path, tokenizer_json, capsys):
    """The mean of epochs 2-3 of a run's saved weights, as training averages (the command that
    made the lab journal's means of stopped runs); a missing epoch is a one-line error."""
    from safetensors.torch import save_model

    from edgeformer.models.checkpoint import load_checkpoint
    from edgeformer.train.average import main as average

    run = tmp_path / "run"
    models = [tiny_model(tokenizer_json, seed=s) for s in (1, 2, 3)]
    save_checkpoint(run / "last", models[2], tokenizer_json, {"task": {"kind": "translation"}})
    (run / "epochs").mkdir()
    for n, m in enumerate(models, 1):
        save_model(m, str(run / "epochs" / f"epoch_{n:03d}.safetensors"))
    assert average([str(run), "--epochs", "2-3", "--out", str(tmp_path / "avg")]) == 0
    got, config = load_checkpoint(tmp_path / "avg")
    assert config["averaged"] == 2 and config["task"] == {"kind": "translation"}
    for name, value in got.state_dict().items():
        mean = (models[1].state_dict()[name].double() + models[2].state_dict()[name].double()) / 2
        assert torch.equal(value, mean.float()), name
    assert average([str(run), "--epochs", "3-4", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert "epoch_004.safetensors" in err and "\n" not in err and not (tmp_path / "b").exists()
