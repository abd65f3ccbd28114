"""Prefix caching: the KV cache of token sequences a finished request leaves, kept for the next
request that starts with the same tokens (the next turn of a conversation, a shared system
prompt), so that only the tokens after the shared prefix are prefilled.

A causal decoder's cache positions 0 .. k - 1 depend on the first k tokens only, so an entry
serves any prompt that shares its first k tokens, whatever follows. Memory is bounded (bytes of
K/V held); the least recently used entries go first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np


@dataclass
class Prefix:
    """A cached sequence: its tokens and its cache (per buffer name: (G, len(tokens), D))."""

    tokens: np.ndarray  # (L,) int64
    cache: dict[str, np.ndarray]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.cache.values())


def shared_length(a: np.ndarray, b: np.ndarray) -> int:
    """How many first tokens `a` and `b` have in common."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


MAX_ENTRIES = 512  # a lookup compares the prompt with every entry


class PrefixCache:
    """Cached prefixes, least recently used first; at most `max_bytes` of K/V (0: off) in at
    most `max_entries` entries."""

    def __init__(self, max_bytes: int, max_entries: int = MAX_ENTRIES):
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.entries: OrderedDict[int, Prefix] = OrderedDict()
        self.nbytes = 0
        self.lock = threading.Lock()
        self._next = 0
        self.hits = self.reused_tokens = self.evicted = 0

    def lookup(self, prompt: list[int]) -> tuple[Prefix | None, int]:
        """The entry sharing the longest prefix with `prompt` and that length, at most
        len(prompt) - 1 (the last prompt token is always fed: its logits start decoding);
        (None, 0) when no entry shares a token."""
        ids = np.asarray(prompt, dtype=np.int64)
        best, best_len, best_key = None, 0, None
        with self.lock:
            for key, entry in self.entries.items():
                k = min(shared_length(entry.tokens, ids), len(ids) - 1)
                if k > best_len:
                    best, best_len, best_key = entry, k, key
            if best_key is not None:
                self.entries.move_to_end(best_key)
                self.hits += 1
                self.reused_tokens += best_len
        return best, best_len

    def add(self, tokens: list[int], cache: dict[str, np.ndarray]) -> None:
        """Keep `tokens`' cache; entries it extends are dropped (it serves their prompts too),
        and nothing is added when an entry already holds it."""
        if self.max_bytes <= 0 or not tokens:
            return
        entry = Prefix(np.asarray(tokens, dtype=np.int64), cache)
        size = entry.nbytes
        if size > self.max_bytes:
            return
        n = len(entry.tokens)
        with self.lock:
            for key, old in list(self.entries.items()):
                shared = shared_length(old.tokens, entry.tokens)
                if shared == n:  # already held (or a longer one that starts with it)
                    self.entries.move_to_end(key)
                    return
                if shared == len(old.tokens):  # the new one extends it
                    self._drop(key)
            while self.entries and (
                self.nbytes + size > self.max_bytes or len(self.entries) >= self.max_entries
            ):
                self._drop(next(iter(self.entries)))
                self.evicted += 1
            self.entries[self._next] = entry
            self._next += 1
            self.nbytes += size

    def _drop(self, key: int) -> None:
        self.nbytes -= self.entries.pop(key).nbytes
