"""Parity check of a package against its checkpoint, through the runtime's own step loop.

PyTorch (the checkpoint, through the model's incremental interface) picks every next token; the
package's graphs are fed the same tokens by `runtime.steppers` (the loop that Translator and
Generator use), and the logits of both are compared at every step.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def random_batch(cfg, batch: int, length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random ids (B, L), right-padded, and their 1/0 mask, with varied lengths: prompts, or
    sources (drawn from the encoder's vocabulary, which may be its own)."""
    rng = np.random.default_rng(seed)
    # any id but the special ones (which need not be the lowest: GPT-2's EOS is its last id)
    allowed = np.setdiff1d(np.arange(cfg.source_vocab), [cfg.pad_id, cfg.bos_id, cfg.eos_id])
    ids = allowed[rng.integers(0, len(allowed), (batch, length))]
    lengths = rng.integers(max(1, length // 2), length + 1, batch)
    lengths[0] = length
    mask = np.arange(length)[None, :] < lengths[:, None]
    ids = np.where(mask, ids, cfg.source_pad_id).astype(np.int64)
    return ids, mask.astype(np.int64)


def _left_padded(ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The PyTorch LM takes left-padded prompts."""
    out, out_mask = np.zeros_like(ids), np.zeros_like(mask)
    for b, n in enumerate(mask.sum(axis=1)):
        out[b, ids.shape[1] - n :], out_mask[b, ids.shape[1] - n :] = ids[b, :n], 1
    return out, out_mask


def torch_greedy(model, ids: np.ndarray, mask: np.ndarray, steps: int) -> list[np.ndarray]:
    """PyTorch's last-position logits (B, V) at each of 1 + `steps` decoder calls on right-padded
    inputs (sources, or prompts); each call's argmax is the next call's token."""
    import torch

    cfg, batch = model.cfg, len(ids)
    out: list[np.ndarray] = []

    def keep(logits: torch.Tensor) -> torch.Tensor:
        out.append(logits[:, -1].float().numpy())
        return logits[:, -1].argmax(-1, keepdim=True)  # (B, 1) the next token

    with torch.no_grad():
        if cfg.family == "encoder-decoder":
            t_mask = torch.from_numpy(mask)
            cross = model.cross_kv(model.encode(torch.from_numpy(ids), t_mask))
            tok = torch.full((batch, 1), cfg.bos_id, dtype=torch.long)
            logits, cache = model.decode(tok, cross, t_mask)
            for _ in range(steps):
                logits, cache = model.decode(keep(logits), cross, t_mask, cache)
        else:
            left, left_mask = (torch.from_numpy(a) for a in _left_padded(ids, mask))
            logits, cache = model(left, left_mask)
            for _ in range(steps):
                left_mask = torch.cat((left_mask, torch.ones(batch, 1, dtype=torch.long)), 1)
                logits, cache = model(keep(logits), left_mask, cache)
        keep(logits)
    return out


def compare_variants(
    model,
    package,
    variants: Sequence[str],
    batch: int = 2,
    length: int = 7,
    steps: int = 6,
    seed: int = 0,
    scales: list[float] | None = None,
) -> dict[str, list[float]]:
    """{variant: max abs logit difference (PyTorch vs the package) at each of 1 + `steps`
    decoder calls}: every variant is fed PyTorch's tokens through the runtime's own step loop;
    PyTorch runs once for all of them. scales: given, gets each call's largest |logit| of
    PyTorch's."""
    from ..runtime.model import Model
    from ..runtime.session import RuntimeSettings
    from ..runtime.verify import forced_logits

    cfg = model.cfg
    ids, mask = random_batch(cfg, batch, length, seed)
    ref = torch_greedy(model, ids, mask, steps)
    tokens = [r.argmax(-1) for r in ref[:-1]]
    if scales is not None:
        scales.extend(float(np.abs(r).max()) for r in ref)
    diffs: dict[str, list[float]] = {}
    for variant in variants:
        settings = RuntimeSettings(variant, threads=1, provider="cpu")
        runtime = Model(package.path, cfg.family, settings)
        got = forced_logits(runtime, ids, mask, tokens)
        diffs[variant] = [float(np.abs(a - b).max()) for a, b in zip(ref, got)]
    return diffs


def compare(
    model, package, variant: str = "fp32", batch: int = 2, length: int = 7, steps: int = 6, seed=0
) -> list[float]:
    """Max abs logit difference (PyTorch vs the package) at each of 1 + `steps` decoder calls:
    the package is fed PyTorch's tokens through the runtime's own step loop."""
    return compare_variants(model, package, [variant], batch, length, steps, seed)[variant]


def golden_record(model, batch: int = 3, length: int = 9, steps: int = 15, k: int = 16, seed=1):
    """PyTorch's greedy run on fixed random inputs, stored in a package for `edgeformer verify`:
    the inputs, the token chosen at each decoder call and the k largest logits there."""
    from ..core.schema import Golden

    ids, mask = random_batch(model.cfg, batch, length, seed)
    ref = torch_greedy(model, ids, mask, steps)
    top = [np.argsort(-r, axis=-1, kind="stable")[:, :k] for r in ref]
    return Golden(
        inputs=[row[: int(m.sum())].tolist() for row, m in zip(ids, mask)],
        tokens=[r.argmax(-1).tolist() for r in ref],
        top_ids=[t.tolist() for t in top],
        top_logits=[np.take_along_axis(r, t, -1).tolist() for r, t in zip(ref, top)],
    )


def max_diffs(
    package_dir: str | os.PathLike, checkpoint_dir: str | os.PathLike, variants: Sequence[str]
) -> dict[str, float]:
    """{variant: largest logit difference over a short greedy generation (batch 2, padded
    inputs), as a share of the largest |logit| of PyTorch's call where that is above 1}: the
    checkpoint loaded once for all the variants. Scaled, because float32's rounding grows with
    the logits: a trained Gemma 3 (262k vocabulary, logits to ~50) differs by 3.8e-04 in
    absolute terms, 1e-05 of its scale; a wrong graph differs by a good part of it."""
    from ..models.checkpoint import load_checkpoint
    from ..runtime.package import load_package

    model, _ = load_checkpoint(Path(checkpoint_dir))
    scales: list[float] = []
    diffs = compare_variants(model, load_package(package_dir), variants, scales=scales)
    return {
        v: max(x / max(1.0, s) for x, s in zip(d, scales, strict=True)) for v, d in diffs.items()
    }


def verify_package(
    package_dir: str | os.PathLike, checkpoint_dir: str | os.PathLike, variant: str = "fp32"
) -> float:
    """Max abs logit difference over a short greedy generation (batch 2, padded inputs)."""
    return max_diffs(package_dir, checkpoint_dir, [variant])[variant]


# largest logit difference of the fp32 graphs against PyTorch, as a share of the logits' scale
# where that is above 1 (max_diffs)
FP32_PARITY = 1e-4


class ParityError(ValueError):
    """The fp32 graphs do not reproduce PyTorch's logits."""


def check_parity(
    package_dir: str | os.PathLike,
    checkpoint_dir: str | os.PathLike,
    variants: Sequence[str],
    verbose: bool = True,
) -> dict[str, float]:
    """export_package's parity check: every variant against PyTorch (max_diffs), its largest
    logit difference said on stderr (verbose); fp32 beyond FP32_PARITY (or NaN) is a
    ParityError, and the package is not written. Returns the differences."""
    diffs = max_diffs(package_dir, checkpoint_dir, variants)
    for variant, d in diffs.items():
        if verbose:
            print(f"parity {variant}: max |logit diff| vs PyTorch {d:.2e} of the logits' scale "
                  "(every logit of a greedy run on 2 padded inputs)", file=sys.stderr)  # fmt: skip
    d = diffs["fp32"]
    if not d <= FP32_PARITY:
        raise ParityError(
            f"fp32 parity check failed: max |logit diff| vs PyTorch {d:.2e} of the logits' "
            f"scale > {FP32_PARITY:g}; no package was written"
        )
    return diffs
