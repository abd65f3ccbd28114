"""Continuous batching: the requests to one model share its decoder's steps.

One CachedDecoder of `max_batch` rows (runtime/steppers.py) holds every running request's KV
cache, a row each, rows at different positions (the step graph takes each row's length). A
request joins between two steps: its prompt is prefilled on a one-row decoder (after the part a
PrefixCache already holds), and that row's cache is copied into the batch (`admit`); it leaves
when its decoding ends (`select` keeps the others), leaving its cache to the prefix cache.

Each request decodes on its own thread with core.decoding.steps, the loop every caller runs
(bans, penalties, stop tests, greedy or sampling: core/constraints.py, core/decoding.py), over a
`Row`: a one-row decoding.Stepper whose `step` hands its token to this scheduler and waits for
the batch's next step. The scheduler's thread runs the graph: once every row in the batch has
handed over its next token (or left), one step for all of them. So a request's tokens are
those of the same request run alone; only the step's logits are computed in a batch.

A translator's batch is the same, a row per text: the text's source is encoded and its first
(BOS) step run on a one-row decoder (start_encoder_decoder), then that row's cache and its
cross K/V join the batch, the cross K/V of all rows zero-padded to the longest source
(steppers.stack_static, as one batch's right-padded sources are); no prefix cache.
"""

from __future__ import annotations

import collections.abc as abc
import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from ...core.decoding import DecodeInputs, GenerationOptions, Step, steps
from ..model import Model
from ..steppers import (
    CachedDecoder,
    give_back,
    stack_static,
    start_encoder_decoder,
    take_decoder,
)
from .prefix_cache import PrefixCache

DEFAULT_CONTEXT = 4096  # a long-context model's rows do not each reserve its whole context


@dataclass(frozen=True)
class BatchSettings:
    """How a language model is served (edgeformer serve's flags)."""

    max_batch: int = 16  # rows decoding at once; later requests wait for a free row
    context: int = 0  # cache positions per row (0: the model's max_len, at most DEFAULT_CONTEXT)
    prefix_cache_mb: float = 256.0  # K/V kept for prefix caching (0: off)
    max_waiting: int = 256  # requests waiting for a row; more are refused (HTTP 503)

    def __post_init__(self) -> None:
        if not 1 <= self.max_batch <= 1024:
            raise ValueError(f"max_batch={self.max_batch} must be in [1, 1024]")
        if self.context < 0:
            raise ValueError(f"context={self.context} must be >= 0 (0: the model's max_len)")
        if self.prefix_cache_mb < 0:
            raise ValueError(f"prefix_cache_mb={self.prefix_cache_mb} must be >= 0")
        if self.max_waiting < 0:
            raise ValueError(f"max_waiting={self.max_waiting} must be >= 0")


class Busy(RuntimeError):
    """Too many requests wait for a row (the server answers 503)."""


class Cancelled(RuntimeError):
    """The request went away before it had a row."""


class Row:
    """One request's row of the shared batch: a one-row decoding.Stepper."""

    def __init__(self, scheduler: BatchScheduler, prompt: list[int]):
        self.scheduler = scheduler
        self.prompt = prompt  # a translator's: the source ids
        self.static: dict[str, np.ndarray] = {}  # a translator's: its cross K/V, source length
        self.fed = list(prompt)  # the tokens in its cache (what the prefix cache keeps)
        self.token: int | None = None  # its next token, handed over for the next step
        self.logits: np.ndarray | None = None  # (1, V): its last step's, for decoding
        self.raw: np.ndarray | None = None  # the same as the model gave them (logprobs)
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.left = False
        self.cached = 0  # prompt tokens whose cache came from the prefix cache

    def step(self, tokens: np.ndarray) -> np.ndarray:  # (1,) -> (1, V)
        return self.scheduler.step(self, int(tokens[0]))

    def select(self, rows: np.ndarray) -> None:
        if np.asarray(rows).tolist() != [0]:  # steps() selects only among its rows: one
            raise ValueError("a served request decodes one row")

    def wait(self) -> np.ndarray:
        self.ready.wait()
        if self.error is not None:
            raise self.error
        assert self.logits is not None
        return self.logits


@dataclass
class Counters:
    """What the scheduler has done (the server's /metrics)."""

    steps: int = 0  # batched decoder steps
    stepped_rows: int = 0  # rows over all steps (/ steps: the mean batch)
    prefilled_tokens: int = 0  # prompt tokens run through the graph
    cached_tokens: int = 0  # prompt tokens whose cache came from the prefix cache
    admitted: int = 0
    step_seconds: float = 0.0  # in the batch's decoder steps


class BatchScheduler:
    """The continuous batch of one Model (see the module's docstring)."""

    def __init__(self, model: Model, settings: BatchSettings = BatchSettings()):
        self.model, self.settings = model, settings
        self.translator = model.family == "encoder-decoder"
        self.graph, cfg = model.graphs["decoder"], model.config
        self.capacity = min(model.max_len, settings.context or DEFAULT_CONTEXT)
        m = cfg.model
        self.batch = CachedDecoder(
            self.graph, cfg.family, m.n_decoder_layers, m.kv_heads, m.head_dim, self.capacity,
            settings.max_batch,
        )  # fmt: skip
        self.batch.empty()
        cached = 0 if self.translator else settings.prefix_cache_mb  # sources share no prefix
        self.prefix = PrefixCache(int(cached * 2**20))
        self.rows: list[Row] = []  # row i of self.batch
        self.waiting: deque[Row] = deque()
        self.cond = threading.Condition()
        self.counters = Counters()
        self.closed = False
        self.thread = threading.Thread(target=self._loop, name="edgeformer-batch", daemon=True)
        self.thread.start()

    # -- the requests' side (their threads) ------------------------------------------------
    def join(
        self, prompt: list[int], stop: threading.Event | None = None
    ) -> tuple[Row, np.ndarray]:
        """A row for `prompt` once the batch has room: (the row, logits after the prompt).
        `stop` set while it waits: Cancelled (its place in the queue is given up)."""
        if not 0 < len(prompt) <= self.capacity:
            raise ValueError(f"prompt of {len(prompt)} tokens: must be 1 .. {self.capacity}")
        row = Row(self, list(prompt))
        with self.cond:
            if self.closed:
                raise Busy("the server is shutting down")
            limit = self.settings.max_waiting
            free = self.settings.max_batch - sum(not r.left for r in self.rows)
            if len(self.waiting) - free >= limit:  # it would wait, and the queue is full
                raise Busy(f"all {self.settings.max_batch} rows are busy and {len(self.waiting)} "
                           f"requests wait for one (at most {limit} may)")  # fmt: skip
            self.waiting.append(row)
            self.cond.notify_all()
        while not row.ready.wait(0.05):
            if stop is not None and stop.is_set():
                self.leave(row)
                raise Cancelled("the request was cancelled while it waited for a row")
        return row, row.wait()

    def step(self, row: Row, token: int) -> np.ndarray:
        """Hand over `row`'s next token; its logits after the batch's next step."""
        with self.cond:
            row.ready.clear()
            row.token = token
            self.cond.notify_all()
        logits = row.wait()
        row.fed.append(token)
        return logits

    def leave(self, row: Row) -> None:
        """`row`'s request is over (ended, or its client went away): its row is freed."""
        with self.cond:
            if row in self.waiting:
                self.waiting.remove(row)
            row.left = True
            self.cond.notify_all()

    def decode(
        self, prompt: list[int], opts: GenerationOptions, inputs: DecodeInputs,
        stop: threading.Event | None = None,
    ) -> abc.Generator[tuple[Step, np.ndarray, Row], None, None]:  # fmt: skip
        """core.decoding.steps for one prompt (a translator's: source) in the batch: (step,
        the logits it chose from
        as the model gave them, the row). The row is freed when the loop ends, when `stop`
        is set (checked at each step) or when the caller closes the iterator."""
        try:
            row, first = self.join(prompt, stop)
        except Cancelled:
            return
        try:
            for s in steps(first, row, opts, inputs):
                assert row.raw is not None
                yield s, row.raw, row
                if stop is not None and stop.is_set():
                    return
        finally:
            self.leave(row)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.thread.join(timeout=10)

    @property
    def queue_depth(self) -> int:
        return len(self.waiting)

    @property
    def running(self) -> int:
        return len(self.rows)

    # -- the scheduler's thread ------------------------------------------------------------
    def _work(self) -> bool:
        """Something to do: a row left, a waiting request fits, or every row is ready."""
        if self.closed or any(r.left for r in self.rows):
            return True
        if self.waiting and len(self.rows) < self.settings.max_batch:
            return True
        return bool(self.rows) and all(r.token is not None for r in self.rows)

    def _loop(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(self._work)
                if self.closed:
                    self._fail(self.rows + list(self.waiting), Busy("the server shut down"))
                    return
                leaving = [i for i, r in enumerate(self.rows) if r.left]
                free = self.settings.max_batch - len(self.rows) + len(leaving)
                joining = [self.waiting.popleft() for _ in range(min(free, len(self.waiting)))]
            try:
                if leaving:
                    self._drop(leaving)
                if self.rows and all(r.token is not None for r in self.rows):
                    self._step()
                for row in joining:
                    self._admit(row)
            except Exception as e:  # the graph failed: every request in the batch gets it
                self._fail(self.rows + joining, e)
                self.rows = []
                self.batch.empty()

    def _fail(self, rows: list[Row], error: BaseException) -> None:
        for r in rows:
            r.error = error
            r.ready.set()

    def _drop(self, leaving: list[int]) -> None:
        """Free the rows that left; their caches go to the prefix cache."""
        for i in leaving:
            row = self.rows[i]
            if self.prefix.max_bytes > 0 and len(row.fed) == int(self.batch.lengths[i]):
                self.prefix.add(row.fed, self.batch.row_cache(i))
        gone = set(leaving)
        keep = [i for i in range(len(self.rows)) if i not in gone]
        self.rows = [self.rows[i] for i in keep]
        if keep:
            self.batch.select(np.asarray(keep))
        else:
            self.batch.empty()

    def _step(self) -> None:
        """One decoder step for every row: each gets its row of the logits."""
        tokens = np.array([r.token for r in self.rows], dtype=np.int64)
        start = time.perf_counter()
        logits = self.batch.step(tokens)  # (N, V)
        c = self.counters
        c.steps, c.stepped_rows = c.steps + 1, c.stepped_rows + len(tokens)
        c.step_seconds += time.perf_counter() - start
        for i, r in enumerate(self.rows):
            r.token = None
            r.logits = logits[i : i + 1].copy()  # decoding changes it in place (bans)
            r.raw = logits[i : i + 1]  # unchanged until this row's next step
            r.ready.set()

    def _admit(self, row: Row) -> None:
        """Prefill `row`'s prompt after its cached prefix (a translator's: encode its source,
        run its first step) and put it in the batch."""
        if row.left:  # its client went away while it waited
            return
        if self.translator:
            self._admit_source(row)
            return
        prompt = row.prompt
        entry, k = self.prefix.lookup(prompt)
        one = take_decoder(self.graph, self.model.config, self.capacity, 1)
        if entry is not None:
            one.load_row(0, entry.cache, k)
        ids = np.asarray([prompt[k:]], dtype=np.int64)
        positions = np.arange(k, len(prompt), dtype=np.int64)[None, :]
        logits = one.run(ids, positions, np.array([len(prompt)], dtype=np.int64)).copy()
        self.batch.admit({n: b[0] for n, b in one.buffers.items()}, len(prompt))
        give_back(one)
        c = self.counters
        c.prefilled_tokens += len(prompt) - k
        c.cached_tokens += k
        c.admitted += 1
        row.cached, row.logits, row.raw = k, logits, logits.copy()
        self.rows.append(row)
        row.ready.set()

    def _admit_source(self, row: Row) -> None:
        """A translation's row: its source encoded and its BOS step run on a one-row decoder,
        whose cache (one position) and cross K/V join the batch."""
        m = self.model
        src = np.asarray([row.prompt], dtype=np.int64)
        one, logits = start_encoder_decoder(m.graphs, m.config, src, np.ones_like(src),
                                            self.capacity)  # fmt: skip
        row.static = dict(one.static)  # its own arrays: a reused decoder binds new ones
        self.batch.set_static(stack_static([r.static for r in self.rows] + [row.static]))
        self.batch.admit({n: b[0] for n, b in one.buffers.items()}, 1)
        give_back(one)
        c = self.counters
        c.prefilled_tokens += len(row.prompt)
        c.admitted += 1
        row.fed = [m.bos_id]
        row.logits, row.raw = logits, logits.copy()
        self.rows.append(row)
        row.ready.set()
