"""translate_iterable / translate_file: length-sorted sub-batches, results in input order."""

from __future__ import annotations

import threading

import pytest

from edgeformer.runtime import Translator
from edgeformer.runtime.batching import Batching, _sub_batches

TEXTS = [
    "a man rides a bike .",
    "",
    "two dogs play in the snow while a child is watching them from far away .",
    "a woman sings .",
    "people",
    "a very long sentence about a group of people who walk down a busy street in the city .",
    "   ",
    "a cat .",
]


@pytest.fixture(scope="module")
def translator(ed_package):
    return Translator(ed_package, threads=1)


def test_sub_batches_respect_the_limit_and_cover_every_row():
    lengths = [5, 1, 9, 3, 9, 2, 7]
    for batching in (Batching(2), Batching(18, "tokens"), Batching(1, "tokens")):
        batches = _sub_batches(lengths, batching)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        for b in batches:
            longest = max(lengths[i] for i in b)
            assert lengths[b[0]] == longest  # longest first
            assert len(b) == 1 or batching.cost(len(b), longest) <= batching.max_batch_size
    # sorted by length: similar lengths share a batch
    assert [sorted(lengths[i] for i in b) for b in _sub_batches(lengths, Batching(2))] == [
        [9, 9],
        [5, 7],
        [2, 3],
        [1],
    ]


@pytest.mark.parametrize("size,kind", [(1, "examples"), (3, "examples"), (40, "tokens")])
def test_translate_iterable_equals_translate_batch_in_input_order(translator, size, kind):
    want = translator.translate_batch(TEXTS, max_new_tokens=12)
    texts = iter(TEXTS)  # any iterable, consumed lazily
    got = list(translator.translate_iterable(texts, size, kind, max_new_tokens=12))
    assert got == want
    assert got[1] == "" and got[6] == ""


def test_inter_threads_translate_sub_batches_at_once_with_the_same_results(
    ed_package, translator, tmp_path, capsys
):
    """inter_threads=3: sub-batches run on 3 threads (1 intra-op thread each); the outputs
    are the sequential ones, in input order."""
    texts = TEXTS * 5
    want = list(translator.translate_iterable(texts, 2, max_new_tokens=12))
    parallel = Translator(ed_package, inter_threads=3)
    assert parallel.batch_pool.workers == 3
    assert list(parallel.translate_iterable(texts, 2, max_new_tokens=12)) == want
    src, out = tmp_path / "src.txt", tmp_path / "out.txt"
    src.write_text("\n".join(texts) + "\n")
    parallel.translate_file(src, out, 2, max_new_tokens=12)
    assert out.read_text().splitlines() == want
    from edgeformer.cli import main

    args = ["translate", str(ed_package), "--inter-threads", "2", "--max-batch-size", "2"]
    assert main([*args, "--max-new-tokens", "12", *TEXTS[:4]]) == 0
    assert capsys.readouterr().out.splitlines() == want[:4]
    with pytest.raises(ValueError, match="inter_threads=0"):
        Translator(ed_package, inter_threads=0)


def test_translate_iterable_is_lazy(translator):
    seen = []

    def texts():
        for i in range(10_000):
            seen.append(i)
            yield "a man ."

    first = next(iter(translator.translate_iterable(texts(), max_batch_size=2, max_new_tokens=2)))
    assert first == translator.translate("a man .", max_new_tokens=2)
    assert len(seen) <= 2 * 16  # one read-ahead buffer, not the whole input


def test_workers_start_the_next_buffer_before_the_last_is_given(ed_package, translator):
    """inter_threads > 1: buffer k + 1 is read and started before buffer k's results come
    (the workers never wait at a buffer's end); at most two buffers are read ahead, results
    stay in input order, and a consumer that stops leaves nothing queued."""
    parallel = Translator(ed_package, threads=1, inter_threads=2)
    calls: list[int] = []
    gate = threading.Event()
    translate = parallel._translate_prepared  # what each sub-batch runs
    first_buffer = 12  # 32 texts: 24 non-empty, in sub-batches of 2

    def counted(sources, *args, **kwargs):
        calls.append(len(sources))
        if len(calls) > first_buffer:  # the second buffer's sub-batches wait for the test
            gate.wait(10)
        return translate(sources, *args, **kwargs)

    parallel._translate_prepared = counted  # type: ignore[method-assign]
    seen: list[int] = []

    def texts():
        for i in range(10_000):
            seen.append(i)
            yield TEXTS[i % len(TEXTS)]

    stream = iter(parallel.translate_iterable(texts(), max_batch_size=2, max_new_tokens=2))
    first = next(stream)
    assert first == translator.translate_batch(TEXTS[:1], max_new_tokens=2)[0]
    assert len(seen) == 2 * 2 * 16  # two read-ahead buffers: the second was started
    stream.close()  # the second buffer's sub-batches not yet running are cancelled
    gate.set()
    parallel.batch_pool.close(wait=True)  # whatever was left has run
    assert first_buffer < len(calls) <= first_buffer + 2  # at most one per worker ran on
    want = translator.translate_batch(TEXTS * 9, max_new_tokens=3)
    assert list(parallel.translate_iterable(TEXTS * 9, 2, max_new_tokens=3)) == want


def test_a_failing_sub_batch_cancels_those_not_started(ed_package):
    parallel = Translator(ed_package, threads=1, inter_threads=2)
    calls: list[int] = []
    gate = threading.Event()

    def failing(sources, *args, **kwargs):
        calls.append(len(sources))
        if len(calls) == 1:
            raise RuntimeError("sub-batch failed")
        gate.wait(10)  # the others wait until the error has reached the caller
        return [[] for _ in sources]

    parallel._translate_prepared = failing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="sub-batch failed"):
        list(parallel.translate_iterable(["a man ."] * 100, max_batch_size=2, max_new_tokens=2))
    gate.set()
    parallel.batch_pool.close(wait=True)  # whatever was left has run
    assert len(calls) <= 3  # the failed one and at most one more per worker, of 50


def test_a_bad_item_of_a_later_buffer_is_named_and_stops_the_workers(ed_package):
    parallel = Translator(ed_package, threads=1, inter_threads=2)
    texts = ["a man ."] * 40 + ["word " * 500] + ["a cat ."] * 40
    with pytest.raises(ValueError, match=r"texts\[40\].*max_len"):
        list(parallel.translate_iterable(texts, max_batch_size=2, max_new_tokens=2))


def test_translate_iterable_names_a_bad_item(translator):
    with pytest.raises(ValueError, match=r"texts\[2\].*max_len"):
        list(translator.translate_iterable(["a", "b", "word " * 500], max_new_tokens=2))
    got = list(translator.translate_iterable(["word " * 500], truncate=True, max_new_tokens=2))
    assert len(got) == 1


@pytest.mark.parametrize("bad", [dict(max_batch_size=0), dict(batch_type="sentences")])
def test_bad_batching_is_refused(translator, bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        translator.translate_iterable(TEXTS, **bad)


def test_translate_file(translator, tmp_path):
    src, out = tmp_path / "src.txt", tmp_path / "out.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    stats = translator.translate_file(src, out, max_batch_size=3, max_new_tokens=12)
    want = translator.translate_batch(TEXTS, max_new_tokens=12)
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == want
    assert stats.sentences == len(TEXTS)
    assert stats.target_tokens > 0 and stats.seconds > 0 and stats.sentences_per_s > 0
    assert "sentences/s" in stats.summary()


def test_translate_file_writes_nothing_on_a_bad_line(translator, tmp_path):
    src, out = tmp_path / "src.txt", tmp_path / "out.txt"
    src.write_bytes(b"a man .\nbad \xff byte\n")
    with pytest.raises(ValueError, match="line 2: not valid UTF-8"):
        translator.translate_file(src, out, max_new_tokens=2)
    src.write_text("a man .\n" + "word " * 500 + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2: .*max_len"):
        translator.translate_file(src, out, max_new_tokens=2)
    assert list(tmp_path.iterdir()) == [src]  # no output, no temporary file left
    with pytest.raises(FileNotFoundError):
        translator.translate_file(tmp_path / "missing.txt", out)
    with pytest.raises(ValueError, match="is the source file"):
        translator.translate_file(src, src)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(sampling=True, top_k=20, seed=3),
        dict(target_prefix="a man"),
        dict(num_beams=3),
        dict(no_repeat_ngram_size=2),
    ],
)
def test_translator_stream_pieces_concatenate_to_translate(translator, kw):
    for text in TEXTS:
        pieces = list(translator.stream(text, max_new_tokens=12, **kw))
        assert "".join(pieces) == translator.translate(text, max_new_tokens=12, **kw)
        assert all(pieces)


# ---- the batch calls' max_batch_size / batch_type (issue 61) ----------------------------------


def _log_probs(results) -> list[float]:
    return [x for r in results for x in r.log_probs]


def _recording(model, name: str) -> list[int]:
    """Sizes of the batches `model.<name>` runs from now on."""
    sizes: list[int] = []
    inner = getattr(model, name)

    def recorded(batch, *args, **kwargs):
        sizes.append(len(batch))
        return inner(batch, *args, **kwargs)

    setattr(model, name, recorded)
    return sizes


@pytest.mark.parametrize("size,kind", [(2, "examples"), (30, "tokens"), (0, "examples")])
def test_batch_calls_run_in_sub_batches_with_one_batchs_results(ed_package, lm_package, size, kind):
    texts = TEXTS * 6  # 36 non-empty, more than the default sub-batch's 32
    one = Translator(ed_package, threads=1)
    want = one.translate_results(texts, max_batch_size=10_000, num_beams=3, max_new_tokens=6)
    t = Translator(ed_package, threads=1)
    sizes = _recording(t, "_translate_prepared")
    got = t.translate_results(texts, max_batch_size=size, batch_type=kind, num_beams=3,
                              max_new_tokens=6)  # fmt: skip
    assert [[h.ids for h in r.hypotheses] for r in got] == [
        [h.ids for h in r.hypotheses] for r in want
    ]
    assert [r.hypotheses[0].score for r in got] == pytest.approx(
        [r.hypotheses[0].score for r in want], abs=1e-5
    )
    assert sum(sizes) == 36 and len(sizes) > 1
    if kind == "examples":
        assert max(sizes) <= (size or 32)
    texts_batch = t.translate_batch(texts, max_batch_size=size, batch_type=kind, max_new_tokens=6)
    assert texts_batch == one.translate_batch(texts, max_batch_size=10_000, max_new_tokens=6)
    pairs = (["a man .", "two dogs play in the snow ."] * 20, ["ein mann .", "zwei hunde ."] * 20)
    scored = t.score_batch(*pairs, max_batch_size=size, batch_type=kind)
    whole = one.score_batch(*pairs, max_batch_size=10_000)
    assert _log_probs(scored) == pytest.approx(_log_probs(whole), abs=1e-5)

    from edgeformer.runtime import Generator

    g, whole_g = Generator(lm_package, threads=1), Generator(lm_package, threads=1)
    sizes = _recording(g, "_generate")
    prompts = [t for t in TEXTS if t.strip()] * 7
    got_g = g.generate_batch(prompts, max_batch_size=size, batch_type=kind, max_new_tokens=5)
    assert got_g == whole_g.generate_batch(prompts, max_batch_size=10_000, max_new_tokens=5)
    assert len(sizes) > 1 and sum(sizes) == len(prompts)
    scored = g.score_batch(prompts, max_batch_size=size, batch_type=kind)
    whole = whole_g.score_batch(prompts, max_batch_size=10_000)
    assert _log_probs(scored) == pytest.approx(_log_probs(whole), abs=1e-5)


@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(max_batch_size=-1), "max_batch_size=-1 must be 0"),
        (dict(max_batch_size=True), "max_batch_size=True"),
        (dict(max_batch_size=2.5), "max_batch_size=2.5"),
        (dict(batch_type="sentences"), "batch_type='sentences'"),
    ],
)
def test_bad_batch_call_batching_is_refused(translator, bad, match):
    for call in (translator.translate_batch, translator.translate_results):
        with pytest.raises(ValueError, match=match):
            call(TEXTS, **bad)
    with pytest.raises(ValueError, match=match):
        translator.score_batch(["a man ."], ["ein mann ."], **bad)


PEAK_RSS = """
import resource, sys
from edgeformer.runtime import Translator
t = Translator(sys.argv[1], threads=1)
words = "a man woman dog cat rides plays in the snow street with two".split()
texts = [" ".join(words[(i * 7 + j) % len(words)] for j in range(3 + i % 9)) for i in range(400)]
t.translate_batch(texts[:64], num_beams=5, max_new_tokens=8)  # everything loaded and warm
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = t.translate_batch(texts * int(sys.argv[2]), num_beams=5, max_new_tokens=8)
assert len(out) == 400 * int(sys.argv[2])
print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def test_4000_sentences_at_beam_5_take_no_more_memory_than_400(ed_package):
    """translate_batch's default sub-batches (32 examples: 160 decoder rows at beam 5) bound
    its memory whatever the input's size: the peak RSS of 4,000 sentences at beam 5 is that
    of 400 (within what 3,600 more results hold; one batch of 4,000 grew the decoder to 20,000
    rows, its beams' float64 candidates to 20,000 x vocab)."""
    import subprocess
    import sys

    peaks = {}
    for times in (1, 10):
        run = subprocess.run([sys.executable, "-c", PEAK_RSS, str(ed_package), str(times)],
                             capture_output=True, text=True, check=True)  # fmt: skip
        before, after = map(int, run.stdout.split())  # KiB
        peaks[times] = after
    assert peaks[10] <= peaks[1] + 12 * 1024  # KiB: 3,600 more results (~5 MB here)
