"""Bundled data: Multi30k (English <-> German captions) and Tiny Shakespeare.

    DATA/multi30k/{train,val,test_2016_flickr}.{en,de}[.gz]   one sentence a line, aligned
    DATA/tinyshakespeare/input.txt                              plain text, 90/10 train/val

DATA is the package's own `data/` folder unless a `data_dir` is given (tests use a tmp folder).
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"
SPLITS = ("train", "val", "test_2016_flickr")
LANGS = ("en", "de")


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    root = Path(data_dir) if data_dir is not None else DATA_DIR
    if not root.is_dir():
        raise FileNotFoundError(f"data folder not found: {root}")
    return root


def read_lines(path: Path) -> list[str]:
    """Lines of a (gzipped) UTF-8 text file, newline stripped; errors name the file."""
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\r\n") for line in f]
    if not any(line.strip() for line in lines):
        raise ValueError(f"empty dataset: {path} has no text")
    return lines


def multi30k_file(root: Path, split: str, lang: str) -> Path:
    """DATA/multi30k/{split}.{lang}.gz, or the same without .gz (the missing one is named)."""
    gz = root / "multi30k" / f"{split}.{lang}.gz"
    return gz if gz.is_file() or not gz.with_suffix("").is_file() else gz.with_suffix("")


def load_multi30k(
    split: str,
    src_lang: str = "en",
    tgt_lang: str = "de",
    data_dir: str | os.PathLike | None = None,
    max_sentences: int | None = None,
) -> tuple[list[str], list[str]]:
    """(sources, targets) of one Multi30k split; pairs with an empty side are dropped."""
    if split not in SPLITS:
        raise ValueError(f"unknown Multi30k split {split!r}, expected one of {SPLITS}")
    if {src_lang, tgt_lang} != set(LANGS):
        raise ValueError(f"unknown direction {src_lang}-{tgt_lang}, expected en-de or de-en")
    root = data_root(data_dir)
    src_path, tgt_path = multi30k_file(root, split, src_lang), multi30k_file(root, split, tgt_lang)
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise ValueError(
            f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: not aligned"
        )
    pairs = [(s.strip(), t.strip()) for s, t in zip(src, tgt) if s.strip() and t.strip()]
    if max_sentences is not None:
        pairs = pairs[:max_sentences]
    if not pairs:
        raise ValueError(f"empty dataset: no sentence pairs in {src_path} / {tgt_path}")
    return [s for s, _ in pairs], [t for _, t in pairs]


def load_shakespeare(
    data_dir: str | os.PathLike | None = None, val_fraction: float = 0.1
) -> tuple[str, str]:
    """(train text, val text): the first 90% and the last 10% of the file, as in nanoGPT."""
    path = data_root(data_dir) / "tinyshakespeare" / "input.txt"
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    text = path.read_text(encoding="utf-8")
    n = int(len(text) * (1 - val_fraction))
    if not text.strip() or n < 2 or len(text) - n < 2:
        raise ValueError(f"empty dataset: {path} has too little text ({len(text)} characters)")
    return text[:n], text[n:]
