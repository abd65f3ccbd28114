"""`export --format ort`: onnxruntime's ORT-format graphs (mobile and reduced builds), each holding
its weights, with required_operators.config; the same outputs as the ONNX package."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("torch", reason="needs PyTorch (the train extra)")
pytest.importorskip("onnx", reason="needs onnx (the train extra)")
from conftest import VARIANTS

from edgeformer.cli import main
from edgeformer.core.files import sha256
from edgeformer.core.schema import PackageError
from edgeformer.export import export_package
from edgeformer.runtime import GenerationOptions, Generator, Translator
from edgeformer.runtime.package import load_package
from edgeformer.runtime.verify import verify

SOURCES = [[7, 8, 9, 10], [11, 12]]


@pytest.fixture(scope="module")
def ed_ort(tmp_path_factory, ed_checkpoint):
    out = tmp_path_factory.mktemp("ort") / "ed"
    return export_package(ed_checkpoint, out, variants=VARIANTS, graph_format="ort", verbose=False)


def test_an_ort_package_holds_ort_graphs_and_no_weights_file(ed_ort):
    names = {p.name for p in ed_ort.iterdir()}
    assert not [n for n in names if n.endswith((".onnx", ".data"))], names
    pkg = load_package(ed_ort)
    for entry in pkg.config.variants.values():
        assert entry.weights is None and entry.file_names == list(entry.files.values())
        assert all(f.endswith(".ort") and f in pkg.config.files for f in entry.files.values())
    assert set(pkg.config.files) | {"config.json"} == names
    ops = (ed_ort / "required_operators.config").read_text()
    assert "com.microsoft;1;" in ops and "GroupQueryAttention" in ops and "MatMulNBits" in ops
    assert "# - decoder.int4.ort" in ops and str(ed_ort.parent) not in ops  # file names only
    assert "required_operators.config" in pkg.config.files


def test_ort_graphs_decode_as_the_onnx_ones(ed_ort, ed_package):
    """Every variant: the same ids as the ONNX package, greedy and beam; verify passes."""
    for variant in VARIANTS:
        for opts in (GenerationOptions(max_new_tokens=8), GenerationOptions(8, num_beams=3)):
            want = Translator(ed_package, variant, threads=1).translate_ids(SOURCES, opts)
            got = Translator(ed_ort, variant, threads=1).translate_ids(SOURCES, opts)
            assert got == want, (variant, opts)
    checks = {c.variant: c for c in verify(ed_ort, threads=1)}
    assert set(checks) == set(VARIANTS) and all(c.error is None for c in checks.values())
    assert checks["fp32"].passed and checks["fp32"].agreement == 1.0


def test_a_decoder_only_ort_package_through_the_cli(lm_checkpoint, lm_package, tmp_path, capsys):
    """The CLI's parity check runs on the ORT graphs; genai_config.json (it runs .onnx graphs)
    is not written."""
    out = tmp_path / "lm"
    args = ["export", str(lm_checkpoint), str(out), "--format", "ort", "--quantize", "int4", "-q"]
    assert main(args) == 0
    assert "parity int4" not in capsys.readouterr().err  # -q
    assert not (out / "genai_config.json").exists()
    assert {p.suffix for p in out.iterdir()} == {".json", ".ort", ".config"}
    opts = GenerationOptions(max_new_tokens=6)
    for variant in ("fp32", "int4"):
        want = Generator(lm_package, variant, threads=1).generate_ids([[5, 6, 7]], opts)
        assert Generator(out, variant, threads=1).generate_ids([[5, 6, 7]], opts) == want
    assert main(["info", str(out)]) == 0
    assert "ORT format" in capsys.readouterr().out


def test_a_variant_without_weights_must_have_ort_graphs(ed_package, tmp_path):
    pkg = tmp_path / "p"
    shutil.copytree(ed_package, pkg)
    config = json.loads((pkg / "config.json").read_text())
    config["variants"]["fp32"]["weights"] = None
    (pkg / "config.json").write_text(json.dumps(config))
    with pytest.raises(PackageError, match="variants.fp32.weights must be a file name"):
        load_package(pkg)


def test_an_unlisted_ort_graph_is_refused(ed_ort, tmp_path):
    pkg = tmp_path / "p"
    shutil.copytree(ed_ort, pkg)
    config = json.loads((pkg / "config.json").read_text())
    (pkg / "decoder.ort").write_bytes((pkg / "decoder.int4.ort").read_bytes())
    with pytest.raises(PackageError, match="checksum mismatch for decoder.ort"):
        load_package(pkg)
    config["files"]["decoder.ort"] = sha256(pkg / "decoder.ort")
    (pkg / "config.json").write_text(json.dumps(config))
    load_package(pkg)  # listed again: loads (its checksum is the user's to vouch for)
