"""Large inputs: translate an iterable or a file in length-sorted sub-batches, in input order;
the batch calls (translate_batch, generate_batch, score_batch) in sub-batches the same way.

As CTranslate2's `translate_iterable` / `translate_file`: read ahead a bounded buffer
(`max_batch_size * READ_AHEAD` examples or tokens), sort it by source length, cut it into
sub-batches of at most `max_batch_size` examples (`batch_type="examples"`) or padded source
tokens (`"tokens"`: rows x longest source in the batch), translate them, and give the results
back in input order. Memory stays bounded by the buffer whatever the input's size.

The batch calls take `max_batch_size` and `batch_type` as CTranslate2's do (`call_batching`),
except that 0, their default, is a bound too (AUTO_BATCH: CTranslate2's 0 is one batch of
everything, whose beams grow the decoder to rows x beams and whose cost grows faster than the
rows past a few hundred): sub-batches sorted by length (`in_sub_batches`), results in input
order, so any input size runs in bounded memory at a cost linear in its size.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from ..core.files import atomic_text
from ..core.progress import Progress, count_lines
from .aio import WorkerPool

BATCH_TYPES = ("examples", "tokens")
MAX_BATCH = 1 << 20  # max_batch_size (examples or tokens) and read_ahead
READ_AHEAD = 16  # buffer = max_batch_size * READ_AHEAD examples (or tokens), sorted by length
# the batch calls' max_batch_size=0: sub-batches of this many examples or padded tokens (the
# file path's defaults)
AUTO_BATCH = {"examples": 32, "tokens": 1024}


@dataclass
class Batching:
    """How an iterable is cut into sub-batches (validated on construction)."""

    max_batch_size: int = 32  # examples, or padded source tokens when batch_type="tokens"
    batch_type: str = "examples"  # "examples" | "tokens"
    read_ahead: int = READ_AHEAD  # buffer = max_batch_size * read_ahead (1: interactive input)

    def __post_init__(self) -> None:
        if self.batch_type not in BATCH_TYPES:
            raise ValueError(f"batch_type={self.batch_type!r}, expected one of {BATCH_TYPES}")
        for name in ("max_batch_size", "read_ahead"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
            if value > MAX_BATCH:
                raise ValueError(f"{name}={value} must be <= {MAX_BATCH}")

    def cost(self, n_rows: int, longest: int) -> int:
        """What a sub-batch of n_rows sources, the longest `longest` tokens, counts against
        max_batch_size."""
        return n_rows if self.batch_type == "examples" else n_rows * longest


@dataclass(frozen=True)
class Pipeline:
    """What translate_stream needs of a translator (Translator._pipeline makes one, with the
    request's options prepared once for every sub-batch)."""

    encode: Callable[[str], list[int]]  # text -> source ids + EOS ([] for empty text);
    #   ValueError (the reason) for a text the model cannot take
    translate: Callable[[list[list[int]]], list[list[int]]]  # sources -> output ids
    decode: Callable[[list[int]], str]  # output ids -> text
    pool: WorkerPool  # runs the sub-batches (inter_threads workers)


@dataclass
class Throughput:
    """What a translate_file / translate_iterable run did (filled as it goes)."""

    sentences: int = 0
    source_tokens: int = 0
    target_tokens: int = 0
    seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter, repr=False)

    @property
    def sentences_per_s(self) -> float:
        return self.sentences / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.target_tokens / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        return (
            f"{self.sentences:,} sentence{'' if self.sentences == 1 else 's'} in "
            f"{self.seconds:.1f} s: "
            f"{self.sentences_per_s:.1f} sentences/s, {self.tokens_per_s:.0f} target tokens/s"
        )


def _sub_batches(lengths: list[int], batching: Batching) -> list[list[int]]:
    """Buffer positions grouped into sub-batches, longest sources first."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches:
            rows = batches[-1]
            longest = lengths[rows[0]]  # sorted: the first row is the longest
            if batching.cost(len(rows) + 1, longest) <= batching.max_batch_size:
                rows.append(i)
                continue
        batches.append([i])
    return batches


def call_batching(max_batch_size: int, batch_type: str) -> Batching:
    """The sub-batches of a batch call (translate_batch, generate_batch, score_batch):
    max_batch_size examples or padded tokens, 0 for AUTO_BATCH's."""
    if isinstance(max_batch_size, int) and not isinstance(max_batch_size, bool):
        if max_batch_size == 0 and batch_type in AUTO_BATCH:
            max_batch_size = AUTO_BATCH[batch_type]
        elif max_batch_size < 0:
            raise ValueError(
                f"max_batch_size={max_batch_size} must be 0 (sub-batches of "
                f"{AUTO_BATCH['examples']} examples) or a positive integer"
            )
    return Batching(max_batch_size, batch_type)


T = TypeVar("T")


def in_sub_batches(
    lengths: Sequence[int], batching: Batching, run: Callable[[list[int]], list[T]]
) -> list[T]:
    """run(positions) per sub-batch of the items whose sizes are `lengths` (tokens), longest
    first; the results in input order. Items that fit one sub-batch run as one, in order."""
    if not lengths:
        return []
    if batching.cost(len(lengths), max(lengths)) <= batching.max_batch_size:
        return run(list(range(len(lengths))))
    out: list[T | None] = [None] * len(lengths)
    for picked in _sub_batches(list(lengths), batching):
        for i, result in zip(picked, run(picked), strict=True):
            out[i] = result
    return out  # type: ignore[return-value]  # every position filled


def _buffers(texts: Iterable[str], batching: Batching) -> Iterator[list[str]]:
    """The input in read-ahead buffers (cost counted on characters for "tokens": a cheap,
    generous bound read before tokenizing)."""
    limit = batching.max_batch_size * batching.read_ahead
    buffer: list[str] = []
    cost = 0
    for text in texts:
        buffer.append(text)
        cost += 1 if batching.batch_type == "examples" else max(1, len(text) // 4)
        if cost >= limit:
            yield buffer
            buffer, cost = [], 0
    if buffer:
        yield buffer


@dataclass
class _Buffer:
    """One read-ahead buffer on its way: its sub-batches (buffer positions) and their futures."""

    size: int
    source_tokens: int
    batches: list[list[int]]
    futures: list[Future]

    def cancel(self) -> None:
        for f in self.futures:
            f.cancel()


def _start_buffer(
    pipeline: Pipeline, buffer: list[str], batching: Batching, name: Callable[[int], str]
) -> _Buffer:
    """Tokenize a buffer (a text the model cannot take is a ValueError `name(i)` names) and
    start its length-sorted sub-batches on the pipeline's pool."""
    sources: list[list[int]] = []
    for i, text in enumerate(buffer):
        try:
            sources.append(pipeline.encode(text))
        except ValueError as e:
            raise ValueError(f"{name(i)}: {e}") from None
    todo = [i for i, s in enumerate(sources) if s]
    batches = [
        [todo[r] for r in rows] for rows in _sub_batches([len(sources[i]) for i in todo], batching)
    ]

    def translate(picked: list[int]) -> list[list[int]]:
        return pipeline.translate([sources[i] for i in picked])

    futures = pipeline.pool.start(translate, batches)
    return _Buffer(len(buffer), sum(map(len, sources)), batches, futures)


def translate_stream(
    pipeline: Pipeline,
    texts: Iterable[str],
    batching: Batching,
    stats: Throughput | None = None,
    what: str = "texts",
    first_number: int = 0,
) -> Iterator[str]:
    """Translations of `texts` in input order ('' for an empty text). A text the model cannot
    take is a ValueError naming it: f"{what}[i]" (first_number=0) or "line n" (1).

    With several workers (`inter_threads`) and read-ahead, the next buffer is read, tokenized
    and started before the last one's results are given, so that the workers never wait for
    the reader nor for each other at the end of a buffer (both cost 3-6 % of the time with 2
    workers): results then come one buffer later, and at most two buffers are held."""
    stats = stats if stats is not None else Throughput()
    overlap = pipeline.pool.workers > 1 and batching.read_ahead > 1
    pending: deque[_Buffer] = deque()
    number = first_number

    def name(i: int) -> str:
        return f"line {number + i}" if first_number else f"{what}[{number + i}]"

    def finish(b: _Buffer) -> list[str]:
        out = [""] * b.size
        try:
            for picked, future in zip(b.batches, b.futures):
                for i, ids in zip(picked, future.result()):
                    out[i] = pipeline.decode(ids)
                    stats.target_tokens += len(ids)
        except BaseException:
            b.cancel()  # its sub-batches not yet started
            raise
        stats.sentences += b.size
        stats.source_tokens += b.source_tokens
        stats.seconds = time.perf_counter() - stats.started
        return out

    try:
        for buffer in _buffers(texts, batching):
            pending.append(_start_buffer(pipeline, buffer, batching, name))
            number += len(buffer)
            if len(pending) > (1 if overlap else 0):
                yield from finish(pending.popleft())
        while pending:
            yield from finish(pending.popleft())
    finally:  # an error, or a consumer that stopped early: nothing left running
        for b in pending:
            b.cancel()


def read_lines(path: str | os.PathLike) -> Iterator[str]:
    """A text file's lines (UTF-8, without their line ending), read lazily; a line that is not
    UTF-8 is a ValueError naming it."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            raw = raw.rstrip(b"\n")
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{path}: line {n}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at byte "
                    f"{e.start + 1})"
                ) from None


def translate_file(
    pipeline: Pipeline,
    src_path: str | os.PathLike,
    out_path: str | os.PathLike,
    batching: Batching,
    progress: bool | None = None,
) -> Throughput:
    """Translate a file line by line into out_path (written whole or not at all: a temporary
    file renamed at the end). progress (core.progress): None = a live line on a terminal, a
    line every 30 s elsewhere; True = that and a summary at the end; False = nothing."""
    src, out = Path(src_path), Path(out_path)
    if not src.is_file():
        raise FileNotFoundError(f"source file {src} does not exist")
    if out.resolve() == src.resolve():
        raise ValueError(f"output file {out} is the source file")
    total = None if progress is False else count_lines(src)
    bar = Progress(f"translate {src.name}", total, "sentences", quiet=progress is False)
    stats = Throughput()
    with atomic_text(out) as f:
        for text in translate_stream(pipeline, read_lines(src), batching, stats, "", 1):
            f.write(text + "\n")
            bar.advance()
            bar.note(f"{stats.sentences_per_s:.0f} sentences/s")
    bar.close()
    if progress:
        print(stats.summary(), file=sys.stderr)
    return stats
