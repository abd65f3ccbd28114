"""What the search applies to a step's logits before choosing: a list of processors, applied in
order (`Processors`; mlx-lm's logits_processors): repetition penalty, end tokens banned before
min_new_tokens, banned ids, no_repeat_ngram_size, suppressed sequences, the caller's own (a
grammar: runtime/structured.py), the forced end token; forced prefixes and alternatives
(_Forcing), and the sampling filters (temperature, top-k, top-p). A new rule is a new
LogitsProcessor. Numpy only; the options are prepared for the model
(core.options.prepare_options)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


class LogitsProcessor:
    """One rule of what a step's logits go through before the choice (mlx-lm's
    logits_processors): the decode loop applies a list of them in order (`Processors`), so a
    new rule is a new class. A processor holds per-row state for the loop's rows: `observe`
    sees each step's tokens (chosen or forced), `select` follows the loop's rows as
    `Stepper.select` does (keep / reorder / repeat)."""

    bans_only = False  # only ever bans fixed ids (the batch-1 greedy path may run it)

    def active(self, n_generated: np.ndarray | int) -> bool:
        """Whether `apply` changes anything at this step (none active: the logits as they are)."""
        return True

    def apply(self, logits: np.ndarray, n_generated: np.ndarray | int) -> np.ndarray:
        """(N, V) float32 logits the loop owns (write in place, or return a new array);
        `n_generated`: tokens chosen so far per row (or one count for all)."""
        raise NotImplementedError

    def observe(self, tokens: np.ndarray) -> None:
        """The (N,) tokens fed after this step."""

    def select(self, rows: np.ndarray) -> None:
        """Row i of the new state is row rows[i] of the old."""


class RepetitionPenalty(LogitsProcessor):
    """Tokens already in a row's context or output: logit / p if positive, * p if not."""

    def __init__(self, penalty: float, vocab: int, context: list[list[int]] | None, n: int):
        self.penalty = penalty
        self.seen = np.zeros((n, vocab), dtype=bool)
        for i, toks in enumerate(context or []):
            self.seen[i, [t for t in toks if 0 <= t < vocab]] = True

    def apply(self, logits: np.ndarray, n_generated: np.ndarray | int) -> np.ndarray:
        p, hit = self.penalty, self.seen  # a new array
        logits = np.where(hit, np.where(logits > 0, logits / p, logits * p), logits)
        return logits.astype(np.float32, copy=False)

    def observe(self, tokens: np.ndarray) -> None:
        self.seen[np.arange(len(tokens)), tokens] = True

    def select(self, rows: np.ndarray) -> None:
        self.seen = self.seen[rows]


class EndBan(LogitsProcessor):
    """The end tokens, banned before min_new_tokens (ignore_eos: always)."""

    bans_only = True

    def __init__(self, ends: np.ndarray, min_new_tokens: int, ignore_eos: bool):
        self.ends, self.min_new, self.always = ends, min_new_tokens, ignore_eos

    def rows(self, n_generated: np.ndarray | int, n: int) -> np.ndarray | None:
        """The rows whose end tokens are banned at this step (None: all; empty: none)."""
        if self.always:
            return None
        if self.min_new <= 0:
            return np.zeros(0, dtype=np.int64)
        below = np.asarray(n_generated) < self.min_new
        if below.all():
            return None
        return np.flatnonzero(np.broadcast_to(below, (n,)))

    def active(self, n_generated: np.ndarray | int) -> bool:
        return self.always or (self.min_new > 0 and bool(np.any(np.asarray(n_generated)
                                                                < self.min_new)))  # fmt: skip

    def apply(self, logits: np.ndarray, n_generated: np.ndarray | int) -> np.ndarray:
        rows = self.rows(n_generated, len(logits))
        if rows is None:
            logits[:, self.ends] = -np.inf
        elif len(rows):
            logits[np.ix_(rows, self.ends)] = -np.inf
        return logits


class TokenBan(LogitsProcessor):
    """Ids never chosen (the runtime's padding and BOS, one-token suppress_sequences)."""

    bans_only = True

    def __init__(self, banned: list[int]):
        self.banned = banned

    def apply(self, logits: np.ndarray, n_generated: np.ndarray | int) -> np.ndarray:
        logits[:, self.banned] = -np.inf
        return logits


class _HistoryBan(LogitsProcessor):
    """A rule over each row's history: its context (an LM's prompt) followed by every token fed
    since, a forced prefix included; `bans(h)` are the tokens it rules out after history h."""

    def __init__(self, context: list[list[int]] | None, n: int):
        self.history = [list(c) for c in context] if context else [[] for _ in range(n)]

    def bans(self, h: list[int]) -> list[int]:
        raise NotImplementedError

    def apply(self, logits: np.ndarray, n_generated: np.ndarray | int) -> np.ndarray:
        for i, h in enumerate(self.history):
            bans = self.bans(h)
            if bans:
                logits[i, bans] = -np.inf
        return logits

    def observe(self, tokens: np.ndarray) -> None:
        for h, tok in zip(self.history, tokens.tolist()):
            h.append(tok)

    def select(self, rows: np.ndarray) -> None:
        self.history = [list(self.history[r]) for r in rows.tolist()]


class NoRepeatNgram(_HistoryBan):
    """no_repeat_ngram_size: the tokens that would complete an n-gram of the history again."""

    def __init__(self, size: int, context: list[list[int]] | None, n: int):
        super().__init__(context, n)
        self.size = size

    def bans(self, h: list[int]) -> list[int]:
        n = self.size
        if n == 1:
            return list(h)
        if len(h) < n:
            return []
        key = h[len(h) - n + 1 :]
        return [h[i + n - 1] for i in range(len(h) - n + 1) if h[i : i + n - 1] == key]


class SuppressSequences(_HistoryBan):
    """suppress_sequences of two tokens or more: the last token of one whose others end the
    history."""

    def __init__(self, sequences: list[tuple[int, ...]], context: list[list[int]] | None, n: int):
        super().__init__(context, n)
        self.sequences = sequences

    def bans(self, h: list[int]) -> list[int]:
        out = []
        for seq in self.sequences:
            m = len(seq) - 1
            if len(h) >= m and tuple(h[len(h) - m :]) == seq[:-1]:
                out.append(seq[-1])
        return out


class ForcedEnd(LogitsProcessor):
    """forced_end_token: the only token at the last position max_new_tokens allows."""

    def __init__(self, token: int, max_new_tokens: int):
        self.token, self.last = token, max_new_tokens - 1

    def apply(self, logits: np.ndarray, n_generated: np.ndarray | int) -> np.ndarray:
        last = np.broadcast_to(np.asarray(n_generated) >= self.last, (len(logits),))
        if last.any():
            logits[last] = -np.inf
            logits[last, self.token] = 0.0
        return logits


ProcessorFactory = Callable[[int], LogitsProcessor]
"""A rule the caller adds (PreparedOptions.logits_processors): a processor for n fresh rows."""


class Processors:
    """The rules of one decoding, in the order they apply: repetition penalty, end bans, token
    bans, n-grams, suppressed sequences, the caller's own (a grammar), the forced end token."""

    def __init__(
        self,
        opts: GenerationOptions,
        ends: np.ndarray | int,
        vocab: int,
        context: list[list[int]] | None,
        n: int,
        banned: Sequence[int] = (),
    ):
        ends = np.atleast_1d(np.asarray(ends, dtype=np.int64))
        sequences = suppressed(opts)  # ids inside the vocabulary (prepare_options)
        ends_set = set(ends.tolist())
        never = {int(t) for t in banned if 0 <= t < vocab and t not in ends_set}
        self.banned = sorted(never | {s[0] for s in sequences if len(s) == 1})
        longer = [s for s in sequences if len(s) > 1]
        items: list[LogitsProcessor] = []
        if opts.repetition_penalty != 1.0:
            items.append(RepetitionPenalty(opts.repetition_penalty, vocab, context, n))
        if opts.ignore_eos or opts.min_new_tokens > 0:
            items.append(EndBan(ends, opts.min_new_tokens, opts.ignore_eos))
        if self.banned:
            items.append(TokenBan(self.banned))
        if opts.no_repeat_ngram_size > 0:
            items.append(NoRepeatNgram(opts.no_repeat_ngram_size, context, n))
        if longer:
            items.append(SuppressSequences(longer, context, n))
        added = getattr(opts, "logits_processors", ())
        if not added and opts.constraint() is not None:
            raise ValueError(
                "structured output (response_format, json_schema, regex, grammar) needs the "
                "runtime's Model.prepare: the token masks come from the package's tokenizer"
            )
        items.extend(make(n) for make in added)
        if opts.forced_end_token is not None:  # inside the vocabulary (prepare_options)
            items.append(ForcedEnd(opts.forced_end_token, _new_tokens(opts)))
        self.items = items
        # nothing to apply at any step but bans (`banned`, and the end tokens while
        # min_new_tokens or ignore_eos say so): _greedy_one's case
        self.bans_only = all(p.bans_only for p in items)

    def apply(
        self, logits: np.ndarray, n_generated: np.ndarray | int, in_place: bool = False
    ) -> np.ndarray:
        """Every processor active at this step, in order. in_place: write into `logits` itself
        (float32 logits that nothing reads afterwards) instead of a copy (the copy per step was
        64 of ~240 ms of Python per 1,000 sentences translated at batch 32); none active: the
        logits as they are."""
        active = [p for p in self.items if p.active(n_generated)]
        if not active:
            return logits
        if not isinstance(active[0], RepetitionPenalty):  # that one makes a new array
            logits = logits.astype(np.float32, copy=not in_place)
        for p in active:
            logits = p.apply(logits, n_generated)
        return logits

    def observe(self, tokens: np.ndarray) -> None:
        for p in self.items:
            p.observe(tokens)

    def select(self, rows: np.ndarray) -> None:
        for p in self.items:
            p.select(rows)


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
