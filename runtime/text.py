"""Text in and out: input checks that name the bad item, stop strings, streaming detokenization."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from ..core.decoding import StopTest
from ..core.format import TOKENIZER_FILE
from .tokenizer import guarded


def cut_at_stop(text: str, stops: Sequence[str], start: int = 0) -> str:
    """`text` up to the first stop string found at or after `start` (whole text if none)."""
    found = [i for i in (text.find(s, start) for s in stops) if i >= 0]
    return text[: min(found)] if found else text


def stop_test(decode, stops: Sequence[str], bases: list[list[int]], skip: list[int]) -> StopTest:
    """stop(row, tokens): the text that tokens[skip[row]:] add after bases[row] + the skipped
    tokens (a prompt, a target prefix) contains a stop string."""
    shown: dict[tuple[int, int], int] = {}

    def stop(row: int, tokens: list[int]) -> bool:
        base = bases[row] + tokens[: skip[row]]
        key = (row, len(tokens[: skip[row]]))
        if key not in shown:
            shown[key] = len(decode(base))
        text = decode(base + tokens[skip[row] :])[shown[key] :]
        return any(s in text for s in stops)

    return stop


def prefix_list(value: object, n: int) -> list[object]:
    """target_prefix: None, or a list aligned with the batch (None / text / id list per item)."""
    if value is None:
        return [None] * n
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ValueError(
            f"target_prefix must be a list aligned with the inputs (got {type(value).__name__})"
        )
    if len(value) != n:
        raise ValueError(f"target_prefix has {len(value)} items for {n} inputs")
    return list(value)


def check_texts(texts: object, what: str) -> list[str]:
    """A list of strings; a bare string is an error, not one request per character.

    Every item is checked (a string, encodable as UTF-8: no lone surrogates); the error names
    the first bad item's index.
    """
    if isinstance(texts, (str, bytes, bytearray)):
        raise ValueError(f"{what} must be a list of strings (got {type(texts).__name__})")
    try:
        items = list(texts)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(f"{what} must be a list of strings (got {type(texts).__name__})") from None
    for i, text in enumerate(items):
        problem = text_problem(text)
        if problem:
            raise ValueError(f"{what}[{i}]: {problem}")
    return items


def text_problem(text: object) -> str | None:
    """Why `text` cannot be tokenized (not a string, a lone surrogate), or None."""
    if not isinstance(text, str):
        return f"must be a string (got {type(text).__name__})"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return (
            f"not valid Unicode text: lone surrogate U+{ord(text[e.start]):04X} "
            f"at character {e.start + 1}"
        )
    return None


class StopCut:
    """Streamed text with stop strings cut: push each new piece, get what may be shown now. Text
    that may begin a stop string is held back until it cannot (or the stream ends)."""

    def __init__(self, stops: Sequence[str]):
        self.stops, self.pending, self.stopped = list(stops), "", False

    def push(self, piece: str, final: bool = False) -> str:
        """The text to show now; `stopped` is set once a stop string is reached."""
        self.pending += piece
        cut = cut_at_stop(self.pending, self.stops)
        if len(cut) < len(self.pending):
            self.pending, self.stopped = "", True
            return cut
        pending = self.pending
        hold = 0 if final else max(
            (k for s in self.stops for k in range(1, min(len(s), len(pending) + 1))
             if pending.endswith(s[:k])), default=0,
        )  # fmt: skip
        out, self.pending = pending[: len(pending) - hold], pending[len(pending) - hold :]
        return out


class TextStream:
    """Incremental detokenization: push token ids, get the text they add.

    The `tokenizers` library's DecodeStream, prefilled with the context (the prompt: the first
    piece then keeps its leading space); it holds back a character split over tokens until it
    completes. flush() gives what it still holds at the end (then as tokenizer.decode shows it),
    so that the pieces always concatenate to decode(context + ids) minus decode(context).
    """

    def __init__(self, tokenizer: Tokenizer, context: list[int] | None = None):
        self.tokenizer, self.context = tokenizer, list(context or [])
        self.ids: list[int] = []
        self.stream = DecodeStream(ids=self.context, skip_special_tokens=True)
        self.shown = 0  # characters given out so far

    def push(self, token: int) -> str:
        self.ids.append(token)
        step = self.stream.step
        piece = guarded(lambda: step(self.tokenizer, token), TOKENIZER_FILE, "model package") or ""
        self.shown += len(piece)
        return piece

    def flush(self) -> str:
        decode = functools.partial(self.tokenizer.decode, skip_special_tokens=True)
        both = guarded(lambda: (decode(self.context + self.ids), decode(self.context)),
                       TOKENIZER_FILE, "model package")  # fmt: skip
        text = both[0][len(both[1]) :]
        piece, self.shown = text[self.shown :], len(text)
        return piece
