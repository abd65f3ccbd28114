"""The shared numpy decoding algorithms, on a fake Markov model: logits depend on the last token."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from edgeformer.core.decoding import (
    DecodeInputs,
    GenerationOptions,
    beam_search,
    filter_logits,
    generate,
    log_softmax,
)

V, EOS = 6, 2
IN = DecodeInputs(EOS)  # no context, bans, prefixes or stop test


class Markov:
    """step(tokens) -> table[tokens]; records the rows kept by select()."""

    def __init__(self, seed: int = 0, batch: int = 1):
        self.table = np.random.default_rng(seed).normal(size=(V, V)).astype(np.float32) * 2
        self.rows = np.arange(batch)
        self.steps = 0

    def first(self, batch: int = 1) -> np.ndarray:
        return np.tile(self.table[0], (batch, 1))

    def step(self, tokens: np.ndarray) -> np.ndarray:
        assert len(tokens) == len(self.rows)
        self.steps += 1
        return self.table[tokens]

    def select(self, rows: np.ndarray) -> None:
        self.rows = self.rows[rows]


def seq_score(m: Markov, seq) -> float:
    """Log-probability with EOS forbidden (ignore_eos renormalises over the other tokens)."""
    table = m.table.copy()
    table[:, EOS] = -np.inf
    lp, prev = 0.0, 0
    for t in seq:
        lp += log_softmax(table[prev])[t]
        prev = t
    return float(lp)


def test_greedy_follows_the_argmax_and_stops_at_eos():
    m = Markov(1)
    out = generate(m.first(), m, GenerationOptions(max_new_tokens=10), IN)[0]
    prev, expect = 0, []
    for _ in range(10):
        tok = int(m.table[prev].argmax())
        if tok == EOS:
            break
        expect.append(tok)
        prev = tok
    assert out == expect


def test_beam_search_is_exact_with_enough_beams():
    m = Markov(3)
    L = 3
    opts = GenerationOptions(max_new_tokens=L, num_beams=36, num_hypotheses=3, ignore_eos=True)
    hyps = beam_search(m.first(), m, opts, IN)[0]
    seqs = [s for s in itertools.product(range(V), repeat=L) if EOS not in s]
    best = sorted(seqs, key=lambda s: -seq_score(m, s))[:3]
    assert [tuple(h.tokens) for h in hyps] == best
    assert hyps[0].score == pytest.approx(seq_score(m, best[0]) / L, abs=1e-5)


def test_beam_one_equals_greedy_and_batches_are_independent():
    m = Markov(4)
    first = np.stack([m.table[0], m.table[3]])
    g = generate(first, Markov(4, 2), GenerationOptions(max_new_tokens=8), IN)
    b = generate(first, Markov(4, 2), GenerationOptions(max_new_tokens=8, num_beams=1), IN)
    assert g == b
    single = generate(first[1:], Markov(4), GenerationOptions(max_new_tokens=8), IN)
    assert g[1] == single[0]
    beams2 = generate(first, Markov(4, 2), GenerationOptions(max_new_tokens=8, num_beams=3), IN)
    beams1 = generate(first[1:], Markov(4), GenerationOptions(max_new_tokens=8, num_beams=3), IN)
    assert beams2[1] == beams1[0]


def test_top_k_and_top_p_filtering():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], dtype=np.float32))
    k2 = filter_logits(logits, 1.0, 2, 1.0)
    assert np.isfinite(k2[0, :2]).all() and np.isinf(k2[0, 2:]).all()
    p = filter_logits(logits, 1.0, 0, 0.75)  # 0.5 + 0.3 reaches 0.75: keep two
    assert np.isfinite(p[0, :2]).all() and np.isinf(p[0, 2:]).all()
    p = filter_logits(logits, 1.0, 0, 0.81)  # needs the third token too
    assert np.isfinite(p[0, :3]).all() and np.isinf(p[0, 3])
    assert np.isfinite(filter_logits(logits, 1.0, 0, 0.01)[0, 0])  # never empty


def test_sampling_is_reproducible_and_respects_top_k():
    m = Markov(5)
    opts = dict(max_new_tokens=20, sampling=True, temperature=1.5, ignore_eos=True)
    a = generate(m.first(4), Markov(5, 4), GenerationOptions(seed=7, **opts), IN)
    b = generate(m.first(4), Markov(5, 4), GenerationOptions(seed=7, **opts), IN)
    c = generate(m.first(4), Markov(5, 4), GenerationOptions(seed=8, **opts), IN)
    assert a == b and a != c
    k1 = generate(m.first(), Markov(5), GenerationOptions(seed=1, top_k=1, **opts), IN)
    greedy = generate(
        m.first(), Markov(5), GenerationOptions(max_new_tokens=20, ignore_eos=True), IN
    )
    assert k1 == greedy  # top_k=1 sampling is greedy


def test_min_length_and_repetition_penalty():
    m = Markov(0)
    m.table[:, EOS] = 100.0  # EOS always wins
    assert generate(m.first(), m, GenerationOptions(max_new_tokens=5), IN) == [[]]
    m2 = Markov(0)
    m2.table[:, EOS] = 100.0
    out = generate(m2.first(), m2, GenerationOptions(max_new_tokens=5, min_new_tokens=3), IN)
    assert len(out[0]) == 3
    m3 = Markov(0)
    m3.table[:] = np.arange(V, dtype=np.float32)  # token 5 always best
    plain = generate(m3.first(), m3, GenerationOptions(max_new_tokens=4, ignore_eos=True), IN)
    assert plain == [[5, 5, 5, 5]]
    pen = GenerationOptions(max_new_tokens=4, ignore_eos=True, repetition_penalty=10.0)
    assert len(set(generate(m3.first(), m3, pen, IN)[0])) > 1


def test_finished_rows_are_dropped_from_the_cache():
    m = Markov(0, 2)
    first = np.zeros((2, V), dtype=np.float32)
    first[0, EOS] = 10  # row 0 ends at once
    first[1, 4] = 10
    out = generate(first, m, GenerationOptions(max_new_tokens=3, min_new_tokens=0), IN)
    assert out[0] == [] and len(m.rows) == 1 and m.rows[0] == 1


def test_nan_logits_raise():
    m = Markov(0)
    bad = m.first()
    bad[0, 1] = np.nan
    with pytest.raises(FloatingPointError):
        generate(bad, m, GenerationOptions(8), IN)
    with pytest.raises(FloatingPointError):
        beam_search(bad, m, GenerationOptions(8, num_beams=2), IN)


def test_banned_rows_are_told_from_bad_logits():
    """Greedy and sampling ban tokens in the step's logits in place: a row with every token
    banned is still an error of its own, and NaN / +inf from the model are still caught."""
    m = Markov(0)
    all_banned = DecodeInputs(EOS, banned=[t for t in range(V) if t != EOS])
    for sampling in (False, True):
        opts = GenerationOptions(max_new_tokens=3, ignore_eos=True, sampling=sampling, seed=0)
        with pytest.raises(ValueError, match="every token is banned"):
            generate(m.first(), m, opts, all_banned)
        for bad_value in (np.nan, np.inf):
            bad = m.first()
            bad[0, 3] = bad_value
            with pytest.raises(FloatingPointError):
                generate(bad, m, GenerationOptions(4, sampling=sampling, seed=0), IN)


@pytest.mark.parametrize(
    "kw",
    [
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(temperature=0),
        dict(num_beams=0),
        dict(max_new_tokens=0),
        dict(top_k=-1),
        dict(sampling=True, num_beams=2),
        dict(num_hypotheses=3, num_beams=2),
        dict(repetition_penalty=0),
        dict(min_new_tokens=9, max_new_tokens=5),
    ],
)
def test_invalid_options(kw):
    with pytest.raises(ValueError, match="invalid generation option"):
        GenerationOptions(**kw)


@pytest.mark.parametrize("beams", [1, 3])
def test_forced_end_token_ends_an_output_cut_by_the_limit(beams):
    """forced_end_token (HF's forced_eos_token_id): the last position max_new_tokens allows
    holds it, so a capped output still ends as the model's do; an output that ended earlier
    is untouched."""
    m = Markov(6)
    m.table[:, EOS] = -100.0  # never ends by itself
    opts = GenerationOptions(max_new_tokens=5, num_beams=beams)
    plain = generate(m.first(), Markov(6), opts, IN) if beams == 1 else None
    m2 = Markov(6)
    m2.table[:, EOS] = -100.0
    forced = GenerationOptions(max_new_tokens=5, num_beams=beams, forced_end_token=4)

    def runner(first, m, opts, inputs):
        if opts.num_beams == 1:
            return generate(first, m, opts, inputs)
        return [rows[0].tokens for rows in beam_search(first, m, opts, inputs)]

    out = runner(m2.first(), m2, forced, IN)[0]
    assert len(out) == 5 and out[-1] == 4
    if plain is not None:
        m3 = Markov(6)
        m3.table[:, EOS] = -100.0
        assert generate(m3.first(), m3, opts, IN)[0][:4] == out[:4]
    # forced to EOS: the output ends there (EOS is not part of it)
    m4 = Markov(6)
    m4.table[:, EOS] = -100.0
    ended = runner(m4.first(), m4, GenerationOptions(5, num_beams=beams, forced_end_token=EOS), IN)
    assert len(ended[0]) == 4
    # an output that ends before the limit does not change
    m5 = Markov(0)
    m5.table[:, EOS] = 100.0
    assert generate(m5.first(), m5, GenerationOptions(5, forced_end_token=4), IN) == [[]]


@pytest.mark.parametrize("value", [-1, 1.5, "2", True])
def test_forced_end_token_must_be_a_token_id(value):
    with pytest.raises(ValueError, match="forced_end_token"):
        GenerationOptions(forced_end_token=value)


def test_one_row_greedy_path_equals_the_batched_loop(monkeypatch):
    """A lone greedy row goes through _greedy_one (Python ints between steps): the same
    tokens, stops and number of steps as the general loop running it beside another row,
    with banned ids that come out on top, several end tokens, min_new_tokens and ignore_eos."""
    import edgeformer.core.decoding as decoding

    taken = []
    fast = decoding._greedy_one
    monkeypatch.setattr(decoding, "_greedy_one", lambda *a: taken.append(1) or fast(*a))
    held = ({}, dict(min_new_tokens=1), dict(ignore_eos=True))
    for seed, max_new, banned, ends, kw in itertools.product(
        range(12), (1, 3, 9), ([], [1], [0, 4]), ((), (5,)), held
    ):
        m = Markov(seed)
        inputs = DecodeInputs(EOS, banned=banned)
        opts = GenerationOptions(max_new_tokens=max_new, end_token=ends, **kw)
        alone = generate(m.first(), m, opts, inputs)[0]
        steps_alone = m.steps
        pair = Markov(seed, 2)
        both = generate(pair.first(2), pair, opts, DecodeInputs(EOS, banned=banned))
        assert alone == both[0] == both[1]
        assert steps_alone == pair.steps  # no step past the last token
        assert not set(alone) & set(banned) and len(alone) <= max_new
        if kw.get("ignore_eos"):
            assert len(alone) == max_new
    assert len(taken) == 12 * 3 * 3 * 2 * 3  # every lone row took the fast path
