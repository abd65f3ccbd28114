"""A draft package for speculative decoding: a smaller model with the target's tokenizer proposes
the next tokens, the target verifies them in one call (core/speculative.py has the rule, and
prompt lookup, the drafter without a second model).

`DraftModel` is one request's drafter: its own one-row cache (steppers.take_decoder), kept in
step with the target's text: before each proposal the positions past the longest prefix it
shares with the text are dropped and the rest of the text fed in one call; then k tokens,
greedy, or (when the request samples) sampled as the request samples, each with its
distribution (the acceptance rule's q).
"""

from __future__ import annotations

import numpy as np

from ..core.decoding import GenerationOptions, sampling_probs
from ..core.speculative import Draft
from .model import Model
from .steppers import CachedDecoder, give_back, take_decoder


def check_draft_tokenizer(target: Model, draft: Model) -> None:
    """ValueError unless the draft's tokenizer gives every id the target's token: a draft
    proposes ids, which mean nothing under another vocabulary."""
    want = target.tokenizer.get_vocab(with_added_tokens=True)
    got = draft.tokenizer.get_vocab(with_added_tokens=True)
    if want == got:
        return
    by_id = {i: t for t, i in want.items()}
    differ = sorted(
        {i for t, i in got.items() if by_id.get(i) != t} | (set(by_id) - {*got.values()})
    )
    first = differ[0]
    raise ValueError(
        f"draft package {draft.package.path}: its tokenizer is not the target's ({len(differ)} of "
        f"{len(want)} ids differ; id {first}: {by_id.get(first)!r} in the target, "
        f"{next((t for t, i in got.items() if i == first), None)!r} in the draft); a draft "
        "must have the target's tokenizer"
    )


class DraftModel:
    """One request's drafter over a draft package (core.speculative.Drafter)."""

    def __init__(self, model: Model, opts: GenerationOptions, capacity: int, vocab: int):
        self.model, self.opts = model, opts
        self.capacity = min(capacity, model.max_len)  # positions the request can reach
        self.vocab = vocab  # the target's logits width (the draft's may differ)
        self.rng = np.random.default_rng(None if opts.seed is None else opts.seed + 1)
        self.dec: CachedDecoder | None = None
        self.cached: list[int] = []  # the tokens in the draft's cache

    def propose(self, history: list[int], k: int) -> Draft:
        k = min(k, self.capacity - len(history))  # the draft's positions
        if k <= 0:
            return Draft([])
        logits = self._catch_up(history)
        tokens: list[int] = []
        probs: list[np.ndarray] = []
        while True:
            if self.opts.sampling:
                p = sampling_probs(logits, self.opts)[0]
                d = int(min(np.searchsorted(np.cumsum(p), self.rng.random() * p.sum()),
                            len(p) - 1))  # fmt: skip
                probs.append(self._target_width(p))
            else:
                d = int(logits[0].argmax())
            if d >= self.vocab:  # a token the target cannot produce: the draft ends before it
                probs = probs[: len(tokens)]
                break
            tokens.append(d)
            if len(tokens) == k:
                break
            assert self.dec is not None
            logits = self.dec.step(np.array([d], dtype=np.int64))
            self.cached.append(d)
        return Draft(tokens, np.stack(probs) if probs else None)

    def _catch_up(self, history: list[int]) -> np.ndarray:
        """The draft's cache made to hold `history` (its positions past their common prefix
        dropped, the rest fed in one call): the (1, V) logits after it."""
        if self.dec is None:
            m = self.model
            self.dec = take_decoder(m.graphs["decoder"], m.config, self.capacity, 1)
        common = 0
        for a, b in zip(self.cached, history):
            if a != b:
                break
            common += 1
        common = min(common, len(history) - 1)  # at least one token fed: its logits
        self.dec.drop_last(len(self.cached) - common)
        new = np.array([history[common:]], dtype=np.int64)
        positions = np.arange(common, len(history), dtype=np.int64)[None]
        logits = self.dec.run(new, positions, np.array([len(history)], dtype=np.int64))
        self.cached = list(history)
        return logits

    def _target_width(self, p: np.ndarray) -> np.ndarray:
        """A draft distribution over the target's vocabulary (cut or zero-padded)."""
        if len(p) >= self.vocab:
            return p[: self.vocab]
        return np.pad(p, (0, self.vocab - len(p)))

    def close(self) -> None:
        """The draft's decoder given back for the next request."""
        if self.dec is not None:
            give_back(self.dec)
            self.dec = None
