"""Every encoder-decoder family the converter takes besides Marian, against transformers
(issue 48): NLLB and M2M100 (M2M100ForConditionalGeneration, with NLLB's fast tokenizer and
M2M100's SentencePiece-only one), mBART-50, BART, T5, flan-T5, mT5.

For each family a small random-weight model of its transformers class and its fast tokenizer
(trained offline on Multi30k text, with the family's special tokens and language codes) are
saved with save_pretrained, converted and exported (fp32, int8, int4, int8-dynamic), and shown
to match transformers: logits within 1e-4, greedy and beam-4 ids equal to `generate()`'s with
the model's generation config (forced BOS / target language, forced EOS, decoder start), over
batches of 1 and 3; source ids equal to the tokenizer's on a few hundred sentences, in every
language; the quantized variants close to fp32.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from edgeformer.core.data import DATA_DIR  # noqa: E402
from edgeformer.export import export_package  # noqa: E402
from edgeformer.export.verify import compare  # noqa: E402
from edgeformer.models.checkpoint import load_checkpoint  # noqa: E402
from edgeformer.models.hf import LOADERS, convert_hf, hf_model_config  # noqa: E402
from edgeformer.runtime.api import Translator  # noqa: E402
from edgeformer.runtime.commands import package_info  # noqa: E402
from edgeformer.runtime.package import load_package  # noqa: E402

DATA = DATA_DIR / "multi30k"  # the bundled Multi30k (train/data)
NEW = 12  # new tokens per translation
LANGS = ["eng_Latn", "deu_Latn", "fra_Latn"]
MBART_LANGS = ["en_XX", "de_DE", "fr_XX"]
M2M100_LANGS = ["en", "de", "fr"]  # M2M100Tokenizer's codes (its tokens: __en__, ...)
CODES = {"nllb": LANGS, "mbart50": MBART_LANGS, "m2m100": M2M100_LANGS}
SMALL = dict(
    d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=48,
    max_position_embeddings=64, init_std=0.1,
)  # fmt: skip
T5_SMALL = dict(d_model=32, d_kv=16, d_ff=48, num_layers=2, num_heads=3, n_positions=64,
                relative_attention_num_buckets=8, relative_attention_max_distance=20,
                decoder_start_token_id=0)  # fmt: skip
# name -> (model class, config class, config fields, tokenizer kind, generation config)
FAMILIES = {
    # NLLB-200: M2M100's architecture, NLLB's tokenizer (`eng_Latn text </s>`, target language
    # forced after the decoder start </s>)
    "nllb": ("M2M100ForConditionalGeneration", "M2M100Config", SMALL, "nllb",
             {"decoder_start_token_id": 2, "max_length": 200}),
    # M2M100: the same architecture; its tokenizer is SentencePiece-only (BPE
    # sentencepiece.bpe.model + fairseq's vocab.json, `__en__ text </s>`, no tokenizer.json)
    "m2m100": ("M2M100ForConditionalGeneration", "M2M100Config", SMALL, "m2m100",
               {"decoder_start_token_id": 2, "max_length": 200}),
    # mBART-50: pre-LN, embedding norm, learned positions from row 2; `en_XX text </s>`
    "mbart50": ("MBartForConditionalGeneration", "MBartConfig",
                SMALL | {"scale_embedding": True, "decoder_start_token_id": 2}, "mbart50",
                {"decoder_start_token_id": 2, "forced_eos_token_id": 2}),
    # BART (bart-large's generation settings): post-LN, `<s> text </s>`, <s> forced first,
    # </s> forced last, no repeated trigrams
    "bart": ("BartForConditionalGeneration", "BartConfig", SMALL, "bart",
             {"decoder_start_token_id": 2, "forced_bos_token_id": 0, "forced_eos_token_id": 2,
              "no_repeat_ngram_size": 3}),
    # T5 v1.0: ReLU, tied head scaled by d^-0.5, relative buckets (few, so that they saturate)
    "t5": ("T5ForConditionalGeneration", "T5Config", T5_SMALL, "t5", {"decoder_start_token_id": 0}),
    # flan-T5 / T5 v1.1: gated GELU, untied head (written by transformers 4 as tie false)
    "flan-t5": ("T5ForConditionalGeneration", "T5Config",
                T5_SMALL | {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
                "t5", {"decoder_start_token_id": 0}),
    "mt5": ("MT5ForConditionalGeneration", "MT5Config", T5_SMALL, "t5",
            {"decoder_start_token_id": 0}),
}  # fmt: skip
TEXTS = ["A man is riding a bike.", "Zwei Hunde spielen im Schnee.",
         "A woman in a red dress is singing on a stage while people watch."]  # fmt: skip


def corpus(n: int) -> list[str]:
    """n English and n German Multi30k training sentences."""
    out = []
    for lang in ("en", "de"):
        with gzip.open(DATA / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            out += [next(f).strip() for _ in range(n)]
    return out


def _trained(model, specials: list[str], n: int = 400) -> dict:
    from tokenizers import Tokenizer, pre_tokenizers, trainers

    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    kind = trainers.BpeTrainer if type(model).__name__ == "BPE" else trainers.UnigramTrainer
    extra = {} if kind is trainers.BpeTrainer else {"unk_token": "<unk>"}
    tok.train_from_iterator(corpus(1500), kind(vocab_size=n, special_tokens=specials, **extra))
    return json.loads(tok.to_str())["model"]


def m2m100_tokenizer(folder: Path):
    """M2M100Tokenizer over a SentencePiece BPE model trained here and a fairseq-ordered
    vocab.json (specials first, then the pieces in an order of their own, as fairseq's
    dictionary: ids that are not the spm model's)."""
    import random

    import sentencepiece as spm

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.txt").write_text("\n".join(corpus(1500)), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(folder / "corpus.txt"), model_prefix=str(folder / "spm"), vocab_size=400,
        model_type="bpe", bos_id=0, pad_id=1, eos_id=2, unk_id=3, minloglevel=2,
    )  # fmt: skip
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    lines = (folder / "spm.vocab").read_text(encoding="utf-8").splitlines()
    pieces = [line.split("\t")[0] for line in lines if line.split("\t")[0] not in specials]
    random.Random(0).shuffle(pieces)
    vocab = {t: i for i, t in enumerate(specials + pieces)}
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    return transformers.M2M100Tokenizer(
        str(folder / "vocab.json"), str(folder / "spm.model"), src_lang="en", tgt_lang="de"
    )


def vocab_size(tok) -> int:
    """The model's vocabulary: M2M100's has its language codes and 8 made-up words after
    vocab.json's tokens (len() of its tokenizer counts neither)."""
    if isinstance(tok, transformers.M2M100Tokenizer):
        return tok.vocab_size + len(tok.lang_code_to_id) + tok.num_madeup_words
    return len(tok)


def lang_id(tok, code: str) -> int:
    if isinstance(tok, transformers.M2M100Tokenizer):
        return tok.get_lang_id(code)
    return tok.convert_tokens_to_ids(code)


def make_tokenizer(kind: str, folder: Path):
    """The family's transformers tokenizer over a vocabulary trained here (offline)."""
    from tokenizers import models

    if kind == "m2m100":
        return m2m100_tokenizer(folder)

    if kind in ("nllb", "bart"):
        if kind == "bart":  # byte-level BPE (RobertaTokenizer's): a byte alphabet
            from tokenizers import Tokenizer, pre_tokenizers, trainers

            tok = Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            trainer = trainers.BpeTrainer(
                vocab_size=500, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            )  # fmt: skip
            tok.train_from_iterator(corpus(1500), trainer)
            m = json.loads(tok.to_str())["model"]
        else:
            m = _trained(models.BPE(unk_token="<unk>"), ["<s>", "<pad>", "</s>", "<unk>"])
        merges = [tuple(x) if isinstance(x, list) else tuple(x.split(" ")) for x in m["merges"]]
        if kind == "bart":
            return transformers.RobertaTokenizer(vocab=m["vocab"], merges=merges)
        return transformers.NllbTokenizer(
            vocab=m["vocab"], merges=merges, additional_special_tokens=LANGS, src_lang=LANGS[0]
        )
    vocab = [tuple(x) for x in _trained(models.Unigram(), ["<pad>", "</s>", "<unk>"])["vocab"]]
    if kind == "t5":
        return transformers.T5Tokenizer(vocab=vocab, extra_ids=3)
    tok = transformers.MBart50Tokenizer(vocab=vocab, src_lang=MBART_LANGS[0])
    return tok


def build(name: str, folder: Path):
    """(HF model, tokenizer) of a family, saved in folder."""
    cls, config_cls, fields, kind, generation = FAMILIES[name]
    tok = make_tokenizer(kind, folder.parent / "spm")
    torch.manual_seed(0)
    special = {"pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id}
    if tok.bos_token_id is not None and kind != "t5":
        special["bos_token_id"] = tok.bos_token_id
    config = getattr(transformers, config_cls)(vocab_size=vocab_size(tok), **(fields | special))
    hf = getattr(transformers, cls)(config).eval()
    with torch.no_grad():  # random norms (transformers starts them at 1) and biases
        for pname, p in hf.named_parameters():
            if "norm" in pname or "bias" in pname:
                p.add_(torch.randn_like(p) * 0.2)
    hf.generation_config = transformers.GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, **generation,
    )  # fmt: skip
    hf.save_pretrained(folder)
    tok.save_pretrained(folder)
    return hf, tok


_BUILT: dict[str, tuple] = {}


def built(name: str, tmp_path_factory) -> tuple:
    """(name, HF model, tokenizer, HF folder, checkpoint, package: fp32, int8, int4,
    int8-dynamic), made once per family for this module."""
    if name not in _BUILT:
        root = tmp_path_factory.mktemp(name)
        hf, tok = build(name, root / "hf")
        ckpt = convert_hf(root / "hf", root / "checkpoint")
        variants = ("int8", "int4", "int8-dynamic")
        pkg = export_package(ckpt, root / "package", variants=variants, verbose=False)
        _BUILT[name] = (name, hf, tok, root / "hf", ckpt, pkg)
    return _BUILT[name]


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    return built(request.param, tmp_path_factory)


def languages(name: str) -> list[tuple[str | None, str | None]]:
    """(source_lang, target_lang) pairs to try: every code as a source and a target."""
    codes = CODES.get(name)
    if codes is None:
        return [(None, None)]
    return [(codes[0], codes[1]), (codes[1], codes[2]), (codes[2], codes[0])]


def hf_inputs(tok, texts: list[str], source_lang: str | None):
    if source_lang is not None:
        tok.src_lang = source_lang
    return tok(texts, padding=True, return_tensors="pt")


def hf_translate(hf, tok, texts, langs, beams: int) -> list[list[int]]:
    """generate()'s ids after the decoder start, up to the first EOS (padding removed)."""
    source_lang, target_lang = langs
    batch = hf_inputs(tok, texts, source_lang)
    forced = {}
    if target_lang is not None:
        forced["forced_bos_token_id"] = lang_id(tok, target_lang)
    pad, eos = tok.pad_token_id, tok.eos_token_id
    with torch.no_grad():
        out = hf.generate(
            **batch, max_new_tokens=NEW, do_sample=False, num_beams=beams, early_stopping=True,
            bad_words_ids=[[pad]], **forced,
        )  # fmt: skip
    want = []
    for row in out[:, 1:].tolist():
        row = row[: row.index(eos)] if eos in row else row
        want.append([t for t in row if t != pad])
    return want


def test_every_family_has_a_loader():
    assert {FAMILIES[f][0] for f in FAMILIES} <= set(LOADERS)


def test_logits_equal_transformers(family):
    """A right-padded source batch, teacher-forced targets: every logit of a real target
    position within 1e-4 (NLLB numbers positions by non-padding tokens: a padded one's
    differs)."""
    name, hf, tok, _, ckpt, _ = family
    ours = load_checkpoint(ckpt)[0]
    batch = hf_inputs(tok, TEXTS, languages(name)[0][0])
    start = ours.cfg.bos_id
    tgt = tok(TEXTS[::-1], padding=True, return_tensors="pt")["input_ids"][:, :-1]
    tgt_in = torch.cat([torch.full((3, 1), start), tgt], dim=1)
    with torch.no_grad():
        ref = hf(**batch, decoder_input_ids=tgt_in).logits
        got = ours(batch["input_ids"], tgt_in, batch["attention_mask"])
    real = tgt_in != tok.pad_token_id
    assert (ref - got).abs()[real].max() <= 1e-4


def test_package_matches_pytorch_and_quantized_variants_load(family):
    """fp32 graphs against the converted checkpoint step by step; int8 / int4 / int8-dynamic
    load, translate, and export measured their agreement with PyTorch's greedy choices
    (random weights: a bound on agreement, not on BLEU)."""
    name, _, _, _, ckpt, pkg = family
    package = load_package(pkg)
    assert max(compare(load_checkpoint(ckpt)[0], package, "fp32", 3, 7, 6)) <= 1e-4
    measured = {v: e.measured for v, e in package.config.variants.items()}
    assert measured["int8"]["agreement"] >= 0.9
    assert measured["int4"]["agreement"] >= 0.4
    source_lang, target_lang = languages(name)[0]
    for variant in ("int4", "int8-dynamic"):
        out = Translator(pkg, variant, threads=1).translate_batch(
            TEXTS, source_lang=source_lang, target_lang=target_lang, max_new_tokens=4
        )  # fmt: skip
        assert len(out) == 3 and all(isinstance(t, str) for t in out)


@pytest.mark.parametrize("beams", [1, 4])
@pytest.mark.parametrize("batch", [1, 3])
def test_translations_equal_generate(family, beams, batch):
    """Greedy and beam-4, batches of 1 and 3, in each language pair: the package's ids (the
    forced target language or <s> included) and texts are generate()'s, with the model's
    generation config (decoder start, forced BOS / EOS, no_repeat_ngram_size)."""
    name, hf, tok, _, _, pkg = family
    translator = Translator(pkg, threads=1)
    for langs in languages(name):
        for start in range(0, len(TEXTS), batch):
            texts = TEXTS[start : start + batch]
            want = hf_translate(hf, tok, texts, langs, beams)
            results = translator.translate_results(
                texts, source_lang=langs[0], target_lang=langs[1], max_new_tokens=NEW,
                num_beams=beams, early_stopping=True,
            )  # fmt: skip
            assert [r.hypotheses[0].ids for r in results] == want, (langs, texts)
            assert [r.text for r in results] == hf_text(tok, want)


def hf_text(tok, ids: list[list[int]]) -> list[str]:
    """transformers' decoded texts without special tokens. transformers 5's M2M100Tokenizer
    keeps its language tokens (`__de__`) in them, which transformers 4 skipped as special
    tokens and which no user wants in a translation: they are left out here."""
    if isinstance(tok, transformers.M2M100Tokenizer):
        languages = set(tok.lang_code_to_id.values())
        ids = [[i for i in row if i not in languages] for row in ids]
    return tok.batch_decode(ids, skip_special_tokens=True)


def test_source_ids_equal_the_tokenizer(family):
    """A few hundred sentences in every source language: the package's source ids (frame,
    language token, </s>; cut to max_len as transformers' truncation cuts them) are the fast
    tokenizer's; decoding gives its text."""
    name, _, tok, _, _, pkg = family
    translator = Translator(pkg, threads=1)
    sentences = corpus(150) + ["", "  spaces  around ", "Ünïcödé — «quotes» 123"]
    for source_lang, _ in languages(name):
        if source_lang is not None:
            tok.src_lang = source_lang
        for text in sentences:
            want = tok(text, truncation=True, max_length=64).input_ids if text.strip() else []
            got = translator.source_ids(text, truncate=True, source_lang=source_lang)
            assert got == want, text
    ids = tok(sentences[:50], add_special_tokens=False).input_ids
    assert [translator.model.decode(i) for i in ids] == tok.batch_decode(
        ids, skip_special_tokens=True
    )


def test_config_names_the_family(family):
    """Checkpoint and package name the source architecture; `edgeformer info` lists the
    languages of a multilingual model."""
    name, hf, _, src, ckpt, pkg = family
    arch, cfg = hf_model_config(src)
    assert arch == FAMILIES[name][0] and load_checkpoint(ckpt)[0].cfg == cfg
    info = package_info(str(pkg))
    assert f"source       huggingface {arch}" in info
    codes = CODES.get(name)
    if codes:
        assert Translator(pkg, threads=1).languages[: len(codes)] == codes or set(codes) <= set(
            Translator(pkg, threads=1).languages
        )
        assert all(c in info for c in codes)
    added = {
        "t5": lambda: cfg.positional == "relative" and cfg.head_scale == 32**-0.5,
        "flan-t5": lambda: cfg.activation == "geglu" and cfg.head_scale is None,
        "bart": lambda: cfg.embedding_norm and cfg.separate_positions and cfg.norm == "post",
        "mbart50": lambda: cfg.embedding_norm and cfg.norm == "pre" and cfg.scale_embeddings,
        "nllb": lambda: cfg.norm == "pre" and cfg.bos_id == cfg.eos_id == 2,
    }
    assert added.get(name, lambda: True)()


@pytest.fixture(scope="module")
def nllb(tmp_path_factory):
    _, hf, tok, _, _, pkg = built("nllb", tmp_path_factory)
    return hf, tok, pkg


def test_a_mixed_target_batch_is_one_call(nllb):
    """One call, one target language per text: each row as if translated alone."""
    _, _, pkg = nllb
    translator = Translator(pkg, threads=1)
    targets = ["deu_Latn", "fra_Latn", "deu_Latn"]
    mixed = translator.translate_batch(TEXTS, source_lang="eng_Latn", target_lang=targets,
                                       max_new_tokens=6)  # fmt: skip
    alone = [translator.translate(t, source_lang="eng_Latn", target_lang=g, max_new_tokens=6)
             for t, g in zip(TEXTS, targets)]  # fmt: skip
    assert mixed == alone


def test_languages_are_checked(nllb):
    """An unknown code is one error naming close matches; a multilingual model without a
    target language says which argument to give; a language list of the wrong length too."""
    _, _, pkg = nllb
    translator = Translator(pkg, threads=1)
    with pytest.raises(ValueError, match=r"'deu_latn' is not one of .*deu_Latn"):
        translator.translate("Hello", target_lang="deu_latn")
    with pytest.raises(ValueError, match="close: .*fra_Latn"):
        translator.translate("Hello", source_lang="fra_Ltn", target_lang="deu_Latn")
    with pytest.raises(ValueError, match="give target_lang"):
        translator.translate("Hello")
    with pytest.raises(ValueError, match="2 codes for 3 texts"):
        translator.translate_batch(TEXTS, target_lang=["deu_Latn", "fra_Latn"])


def test_cli_translate_with_languages(nllb, capsys):
    """`edgeformer translate PKG TEXT --source-lang X --target-lang Y` is translate()'s."""
    from edgeformer.cli import main

    _, _, pkg = nllb
    want = Translator(pkg, threads=1).translate(
        TEXTS[0], source_lang="eng_Latn", target_lang="fra_Latn", max_new_tokens=5
    )  # fmt: skip
    main(["translate", str(pkg), TEXTS[0], "--source-lang", "eng_Latn", "--target-lang",
          "fra_Latn", "--max-new-tokens", "5"])  # fmt: skip
    assert capsys.readouterr().out.strip() == want.strip()
    assert main(["translate", str(pkg), TEXTS[0], "--target-lang", "xx_Yyyy"]) == 2
    assert "not one of this model's 3 language codes" in capsys.readouterr().err


@pytest.fixture(scope="module")
def mbart_fixed(tmp_path_factory):
    """An mBART fine-tune as mbart-large-en-ro and the cc25 fine-tunes are: MBartTokenizer's
    `text </s> en_XX` sources, the decoder starting from its one target language (ro_RO)."""
    folder = tmp_path_factory.mktemp("mbart-fixed")
    from tokenizers import models

    vocab = [tuple(x) for x in _trained(models.Unigram(), ["<pad>", "</s>", "<unk>"])["vocab"]]
    tok = transformers.MBartTokenizer(vocab=vocab, src_lang="en_XX", tgt_lang="ro_RO")
    start = tok.convert_tokens_to_ids("ro_RO")
    torch.manual_seed(0)
    config = transformers.MBartConfig(
        vocab_size=len(tok), **SMALL, scale_embedding=True, pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
        decoder_start_token_id=start,
    )  # fmt: skip
    hf = transformers.MBartForConditionalGeneration(config).eval()
    hf.generation_config = transformers.GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, decoder_start_token_id=start,
    )  # fmt: skip
    hf.save_pretrained(folder / "hf")
    tok.save_pretrained(folder / "hf")
    ckpt = convert_hf(folder / "hf", folder / "checkpoint")
    return hf, tok, export_package(ckpt, folder / "package", verbose=False)


@pytest.mark.parametrize("beams", [1, 4])
def test_a_fixed_target_language_translates_into_it_only(mbart_fixed, beams):
    """The decoder starts from the target language: translations equal generate()'s with or
    without naming it, the source language is the frame's suffix, and another target language
    is an error naming the fixed one."""
    hf, tok, pkg = mbart_fixed
    translator = Translator(pkg, threads=1)
    for source_lang in ("en_XX", "de_DE"):
        want = hf_translate(hf, tok, TEXTS, (source_lang, None), beams)
        for target_lang in (None, "ro_RO"):
            results = translator.translate_results(
                TEXTS, source_lang=source_lang, target_lang=target_lang, max_new_tokens=NEW,
                num_beams=beams, early_stopping=True,
            )  # fmt: skip
            assert [r.hypotheses[0].ids for r in results] == want, (source_lang, target_lang)
        tok.src_lang = source_lang
        assert translator.source_ids(TEXTS[2], source_lang=source_lang) == tok(TEXTS[2]).input_ids
    with pytest.raises(ValueError, match="ro_RO"):
        translator.translate(TEXTS[0], target_lang="de_DE")


def test_a_folder_with_only_a_slow_tokenizer_converts(tmp_path_factory):
    """An mT5 folder as google/mt5-* ship it: spiece.model and tokenizer_config.json, no
    tokenizer.json. transformers makes the fast tokenizer at convert time; the package's source
    ids are that tokenizer's and its translations generate()'s. Without any tokenizer file the
    error says what to save."""
    import shutil

    import sentencepiece as spm

    _, hf, _, src, _, _ = built("mt5", tmp_path_factory)
    root = tmp_path_factory.mktemp("mt5-slow")
    folder = root / "hf"
    folder.mkdir()
    for f in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(src / f, folder / f)
    (root / "corpus.txt").write_text("\n".join(corpus(1500)), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(root / "corpus.txt"), model_prefix=str(root / "sp"), vocab_size=300,
        model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2,
    )  # fmt: skip
    shutil.copy(root / "sp.model", folder / "spiece.model")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "T5Tokenizer", "extra_ids": 0, "eos_token": "</s>",
         "unk_token": "<unk>", "pad_token": "<pad>"}
    ))  # fmt: skip
    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    ckpt = convert_hf(folder, root / "checkpoint")
    assert not (folder / "tokenizer.json").exists()  # the source folder is left as it was
    translator = Translator(export_package(ckpt, root / "package", verbose=False), threads=1)
    for text in corpus(100) + ["", "  spaces  around ", "Ünïcödé — «quotes» 123"]:
        want = tok(text, truncation=True, max_length=64).input_ids if text.strip() else []
        assert translator.source_ids(text, truncate=True) == want, text
    want = hf_translate(hf, tok, TEXTS, (None, None), 1)
    got = translator.translate_results(TEXTS, max_new_tokens=NEW)
    assert [r.hypotheses[0].ids for r in got] == want
    (folder / "spiece.model").unlink()
    with pytest.raises(FileNotFoundError, match="no tokenizer files to make one from"):
        convert_hf(folder, root / "again")
