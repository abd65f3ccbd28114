"""int8-web / int4-web: int8 / int4's graphs with MatMulNBits accuracy_level 0 (fp32 compute, what
onnxruntime-web's wasm backend computes whatever the attribute says), reading their base's
weights file; measured at export, never `auto`'s pick."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("torch", reason="needs PyTorch (the train extra)")
onnx = pytest.importorskip("onnx", reason="needs onnx (the train extra)")

from edgeformer.core.format import WEB_VARIANTS
from edgeformer.core.variants import pick_variant
from edgeformer.export import export_package
from edgeformer.export.exporter import check_variants
from edgeformer.runtime import GenerationOptions, Translator
from edgeformer.runtime.onnx_refs import external_files
from edgeformer.runtime.package import load_package


@pytest.fixture(scope="module")
def web_package(tmp_path_factory, ed_checkpoint):
    out = tmp_path_factory.mktemp("web") / "ed"
    return export_package(ed_checkpoint, out, variants=("int4-web", "int8-web"), verbose=False)


def test_a_web_variant_brings_its_base_first():
    assert check_variants("int4-web") == ["int4", "int4-web"]
    assert check_variants(["int8", "int8-web", "int4-web"]) == [
        "int8",
        "int8-web",
        "int4",
        "int4-web",
    ]


def test_web_graphs_are_their_bases_with_fp32_compute(web_package):
    pkg = load_package(web_package)
    assert list(pkg.config.variants) == ["fp32", "int4", "int4-web", "int8", "int8-web"]
    for web, base in WEB_VARIANTS.items():
        entry, base_entry = pkg.config.variants[web], pkg.config.variants[base]
        assert entry.weights == base_entry.weights  # no weights file of its own
        assert not (web_package / f"weights.{web}.data").exists()
        for graph, file in entry.files.items():
            assert file == f"{graph}.{web}.onnx"
            assert external_files(web_package / file) == {base_entry.weights}
            ours = onnx.load(str(web_package / file), load_external_data=False).graph
            theirs = onnx.load(str(web_package / base_entry.files[graph]), load_external_data=False)
            levels = [
                next(a.i for a in n.attribute if a.name == "accuracy_level")
                for n in ours.node
                if n.op_type == "MatMulNBits"
            ]
            assert levels and set(levels) == {0}
            assert [n.op_type for n in ours.node] == [n.op_type for n in theirs.graph.node]
        assert {"agreement", "ms_per_token"} <= set(entry.measured)
        assert "fp32 compute" in entry.description and "int8 compute" not in entry.description


def test_web_variants_decode_and_are_never_autos_pick(web_package):
    opts = GenerationOptions(max_new_tokens=6)
    for web in WEB_VARIANTS:
        out = Translator(web_package, web, threads=1).translate_ids([[7, 8, 9]], opts)
        assert len(out) == 1 and len(out[0]) <= 6
    config = load_package(web_package).config
    fastest = {  # the web variants measured fastest and exact: auto still does not take them
        name: dataclasses.replace(
            v, measured={**v.measured, "agreement": 1.0, "ms_per_token": 1e-6}
        )
        if name in WEB_VARIANTS
        else v
        for name, v in config.variants.items()
    }
    picked, _ = pick_variant(dataclasses.replace(config, variants=fastest))
    assert picked not in WEB_VARIANTS
