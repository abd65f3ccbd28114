"""Decoding algorithms over a step function, in numpy only.

Written once and used by both sides: the ONNX runtime (edgeformer.runtime) and the PyTorch
evaluation (edgeformer.train). A model is reached through a `Stepper`:

    step(tokens)  (N,) int64 next input token per row -> (N, V) float32 logits for the token after
    select(rows)  keep / reorder / repeat rows of the cache: row i of the new state is rows[i]

The caller runs the first pass itself (encoder + first decoder step, or the prompt prefill) and
hands over its last-position logits (B, V). Outputs never include BOS or the final EOS.
`banned` ids (the runtime passes padding and BOS) are never chosen, by any strategy.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class Stepper(Protocol):
    def step(self, tokens: np.ndarray) -> np.ndarray: ...

    def select(self, rows: np.ndarray) -> None: ...


@dataclass
class GenerationOptions:
    max_new_tokens: int = 64
    min_new_tokens: int = 0  # EOS is forbidden before this many tokens
    sampling: bool = False  # False: greedy (or beam search when num_beams > 1)
    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    seed: int | None = None
    num_beams: int = 1
    length_penalty: float = 1.0  # beam score = sum log p / length ** length_penalty
    early_stopping: bool = True  # stop a beam search once num_beams hypotheses have finished
    num_hypotheses: int = 1  # n-best size returned by beam search
    repetition_penalty: float = 1.0  # > 1 discourages tokens already in the context / output
    ignore_eos: bool = False  # always generate max_new_tokens (benchmarks)

    def __post_init__(self) -> None:
        """One validation for the API and the CLI: every problem is a ValueError."""

        def bad(msg: str) -> None:
            raise ValueError(f"invalid generation option: {msg}")

        for name in ("max_new_tokens", "min_new_tokens", "top_k", "num_beams", "num_hypotheses"):
            value = getattr(self, name)
            if not _is_int(value):
                bad(f"{name}={value!r} must be an integer (got {type(value).__name__})")
        if self.seed is not None and not _is_int(self.seed):
            bad(f"seed={self.seed!r} must be an integer or None (got {type(self.seed).__name__})")
        for name in ("temperature", "top_p", "length_penalty", "repetition_penalty"):
            value = getattr(self, name)
            if not _is_real(value):
                bad(f"{name}={value!r} must be a number (got {type(value).__name__})")
            if not math.isfinite(value):
                bad(f"{name}={value!r} must be finite")
        for name in ("sampling", "early_stopping", "ignore_eos"):
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                bad(f"{name}={value!r} must be True or False (got {type(value).__name__})")
        if self.max_new_tokens < 1:
            bad(f"max_new_tokens={self.max_new_tokens} must be >= 1")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            bad(f"min_new_tokens={self.min_new_tokens} must be in [0, max_new_tokens]")
        if self.seed is not None and self.seed < 0:
            bad(f"seed={self.seed} must be >= 0 (or None)")
        if not self.temperature > 0:
            bad(f"temperature={self.temperature} must be > 0")
        if self.temperature < MIN_TEMPERATURE:
            bad(
                f"temperature={self.temperature} must be >= {MIN_TEMPERATURE} (smaller ones "
                "underflow the softmax; greedy decoding, sampling=False, is the limit)"
            )
        if self.top_k < 0:
            bad(f"top_k={self.top_k} must be >= 0")
        if not 0 < self.top_p <= 1:
            bad(f"top_p={self.top_p} must be in (0, 1]")
        if self.num_beams < 1:
            bad(f"num_beams={self.num_beams} must be >= 1")
        if self.sampling and self.num_beams > 1:
            bad("sampling and beam search (num_beams > 1) cannot be combined")
        if not 1 <= self.num_hypotheses <= self.num_beams:
            bad(f"num_hypotheses={self.num_hypotheses} must be in [1, num_beams]")
        if not self.repetition_penalty > 0:
            bad(f"repetition_penalty={self.repetition_penalty} must be > 0")


MIN_TEMPERATURE = 1e-4


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


@dataclass
class Hypothesis:
    tokens: list[int]
    score: float  # length-normalised log-probability


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _check_finite(logits: np.ndarray) -> None:
    """NaN anywhere in a row, or a row with no finite logit, is an error (never passed on)."""
    if not np.isfinite(logits.max(axis=-1)).all():
        raise FloatingPointError("the model produced NaN (or all -inf) logits")


class _Penalties:
    """Per-row logit adjustments shared by all strategies: repetition penalty and min length."""

    def __init__(
        self,
        opts: GenerationOptions,
        eos_id: int,
        vocab: int,
        context: list[list[int]] | None,
        n: int,
        banned: Sequence[int] = (),
    ):
        self.opts, self.eos_id = opts, eos_id
        self.banned = sorted({int(t) for t in banned if 0 <= t < vocab and t != eos_id})
        self.seen = None
        if opts.repetition_penalty != 1.0:
            self.seen = np.zeros((n, vocab), dtype=bool)
            for i, toks in enumerate(context or []):
                self.seen[i, [t for t in toks if 0 <= t < vocab]] = True

    def apply(self, logits: np.ndarray, n_generated: int) -> np.ndarray:
        ban_eos = self.opts.ignore_eos or n_generated < self.opts.min_new_tokens
        if self.seen is None and not ban_eos and not self.banned:
            return logits
        logits = logits.astype(np.float32, copy=True)
        if self.seen is not None:
            p = self.opts.repetition_penalty
            hit = self.seen
            logits = np.where(hit, np.where(logits > 0, logits / p, logits * p), logits)
        if ban_eos:
            logits[:, self.eos_id] = -np.inf
        if self.banned:
            logits[:, self.banned] = -np.inf
        return logits

    def observe(self, tokens: np.ndarray) -> None:
        if self.seen is not None:
            self.seen[np.arange(len(tokens)), tokens] = True

    def select(self, rows: np.ndarray) -> None:
        if self.seen is not None:
            self.seen = self.seen[rows]


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


def _choose(logits: np.ndarray, opts: GenerationOptions, rng: np.random.Generator) -> np.ndarray:
    if not np.isfinite(logits.max(axis=-1)).all():  # every token banned (tiny vocabularies)
        raise ValueError("no token can be chosen: every token is banned at this step")
    if not opts.sampling:
        return logits.argmax(axis=-1)
    logits = filter_logits(logits, opts.temperature, opts.top_k, opts.top_p)
    if not np.isfinite(logits.max(axis=-1)).all():  # nothing left to sample from
        raise ValueError(
            f"sampling has no token with a finite probability (temperature={opts.temperature}, "
            f"top_k={opts.top_k}, top_p={opts.top_p})"
        )
    probs = np.exp(log_softmax(logits))  # max subtracted first: never overflows
    u = rng.random(len(probs))[:, None]
    return np.minimum((np.cumsum(probs, axis=-1) < u).sum(axis=-1), probs.shape[-1] - 1)


def iter_tokens(
    first_logits: np.ndarray,
    stepper: Stepper,
    opts: GenerationOptions,
    eos_id: int,
    context: list[list[int]] | None = None,
    banned: Sequence[int] = (),
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Greedy or sampling, one step at a time: yields (rows, tokens) for the rows still running.

    `rows` are indices into the original batch. A row stops at EOS (not yielded) or at
    max_new_tokens; finished rows are dropped from the cache with `stepper.select`.
    """
    rng = np.random.default_rng(opts.seed)
    n, vocab = first_logits.shape
    penalties = _Penalties(opts, eos_id, vocab, context, n, banned)
    active = np.arange(n)
    logits = first_logits
    for t in range(opts.max_new_tokens):
        _check_finite(logits)
        tokens = _choose(penalties.apply(logits, t), opts, rng).astype(np.int64)
        alive = tokens != eos_id
        if alive.any():
            yield active[alive], tokens[alive]
        if t + 1 == opts.max_new_tokens or not alive.any():
            return
        if not alive.all():
            keep = np.flatnonzero(alive)
            stepper.select(keep)
            penalties.select(keep)
            active, tokens = active[keep], tokens[keep]
        penalties.observe(tokens)
        logits = stepper.step(tokens)


def greedy_or_sample(
    first_logits: np.ndarray,
    stepper: Stepper,
    opts: GenerationOptions,
    eos_id: int,
    context: list[list[int]] | None = None,
    banned: Sequence[int] = (),
) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(len(first_logits))]
    for rows, tokens in iter_tokens(first_logits, stepper, opts, eos_id, context, banned):
        for r, tok in zip(rows.tolist(), tokens.tolist()):
            out[r].append(tok)
    return out


def beam_search(
    first_logits: np.ndarray,
    stepper: Stepper,
    opts: GenerationOptions,
    eos_id: int,
    context: list[list[int]] | None = None,
    banned: Sequence[int] = (),
) -> list[list[Hypothesis]]:
    """Beam search; returns the n-best hypotheses per batch row, best first."""
    B, vocab = first_logits.shape
    K = opts.num_beams
    lp = opts.length_penalty

    def normalise(score: float, length: int) -> float:
        return score / max(length, 1) ** lp

    _check_finite(first_logits)
    rep_context = [c for c in (context or [[]] * B) for _ in range(K)]
    penalties = _Penalties(opts, eos_id, vocab, rep_context, B * K, banned)
    rows = np.repeat(np.arange(B), K)
    stepper.select(rows)
    logp = log_softmax(penalties.apply(np.repeat(first_logits, K, axis=0), 0))
    # Only the first beam of each row is live at the start (the others are copies).
    beam_scores = np.tile(np.r_[0.0, np.full(K - 1, -np.inf)], B)
    seqs: list[list[int]] = [[] for _ in range(B * K)]
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    done = np.zeros(B, dtype=bool)

    for t in range(opts.max_new_tokens):
        # the best 2K continuations of each beam, then the best 2K of each batch row
        cand = beam_scores[:, None] + logp  # (B*K, V)
        m = min(2 * K, vocab)
        best = np.argpartition(-cand, m - 1, axis=-1)[:, :m]  # (B*K, m) token ids
        best_scores = np.take_along_axis(cand, best, -1).reshape(B, K * m)
        flat = (np.arange(B * K)[:, None] * vocab + best).reshape(B, K * m) % (K * vocab)
        order = np.argsort(-best_scores, axis=-1, kind="stable")[:, : 2 * K]
        top = np.take_along_axis(flat, order, -1)  # (B, 2K) indices into beam * vocab + token
        top_scores = np.take_along_axis(best_scores, order, -1)
        new_rows: list[int] = []
        new_tokens: list[int] = []
        new_scores: list[float] = []
        for b in range(B):
            chosen = 0
            for idx, score in zip(top[b].tolist(), top_scores[b].tolist()):
                beam, tok = divmod(int(idx), vocab)
                src = b * K + beam
                if done[b] or score == -np.inf:
                    new_rows.append(b * K)
                    new_tokens.append(eos_id)
                    new_scores.append(-np.inf)
                    chosen += 1
                elif tok == eos_id:
                    finished[b].append((normalise(score, t + 1), seqs[src]))
                    continue
                else:
                    new_rows.append(src)
                    new_tokens.append(tok)
                    new_scores.append(score)
                    chosen += 1
                if chosen == K:
                    break
            while chosen < K:  # fewer than K live candidates (tiny vocabularies)
                new_rows.append(b * K)
                new_tokens.append(eos_id)
                new_scores.append(-np.inf)
                chosen += 1
        rows = np.asarray(new_rows)
        tokens = np.asarray(new_tokens, dtype=np.int64)
        beam_scores = np.asarray(new_scores)
        seqs = [seqs[r] + [int(tok)] for r, tok in zip(rows, tokens)]
        for b in range(B):
            if done[b] or len(finished[b]) < K:
                continue
            if opts.early_stopping:
                done[b] = True
            else:  # stop when no live beam can still beat the worst kept hypothesis
                worst = sorted(s for s, _ in finished[b])[-K]
                best_live = beam_scores[b * K : (b + 1) * K].max()
                done[b] = normalise(best_live, opts.max_new_tokens if lp > 0 else t + 1) <= worst
        if done.all() or t + 1 == opts.max_new_tokens:
            break
        stepper.select(rows)
        penalties.select(rows)
        penalties.observe(tokens)
        logits = stepper.step(tokens)
        _check_finite(logits)
        logp = log_softmax(penalties.apply(logits, t + 1))

    results = []
    for b in range(B):
        hyps = list(finished[b])
        if not done[b]:  # ran out of length: live beams count as hypotheses
            for i in range(b * K, (b + 1) * K):
                if beam_scores[i] > -np.inf:
                    hyps.append((normalise(beam_scores[i], len(seqs[i])), seqs[i]))
        hyps.sort(key=lambda h: -h[0])
        results.append([Hypothesis(tokens, score) for score, tokens in hyps[: opts.num_hypotheses]])
    return results


def score(first_logits: np.ndarray, stepper: Stepper, targets: list[list[int]]) -> list[np.ndarray]:
    """Teacher forcing: log p(targets[b][t] | everything before it), float64, one array per row.

    `first_logits` (B, V) predict each row's first target; rows may differ in length (shorter
    rows step on with padding that is never read back).
    """
    T = max(len(t) for t in targets)
    tgt = np.zeros((len(targets), T), dtype=np.int64)
    for b, t in enumerate(targets):
        tgt[b, : len(t)] = t
    out = np.zeros(tgt.shape)
    rows, logits = np.arange(len(targets)), first_logits
    for i in range(T):
        _check_finite(logits)
        out[:, i] = log_softmax(logits.astype(np.float64))[rows, tgt[:, i]]
        if i + 1 < T:
            logits = stepper.step(tgt[:, i])
    return [out[b, : len(t)] for b, t in enumerate(targets)]


def generate(
    first_logits: np.ndarray,
    stepper: Stepper,
    opts: GenerationOptions,
    eos_id: int,
    context: list[list[int]] | None = None,
    banned: Sequence[int] = (),
) -> list[list[int]]:
    """The best token sequence per row, by the strategy `opts` selects."""
    if opts.num_beams > 1:
        hyps = beam_search(first_logits, stepper, opts, eos_id, context, banned)
        return [h[0].tokens for h in hyps]
    return greedy_or_sample(first_logits, stepper, opts, eos_id, context, banned)
