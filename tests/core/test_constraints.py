"""Forced prefixes, alternatives, constraints and result objects (issue 11, items 2-4).

Each feature is checked against a brute-force reference: a fake Markov model decoded by hand,
or the PyTorch model recomputed from scratch at every step (no cache, no shared decoding code).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from edgeformer.core.decoding import DecodeInputs, beam_search, decode, generate, log_softmax
from edgeformer.runtime import GenerationOptions, Generator, Translator

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

PAD, BOS, EOS = 0, 1, 2
BANNED = (PAD, BOS)


# ---------------------------------------------------------------- a fake model, decoded by hand

V = 8


class Markov:
    """Logits depend on the last token only (0 before the first)."""

    def __init__(self, seed: int = 0, batch: int = 1):
        self.table = np.random.default_rng(seed).normal(size=(V, V)).astype(np.float32) * 2
        self.n = batch

    def first(self, batch: int = 1) -> np.ndarray:
        return np.tile(self.table[0], (batch, 1))

    def step(self, tokens: np.ndarray) -> np.ndarray:
        assert len(tokens) == self.n
        return self.table[tokens]

    def select(self, rows: np.ndarray) -> None:
        self.n = len(rows)


def ngram_bans(hist: list[int], n: int) -> set[int]:
    """Every token that would complete an n-gram already in `hist` (the naive way)."""
    grams = {tuple(hist[i : i + n]) for i in range(len(hist) - n + 1)}
    tail = tuple(hist[len(hist) - n + 1 :]) if n > 1 else ()
    return {g[-1] for g in grams if g[:-1] == tail} if len(hist) >= n - 1 else set()


def brute_greedy(next_logits, prefix, max_new, ends=(EOS,), banned=BANNED, history=(), ngram=0,
                 suppress=()):  # fmt: skip
    """Greedy decoding recomputed from scratch: (tokens with the prefix, log-probs)."""
    seq, lps = [], []
    for tok in prefix:  # forced: scored by the model's own distribution
        lps.append(float(log_softmax(next_logits(seq).astype(np.float64))[tok]))
        seq.append(tok)
    for _ in range(max_new):
        lg = next_logits(seq).astype(np.float64).copy()
        lg[list(banned)] = -np.inf
        hist = list(history) + seq
        if ngram:
            lg[list(ngram_bans(hist, ngram))] = -np.inf
        for s in suppress:
            if len(s) == 1 or hist[len(hist) - len(s) + 1 :] == list(s[:-1]):
                lg[s[-1]] = -np.inf
        tok = int(lg.argmax())
        lps.append(float(log_softmax(lg)[tok]))
        if tok in ends:
            break
        seq.append(tok)
    return seq, lps


def has_repeated_ngram(seq, n) -> bool:
    grams = [tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)]
    return len(grams) != len(set(grams))


def markov_logits(m: Markov):
    return lambda seq: m.table[seq[-1] if seq else 0]


@pytest.mark.parametrize("seed", range(4))
def test_markov_constraints_equal_brute_force(seed):
    m = Markov(seed)
    cases = [
        dict(no_repeat_ngram_size=2),
        dict(no_repeat_ngram_size=1),
        dict(suppress_sequences=[[3], [4, 5], [5, 6, 7]]),
        dict(end_token=[6, 7]),
    ]
    for kw in cases:
        opts = GenerationOptions(max_new_tokens=12, **kw)
        for prefix in ([], [3, 3, 4]):
            (hyp,) = decode(
                m.first(), Markov(seed), opts, DecodeInputs(EOS, None, BANNED, [prefix])
            )[0]
            ref, lps = brute_greedy(
                markov_logits(m), prefix, 12, ends=(EOS, *opts.end_token),
                ngram=opts.no_repeat_ngram_size, suppress=opts.suppress_sequences,
            )  # fmt: skip
            assert hyp.tokens == ref, kw
            assert hyp.log_probs == pytest.approx(lps, abs=1e-5)
            assert hyp.score == pytest.approx(sum(lps) / len(lps), abs=1e-5)
            new = hyp.tokens[len(prefix) :]
            if opts.no_repeat_ngram_size == 2:
                assert not has_repeated_ngram(hyp.tokens, 2)
            if kw.get("end_token"):
                assert not {6, 7} & set(new)
            if kw.get("suppress_sequences"):
                assert 3 not in new and not has_sub(new, [4, 5])


def has_sub(seq, sub) -> bool:
    return any(seq[i : i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def test_markov_beam_with_prefix_is_exact():
    """Enough beams: the n-best with a forced prefix are the best continuations of it."""
    m = Markov(5)
    prefix, L = [4, 6], 3
    opts = GenerationOptions(max_new_tokens=L, num_beams=64, num_hypotheses=3, ignore_eos=True,
                             no_repeat_ngram_size=2)  # fmt: skip
    hyps = beam_search(m.first(), Markov(5), opts, DecodeInputs(EOS, None, BANNED, [prefix]))[0]

    def score(seq):
        lp, prev = 0.0, 0
        for i, t in enumerate(seq):
            row = m.table[prev].astype(np.float64).copy()
            if i >= len(prefix):
                row[[EOS, *BANNED]] = -np.inf
                row[list(ngram_bans(seq[:i], 2))] = -np.inf
            lp += log_softmax(row)[t]
            prev = t
        return lp

    seqs = [prefix + list(s) for s in itertools.product(range(V), repeat=L)]
    best = sorted(seqs, key=lambda s: -score(s))[:3]
    assert [h.tokens for h in hyps] == best
    assert hyps[0].score == pytest.approx(score(best[0]) / (L + len(prefix)), abs=1e-5)


def test_markov_alternatives_branch_at_the_top_k_after_the_prefix():
    m = Markov(2)
    prefix = [5]
    row = m.table[5].astype(np.float64).copy()
    row[[PAD, BOS]] = -np.inf
    top = [int(t) for t in np.argsort(-row, kind="stable")[:4]]
    for kw in (dict(), dict(num_beams=3), dict(sampling=True, seed=0)):
        opts = GenerationOptions(max_new_tokens=6, return_alternatives=True, num_hypotheses=4,
                                 **kw)  # fmt: skip
        hyps = decode(m.first(2), Markov(2, 2), opts, DecodeInputs(EOS, None, BANNED, [prefix, []]))
        assert [len(h) for h in hyps] == [4, 4]
        assert [h.tokens[1] if len(h.tokens) > 1 else EOS for h in hyps[0]] == top, kw
        assert len({tuple(h.tokens) for h in hyps[0]}) == 4
        if not kw:  # each alternative continues greedily
            for h, tok in zip(hyps[0], top):
                cont = [] if tok == EOS else [tok]
                ref, _ = brute_greedy(markov_logits(m), prefix + cont, 6 - len(cont))
                assert h.tokens == ref


def test_markov_samples_are_seeded_and_distinct():
    m = Markov(3)
    opts = GenerationOptions(max_new_tokens=10, sampling=True, num_hypotheses=5, seed=11,
                             temperature=2.0, ignore_eos=True)  # fmt: skip
    a = decode(m.first(2), Markov(3, 2), opts, DecodeInputs(EOS, None, BANNED))
    b = decode(m.first(2), Markov(3, 2), opts, DecodeInputs(EOS, None, BANNED))
    assert [[h.tokens for h in r] for r in a] == [[h.tokens for h in r] for r in b]
    assert all(len({tuple(h.tokens) for h in r}) > 1 for r in a)
    assert generate(m.first(2), Markov(3, 2), opts, DecodeInputs(EOS, None, BANNED)) == [
        r[0].tokens for r in a
    ]


# ---------------------------------------------------------------- the runtime against PyTorch


@pytest.fixture(scope="module")
def tr(ed_package):
    return Translator(ed_package, threads=1)


@pytest.fixture(scope="module")
def gen(lm_package):
    return Generator(lm_package, threads=1)


@pytest.fixture(scope="module")
def ed_model(ed_checkpoint):
    from edgeformer.models.checkpoint import load_checkpoint

    return load_checkpoint(ed_checkpoint)[0].eval()


@pytest.fixture(scope="module")
def lm_model(lm_checkpoint):
    from edgeformer.models.checkpoint import load_checkpoint

    return load_checkpoint(lm_checkpoint)[0].eval()


def ed_logits(model, src: list[int]):
    s = torch.tensor([src])
    mask = torch.ones_like(s)

    @torch.no_grad()
    def next_logits(seq):
        return model(s, torch.tensor([[BOS] + seq]), mask)[0, -1].double().numpy()

    return next_logits


def lm_logits(model, prompt: list[int]):
    @torch.no_grad()
    def next_logits(seq):
        return model(torch.tensor([prompt + seq]))[0][0, -1].double().numpy()

    return next_logits


SRC = ["two dogs play in the snow .", "a man rides a bike ."]


def test_forced_prefix_equals_pytorch_greedy_from_the_prefix(tr, ed_model):
    prefixes = ["zwei hunde", [40, 41, 42]]
    results = tr.translate_results(SRC, target_prefix=prefixes, max_new_tokens=10)
    for text, prefix, r in zip(SRC, prefixes, results):
        ids = tr.model.encode(prefix) if isinstance(prefix, str) else prefix
        ref, lps = brute_greedy(ed_logits(ed_model, tr.source_ids(text)), ids, 10)
        (h,) = r.hypotheses
        assert h.ids == ref and h.text == tr.model.decode(ref)
        assert h.log_probs == pytest.approx(lps, abs=1e-4)
        assert h.score == pytest.approx(sum(lps) / len(lps), abs=1e-4)
    assert results[0].text.startswith("zwei hunde")
    # the string API, a None entry, and beam search / sampling keep the prefix
    out = tr.translate_batch(SRC, target_prefix=[None, "ein mann"], max_new_tokens=10)
    assert out[0] == tr.translate(SRC[0], max_new_tokens=10)
    assert out[1] == results[1].text or out[1].startswith("ein mann")
    for kw in (dict(num_beams=3), dict(sampling=True, seed=0)):
        assert tr.translate(SRC[0], target_prefix="zwei", max_new_tokens=6, **kw).startswith("zwei")
    with pytest.raises(ValueError, match="aligned"):
        tr.translate_batch(SRC, target_prefix="zwei")
    with pytest.raises(ValueError, match="1 items for 2 inputs"):
        tr.translate_batch(SRC, target_prefix=["zwei"])


def test_beam_with_prefix_equals_pytorch_stepper(tr, ed_model):
    """The ONNX step loop and PyTorch's agree on beam search with forced prefixes."""
    from edgeformer.models.generation import EncoderDecoderStepper, pad_batch

    sources = [tr.source_ids(t) for t in SRC]
    prefixes = [tr.model.encode("zwei hunde"), []]
    opts = GenerationOptions(max_new_tokens=8, num_beams=3, num_hypotheses=2)
    got = tr.translate_ids_nbest(sources, opts, target_prefix=prefixes)
    src, mask = pad_batch(sources, PAD)
    stepper = EncoderDecoderStepper(ed_model, src, mask)
    ref = beam_search(
        stepper.first_logits(), stepper, opts, DecodeInputs(EOS, None, BANNED, prefixes)
    )
    assert [[h.tokens for h in r] for r in got] == [[h.tokens for h in r] for r in ref]
    for a, b in zip(got, ref):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)
    assert got[0][0].tokens[:2] == prefixes[0]


def test_alternatives_start_with_the_top_k_after_the_prefix(tr, ed_model, gen, lm_model):
    prefix = tr.model.encode("zwei")
    (r,) = tr.translate_results(SRC[:1], target_prefix=[prefix], return_alternatives=True,
                                num_hypotheses=3, max_new_tokens=6)  # fmt: skip
    nl = ed_logits(ed_model, tr.source_ids(SRC[0]))
    row = nl(prefix)
    row[list(BANNED)] = -np.inf
    top = [int(t) for t in np.argsort(-row)[:3]]
    assert [h.ids[len(prefix)] for h in r.hypotheses] == top
    assert len({h.text for h in r.hypotheses}) == 3
    for h, tok in zip(r.hypotheses, top):
        assert h.ids == brute_greedy(nl, prefix + [tok], 5)[0]
    # the generator: the prompt is the prefix
    (g,) = gen.generate_results(["two dogs"], return_alternatives=True, num_hypotheses=3,
                                max_new_tokens=5)  # fmt: skip
    prompt = gen.model.encode("two dogs")
    row = lm_logits(lm_model, prompt)([])
    row[list(BANNED)] = -np.inf
    assert [h.ids[0] for h in g.hypotheses] == [int(t) for t in np.argsort(-row)[:3]]


def test_no_repeat_ngram_and_suppress_equal_pytorch(gen, lm_model):
    prompt_text = "two dogs"
    prompt = gen.model.encode(prompt_text)
    nl = lm_logits(lm_model, prompt)
    plain = gen.generate_results([prompt_text], max_new_tokens=20)[0].hypotheses[0].ids
    for n in (2, 3):
        (r,) = gen.generate_results([prompt_text], max_new_tokens=20, no_repeat_ngram_size=n)
        ref, lps = brute_greedy(nl, [], 20, history=prompt, ngram=n)
        h = r.hypotheses[0]
        assert h.ids == ref and h.log_probs == pytest.approx(lps, abs=1e-4)
        assert not has_repeated_ngram(prompt + h.ids, n)
    # suppress the most frequent token of the plain output (as an id and as text), and a pair
    tok = max(set(plain), key=plain.count)
    pair = next(plain[i : i + 2] for i in range(len(plain) - 1))
    for spec in ([[tok], pair], [gen.model.tokenizer.decode([tok]), pair]):
        (r,) = gen.generate_results([prompt_text], max_new_tokens=20, suppress_sequences=spec)
        ids = r.hypotheses[0].ids
        assert tok not in ids and not has_sub(prompt + ids, pair)
        assert ids == brute_greedy(nl, [], 20, history=prompt, suppress=[[tok], pair])[0]


def test_end_tokens_and_stop_strings(gen):
    full = gen.generate_results(["two dogs"], max_new_tokens=25)[0].hypotheses[0]
    assert len(full.ids) > 6, full
    end = full.ids[4]
    for spec in ([end], gen.model.tokenizer.id_to_token(end)):
        (r,) = gen.generate_results(["two dogs"], max_new_tokens=25, end_token=spec)
        assert r.hypotheses[0].ids == full.ids[: full.ids.index(end)]
    with pytest.raises(ValueError, match="not a token of the vocabulary"):
        gen.generate("two", end_token=["no-such-token"])
    text = full.text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    want = text[: text.find(stop)]
    assert gen.generate("two dogs", max_new_tokens=25, stop=[stop, "\x00never"]) == want
    assert "".join(gen.stream("two dogs", max_new_tokens=25, stop=[stop])) == want
    (r,) = gen.generate_results(["two dogs"], max_new_tokens=25, stop=stop)
    h = r.hypotheses[0]
    assert (
        h.text == want
        and len(h.ids) < len(full.ids)
        and stop in gen.model.decode(gen.model.encode("two dogs") + h.ids)
    )
    # beam search stops too
    beam = gen.generate("two dogs", max_new_tokens=25, num_beams=2, stop=[stop])
    assert stop not in beam


def test_translation_stop_strings_look_after_the_prefix(tr):
    full = tr.translate_results(SRC[:1], target_prefix=["zwei hunde"], max_new_tokens=12)[0]
    cont = full.text[len("zwei hunde") :]
    stop = cont[len(cont) // 2 : len(cont) // 2 + 2]
    for stops in ([stop], ["zwei", stop]):  # "zwei" is in the prefix only: it stops nothing
        (r,) = tr.translate_results(SRC[:1], target_prefix=["zwei hunde"], stop=stops,
                                    max_new_tokens=12)  # fmt: skip
        assert r.text == "zwei hunde" + cont[: cont.find(stop)]


def test_max_input_length(tr, gen):
    with pytest.raises(ValueError, match=r"texts\[1\]: source of \d+ tokens .* max_input_length 4"):
        tr.translate_batch(["a", SRC[0]], max_input_length=4)
    cut = tr.translate_results([SRC[0]], truncate=True, max_input_length=4, max_new_tokens=3)
    assert cut[0].text == tr.translate_batch([tr.model.decode(tr.source_ids(SRC[0])[:3])],
                                             max_new_tokens=3)[0]  # fmt: skip
    with pytest.raises(ValueError, match=r"prompts\[0\]: prompt of \d+ tokens .* max_input_len"):
        gen.generate_batch([SRC[0]], max_input_length=3)
    kept = gen.model.decode(gen.model.encode(SRC[0])[-3:])
    cut = gen.generate(SRC[0], truncate=True, max_input_length=3, max_new_tokens=4)
    assert cut == gen.generate(kept, max_new_tokens=4)


def test_sampled_hypotheses_are_seeded_and_differ(tr, gen):
    kw = dict(sampling=True, num_hypotheses=4, temperature=1.5, max_new_tokens=12)
    a = gen.generate_results(["two dogs", "a"], seed=3, **kw)
    b = gen.generate_results(["two dogs", "a"], seed=3, **kw)
    assert [[h.ids for h in r.hypotheses] for r in a] == [[h.ids for h in r.hypotheses] for r in b]
    assert all(len({h.text for h in r.hypotheses}) > 1 for r in a)
    nbest = tr.translate_batch_nbest(SRC, seed=5, **kw)
    assert [len(n) for n in nbest] == [4, 4] and len(set(nbest[0])) > 1
    assert nbest == tr.translate_batch_nbest(SRC, seed=5, **kw)


def test_results_are_scored_beam_hypotheses(tr):
    r = tr.translate_results(SRC, num_beams=4, num_hypotheses=3, max_new_tokens=10)
    nbest = tr.translate_batch_nbest(SRC, num_beams=4, num_hypotheses=3, max_new_tokens=10)
    for res, pairs in zip(r, nbest):
        assert [(h.text, h.score) for h in res.hypotheses] == pairs
        for h in res.hypotheses:
            assert len(h.log_probs) in (len(h.ids), len(h.ids) + 1)
            assert h.score == pytest.approx(sum(h.log_probs) / len(h.log_probs), abs=1e-6)
    assert [x.text for x in r] == tr.translate_batch(SRC, num_beams=4, max_new_tokens=10)


def test_invalid_constraint_options(tr):
    for kw, msg in [
        (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size=-1"),
        (dict(suppress_sequences=[[]]), "suppress_sequences"),
        (dict(suppress_sequences=3), "suppress_sequences=3 must be a list"),
        (dict(end_token=[-1]), "end_token: token id -1"),
        (dict(stop=[""]), "stop: an empty string"),
        (dict(max_input_length=-2), "max_input_length=-2"),
        (dict(num_hypotheses=2), r"num_hypotheses=2 must be in \[1, num_beams\]"),
    ]:
        with pytest.raises(ValueError, match=msg):
            tr.translate("two dogs .", **kw)


def test_cli_flags(tr, gen, ed_package, lm_package, capsys):
    from edgeformer.cli import main

    def run(*argv):
        code = main([str(a) for a in argv])
        out = capsys.readouterr()
        assert code == 0, out.err
        return out.out.splitlines()

    new = ["--max-new-tokens", "8"]
    assert run("translate", ed_package, SRC[0], "--target-prefix", "zwei", *new) == [
        tr.translate(SRC[0], target_prefix="zwei", max_new_tokens=8)
    ]
    lines = run("translate", ed_package, SRC[0], "--alternatives", "--num-hypotheses", "3",
                "--target-prefix", "zwei", *new)  # fmt: skip
    (r,) = tr.translate_results([SRC[0]], target_prefix=["zwei"], return_alternatives=True,
                                num_hypotheses=3, max_new_tokens=8)  # fmt: skip
    assert [line.split("\t", 2)[2] for line in lines] == [h.text for h in r.hypotheses]
    assert [line.split("\t")[0] for line in lines] == ["0"] * 3
    flags = ["--no-repeat-ngram-size", "2", "--suppress", "two", "--end-token", "5"]
    assert run("translate", ed_package, SRC[1], *flags, *new) == [
        tr.translate(
            SRC[1],
            no_repeat_ngram_size=2,
            suppress_sequences=["two"],
            end_token=[5],
            max_new_tokens=8,
        )  # fmt: skip
    ]
    text = gen.generate("two dogs", max_new_tokens=20)
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert run("generate", lm_package, "two dogs", "--stop", stop, "--max-new-tokens", "20") == [
        "two dogs" + text[: text.find(stop)]
    ]
    lines = run("generate", lm_package, "two dogs", "--sample", "--seed", "2",
                "--num-hypotheses", "3", *new)  # fmt: skip
    (g,) = gen.generate_results(["two dogs"], sampling=True, seed=2, num_hypotheses=3,
                                max_new_tokens=8)  # fmt: skip
    assert lines == ["two dogs" + h.text for h in g.hypotheses]
    assert main(["translate", str(ed_package), SRC[0], "--max-input-length", "3"]) == 1
    assert "max_input_length 3" in capsys.readouterr().err
    assert main(["translate", str(ed_package), "x", "--num-hypotheses", "2"]) == 2
    assert "--sample or --alternatives" in capsys.readouterr().err
