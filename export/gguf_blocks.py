"""GGUF's quantized blocks as MatMulNBits / GatherBlockQuantized weights, kept as they are.

Each GGML block type is unpacked into integer codes with a scale per block (`IntBlocks`, the
export/quantize.py Blocks that the builder writes), which MatMulNBits dequantizes as
(q - zero_point) * scale, the zero point implied (2**(bits - 1)):

| GGML type | its values              | MatMulNBits               | exact                       |
|-----------|-------------------------|---------------------------|-----------------------------|
| Q8_0      | d q, q in [-127, 127]   | 8 bits, block 32          | yes                         |
| Q4_0      | d (q - 8), q in [0, 15] | 4 bits, block 32          | yes                         |
| Q5_0      | d (q - 16)              | 8 bits, block 32          | yes                         |
| Q6_K      | d s_j (q - 32)          | 8 bits, block 16          | yes                         |
| Q4_1 Q5_1 | d q + m                 | 8 bits, block 32          | to 1/254 of a block's absmax|
| Q4_K Q5_K | d s_j q - dmin m_j      | 8 bits, block 32          | likewise                    |

The minima (Q4_1, Q5_1, Q4_K, Q5_K) are what MatMulNBits cannot hold as they are: its fast CPU
kernels take integer zero points only (float zero points: a ~40x slower path at 4 bits, refused
at 8), and with int8 compute even integer ones cost accuracy (measured, docs/design-notes.md).
So such a block becomes symmetric 8-bit codes (`_affine`): exact where its minimum is a whole
number of 1/k steps, else each value within half of the block's absmax / 127 (an int8 step),
~1/16 of the 4-bit type's own rounding. F32 / F16 / BF16 tensors stay float; other types (Q2_K,
Q3_K, the IQ types) are not kept: export quantizes their dequantized values as int8 does, and
says so per type.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .quantize import Blocks

FLOAT_TYPES = ("F32", "F16", "BF16")
NOT_IN_FILE = "not in the file"  # a weight whose rows the file does not hold as they are


@dataclass
class IntBlocks(Blocks):
    """A GGUF weight's blocks as quantize.Blocks (MatMulNBits' layout; symmetric: the zero point
    implied), with `max_error`: the largest distance from the file's own values (0.0: exact)."""

    max_error: float = 0.0

    def with_layout(self, bits: int, block: int) -> IntBlocks:
        """The same values at more bits (the codes re-centred on the wider zero point) and/or
        in smaller blocks (the scales repeated)."""
        assert bits >= self.bits and self.block % block == 0 and self.zero_points is None
        shift = (1 << (bits - 1)) - (1 << (self.bits - 1))
        q = (self.q.astype(np.int16) + shift).astype(np.uint8)
        scales = np.repeat(self.scales, self.block // block, 1)
        return IntBlocks(bits, block, q, scales, max_error=self.max_error)


def _f16(raw: np.ndarray, at: int) -> np.ndarray:
    """(N, B) float16 fields at byte `at` of each (N, B, size) block, as float32."""
    return raw[..., at : at + 2].copy().view(np.float16)[..., 0].astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(..., 16) bytes -> (..., 32) codes: the low nibbles first, then the high (GGML's order
    within a block of 32)."""
    return np.concatenate([qs & 0x0F, qs >> 4], -1)


def _high_bits(qh: np.ndarray, n: int) -> np.ndarray:
    """(..., 4) bytes of a little-endian uint32 -> its low n bits as (..., n) 0/1 values."""
    word = qh.copy().view("<u4")[..., 0]
    return ((word[..., None] >> np.arange(n, dtype=np.uint32)) & 1).astype(np.uint8)


def _k_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K's 12 bytes -> (8 six-bit scales, 8 six-bit minima) per super-block."""
    s = s.astype(np.uint8)
    sc = np.empty((*s.shape[:-1], 8), np.uint8)
    mn = np.empty_like(sc)
    sc[..., :4], mn[..., :4] = s[..., 0:4] & 63, s[..., 4:8] & 63
    sc[..., 4:] = (s[..., 8:12] & 0x0F) | ((s[..., 0:4] >> 6) << 4)
    mn[..., 4:] = (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)
    return sc, mn


def _symmetric(bits: int, block: int, codes: np.ndarray, scales: np.ndarray, offset: int):
    """Codes with the type's own offset (value = scale (code - offset)) re-centred on
    MatMulNBits' implied zero point 2**(bits - 1)."""
    N = codes.shape[0]
    q = (codes.astype(np.int16) - offset + (1 << (bits - 1))).astype(np.uint8).reshape(N, -1)
    return IntBlocks(bits, block, q, scales.astype(np.float32))


def _affine(codes: np.ndarray, scales: np.ndarray, offsets: np.ndarray, top: int) -> IntBlocks:
    """value = scale code + offset (codes in [0, top]) -> symmetric 8-bit codes (zero point
    implied). Where the offset is a whole number of 1/k steps (k a power of two: exact), the
    codes are k code - that number, exact; elsewhere each value is rounded on its own to the
    block's absmax / 127 steps, as int8 quantizes. Not zero points: MatMulNBits' int8 compute
    with uint8 zero points costs this model 6x the perplexity of symmetric codes (the zero
    point's term cancels a large part of the product; measured on SmolLM2-135M's Q4_1 file,
    docs/design-notes.md), and rounding a zero point moves a whole block the same way."""
    N, nb, bs = codes.shape
    exact = codes * scales[..., None] + offsets[..., None]  # (N, nb, bs)
    step = np.zeros_like(scales)
    shift = np.zeros_like(scales)
    done = np.zeros(scales.shape, bool)
    safe = np.where(scales > 0, scales, 1.0)
    for e in range(int(np.floor(np.log2(255 / top))), -1, -1):
        k = 2.0**e
        t = -k * offsets / safe  # the offset in steps of scale / k, where it is whole
        fits = ~done & (scales > 0) & (t == np.rint(t)) & (t <= 128) & (k * top - t <= 127)
        step, shift, done = np.where(fits, scales / k, step), np.where(fits, t, shift), done | fits
    peak = np.abs(exact).max(-1)
    step = np.where(done, step, np.where(peak > 0, peak / 127, 1.0)).astype(np.float32)
    c = np.where(done[..., None], codes * (scales / step)[..., None] - shift[..., None],
                 np.rint(exact / step[..., None]))  # fmt: skip
    q = (np.clip(np.rint(c), -128, 127) + 128).astype(np.uint8).reshape(N, -1)
    out = IntBlocks(8, bs, q, step)
    out.max_error = float(np.abs(out.values() - exact.reshape(N, -1)).max()) if exact.size else 0.0
    return out


def int_blocks(type_name: str, raw: np.ndarray, K: int) -> IntBlocks | None:
    """A (N, row_bytes) tensor of GGML type `type_name` with rows of K values as IntBlocks;
    None for a type that is not kept (float types, Q2_K, Q3_K, the IQ types)."""
    N = raw.shape[0]
    if type_name == "Q8_0":
        b = raw.reshape(N, K // 32, 34)
        return _symmetric(8, 32, b[..., 2:].view(np.int8).astype(np.int16) + 128, _f16(b, 0), 128)
    if type_name in ("Q4_0", "Q4_1"):
        b = raw.reshape(N, K // 32, 20 if type_name == "Q4_1" else 18)
        head = 4 if type_name == "Q4_1" else 2
        codes = _nibbles(b[..., head : head + 16])
        if type_name == "Q4_0":
            return _symmetric(4, 32, codes, _f16(b, 0), 8)
        return _affine(codes, _f16(b, 0), _f16(b, 2), 15)
    if type_name in ("Q5_0", "Q5_1"):
        b = raw.reshape(N, K // 32, 24 if type_name == "Q5_1" else 22)
        head = 4 if type_name == "Q5_1" else 2
        codes = _nibbles(b[..., head + 4 : head + 20]) | (
            _high_bits(b[..., head : head + 4], 32) << 4
        )
        if type_name == "Q5_0":
            return _symmetric(8, 32, codes, _f16(b, 0), 16)
        return _affine(codes, _f16(b, 0), _f16(b, 2), 31)
    if type_name in ("Q4_K", "Q5_K"):
        five = type_name == "Q5_K"
        b = raw.reshape(N, K // 256, 176 if five else 144)
        d, dmin = _f16(b, 0), _f16(b, 2)
        sc, mn = _k_scales(b[..., 4:16])
        qs = b[..., 48:176] if five else b[..., 16:144]  # (N, S, 128): 4 chunks of 32 bytes
        chunks = qs.reshape(N, -1, 4, 32)
        codes = np.stack([chunks & 0x0F, chunks >> 4], 3).reshape(N, -1, 8, 32)  # sub-blocks
        if five:
            qh = b[..., 16:48]  # bit j of byte l: the fifth bit of sub-block j's value l
            bits = (qh[..., None, :] >> np.arange(8, dtype=np.uint8)[None, None, :, None]) & 1
            codes = codes | (bits << 4)
        scales = (d[..., None] * sc).reshape(N, -1)
        offsets = -(dmin[..., None] * mn).reshape(N, -1)
        return _affine(codes.reshape(N, -1, 32), scales, offsets, 31 if five else 15)
    if type_name == "Q6_K":
        b = raw.reshape(N, K // 256, 210)
        ql, qh = b[..., 0:128], b[..., 128:192]
        sc = b[..., 192:208].view(np.int8).astype(np.float32)
        d = _f16(b, 208)
        halves = []
        for h in range(2):  # each 128 values: ql 64 bytes, qh 32 bytes
            lo, hi = ql[..., 64 * h : 64 * h + 64], qh[..., 32 * h : 32 * h + 32]
            parts = [
                (lo[..., 0:32] & 0x0F) | (((hi >> 0) & 3) << 4),
                (lo[..., 32:64] & 0x0F) | (((hi >> 2) & 3) << 4),
                (lo[..., 0:32] >> 4) | (((hi >> 4) & 3) << 4),
                (lo[..., 32:64] >> 4) | (((hi >> 6) & 3) << 4),
            ]
            halves.append(np.concatenate(parts, -1))
        codes = np.concatenate(halves, -1)  # (N, S, 256), value order
        scales = (d[..., None] * sc).reshape(N, -1)  # a scale per 16 values
        return _symmetric(8, 16, codes.reshape(N, -1, 16), scales, 32)
    if type_name == "Q3_K":  # d (sc - 32) (q - 4): signed 3-bit codes, a scale per 16 values
        b = raw.reshape(N, K // 256, 110)
        hmask, qs, packed = b[..., 0:32], b[..., 32:96], b[..., 96:108]
        d = _f16(b, 108)
        lo = np.concatenate([packed[..., 0:8] & 0x0F, packed[..., 0:8] >> 4], -1)  # (N, S, 16)
        hi = np.concatenate([(packed[..., 8:12] >> (2 * s)) & 3 for s in range(4)], -1)
        sc = (lo | (hi << 4)).astype(np.float32) - 32
        groups = [
            ((qs[..., 32 * (j // 4) : 32 * (j // 4) + 32] >> (2 * (j % 4))) & 3)
            | (((hmask >> j) & 1) << 2)
            for j in range(8)
        ]  # each (N, S, 32): q + 4 in [0, 8)
        codes = np.concatenate(groups, -1)
        scales = (d[..., None] * sc).reshape(N, -1)
        return _symmetric(4, 16, codes.reshape(N, -1, 16), scales, 4)
    if type_name == "Q2_K":  # d sc q - dmin m per 16 values: its minima, as Q4_K's
        b = raw.reshape(N, K // 256, 84)
        packed, qs = b[..., 0:16], b[..., 16:80]
        d, dmin = _f16(b, 80), _f16(b, 82)
        groups = [(qs[..., 32 * (j // 4) : 32 * (j // 4) + 32] >> (2 * (j % 4))) & 3
                  for j in range(8)]  # fmt: skip
        codes = np.concatenate(groups, -1).reshape(N, -1, 16)
        scales = (d[..., None] * (packed & 0x0F)).reshape(N, -1)
        offsets = -(dmin[..., None] * (packed >> 4)).reshape(N, -1)
        return _affine(codes, scales, offsets, 3)
    if type_name in ("IQ4_NL", "MXFP4"):  # d level[q]: a 16-level table of int8 values
        size = 18 if type_name == "IQ4_NL" else 17
        b = raw.reshape(N, K // 32, size)
        if type_name == "IQ4_NL":
            d, levels = _f16(b, 0), IQ4_LEVELS
        else:  # an E8M0 exponent, halved: the doubled E2M1 values' scale
            e = b[..., 0].astype(np.uint32)  # ggml_e8m0_to_fp32_half's bits
            d = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23))
            d, levels = d.astype(np.uint32).view(np.float32), MXFP4_LEVELS
        codes = levels[_nibbles(b[..., size - 16 :])].astype(np.int16) + 128
        return _symmetric(8, 32, codes, d, 128)
    if type_name == "IQ4_XS":  # d (ls - 32) level[q] per 32 values
        b = raw.reshape(N, K // 256, 136)
        d = _f16(b, 0)
        high = b[..., 2:4].copy().view("<u2")[..., 0]  # (N, S): 2 bits per sub-block
        low = np.concatenate([b[..., 4:8, None] & 0x0F, b[..., 4:8, None] >> 4], -1)
        low = low.reshape(N, -1, 8)
        hbits = (high[..., None] >> (2 * np.arange(8, dtype=np.uint16))) & 3
        ls = (low | (hbits.astype(np.uint8) << 4)).astype(np.float32) - 32
        codes = IQ4_LEVELS[_nibbles(b[..., 8:136].reshape(N, -1, 8, 16))].astype(np.int16) + 128
        scales = (d[..., None] * ls).reshape(N, -1)
        return _symmetric(8, 32, codes.reshape(N, -1, 32), scales, 128)
    if type_name == "TQ2_0":  # d (q - 1), q in {0, 1, 2}: ternary, one scale per 256
        b = raw.reshape(N, K // 256, 66)
        qs, d = b[..., 0:64], _f16(b, 64)
        groups = [(qs[..., 32 * (j // 4) : 32 * (j // 4) + 32] >> (2 * (j % 4))) & 3
                  for j in range(8)]  # fmt: skip
        codes = np.concatenate(groups, -1)  # (N, S, 256)
        return _symmetric(4, 256, codes, d, 1).with_layout(4, 32)
    return None


IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                      np.int16)  # fmt: skip  # kvalues_iq4nl
MXFP4_LEVELS = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int16)


def merged(parts: Sequence[IntBlocks]) -> IntBlocks:
    """Row blocks of one weight (a packed Q/K/V, gate/up) in one layout: the most bits and the
    smallest block of the parts."""
    bits, block = max(p.bits for p in parts), min(p.block for p in parts)
    same = [p.with_layout(bits, block) for p in parts]
    q = np.concatenate([p.q for p in same])
    scales = np.concatenate([p.scales for p in same])
    return IntBlocks(bits, block, q, scales, max_error=max(p.max_error for p in parts))


@dataclass
class NativeRows:
    """Where each row of a checkpoint weight is in the GGUF file: rows are found by their
    float32 bytes (the checkpoint's weights are the file dequantized, copied as they are by the
    converters, even into packed Q/K/V), so any loader's concatenation or reordering maps."""

    blocks: dict[str, tuple[str, np.ndarray]]  # GGUF name -> (type, raw rows)
    index: dict[bytes, tuple[str, int]]  # a row's float32 bytes digest -> (GGUF name, row)

    @classmethod
    def of_checkpoint(cls, folder: Path) -> NativeRows | None:
        """From a checkpoint converted from GGUF (models/gguf: GGUF_BLOCKS); None otherwise."""
        import hashlib

        import gguf
        from safetensors import safe_open

        from ..models.gguf import GGUF_BLOCKS

        path = folder / GGUF_BLOCKS
        if not path.is_file():
            return None
        blocks: dict[str, tuple[str, np.ndarray]] = {}
        index: dict[bytes, tuple[str, int]] = {}
        with safe_open(str(path), "np") as f:
            meta = f.metadata() or {}
            for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                info = json.loads(meta[name])
                raw = f.get_tensor(name)
                blocks[name] = (info["type"], raw)
                if len(info["shape"]) != 2:
                    continue
                kind = gguf.GGMLQuantizationType[info["type"]]
                values = np.asarray(gguf.quants.dequantize(raw, kind), np.float32)
                for i, row in enumerate(values.reshape(info["shape"])):
                    index.setdefault(hashlib.blake2b(row.tobytes(), digest_size=16).digest(),
                                     (name, i))  # fmt: skip
        return cls(blocks, index)

    def find(self, w_nk: np.ndarray) -> tuple[IntBlocks | None, str]:
        """(IntBlocks of the weight, its GGML types "Q4_K" / "Q4_K+Q6_K"): None when a part is
        of a type not kept (a float type, the IQ grids: export re-quantizes it and reports its
        types), or when a row is not in the file ("not in the file": a transformed weight)."""
        import hashlib

        K = w_nk.shape[1]
        spans: list[tuple[str, int, int]] = []  # (GGUF name, first row, last row + 1)
        for r in np.ascontiguousarray(w_nk, np.float32):
            hit = self.index.get(hashlib.blake2b(r.tobytes(), digest_size=16).digest())
            if hit is None:
                return None, NOT_IN_FILE
            name, i = hit
            if spans and spans[-1][0] == name and spans[-1][2] == i:
                spans[-1] = (name, spans[-1][1], i + 1)
            else:
                spans.append((name, i, i + 1))
        types = "+".join(dict.fromkeys(self.blocks[name][0] for name, _, _ in spans))
        parts = []
        for name, a, b in spans:
            kind, raw = self.blocks[name]
            part = int_blocks(kind, raw[a:b], K)
            if part is None:
                return None, types
            parts.append(part)
        out = merged(parts)
        out.max_error = float(np.abs(out.values() - w_nk).max())  # against gguf-py's values
        return out, types
