"""Quantization recipes: how each variant of a package stores its weights.

The variant names are the package format's (core.format.VARIANTS); here is how export makes each
one. The measurements behind each choice are in docs/design-notes.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.format import VARIANTS, WEB_VARIANTS


@dataclass(frozen=True)
class VariantSpec:
    """How a variant stores its weights. bits None = float32; else quantized by `method`:
    MatMulNBits (symmetric blocks of `block_size` along the input dimension, `accuracy_level`
    4 = int8 compute) or DynamicQuantizeMatMul (8 bits)."""

    name: str
    description: str
    bits: int | None = None  # decoder and encoder linear layers
    embed_bits: int | None = None  # token embedding (GatherBlockQuantized)
    head_bits: int | None = None  # output projection (shares the table when tied)
    block_size: int = 32
    accuracy_level: int = 4  # 0 was slower than fp32 on AVX2 (docs/export.md)
    io_dtype: str = "float32"
    # "nbits": MatMulNBits (weights in blocks of block_size, activations too when
    # accuracy_level is 4); "dynamic": DynamicQuantizeMatMul (8-bit only: int8 weights per
    # output column, activations quantized per call to uint8 by onnxruntime); "gguf":
    # MatMulNBits holding a GGUF file's own blocks (export/gguf_blocks.py), `bits` for the
    # tensors it does not keep
    method: str = "nbits"
    # 4 bits: each block's scale minimises its squared error (a search below the absmax
    # scale, export/builder.py) instead of onnxruntime's absmax; same format and kernels
    scale_search: bool = False
    # 4-bit linear layers: a zero point per block (MatMulNBits' uint8 zero_points, two per
    # byte) on the grid of least squared error (export/quantize.py); the embedding and the
    # output projection stay symmetric (GatherBlockQuantized shares a tied head's table)
    asymmetric: bool = False
    # 4-bit linear layers: GPTQ against the activations of training examples when export has
    # them (export/gptq.py; the embedding / output projection keep scale_search); same format
    gptq: bool = False
    # a variant whose graphs are this one's with other attributes, reading its weights file
    # (core.format.WEB_VARIANTS); None: its own weights
    weights_of: str | None = None
    # linear layers (the last part of their graph name: "qkv", "down") kept at 8 bits in the
    # decoder layers llama.cpp's Q4_K_M gives more bits (more_bits_layer), in a 4-bit variant
    more_bits: tuple[str, ...] = ()


def more_bits_layer(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits (its Q4_K_M keeps attn_v / ffn_down at 6 bits there): the first
    and last eighth of the layers and every third one between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


VARIANT_SPECS: dict[str, VariantSpec] = {
    s.name: s
    for s in (
        VariantSpec("fp32", "float32 (reference)"),
        VariantSpec(
            "int8",
            "MatMulNBits 8-bit weights everywhere, block 32, int8 compute",
            bits=8,
            embed_bits=8,
            head_bits=8,
        ),
        VariantSpec(
            "int4",
            "MatMulNBits 4-bit weights everywhere, block 32 (scales fitted to each block), "
            "int8 compute",
            bits=4,
            embed_bits=4,
            head_bits=4,
            scale_search=True,
            gptq=True,
        ),
        VariantSpec(
            "int8-dynamic",
            "DynamicQuantizeMatMul: int8 weights (a scale per output column) everywhere, "
            "activations quantized per call (one scale per batch): fastest at batch >= 8",
            bits=8,
            embed_bits=8,
            head_bits=8,
            method="dynamic",
        ),
        VariantSpec(
            "int8-web",
            "the int8 graphs with fp32 compute (accuracy_level 0), as onnxruntime-web's wasm "
            "computes them; reads weights.int8.data (slow on the CPU provider)",
            bits=8,
            embed_bits=8,
            head_bits=8,
            accuracy_level=0,
            weights_of="int8",
        ),
        VariantSpec(
            "int4-web",
            "the int4 graphs with fp32 compute (accuracy_level 0), as onnxruntime-web's wasm "
            "computes them; reads weights.int4.data",
            bits=4,
            embed_bits=4,
            head_bits=4,
            accuracy_level=0,
            weights_of="int4",
        ),
        VariantSpec(
            "gguf",
            "the GGUF file's own quantized blocks in MatMulNBits (Q8_0, Q4_0, Q5_0, Q6_K, Q3_K, "
            "IQ4_NL, IQ4_XS, MXFP4, TQ2_0 as they are; Q4_1, Q5_1, Q4_K, Q5_K, Q2_K as "
            "symmetric 8-bit codes; other types quantized here at 8 bits), int8 compute",
            bits=8,
            embed_bits=8,
            head_bits=8,
            method="gguf",
        ),
    )
}
assert tuple(VARIANT_SPECS) == VARIANTS, "a recipe per variant of the format"
assert all(VARIANT_SPECS[w].weights_of == b for w, b in WEB_VARIANTS.items())


def variant_spec(
    name: str, family: str, calibration: str | None = None, converted: bool = False
) -> VariantSpec:
    """The recipe of variant `name` for a model of `family`. A translator's int4 keeps its
    embedding and output projection at 8 bits: 4 bits there lost 0.55 BLEU on a trained
    translator's test set (docs/design-notes.md, 2026-11-23), 8 bits nothing, at the same
    batch-1 speed;
    an LM keeps 4 bits everywhere (within its bound, and its head is a larger share of a step).
    calibration: what a GPTQ variant's linear layers were fitted to ("GPTQ on 512 training
    examples"), for its description; None: not calibrated (scales fitted to each block).
    converted: a converted (trained elsewhere) LM's int4 keeps its embedding and head at 8 bits
    and the Q/K/V and down projections of llama.cpp's Q4_K_M layers at 8 bits, and its 4-bit
    blocks have zero points: on SmolLM2-135M-Instruct perplexity x1.44 -> x1.16 -> x1.126 of
    fp32 (x1.109 with GPTQ on a text: `--calibrate`; docs/design-notes.md, 2026-12-02); our own
    small LMs keep 4 bits everywhere, symmetric (within their bound, and their packages as
    they were)."""
    spec = VARIANT_SPECS[name]
    if name != "int4":
        return spec
    how = "scales fitted to each block" if calibration is None else calibration
    if family == "encoder-decoder":
        return replace(
            spec,
            embed_bits=8,
            head_bits=8,
            description=f"MatMulNBits 4-bit weights, block 32 ({how}), int8 compute; 8-bit "
            "embedding and output projection",
        )
    if converted:
        return replace(
            spec, embed_bits=8, head_bits=8, more_bits=("qkv", "down"), asymmetric=True,
            description=f"MatMulNBits 4-bit weights with a zero point per block, block 32 "
            f"({how}), int8 compute; 8-bit embedding and output projection, 8-bit Q/K/V and "
            "down projections in llama.cpp's Q4_K_M layers",
        )  # fmt: skip
    return replace(
        spec,
        description=f"MatMulNBits 4-bit weights everywhere, block 32 ({how}), int8 compute",
    )
