"""The *_async methods: same results as the blocking calls, the event loop stays free."""

from __future__ import annotations

import asyncio
import threading

import pytest

from edgeformer.runtime import Generator, Translator
from edgeformer.runtime.model import make_options


def test_async_calls_equal_blocking_ones_and_never_block_the_loop(ed_package, lm_package):
    t, g = Translator(ed_package, threads=1), Generator(lm_package, threads=1)
    loop_thread: list[int] = []
    ticks = 0

    async def ticker(stop: asyncio.Event) -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    async def main():
        loop_thread.append(threading.get_ident())
        stop = asyncio.Event()
        tick = asyncio.create_task(ticker(stop))
        one = await t.translate_async("two dogs .", max_new_tokens=8)
        many = await asyncio.gather(
            t.translate_batch_async(["a man .", "a dog ."], max_new_tokens=8),
            g.generate_async("a", max_new_tokens=8, sampling=True, seed=1),
        )
        results = await g.generate_results_async(["a"], max_new_tokens=5)
        pieces = [p async for p in g.stream_async("a", max_new_tokens=8)]
        tpieces = [p async for p in t.stream_async("two dogs .", max_new_tokens=8)]
        stop.set()
        await tick
        return one, many, results, pieces, tpieces

    one, (batch, sampled), results, pieces, tpieces = asyncio.run(main())
    assert one == t.translate("two dogs .", max_new_tokens=8)
    assert batch == t.translate_batch(["a man .", "a dog ."], max_new_tokens=8)
    assert sampled == g.generate("a", max_new_tokens=8, sampling=True, seed=1)
    assert results[0].text == g.generate("a", max_new_tokens=5)
    assert "".join(pieces) == g.generate("a", max_new_tokens=8)
    assert "".join(tpieces) == t.translate("two dogs .", max_new_tokens=8)
    assert ticks > 0  # the loop ran other tasks while the model worked


def test_async_errors_surface_and_workers_are_checked(ed_package):
    t = Translator(ed_package, threads=1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        asyncio.run(t.translate_async("a", max_new_tokens=0))
    with pytest.raises(ValueError, match="async_workers"):
        Translator(ed_package, async_workers=0)


def test_sliding_window_goes_on_past_the_context_as_explicit_windows(lm_package):
    """Greedy with sliding_window equals generating segment by segment, each prompt being
    the last max_len // 2 tokens so far (batch 1); without it the output stops at the context."""
    g = Generator(lm_package, threads=1)
    L, keep = g.max_len, g.max_len // 2
    prompt = g.prompt_ids("two dogs")
    total = 2 * L + 5
    opts = dict(max_new_tokens=total, ignore_eos=True)
    got = g.generate_ids([prompt], make_options(sliding_window=True, **opts))[0]
    assert len(got) == total
    want: list[int] = []
    context = list(prompt)
    while len(want) < total:
        n = min(total - len(want), L - len(context) + 1)
        new = g.generate_ids([context], make_options(max_new_tokens=n, ignore_eos=True))[0]
        want += new
        context = (context + new)[-keep:]
    assert got == want
    with pytest.warns(UserWarning, match="sliding_window=True"):
        cut = Generator(lm_package, threads=1).generate_ids([prompt], make_options(**opts))[0]
    assert len(cut) == L - len(prompt) + 1
    pieces = list(g.stream("two dogs", max_new_tokens=total, sliding_window=True, ignore_eos=True))
    assert "".join(pieces) == g.generate("two dogs", **opts, sliding_window=True)
    beams = g.generate_batch(
        ["two", "a b c"], max_new_tokens=L + 3, num_beams=2, sliding_window=True
    )
    assert len(beams) == 2
