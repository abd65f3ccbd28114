"""Decoding algorithms over a step function, in numpy only.

Written once and used by both sides: the ONNX runtime (edgeformer.runtime) and the PyTorch
evaluation (edgeformer.train). A model is reached through a `Stepper`:

    step(tokens)  (N,) int64 next input token per row -> (N, V) float32 logits for the token after
    select(rows)  keep / reorder / repeat rows of the cache: row i of the new state is rows[i]

The caller runs the first pass itself (encoder + first decoder step, or the prompt prefill) and
hands over its last-position logits (B, V). Logits handed to the loop (those first ones and
every step's) are the loop's until its next call: greedy and sampling set banned tokens to
-inf in them in place. Outputs never include BOS or the final EOS.
`banned` ids (the runtime passes padding and BOS) are never chosen, by any strategy.

`decode` is the one entry that returns scored hypotheses: forced prefixes (their tokens are fed
as they are and scored by the model's distribution), alternatives (CTranslate2's
return_alternatives: num_hypotheses continuations, one per top-k token at the first position
after the prefix), several samples per input (num_hypotheses with sampling), end tokens, banned
token sequences, no_repeat_ngram_size, and a stop test (the text API's stop strings).

The options are core.options' (GenerationOptions; PreparedOptions, checked against the model
once per request by prepare_options); what is applied to each step's logits is
core.constraints'. Both are importable from here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from .constraints import (
    ALL_BANNED,
    Processors,
    _check_finite,
    _check_model,
    _Forcing,
    _ranked,
    end_ids,
    filter_logits,
    log_softmax,
)
from .options import (
    LM,
    MAX_BEAMS,
    GenerationOptions,
    PreparedOptions,
    _new_tokens,
    as_prepared,
    prepare_options,
)
from .speculative import Speculation, accept_sampled

__all__ = [  # the options are core.options'; imported from here too
    "LM", "MAX_BEAMS", "DecodeInputs", "GenerationOptions", "Hypothesis", "PreparedOptions",
    "Step", "Stepper", "StopTest", "Verifier", "beam_search", "decode", "filter_logits", "generate",
    "greedy_or_sample", "iter_tokens", "log_softmax", "prepare_options", "sampling_probs", "score",
    "steps",
]  # fmt: skip


class Stepper(Protocol):
    def step(self, tokens: np.ndarray) -> np.ndarray: ...

    def select(self, rows: np.ndarray) -> None: ...


class Verifier(Stepper, Protocol):
    """A one-row stepper that also takes several tokens in one call (speculative decoding)."""

    def verify(self, tokens: np.ndarray) -> np.ndarray:
        """(T,) new tokens -> (T, V) the logits after each; the cache grows by T."""
        ...

    def drop_last(self, n: int) -> None:
        """The cache's last n tokens taken back (rejected drafts)."""
        ...


@dataclass
class Hypothesis:
    tokens: list[int]  # a forced prefix included; never the end token
    score: float  # length-normalised log-probability: sum(log_probs) / len(log_probs) ** lp
    # one per token, then the end token's when the hypothesis ended with one (None: not scored)
    log_probs: list[float] | None = None


StopTest = Callable[[int, list[int]], bool]  # (batch row, its tokens so far) -> stop it here


@dataclass(frozen=True)
class DecodeInputs:
    """What decoding a batch needs besides its first logits, the stepper and the options; the
    sequences hold one entry per batch row."""

    eos_id: int
    context: list[list[int]] | None = None  # tokens before the new ones (repetition penalties)
    banned: Sequence[int] = ()  # ids never chosen (the runtime bans padding and BOS)
    prefixes: Sequence[Sequence[int]] | None = None  # forced first tokens of each row
    ranks: Sequence[int] | None = None  # the token after the prefix is the rank-th best
    stop: StopTest | None = None  # a row stops once stop(row, its tokens) says so
    # a one-row greedy / sampling decode drafts with it (the stepper is then a Verifier)
    speculation: Speculation | None = None

    def repeat(self, batch: int, n: int, ranked: bool) -> DecodeInputs:
        """Each of the `batch` rows n times in a row (`stop` still sees the original row);
        with `ranked`, copy i takes the i-th best token after its prefix (alternatives)."""
        rows = np.repeat(np.arange(batch), n).tolist()
        stop = self.stop
        return dataclasses.replace(
            self,
            context=None if self.context is None else [self.context[r] for r in rows],
            prefixes=None if self.prefixes is None else [self.prefixes[r] for r in rows],
            ranks=list(range(n)) * batch if ranked else None,
            stop=None if stop is None else (lambda r, seq: stop(r // n, seq)),
        )


def _choose(
    logits: np.ndarray, opts: GenerationOptions, rng: np.random.Generator,
    raw: np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    """The next token of each row from its adjusted logits. `raw`: the model's logits when not
    yet checked for NaN (they may be `logits` itself, bans set in place); greedy checks them
    only when a chosen logit is not finite (argmax picks a NaN first), so a normal step costs
    one gather instead of a pass over the logits."""
    if not opts.sampling:
        tokens = logits.argmax(axis=-1)
        if len(tokens) == 1:  # batch 1: one scalar check
            if math.isfinite(logits[0, tokens[0]]):
                return tokens
        elif np.isfinite(logits[np.arange(len(tokens)), tokens]).all():
            return tokens
        if raw is not None:
            _check_model(raw)
        raise ValueError(ALL_BANNED)  # a chosen -inf: every token of its row is banned
    probs = sampling_probs(logits, opts, raw)
    u = rng.random(len(probs))[:, None]
    return np.minimum((np.cumsum(probs, axis=-1) < u).sum(axis=-1), probs.shape[-1] - 1)


def sampling_probs(
    logits: np.ndarray, opts: GenerationOptions, raw: np.ndarray | None = None
) -> np.ndarray:
    """(N, V) the distributions sampling draws from, of adjusted logits (temperature, top-k,
    top-p); a ValueError for a model's NaN (`raw`: the logits before adjusting) or a row with
    nothing to sample."""
    if raw is not None:
        _check_model(raw)
    if not np.isfinite(logits.max(axis=-1)).all():  # every token banned (tiny vocabularies)
        raise ValueError(ALL_BANNED)
    logits = filter_logits(logits, opts.temperature, opts.top_k, opts.top_p)
    if not np.isfinite(logits.max(axis=-1)).all():  # nothing left to sample from
        raise ValueError(
            f"sampling has no token with a finite probability (temperature={opts.temperature}, "
            f"top_k={opts.top_k}, top_p={opts.top_p})"
        )
    return np.exp(log_softmax(logits))  # max subtracted first: never overflows


def _greedy_one(
    logits: np.ndarray, stepper: Stepper, max_new: int, ends: np.ndarray, banned: list[int],
    held: int = 0,
) -> Iterator[Step]:  # fmt: skip
    """`steps` for one row, greedy, with nothing to adjust but bans (no penalty, prefix or
    stop test): Python ints between the graph's runs, the batch-1 latency path. `banned` ids
    are never chosen, nor the end tokens in the first `held` steps (min_new_tokens;
    ignore_eos: all). The same tokens as the general loop: banned ids are set to -inf and the
    argmax taken again only when one comes out on top (tests/core/test_decoding.py)."""
    row = np.zeros(1, dtype=np.int64)
    ended, running = np.ones(1, dtype=bool), np.zeros(1, dtype=bool)
    for a in (row, ended, running):  # shared by every Step: read-only
        a.flags.writeable = False
    end_set = set(ends.tolist())
    with_ends = sorted(set(banned) | end_set)
    for t in range(max_new):
        bans = with_ends if t < held else banned
        tok = int(logits[0].argmax())
        if tok in bans:  # as Processors.apply would: banned ids out, argmax again
            logits[0, bans] = -np.inf
            tok = int(logits[0].argmax())
        if not math.isfinite(logits[0, tok]):  # argmax picks a NaN first; -inf: all banned
            _check_model(logits)
            raise ValueError(ALL_BANNED)
        tokens = np.array([tok], dtype=np.int64)
        end = tok in end_set
        yield Step(row, tokens, None, ended if end else running)
        if end or t + 1 == max_new:
            return
        logits = stepper.step(tokens)


def _speculative_one(
    first_logits: np.ndarray, stepper: Verifier, opts: PreparedOptions, inputs: DecodeInputs,
    rules: Processors, max_new: int, scores: bool,
) -> Iterator[Step]:  # fmt: skip
    """`steps` for one row, drafting: each target call verifies the drafted tokens after the
    token just chosen (core/speculative.py), one Step per token kept. The processors see the
    tokens kept only, in order, as in plain decoding: a drafted token is judged by the logits
    adjusted as they would be had it been decoded plainly."""
    spec = inputs.speculation
    assert spec is not None and inputs.context is not None
    stats, stop = spec.stats, inputs.stop
    rng = np.random.default_rng(opts.seed)
    ends = set(end_ids(opts, inputs.eos_id).tolist())
    row = np.zeros(1, dtype=np.int64)
    history = list(inputs.context[0])  # the prompt, then every token kept
    seq: list[int] = []

    def emitted(tok: int, adjusted: np.ndarray) -> tuple[Step, bool]:
        """The Step of a kept token, and whether the row ends with it."""
        lps = None
        if scores:
            lps = log_softmax(adjusted.astype(np.float64))[:, tok]
        end = tok in ends
        done = end or len(seq) + 1 == max_new
        if not end:
            seq.append(tok)
            done = done or (stop is not None and stop(0, seq))
        stats.tokens += 1
        return Step(row, np.array([tok], dtype=np.int64), lps, np.array([end])), done

    logits = first_logits
    chosen: tuple[int, np.ndarray] | None = None  # a token the last verification chose
    while True:
        if chosen is None:
            adjusted = rules.apply(logits, len(seq), in_place=True)
            tok = int(_choose(adjusted, opts, rng, raw=logits)[0])
        else:
            tok, adjusted = chosen
        step, done = emitted(tok, adjusted)
        yield step
        if done:
            return
        rules.observe(step.tokens)
        history.append(tok)
        # drafts fed with `tok`: the last of max_new tokens is chosen, never fed (the cache
        # holds the prompt and max_new - 1 tokens)
        k = min(spec.tokens, max_new - len(seq) - 1)
        draft = spec.drafter.propose(history, k) if k > 0 else None
        if draft is None or not draft.tokens:
            stats.steps += 1
            logits, chosen = stepper.step(step.tokens), None
            continue
        stats.verifications += 1
        stats.drafted += len(draft.tokens)
        block = stepper.verify(np.array([tok, *draft.tokens], dtype=np.int64))  # (1 + k, V)
        chosen, kept = None, 0
        for j, d in enumerate(draft.tokens):
            logits = block[j : j + 1]
            adjusted = rules.apply(logits, len(seq), in_place=True)
            if opts.sampling:
                p = sampling_probs(adjusted, opts, raw=logits)[0]
                q = None if draft.probs is None else draft.probs[j]
                c = accept_sampled(p, d, q, rng)
            else:
                c = int(_choose(adjusted, opts, rng, raw=logits)[0])
            if c != d:
                chosen = (c, adjusted)
                break
            step, done = emitted(d, adjusted)
            stats.accepted += 1
            yield step
            if done:
                return
            rules.observe(step.tokens)
            history.append(d)
            kept += 1
        stepper.drop_last(len(draft.tokens) - kept)
        if chosen is None:  # every draft kept: the target's own next token, after the last
            logits = block[-1:]


class Step(NamedTuple):
    """One step of the greedy / sampling loop, for the rows still running (original indices)."""

    rows: np.ndarray
    tokens: np.ndarray  # the chosen (or forced) token of each row
    log_probs: np.ndarray | None  # their log-probabilities (when scores were asked for)
    ended: np.ndarray  # the token is an end token: the row stops without it


def steps(
    first_logits: np.ndarray,
    stepper: Stepper,
    opts: GenerationOptions,
    inputs: DecodeInputs,
    scores: bool = False,
) -> Iterator[Step]:
    """Greedy or sampling, one step at a time, for every row still running.

    A row stops at an end token, when `stop(row, tokens)` says so (its last token kept), or
    after max_new_tokens past its prefix; finished rows are dropped from the cache with
    `stepper.select`. Chosen tokens are scored by the adjusted distribution (penalties and bans
    applied, before temperature / top-k / top-p), forced ones by the model's.
    """
    n, vocab = first_logits.shape
    opts = as_prepared(opts, vocab)
    ends = end_ids(opts, inputs.eos_id)
    rules = Processors(opts, ends, vocab, inputs.context, n, inputs.banned)
    forcing = _Forcing(inputs.prefixes, inputs.ranks, n)
    stop = inputs.stop
    max_new = _new_tokens(opts)
    if n == 1 and inputs.speculation is not None and not forcing.on:
        assert inputs.context is not None, "speculation drafts from the prompt"
        yield from _speculative_one(
            first_logits, stepper, opts, inputs, rules, max_new, scores  # type: ignore[arg-type]
        )  # fmt: skip
        return
    if n == 1 and not (opts.sampling or scores or forcing.on or stop) and rules.bans_only:
        held = max_new if opts.ignore_eos else opts.min_new_tokens  # steps with ends banned
        yield from _greedy_one(first_logits, stepper, max_new, ends, rules.banned, held)
        return
    rng = np.random.default_rng(opts.seed)
    limit = forcing.lengths + max_new
    seqs: list[list[int]] = [[] for _ in range(n)]
    active = np.arange(n)
    logits = first_logits
    single_end = int(ends[0]) if len(ends) == 1 else None
    for t in range(int(limit.max())):
        if not forcing.on:
            adjusted = rules.apply(logits, t, in_place=True)  # logits: read only here
            forced = None  # no row is forced
            tokens = _choose(adjusted, opts, rng, raw=logits).astype(np.int64, copy=False)
        else:
            _check_finite(logits)
            prefix_len = forcing.lengths[active]
            adjusted = rules.apply(logits, t - prefix_len)
            forced = t < prefix_len
            tokens = np.zeros(len(active), dtype=np.int64)
            free = ~forced
            if free.any():
                tokens[free] = _choose(adjusted[free], opts, rng)
            if forced.any():
                tokens[forced] = forcing.prefix_tokens(t, active[forced])
            for i in np.flatnonzero(forcing.branch(t, active)).tolist():
                assert forcing.ranks is not None
                tokens[i] = _ranked(adjusted[i], int(forcing.ranks[active[i]]))
        lps = None
        if scores:
            rows_i = np.arange(len(tokens))
            lps = log_softmax(adjusted.astype(np.float64))[rows_i, tokens]
            if forced is not None and forced.any():
                raw = log_softmax(logits[forced].astype(np.float64))
                lps[forced] = raw[np.arange(len(raw)), tokens[forced]]
        ended = (tokens == single_end) if single_end is not None else np.isin(tokens, ends)
        if forced is not None:
            ended &= ~forced
        alive = ~ended
        if stop is not None:
            for i in np.flatnonzero(alive).tolist():
                r = int(active[i])
                seqs[r].append(int(tokens[i]))
                if (forced is None or not forced[i]) and stop(r, seqs[r]):
                    alive[i] = False
        yield Step(active, tokens, lps, ended)
        if forcing.on:
            alive &= t + 1 < limit[active]
        elif t + 1 == max_new:
            return
        n_alive = int(np.count_nonzero(alive))
        if n_alive == 0:
            return
        if n_alive < len(alive):
            keep = np.flatnonzero(alive)
            stepper.select(keep)
            rules.select(keep)
            active, tokens = active[keep], tokens[keep]
        rules.observe(tokens)
        logits = stepper.step(tokens)


def iter_tokens(
    first_logits: np.ndarray, stepper: Stepper, opts: GenerationOptions, inputs: DecodeInputs
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Greedy or sampling, one step at a time: yields (rows, tokens) for the rows still running.

    `rows` are indices into the original batch. A row stops at an end token (not yielded), at
    max_new_tokens past its prefix (whose tokens are yielded too) or when `stop` says so.
    """
    for step in steps(first_logits, stepper, opts, inputs):
        keep = ~step.ended
        if keep.any():
            yield step.rows[keep], step.tokens[keep]


def greedy_or_sample(
    first_logits: np.ndarray,
    stepper: Stepper,
    opts: GenerationOptions,
    inputs: DecodeInputs,
    scores: bool = False,
) -> list[Hypothesis]:
    """One hypothesis per row (score 0 and no log_probs unless `scores`)."""
    n = len(first_logits)
    out: list[list[int]] = [[] for _ in range(n)]
    lps: list[list[float]] = [[] for _ in range(n)]
    for step in steps(first_logits, stepper, opts, inputs, scores):
        ended = step.ended.tolist()
        for r, tok, end in zip(step.rows.tolist(), step.tokens.tolist(), ended):
            if not end:
                out[r].append(tok)
        if step.log_probs is not None:
            for r, x in zip(step.rows.tolist(), step.log_probs.tolist()):
                lps[r].append(x)
    if not scores:
        return [Hypothesis(o, 0.0) for o in out]
    lp = opts.length_penalty
    return [Hypothesis(o, sum(p) / max(len(p), 1) ** lp, p) for o, p in zip(out, lps)]


# a batch row's best continuations are found among the tokens of its beams' TOP_GROUP-token
# groups of largest maxima (_best_candidates), not by a partition of every beam's whole
# vocabulary; below TOP_GROUPED_VOCAB tokens one partition per beam is as fast
TOP_GROUP = 32
TOP_GROUPED_VOCAB = 1024


def _log_softmax_in_place(x: np.ndarray) -> np.ndarray:
    """log_softmax(x) (the same float32 values), written into `x` (N, V)."""
    x -= x.max(axis=-1, keepdims=True)
    x -= np.log(np.exp(x).sum(axis=-1, keepdims=True))
    return x


def _best_candidates(
    logp: np.ndarray, beam_scores: np.ndarray, K: int, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The n best continuations of each batch row of K beams, best first: (A, n) indices into
    beam * V + token and their scores beam_scores[beam] + logp[beam, token] (float64), from
    logp (A*K, V) and beam_scores (A*K,). Ties: in no set order.

    A large vocabulary: each beam's first G * TOP_GROUP tokens in G groups (group j: tokens j,
    j + G, j + 2G, ...), scored by their maxima; the row's n best continuations lie in its n
    groups of best scores or the V - G * TOP_GROUP tokens after the groups, so only those are
    scored (one pass of elementwise maxima over the logits, no partition of a whole row)."""
    rows, vocab = logp.shape
    A = rows // K
    groups = vocab // TOP_GROUP
    if vocab < TOP_GROUPED_VOCAB or groups < 4 * n:  # each beam's m best, as many as asked
        m = min(n, vocab)
        tok = np.argpartition(logp, vocab - m, axis=-1)[:, vocab - m :].reshape(A, K * m)
        beam = np.broadcast_to(np.repeat(np.arange(K), m), tok.shape)
    else:
        maxima = logp[:, : groups * TOP_GROUP].reshape(rows, TOP_GROUP, groups).max(axis=1)
        group_scores = (beam_scores[:, None] + maxima).reshape(A, K * groups)
        top = np.argpartition(group_scores, K * groups - n, axis=-1)[:, K * groups - n :]
        group_beam, group = np.divmod(top, groups)  # (A, n)
        tok = (group[:, :, None] + groups * np.arange(TOP_GROUP)).reshape(A, n * TOP_GROUP)
        beam = np.repeat(group_beam, TOP_GROUP, axis=1)
        tail = np.arange(groups * TOP_GROUP, vocab)
        if len(tail):
            tok = np.concatenate([tok, np.broadcast_to(np.tile(tail, K), (A, K * len(tail)))], 1)
            beam = np.concatenate(
                [beam, np.broadcast_to(np.repeat(np.arange(K), len(tail)), (A, K * len(tail)))], 1
            )
    src = np.arange(A)[:, None] * K + beam  # (A, C) rows of logp
    scores = beam_scores[src] + logp[src, tok]  # float64, as beam_scores[:, None] + logp
    if scores.shape[1] > n:  # the n best first, then only those sorted
        best = np.argpartition(-scores, n - 1, axis=-1)[:, :n]
        scores, beam, tok = (np.take_along_axis(x, best, -1) for x in (scores, beam, tok))
    order = np.argsort(-scores, axis=-1, kind="stable")
    flat = np.take_along_axis(beam * vocab + tok, order, -1)
    return flat, np.take_along_axis(scores, order, -1)


def _beam_slots(parent: np.ndarray) -> np.ndarray:
    """The slot (A, K) of each of a row's next K beams, from the beam each extends (`parent`,
    -1 for a filler): a beam's first child takes its parent's slot, whose cache then needs no
    copy; its other children take the slots left, in order, then the fillers (dead beams,
    whose cache is never read). Which slot a beam is in changes nothing but ties."""
    A, K = parent.shape
    live = parent >= 0
    earlier = np.tri(K, k=-1, dtype=bool)  # [j, i]: i before j
    first = live & ~((parent[:, :, None] == parent[:, None, :]) & earlier).any(axis=2)
    claimed = np.zeros((A, K), dtype=bool)
    ra, ca = np.nonzero(first)
    claimed[ra, parent[ra, ca]] = True
    free = np.argsort(claimed, axis=1, kind="stable")  # unclaimed slots first, ascending
    rank = np.cumsum(~first, axis=1) - 1  # the others in order: children, then fillers
    return np.where(first, parent, np.take_along_axis(free, np.maximum(rank, 0), 1))


def beam_search(
    first_logits: np.ndarray, stepper: Stepper, opts: GenerationOptions, inputs: DecodeInputs
) -> list[list[Hypothesis]]:
    """Beam search; returns the n-best hypotheses per batch row, best first.

    A row's prefix is forced (one live beam until it ends, scored by the model's distribution);
    with `ranks`, the token after it is the rank-th best (alternatives). A beam that `stop`
    stops is a finished hypothesis (its last token kept). A beam's first child stays in its
    slot (its cache is not copied: _beam_slots), and a batch row whose search is done leaves
    the stepper's batch (its K beams are dropped by the same `select` that reorders the
    others' beams). Each step is whole-array work over rows x beams (the best 2K continuations
    of each beam, then of each row, which beams go on, which hypotheses end); Python runs
    only per ended hypothesis and per done row (and per live beam for a stop test). The
    hypotheses are those of the loop it replaced (tests/core/beam_reference.py), save where
    two candidates' float32 log-probabilities tie exactly (numpy's partition order decided).
    """
    B, vocab = first_logits.shape
    opts = as_prepared(opts, vocab)
    K = opts.num_beams
    lp = opts.length_penalty
    eos_id, context, stop = inputs.eos_id, inputs.context, inputs.stop
    ends = end_ids(opts, eos_id)
    forcing = _Forcing(inputs.prefixes, inputs.ranks, B)
    limit = forcing.lengths + _new_tokens(opts)  # (B,) steps each row may take

    def normalise(score: float, length: int) -> float:
        return score / max(length, 1) ** lp

    _check_finite(first_logits)
    rep_context = [c for c in (context or [[]] * B) for _ in range(K)]
    rules = Processors(opts, ends, vocab, rep_context, B * K, inputs.banned)
    stepper.select(np.repeat(np.arange(B), K))
    logits = np.repeat(first_logits, K, axis=0)
    # the stepper's rows: beam k of batch row active[a] is row a * K + k. Only the first beam
    # of each row is live at the start (the others are copies).
    active = np.arange(B)
    beam_scores = np.tile(np.r_[0.0, np.full(K - 1, -np.inf)], B)  # (A*K,) float64
    seqs = np.zeros((B * K, 0), dtype=np.int64)  # (A*K, t) each beam's tokens so far
    seq_lps = np.zeros((B * K, 0))  # (A*K, t) and their log-probabilities
    finished: list[list[tuple[float, list[int], list[float]]]] = [[] for _ in range(B)]
    n_finished = np.zeros(B, dtype=np.int64)

    for t in range(int(limit.max())):
        A = len(active)
        forced = t < forcing.lengths[active]  # (A,)
        raw = None  # a forced token is scored by the model's distribution: before the rules
        if forcing.on and forced.any():
            raw = log_softmax(logits[np.flatnonzero(forced) * K].astype(np.float64))
        prefix_rows = np.repeat(forcing.lengths[active], K)
        # the logits are the loop's until the next step (the first: a copy)
        logp = _log_softmax_in_place(rules.apply(logits, t - prefix_rows, in_place=True))
        if forcing.on:  # a forced row: one candidate, from its live first beam
            branch = forcing.branch(t, active)
            forced_rank = np.cumsum(forced) - 1  # row a's index into raw
            for a in np.flatnonzero(forced | branch).tolist():
                b, i = int(active[a]), a * K
                if forced[a]:
                    assert raw is not None
                    choice = forcing.prefixes[b][t]
                    value = raw[forced_rank[a], choice]
                else:
                    assert forcing.ranks is not None
                    choice = _ranked(logp[i], int(forcing.ranks[b]))
                    value = logp[i, choice]
                logp[i : i + K] = -np.inf
                logp[i, choice] = value
        # the best 2K continuations of each batch row (the best 2K of each beam's best 2K)
        top, top_scores = _best_candidates(logp, beam_scores, K, 2 * K)  # (A, 2K)
        beam, tok = np.divmod(top, vocab)
        src = np.arange(A)[:, None] * K + beam  # (A, 2K) the stepper row each extends
        # in order, each candidate either ends a hypothesis (an end token of a live beam, not
        # forced) or is the next beam (a dead one, score -inf, a filler), until K beams are
        # taken; fewer than K: fillers (tiny vocabularies)
        dead = top_scores == -np.inf
        is_end = np.isin(tok, ends) & ~dead & ~forced[:, None]
        taken_before = np.cumsum(~is_end, axis=1)  # beams taken up to each candidate
        takes = ~is_end & ~dead & (taken_before <= K)
        ends_here = is_end & (taken_before < K)
        ra, ca = np.nonzero(ends_here)  # row-major: each row's ended hypotheses in order
        for a, c in zip(ra.tolist(), ca.tolist()):
            s, b = int(src[a, c]), int(active[a])
            lps = seq_lps[s].tolist() + [float(logp[s, tok[a, c]])]
            finished[b].append((normalise(float(top_scores[a, c]), t + 1), seqs[s].tolist(), lps))
        np.add.at(n_finished, active[ra], 1)
        ra, ca = np.nonzero(takes)
        parent = np.full((A, K), -1)  # the next beams in order: the beam each extends
        parent[ra, taken_before[ra, ca] - 1] = beam[ra, ca]
        slot = ra * K + _beam_slots(parent)[ra, taken_before[ra, ca] - 1]
        rows = np.arange(A * K)  # fillers (EOS, -inf) keep the cache of their slot
        tokens = np.full(A * K, eos_id, dtype=np.int64)
        beam_scores = np.full(A * K, -np.inf)
        new_lps = np.zeros(A * K)
        rows[slot], tokens[slot] = src[ra, ca], tok[ra, ca]
        beam_scores[slot] = top_scores[ra, ca]
        new_lps[slot] = logp[rows[slot], tokens[slot]]
        seqs = np.concatenate([seqs[rows], tokens[:, None]], axis=1)
        seq_lps = np.concatenate([seq_lps[rows], new_lps[:, None]], axis=1)
        if stop is not None:  # a stopped beam is a finished hypothesis
            for i in np.flatnonzero(beam_scores > -np.inf).tolist():
                a = i // K
                b, seq = int(active[a]), seqs[i].tolist()
                if not forced[a] and stop(b, seq):
                    score = normalise(beam_scores[i], t + 1)
                    finished[b].append((score, seq, seq_lps[i].tolist()))
                    n_finished[b] += 1
                    beam_scores[i] = -np.inf
        best_live = beam_scores.reshape(A, K).max(axis=1)  # (A,)
        out_of_length = (t + 1 >= limit[active]) | (best_live == -np.inf)
        done = np.zeros(A, dtype=bool)
        for a in np.flatnonzero((n_finished[active] >= K) | out_of_length).tolist():
            b = int(active[a])
            if n_finished[b] >= K:
                if opts.early_stopping:
                    done[a] = True
                else:  # stop when no live beam can still beat the worst kept hypothesis
                    worst = sorted(s for s, _, _ in finished[b])[-K]
                    longest = int(limit[b]) if lp > 0 else t + 1
                    done[a] = normalise(best_live[a], longest) <= worst
            if not done[a] and out_of_length[a]:  # out of length: live beams are hypotheses
                for i in range(a * K, (a + 1) * K):
                    if beam_scores[i] > -np.inf:
                        finished[b].append(
                            (normalise(beam_scores[i], t + 1), seqs[i].tolist(),
                             seq_lps[i].tolist())
                        )  # fmt: skip
                done[a] = True
        if done.all():
            break
        if done.any():  # done rows leave the batch
            keep = np.repeat(~done, K)
            rows, tokens, beam_scores = rows[keep], tokens[keep], beam_scores[keep]
            seqs, seq_lps, active = seqs[keep], seq_lps[keep], active[~done]
        stepper.select(rows)
        rules.select(rows)
        rules.observe(tokens)
        logits = stepper.step(tokens)
        _check_finite(logits)

    results = []
    for b in range(B):
        hyps = sorted(finished[b], key=lambda h: -h[0])[: opts.num_hypotheses]
        results.append([Hypothesis(tokens, score, lps) for score, tokens, lps in hyps])
    return results


def decode(
    first_logits: np.ndarray,
    stepper: Stepper,
    opts: GenerationOptions,
    inputs: DecodeInputs,
    scores: bool = True,
) -> list[list[Hypothesis]]:
    """The hypotheses of every row, by the strategy `opts` selects.

    - beam search: the num_hypotheses best, best first;
    - greedy: one; sampling: num_hypotheses independent samples (one seeded generator);
    - return_alternatives: num_hypotheses continuations, the i-th starting with the i-th best
      token after the prefix (the prompt for an LM), each continued by the chosen strategy.
    `inputs.prefixes[b]` (ids) are forced; the hypotheses' tokens include them.
    """
    B = len(first_logits)
    A = opts.num_hypotheses if opts.sampling or opts.return_alternatives else 1
    if A > 1 or opts.return_alternatives:
        stepper.select(np.repeat(np.arange(B), A))
        first_logits = np.repeat(first_logits, A, axis=0)
        inputs = inputs.repeat(B, A, ranked=opts.return_alternatives)
    if opts.num_beams > 1:
        if A > 1 or opts.return_alternatives:
            opts = dataclasses.replace(opts, num_hypotheses=1)
        hyps = beam_search(first_logits, stepper, opts, inputs)
    else:
        hyps = [[h] for h in greedy_or_sample(first_logits, stepper, opts, inputs, scores)]
    if A == 1:
        return hyps
    return [[h for hs in hyps[b * A : (b + 1) * A] for h in hs] for b in range(B)]


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
    first_logits: np.ndarray, stepper: Stepper, opts: GenerationOptions, inputs: DecodeInputs
) -> list[list[int]]:
    """The best (or first) token sequence per row, by the strategy `opts` selects."""
    hyps = decode(first_logits, stepper, opts, inputs, scores=False)
    return [h[0].tokens if h else [] for h in hyps]
