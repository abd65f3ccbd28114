"""int4 of a converted LM: 4-bit blocks with zero points (MatMulNBits' packed uint8 input), 8-bit
where the recipe keeps more bits, and GPTQ on a calibration text (`--calibrate`): a bundled
text or the user's file, said in the variant's description; bad calibration input is one
clear error before any work."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import byte_level_tokenizer, tiny_llama  # noqa: E402

from edgeformer.cli import main  # noqa: E402
from edgeformer.export import export_package  # noqa: E402
from edgeformer.export.recipes import more_bits_layer  # noqa: E402
from edgeformer.models.hf import convert_hf  # noqa: E402

VOCAB = 280


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A random-weight Llama folder converted once (2 layers: both keep more bits)."""
    root = tmp_path_factory.mktemp("calibrate")
    tiny_llama(root / "hf", VOCAB, bos=0, eos=0)
    byte_level_tokenizer(root / "hf" / "tokenizer.json")
    return convert_hf(root / "hf", root / "ckpt")


def matmul_nbits(pkg, variant: str) -> dict[str, onnx.NodeProto]:
    """The decoder graph's MatMulNBits nodes by their weight's name."""
    config = json.loads((pkg / "config.json").read_text())
    graph = pkg / config["variants"][variant]["files"]["decoder"]
    g = onnx.load(str(graph), load_external_data=False).graph
    return {n.input[1]: n for n in g.node if n.op_type == "MatMulNBits"}


def test_converted_int4_blocks_have_zero_points(converted, tmp_path):
    pkg = export_package(converted, tmp_path / "pkg", variants=["int4"], verbose=False)
    nodes = matmul_nbits(pkg, "int4")
    bits = {name: next(a.i for a in n.attribute if a.name == "bits") for name, n in nodes.items()}
    four = [name for name, b in bits.items() if b == 4]
    assert four, bits
    for name, node in nodes.items():  # a 4-bit weight has its zero points, an 8-bit one none
        has_zp = len(node.input) > 3 and node.input[3] != ""
        assert has_zp == (bits[name] == 4), (name, list(node.input))
    # in the layers llama.cpp's Q4_K_M gives more bits (here the last), Q/K/V and down are
    # 8-bit; the rest 4-bit
    assert [more_bits_layer(i, 2) for i in range(2)] == [False, True]
    for name in nodes:
        parts = name.split(".")
        if parts[0] == "dec":
            more = parts[-2] in ("qkv", "down") and more_bits_layer(int(parts[1]), 2)
            assert bits[name] == (8 if more else 4), name
    config = json.loads((pkg / "config.json").read_text())
    assert "zero point per block" in config["variants"]["int4"]["description"]


def test_gptq_on_a_calibration_text(converted, tmp_path):
    """--calibrate: GPTQ on the user's text (the export's parity check passes) and on a bundled
    text by name; each said in the description."""
    text = tmp_path / "notes.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 40, encoding="utf-8")
    pkg = tmp_path / "pkg"
    assert main(["export", str(converted), str(pkg), "--quantize", "int4", "--calibrate",
                 str(text), "-q"]) == 0  # fmt: skip
    description = json.loads((pkg / "config.json").read_text())["variants"]["int4"]["description"]
    assert "GPTQ on" in description and "tokens of notes.txt" in description, description
    plain = export_package(converted, tmp_path / "plain", variants=["int4"], verbose=False)
    weights = json.loads((pkg / "config.json").read_text())["variants"]["int4"]["weights"]
    a = (pkg / weights).read_bytes()
    b = (plain / weights).read_bytes()
    assert len(a) == len(b) and a != b  # the same layout, other codes
    bundled = export_package(converted, tmp_path / "bundled", variants=["int4"], verbose=False,
                             calibrate_on="shakespeare")  # fmt: skip
    described = json.loads((bundled / "config.json").read_text())["variants"]["int4"]
    assert "Tiny Shakespeare's training split" in described["description"]


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "no such file"),
        ("binary", "not UTF-8 text"),
        ("short", "fewer than a window"),
        ("no-int4", "add int4"),
    ],
)
def test_bad_calibration_input_is_one_clear_error(converted, tmp_path, case, message):
    path = tmp_path / "text.txt"
    if case == "binary":
        path.write_bytes(b"\xff\xfe\x00 not text")
    elif case in ("short", "no-int4"):
        path.write_text("the fox\n", encoding="utf-8")
    variants = ["int8"] if case == "no-int4" else ["int4"]
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        export_package(converted, tmp_path / "pkg", variants=variants, verbose=False,
                       calibrate_on=path)  # fmt: skip
    assert not (tmp_path / "pkg").exists()


def test_a_translator_refuses_a_calibration_text(ed_checkpoint, tmp_path):
    with pytest.raises(ValueError, match="decoder-only"):
        export_package(ed_checkpoint, tmp_path / "pkg", variants=["int4"], verbose=False,
                       calibrate_on="shakespeare")  # fmt: skip
    assert not (tmp_path / "pkg").exists()


def test_symmetric_codes_for_our_own_lm(lm_package):
    """Our own trained LMs keep symmetric int4 (their packages as they were): no zero points."""
    nodes = matmul_nbits(lm_package, "int4")
    assert nodes and all(len(n.input) < 4 or n.input[3] == "" for n in nodes.values())
    assert np.all([next(a.i for a in n.attribute if a.name == "bits") == 4
                   for n in nodes.values()])  # fmt: skip
