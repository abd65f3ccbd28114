"""Tokenizers trained with the `tokenizers` library and saved as tokenizer.json.

Special tokens have fixed ids: [PAD]=0, [BOS]=1, [EOS]=2, [UNK]=3 (ModelConfig pad/bos/eos_id).
BPE: NFKC (+ Lowercase when asked) + Metaspace, so decode() gives detokenised text back; a
lowercasing tokenizer lowercases wherever it is used (training data, the package, the runtime).
Char: one token per character, no normaliser or pre-tokenizer and a Fuse decoder, so
decode(encode(text)) == text exactly.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPECIALS = ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)


def train_bpe(
    texts: Iterable[str], vocab_size: int, path: str | os.PathLike, lowercase: bool = False
) -> Tokenizer:
    """Joint BPE over all `texts` (both languages for translation), saved to `path`."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    nfkc = normalizers.NFKC()
    tok.normalizer = normalizers.Sequence([nfkc, normalizers.Lowercase()]) if lowercase else nfkc
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False
    )
    tok.train_from_iterator(texts, trainer)
    tok.save(str(path))
    return tok


def train_char(text: str, path: str | os.PathLike) -> Tokenizer:
    """Character-level tokenizer: a BPE with no merges over the sorted characters of `text`."""
    chars = sorted(set(text))
    if not chars:
        raise ValueError("cannot build a character tokenizer from empty text")
    vocab = {t: i for i, t in enumerate(SPECIALS + chars)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]"))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(path))
    return tok


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    tok = Tokenizer.from_file(str(path))
    ids = [tok.token_to_id(t) for t in SPECIALS]
    if ids != [PAD_ID, BOS_ID, EOS_ID, UNK_ID]:
        raise ValueError(f"{path}: special tokens {SPECIALS} must have ids 0..3, got {ids}")
    return tok


def encode(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids without any special tokens."""
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def encode_stream(tok: Tokenizer, text: str) -> list[int]:
    """A long text (a whole corpus) as one id stream, encoded line by line to stay fast."""
    lines = text.splitlines(keepends=True)
    return [i for ids in encode(tok, lines) for i in ids]
