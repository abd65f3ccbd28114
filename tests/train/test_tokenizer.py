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


def _lm_package(tmp_path, tokenizer):
    torch = pytest.importorskip("torch", reason="needs PyTorch (the train extra)")

    from edgeformer.export import export_package
    from edgeformer.models import ModelConfig, build_model
    from edgeformer.models.checkpoint import save_checkpoint

    torch.manual_seed(0)
    cfg = ModelConfig(family="decoder-only", vocab_size=tokenizer.get_vocab_size(), d_model=32,
                      n_heads=4, d_ff=64, n_decoder_layers=1, norm="pre", positional="learned",
                      activation="gelu", max_len=64, dropout=0.0)  # fmt: skip
    ckpt = save_checkpoint(tmp_path / "ckpt", build_model(cfg).eval(), tmp_path / "tok.json")
    return export_package(ckpt, tmp_path / "pkg", variants=("fp32",), verbose=False)


def test_onnxruntime_genai_encodes_a_character_lm_package_as_we_do(tmp_path, capsys):
    """A Shakespeare character tokenizer goes into an LM package in byte-level form: the same
    ids from tokenizers, and onnxruntime-genai's og.Tokenizer (which gave -1 for every space of
    the original) encodes and decodes every line as edgeformer does."""
    og = pytest.importorskip("onnxruntime_genai")
    from tokenizers import Tokenizer

    from edgeformer.core.data import DATA_DIR

    text = (DATA_DIR / "tinyshakespeare" / "input.txt").read_text()
    trained = train_char(text, tmp_path / "tok.json")
    pkg = _lm_package(tmp_path, trained)
    ours = Tokenizer.from_file(str(pkg / "tokenizer.json"))
    genai = og.Tokenizer(og.Model(str(pkg)))
    lines = [*text.splitlines()[-400:], "First Citizen:\nBefore we proceed", "  two  spaces ", ""]
    for line in lines:
        ids = trained.encode(line).ids
        assert ours.encode(line).ids == ids and ours.decode(ids) == line
        assert [int(i) for i in genai.encode(line)] == ids, line
        assert genai.decode(ids) == line
    assert json.loads((pkg / "tokenizer_config.json").read_text())["unk_token"] == "[UNK]"
    from edgeformer.cli import main

    assert main(["info", str(pkg)]) == 0
    assert "og.Tokenizer does not encode" not in capsys.readouterr().out


def test_a_metaspace_bpe_lm_package_says_genai_misreads_its_tokenizer(tmp_path, capsys):
    """genai splits SentencePiece-style text with Llama's regex, where our BPE split at spaces
    only: `edgeformer info` says so rather than let genai's ids pass for ours."""
    from edgeformer.cli import main
    from edgeformer.core.data import DATA_DIR

    text = (DATA_DIR / "tinyshakespeare" / "input.txt").read_text().splitlines()[:3000]
    pkg = _lm_package(tmp_path, train_bpe(text, 300, tmp_path / "tok.json"))
    assert main(["info", str(pkg)]) == 0
    assert "og.Tokenizer does not encode this tokenizer (a BPE over words split at spaces" in (
        capsys.readouterr().out
    )
