"""MarianMTModel with separate source and target vocabularies (OPUS-MT "tc-big":
share_encoder_decoder_embeddings false, decoder_vocab_size, vocab.json + target_vocab.json),
issue 48: converted, exported (fp32, int8, int4) and compared with transformers on a random
model whose SentencePiece models and vocabularies are trained here on Multi30k (offline).
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")
pytest.importorskip("sentencepiece")

from edgeformer.core.decoding import GenerationOptions  # noqa: E402
from edgeformer.export import export_package  # noqa: E402
from edgeformer.export.verify import compare  # noqa: E402
from edgeformer.models import ModelConfig, build_model  # noqa: E402
from edgeformer.models.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from edgeformer.models.hf import convert_hf, hf_model_config  # noqa: E402
from edgeformer.runtime.api import Translator  # noqa: E402
from edgeformer.runtime.package import load_package  # noqa: E402

TEXTS = ["A man rides a bike.", "Two dogs play in the snow near a red house", "Hi!"]


def side_vocab(root, side: str, lines: list[str], size: int) -> dict[str, int]:
    """ROOT/{side}.spm (Unigram, trained on `lines`) and its Marian vocabulary laid out as
    OPUS-MT's: </s> 0, <unk> 1, the model's pieces, <pad> last."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(root / side), vocab_size=size,
        model_type="unigram", character_coverage=1.0, minloglevel=2,
    )  # fmt: skip
    (root / f"{side}.model").rename(root / f"{side}.spm")
    sp = spm.SentencePieceProcessor(model_file=str(root / f"{side}.spm"))
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i)):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


@pytest.fixture(scope="module")
def tcbig(tmp_path_factory):
    """(HF model, MarianTokenizer, HF folder, checkpoint, package with fp32, int8, int4): a
    source vocabulary of ~240 tokens (English), a target one of ~170 (German)."""
    from edgeformer.core.data import load_multi30k

    root = tmp_path_factory.mktemp("tcbig")
    en, de = load_multi30k("train", "en", "de", max_sentences=800)
    source = side_vocab(root, "source", en, 240)
    target = side_vocab(root, "target", de, 170)
    (root / "vocab.json").write_text(json.dumps(source))
    (root / "target_vocab.json").write_text(json.dumps(target))
    with warnings.catch_warnings():  # "Recommended: pip install sacremoses" (not used here)
        warnings.simplefilter("ignore")
        tok = transformers.MarianTokenizer(
            str(root / "source.spm"), str(root / "target.spm"), str(root / "vocab.json"),
            target_vocab_file=str(root / "target_vocab.json"), separate_vocabs=True,
        )  # fmt: skip
    pad = target["<pad>"]
    config = transformers.MarianConfig(
        vocab_size=len(source), decoder_vocab_size=len(target),
        share_encoder_decoder_embeddings=False, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_position_embeddings=64, activation_function="swish",
        scale_embedding=True, pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
        forced_eos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.MarianMTModel(config).eval()
    with torch.no_grad():  # weights large enough for outputs that depend on the source, rows
        for name, p in hf.named_parameters():  # of one norm (else the tied head picks the
            if p.requires_grad and "layer_norm" not in name:  # longest row always)
                p.normal_(0.0, 0.25)
        for table in (hf.model.encoder.embed_tokens.weight, hf.model.decoder.embed_tokens.weight):
            table.copy_(table / table.norm(dim=1, keepdim=True) * 2.0)
        bias = torch.randn(len(target)) * 0.5  # padding (never emitted) far below the rest
        bias[pad] = -30.0
        hf.final_logits_bias.copy_(bias[None])
    assert hf.model.encoder.embed_tokens.weight.shape[0] == len(source) != len(target)
    hf.save_pretrained(root / "hf", safe_serialization=True)
    tok.save_pretrained(root / "hf")
    ckpt = convert_hf(root / "hf", root / "checkpoint")
    pkg = export_package(ckpt, root / "package", variants=("fp32", "int8", "int4"), verbose=False)
    return hf, tok, root / "hf", ckpt, pkg


def test_separate_vocabularies_map_exactly(tcbig):
    """vocab_size -> src_vocab_size (the encoder's), decoder_vocab_size -> vocab_size (the
    decoder's and the head's); the tables are transformers' own."""
    hf, _, src, ckpt, pkg = tcbig
    _, cfg = hf_model_config(src)
    c = hf.config
    assert (cfg.src_vocab_size, cfg.vocab_size) == (c.vocab_size, c.decoder_vocab_size)
    assert (cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.tie_embeddings) == (c.pad_token_id,) * 2 + (
        0, True)  # fmt: skip
    model = load_checkpoint(ckpt)[0]
    assert model.cfg == cfg
    assert torch.equal(model.src_embed.weight, hf.model.encoder.embed_tokens.weight)
    assert torch.equal(model.embed.weight, hf.model.decoder.embed_tokens.weight)
    package = load_package(pkg)
    assert package.config.model.src_vocab_size == c.vocab_size
    assert json.loads((pkg / "config.json").read_text())["model"]["src_vocab_size"] == c.vocab_size
    assert package.config.task.get("source_suffix") == [0]  # vocab.json's </s>


def target_ids(tok, text: str) -> list[int]:
    """MarianTokenizer's target ids (target_vocab.json; text_target alone: input_ids)."""
    out = tok(text_target=text)
    return out.get("labels", out["input_ids"])


def logits_gap(hf, ours, tok) -> float:
    """The largest difference between transformers' logits and ours on TEXTS (a right-padded
    source batch with the source vocabulary's padding, teacher-forced targets)."""
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    pad = hf.config.pad_token_id  # the target's (MarianTokenizer pads with the source's)
    labels = [target_ids(tok, t) for t in TEXTS[::-1]]
    T = max(map(len, labels))
    rows = [[hf.config.decoder_start_token_id] + r[:-1] + [pad] * (T - len(r)) for r in labels]
    tgt_in = torch.tensor(rows)
    with torch.no_grad():
        ref = hf(batch["input_ids"], batch["attention_mask"], decoder_input_ids=tgt_in).logits
        got = ours(batch["input_ids"], tgt_in, batch["attention_mask"])
    assert ref.shape[-1] == hf.config.decoder_vocab_size
    return float((ref - got).abs().max())


def test_logits_equal_transformers(tcbig):
    hf, tok, _, ckpt, _ = tcbig
    assert logits_gap(hf, load_checkpoint(ckpt)[0], tok) <= 1e-4


def test_package_parity_and_the_encoders_own_table(tcbig):
    """fp32 graphs within 1e-4 of PyTorch (sources drawn from the source vocabulary); the
    encoder gathers from its own table, the decoder and the tied head from the target's."""
    import onnx

    _, _, _, ckpt, pkg = tcbig
    model = load_checkpoint(ckpt)[0]
    assert max(compare(model, load_package(pkg), "fp32", 3, 7, 6)) <= 1e-4
    for graph, table, rows in (("encoder", "src_embed.table", model.cfg.src_vocab_size),
                               ("decoder", "embed.table", model.cfg.vocab_size)):  # fmt: skip
        g = onnx.load(str(pkg / f"{graph}.onnx"), load_external_data=False).graph
        gather = next(n for n in g.node if n.op_type == "Gather")
        assert gather.input[0] == table
        init = next(i for i in g.initializer if i.name == table)
        assert list(init.dims) == [rows, model.cfg.d_model]
        meta = {
            p.key: p.value
            for p in onnx.load(str(pkg / f"{graph}.onnx"), load_external_data=False).metadata_props
        }
        assert meta["edgeformer.src_vocab_size"] == str(model.cfg.src_vocab_size)


@pytest.mark.parametrize("beams", [1, 4])
def test_generation_equals_transformers(tcbig, beams):
    """Greedy and beam-4 translations of a padded batch: the package and `generate()`
    (bad_words_ids [[pad]], as OPUS-MT's config) agree token for token, and as text; the
    int8 and int4 variants load and translate within the target vocabulary."""
    from test_hf import marian_generate  # the same generate() call as the shared-vocab tests

    hf, tok, _, _, pkg = tcbig
    batch, _, want = marian_generate(hf, tok, TEXTS, beams)
    translator = Translator(pkg, threads=1)
    sources = [translator.source_ids(t) for t in TEXTS]
    ids, mask = batch["input_ids"].tolist(), batch["attention_mask"].tolist()
    assert sources == [[t for t, m in zip(r, k) if m] for r, k in zip(ids, mask)]
    opts = GenerationOptions(max_new_tokens=8, num_beams=beams, early_stopping=True)
    assert translator.translate_ids(sources, opts) == want
    texts = translator.translate_batch(TEXTS, max_new_tokens=8, num_beams=beams)
    # decoded without the decoder start: MarianTokenizer's skip_special_tokens knows the
    # source vocabulary's special ids, not target_vocab.json's <pad>
    assert texts == [tok.decode(row, skip_special_tokens=True) for row in want]
    if beams == 1:
        V = hf.config.decoder_vocab_size
        for variant in ("int8", "int4"):
            got = Translator(pkg, variant, threads=1).translate_ids(sources, opts)
            assert len(got) == 3 and all(0 <= t < V for row in got for t in row), variant


def test_source_and_target_ids_equal_marian_tokenizer(tcbig):
    """300 Multi30k sentences each side: the package's source ids (+ </s>) are
    MarianTokenizer's (its source vocabulary), its target tokenizer's are MarianTokenizer's
    text_target ids (target_vocab.json) and decode to its text."""
    from tokenizers import Tokenizer

    from edgeformer.core.data import load_multi30k

    _, tok, _, _, pkg = tcbig
    en, de = load_multi30k("val", "en", "de", max_sentences=300)
    en += ["  Two  spaces\tand a tab ", "Ünïcödé ｆｕｌｌｗｉｄｔｈ … ﬁ", "new\nlines"]
    translator = Translator(pkg, threads=1)
    m = translator.model
    for text in en:
        want = tok(text)["input_ids"]
        assert m.encode_source(text) + m.translation.suffix == want, text
        if len(want) <= m.max_len:  # the text API's frame: the same ids
            assert translator.source_ids(text) == want, text
    target = Tokenizer.from_file(str(pkg / "tokenizer.json"))
    for text in de:
        ids = target.encode(text, add_special_tokens=False).ids
        assert ids + [0] == target_ids(tok, text), text
        assert target.decode(ids) == tok.decode(ids, skip_special_tokens=True), text


def test_untied_head_matches_transformers(tcbig, tmp_path):
    """tie_word_embeddings false: lm_head.weight (target vocabulary) is the head."""
    _, tok, src, _, _ = tcbig
    dst = tmp_path / "hf"
    shutil.copytree(src, dst)
    config = transformers.MarianConfig.from_pretrained(src)
    config.tie_word_embeddings = False
    torch.manual_seed(2)
    untied = transformers.MarianMTModel(config).eval()
    untied.save_pretrained(dst, safe_serialization=True)
    ours = load_checkpoint(convert_hf(dst, tmp_path / "checkpoint"))[0]
    assert not ours.cfg.tie_embeddings and ours.lm_head.weight.shape[0] == config.decoder_vocab_size
    assert logits_gap(untied, ours, tok) <= 1e-4


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda d: (d / "target_vocab.json").unlink(), "target_vocab.json"),
        (lambda d: _config(d, decoder_vocab_size=500), "decoder_vocab_size is 500"),
        (lambda d: _config(d, vocab_size=30), "vocab_size=30"),
        (lambda d: _config(d, share_encoder_decoder_embeddings=True), "decoder_vocab_size"),
        (lambda d: _tokenizer_config(d, separate_vocabs=False), "separate_vocabs=False"),
    ],
)
def test_a_folder_whose_vocabularies_disagree_is_refused(tcbig, tmp_path, change, match):
    _, _, src, _, _ = tcbig
    dst = tmp_path / "hf"
    shutil.copytree(src, dst)
    change(dst)
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        convert_hf(dst, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _config(folder, **changes) -> None:
    config = {**json.loads((folder / "config.json").read_text()), **changes}
    (folder / "config.json").write_text(json.dumps(config))


def _tokenizer_config(folder, **changes) -> None:
    path = folder / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_a_shared_vocabulary_folder_with_target_vocab_json_is_refused(tcbig, tmp_path):
    """config.json says one shared vocabulary but the folder has target_vocab.json."""
    _, _, src, _, _ = tcbig
    dst = tmp_path / "hf"
    shutil.copytree(src, dst)
    n = json.loads((dst / "config.json").read_text())["vocab_size"]
    _config(dst, share_encoder_decoder_embeddings=True, decoder_vocab_size=n)
    with pytest.raises(ValueError, match="share_encoder_decoder_embeddings is true"):
        convert_hf(dst, tmp_path / "out")


def test_own_source_vocabulary_exports_in_every_variant(tmp_path, tokenizer_json):
    """An encoder-decoder whose own source vocabulary is smaller than pad_id (sources padded
    with 0 then): every variant's parity against PyTorch with sources from that vocabulary,
    int8-dynamic's encoder gathering its own int8 rows (never the tied head's), and the
    package's golden check."""
    from tokenizers import Tokenizer

    from edgeformer.runtime.verify import verify

    vocab = Tokenizer.from_file(str(tokenizer_json)).get_vocab_size()
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=vocab + 20, src_vocab_size=vocab, pad_id=vocab + 5, bos_id=1,
                      eos_id=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0, max_len=64,
                      n_encoder_layers=2, n_decoder_layers=2)  # fmt: skip
    assert cfg.source_pad_id == 0
    model = build_model(cfg).eval()
    ckpt = save_checkpoint(tmp_path / "ckpt", model, tokenizer_json, {
        "task": {"kind": "translation", "source_suffix": [2]}},
        source_tokenizer_json=tokenizer_json)  # fmt: skip
    variants = ("fp32", "int8", "int4", "int8-dynamic")
    pkg = export_package(ckpt, tmp_path / "pkg", variants=variants, verbose=False)
    package = load_package(pkg)
    assert package.config.model.src_vocab_size == vocab
    from edgeformer.export.verify import compare_variants

    diffs = compare_variants(load_checkpoint(ckpt)[0], package, variants, 3, 7, 4)
    assert max(diffs["fp32"]) <= 1e-4 and all(max(d) < 1.0 for d in diffs.values()), diffs
    assert all(c.error is None and c.agreement > 0.5 for c in verify(pkg)), verify(pkg)
    import onnx

    g = onnx.load(str(pkg / "encoder.int8-dynamic.onnx"), load_external_data=False).graph
    assert any(n.op_type == "GatherBlockQuantized" for n in g.node)
    t = Translator(pkg, "int8", threads=1)
    with pytest.raises(ValueError, match="outside the sources' vocabulary"):
        t.translate_ids([[vocab + 1, 2]])
    assert len(t.translate_ids([[5, 6, 7, 2], [9, 2]], GenerationOptions(max_new_tokens=3))) == 2


def test_source_vocabulary_needs_an_encoder_decoder():
    with pytest.raises(ValueError, match="src_vocab_size=10 is for encoder-decoder"):
        ModelConfig(family="decoder-only", src_vocab_size=10, n_encoder_layers=0)
    with pytest.raises(ValueError, match="src_vocab_size=0"):
        ModelConfig(src_vocab_size=0)
    assert ModelConfig(vocab_size=50, src_vocab_size=60, pad_id=0).source_pad_id == 0
    assert ModelConfig(vocab_size=50, src_vocab_size=40, pad_id=45).source_pad_id == 0
    assert ModelConfig(vocab_size=50, pad_id=45).source_pad_id == 45
