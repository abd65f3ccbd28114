"""Issue 61: beam search rewritten for speed gives today's hypotheses (tests/core/beam_reference.py,
the beam search of main 8d33abc kept verbatim): ids identical, scores and per-token
log-probabilities within 1e-5, on fake models whose logits depend on each row's whole history
(a wrong cache reorder changes them) over every option beam search takes, and on the bundled
m30k-en-de package's own decoder."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from beam_reference import reference_beam_search

from edgeformer.core.decoding import DecodeInputs, GenerationOptions, Hypothesis, beam_search

EOS = 2


class History:
    """A stepper whose logits are a hash of (source row, every token fed so far): a row's
    logits are right only if select() carried its history. Records the rows it steps."""

    def __init__(self, vocab: int, batch: int, seed: int = 0, eos_bias: float = 0.0):
        self.vocab, self.seed, self.eos_bias = vocab, seed, eos_bias
        self.hist: list[tuple[int, ...]] = [(b,) for b in range(batch)]
        self.stepped = 0  # rows fed, over all steps

    def logits(self, h: tuple[int, ...]) -> np.ndarray:
        key = zlib.crc32(np.asarray((self.seed, *h), dtype=np.int64).tobytes())
        row = np.random.default_rng(key).normal(size=self.vocab).astype(np.float32) * 3
        row[EOS] += self.eos_bias * (len(h) - 1)  # ends more likely as outputs grow
        return row

    def first(self) -> np.ndarray:
        return np.stack([self.logits(h) for h in self.hist])

    def step(self, tokens: np.ndarray) -> np.ndarray:
        assert len(tokens) == len(self.hist)
        self.stepped += len(tokens)
        self.hist = [h + (int(t),) for h, t in zip(self.hist, tokens.tolist())]
        return np.stack([self.logits(h) for h in self.hist])

    def select(self, rows: np.ndarray) -> None:
        self.hist = [self.hist[r] for r in np.asarray(rows).tolist()]


def assert_same(new: list[list[Hypothesis]], old: list[list[Hypothesis]]) -> None:
    assert len(new) == len(old)
    for b, (hn, ho) in enumerate(zip(new, old)):
        assert [h.tokens for h in hn] == [h.tokens for h in ho], f"row {b}"
        for x, y in zip(hn, ho):
            assert x.score == pytest.approx(y.score, abs=1e-5), f"row {b}"
            assert x.log_probs is not None and y.log_probs is not None
            np.testing.assert_allclose(x.log_probs, y.log_probs, atol=1e-5)


def both(
    opts: GenerationOptions, inputs: DecodeInputs, vocab: int = 40, batch: int = 6,
    seed: int = 0, eos_bias: float = 0.4,
) -> tuple[list[list[Hypothesis]], list[list[Hypothesis]]]:  # fmt: skip
    new_model = History(vocab, batch, seed, eos_bias)
    old_model = History(vocab, batch, seed, eos_bias)
    new = beam_search(new_model.first(), new_model, opts, inputs)
    old = reference_beam_search(old_model.first(), old_model, opts, inputs)
    assert new_model.stepped <= old_model.stepped  # finished rows leave the batch
    return new, old


CASES = {
    "beam 5": dict(num_beams=5),
    "beam 5, 5 hypotheses": dict(num_beams=5, num_hypotheses=5),
    "beam 4, no early stopping, length penalty": dict(
        num_beams=4, num_hypotheses=2, early_stopping=False, length_penalty=1.0
    ),
    "no early stopping, no length penalty": dict(
        num_beams=3, early_stopping=False, length_penalty=0.0
    ),
    "beam 2, min_new_tokens": dict(num_beams=2, min_new_tokens=4),
    "ignore_eos": dict(num_beams=3, ignore_eos=True, num_hypotheses=3),
    "two end tokens": dict(num_beams=4, end_token=[EOS, 7]),
    "repetition penalty, n-grams": dict(
        num_beams=4, repetition_penalty=1.3, no_repeat_ngram_size=2
    ),
    "forced end token": dict(num_beams=3, forced_end_token=EOS),
    "beam 1": dict(num_beams=1),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_gives_todays_hypotheses(case, seed):
    opts = GenerationOptions(max_new_tokens=12, **CASES[case])
    assert_same(*both(opts, DecodeInputs(EOS, banned=(0, 1)), seed=seed))


@pytest.mark.parametrize("seed", [0, 3])
def test_prefixes_ranks_and_stop_tests_as_today(seed):
    opts = GenerationOptions(max_new_tokens=10, num_beams=4, num_hypotheses=2)
    prefixes = [[5, 6], [], [7], [8, 9, 10], [], [11]]
    assert_same(*both(opts, DecodeInputs(EOS, prefixes=prefixes), seed=seed))
    ranked = DecodeInputs(EOS, prefixes=prefixes, ranks=[0, 1, 2, 0, 1, 2])
    assert_same(*both(opts, ranked, seed=seed))

    def stop(row: int, seq: list[int]) -> bool:  # a row-dependent stop test
        return seq[-1] % 7 == row % 7

    assert_same(*both(opts, DecodeInputs(EOS, prefixes=prefixes, stop=stop), seed=seed))
    context = [[3, 4, 5]] * 6
    penalised = GenerationOptions(max_new_tokens=10, num_beams=3, repetition_penalty=1.5)
    assert_same(*both(penalised, DecodeInputs(EOS, context=context), seed=seed))


def test_tiny_vocabularies_with_fewer_live_candidates_than_beams():
    opts = GenerationOptions(max_new_tokens=6, num_beams=4, num_hypotheses=4)
    for seed in range(4):
        assert_same(*both(opts, DecodeInputs(EOS, banned=(0,)), vocab=4, seed=seed))
    opts = GenerationOptions(max_new_tokens=6, num_beams=3)
    assert_same(*both(opts, DecodeInputs(EOS), vocab=3, batch=2, eos_bias=2.0))


def test_the_bundled_translator_beam_search_as_today():
    """m30k-en-de's fp32 decoder, test_2016_flickr's first 96 sentences in batches of 32 (as
    translate_file cuts them), beam 5 with every hypothesis scored."""
    pytest.importorskip("onnxruntime")
    from edgeformer.core.data import DATA_DIR, multi30k_file, read_lines
    from edgeformer.runtime import Translator

    t = Translator("m30k-en-de", threads=1)
    lines = read_lines(multi30k_file(DATA_DIR, "test_2016_flickr", "en"))[:96]
    sources = sorted((t.source_ids(line) for line in lines), key=len)
    opts = t._prepare(GenerationOptions(num_beams=5, num_hypotheses=5))
    assert opts.max_new_tokens is not None
    inputs = DecodeInputs(t.model.eos_id, banned=t.banned_ids)
    for i in range(0, len(sources), 32):
        batch = sources[i : i + 32]
        stepper, first = t._start(batch, opts.max_new_tokens)
        new = beam_search(first, stepper, opts, inputs)
        stepper, first = t._start(batch, opts.max_new_tokens)
        old = reference_beam_search(first, stepper, opts, inputs)
        assert_same(new, old)
        assert all(len(h) == 5 for h in new)


def test_a_vocabulary_large_enough_for_the_grouped_top_k_as_today():
    opts = GenerationOptions(max_new_tokens=8, num_beams=5, num_hypotheses=3)
    assert_same(*both(opts, DecodeInputs(EOS, banned=(0, 1)), vocab=3001, batch=3, eos_bias=1.0))


@pytest.mark.parametrize("vocab", [1024, 3001, 6000])
def test_the_grouped_candidates_are_each_rows_best(vocab):
    from edgeformer.core.decoding import _best_candidates

    K, n = 4, 8
    rng = np.random.default_rng(vocab)
    logp = rng.normal(size=(3 * K, vocab)).astype(np.float32)
    logp[1, :-3] = -np.inf  # three finite values, at the end (past the groups)
    logp[4:8] = -np.inf  # row 1: two finite tokens in all
    logp[5, [5, vocab - 1]] = 1.0
    logp[8:, 100:110] = 50.0  # row 2: each beam's best ten in few groups
    beam_scores = rng.normal(size=3 * K)
    beam_scores[2] = -np.inf
    flat, scores = _best_candidates(logp, beam_scores, K, n)
    cand = (beam_scores[:, None] + logp).reshape(3, K * vocab)
    for a in range(3):
        expect = np.sort(cand[a])[::-1][:n]
        np.testing.assert_array_equal(scores[a], expect)
        np.testing.assert_array_equal(cand[a, flat[a]], expect)
        finite = flat[a][np.isfinite(scores[a])]
        assert len(set(finite.tolist())) == len(finite)


def test_a_beams_first_child_keeps_its_slot():
    from edgeformer.core.decoding import _beam_slots

    parent = np.array([[0, 0, 1, 2, 0], [3, 3, 3, -1, -1], [4, 2, 0, 1, 3], [-1] * 5])
    slots = _beam_slots(parent)
    for p, s in zip(parent.tolist(), slots.tolist()):
        assert sorted(s) == list(range(5))  # a permutation of the row's slots
        firsts = {q: j for j, q in reversed(list(enumerate(p))) if q >= 0}
        assert all(s[j] == q for q, j in firsts.items())  # first children stay
    assert slots[0].tolist() == [0, 3, 1, 2, 4]  # the others: free slots in order
    assert slots[1].tolist() == [3, 0, 1, 2, 4]
