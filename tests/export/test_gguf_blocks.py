"""GGUF blocks as MatMulNBits / GatherBlockQuantized weights (export/gguf_blocks.py): every kept
GGML type unpacks to gguf-py's own values (exactly where the table says so), and onnxruntime
computes with exactly the values IntBlocks says."""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="needs gguf (the train extra)")
ort = pytest.importorskip("onnxruntime")

from edgeformer.export import gguf_blocks as gb  # noqa: E402

EXACT = ("Q8_0", "Q4_0", "Q5_0", "Q6_K", "Q3_K", "IQ4_NL", "IQ4_XS", "MXFP4", "TQ2_0")
AFFINE = ("Q4_1", "Q5_1", "Q4_K", "Q5_K", "Q2_K")
FP16_FIELDS = {"Q8_0": (0,), "Q4_0": (0,), "Q5_0": (0,), "Q4_1": (0, 2), "Q5_1": (0, 2),
               "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "Q3_K": (108,), "Q2_K": (80, 82),
               "IQ4_NL": (0,), "IQ4_XS": (0,), "MXFP4": (), "TQ2_0": (64,)}  # fmt: skip
LAYOUT = {"Q3_K": (4, 16), "TQ2_0": (4, 32), "Q4_0": (4, 32), "Q6_K": (8, 16), "Q2_K": (8, 16)}


def random_blocks(type_name: str, N: int, K: int, seed: int = 0, signed: bool = True):
    """(N, row_bytes) random blocks of `type_name` with finite fp16 scales (of either sign when
    `signed`), and gguf-py's float32 (N, K) values of them."""
    rng = np.random.default_rng(seed)
    kind = gguf.GGMLQuantizationType[type_name]
    block, size = gguf.GGML_QUANT_SIZES[kind]
    raw = rng.integers(0, 256, (N, K // block * size)).astype(np.uint8)
    b = raw.reshape(N, K // block, size)
    for at in FP16_FIELDS[type_name]:
        low = -0.05 if signed else 0.001
        d = rng.uniform(low, 0.05, b.shape[:2]).astype(np.float16)
        b[..., at : at + 2] = d.view(np.uint8).reshape(*b.shape[:2], 2)
    if type_name == "MXFP4":  # E8M0 exponents near 1
        b[..., 0] = rng.integers(115, 130, b.shape[:2])
    return raw, np.asarray(gguf.quants.dequantize(raw, kind), np.float32).reshape(N, K)


def matmul_nbits(blocks: gb.IntBlocks, x: np.ndarray, accuracy_level: int = 0) -> np.ndarray:
    """x @ W^T through onnxruntime's MatMulNBits over the packed blocks."""
    import onnx
    from onnx import TensorProto as TP
    from onnx import helper as h

    packed, scales = blocks.packed, blocks.scales
    N, K = blocks.q.shape
    inits = [onnx.numpy_helper.from_array(packed, "w"), onnx.numpy_helper.from_array(scales, "s")]
    ins = ["x", "w", "s"]
    node = h.make_node("MatMulNBits", ins, ["y"], domain="com.microsoft", K=K, N=N,
                       bits=blocks.bits, block_size=blocks.block,
                       accuracy_level=accuracy_level)  # fmt: skip
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("x", TP.FLOAT, [None, K])],
                         [h.make_tensor_value_info("y", TP.FLOAT, [None, N])], inits)  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21),
                                               h.make_opsetid("com.microsoft", 1)])  # fmt: skip
    model.ir_version = 10
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("type_name", EXACT + AFFINE)
def test_blocks_unpack_to_gguf_values(type_name):
    raw, ref = random_blocks(type_name, 6, 512, signed=type_name in EXACT)
    blocks = gb.int_blocks(type_name, raw, 512)
    assert blocks is not None and blocks.q.shape == ref.shape
    assert (blocks.bits, blocks.block) == LAYOUT.get(
        type_name, (8, 32 if type_name != "Q6_K" else 16)
    )
    err = np.abs(blocks.values() - ref)
    if type_name in EXACT:
        assert err.max() == 0.0, type_name
    else:  # within half an int8 step (the block's absmax / 127) of each value
        peak = np.abs(ref.reshape(6, -1, blocks.block)).max(-1)
        assert (err.reshape(6, -1, blocks.block).max(-1) <= peak / 254 * (1 + 1e-5)).all()
    assert blocks.max_error == pytest.approx(float(err.max()), abs=1e-6)


@pytest.mark.parametrize("type_name", ["Q4_1", "Q5_1"])
def test_affine_blocks_from_gguf_quantizer_are_near_exact(type_name):
    """Real-shaped blocks (gguf-py's own quantizer over a Gaussian weight): the 8-bit values
    are within 1/10 (Q4_1's 16 levels) / 1/5 (Q5_1's 32) of the type's own quantization error,
    and exact where the minimum is 0."""
    rng = np.random.default_rng(1)
    W = rng.standard_normal((64, 256)).astype(np.float32) * 0.05
    kind = gguf.GGMLQuantizationType[type_name]
    raw = gguf.quants.quantize(W, kind).reshape(64, -1)
    ref = np.asarray(gguf.quants.dequantize(raw, kind), np.float32).reshape(W.shape)
    blocks = gb.int_blocks(type_name, raw, 256)
    share = {"Q4_1": 0.1, "Q5_1": 0.2}[type_name]
    assert np.abs(blocks.values() - ref).max() < share * np.abs(ref - W).max()
    zero_min = np.zeros_like(raw)
    zero_min[...] = raw
    b = zero_min.reshape(64, -1, gguf.GGML_QUANT_SIZES[kind][1])
    b[..., 2:4] = 0  # m = +0.0: every block's offset whole
    ref0 = np.asarray(gguf.quants.dequantize(zero_min, kind), np.float32).reshape(W.shape)
    assert np.array_equal(gb.int_blocks(type_name, zero_min, 256).values(), ref0)


@pytest.mark.parametrize("type_name", EXACT + AFFINE)
def test_onnxruntime_computes_with_the_blocks_values(type_name):
    raw, _ = random_blocks(type_name, 16, 256, seed=2, signed=type_name in EXACT)
    blocks = gb.int_blocks(type_name, raw, 256)
    x = np.random.default_rng(3).standard_normal((3, 256)).astype(np.float32)
    want = x @ blocks.values().T
    got = matmul_nbits(blocks, x)
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))


def test_merged_rows_of_mixed_types_keep_their_values():
    """A packed Q/K/V whose parts are Q4_0 (4 bits, block 32), Q6_K (8 bits, block 16) and Q4_K
    (its minima): one 8-bit, block-16 layout with the same values, run by onnxruntime."""
    parts = []
    for i, t in enumerate(("Q4_0", "Q6_K", "Q4_K")):
        raw, _ = random_blocks(t, 4, 256, seed=10 + i, signed=t != "Q4_K")
        parts.append(gb.int_blocks(t, raw, 256))
    m = gb.merged(parts)
    assert (m.bits, m.block) == (8, 16)
    assert np.array_equal(m.values(), np.concatenate([p.values() for p in parts]))
    x = np.random.default_rng(4).standard_normal((2, 256)).astype(np.float32)
    want = x @ m.values().T
    assert np.abs(matmul_nbits(m, x) - want).max() <= 1e-5 * float(np.abs(want).max())


@pytest.mark.parametrize("type_name", ["F32", "F16", "BF16", "IQ2_XXS", "IQ1_S", "TQ1_0"])
def test_types_not_kept_are_none(type_name):
    assert gb.int_blocks(type_name, np.zeros((2, 64), np.uint8), 256) is None
