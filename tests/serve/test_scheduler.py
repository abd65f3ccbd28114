"""Continuous batching and prefix caching, under the HTTP layer: outputs equal the same
requests run alone (Generator), rows join and leave between steps, prefixes are reused."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from edgeformer.runtime import Generator
from edgeformer.runtime.serve.engine import ServedLM
from edgeformer.runtime.serve.prefix_cache import PrefixCache
from edgeformer.runtime.serve.scheduler import BatchSettings

PROMPTS = ["ROMEO:", "JULIET: O Romeo, Romeo, wherefore", "First Citizen:\nBefore we proceed",
           "KING", "Hark! what light", "A"]  # fmt: skip


@pytest.fixture(scope="module")
def generator():
    return Generator("shakespeare", threads=1)


def served_lm(generator, **settings) -> ServedLM:
    return ServedLM("shakespeare", generator, BatchSettings(**settings))


def complete(lm: ServedLM, prompt: str, body: dict, stop: threading.Event | None = None):
    """(text, finish_reason, cached prompt tokens) of one choice through the scheduler."""
    req = lm.prepare(body, "completion", lm.completion_prompts(prompt), "prompt")
    pieces = list(lm.run(req, 0, stop or threading.Event()))
    return "".join(p.text for p in pieces), pieces[-1].finish_reason, pieces[-1].cached_tokens


def concurrently(lm: ServedLM, prompts: list[str], bodies: list[dict]) -> list:
    """complete() of each prompt, all at once (one thread each, released together)."""
    out: list = [None] * len(prompts)
    go = threading.Barrier(len(prompts))

    def run(i: int) -> None:
        go.wait()
        out[i] = complete(lm, prompts[i], bodies[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


def test_greedy_batched_equals_alone(generator):
    """Six prompts of different lengths on 4 rows: two wait for a row and join when one
    leaves, while the others decode (different max_tokens: rows leave at different steps)."""
    lm = served_lm(generator, max_batch=4, prefix_cache_mb=0)
    try:
        bodies = [{"max_tokens": 12 + 5 * i, "temperature": 0} for i in range(len(PROMPTS))]
        got = concurrently(lm, PROMPTS, bodies)
        alone = [generator.generate(p, max_new_tokens=b["max_tokens"])
                 for p, b in zip(PROMPTS, bodies)]  # fmt: skip
        assert [g[0] for g in got] == alone
        assert all(g[1] == "length" for g in got)
        c = lm.scheduler.counters
        assert c.admitted == len(PROMPTS)
        assert c.stepped_rows / c.steps > 1.5, "the rows did not share steps"
        assert lm.scheduler.running == 0
    finally:
        lm.close()


def test_sampling_with_a_seed_equals_alone(generator):
    lm = served_lm(generator, max_batch=3)
    try:
        bodies = [{"max_tokens": 20, "temperature": 0.8, "top_p": 0.9, "seed": 7 + i}
                  for i in range(3)]  # fmt: skip
        got = concurrently(lm, PROMPTS[:3], bodies)
        alone = [
            generator.generate(p, max_new_tokens=20, sampling=True, temperature=0.8, top_p=0.9,
                               seed=7 + i)
            for i, p in enumerate(PROMPTS[:3])
        ]  # fmt: skip
        assert [g[0] for g in got] == alone
    finally:
        lm.close()


def test_stop_strings_and_logit_rules_per_row(generator):
    """A stop string ends one row (finish_reason stop, text cut before it), a repetition
    penalty another: each as the same request alone."""
    lm = served_lm(generator, max_batch=2)
    try:
        bodies = [{"max_tokens": 40, "temperature": 0, "stop": ["the"]},
                  {"max_tokens": 30, "temperature": 0, "repetition_penalty": 1.3}]  # fmt: skip
        got = concurrently(lm, PROMPTS[:2], bodies)
        assert got[0][0] == generator.generate(PROMPTS[0], max_new_tokens=40, stop=["the"])
        assert got[0][1] == "stop" and "the" not in got[0][0]
        assert got[1][0] == generator.generate(PROMPTS[1], max_new_tokens=30,
                                               repetition_penalty=1.3)  # fmt: skip
    finally:
        lm.close()


def test_prefix_cache_reuses_the_previous_turn(generator):
    """The next turn starts with the previous prompt + reply: only its new tokens are
    prefilled, and the reply equals the one without the cache."""
    with_cache, without = served_lm(generator, prefix_cache_mb=4), served_lm(
        generator, prefix_cache_mb=0)  # fmt: skip
    try:
        body = {"max_tokens": 10, "temperature": 0}
        turn1 = "ROMEO: Is the day so young?"
        reply, _, cached = complete(with_cache, turn1, body)
        assert cached == 0
        turn2 = turn1 + reply + "\nJULIET: Ay, and"
        before = with_cache.scheduler.counters.prefilled_tokens
        again, _, cached = complete(with_cache, turn2, body)
        n1 = len(generator.prompt_ids(turn1)) + 10 - 1  # its prompt and the fed replies
        n2 = len(generator.prompt_ids(turn2))
        assert cached >= n1 - 1 and cached < n2
        assert with_cache.scheduler.counters.prefilled_tokens - before == n2 - cached
        assert again == complete(without, turn2, body)[0] == generator.generate(
            turn2, max_new_tokens=10)  # fmt: skip
        assert without.scheduler.counters.cached_tokens == 0
    finally:
        with_cache.close()
        without.close()


def test_prefix_cache_is_bounded_and_evicts_lru():
    cache = {"k": np.zeros((1, 10, 4), np.float32)}  # 160 bytes per 10 tokens
    pc = PrefixCache(max_bytes=400)
    pc.add(list(range(10)), cache)
    pc.add(list(range(100, 110)), cache)
    assert pc.lookup(list(range(5)) + [9])[1] == 5  # shares 5 tokens: entry 1 used last
    pc.add(list(range(200, 210)), cache)  # over 400 bytes: the least recently used goes
    assert pc.nbytes <= 400 and pc.evicted == 1
    assert pc.lookup(list(range(100, 105)))[1] == 0  # the evicted one
    assert pc.lookup(list(range(12)))[1] == 10
    pc.add(list(range(12)), {"k": np.zeros((1, 12, 4), np.float32)})  # extends entry 1
    assert len(pc.entries) == 2
    assert pc.lookup([0, 1])[1] == 1  # the last prompt token is always fed


def test_a_cancelled_request_frees_its_row(generator):
    lm = served_lm(generator, max_batch=1)
    try:
        stop = threading.Event()
        req = lm.prepare({"max_tokens": 50, "temperature": 0}, "completion",
                         lm.completion_prompts("ROMEO:"), "prompt")  # fmt: skip
        found = lm.run(req, 0, stop)
        next(found)
        assert lm.scheduler.running == 1
        stop.set()
        rest = list(found)
        assert len(rest) <= 1  # at most the step in flight, then no final piece
        deadline = time.monotonic() + 5
        while lm.scheduler.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lm.scheduler.running == 0
        # the one row is free: the next request runs
        assert complete(lm, "KING", {"max_tokens": 5, "temperature": 0})[1] == "length"
    finally:
        lm.close()


def test_requests_past_the_waiting_limit_are_refused(generator):
    """One row, no waiting: a second request while the first decodes is Busy (HTTP 503)."""
    from edgeformer.runtime.serve.scheduler import Busy

    lm = served_lm(generator, max_batch=1, max_waiting=0)
    try:
        req = lm.prepare({"max_tokens": 30, "temperature": 0}, "completion",
                         lm.completion_prompts("ROMEO:"), "prompt")  # fmt: skip
        first = lm.run(req, 0, threading.Event())
        next(first)  # it holds the one row
        with pytest.raises(Busy):
            next(lm.run(req, 0, threading.Event()))
        first.close()
        assert complete(lm, "KING", {"max_tokens": 3, "temperature": 0})[1] == "length"
    finally:
        lm.close()


def test_prefix_cache_entries_are_bounded_in_number_too():
    pc = PrefixCache(max_bytes=1 << 20, max_entries=3)
    for i in range(5):
        pc.add([100 * i, 1, 2], {"k": np.zeros((1, 3, 4), np.float32)})
    assert len(pc.entries) == 3 and pc.evicted == 2
    assert pc.lookup([0, 1, 2, 3])[1] == 0 and pc.lookup([400, 1, 2, 3])[1] == 3


def test_truncate_keeps_the_end_of_a_long_prompt(generator):
    lm = ServedLM("shakespeare", generator, BatchSettings(context=40), truncate=True)
    try:
        text = "ROMEO: " * 20  # 140 characters: past the model's 64 positions and the 40
        got, finish, _ = complete(lm, text, {"max_tokens": 1, "temperature": 0})
        assert finish == "length"
        assert got == generator.generate(text[-40:], max_new_tokens=1)
    finally:
        lm.close()


# ---- translators: a row per text ------------------------------------------------------------

SOURCES = ["A man is riding a bike.", "Two dogs play in the snow.", "A woman.",
           "A little girl in a pink dress is climbing the stairs of a wooden house.",
           "People walk.", "A boy jumps into a lake from a rock."]  # fmt: skip


@pytest.fixture(scope="module")
def translator():
    from edgeformer.runtime import Translator

    return Translator("m30k-en-de", threads=1)


def test_translations_share_the_batch_and_equal_alone(translator):
    """Six sources of different lengths on 4 rows, each with its own max_tokens: each text a
    row, rows joining and leaving between steps, the cross K/V padded to the longest source in
    the batch; greedy outputs equal each text translated alone."""
    from edgeformer.runtime.serve.engine import ServedTranslator

    served = ServedTranslator("m30k-en-de", translator, BatchSettings(max_batch=4))
    try:
        out: list = [None] * len(SOURCES)
        go = threading.Barrier(len(SOURCES))

        def run(i: int) -> None:
            req = served.prepare({"input": SOURCES[i], "max_tokens": 6 + 3 * i})
            go.wait()
            out[i] = served.translate(req)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(SOURCES))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        alone = [translator.translate(s, max_new_tokens=6 + 3 * i) for i, s in enumerate(SOURCES)]
        assert [o[0][0] for o in out] == alone
        assert [o[1] for o in out] == [len(translator.source_ids(s)) for s in SOURCES]
        c = served.scheduler.counters
        assert c.admitted == len(SOURCES) and c.stepped_rows / c.steps > 1.5
        assert served.scheduler.running == 0
        # several texts of one request: rows of the same batch; beam search: its own batch
        several = [*SOURCES[:3], " ", SOURCES[3]]  # an empty text translates to ''
        texts, _, _ = served.translate(served.prepare({"input": several, "stop": ["."]}))
        assert texts == translator.translate_batch(several, stop=["."]) and texts[3] == ""
        beams = served.prepare({"input": SOURCES[:2], "num_beams": 3})
        admitted = c.admitted
        assert served.translate(beams)[0] == translator.translate_batch(SOURCES[:2], num_beams=3)
        assert c.admitted == admitted
    finally:
        served.close()
