"""Speculative decoding's loop and acceptance rule (core/speculative.py, decoding._speculative_one)
over a toy model whose logits are a fixed function of the last two tokens: greedy output equal to
plain decoding's under every processor, whatever the drafts; sampling with the distribution of
plain sampling (the standard acceptance rule, deterministic and sampled drafts)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from edgeformer.core.decoding import DecodeInputs, GenerationOptions, generate, prepare_options
from edgeformer.core.speculative import Draft, PromptLookup, Speculation

V = 12


class Toy:
    """A 'model': the logits after a text are table[its last two tokens]; implements Verifier
    (verify feeds several tokens, drop_last takes them back)."""

    def __init__(self, prompt: list[int], table: np.ndarray):
        self.table, self.hist = table, list(prompt)
        self.calls = 0

    def first(self) -> np.ndarray:
        return self.table[self.hist[-2], self.hist[-1]][None].astype(np.float32)

    def step(self, tokens: np.ndarray) -> np.ndarray:
        self.calls += 1
        self.hist.append(int(tokens[0]))
        return self.first()

    def select(self, rows: np.ndarray) -> None:
        assert list(rows) == [0]

    def verify(self, tokens: np.ndarray) -> np.ndarray:
        self.calls += 1
        out = []
        for t in tokens.tolist():
            self.hist.append(t)
            out.append(self.first()[0])
        return np.stack(out)

    def drop_last(self, n: int) -> None:
        del self.hist[len(self.hist) - n :]


class Noisy:
    """Drafts the toy's own greedy continuation, each token replaced by a random one with
    probability `noise` (so drafts are kept, cut short and rejected); `sampled`: tokens drawn
    from a distribution of its own (another table), returned as q."""

    def __init__(self, table: np.ndarray, noise: float, seed: int, sampled: bool = False):
        self.table, self.noise, self.sampled = table, noise, sampled
        self.rng = np.random.default_rng(seed)
        self.other = np.random.default_rng(seed + 7).normal(size=table.shape)

    def propose(self, history: list[int], k: int) -> Draft:
        h, tokens, probs = list(history), [], []
        for _ in range(int(self.rng.integers(0, k + 1))):
            if self.sampled:
                z = self.other[h[-2], h[-1]]
                q = np.exp(z - z.max())
                q /= q.sum()
                t = int(self.rng.choice(len(q), p=q))
                probs.append(q)
            else:
                t = int(self.table[h[-2], h[-1]].argmax())
                if self.rng.random() < self.noise:
                    t = int(self.rng.integers(self.table.shape[-1]))
            tokens.append(t)
            h.append(t)
        return Draft(tokens, np.stack(probs) if probs else None)


def run(prompt, table, opts, drafter=None, k=4, stop=None, eos=0):
    toy = Toy(prompt, table)
    opts = prepare_options(opts, table.shape[-1], 100)[0]
    spec = None if drafter is None else Speculation(drafter, k)
    inputs = DecodeInputs(eos_id=eos, context=[list(prompt)], stop=stop, speculation=spec)
    return generate(toy.first(), toy, opts, inputs)[0], toy, spec


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"repetition_penalty": 1.5},
        {"no_repeat_ngram_size": 2},
        {"min_new_tokens": 10, "suppress_sequences": [[3, 4]]},
        {"end_token": [5], "forced_end_token": 6},
    ],
)
def test_greedy_equals_plain_whatever_the_drafts(changes):
    table = np.random.default_rng(0).normal(size=(V, V, V)) * 2
    opts = GenerationOptions(max_new_tokens=30, **changes)
    drafted = accepted = 0
    for seed, noise in itertools.product(range(8), (0.0, 0.3, 1.0)):
        prompt = [int(t) for t in np.random.default_rng(seed).integers(1, V, 6)]
        plain, toy_plain, _ = run(prompt, table, opts)
        fast, toy, spec = run(prompt, table, opts, Noisy(table, noise, seed))
        assert fast == plain, (changes, seed, noise)
        assert spec.stats.tokens == len(fast) + (len(fast) < 30)  # an end token counts
        if noise == 0.0 and not changes and len(fast) > 5:  # drafts of the raw logits
            assert toy.calls < toy_plain.calls  # drafts kept: fewer calls of the model
        drafted, accepted = drafted + spec.stats.drafted, accepted + spec.stats.accepted
    assert drafted > accepted > 0  # drafts kept and rejected


def test_stop_test_and_prompt_lookup():
    table = np.random.default_rng(1).normal(size=(V, V, V)) * 2
    prompt = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]
    opts = GenerationOptions(max_new_tokens=40)
    stop = lambda row, seq: len(seq) >= 7  # noqa: E731
    plain, _, _ = run(prompt, table, opts, stop=stop)
    fast, _, spec = run(prompt, table, opts, PromptLookup(), stop=stop)
    assert fast == plain and len(fast) == 7
    lookup = PromptLookup()
    assert lookup.propose(prompt, 3).tokens == [5, 6, 3]  # after the latest earlier "3 4"
    assert lookup.propose([*prompt, 5, 9], 3).tokens == []  # "5 9", "9" never seen


def exact_distribution(table, prompt, opts, n):
    """{first n tokens: probability} under plain sampling (temperature, top-k)."""
    from edgeformer.core.decoding import sampling_probs

    out = {(): 1.0}
    for _ in range(n):
        nxt = {}
        for seq, p in out.items():
            h = [*prompt, *seq]
            probs = sampling_probs(table[h[-2], h[-1]][None].astype(np.float32), opts)[0]
            for t in range(len(probs)):
                if probs[t] > 0:
                    nxt[(*seq, t)] = p * probs[t]
        out = nxt
    return out


@pytest.mark.parametrize("sampled_draft", [False, True])
def test_sampling_keeps_the_distribution(sampled_draft):
    """The first 3 tokens' joint distribution (4**3 outcomes) under speculative sampling is
    plain sampling's: total variation distance within sampling noise over 5,000 runs (a wrong
    rule, e.g. keeping every draft, is off by more than 0.3)."""
    table = np.random.default_rng(2).normal(size=(4, 4, 4)) * 1.5
    opts = GenerationOptions(max_new_tokens=3, sampling=True, temperature=0.9, top_k=3)
    want = exact_distribution(table, [1, 2], opts, 3)
    counts: dict[tuple, int] = {}
    runs = 5000
    for seed in range(runs):
        o = dataclasses.replace(opts, seed=seed)
        drafter = Noisy(table, 0.5, seed, sampled_draft)
        got, _, _ = run([1, 2], table, o, drafter, k=2, eos=99)  # no end token
        counts[tuple(got)] = counts.get(tuple(got), 0) + 1
    tv = 0.5 * sum(abs(counts.get(s, 0) / runs - want.get(s, 0.0))
                   for s in set(want) | set(counts))  # fmt: skip
    assert tv < 0.06, tv
