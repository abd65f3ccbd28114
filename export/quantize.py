"""Package variants made from the fp32 graphs with onnxruntime's own tools (no own quantizer).

    int4           weight-only MatMulNBits, 4-bit symmetric blocks of 32, int8 compute (CPU)
    int8           weight-only MatMulNBits, 8-bit symmetric blocks of 32, int8 compute (CPU)
    int8-dynamic   quantize_dynamic: MatMulInteger, 7-bit per-channel weights (reduce_range),
                   dynamic activation scales
    fp16           convert_float_to_float16, float16 inputs/outputs (for CUDA)

Every MatMul with a constant weight is quantized, including the tied output projection (the
exporter stores E^T as its own initializer, so it is a plain MatMul weight); the embedding
Gather keeps the fp32 table.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

BLOCK_SIZE = 32
ACCURACY_LEVEL = 4  # MatMulNBits computes with int8 activations: faster on CPU

VARIANTS: dict[str, dict[str, str]] = {
    "fp32": {"io_dtype": "float32", "description": "float32 (reference)"},
    "int4": {
        "io_dtype": "float32",
        "description": f"MatMulNBits 4-bit weights, block {BLOCK_SIZE}, "
        f"accuracy_level {ACCURACY_LEVEL}",
    },
    "int8": {
        "io_dtype": "float32",
        "description": f"MatMulNBits 8-bit weights, block {BLOCK_SIZE}, "
        f"accuracy_level {ACCURACY_LEVEL}",
    },
    "int8-dynamic": {
        "io_dtype": "float32",
        "description": "quantize_dynamic: MatMulInteger, 7-bit weights per channel",
    },
    "fp16": {"io_dtype": "float16", "description": "float16 weights and inputs/outputs (CUDA)"},
}


def check_variants(variants) -> list[str]:
    """Validate variant names (a list, or a comma-separated string) -> list without repeats."""
    if isinstance(variants, str):
        variants = [v.strip() for v in variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise ValueError(f"unknown quantization {bad}; valid: {', '.join(VARIANTS)}")
    return list(dict.fromkeys(variants))


def _matmul_nbits(model, bits: int):
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    config = DefaultWeightOnlyQuantConfig(
        block_size=BLOCK_SIZE,
        is_symmetric=True,
        accuracy_level=ACCURACY_LEVEL,
        op_types_to_quantize=("MatMul",),
        bits=bits,
    )
    quantizer = MatMulNBitsQuantizer(model, algo_config=config)
    quantizer.process()
    return quantizer.model.model


def _dynamic(model):
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "in.onnx", Path(d) / "out.onnx"
        onnx.save_model(model, src)
        # MatMul only: quantize_dynamic would take the ONNX Attention for the contrib one.
        # reduce_range (7-bit weights): without VNNI, the u8 x s8 kernel (AVX2 vpmaddubsw)
        # saturates its 16-bit pair sums; full-range weights gave logit errors of ~1.0 on a
        # random model where reduce_range gives 0.07 (tests/test_export.py bounds it at 0.3).
        quantize_dynamic(
            src,
            dst,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            reduce_range=True,
            weight_type=QuantType.QInt8,
        )
        return onnx.load_model(dst)


def _fp16(model):
    from onnxruntime.transformers.float16 import convert_float_to_float16

    return convert_float_to_float16(model, keep_io_types=False)


def quantize(src: str | Path, dst: str | Path, variant: str) -> None:
    """Write the `variant` of the fp32 graph `src` to `dst` (checked, IR version kept)."""
    import onnx

    from .graphs import IR_VERSION

    check_variants([variant])
    make = {
        "int4": lambda m: _matmul_nbits(m, 4),
        "int8": lambda m: _matmul_nbits(m, 8),
        "int8-dynamic": _dynamic,
        "fp16": _fp16,
    }[variant]
    # the quantizers log INFO lines through the root logger (which they configure on import)
    logs = [logging.getLogger(), logging.getLogger(_matmul_nbits.__module__)]
    logs.append(logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer"))
    levels = [log.level for log in logs]
    for log in logs:
        log.setLevel(logging.ERROR)
    try:
        model = make(onnx.load_model(src))
    finally:
        for log, level in zip(logs, levels):
            log.setLevel(level)
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    onnx.save_model(model, dst)
