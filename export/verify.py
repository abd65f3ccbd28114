"""Parity check of a package against its checkpoint, through the runtime's own step loop.

PyTorch (the checkpoint, through the model's incremental interface) picks every next token; the
package's graphs are fed the same tokens by `runtime.steppers` (the loop that Translator and
Generator use), and the logits of both are compared at every step.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def random_batch(cfg, batch: int, length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random ids (B, L), right-padded, and their 1/0 mask, with varied lengths."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(max(cfg.pad_id, cfg.bos_id, cfg.eos_id) + 1, cfg.vocab_size, (batch, length))
    lengths = rng.integers(max(1, length // 2), length + 1, batch)
    lengths[0] = length
    mask = np.arange(length)[None, :] < lengths[:, None]
    ids = np.where(mask, ids, cfg.pad_id).astype(np.int64)
    return ids, mask.astype(np.int64)


def _left_padded(ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The PyTorch LM takes left-padded prompts."""
    out, out_mask = np.zeros_like(ids), np.zeros_like(mask)
    for b, n in enumerate(mask.sum(axis=1)):
        out[b, ids.shape[1] - n :], out_mask[b, ids.shape[1] - n :] = ids[b, :n], 1
    return out, out_mask


def compare(
    model, package, variant: str = "fp32", batch: int = 2, length: int = 7, steps: int = 6, seed=0
) -> list[float]:
    """Max abs logit difference (PyTorch vs the package) at each of 1 + `steps` decoder calls."""
    import torch

    from ..runtime.api import Model
    from ..runtime.steppers import start_decoder_only, start_encoder_decoder

    cfg = model.cfg
    runtime = Model(package.path, cfg.family, variant, provider="cpu", threads=1)
    ids, mask = random_batch(cfg, batch, length, seed)
    diffs = []

    def diff(ref: torch.Tensor, got: np.ndarray) -> torch.Tensor:
        diffs.append(float(np.abs(ref[:, -1].numpy() - got).max()))
        return ref[:, -1].argmax(-1, keepdim=True)  # (B, 1) next token, chosen by PyTorch

    with torch.no_grad():
        if cfg.family == "encoder-decoder":
            t_mask = torch.from_numpy(mask)
            cross = model.cross_kv(model.encode(torch.from_numpy(ids), t_mask))
            stepper, first = start_encoder_decoder(runtime.graphs, runtime.config, ids, mask, steps)
            tok = torch.full((batch, 1), cfg.bos_id, dtype=torch.long)
            logits, cache = model.decode(tok, cross, t_mask)
            tok = diff(logits, first)
            for _ in range(steps):
                logits, cache = model.decode(tok, cross, t_mask, cache)
                tok = diff(logits, stepper.step(tok[:, 0].numpy()))
        else:
            left, left_mask = (torch.from_numpy(a) for a in _left_padded(ids, mask))
            stepper, first = start_decoder_only(runtime.graphs, runtime.config, ids, mask, steps)
            logits, cache = model(left, left_mask)
            tok = diff(logits, first)
            for _ in range(steps):
                left_mask = torch.cat((left_mask, torch.ones(batch, 1, dtype=torch.long)), 1)
                logits, cache = model(tok, left_mask, cache)
                tok = diff(logits, stepper.step(tok[:, 0].numpy()))
    return diffs


def verify_package(
    package_dir: str | os.PathLike, checkpoint_dir: str | os.PathLike, variant: str = "fp32"
) -> float:
    """Max abs logit difference over a short greedy generation (batch 2, padded inputs)."""
    from ..models.checkpoint import load_checkpoint
    from ..runtime.package import load_package

    model, _ = load_checkpoint(Path(checkpoint_dir))
    return max(compare(model, load_package(package_dir), variant))
