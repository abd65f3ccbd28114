"""GPTQ for the int4 variant: each linear layer's 4-bit weights chosen against its inputs.

Frantar et al., "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
Transformers" (2022): quantize a (N, K) weight one input column at a time and move each
column's rounding error onto the columns not yet quantized, in proportion to the inverse
Hessian H = X^T X of the layer's inputs X. The output is MatMulNBits' 4-bit format (a scale
per block of `bs` inputs, from the block as reached: its absmax, or an asymmetric grid with a
zero point), so the kernels, size and speed are those of round-to-nearest on that grid; only
which 4-bit values are stored changes. The inputs come from a few hundred training examples
(`calibration_batches`), never the validation split that export's held-out check reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from .quantize import Blocks, asymmetric_grid

DAMP = 0.01  # of the mean of H's diagonal, added to it (the paper's default)
CALIBRATION_EXAMPLES = 512  # training examples whose activations make H

Hessians = dict[nn.Module, np.ndarray] | None  # {linear layer: X^T X of its inputs}


def layer_hessians(model: nn.Module, batches: Iterable[tuple]) -> dict[nn.Module, np.ndarray]:
    """{linear layer: X^T X (K, K) of its inputs} over `batches` (each model(*batch))."""
    acc: dict[nn.Module, torch.Tensor] = {}

    def hook(mod: nn.Module, inputs: tuple, _out) -> None:
        x = inputs[0].reshape(-1, inputs[0].shape[-1]).float()  # (rows, K)
        # a batch's X^T X in float32 (4x faster than float64 on a CPU), summed in float64
        xtx = (x.T @ x).double()
        acc[mod] = acc.get(mod, torch.zeros_like(xtx)) + xtx

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Linear)]
    try:
        with torch.no_grad():
            for batch in batches:
                model(*batch)
    finally:
        for h in handles:
            h.remove()
    return {m: h.numpy() for m, h in acc.items()}


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one intra-op thread, restored after: GPTQ's column loop is thousands of small
    ops, which a second thread only slows (on this 2-core host under load a 1536 x 576 layer
    took 12 s on 2 threads, 1.0 s on one)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def gptq_int4(w_nk: np.ndarray, H: np.ndarray, bs: int, asymmetric: bool = False) -> Blocks:
    """(N, K) weight, (K, K) input Hessian -> 4-bit Blocks along K (K a multiple of bs).
    Symmetric: q in [-8, 7] + 8, a block's scale its signed absmax / -8 when GPTQ reaches it;
    asymmetric: each block's grid (scale, zero point) of least squared error on its values as
    GPTQ reaches them (quantize.asymmetric_grid)."""
    with one_thread():
        return _gptq_int4(w_nk, H, bs, asymmetric)


def _gptq_int4(w_nk: np.ndarray, H: np.ndarray, bs: int, asymmetric: bool) -> Blocks:
    W = torch.from_numpy(np.array(w_nk, dtype=np.float64))
    Hd = torch.from_numpy(np.array(H, dtype=np.float64))
    N, K = W.shape
    dead = torch.diag(Hd) == 0  # inputs never seen: their weights cannot matter
    Hd[dead, dead] = 1.0
    W[:, dead] = 0.0
    Hd += DAMP * torch.mean(torch.diag(Hd)) * torch.eye(K, dtype=Hd.dtype)
    # the upper Cholesky factor of H^-1: row i holds how column i's error spreads to the rest
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(Hd)), upper=True)
    q_all = torch.zeros(N, K, dtype=torch.uint8)
    scales = torch.zeros(N, K // bs, dtype=W.dtype)
    zeros = torch.full((N, K // bs), 8.0, dtype=W.dtype)
    for b0 in range(0, K, bs):
        block = W[:, b0 : b0 + bs]  # a view: updated in place below
        if asymmetric:
            s_np, z_np = asymmetric_grid(block.numpy().astype(np.float32))
            s, z = torch.from_numpy(s_np).double(), torch.from_numpy(z_np).double()
        else:
            peak = torch.gather(block, 1, block.abs().argmax(1, keepdim=True))[:, 0]  # (N,)
            s, z = peak / -8.0, torch.full((N,), 8.0, dtype=W.dtype)
        scales[:, b0 // bs], zeros[:, b0 // bs] = s, z
        safe = torch.where(s == 0, torch.ones_like(s), s)
        err = torch.zeros_like(block)
        for i in range(bs):
            col = block[:, i]
            q = torch.where(s == 0, z, torch.clamp(torch.round(col / safe) + z, 0, 15))
            q_all[:, b0 + i] = q.to(torch.uint8)
            e = (col - (q - z) * s) / Hinv[b0 + i, b0 + i]
            block[:, i + 1 :] -= e[:, None] * Hinv[b0 + i, b0 + i + 1 : b0 + bs][None, :]
            err[:, i] = e
        W[:, b0 + bs :] -= err @ Hinv[b0 : b0 + bs, b0 + bs :]
    z_out = zeros.numpy().astype(np.uint8) if asymmetric else None
    return Blocks(4, bs, q_all.numpy(), scales.float().numpy(), z_out)
