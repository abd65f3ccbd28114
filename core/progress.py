"""Progress of long steps: a live bar on a terminal, a plain line every 30 s in a log.

    progress = Progress("epoch 3/40", total=466, unit="batches")
    for batch in progress.iterate(batches):
        ...
        progress.note(f"loss {loss:.3f}")
    progress.close()

On a terminal (stderr) it is a tqdm bar when tqdm is installed (the `train` extra), else one
line rewritten in place; elsewhere (a log file, CI) a line such as
`epoch 3/40: 210/466 batches (45%), 1 min 2 s, loss 4.102` at most every EVERY_S seconds, so
that a long step is never silent for minutes. quiet=True shows nothing. `finish()` closes the
bar and, on a terminal, prints one summary line (count, time, rate:
`translate: 4,000 sentences in 23 s, 174 sentences/s`); a pipe or a log gets no summary from it
(the command's own output stays what a script reads).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, TypeVar

T = TypeVar("T")
EVERY_S = 30.0  # seconds between progress lines when stderr is not a terminal


def duration(seconds: float) -> str:
    """`42 s`, `3 min 5 s`, `1 h 2 min`."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class Progress:
    """One long step's progress (see the module docstring)."""

    def __init__(
        self,
        label: str,
        total: int | None = None,
        unit: str = "",
        quiet: bool = False,
        stream: TextIO | None = None,
        every: float = EVERY_S,
    ):
        self.label, self.total, self.unit, self.every = label, total, unit, every
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.count, self.text = 0, ""
        self.started = self.last = time.perf_counter()
        self.terminal = not quiet and is_terminal(self.stream)
        self.bar: Any = None
        if self.terminal:
            try:
                from tqdm import tqdm

                # " sentences": tqdm writes the unit right after the count ("513 sentences")
                self.bar = tqdm(total=total, desc=label, unit=f" {unit}" if unit else "it",
                                leave=False, dynamic_ncols=True, file=self.stream)  # fmt: skip
            except ImportError:
                self.bar = None

    def iterate(self, items: Iterable[T]) -> Iterator[T]:
        for item in items:
            yield item
            self.advance()

    def advance(self, n: int = 1) -> None:
        self.count += n
        if self.bar is not None:
            self.bar.update(n)
        else:
            self._show()

    def note(self, text: str) -> None:
        """A short status shown after the count (the loss, a rate)."""
        self.text = text
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)

    def line(self) -> str:
        done = f"{self.count:,}"
        if self.total:
            done += f"/{self.total:,}"
        done += f" {self.unit}" if self.unit else ""
        if self.total:
            done += f" ({100 * self.count / self.total:.0f}%)"
        elapsed = duration(time.perf_counter() - self.started)
        return f"{self.label}: {done}, {elapsed}" + (f", {self.text}" if self.text else "")

    def _show(self, force: bool = False) -> None:
        if self.quiet:
            return
        now = time.perf_counter()
        if self.terminal:  # no tqdm: one line rewritten in place, twice a second at most
            if force or now - self.last >= 0.5:
                self.last = now
                self.stream.write("\r" + self.line())
                self.stream.flush()
        elif now - self.last >= self.every:
            self.last = now
            print(self.line(), file=self.stream, flush=True)

    def summary(self) -> str:
        """`LABEL: 4,000 sentences in 23 s, 174 sentences/s`."""
        seconds = time.perf_counter() - self.started
        unit = self.unit or "items"
        rate = f", {self.count / seconds:,.1f} {unit}/s" if seconds > 0 else ""
        return f"{self.label}: {self.count:,} {unit} in {duration(seconds)}{rate}"

    def finish(self) -> None:
        """close(), then the summary line when the stream is a terminal."""
        self.close()
        if self.terminal:
            print(self.summary(), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.terminal:
            self.stream.write("\r\033[K")
            self.stream.flush()


def count_lines(path: str | os.PathLike) -> int:
    """The lines of a file (a last line without a newline counted): a bar's total."""
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            n, last = n + chunk.count(b"\n"), chunk[-1:]
    return n + (last != b"\n")


def is_terminal(stream: TextIO) -> bool:
    """Whether `stream` is a terminal (a closed or replaced stream is not)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
