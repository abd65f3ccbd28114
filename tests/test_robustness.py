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

from edgeformer.runtime import PackageError, Translator
from edgeformer.runtime.package import load_package, sha256

pytest.importorskip("torch")


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
    with pytest.raises(error, match="checkpoint|not an edgeformer model package"):
        export_package(ckpt, target, force=True, verbose=False)
    assert snapshot(tmp_path) == before
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_killed_export_leftovers_are_cleaned(ed_checkpoint, tmp_path):
    from edgeformer.export import export_package
    from edgeformer.export.exporter import PID_FILE

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    stale, alive, foreign = (tmp_path / f".pkg.tmp-{k}" for k in ("stale", "alive", "foreign"))
    for folder, pid in ((stale, dead), (alive, str(os.getpid()))):
        folder.mkdir()
        (folder / PID_FILE).write_text(pid)
    foreign.mkdir()  # no PID file: not an export's, left alone
    export_package(ed_checkpoint, tmp_path / "pkg", verbose=False)
    assert not stale.exists() and alive.exists() and foreign.exists()
    assert not (tmp_path / "pkg" / PID_FILE).exists()


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
        (_set("model.n_decoder_layers", "2"), "model.n_decoder_layers must be an integer"),
        (_set("model.n_heads", 0), "model.n_heads must be >= 1"),
        (_set("model.max_len", 2.5), "model.max_len must be an integer"),
        (_set("model.d_model", 30), "not divisible"),
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
