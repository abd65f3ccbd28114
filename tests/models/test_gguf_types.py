"""Every GGML tensor type gguf-py dequantizes, in one GGUF file (issue 57): a Llama of 6 layers
whose matrices each hold another type (q/k/v and gate/up share one, as llama.cpp's mixes give
them), so that one conversion and one export cover them all. The checkpoint's logits equal the
transformers model holding the file's dequantized values (fp32 weights = gguf-py's
dequantization), and the `gguf` variant says per type what it did: kept exactly, kept within a
measured error, or re-quantized at 8 bits with its measured error."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
pytest.importorskip("onnxruntime")

from gguf_files import K_QUANTIZERS, byte_level_tokenizer, write_gguf  # noqa: E402

from edgeformer.export import export_package  # noqa: E402
from edgeformer.models.checkpoint import load_checkpoint  # noqa: E402
from edgeformer.models.gguf import convert_gguf  # noqa: E402
from edgeformer.runtime.package import load_package  # noqa: E402

EXACT = ("Q8_0", "Q4_0", "Q5_0", "Q6_K", "Q3_K", "IQ4_NL", "IQ4_XS", "MXFP4", "TQ2_0")
NEAR = ("Q4_1", "Q5_1", "Q4_K", "Q5_K", "Q2_K")  # minima: symmetric 8-bit codes, within a step
REQUANTIZED = ("F32", "F16", "BF16", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S",
               "IQ1_M", "TQ1_0", "NVFP4")  # fmt: skip
# types gguf-py cannot dequantize: a clear error (tests/models/test_gguf_hostile.py)
NOT_READ = ("Q8_1", "Q8_K", "Q1_0")
STORAGE = ("I8", "I16", "I32", "I64", "F64")  # integer / float64 storage, not weights
TYPES = EXACT + NEAR + REQUANTIZED
SLOTS = ("attn_q", "attn_output", "ffn_gate", "ffn_down")  # q/k/v: attn_q's, up: ffn_gate's
CONFIG = dict(vocab_size=280, hidden_size=256, intermediate_size=512, num_hidden_layers=6,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              initializer_range=0.05, bos_token_id=0, eos_token_id=0,
              tie_word_embeddings=False)  # fmt: skip


def slot_types() -> dict[str, str]:
    """GGUF stem -> type: the embedding and head first, then 4 slots of each layer."""
    stems = ["token_embd", "output"] + [f"blk.{i}.{s}" for i in range(6) for s in SLOTS]
    order = ("Q8_0", "Q6_K") + tuple(t for t in TYPES if t not in ("Q8_0", "Q6_K"))
    out = dict(zip(stems, order, strict=False))
    assert len(out) >= len(TYPES), "a slot for every type"
    return out


def type_of(types: dict[str, str], gname: str) -> str:
    stem = gname.rsplit(".", 1)[0]
    for a, b in (("attn_k", "attn_q"), ("attn_v", "attn_q"), ("ffn_up", "ffn_gate")):
        stem = stem.replace(a, b)
    return types[stem]


def random_blocks(type_name: str, rows: int, K: int, rng) -> np.ndarray:
    """Valid blocks of a type gguf-py cannot quantize (the IQ grids, TQ1_0, NVFP4): random
    codes, small scales."""
    kind = gguf.GGMLQuantizationType[type_name]
    block, size = gguf.GGML_QUANT_SIZES[kind]
    raw = rng.integers(0, 256, (rows, K // block, size)).astype(np.uint8)
    d = np.full(raw.shape[:2], 0.004, np.float16)
    if type_name == "IQ1_M":  # the fp16 scale is the top nibbles of the last 4 uint16 words
        h = d.view(np.uint16).astype(np.uint16)
        words = raw[..., size - 8 :].copy().view("<u2")
        for i in range(4):
            words[..., i] = (words[..., i] & 0x0FFF) | (((h >> (4 * i)) & 0xF) << 12)
        raw[..., size - 8 :] = words.view(np.uint8)
    elif type_name == "NVFP4":  # four UE4M3 scales first
        raw[..., 0:4] = 0x18
    else:
        at = size - 2 if type_name == "TQ1_0" else 0
        raw[..., at : at + 2] = d.view(np.uint8).reshape(*d.shape, 2)
    return raw.reshape(rows, -1)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """(the file's types per stem, the reference model, our checkpoint, the package)."""
    root = tmp_path_factory.mktemp("gguf-types")
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()
    byte_level_tokenizer(root / "tokenizer.json")
    types = slot_types()
    rng = np.random.default_rng(0)
    values = write_gguf(
        root / "model.gguf", "llama", hf, root / "tokenizer.json",
        lambda g: type_of(types, g), blocks=lambda t, shape: random_blocks(t, *shape, rng),
    )  # fmt: skip
    with torch.no_grad():
        for name, p in hf.state_dict().items():
            p.copy_(torch.from_numpy(values[name]))
    ckpt = convert_gguf(root / "model.gguf", root / "checkpoint")
    pkg = export_package(root / "model.gguf", root / "package", variants=["fp32"], verbose=False)
    return types, hf, ckpt, pkg


def test_every_dequantizable_type_is_covered():
    readable = set()
    for t in gguf.GGMLQuantizationType:
        block, size = gguf.GGML_QUANT_SIZES[t]
        if t.name in STORAGE:
            continue
        try:
            gguf.quants.dequantize(np.zeros((1, 256 // block * size), np.uint8), t)
            readable.add(t.name)
        except NotImplementedError:
            assert t.name in NOT_READ, t.name
    assert readable == set(TYPES), readable ^ set(TYPES)
    assert set(K_QUANTIZERS) <= set(TYPES)


def test_fp32_weights_are_the_dequantization(mixed):
    _, ref, ckpt, _ = mixed
    ours = load_checkpoint(ckpt)[0]
    ids = torch.tensor([list(range(5, 30))])
    with torch.no_grad():
        want = ref(ids).logits
        got, _ = ours(ids, torch.ones_like(ids))
    assert float((got - want).abs().max()) <= 1e-4 * max(1.0, float(want.abs().max()))


def test_gguf_variant_reports_every_type(mixed):
    _, _, _, pkg = mixed
    entry = load_package(pkg, verify=False).config.variants["gguf"]
    said = entry.description.split("kept from model.gguf: ", 1)[1]
    parts = {}
    for p in said.split("), "):
        what, rest = p.split(": ", 1)
        parts[what] = rest
    for t in EXACT:
        assert "(exact" in parts[t], (t, parts[t])
    for t in NEAR:
        assert "max |error|" in parts[t] and "re-quantized" not in parts[t], (t, parts[t])
    for t in REQUANTIZED:
        assert "re-quantized at 8 bits, max |error|" in parts[t], (t, parts[t])
    assert set(parts) == set(TYPES), set(parts) ^ set(TYPES)


def test_near_types_error_is_within_an_int8_step(mixed):
    """Kept approximately: each weight within half of its largest block's absmax / 127."""
    _, _, _, pkg = mixed
    entry = load_package(pkg, verify=False).config.variants["gguf"]
    for part in entry.description.split(", "):
        if part.startswith(NEAR) and "max |error|" in part:
            err = float(part.rsplit("max |error| ", 1)[1].rstrip(")"))
            assert 0 < err < 0.05, part
    assert entry.measured["agreement"] >= 0.8
