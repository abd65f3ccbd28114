"""Tokenizers: special-token ids, BPE detokenisation, exact char-level round trip."""

from __future__ import annotations

import json

import pytest

from edgeformer.train.tokenizer import (
    SPECIALS,
    encode,
    encode_stream,
    load_tokenizer,
    train_bpe,
    train_char,
)

TEXTS = [
    "A man in a blue shirt is standing on a ladder.",
    "Ein Mann in einem blauen Hemd steht auf einer Leiter.",
    "Two dogs play in the snow, don't they?",
    "Zwei Hunde spielen im Schnee – schön!",
] * 5


def test_bpe_special_ids_and_round_trip(tmp_path):
    tok = train_bpe(TEXTS, 300, tmp_path / "tokenizer.json")
    assert [tok.token_to_id(t) for t in SPECIALS] == [0, 1, 2, 3]
    tok = load_tokenizer(tmp_path / "tokenizer.json")
    for text, ids in zip(TEXTS, encode(tok, TEXTS)):
        assert ids and min(ids) > 3  # no specials added
        assert tok.decode(ids) == text  # detokenised, not "▁"-joined pieces


def test_bpe_lowercase_lowercases_everything_it_encodes(tmp_path):
    """TrainConfig.lowercase: the tokenizer.json itself lowercases (so do the package and the
    runtime that load it); its vocabulary has no uppercase piece."""
    tok = train_bpe(TEXTS, 300, tmp_path / "tokenizer.json", lowercase=True)
    tok = load_tokenizer(tmp_path / "tokenizer.json")
    assert not any(c.isupper() for piece in tok.get_vocab() for c in piece if piece not in SPECIALS)
    for text, ids in zip(TEXTS, encode(tok, TEXTS)):
        assert tok.decode(ids) == text.lower()
    assert encode(tok, ["A MAN"]) == encode(tok, ["a man"])


def test_bpe_unknown_characters_become_unk(tmp_path):
    tok = train_bpe(TEXTS, 300, tmp_path / "tokenizer.json")
    assert 3 in encode(tok, ["Ω"])[0]


def test_char_round_trip_is_exact(tmp_path):
    text = "First Citizen:\nBefore we proceed any further, hear me.\n\nAll:\n  Speak,  speak.\n"
    tok = train_char(text, tmp_path / "tokenizer.json")
    tok = load_tokenizer(tmp_path / "tokenizer.json")
    assert tok.get_vocab_size() == 4 + len(set(text))
    ids = encode_stream(tok, text)
    assert len(ids) == len(text)  # one token per character
    assert tok.decode(ids) == text
    assert tok.decode(encode(tok, [" \n a  e\n"])[0]) == " \n a  e\n"
    assert encode(tok, ["#"])[0] == [3]  # unseen character -> [UNK]


def test_load_tokenizer_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_tokenizer(tmp_path / "nope.json")
    train_char("abc", tmp_path / "t.json")
    data = json.loads((tmp_path / "t.json").read_text())
    for t in data["added_tokens"]:  # swap [PAD] and [BOS]
        t["id"] = {0: 1, 1: 0}.get(t["id"], t["id"])
    vocab = data["model"]["vocab"]
    vocab["[PAD]"], vocab["[BOS]"] = 1, 0
    (tmp_path / "t.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="must have ids 0..3"):
        load_tokenizer(tmp_path / "t.json")
