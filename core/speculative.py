"""Speculative decoding, exact: drafted tokens checked by the target model in one call.

A `Drafter` proposes the next few tokens of a row; the target runs them all in one call (the
package's decoder returns the logits after each: format 6's `indexed_logits`) and keeps the
longest prefix it agrees with, plus one token of its own, so a call gives 1 .. k + 1 tokens.
The decode loop is core.decoding's (`_speculative_one`); this module holds what it drafts with
and the rule that accepts a draft:

- greedy: a drafted token is kept when it is the target's argmax there (the adjusted logits,
  every processor applied), so the output is the plain greedy output, token for token;
- sampling: the standard rule (Leviathan et al. 2023, Chen et al. 2023): a token drafted from
  q is kept with probability min(1, p / q) (p: the target's sampling distribution there, after
  temperature / top-k / top-p), else the token comes from max(p - q, 0) renormalised; a
  deterministic draft (prompt lookup, a greedy draft model) is q one-hot. The output has the
  distribution of plain sampling (not the same samples: the random draws differ).

Drafters: `PromptLookup` (n-grams of the prompt and the output so far, no second model:
Hugging Face's prompt_lookup_num_tokens, llama.cpp's lookup decoding) and the runtime's draft
package (runtime/speculative.py `DraftModel`: a smaller model with the same tokenizer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

# prompt lookup matches the last 3 tokens of the text, else the last 2, else the last one
LOOKUP_MAX_NGRAM, LOOKUP_MIN_NGRAM = 3, 1
MAX_DRAFT_TOKENS = 64  # tokens drafted per verification, at most


@dataclass
class Draft:
    """The tokens proposed after a row's text, and (a sampled draft) the distribution each was
    drawn from, (k, V); None: chosen deterministically (q one-hot)."""

    tokens: list[int]
    probs: np.ndarray | None = None


class Drafter(Protocol):
    def propose(self, history: list[int], k: int) -> Draft:
        """At most k tokens to follow `history` (the prompt and every token kept so far; it
        only grows between calls, by the tokens the target kept)."""
        ...


@dataclass
class SpeculationStats:
    """What speculation did: target calls that verified a draft, the plain steps (no draft),
    tokens drafted and kept, and the tokens the calls produced."""

    verifications: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    tokens: int = 0

    @property
    def tokens_per_call(self) -> float:
        """New tokens per target call (plain decoding: 1)."""
        return self.tokens / max(self.verifications + self.steps, 1)

    @property
    def acceptance(self) -> float:
        """The share of drafted tokens the target kept."""
        return self.accepted / max(self.drafted, 1)

    def add(self, other: SpeculationStats) -> None:
        for name in ("verifications", "steps", "drafted", "accepted", "tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Speculation:
    """One decoding's speculation: its drafter, tokens drafted per call, and its counts."""

    drafter: Drafter
    tokens: int
    stats: SpeculationStats = field(default_factory=SpeculationStats)


class PromptLookup:
    """Drafts from the text itself: the tokens that followed the latest earlier occurrence of
    its last n tokens (n = LOOKUP_MAX_NGRAM down to LOOKUP_MIN_NGRAM). An index of every
    n-gram's latest start is kept up to date as the history grows (O(1) per token)."""

    def __init__(self, max_ngram: int = LOOKUP_MAX_NGRAM, min_ngram: int = LOOKUP_MIN_NGRAM):
        self.sizes = range(max_ngram, min_ngram - 1, -1)
        self.index: dict[tuple[int, ...], int] = {}  # n-gram -> its latest start with a follower
        self.seen = 0  # history[:seen] is indexed

    def _index(self, history: list[int]) -> None:
        # an n-gram enters the index once a token follows it
        for end in range(max(self.seen, 1), len(history)):
            for n in self.sizes:
                if end - n >= 0:
                    self.index[tuple(history[end - n : end])] = end - n
        self.seen = len(history)

    def propose(self, history: list[int], k: int) -> Draft:
        self._index(history)
        for n in self.sizes:
            start = self.index.get(tuple(history[-n:])) if len(history) > n else None
            if start is not None:
                return Draft(history[start + n : start + n + k])
        return Draft([])


def accept_sampled(
    p: np.ndarray, token: int, q: np.ndarray | None, rng: np.random.Generator
) -> int:
    """The standard acceptance rule for one drafted `token`: itself (kept), or the token drawn
    from the residual max(p - q, 0) (q None: one-hot on `token`), which is never `token`."""
    q_token = 1.0 if q is None else float(q[token])
    if rng.random() * q_token < p[token]:  # u < min(1, p / q)
        return token
    residual = p.astype(np.float64).copy()
    if q is None:
        residual[token] = 0.0
    else:
        residual = np.maximum(residual - q, 0.0)
    total = residual.sum()
    if not total > 0:  # p == q: kept with probability 1 but for rounding
        return token
    u = rng.random() * total
    return int(min(np.searchsorted(np.cumsum(residual), u, side="right"), len(p) - 1))
