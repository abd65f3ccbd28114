"""asyncio access to Translator / Generator: calls run on a worker pool, never on the event loop.

    t = Translator("packages/m30k")
    text = await t.translate_async("A man rides a bike.")
    async for piece in g.stream_async("ROMEO:", max_new_tokens=100): ...

Each object owns a small thread pool (`async_workers` threads, default 1: onnxruntime already
uses every core for one request, so more workers only overlap requests' Python work). The
objects are thread-safe, so the pool may run several calls at once.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from .session import check_threads

T = TypeVar("T")
_END = object()


class _Deferred(Future):
    """A future whose call runs on the thread that first asks for its result (one worker)."""

    def __init__(self, call: Callable[[], Any]):
        super().__init__()
        self._call = call

    def result(self, timeout: float | None = None) -> Any:
        if not self.done() and self.set_running_or_notify_cancel():
            try:
                self.set_result(self._call())
            except BaseException as e:
                self.set_exception(e)
        return super().result(timeout)


class WorkerPool:
    """A lazily started thread pool (no threads until first used: the async calls, and
    Translator.batch_pool's sub-batches)."""

    def __init__(self, workers: int = 1, name: str = "async_workers"):
        check_threads(workers, name)
        self.workers, self._lock = workers, threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="edgeformer")
            return self._pool

    def start(self, fn: Callable[[T], Any], items: list[T]) -> list[Future]:
        """fn over items, a future per item in order. On a pool every item is submitted now;
        with one worker nothing runs until a result is asked for, then on the asking thread."""
        if self.workers == 1:
            return [_Deferred(functools.partial(fn, item)) for item in items]
        pool = self.executor()
        return [pool.submit(fn, item) for item in items]

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs) on the pool, awaited."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor(), functools.partial(fn, *args, **kwargs))

    async def iterate(self, make: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
        """The items of the iterator make() returns, each produced on the pool."""
        it = await self.run(make)
        while True:
            item = await self.run(next, it, _END)
            if item is _END:
                return
            yield item

    def close(self, wait: bool = False) -> None:
        """Stop the threads (wait: until what was submitted has run); the next call starts new."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=wait)
                self._pool = None
