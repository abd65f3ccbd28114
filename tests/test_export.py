"""edgeformer.export: graph structure, package contract, dynamic shapes, parity, variants, errors.

Each fixture package is exported once per session (the torch exporter takes ~10 s per graph);
tests that only exercise export_package's control flow reuse those graphs through a fake
`to_onnx`.
"""

from __future__ import annotations

import collections
import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from edgeformer.export import export_package  # noqa: E402
from edgeformer.export import graphs as export_graphs  # noqa: E402
from edgeformer.export import quantize as export_quantize  # noqa: E402
from edgeformer.export.verify import compare, random_batch  # noqa: E402
from edgeformer.models.checkpoint import load_checkpoint  # noqa: E402
from edgeformer.runtime.package import graph_file, io_names, load_package, sha256  # noqa: E402

ALL = ("fp32", "int4", "int8", "int8-dynamic", "fp16")


@pytest.fixture(scope="session")
def ed_package(tmp_path_factory, ed_checkpoint):
    out = tmp_path_factory.mktemp("pkg") / "ed"
    return export_package(ed_checkpoint, out, variants=ALL, verbose=False)


@pytest.fixture(scope="session")
def lm_package(tmp_path_factory, lm_checkpoint):
    out = tmp_path_factory.mktemp("pkg") / "lm"
    return export_package(lm_checkpoint, out, variants=ALL, verbose=False)


@pytest.fixture(params=["ed", "lm"])
def family(request, ed_checkpoint, lm_checkpoint):
    """(checkpoint, package, model) of one family; packages are built lazily, once."""
    ckpt = ed_checkpoint if request.param == "ed" else lm_checkpoint
    pkg = request.getfixturevalue(f"{request.param}_package")
    return ckpt, pkg, load_checkpoint(ckpt)[0]


def ops(path) -> collections.Counter:
    return collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)


def session(path):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------- graph structure


def test_one_fused_attention_per_attention(family):
    _, pkg, model = family
    cfg = model.cfg
    ed = cfg.family == "encoder-decoder"
    expected = (
        {"encoder": cfg.n_encoder_layers, "decoder": 2 * cfg.n_decoder_layers}
        if ed
        else {"decoder": cfg.n_decoder_layers}
    )
    expected["decoder_with_past"] = expected["decoder"]
    pre = cfg.norm == "pre"
    norms = {
        "encoder": 2 * cfg.n_encoder_layers + pre,
        "decoder": (3 if ed else 2) * cfg.n_decoder_layers + pre,
    }
    norms["decoder_with_past"] = norms["decoder"]
    act = "Gelu" if cfg.activation == "gelu" else "Relu"
    for graph, n_attn in expected.items():
        proto = onnx.load(str(pkg / f"{graph}.onnx"))
        count = collections.Counter(n.op_type for n in proto.graph.node)
        assert count["Attention"] == n_attn, (graph, count)
        assert count["Softmax"] == 0, graph
        assert count["LayerNormalization"] == norms[graph], (graph, count)
        n_ffn = cfg.n_encoder_layers if graph == "encoder" else cfg.n_decoder_layers
        assert count[act] == n_ffn, (graph, count)
        for op in ("ReduceMean", "Erf", "Pow", "Sqrt", "Div", "Tanh"):  # no decomposed LN, GELU
            assert count[op] == 0, (graph, op)
        # every MatMul multiplies by a weight: no Q @ K^T / probs @ V MatMul outside Attention
        weights = {i.name for i in proto.graph.initializer}
        for node in proto.graph.node:
            if node.op_type == "MatMul":
                assert node.input[1] in weights, (graph, node.name)
            if node.op_type == "Transpose":  # weights are stored pre-transposed
                assert node.input[0] not in weights, (graph, node.name)


def test_checker_ir_version_and_opset(family):
    _, pkg, _ = family
    for f in load_package(pkg).config["files"]:
        if f.endswith(".onnx"):
            proto = onnx.load(str(pkg / f))
            assert 7 <= proto.ir_version <= 13, (f, proto.ir_version)
            assert {o.domain: o.version for o in proto.opset_import}[""] >= 23
            onnx.checker.check_model(proto, full_check=True)  # includes strict shape inference
            assert not proto.graph.initializer or all(
                t.data_location == onnx.TensorProto.DEFAULT for t in proto.graph.initializer
            )  # weights inline, no external data


# ---------------------------------------------------------------- package contract


def test_config_json_and_checksums(family, tokenizer_json):
    ckpt, pkg, model = family
    cfg = model.cfg
    config = json.loads((pkg / "config.json").read_text())
    assert config["format"] == "edgeformer-package" and config["format_version"] == 1
    assert config["family"] == cfg.family and config["model"] == cfg.to_dict()
    assert config["special_tokens"] == {"pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3}
    assert config["opset"] == 23 and config["min_onnxruntime"]
    names = io_names(cfg.family, cfg.n_decoder_layers)
    assert config["graphs"] == names
    assert set(config["variants"]) == set(ALL)
    assert config["variants"]["fp16"]["io_dtype"] == "float16"
    assert config["variants"]["int4"]["io_dtype"] == "float32"
    listed = {"tokenizer.json"}
    for variant, v in config["variants"].items():
        assert v["files"] == {g: graph_file(g, variant) for g in names}
        assert v["description"]
        listed |= set(v["files"].values())
    assert set(config["files"]) == listed
    assert set(p.name for p in pkg.iterdir()) == listed | {"config.json"}
    for name, digest in config["files"].items():
        assert sha256(pkg / name) == digest, name
    assert (pkg / "tokenizer.json").read_bytes() == tokenizer_json.read_bytes()
    package = load_package(pkg)  # the runtime's loader accepts it
    for variant in ALL:
        for graph, io in names.items():
            s = session(package.file(graph, variant))
            assert [i.name for i in s.get_inputs()] == io["inputs"], (graph, variant)
            assert [o.name for o in s.get_outputs()] == io["outputs"], (graph, variant)


# ---------------------------------------------------------------- dynamic shapes and parity


def _feed_past(out: dict, cross: dict | None = None) -> dict:
    past = {
        k.replace("present.", "past_key_values.", 1): v for k, v in out.items() if k != "logits"
    }
    return {**past, **(cross or {})}


@pytest.mark.parametrize("batch", [1, 8])
def test_dynamic_shapes_with_past(family, batch):
    """Each graph at batch 1 and 8, padded inputs, past lengths 0 ... max_len - 2 vs PyTorch."""
    _, pkg, model = family
    cfg = model.cfg
    H, D = cfg.n_heads, cfg.head_dim
    g = {name: session(pkg / f"{name}.onnx") for name in ("decoder", "decoder_with_past")}
    ids, mask = random_batch(cfg, batch, 9, seed=batch)
    t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)
    rng = np.random.default_rng(0)
    with torch.no_grad():
        if cfg.family == "encoder-decoder":
            enc = session(pkg / "encoder.onnx")
            (hidden,) = enc.run(None, {"input_ids": ids, "attention_mask": mask})
            memory = model.encode(t_ids, t_mask)
            assert hidden.shape == (batch, 9, cfg.d_model)
            real = mask.astype(bool)  # padded positions of the encoder output are ignored
            assert np.abs(hidden - memory.numpy())[real].max() < 1e-4
            cross = model.cross_kv(memory)
            tgt = torch.from_numpy(rng.integers(3, cfg.vocab_size, (batch, 4)))
            out = g["decoder"].run(
                None,
                {
                    "input_ids": tgt.numpy(),
                    "encoder_hidden_states": hidden,
                    "encoder_attention_mask": mask,
                },
            )
            logits, present = model.decode(tgt, cross, t_mask)
            assert out[0].shape == (batch, 4, cfg.vocab_size)
            assert np.abs(out[0] - logits.numpy()).max() < 1e-4
            assert out[1].shape == (batch, H, 4, D) and out[3].shape == (batch, H, 9, D)
            for past_len in (0, 1, 5, cfg.max_len - 2):
                for t in (1, 2):
                    if past_len + t > cfg.max_len:
                        continue
                    cache = [
                        (torch.randn(batch, H, past_len, D), torch.randn(batch, H, past_len, D))
                        for _ in range(cfg.n_decoder_layers)
                    ]
                    tok = torch.from_numpy(rng.integers(3, cfg.vocab_size, (batch, t)))
                    feed = {"input_ids": tok.numpy(), "encoder_attention_mask": mask}
                    for i, ((k, v), (ck, cv)) in enumerate(zip(cache, cross)):
                        feed[f"past_key_values.{i}.decoder.key"] = k.numpy()
                        feed[f"past_key_values.{i}.decoder.value"] = v.numpy()
                        feed[f"past_key_values.{i}.encoder.key"] = ck.numpy()
                        feed[f"past_key_values.{i}.encoder.value"] = cv.numpy()
                    out = g["decoder_with_past"].run(None, feed)
                    logits, present = model.decode(tok, cross, t_mask, cache)
                    assert out[0].shape == (batch, t, cfg.vocab_size)
                    assert np.abs(out[0] - logits.numpy()).max() < 1e-4, (past_len, t)
                    assert out[1].shape == (batch, H, past_len + t, D)
                    assert np.abs(out[1] - present[0][0].numpy()).max() < 1e-5
        else:
            out = g["decoder"].run(None, {"input_ids": ids, "attention_mask": mask})
            logits, present = model(t_ids, t_mask)
            assert out[0].shape == (batch, 9, cfg.vocab_size)
            assert np.abs(out[0] - logits.numpy()).max() < 1e-4
            assert out[1].shape == (batch, H, 9, D)
            for past_len in (0, 1, 5, cfg.max_len - 2):
                for t in (1, 3):
                    if past_len + t > cfg.max_len:
                        continue
                    cache = [
                        (torch.randn(batch, H, past_len, D), torch.randn(batch, H, past_len, D))
                        for _ in range(cfg.n_decoder_layers)
                    ]
                    am = np.ones((batch, past_len + t), np.int64)
                    am[1:, : min(past_len, 3)] = 0  # left padding in the past
                    tok = torch.from_numpy(rng.integers(3, cfg.vocab_size, (batch, t)))
                    feed = {"input_ids": tok.numpy(), "attention_mask": am}
                    for i, (k, v) in enumerate(cache):
                        feed[f"past_key_values.{i}.key"] = k.numpy()
                        feed[f"past_key_values.{i}.value"] = v.numpy()
                    out = g["decoder_with_past"].run(None, feed)
                    logits, present = model(tok, torch.from_numpy(am), cache)
                    assert out[0].shape == (batch, t, cfg.vocab_size)
                    assert np.abs(out[0] - logits.numpy()).max() < 1e-4, (past_len, t)
                    assert out[1].shape == (batch, H, past_len + t, D)
                    assert np.abs(out[1] - present[0][0].numpy()).max() < 1e-5


@pytest.mark.parametrize("batch", [1, 3])
def test_fp32_parity_every_greedy_step(family, batch):
    _, pkg, model = family
    diffs = compare(model, load_package(pkg), "fp32", batch=batch, length=8, steps=10, seed=batch)
    assert len(diffs) == 11
    assert max(diffs) <= 1e-4, diffs


# ---------------------------------------------------------------- quantized variants


def test_quantized_variants(family):
    _, pkg, model = family
    package = load_package(pkg)
    fp32 = ops(pkg / "decoder_with_past.onnx")
    bounds = {"int4": 2.0, "int8": 0.3, "int8-dynamic": 0.3, "fp16": 0.02}
    for variant, bound in bounds.items():
        diffs = compare(model, package, variant, batch=2, steps=4)
        assert all(np.isfinite(diffs)) and max(diffs) < bound, (variant, diffs)
        path = package.file("decoder_with_past", variant)
        count = ops(path)
        assert count["Attention"] == fp32["Attention"] and count["Softmax"] == 0, variant
        if variant in ("int4", "int8"):
            assert count["MatMulNBits"] == fp32["MatMul"] and count["MatMul"] == 0, count
            assert count["Gather"] == fp32["Gather"]  # the embedding lookup keeps its table
            assert path.stat().st_size < (pkg / "decoder_with_past.onnx").stat().st_size
        if variant == "int8-dynamic":
            assert count["MatMulInteger"] == fp32["MatMul"], count
        if variant == "fp16":
            s = session(path)
            floats = [i.type for i in s.get_inputs() if "float" in i.type]
            assert floats and set(floats) == {"tensor(float16)"}
    # the tied output projection (the largest MatMul) is quantized too
    proto = onnx.load(str(package.file("decoder", "int4")))
    (logits_node,) = [n for n in proto.graph.node if "logits" in n.output]
    assert logits_node.op_type == "MatMulNBits"


# ---------------------------------------------------------------- robustness


@pytest.fixture
def fast_export(monkeypatch, ed_package, lm_package):
    """Replace the torch exporter by the fixture packages' fp32 graphs (same checkpoints)."""
    by_io = {}
    for pkg in (ed_package, lm_package):
        config = json.loads((pkg / "config.json").read_text())
        for graph, io in config["graphs"].items():
            by_io[(tuple(io["inputs"]), tuple(io["outputs"]))] = pkg / f"{graph}.onnx"

    def fake_to_onnx(wrapper, args, dims, inputs, outputs, opset=23):
        return onnx.load(str(by_io[(tuple(inputs), tuple(outputs))]))

    monkeypatch.setattr(export_graphs, "to_onnx", fake_to_onnx)


def _leftovers(parent, name):
    return [p.name for p in parent.iterdir() if p.name.startswith(f".{name}")]


def test_failure_leaves_nothing(fast_export, monkeypatch, ed_checkpoint, tmp_path):
    def boom(src, dst, variant):
        raise RuntimeError("quantizer exploded")

    monkeypatch.setattr("edgeformer.export.exporter.quantize", boom)
    out = tmp_path / "pkg"
    with pytest.raises(RuntimeError, match="exploded"):
        export_package(ed_checkpoint, out, variants=("fp32", "int8"), verbose=False)
    assert not out.exists() and _leftovers(tmp_path, "pkg") == []
    # an existing package survives a failed forced export untouched
    export_package(ed_checkpoint, out, verbose=False)
    before = (out / "config.json").read_text()
    with pytest.raises(RuntimeError):
        export_package(ed_checkpoint, out, variants=("int4",), force=True, verbose=False)
    assert (out / "config.json").read_text() == before and _leftovers(tmp_path, "pkg") == []


def test_force_and_progress(fast_export, lm_checkpoint, tmp_path, capsys):
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    with pytest.raises(FileExistsError, match="pkg"):
        export_package(lm_checkpoint, out, verbose=False)
    assert (out / "stale.txt").exists()
    assert export_package(lm_checkpoint, out, force=True) == out
    assert not (out / "stale.txt").exists() and load_package(out).variants == ["fp32"]
    err = capsys.readouterr().err
    assert "decoder fp32" in err and "decoder_with_past fp32" in err and "MB" in err
    export_package(lm_checkpoint, out, force=True, verbose=False)
    assert capsys.readouterr().err == ""


def test_bad_inputs(lm_checkpoint, tmp_path):
    out = tmp_path / "pkg"
    with pytest.raises(FileNotFoundError, match="nope"):
        export_package(tmp_path / "nope", out, verbose=False)
    with pytest.raises(ValueError, match="int3.*int4, int8, int8-dynamic, fp16"):
        export_package(lm_checkpoint, out, variants=("int3",), verbose=False)
    with pytest.raises(ValueError, match="opset 18.*Attention.*23"):
        export_package(lm_checkpoint, out, opset=18, verbose=False)
    corrupt = tmp_path / "corrupt"
    shutil.copytree(lm_checkpoint, corrupt)
    (corrupt / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ValueError, match="model.safetensors"):
        export_package(corrupt, out, verbose=False)
    mismatch = tmp_path / "mismatch"
    shutil.copytree(lm_checkpoint, mismatch)
    config = json.loads((mismatch / "config.json").read_text())
    config["model"]["d_model"] = 64
    (mismatch / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="do not match"):
        export_package(mismatch, out, verbose=False)
    assert not out.exists() and _leftovers(tmp_path, "pkg") == []


def test_cli(fast_export, ed_checkpoint, tmp_path, capsys):
    from edgeformer.runtime.cli import main

    out = tmp_path / "pkg"
    assert main(["export", str(ed_checkpoint), str(out), "--quantize", "int8,fp16"]) == 0
    assert load_package(out).variants == ["fp32", "int8", "fp16"]
    captured = capsys.readouterr()
    assert captured.out.strip() == str(out) and "verify fp32" in captured.err
    assert main(["export", str(ed_checkpoint), str(out)]) == 2  # exists, no --force
    assert "--force" in capsys.readouterr().err
    assert main(["export", str(ed_checkpoint), str(out), "--force", "-q", "--no-verify"]) == 0
    assert load_package(out).variants == ["fp32"]
    assert main(["export", str(ed_checkpoint), str(out), "--quantize", "int2", "--force"]) == 2
    assert "int2" in capsys.readouterr().err


def test_check_variants():
    assert export_quantize.check_variants("int4, int8,int4") == ["int4", "int8"]
    assert export_quantize.check_variants([]) == []
    with pytest.raises(ValueError, match="valid"):
        export_quantize.check_variants(["fp8"])


def test_fold_weight_transposes():
    """h @ E^T of a large tied embedding: the exporter leaves Transpose(E); we fold it."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    graph = helper.make_graph(
        [
            helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),
            helper.make_node("MatMul", ["h", "Et"], ["logits"]),
        ],
        "g",
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(w, "E")],
    )
    proto = helper.make_model(graph)
    export_graphs.fold_weight_transposes(proto)
    assert [n.op_type for n in proto.graph.node] == ["MatMul"]
    folded = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}["Et"]
    np.testing.assert_array_equal(folded, w.T)
