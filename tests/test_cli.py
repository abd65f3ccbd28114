"""The command line as a user meets it: help texts, defaults equal to the API's, files, extras."""

from __future__ import annotations

import argparse
import importlib
import io
import os
import re
import sys

import pytest

from edgeformer.cli import COMMANDS, DESCRIPTION, main
from edgeformer.runtime import Generator, Translator

TEXTS = ["two dogs play in the snow .", "a man rides a bike .", "", "a woman sings ."]


def parser_of(command: str) -> argparse.ArgumentParser:
    if command == "bench":  # edgeformer-bench's: not on a runtime-only install
        pytest.importorskip("edgeformer.benchmarks", reason="needs edgeformer-bench")
    load, _ = COMMANDS[command]
    parser = argparse.ArgumentParser()
    load().add_arguments(parser, command)
    return parser


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_flag_says_its_default_and_meaning(command):
    for action in parser_of(command)._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        if action.help == argparse.SUPPRESS:  # an older spelling kept as a hidden alias
            assert any(a.dest == action.dest and a.help != argparse.SUPPRESS
                       for a in parser_of(command)._actions), action.option_strings  # fmt: skip
            continue
        text = action.help or ""
        assert "(default: " in text and len(text.split("(default: ")[0]) > 10, (
            command, action.option_strings, text,
        )  # fmt: skip


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_names_only_the_commands_own_flags(command):
    """A flag's help names other flags of the same command only (generate's --batch-size once
    described --batch-type, which only translate has)."""
    parser = parser_of(command)
    flags = {f for a in parser._actions for f in a.option_strings}
    for action in parser._actions:
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]", action.help or ""))
        assert named <= flags, (command, action.option_strings, named - flags)


def test_top_level_help_says_what_it_is(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert DESCRIPTION in out and "Subcommands live" not in out
    for command in COMMANDS:
        assert command in out


def stdin_lines(monkeypatch, lines: list[str]) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


@pytest.fixture(scope="module")
def long_package(tmp_path_factory, tokenizer_json):
    """A random-weight translator of max_len 200: its outputs loop to the length limit, so a
    different max_new_tokens default (64 in the API, 128 in the CLI, once) would show."""
    import torch
    from tokenizers import Tokenizer

    from edgeformer.export import export_package
    from edgeformer.models import ModelConfig, build_model
    from edgeformer.models.checkpoint import save_checkpoint

    torch.manual_seed(0)
    vocab = Tokenizer.from_file(str(tokenizer_json)).get_vocab_size()
    cfg = ModelConfig(vocab_size=vocab, d_model=32, n_heads=4, n_encoder_layers=1,
                      n_decoder_layers=1, d_ff=64, dropout=0.0, max_len=200)  # fmt: skip
    root = tmp_path_factory.mktemp("long")
    ckpt = save_checkpoint(root / "ckpt", build_model(cfg).eval(), tokenizer_json)
    return export_package(ckpt, root / "pkg", verbose=False)


def test_cli_and_api_share_their_defaults(long_package, lm_package, capsys, monkeypatch):
    """No flags, no options: the same translations and continuations, up to the model's
    whole length (max_len - 1 target tokens)."""
    stdin_lines(monkeypatch, TEXTS)
    assert main(["translate", str(long_package)]) == 0
    cli = capsys.readouterr().out.splitlines()
    translator = Translator(long_package)
    assert cli == translator.translate_batch(TEXTS)
    ids = translator.translate_ids([translator.source_ids(TEXTS[0])])[0]
    assert len(ids) == 200  # this random model never ends: all the positions allow
    assert main(["generate", str(lm_package), "two dogs"]) == 0
    out = capsys.readouterr().out.rstrip("\n")
    assert out == "two dogs" + Generator(lm_package).generate("two dogs")


def test_a_lone_file_argument_is_refused_with_a_hint(ed_package, tmp_path, capsys, monkeypatch):
    src = tmp_path / "test.en"
    src.write_text("\n".join(TEXTS) + "\n")
    monkeypatch.chdir(tmp_path)
    assert main(["translate", str(ed_package), "test.en"]) == 2
    err = capsys.readouterr().err
    assert "'test.en' is a file" in err and "--input test.en" in err
    assert main(["generate", str(ed_package), "test.en"]) == 2
    assert "--input test.en" in capsys.readouterr().err


def test_input_and_output_files(ed_package, tmp_path, capsys):
    src, out = tmp_path / "test.en", tmp_path / "test.de"
    src.write_text("\n".join(TEXTS) + "\n")
    args = ["translate", str(ed_package), "--input", str(src), "--max-new-tokens", "5"]
    assert main([*args, "--output", str(out)]) == 0
    want = Translator(ed_package).translate_batch(TEXTS, max_new_tokens=5)
    assert out.read_text().splitlines() == want
    assert capsys.readouterr().out == ""
    assert main(args) == 0  # --input alone: to stdout
    assert capsys.readouterr().out.splitlines() == want
    assert main([*args, "--output", str(src)]) == 2  # never over its own input
    assert "is the --input file" in capsys.readouterr().err
    assert src.read_text().splitlines() == TEXTS
    assert main(["translate", str(ed_package), "x", "--input", str(src)]) == 2
    assert "not both" in capsys.readouterr().err


def test_a_hugging_face_id_is_never_downloaded_and_says_how_to_fetch_it(
    tmp_path, capsys, monkeypatch
):
    """A package given as a Hugging Face id: one line saying ids are never downloaded, the
    command that fetches the folder and the export that makes it a package; a missing path
    inside a folder that exists (packages/x) is only missing."""
    monkeypatch.chdir(tmp_path)
    assert main(["translate", "Helsinki-NLP/opus-mt-en-de", "A man."]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert (
        "never downloads" in err and "`huggingface-cli download Helsinki-NLP/opus-mt-en-de" in err
    )
    assert "`edgeformer export DIR PACKAGE_DIR`" in err, err
    (tmp_path / "packages").mkdir()
    assert main(["translate", "packages/m30k", "A man."]) == 2
    err = capsys.readouterr().err
    assert "packages/m30k is not a folder" in err and "Hugging Face" not in err, err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("command, unit", [("translate", "sentences"), ("generate", "prompts"),
                                           ("score", "texts")])  # fmt: skip
def test_long_work_shows_a_bar_and_a_summary_on_a_terminal_none_on_a_pipe(
    command, unit, ed_package, lm_package, tmp_path, capsys, monkeypatch
):
    """translate / generate / score over a file: on a terminal a bar and one summary line
    (count, time, rate); with stderr a pipe, nothing but the command's own lines."""
    src, out = tmp_path / "big.en", tmp_path / "big.out"
    lines = [t or "x" for t in TEXTS] * 5
    if command == "score":
        lines = [f"{t}\t{t}" for t in lines]
    src.write_text("\n".join(lines) + "\n")
    package = lm_package if command == "generate" else ed_package
    args = [command, str(package), "--input", str(src)]
    args += ["--output", str(out), "--max-new-tokens", "4"] if command != "score" else []
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(args) == 0
    last = terminal.getvalue().splitlines()[-1 if command != "score" else -2]
    assert re.fullmatch(rf"{command} big.en: 20 {unit} in \d+ s, [\d,.]+ {unit}/s", last), last
    if command != "score":
        assert len(out.read_text().splitlines()) >= 20
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    assert main(args) == 0
    assert f"{unit} in" not in pipe.getvalue() and "\r" not in pipe.getvalue()


def test_a_failed_output_leaves_nothing(ed_package, tmp_path, capsys):
    """A line the model cannot take is reported and the rest still written (exit 1); an error
    that stops the run leaves no half-written --output."""
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_bytes(b"two dogs .\n\xff\xfe\na man .\n")
    assert main(["translate", str(ed_package), "--input", str(src), "--output", str(out)]) == 1
    assert "line 2: not valid UTF-8" in capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 3
    out.unlink()
    args = ["translate", str(ed_package), "--input", str(src), "--output", str(out)]
    assert main([*args, "--variant", "int4", "--threads", "0"]) == 2
    assert not out.exists() and not list(tmp_path.glob(".out.txt*"))


def test_a_killed_outputs_temporary_file_is_cleaned_by_the_next_run(ed_package, tmp_path):
    """`translate --output F` killed (-9) leaves .F.tmp-PID; the next run deletes those of
    processes that are gone, never a running one's or a file that is not such a leftover."""
    import subprocess

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    out = tmp_path / "out.txt"
    stale, running = tmp_path / f".out.txt.tmp-{dead}", tmp_path / f".out.txt.tmp-{os.getppid()}"
    mine = tmp_path / ".out.txt.tmp-notes"
    for f in (stale, running, mine):
        f.write_text("two dogs\n")
    assert main(["translate", str(ed_package), "two dogs .", "--output", str(out)]) == 0
    assert out.is_file() and not stale.exists() and running.exists() and mine.exists()


EXTRA_COMMANDS = {
    "train": ["train"],
    "export": ["export", "ckpt", "pkg"],
    "convert": ["convert", "hf", "src", "ckpt"],
    "bench": ["bench"],
}


@pytest.mark.parametrize("command", list(EXTRA_COMMANDS))
def test_commands_without_their_extra_say_what_to_install(command, capsys, monkeypatch):
    """On a runtime-only install (no torch) these print one line naming the extra (exit 2)."""
    real = importlib.util.find_spec

    def no_torch(name, *args):
        return None if name.split(".")[0] == "torch" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", no_torch)
    assert main(EXTRA_COMMANDS[command]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "needs " in err and "torch" in err.split("lacks")[0], err
    assert "pip install torch==2.13.0" in err and "pip install '.[" in err, err
    assert "edgeformer[" not in err  # not on PyPI: the extra installs from a clone


@pytest.mark.parametrize("command", ["translate", "generate", "score"])
def test_a_full_disk_under_stdout_says_what_was_written(
    command, ed_package, lm_package, tmp_path, capsys, monkeypatch
):
    """`COMMAND > file` on a full disk: the file keeps a cut last line, so the message must
    not claim that nothing was left half-written; it says what the file holds. Every command
    (core.commandline.NamedStdout), not only those writing through runtime.commands.output."""
    import errno

    package = ed_package if command == "translate" else lm_package
    out = tmp_path / "out.txt"
    with open(out, "w", encoding="utf-8") as f:

        def write(text: str) -> int:
            f.buffer.write(text.encode()[:3])  # part of a line reached the file
            f.buffer.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(f, "write", write, raising=False)
        monkeypatch.setattr(sys, "stdout", f)
        assert main([command, str(package), "two dogs .", "a man ."]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "nothing was left half-written" not in err
    assert "standard output holds the first 3 bytes of the output" in err, err


def test_a_typo_gets_one_line_with_close_matches(capsys):
    """A mistyped preset, subcommand or flag: one error line naming what is close, not the
    command's whole usage (train's is ~45 lines)."""
    for argv, close in (
        (["train", "--preset", "tinny"], "did you mean tiny?"),
        (["train", "--preset", "multi30k-en-de-cpu-lng"], "did you mean multi30k-en-de-cpu-long"),
        (["tranlsate", "x"], "did you mean translate?"),
        (["translate", "pkg", "--beem", "5", "a text"], "did you mean --beam"),
        (["generate", "pkg", "--max-new-tokns=5"], "did you mean --max-new-tokens"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and close in err, (argv, err)
        assert len(err.strip().splitlines()) <= 2, err  # usage (when short) + the error
    with pytest.raises(SystemExit):
        main(["train", "--preset", "nope"])
    err = capsys.readouterr().err
    assert "did you mean" not in err and "invalid choice: 'nope'" in err
    assert len(err.strip().splitlines()) == 1 and "edgeformer train --help" in err


def test_beam_is_one_flag_across_commands(capsys, monkeypatch):
    """`--beam` in translate and train --evaluate; the other spelling still works, unshown."""
    for command in ("translate", "generate"):
        parser = parser_of(command)
        assert parser.parse_args(["p", "--beams", "4"]).num_beams == 4
        assert parser.parse_args(["p", "--beam", "3"]).num_beams == 3
        assert "--beams" not in parser.format_help()
    train = parser_of("train")
    assert train.parse_args(["--beam", "1,4"]).beams == "1,4"
    assert train.parse_args(["--beams", "5"]).beams == "5"
    assert train.parse_args([]).beams == "1,5"
    assert "--beam N[,N...]" in train.format_help() and "--beams" not in train.format_help()


def test_a_checkpoint_given_for_a_package_names_the_export_command(ed_checkpoint, tmp_path,
                                                                   capsys):  # fmt: skip
    import shutil

    run = tmp_path / "run"
    shutil.copytree(ed_checkpoint, run / "best")
    (run / "log.jsonl").write_text("{}\n")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}')
    for path, what in ((ed_checkpoint, "a training checkpoint"), (run, "a training run folder"),
                       (hf, "a Hugging Face model folder")):  # fmt: skip
        for command in ("translate", "info", "verify"):
            assert main([command, str(path), *(["a"] if command == "translate" else [])]) == 2
            err = capsys.readouterr().err
            assert f"{path} is {what}, not a model package" in err, err
            assert f"edgeformer export {path} PACKAGE_DIR" in err and err.count("\n") == 1, err
