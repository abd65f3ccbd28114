"""Training batches: translation pairs grouped by length into token-count batches, and a
language model's random windows."""

from __future__ import annotations

import numpy as np
import torch


def pair_lengths(pairs: list) -> list[int]:
    """A (source, target) pair's padded length in a batch: the longer of the source and the
    target with BOS / EOS (token_batches' lengths)."""
    return [max(len(s), len(t) + 1) for s, t in pairs]


def token_batches(
    lengths: list[int], batch_tokens: int, seed: int | None = None
) -> list[list[int]]:
    """Indices grouped by length into batches of <= batch_tokens padded tokens, then shuffled.

    With a seed, equal lengths are ordered at random and the batch order is shuffled."""
    lengths_ = np.asarray(lengths)
    rng = np.random.default_rng(seed) if seed is not None else None
    ties = rng.random(len(lengths_)) if rng is not None else np.arange(len(lengths_))
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in np.lexsort((ties, lengths_)):
        longest_with_i = max(longest, int(lengths_[i]))
        if cur and longest_with_i * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur, longest_with_i = [], int(lengths_[i])
        cur.append(int(i))
        longest = longest_with_i
    if cur:
        batches.append(cur)
    if rng is not None:
        rng.shuffle(batches)
    return batches


def get_batch(data: np.ndarray, block: int, batch: int, rng: np.random.Generator):
    """Random windows: x (B, block), y = x shifted left by one."""
    ix = rng.integers(0, len(data) - block - 1, size=batch)
    x = np.stack([data[i : i + block] for i in ix])
    y = np.stack([data[i + 1 : i + 1 + block] for i in ix])
    return torch.from_numpy(x).long(), torch.from_numpy(y).long()
