"""Today's beam search (core/decoding.py's beam_search as of main 8d33abc, 2026-12-02), kept
verbatim before issue 61 rewrote it for speed: the rewrite must give the same hypotheses (ids
identical, scores within 1e-5) on the same stepper (tests/core/test_beam_reference.py). Only the
function's name changed; it uses core's decoding helpers as they are."""

from __future__ import annotations

import numpy as np

from edgeformer.core.constraints import (
    Processors,
    _check_finite,
    _Forcing,
    _ranked,
    end_ids,
    log_softmax,
)
from edgeformer.core.decoding import DecodeInputs, Hypothesis, Stepper
from edgeformer.core.options import GenerationOptions, _new_tokens, as_prepared


def reference_beam_search(
    first_logits: np.ndarray, stepper: Stepper, opts: GenerationOptions, inputs: DecodeInputs
) -> list[list[Hypothesis]]:
    """Beam search; returns the n-best hypotheses per batch row, best first.

    A row's prefix is forced (one live beam until it ends, scored by the model's distribution);
    with `ranks`, the token after it is the rank-th best (alternatives). A beam that `stop`
    stops is a finished hypothesis (its last token kept).
    """
    B, vocab = first_logits.shape
    opts = as_prepared(opts, vocab)
    K = opts.num_beams
    lp = opts.length_penalty
    eos_id, context, stop = inputs.eos_id, inputs.context, inputs.stop
    ends = end_ids(opts, eos_id)
    ends_set = set(ends.tolist())
    forcing = _Forcing(inputs.prefixes, inputs.ranks, B)
    limit = forcing.lengths + _new_tokens(opts)
    prefix_rows = np.repeat(forcing.lengths, K)

    def normalise(score: float, length: int) -> float:
        return score / max(length, 1) ** lp

    _check_finite(first_logits)
    rep_context = [c for c in (context or [[]] * B) for _ in range(K)]
    rules = Processors(opts, ends, vocab, rep_context, B * K, inputs.banned)
    rows = np.repeat(np.arange(B), K)
    stepper.select(rows)
    logits = np.repeat(first_logits, K, axis=0)
    # Only the first beam of each row is live at the start (the others are copies).
    beam_scores = np.tile(np.r_[0.0, np.full(K - 1, -np.inf)], B)
    seqs: list[list[int]] = [[] for _ in range(B * K)]
    seq_lps: list[list[float]] = [[] for _ in range(B * K)]
    finished: list[list[tuple[float, list[int], list[float]]]] = [[] for _ in range(B)]
    done = np.zeros(B, dtype=bool)

    for t in range(int(limit.max())):
        logp = log_softmax(rules.apply(logits, t - prefix_rows))
        forced = t < forcing.lengths  # (B,)
        if forcing.on:  # a forced row: one candidate, from its live first beam
            branch = forcing.branch(t, np.arange(B))
            if forced.any():
                raw = log_softmax(logits.astype(np.float64))
            for b in np.flatnonzero(forced | branch).tolist():
                i = b * K
                if forced[b]:
                    tok, value = forcing.prefixes[b][t], raw[i, forcing.prefixes[b][t]]
                else:
                    assert forcing.ranks is not None
                    tok = _ranked(logp[i], int(forcing.ranks[b]))
                    value = logp[i, tok]
                logp[i : i + K] = -np.inf
                logp[i, tok] = value
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
        new_lps: list[float] = []
        for b in range(B):
            chosen = 0
            for idx, score in zip(top[b].tolist(), top_scores[b].tolist()):
                beam, tok = divmod(int(idx), vocab)
                src = b * K + beam
                if done[b] or score == -np.inf:
                    new_rows.append(b * K)
                    new_tokens.append(eos_id)
                    new_scores.append(-np.inf)
                    new_lps.append(0.0)
                    chosen += 1
                elif tok in ends_set and not forced[b]:
                    lps = seq_lps[src] + [float(logp[src, tok])]
                    finished[b].append((normalise(score, t + 1), seqs[src], lps))
                    continue
                else:
                    new_rows.append(src)
                    new_tokens.append(tok)
                    new_scores.append(score)
                    new_lps.append(float(logp[src, tok]))
                    chosen += 1
                if chosen == K:
                    break
            while chosen < K:  # fewer than K live candidates (tiny vocabularies)
                new_rows.append(b * K)
                new_tokens.append(eos_id)
                new_scores.append(-np.inf)
                new_lps.append(0.0)
                chosen += 1
        rows = np.asarray(new_rows)
        tokens = np.asarray(new_tokens, dtype=np.int64)
        beam_scores = np.asarray(new_scores)
        seqs = [seqs[r] + [int(tok)] for r, tok in zip(rows, tokens)]
        seq_lps = [seq_lps[r] + [x] for r, x in zip(rows.tolist(), new_lps)]
        if stop is not None:  # a stopped beam is a finished hypothesis
            for i in np.flatnonzero(beam_scores > -np.inf).tolist():
                b = i // K
                if not forced[b] and stop(b, seqs[i]):
                    finished[b].append((normalise(beam_scores[i], t + 1), seqs[i], seq_lps[i]))
                    beam_scores[i] = -np.inf
        for b in range(B):
            if done[b]:
                continue
            if len(finished[b]) >= K:
                if opts.early_stopping:
                    done[b] = True
                else:  # stop when no live beam can still beat the worst kept hypothesis
                    worst = sorted(s for s, _, _ in finished[b])[-K]
                    best_live = beam_scores[b * K : (b + 1) * K].max()
                    longest = int(limit[b]) if lp > 0 else t + 1
                    done[b] = normalise(best_live, longest) <= worst
            if not done[b] and (t + 1 >= limit[b] or beam_scores[b * K : (b + 1) * K].max()
                                == -np.inf):  # fmt: skip
                # out of length: live beams count as hypotheses
                for i in range(b * K, (b + 1) * K):
                    if beam_scores[i] > -np.inf:
                        finished[b].append(
                            (normalise(beam_scores[i], len(seqs[i])), seqs[i], seq_lps[i])
                        )
                done[b] = True
        if done.all():
            break
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
