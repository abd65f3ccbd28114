"""Safety (issue 14): what export may replace, and what a package may name.

Each case asserts the exact error class and that nothing else changed on disk.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from edgeformer.core.files import sha256
from edgeformer.runtime import PackageError, Translator
from edgeformer.runtime.package import load_package


def snapshot(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# ---------------------------------------------------------------- export never destroys


@pytest.mark.parametrize("what", ["notes", "file", "checkpoint", "checkpoint-parent"])
def test_force_replaces_packages_only(what, ed_checkpoint, tmp_path):
    from edgeformer.export import export_package

    ckpt = tmp_path / "run" / "best"
    shutil.copytree(ed_checkpoint, ckpt)
    target = {
        "notes": tmp_path / "notes",
        "file": tmp_path / "file.txt",
        "checkpoint": ckpt,
        "checkpoint-parent": tmp_path / "run",
    }[what]
    if what == "notes":
        target.mkdir()
        (target / "todo.md").write_text("mine")
    if what == "file":
        target.write_text("mine")
    before = snapshot(tmp_path)
    error = ValueError if what.startswith("checkpoint") else FileExistsError
    with pytest.raises(error, match="checkpoint|--force replaces only an edgeformer package"):
        export_package(ckpt, target, force=True, verbose=False)
    assert snapshot(tmp_path) == before
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_force_never_replaces_a_package_holding_a_users_file(ed_package, ed_checkpoint, tmp_path):
    """A folder whose config.json says it is a package, but that holds a file the package does
    not list (the user's notes), is not replaced: nothing of the user's is ever deleted."""
    from edgeformer.export import export_package

    pkg = tmp_path / "pkg"
    shutil.copytree(ed_package, pkg)
    (pkg / "notes.md").write_text("mine")
    before = snapshot(tmp_path)
    with pytest.raises(FileExistsError, match="notes.md is not one of the package's files"):
        export_package(ed_checkpoint, pkg, force=True, verbose=False)
    assert snapshot(tmp_path) == before
    (pkg / "notes.md").unlink()  # a package with only its own files is replaced
    export_package(ed_checkpoint, pkg, force=True, verbose=False)


def dead_pid() -> str:
    return subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip


def test_killed_export_leftovers_are_cleaned(ed_checkpoint, tmp_path):
    from edgeformer.export import export_package

    dead, alive = dead_pid(), str(os.getppid())
    stale, running = tmp_path / f".pkg.tmp-{dead}-x", tmp_path / f".pkg.tmp-{alive}-x"
    foreign = tmp_path / ".pkg.tmp-mine"  # no PID: not an export's, left alone
    for folder in (stale, running, foreign):
        folder.mkdir()
    export_package(ed_checkpoint, tmp_path / "pkg", verbose=False)
    assert not stale.exists() and running.exists() and foreign.exists()


@pytest.mark.parametrize("killed", ["after-old-moved-aside", "after-new-moved-in", "old-only"])
def test_a_swap_killed_half_way_is_recovered(killed, ed_package, ed_checkpoint, tmp_path):
    """Export swaps the new package in by renames (new finished aside, old aside, new in, old
    deleted); killed between any two, the next load (or export) finds a whole package, and the
    next export deletes what is left aside."""
    from edgeformer.export import export_package
    from edgeformer.runtime import Translator

    pkg, dead = tmp_path / "pkg", dead_pid()
    new, old = tmp_path / f".pkg.new-{dead}", tmp_path / f".pkg.old-{dead}"
    if killed == "after-old-moved-aside":  # no pkg: the finished new one is renamed in
        shutil.copytree(ed_package, new)
        shutil.copytree(ed_package, old)
        (old / "config.json").write_text("{}")  # tell the two apart
    elif killed == "after-new-moved-in":  # pkg is the new one: the old one is deleted
        shutil.copytree(ed_package, pkg)
        shutil.copytree(ed_package, old)
    else:  # the old one aside, no finished new one: it is put back
        shutil.copytree(ed_package, old)
    want = Translator(ed_package).translate("two dogs .", max_new_tokens=3)
    assert Translator(pkg).translate("two dogs .", max_new_tokens=3) == want
    assert json.loads((pkg / "config.json").read_text()).get("format") == "edgeformer-package"
    assert not new.exists()
    export_package(ed_checkpoint, pkg, force=True, verbose=False)  # the next export tidies up
    assert [p.name for p in tmp_path.iterdir()] == ["pkg"]


def test_disk_full_is_one_line_and_leaves_nothing(ed_checkpoint, tmp_path, capsys, monkeypatch):
    import errno

    from edgeformer.cli import main
    from edgeformer.export import writer

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".pkg.tmp-x"))

    monkeypatch.setattr(writer, "write_graphs", full)
    monkeypatch.setattr("edgeformer.export.exporter.write_graphs", full)
    assert main(["export", str(ed_checkpoint), str(tmp_path / "pkg")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("edgeformer export: error: no space left on the device"), err
    assert "\n" not in err and not list(tmp_path.iterdir())


def test_a_failed_parity_check_leaves_no_package(ed_checkpoint, tmp_path, capsys, monkeypatch):
    from edgeformer.cli import main

    bad = lambda package, checkpoint, variants: dict.fromkeys(variants, 0.5)  # noqa: E731
    monkeypatch.setattr("edgeformer.export.verify.max_diffs", bad)
    assert main(["export", str(ed_checkpoint), str(tmp_path / "pkg"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "fp32 parity check failed" in err and "no package was written" in err
    assert not list(tmp_path.iterdir())


def test_package_files_follow_the_umask(ed_checkpoint, tmp_path):
    from edgeformer.export import export_package

    old = os.umask(0o022)
    try:
        pkg = export_package(ed_checkpoint, tmp_path / "pkg", verbose=False)
    finally:
        os.umask(old)
    assert pkg.stat().st_mode & 0o777 == 0o755
    for f in pkg.iterdir():
        assert f.stat().st_mode & 0o777 == 0o644, f.name


# ---------------------------------------------------------------- a package stays inside itself


def _tamper(src, dst, edit) -> None:
    """Copy a package, let `edit(config)` change its config.json (checksums kept valid)."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config)
    (dst / "config.json").write_text(json.dumps(config))


def _graph(name):
    def edit(config):
        config["variants"]["fp32"]["files"]["decoder"] = name
        config["files"][name] = "0" * 64

    return edit


def _weights(name):
    def edit(config):
        config["variants"]["fp32"]["weights"] = name

    return edit


def _listed(name):
    def edit(config):
        config["files"][name] = "0" * 64

    return edit


OUTSIDE = "secret.onnx"  # a file beside the package


@pytest.mark.parametrize(
    "edit",
    [
        _graph("../secret.onnx"),
        _graph("/etc/passwd"),
        _graph("sub/decoder.onnx"),
        _graph(".."),
        _graph("link.onnx"),  # a symlink out of the package (made below)
        _weights("../weights.data"),
        _weights("unlisted.data"),  # not in the checksum list
        _listed("../../etc/hostname"),
        _listed(""),
    ],
)
def test_package_cannot_reach_outside(edit, ed_package, tmp_path):
    (tmp_path / OUTSIDE).write_bytes(b"outside")
    pkg = tmp_path / "pkg"
    _tamper(ed_package, pkg, edit)
    (pkg / "link.onnx").symlink_to(tmp_path / OUTSIDE)
    with pytest.raises(PackageError, match="not a file name inside the package|checksum list"):
        load_package(pkg)
    with pytest.raises(PackageError):
        Translator(pkg)


def test_escape_error_does_not_reveal_existence(ed_package, tmp_path):
    messages = []
    for target in ("exists.onnx", "missing.onnx"):
        pkg = tmp_path / target.split(".")[0]
        _tamper(ed_package, pkg, _graph(f"../{target}"))
    (tmp_path / "exists.onnx").write_bytes(b"x")
    for folder in ("exists", "missing"):
        with pytest.raises(PackageError) as e:
            load_package(tmp_path / folder)
        messages.append(str(e.value).replace(folder, "X"))
    assert messages[0] == messages[1]


def test_checksums_still_verified(ed_package, tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(ed_package, pkg)
    data = bytearray((pkg / "weights.data").read_bytes())
    data[len(data) // 2] ^= 1
    (pkg / "weights.data").write_bytes(bytes(data))
    with pytest.raises(PackageError, match="checksum mismatch for weights.data"):
        load_package(pkg)
    assert sha256(ed_package / "weights.data") != sha256(pkg / "weights.data")


# ---------------------------------------------------------------- a validated config


def _set(path: str, value):
    def edit(config):
        *parents, key = path.split(".")
        node = config
        for p in parents:
            node = node[p]
        if value is KeyError:
            del node[key]
        else:
            node[key] = value

    return edit


@pytest.mark.parametrize(
    "edit, key",
    [
        (_set("special_tokens.eos_id", "2"), "special_tokens.eos_id must be an integer"),
        (_set("special_tokens.bos_id", -1), "special_tokens.bos_id must be in"),
        (_set("special_tokens.pad_id", 10**6), "special_tokens.pad_id must be in"),
        (_set("special_tokens.eos_id", True), "special_tokens.eos_id must be an integer"),
        (_set("special_tokens", [0, 1, 2]), "special_tokens must be a JSON object"),
        (_set("model.decoder_layers", "2"), "model.decoder_layers must be an integer"),
        (_set("model.num_attention_heads", 0), "model.num_attention_heads must be in"),
        (
            _set("model.max_position_embeddings", 2.5),
            "model.max_position_embeddings must be an integer",
        ),
        (_set("model.hidden_size", 30), "not divisible"),
        (_set("model.decoder_layers", 10**9), "model.decoder_layers must be in"),
        (_set("model.max_position_embeddings", 10**12), "model.max_position_embeddings must be in"),
        (_set("model.vocab_size", KeyError), "model.vocab_size must be an integer"),
        (_set("model", None), "model must be a JSON object"),
        (_set("family", "seq2seq"), "family must be one of"),
        (_set("format_version", 1), "format_version 1"),
        (_set("format", "other"), "not an edgeformer model package"),
        (_set("graphs.decoder.inputs", ["input_ids"]), "graphs do not match"),
        (_set("variants.fp32.files", ["decoder.onnx"]), "variants.fp32.files must be"),
        (_set("variants.fp32.files.decoder", 3), "variants.fp32.files.decoder must be a string"),
        (_set("variants.fp32.weights", KeyError), "variants.fp32.weights must be a file name"),
        (_set("variants", {}), "variants has no fp32"),
        (_set("files", "weights.data"), "files must be a JSON object"),
        (_set("min_onnxruntime", 1.2), "min_onnxruntime must be a version string"),
        (_set("task", []), "task must be a JSON object"),
        # a translator's frame and languages (core/languages.py)
        (_set("task.languages", {"deu_Latn": 10**6}), "task.languages must map language codes"),
        (_set("task.languages", {"": 5}), "task.languages must map language codes"),
        (_set("task.languages", {"x" * 65: 5}), "task.languages must map language codes"),
        (_set("task.languages", {"deu_Latn": -1}), "task.languages must map language codes"),
        (_set("task.languages", ["deu_Latn"]), "task.languages must map language codes"),
        (_set("task.languages", None), "task.languages must map language codes"),
        (_set("task.source_lang", "xx_Yyyy"), "task.source_lang 'xx_Yyyy' is not in"),
        (_set("task.source_lang", ["x"]), "is not in task.languages"),
        (_set("task.source_prefix", [0, "1"]), "task.source_prefix must be a list of token ids"),
        (_set("task.source_prefix", 5), "task.source_prefix must be a list of token ids"),
        (_set("task.source_suffix", [10**6]), "task.source_suffix must be a list of token ids"),
        (_set("task.source_suffix", [2] * 17), "task.source_suffix lists 17 ids"),
        (_set("task.target_lang_position", "end"), "task.target_lang_position must be"),
        (_set("task.target_lang_position", None), "task.target_lang_position must be"),
    ],
)
def test_config_schema(edit, key, ed_package, tmp_path):
    pkg = tmp_path / "pkg"
    _tamper(ed_package, pkg, edit)
    before = snapshot(tmp_path)
    with pytest.raises(PackageError, match=key.replace(".", r"\.").replace("(", r"\(")):
        Translator(pkg)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("text", ["[1, 2]", "{", "null", '"a string"', "\udcff"])
def test_config_not_an_object(text, ed_package, tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(ed_package, pkg)
    (pkg / "config.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(PackageError, match="config.json"):
        Translator(pkg)


def test_min_onnxruntime_is_enforced(ed_package, tmp_path):
    pkg = tmp_path / "pkg"
    _tamper(ed_package, pkg, _set("min_onnxruntime", "99.0.0"))
    with pytest.raises(PackageError, match="needs onnxruntime >= 99.0.0"):
        Translator(pkg)


# ---------------------------------------------------------------- bad text never costs good text
# (issue 14, item 4) and options mean the same everywhere (item 5)

import io  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from edgeformer.core.decoding import DecodeInputs, beam_search, generate  # noqa: E402
from edgeformer.runtime import GenerationOptions, Generator  # noqa: E402

GOOD = ["two dogs .", "a man rides a bike ."]
LONG = "two dogs play in the snow . " * 20  # > max_len 64 tokens
NEW = ["--max-new-tokens", "4"]


@pytest.fixture(scope="module")
def tr(ed_package):
    return Translator(ed_package, threads=1)


@pytest.fixture(scope="module")
def gen(lm_package):
    return Generator(lm_package, threads=1)


def _cli(argv, capsys, monkeypatch, stdin: bytes | None = None):
    from edgeformer.cli import main

    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


BAD_LINES = {
    "invalid-start-byte": (b"\xff\xfe bad", "not valid UTF-8 (byte 0xff at byte 1)"),
    "cut-multibyte": (b"caf\xc3", "not valid UTF-8 (byte 0xc3 at byte 4)"),
    "encoded-surrogate": (b"a \xed\xb2\x80 b", "not valid UTF-8 (byte 0xed at byte 3)"),
    "overlong-encoding": (b"x\xc0\xaf", "not valid UTF-8 (byte 0xc0 at byte 2)"),
    "latin-1": ("grüße".encode("latin-1"), "not valid UTF-8 (byte 0xfc at byte 3)"),
    "too-long": (
        LONG.encode(),
        "source of 142 tokens (with EOS) is longer than the model's max_len",
    ),
}


@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize("kind", list(BAD_LINES))
def test_cli_translate_bad_line_costs_nothing_else(kind, position, tr, ed_package, capsys,
                                                   monkeypatch):  # fmt: skip
    bad, reason = BAD_LINES[kind]
    lines = [g.encode() for g in GOOD]
    lines.insert(position, bad)
    code, out, err = _cli(["translate", ed_package, *NEW], capsys, monkeypatch,
                          b"\n".join(lines) + b"\n")  # fmt: skip
    expected = tr.translate_batch(GOOD, max_new_tokens=4)
    expected.insert(position, "")
    assert code == 1
    assert out.split("\n")[:-1] == expected
    assert f"edgeformer translate: line {position + 1}: {reason}" in err
    assert err.count("line ") == 1


@pytest.mark.parametrize("kind", list(BAD_LINES))
def test_cli_translate_bad_line_across_batches(kind, tr, ed_package, capsys, monkeypatch):
    bad, reason = BAD_LINES[kind]
    lines = [GOOD[0].encode(), bad, GOOD[1].encode(), b"", bad]
    argv = ["translate", ed_package, *NEW, "--batch-size", "2"]
    code, out, err = _cli(argv, capsys, monkeypatch, b"\r\n".join(lines))  # CRLF, no final EOL
    good = tr.translate_batch(GOOD, max_new_tokens=4)
    assert code == 1
    assert out.split("\n")[:-1] == [good[0], "", good[1], "", ""]
    assert f"line 2: {reason}" in err and f"line 5: {reason}" in err


def test_cli_translate_truncate_keeps_long_lines(tr, ed_package, capsys, monkeypatch):
    data = "\n".join([GOOD[0], LONG, GOOD[1]]).encode() + b"\n"
    code, out, err = _cli(["translate", ed_package, *NEW, "--truncate"], capsys, monkeypatch, data)
    assert code == 0 and "line " not in err
    assert out.split("\n")[:-1] == tr.translate_batch([GOOD[0], LONG, GOOD[1]], truncate=True,
                                                      max_new_tokens=4)  # fmt: skip
    code, out, err = _cli(["translate", ed_package, *NEW, "--truncate"], capsys, monkeypatch,
                          data + b"\xff\n")  # fmt: skip
    assert code == 1 and "line 4: not valid UTF-8" in err and out.split("\n")[3] == ""


def test_cli_translate_nbest_bad_line(tr, ed_package, capsys, monkeypatch):
    data = b"\n".join([GOOD[0].encode(), b"\xff", GOOD[1].encode()]) + b"\n"
    code, out, err = _cli(["translate", ed_package, *NEW, "--n-best", "2"], capsys, monkeypatch,
                          data)  # fmt: skip
    rows = [line.split("\t") for line in out.splitlines()]
    assert code == 1 and "line 2: not valid UTF-8" in err
    assert [r[0] for r in rows] == ["0", "0", "1", "2", "2"] and rows[2][1:] == ["nan", ""]
    hyps = tr.translate_batch_nbest(GOOD, max_new_tokens=4, num_beams=2, num_hypotheses=2)
    assert [r[2] for r in rows if r[0] == "2"] == [t for t, _ in hyps[1]]


@pytest.mark.parametrize("bad", [b"\xff", b"caf\xc3", b"\xed\xa0\x80", LONG.encode()])
def test_cli_generate_bad_line(bad, gen, lm_package, capsys, monkeypatch):
    data = b"\n".join([b"two dogs", bad, b"a man"]) + b"\n"
    code, out, err = _cli(["generate", lm_package, *NEW], capsys, monkeypatch, data)
    expected = [p + gen.generate(p, max_new_tokens=4) for p in ("two dogs", "a man")]
    assert code == 1
    assert out.split("\n")[:-1] == [expected[0], "", expected[1]]
    reason = "prompt of" if bad == LONG.encode() else "not valid UTF-8"
    assert f"edgeformer generate: line 2: {reason}" in err


def test_cli_argument_with_surrogate(tr, ed_package, capsys, monkeypatch):
    code, out, err = _cli(["translate", ed_package, GOOD[0], "a \udcff b", *NEW], capsys,
                          monkeypatch)  # fmt: skip
    assert code == 1
    assert out.split("\n")[:-1] == [tr.translate(GOOD[0], max_new_tokens=4), ""]
    assert "line 2: not valid Unicode text: lone surrogate U+DCFF at character 3" in err


# ---------------------------------------------------------------- the API: one error per item

BADU = "not valid Unicode text: lone surrogate U+DCFF at character 3"
SUR = "a \udcff b"
TOO_LONG = "source of 142 tokens (with EOS) is longer than the model's max_len 64 "
TOO_LONG_LM = "prompt of 141 tokens is longer than the model's max_len 64 "


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda t, g: t.translate_batch("two dogs ."), "texts must be a list of strings (got str)"),
        (lambda t, g: t.translate_batch_nbest("ab"), "texts must be a list of strings (got str)"),
        (lambda t, g: t.translate_batch(b"ab"), "texts must be a list of strings (got bytes)"),
        (lambda t, g: t.translate_batch(None), "texts must be a list of strings (got NoneType)"),
        (lambda t, g: g.generate_batch("ab"), "prompts must be a list of strings (got str)"),
        (lambda t, g: t.translate_batch(["x", 5]), "texts[1]: must be a string (got int)"),
        (lambda t, g: t.translate_batch(["x", None]), "texts[1]: must be a string (got NoneType)"),
        (lambda t, g: t.translate_batch([b"x"]), "texts[0]: must be a string (got bytes)"),
        (lambda t, g: t.translate_batch(["x", SUR]), f"texts[1]: {BADU}"),
        (lambda t, g: t.translate(SUR), f"texts[0]: {BADU}"),
        (lambda t, g: t.translate_batch_nbest(["", SUR]), f"texts[1]: {BADU}"),
        (lambda t, g: t.translate_batch(["x", "y", LONG]), f"texts[2]: {TOO_LONG}"),
        (lambda t, g: t.translate_batch_nbest([LONG]), "texts[0]: source of 142 tokens"),
        (lambda t, g: g.generate_batch(["x", 3.5]), "prompts[1]: must be a string (got float)"),
        (lambda t, g: g.generate_batch([SUR]), f"prompts[0]: {BADU}"),
        (lambda t, g: g.generate_batch(["x", LONG]), f"prompts[1]: {TOO_LONG_LM}"),
        (lambda t, g: "".join(g.stream(SUR)), f"prompts[0]: {BADU}"),
        (lambda t, g: t.score_batch([SUR], ["x"]), f"sources[0]: {BADU}"),
        (lambda t, g: g.score_batch(["two dogs", 1]), "texts[1]: must be a string (got int)"),
    ],
)  # fmt: skip
def test_api_invalid_item(call, message, tr, gen):
    before = tr.translate(GOOD[0], max_new_tokens=4)
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        call(tr, gen)
    assert tr.translate(GOOD[0], max_new_tokens=4) == before


@pytest.mark.parametrize("blank", [" ", "   ", "\t", " \t\n ", "\u3000", "\u00a0 "])
def test_whitespace_only_is_empty(blank, tr, gen):
    assert tr.translate(blank) == ""
    assert tr.translate_batch([GOOD[0], blank], max_new_tokens=4)[1] == ""
    assert tr.translate_batch_nbest([blank])[0] == [("", 0.0)]
    assert gen.prompt_ids(blank) == [gen.model.bos_id]


def test_empty_batches_give_empty_lists(tr, gen):
    assert tr.translate_batch([]) == [] and tr.translate_batch_nbest([]) == []
    assert gen.generate_batch([]) == []
    assert gen.score_batch([]) == []
    assert tr.score_batch([], []) == []


def test_cut_warning_once_per_object(ed_package, lm_package):
    for model in (Translator(ed_package, threads=1), Generator(lm_package, threads=1)):
        call = model.translate if isinstance(model, Translator) else model.generate
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for asked in (100, 100, 200):
                call("two dogs", max_new_tokens=asked)
        assert len(caught) == 1, [str(w.message) for w in caught]
        assert "max_new_tokens=100 cut to" in str(caught[0].message)


# ---------------------------------------------------------------- options: one validation

OPTION_ERRORS = [
    (dict(max_new_tokens=2.5), "max_new_tokens=2.5 must be an integer or None (got float)"),
    (dict(max_new_tokens=True), "max_new_tokens=True must be an integer or None (got bool)"),
    (dict(max_new_tokens=0), "max_new_tokens=0 must be >= 1 (or None: the model's length)"),
    (dict(sliding_window=True), "sliding_window needs max_new_tokens"),
    (dict(max_new_tokens=np.float64(3)), "max_new_tokens=np.float64(3.0) must be an integer"),
    (dict(min_new_tokens=1.5), "min_new_tokens=1.5 must be an integer (got float)"),
    (dict(top_k=2.0), "top_k=2.0 must be an integer (got float)"),
    (dict(top_k=None), "top_k=None must be an integer (got NoneType)"),
    (dict(num_beams=2.0), "num_beams=2.0 must be an integer (got float)"),
    (dict(num_hypotheses=True), "num_hypotheses=True must be an integer (got bool)"),
    (dict(seed=-1), "seed=-1 must be >= 0 (or None)"),
    (dict(seed=1.5), "seed=1.5 must be an integer or None (got float)"),
    (dict(seed=True), "seed=True must be an integer or None (got bool)"),
    (dict(seed="1"), "seed='1' must be an integer or None (got str)"),
    (dict(temperature=1e-30), "temperature=1e-30 must be >= 0.0001"),
    (dict(temperature=1e-5, sampling=True), "temperature=1e-05 must be >= 0.0001"),
    (dict(temperature=math.inf), "temperature=inf must be finite"),
    (dict(temperature="1"), "temperature='1' must be a number (got str)"),
    (dict(temperature=True), "temperature=True must be a number (got bool)"),
    (dict(length_penalty=math.nan), "length_penalty=nan must be finite"),
    (dict(length_penalty=math.inf), "length_penalty=inf must be finite"),
    (dict(length_penalty=None), "length_penalty=None must be a number (got NoneType)"),
    (dict(repetition_penalty=math.inf), "repetition_penalty=inf must be finite"),
    (dict(top_p="0.9"), "top_p='0.9' must be a number (got str)"),
    (dict(sampling=1), "sampling=1 must be True or False (got int)"),
    (dict(sampling="yes"), "sampling='yes' must be True or False (got str)"),
    (dict(early_stopping=None), "early_stopping=None must be True or False (got NoneType)"),
    (dict(ignore_eos=0), "ignore_eos=0 must be True or False (got int)"),
]


@pytest.mark.parametrize("kw, message", OPTION_ERRORS, ids=[str(k) for k, _ in OPTION_ERRORS])
def test_option_errors_api(kw, message, tr, gen):
    full = "invalid generation option: " + message
    with pytest.raises(ValueError, match="^" + re.escape(full)):
        GenerationOptions(**kw)
    with pytest.raises(ValueError, match="^" + re.escape(full)):
        tr.translate_batch([GOOD[0]], **kw)
    with pytest.raises(ValueError, match="^" + re.escape(full)):
        gen.generate_batch(["two dogs"], **kw)


CLI_OPTION_ERRORS = [
    ("translate", ["--beam", "0"], "num_beams=0 must be >= 1"),
    ("translate", ["--beam", "-3"], "num_beams=-3 must be >= 1"),
    ("translate", ["--beam", "0", "--n-best", "2"], "num_beams=0 must be >= 1"),
    ("translate", ["--seed", "-1"], "seed=-1 must be >= 0 (or None)"),
    ("translate", ["--sample", "--temperature", "1e-30"], "temperature=1e-30 must be >= 0.0001"),
    ("translate", ["--temperature", "inf"], "temperature=inf must be finite"),
    ("translate", ["--length-penalty", "nan"], "length_penalty=nan must be finite"),
    ("translate", ["--repetition-penalty", "inf"], "repetition_penalty=inf must be finite"),
    ("generate", ["--beam", "0"], "num_beams=0 must be >= 1"),
    ("generate", ["--seed", "-5"], "seed=-5 must be >= 0 (or None)"),
    ("generate", ["--sample", "--temperature", "1e-9"], "temperature=1e-09 must be >= 0.0001"),
]


@pytest.mark.parametrize("command, args, message", CLI_OPTION_ERRORS)
def test_option_errors_cli_match_api(command, args, message, ed_package, lm_package, capsys,
                                     monkeypatch):  # fmt: skip
    pkg = ed_package if command == "translate" else lm_package
    code, out, err = _cli([command, pkg, "two dogs", *args], capsys, monkeypatch)
    assert code == 2 and out == "" and len(err.splitlines()) == 1  # before the model loads
    assert err.startswith(f"edgeformer {command}: error: invalid generation option: {message}")
    with pytest.raises(ValueError, match="^" + re.escape(err.split("error: ", 1)[1].strip())):
        GenerationOptions(**_opts(args))  # the API gives the very same message


def _opts(args):
    """The GenerationOptions keywords that CLI arguments mean."""
    names = {"--beam": "num_beams", "--seed": "seed", "--temperature": "temperature",
             "--length-penalty": "length_penalty",
             "--repetition-penalty": "repetition_penalty"}  # fmt: skip
    kw, i = {}, 0
    while i < len(args):
        if args[i] == "--sample":
            kw["sampling"], i = True, i + 1
        elif args[i] in names:
            value = args[i + 1]
            kw[names[args[i]]] = float(value) if "." in value or "e" in value or value in (
                "inf", "nan") else int(value)  # fmt: skip
            i += 2
        else:
            i += 2
    return kw


# ---------------------------------------------------------------- padding and BOS are never chosen

PAD, BOS, EOS3 = 0, 1, 2


class Favour:
    """A stepper whose logits always favour padding, then BOS, then EOS, then the rest."""

    def __init__(self, n: int, vocab: int = 8):
        self.n, self.vocab = n, vocab

    def logits(self) -> np.ndarray:
        row = np.linspace(0.0, -1.0, self.vocab, dtype=np.float32)
        row[:3] = [5.0, 4.0, -3.0]
        return np.tile(row, (self.n, 1))

    def step(self, tokens):
        self.n = len(tokens)
        return self.logits()

    def select(self, rows):
        self.n = len(rows)


@pytest.mark.parametrize(
    "kw",
    [dict(), dict(sampling=True, seed=0, temperature=5.0), dict(num_beams=3, num_hypotheses=3),
     dict(sampling=True, seed=1, top_k=2), dict(repetition_penalty=1.3, min_new_tokens=2)],
)  # fmt: skip
def test_pad_and_bos_never_chosen(kw):
    opts = GenerationOptions(max_new_tokens=6, **kw)
    m = Favour(2)
    out = generate(m.logits(), m, opts, DecodeInputs(EOS3, banned=(PAD, BOS)))
    assert len(out) == 2 and all(out) and not {PAD, BOS} & {t for row in out for t in row}
    if opts.num_beams > 1:
        m = Favour(2)
        for hyps in beam_search(m.logits(), m, opts, DecodeInputs(EOS3, banned=(PAD, BOS))):
            assert not {PAD, BOS} & {t for h in hyps for t in h.tokens}


def test_nothing_left_to_choose_is_a_clear_error():
    m = Favour(1, vocab=3)  # only PAD, BOS, EOS; EOS banned by min_new_tokens
    for kw in (dict(), dict(sampling=True, seed=0)):
        opts = GenerationOptions(max_new_tokens=3, min_new_tokens=2, **kw)
        with pytest.raises(ValueError, match="^no token can be chosen: every token is banned"):
            generate(m.logits(), m, opts, DecodeInputs(EOS3, banned=(PAD, BOS)))


def test_runtime_text_api_bans_pad_and_bos(tr, gen):
    assert tr.banned_ids == (tr.model.pad_id, tr.model.bos_id)
    sources = [tr.source_ids(t) for t in GOOD + ["zwei hunde spielen ."]]
    for kw in (dict(), dict(num_beams=3), dict(sampling=True, seed=0, temperature=3.0)):
        opts = GenerationOptions(max_new_tokens=12, **kw)
        ids = tr.translate_ids(sources, opts, tr.banned_ids)
        assert not {0, 1} & {t for row in ids for t in row}
        texts = tr.translate_batch(GOOD + ["zwei hunde spielen ."], max_new_tokens=12, **kw)
        assert texts == [tr.model.decode(row) for row in ids]
    opts = GenerationOptions(max_new_tokens=20, sampling=True, seed=0, temperature=5.0,
                             ignore_eos=True)  # fmt: skip
    ids = gen.generate_ids([[5, 6], [7]], opts, gen.banned_ids)
    assert not {0, 1} & {t for row in ids for t in row}


# ---------------------------------------------------------------- properties

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

VALUES = st.one_of(
    st.integers(-5, 300), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
    st.none(), st.text(max_size=3), st.floats(0, 1e-3),
)  # fmt: skip
FIELDS = [f for f in GenerationOptions.__dataclass_fields__]


@hypothesis.settings(max_examples=50, deadline=None)
@hypothesis.given(st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=4))
def test_property_options_validate_or_value_error(kw):
    try:
        opts = GenerationOptions(**kw)
    except ValueError as e:
        assert str(e).startswith("invalid generation option: ")
        return
    n = opts.max_new_tokens  # None: the model's whole length, fitted per request
    assert n is None or (isinstance(n, int) and n >= 1 and opts.min_new_tokens <= n)


TEXTS = st.one_of(
    st.text(max_size=12), st.text(alphabet=" \t\n\u3000", max_size=4),
    st.sampled_from(["\ud800", "a \udcff", "two dogs .", "", LONG]),
    st.text(alphabet=st.characters(codec=None, categories=["Cs", "Zs", "Ll"]), max_size=6),
)  # fmt: skip


@hypothesis.settings(max_examples=50, deadline=None)
@hypothesis.given(st.lists(TEXTS, max_size=4))
def test_property_translate_batch_returns_or_names_index(tr, tr_texts):
    try:
        out = tr.translate_batch(tr_texts, max_new_tokens=2)
    except ValueError as e:
        match = re.match(r"texts\[(\d+)\]: ", str(e))
        assert match, str(e)
        i = int(match.group(1))
        assert tr_texts[i] == LONG or any(0xD800 <= ord(c) <= 0xDFFF for c in tr_texts[i])
        return
    assert len(out) == len(tr_texts) and all(isinstance(t, str) for t in out)
    for text, result in zip(tr_texts, out):
        if not text.strip():
            assert result == ""


@hypothesis.settings(max_examples=15, deadline=None)
@hypothesis.given(st.lists(st.binary(max_size=8).map(lambda b: b.translate(None, b"\r\n")),
                           min_size=1, max_size=4))  # fmt: skip
def test_property_cli_one_output_line_per_input_line(ed_package, lines):
    import contextlib

    from edgeformer.cli import main

    stdin = io.TextIOWrapper(io.BytesIO(b"\n".join(lines) + b"\n"), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin
    sys.stdin = stdin
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["translate", str(ed_package), "--max-new-tokens", "2"])
    finally:
        sys.stdin = old
    bad = sum(1 for b in lines if not _utf8(b))
    assert code == (1 if bad else 0)
    assert len(out.getvalue().split("\n")) - 1 == len(lines)
    assert err.getvalue().count(": line ") == bad


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# ---------------------------------------------------------------- damaged packages, more kinds


def _rewrite_graph(pkg, name, edit) -> None:
    """Edit a graph file of a package with `edit(proto)` and keep its checksum valid."""
    import onnx

    proto = onnx.load(str(pkg / name), load_external_data=False)
    edit(proto)
    onnx.save_model(proto, str(pkg / name))
    config = json.loads((pkg / "config.json").read_text())
    config["files"][name] = sha256(pkg / name)
    (pkg / "config.json").write_text(json.dumps(config))


def _external(proto):
    return next(t for t in proto.graph.initializer if t.external_data)


def _escape(location):
    def edit(proto):
        for entry in _external(proto).external_data:
            if entry.key == "location":
                entry.value = location

    return edit


@pytest.mark.parametrize(
    "damage, error",
    [
        ("truncate weights", "checksum mismatch for weights.data"),
        ("empty weights", "checksum mismatch for weights.data"),
        ("delete tokenizer", "missing tokenizer.json"),
        ("unlist tokenizer", "'tokenizer.json' is not in the checksum list"),
        ("truncate graph", "checksum mismatch for decoder.onnx"),
        ("graph data escapes with ..", "decoder.onnx reads the weights file '../weights.data'"),
        ("graph data absolute", "decoder.onnx reads the weights file '/"),
        ("graph not onnx", "decoder.onnx is not an ONNX graph"),
    ],
)
def test_damaged_package_matrix(damage, error, ed_package, tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(ed_package, pkg)
    (tmp_path / "weights.data").write_bytes((pkg / "weights.data").read_bytes())  # an outside copy
    if damage == "truncate weights":
        data = (pkg / "weights.data").read_bytes()
        (pkg / "weights.data").write_bytes(data[: len(data) // 2])
    elif damage == "empty weights":
        (pkg / "weights.data").write_bytes(b"")
    elif damage == "delete tokenizer":
        (pkg / "tokenizer.json").unlink()
    elif damage == "unlist tokenizer":
        config = json.loads((pkg / "config.json").read_text())
        del config["files"]["tokenizer.json"]
        (pkg / "config.json").write_text(json.dumps(config))
    elif damage == "truncate graph":
        (pkg / "decoder.onnx").write_bytes((pkg / "decoder.onnx").read_bytes()[:100])
    elif damage == "graph data escapes with ..":
        _rewrite_graph(pkg, "decoder.onnx", _escape("../weights.data"))
    elif damage == "graph data absolute":
        _rewrite_graph(pkg, "decoder.onnx", _escape(str(tmp_path / "weights.data")))
    elif damage == "graph not onnx":
        (pkg / "decoder.onnx").write_bytes(b"not an onnx graph at all")
        config = json.loads((pkg / "config.json").read_text())
        config["files"]["decoder.onnx"] = sha256(pkg / "decoder.onnx")
        (pkg / "config.json").write_text(json.dumps(config))
    before = snapshot(tmp_path)
    with pytest.raises(PackageError, match=error.replace(".", r"\.")):
        Translator(pkg)
    assert snapshot(tmp_path) == before


def test_any_config_value_is_accepted_or_a_package_error(ed_package, tmp_path):
    """Property: whatever value lands in whichever config key, loading ends in a PackageError
    or a working package, never another exception."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    pkg = tmp_path / "pkg"
    shutil.copytree(ed_package, pkg)
    original = json.loads((pkg / "config.json").read_text())
    paths = [("model", k) for k in original["model"]] + [
        ("special_tokens", k) for k in original["special_tokens"]
    ] + [(k,) for k in original if k not in ("files",)]  # fmt: skip
    values = st.one_of(
        st.none(), st.booleans(), st.integers(-3, 10**9), st.floats(allow_nan=True),
        st.text(max_size=8), st.lists(st.integers(), max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )  # fmt: skip

    @hypothesis.settings(max_examples=60, deadline=None)
    @hypothesis.given(path=st.sampled_from(paths), value=values)
    def check(path, value):
        config = json.loads(json.dumps(original))
        node = config
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        (pkg / "config.json").write_text(json.dumps(config))
        try:
            load_package(pkg, verify=False)
        except PackageError:
            pass

    check()
