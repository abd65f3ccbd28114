"""What the search applies to a step's logits before choosing: end tokens, bans, suppressed
sequences, no_repeat_ngram_size, repetition penalty, min / forced end (_Penalties), forced
prefixes and alternatives (_Forcing), and the sampling filters (temperature, top-k, top-p).
Numpy only; the options are prepared for the model (core.options.prepare_options)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .options import GenerationOptions, _new_tokens


def end_ids(opts: GenerationOptions, eos_id: int) -> np.ndarray:
    """The tokens that end a hypothesis: EOS and opts.end_token (ids: prepared options)."""
    extra = [int(t) for t in opts.end_token if not isinstance(t, str)]
    return np.array(sorted({eos_id, *extra}), dtype=np.int64)


def suppressed(opts: GenerationOptions) -> list[tuple[int, ...]]:
    """opts.suppress_sequences as id tuples (ids: prepared options)."""
    return [tuple(s) for s in opts.suppress_sequences if not isinstance(s, str)]


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _check_finite(logits: np.ndarray) -> None:
    """NaN anywhere in a row, or a row with no finite logit, is an error (never passed on)."""
    if not np.isfinite(logits.max(axis=-1)).all():
        raise FloatingPointError("the model produced NaN (or all -inf) logits")


def _check_model(logits: np.ndarray) -> None:
    """NaN or +inf anywhere is the model's (bans only ever write -inf, so this holds of logits
    whose banned tokens were set in place; a row of -inf there is told as all banned)."""
    top = logits.max(axis=-1)
    if np.isnan(top).any() or np.isposinf(top).any():
        raise FloatingPointError("the model produced NaN (or +inf) logits")


class _Penalties:
    """Per-row logit adjustments shared by all strategies: repetition penalty, min length,
    banned ids, banned sequences (suppress_sequences) and no_repeat_ngram_size.

    The history a row is checked against (n-grams, sequences) is its context (an LM's prompt)
    followed by every token fed since, a forced prefix included.
    """

    def __init__(
        self,
        opts: GenerationOptions,
        ends: np.ndarray | int,
        vocab: int,
        context: list[list[int]] | None,
        n: int,
        banned: Sequence[int] = (),
    ):
        self.opts = opts
        self.ends = np.atleast_1d(np.asarray(ends, dtype=np.int64))
        sequences = suppressed(opts)  # ids inside the vocabulary (prepare_options)
        ends_set = set(self.ends.tolist())
        never = {int(t) for t in banned if 0 <= t < vocab and t not in ends_set}
        self.banned = sorted(never | {s[0] for s in sequences if len(s) == 1})
        self.sequences = [s for s in sequences if len(s) > 1]
        self.ngram = opts.no_repeat_ngram_size
        self.history: list[list[int]] | None = None
        if self.ngram > 0 or self.sequences:
            self.history = [list(c) for c in context] if context else [[] for _ in range(n)]
        self.seen = None
        if opts.repetition_penalty != 1.0:
            self.seen = np.zeros((n, vocab), dtype=bool)
            for i, toks in enumerate(context or []):
                self.seen[i, [t for t in toks if 0 <= t < vocab]] = True
        self.forced = opts.forced_end_token  # inside the vocabulary (prepare_options)
        # nothing but (maybe) the end tokens to ban: the common case, checked once here
        self.plain = (
            self.seen is None and not self.banned and self.history is None and self.forced is None
        )
        # nothing to apply at any step but bans (`banned`, and the end tokens while
        # min_new_tokens or ignore_eos say so): _greedy_one's case
        self.bans_only = self.seen is None and self.history is None and self.forced is None

    def apply(
        self, logits: np.ndarray, n_generated: np.ndarray | int, in_place: bool = False
    ) -> np.ndarray:
        """`n_generated`: tokens chosen so far per row (or one count for all): before
        min_new_tokens, the end tokens are banned. in_place: ban in `logits` itself (float32
        logits that nothing reads afterwards) instead of a copy (the copy per step was 64 of
        ~240 ms of Python per 1,000 sentences translated at batch 32)."""
        ban_all, ban_rows = self.opts.ignore_eos, None
        if not ban_all and self.opts.min_new_tokens > 0:
            below = np.asarray(n_generated) < self.opts.min_new_tokens
            if below.all():
                ban_all = True
            elif below.any():
                ban_rows = np.flatnonzero(np.broadcast_to(below, (len(logits),)))
        if self.plain and not ban_all and ban_rows is None:
            return logits
        if self.seen is not None:  # a new array
            p = self.opts.repetition_penalty
            hit = self.seen
            logits = np.where(hit, np.where(logits > 0, logits / p, logits * p), logits)
            logits = logits.astype(np.float32, copy=False)
        else:
            logits = logits.astype(np.float32, copy=not in_place)
        if ban_all:
            logits[:, self.ends] = -np.inf
        elif ban_rows is not None:
            logits[np.ix_(ban_rows, self.ends)] = -np.inf
        if self.banned:
            logits[:, self.banned] = -np.inf
        if self.history is not None:
            for i, h in enumerate(self.history):
                bans = self.history_bans(h)
                if bans:
                    logits[i, bans] = -np.inf
        if self.forced is not None:  # the last position max_new_tokens allows: forced
            last = np.broadcast_to(np.asarray(n_generated) >= _new_tokens(self.opts) - 1,
                                   (len(logits),))  # fmt: skip
            if last.any():
                logits[last] = -np.inf
                logits[last, self.forced] = 0.0
        return logits

    def history_bans(self, h: list[int]) -> list[int]:
        """Tokens that would complete an n-gram of `h` again, or a suppressed sequence."""
        out: list[int] = []
        n = self.ngram
        if n == 1:
            out.extend(h)
        elif n > 1 and len(h) >= n:
            key = h[len(h) - n + 1 :]
            out.extend(h[i + n - 1] for i in range(len(h) - n + 1) if h[i : i + n - 1] == key)
        for seq in self.sequences:
            m = len(seq) - 1
            if len(h) >= m and tuple(h[len(h) - m :]) == seq[:-1]:
                out.append(seq[-1])
        return out

    def observe(self, tokens: np.ndarray) -> None:
        if self.seen is not None:
            self.seen[np.arange(len(tokens)), tokens] = True
        if self.history is not None:
            for h, tok in zip(self.history, tokens.tolist()):
                h.append(tok)

    def select(self, rows: np.ndarray) -> None:
        if self.seen is not None:
            self.seen = self.seen[rows]
        if self.history is not None:
            self.history = [list(self.history[r]) for r in rows.tolist()]


class _Forcing:
    """Tokens a row does not choose: its prefix, fed as it is, then (alternatives) the
    rank-th best token at the first position after it."""

    def __init__(self, prefixes: Sequence[Sequence[int]] | None, ranks: Sequence[int] | None,
                 n: int):  # fmt: skip
        self.prefixes = [list(p) for p in prefixes] if prefixes is not None else [[]] * n
        if len(self.prefixes) != n:
            raise ValueError(f"{len(self.prefixes)} prefixes for a batch of {n}")
        self.lengths = np.array([len(p) for p in self.prefixes], dtype=np.int64)
        self.ranks = None if ranks is None else np.asarray(ranks, dtype=np.int64)
        self.on = bool(self.lengths.any()) or self.ranks is not None

    def prefix_tokens(self, t: int, rows: np.ndarray) -> np.ndarray:
        return np.array([self.prefixes[r][t] for r in rows.tolist()], dtype=np.int64)

    def branch(self, t: int, rows: np.ndarray) -> np.ndarray:
        """Mask of `rows` that branch at step t (alternatives)."""
        if self.ranks is None:
            return np.zeros(len(rows), dtype=bool)
        return self.lengths[rows] == t


def _ranked(logits: np.ndarray, rank: int) -> int:
    """The rank-th best token of a row (0: the argmax; ties by lower id)."""
    return int(np.argsort(-logits, kind="stable")[rank])


def filter_logits(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """Temperature, then top-k, then nucleus (top-p) filtering; removed entries become -inf."""
    logits = logits.astype(np.float64) / temperature  # float64: a small temperature cannot overflow
    if 0 < top_k < logits.shape[-1]:
        kth = np.partition(logits, -top_k, axis=-1)[:, -top_k][:, None]
        logits = np.where(logits < kth, -np.inf, logits)
    if top_p < 1.0:
        order = np.argsort(-logits, axis=-1)
        sorted_logits = np.take_along_axis(logits, order, axis=-1)
        probs = np.exp(log_softmax(sorted_logits))
        before = np.cumsum(probs, axis=-1) - probs  # mass of strictly better tokens
        drop_sorted = before >= top_p  # keeps the smallest prefix reaching top_p (never empty)
        drop = np.zeros_like(drop_sorted)
        np.put_along_axis(drop, order, drop_sorted, axis=-1)
        logits = np.where(drop, -np.inf, logits)
    return logits


ALL_BANNED = "no token can be chosen: every token is banned at this step"
