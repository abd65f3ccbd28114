"""Weights in MatMulNBits' blocks: how each scheme picks a block's codes, scale and zero point.

A (N, K) weight is cut into blocks of `bs` values along K; MatMulNBits computes a block's values
as (q - z) * s: codes q in [0, 2**bits), one float scale s per block, and a zero point z that
is either implied (2**(bits - 1): symmetric) or stored per block (uint8 codes, two per byte at 4
bits: asymmetric). One function per scheme:

| scheme       | a block's scale and zero point                                | used by       |
|--------------|---------------------------------------------------------------|---------------|
| `absmax`     | symmetric: the signed absmax -> -2**(bits-1) (onnxruntime's   | int8, gguf's  |
|              | quantize_matmul_4bits / 8bits, bit for bit)                   | other weights |
| `searched`   | symmetric, 4 bits: the absmax scale shrunk to the least       | int4          |
|              | squared error                                                 |               |
| `asymmetric` | 4 bits: the block's [min, max] range shrunk, the zero point   | int4 of a     |
|              | rounded, to the least squared error                           | converted LM  |
| GPTQ         | export/gptq.py: either grid, the codes chosen against the     | int4 with     |
|              | layer's inputs                                                | calibration   |

Codes, scales and zero points stay integers / floats here (`Blocks`); `Blocks.packed` and
`Blocks.packed_zero_points` are MatMulNBits' byte layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SCALE_GRID = np.linspace(0.70, 1.0, 16, dtype=np.float32)  # of the absmax scale, both signs
RANGE_GRID = np.linspace(0.75, 1.0, 11, dtype=np.float32)  # of a block's [min, max] width


@dataclass
class Blocks:
    """A (N, K) weight as (q - z) * s per block of `block` values along K: codes q (N, K)
    uint8 in [0, 2**bits), scales (N, K / block) float32, zero points (N, K / block) uint8 or
    None (implied: 2**(bits - 1))."""

    bits: int
    block: int
    q: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray | None = None

    def values(self) -> np.ndarray:
        """The float32 (N, K) weight MatMulNBits computes with."""
        N, K = self.q.shape
        q = self.q.reshape(N, K // self.block, self.block).astype(np.float32)
        z = self.zero_points if self.zero_points is not None else 1 << (self.bits - 1)
        return ((q - np.asarray(z, np.float32)[..., None]) * self.scales[..., None]).reshape(N, K)

    @property
    def packed(self) -> np.ndarray:
        """(N, K / block, block * bits / 8) uint8: 4-bit codes two per byte, the first low."""
        N, K = self.q.shape
        q = self.q.reshape(N, K // self.block, self.block)
        return q if self.bits == 8 else q[..., 0::2] | (q[..., 1::2] << 4)

    @property
    def packed_zero_points(self) -> np.ndarray | None:
        """(N, ceil(K / block * bits / 8)) uint8, MatMulNBits' zero_points input; None when
        implied."""
        z = self.zero_points
        if z is None or self.bits == 8:
            return z
        if z.shape[1] % 2:  # an odd number of blocks: the last byte's high nibble unused
            z = np.pad(z, ((0, 0), (0, 1)))
        return z[:, 0::2] | (z[:, 1::2] << 4)


def _blocks(w_nk: np.ndarray, bs: int) -> np.ndarray:
    """(N, K) -> (N, K / bs, bs); K a multiple of bs."""
    N, K = w_nk.shape
    assert K % bs == 0, f"K={K} is not a multiple of the block size {bs}"
    return w_nk.reshape(N, K // bs, bs)


def codes(w_nk: np.ndarray, bits: int, bs: int, scales: np.ndarray, zero_points=None):
    """The codes of a (N, K) weight on the grid of `scales` (and `zero_points`; None: implied):
    round to nearest, clipped to [0, 2**bits); 0-scale blocks get the zero point."""
    blocks = _blocks(w_nk, bs)
    z = (1 << (bits - 1)) if zero_points is None else zero_points[..., None].astype(np.float32)
    safe = np.where(scales == 0, 1.0, scales)[..., None]
    q = np.clip(np.rint(blocks / safe) + z, 0, (1 << bits) - 1)
    q = np.where(scales[..., None] == 0, z, q)
    return q.astype(np.uint8).reshape(w_nk.shape)


def absmax(w_nk: np.ndarray, bits: int, bs: int) -> Blocks:
    """Symmetric blocks whose scale maps the block's signed largest-magnitude value to
    -2**(bits - 1), as onnxruntime's quantize_matmul_4bits / 8bits do (MLAS, symmetric; round
    half away from zero): the same bytes, without onnxruntime's private API."""
    blocks = _blocks(w_nk.astype(np.float32), bs)
    lo, hi = blocks.min(-1), blocks.max(-1)
    peak = np.where(np.abs(hi) > np.abs(lo), hi, lo)  # the signed absmax; a tie: the min
    scales = (peak / np.float32(-(1 << (bits - 1)))).astype(np.float32)
    recip = np.where(scales == 0, 0.0, 1.0 / np.where(scales == 0, 1.0, scales)).astype(np.float32)
    # roundf(v / s + z) in float32, as MLAS: the zero point added before rounding (x.5 up)
    x = blocks * recip[..., None] + np.float32(1 << (bits - 1))
    q = np.clip(np.floor(x + np.float32(0.5)), 0, (1 << bits) - 1).astype(np.uint8)
    return Blocks(bits, bs, q.reshape(w_nk.shape), scales)


def searched_scales(blocks: np.ndarray, bits: int = 4) -> np.ndarray:
    """The symmetric scale of least squared error of each (..., bs) block: the absmax scale
    (its largest-magnitude value -> -2**(bits-1)) shrunk by SCALE_GRID, or that value ->
    2**(bits-1) - 1 likewise; 0 for an all-zero block."""
    lo_q, hi_q = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    idx = np.abs(blocks).argmax(-1)[..., None]
    peak = np.take_along_axis(blocks, idx, -1)  # (..., 1): signed largest magnitude
    cands = np.concatenate([peak / lo_q * SCALE_GRID, peak / hi_q * SCALE_GRID], -1)
    cands = np.where(cands == 0, 1.0, cands).astype(np.float32)  # (..., F)
    best = np.full(peak.shape[:-1], np.inf, np.float32)
    scales = np.ones(peak.shape[:-1], np.float32)
    for f in range(cands.shape[-1]):
        s = cands[..., f : f + 1]
        err = ((np.clip(np.rint(blocks / s), lo_q, hi_q) * s - blocks) ** 2).sum(-1)
        better = err < best
        best, scales = np.where(better, err, best), np.where(better, s[..., 0], scales)
    return np.where(peak[..., 0] == 0, 0.0, scales).astype(np.float32)


def searched(w_nk: np.ndarray, bs: int) -> Blocks:
    """Symmetric 4-bit blocks, each block's scale chosen to minimise its squared error
    (searched_scales)."""
    scales = searched_scales(_blocks(w_nk.astype(np.float32), bs))
    return Blocks(4, bs, codes(w_nk, 4, bs, scales), scales)


def asymmetric_grid(blocks: np.ndarray, bits: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """(scales, zero points) of (..., bs) blocks on an asymmetric grid with the least squared
    error: the symmetric grid's candidates (searched_scales), and the block's [min, max] (0
    always inside, as llama.cpp's Q4_1 / Q4_K minima) shrunk by RANGE_GRID, anchored at min,
    at max or centred, the zero point rounded to a code."""
    top = (1 << bits) - 1
    lo = np.minimum(blocks.min(-1), 0.0)
    hi = np.maximum(blocks.max(-1), 0.0)
    width = hi - lo
    # the symmetric grid's candidates first (zero point 2**(bits - 1)): never worse than them
    sym = searched_scales(blocks, bits)
    sym_safe = np.where(sym == 0, 1.0, sym)[..., None]
    mid = 1 << (bits - 1)
    q = np.clip(np.rint(blocks / sym_safe) + mid, 0, top)
    best = (((q - mid) * sym[..., None] - blocks) ** 2).sum(-1)
    scales, zeros = sym, np.full(lo.shape, mid, np.float32)
    for f in RANGE_GRID:
        s = width * f / top
        safe = np.where(s == 0, 1.0, s)
        for start in (lo, hi - width * f, lo + width * (1 - f) / 2):
            z = np.clip(np.rint(-start / safe), 0, top)
            q = np.clip(np.rint(blocks / safe[..., None]) + z[..., None], 0, top)
            err = (((q - z[..., None]) * s[..., None] - blocks) ** 2).sum(-1)
            better = err < best
            best = np.where(better, err, best)
            scales, zeros = np.where(better, s, scales), np.where(better, z, zeros)
    return scales.astype(np.float32), zeros.astype(np.uint8)


def asymmetric(w_nk: np.ndarray, bs: int, bits: int = 4) -> Blocks:
    """4-bit blocks with a zero point each (MatMulNBits' uint8 zero_points), the grid of least
    squared error per block (asymmetric_grid)."""
    scales, zeros = asymmetric_grid(_blocks(w_nk.astype(np.float32), bs), bits)
    return Blocks(bits, bs, codes(w_nk, bits, bs, scales, zeros), scales, zeros)
