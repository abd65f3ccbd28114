"""The file-translation workload: a whole test set through each stack's batch-translation path.

Ours: `Translator.translate_file` (read, tokenize, length-sorted sub-batches, detokenize,
write). CTranslate2: `Translator.translate_batch` over the file's token lists with its own
`max_batch_size` / `batch_type` (it sorts and sub-batches itself), written back to a file.
The sources have the token counts of test_2016_flickr's English lines (bundled data, counted
in words) with random ids, and every sentence gets FILE_NEW_TOKENS forced output tokens (EOS
ignored: random weights), so that every stack does the same work. Each stack is timed with
each batching in CANDIDATES; its best is its row (each engine with its own best settings).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .shapes import SEED

FILE_NEW_TOKENS = 16  # about test_2016_flickr's mean German length in words (12.4) + BPE splits
QUICK_SENTENCES = 200


@dataclass(frozen=True)
class FileBatching:
    """One batching setting of a stack's batch path (the names of both engines' options)."""

    max_batch_size: int
    batch_type: str = "examples"  # "examples" | "tokens"
    # sub-batches translated at once, each on its own thread with threads // inter_threads
    # intra-op threads (edgeformer's and CTranslate2's inter_threads)
    inter_threads: int = 1

    def describe(self) -> str:
        inter = f", {self.inter_threads} at once" if self.inter_threads > 1 else ""
        return f"{self.max_batch_size} {self.batch_type}{inter}"


CANDIDATES = tuple(
    FileBatching(size, kind, inter)
    for inter in (1, 2)
    for size, kind in ((32, "examples"), (64, "examples"), (1024, "tokens"))
)
QUICK_CANDIDATES = (FileBatching(32), FileBatching(32, inter_threads=2))


@dataclass(frozen=True)
class FileWorkload:
    sources: list[list[int]]  # token ids in [4, vocab - 1): no special id in any stack's vocab
    new_tokens: int
    candidates: tuple[FileBatching, ...]

    @property
    def sentences(self) -> int:
        return len(self.sources)


def test_set_lengths() -> list[int]:
    """Words per line of test_2016_flickr.en (the bundled Multi30k test set)."""
    from edgeformer.core.data import DATA_DIR, multi30k_file, read_lines

    lines = read_lines(multi30k_file(DATA_DIR, "test_2016_flickr", "en"))
    return [max(1, len(line.split())) for line in lines]


def file_workload(vocab: int, quick: bool = False) -> FileWorkload:
    """The test set's lengths with random ids in [4, vocab - 1) (each stack adds its EOS)."""
    lengths = test_set_lengths()[: QUICK_SENTENCES if quick else None]
    rng = np.random.default_rng(SEED)
    sources = [rng.integers(4, vocab - 1, n).tolist() for n in lengths]
    return FileWorkload(sources, FILE_NEW_TOKENS, QUICK_CANDIDATES if quick else CANDIDATES)


def write_tokens(path: Path, sources: list[list[int]], vocab: list[str]) -> None:
    """One line per source: its tokens as words of `vocab` (the stack's word-level vocabulary)."""
    with open(path, "w", encoding="utf-8") as f:
        for ids in sources:
            f.write(" ".join(vocab[i] for i in ids) + "\n")


def sentences_per_s(sentences: int, ms: float) -> float:
    return sentences / (ms / 1e3)
