"""The data registry: the bundled data sets, and what a checkpoint was trained on.

    DATA/multi30k/{train,val,test_2016_flickr}.{en,de}[.gz]   one sentence a line, aligned
    DATA/tinyshakespeare/input.txt                              plain text, 90/10 train/val

DATA is edgeformer.train's `data/` folder (installed with it; sources and licences in its
README.md) unless a `data_dir` is given. Training, export (held-out quality, GPTQ's calibration
examples) and the benchmark read the data through here; `TrainingData` is the typed record of a
checkpoint's training data that training writes and export reads.
"""

from __future__ import annotations

import gzip
import importlib.util
import os
from dataclasses import asdict, dataclass
from pathlib import Path


def _bundled() -> Path:
    """edgeformer.train's data/ folder, found without importing edgeformer.train (torch)."""
    spec = importlib.util.find_spec("edgeformer.train")
    if spec is None or not spec.submodule_search_locations:
        return Path(__file__).resolve().parents[1] / "train" / "data"
    return Path(next(iter(spec.submodule_search_locations))) / "data"


DATA_DIR = _bundled()
SPLITS = ("train", "val", "test_2016_flickr")
LANGS = ("en", "de")
DATASETS = ("multi30k", "tinyshakespeare")
# export's held-out check (export/quality.py): a Tiny Shakespeare LM's perplexity on the first
# HELD_OUT_WINDOWS windows of the val split; a converted LM's on CONVERTED_WINDOWS windows of
# CONVERTED_WINDOW_TOKENS tokens of it, in its own tokens
HELD_OUT_WINDOWS = 256
CONVERTED_WINDOWS, CONVERTED_WINDOW_TOKENS = 8, 256


def held_out_description(key: str, converted: bool = False, pair: str = "") -> str:
    """What export's held-out `key` ("bleu", "perplexity") was measured on, in words: what
    export says when it measures it and `edgeformer info` when it shows it. pair: a
    translator's direction (en-de)."""
    if key == "bleu":
        return (
            f"greedy translations of Multi30k's whole val split{f' ({pair})' if pair else ''}, "
            "cased sacreBLEU against its references"
        )
    if converted:
        return (
            f"{CONVERTED_WINDOWS} windows of {CONVERTED_WINDOW_TOKENS} tokens of Tiny "
            "Shakespeare's val split, in the model's own tokens"
        )
    return f"the first {HELD_OUT_WINDOWS} windows of max_len tokens of Tiny Shakespeare's val split"


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


CHECKPOINT_KEY = "data"  # a checkpoint config's TrainingData


@dataclass(frozen=True)
class TrainingData:
    """What a checkpoint was trained on (its config.json's `data`). Export uses it to find the
    held-out split it measures each variant on and the training examples GPTQ calibrates on:
    both only when the data is the bundled copy."""

    dataset: str  # one of DATASETS
    bundled: bool  # the bundled copy (not a --data-dir of the user's)
    tokenizer: str  # "bpe" | "char": how the text was tokenized (the checkpoint's tokenizer.json)
    src_lang: str | None = None  # translation
    tgt_lang: str | None = None

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"TrainingData: dataset={self.dataset!r}, expected one of {DATASETS}")
        if self.dataset == "multi30k" and {self.src_lang, self.tgt_lang} != set(LANGS):
            raise ValueError(f"TrainingData: multi30k needs src_lang/tgt_lang in {LANGS}")

    @property
    def held_out(self) -> bool:
        """The bundled validation split is at hand (and was never trained on)."""
        return self.bundled

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def of_checkpoint(cls, config: dict) -> TrainingData | None:
        """The checkpoint config's record; None for a model not trained by edgeformer train (a
        converted Hugging Face model). Checkpoints written before the record existed are read
        from their `task` and `train` keys."""
        data = config.get(CHECKPOINT_KEY)
        if isinstance(data, dict):
            return cls(**data)
        task, train = config.get("task") or {}, config.get("train")
        if not isinstance(train, dict):
            return None
        bundled = train.get("data_dir") is None
        if task.get("kind") == "translation":
            return cls("multi30k", bundled, "bpe", task.get("src_lang"), task.get("tgt_lang"))
        if task.get("kind") == "lm":
            return cls("tinyshakespeare", bundled, str(train.get("tokenizer", "char")))
        return None
