"""Encoder (sentence-embedding) packages: BERT, DistilBERT, RoBERTa, XLM-R folders built offline
(transformers' from_config, random weights; small tokenizers trained with `tokenizers`),
exported once per module, their embeddings against transformers' pooled output."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import test_js  # noqa: E402

from edgeformer.core.schema import PackageError  # noqa: E402
from edgeformer.export.encoder import (  # noqa: E402
    EncoderParityError,
    cosines,
    relative_errors,
)  # noqa: E402
from edgeformer.export.exporter import export_encoder  # noqa: E402
from edgeformer.runtime.embed import Embedder  # noqa: E402

WORDS = (
    "the quick brown fox jumps over a lazy dog while man plays guitar on street search retrieval "
    "edge vectors embeddings map sentences to numbers hello world zebra quietly ran under bridge"
).split()
# 300 sentences of 1 to 60 words: the longest are cut at max_seq_length (32 positions here)
SENTENCES = [
    " ".join(WORDS[(7 * i + 3 * j) % len(WORDS)] for j in range(1 + i % 60)) for i in range(300)
]
MAX_POSITIONS = 40
js_node = test_js.node  # the JS runtime's fixture: node, with runtime/js's dependencies


def wordpiece(folder: Path) -> None:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(
        SENTENCES, trainers.WordPieceTrainer(vocab_size=120, special_tokens=specials)
    )
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    tok.save(str(folder / "tokenizer.json"))


def byte_bpe(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        SENTENCES,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok.save(str(folder / "tokenizer.json"))


def unigram(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(
        SENTENCES,
        trainers.UnigramTrainer(
            vocab_size=150, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], unk_token="<unk>"
        ),
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)],
    )
    tok.save(str(folder / "tokenizer.json"))


def vocab_txt_only(folder: Path) -> None:
    """A slow BERT tokenizer's files only (vocab.txt): the package's tokenizer.json is made by
    transformers' conversion."""
    wordpiece(folder)
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    (folder / "tokenizer.json").unlink()
    words = sorted(vocab, key=vocab.get)
    (folder / "vocab.txt").write_text("".join(w + "\n" for w in words))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": True})
    )


def sentence_transformers(folder: Path, mode: str, normalize: bool, length: int) -> None:
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
    ]
    if normalize:
        modules.append(
            {
                "idx": 2,
                "name": "2",
                "path": "2_Normalize",
                "type": "sentence_transformers.models.Normalize",
            }
        )
        (folder / "2_Normalize").mkdir()
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    pooling = {f"pooling_mode_{m}_tokens": m == mode for m in ("cls", "mean", "max")}
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 48, **pooling})
    )
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": length}))


# name -> (config class, model class, config fields (every field the family adds), tokenizer,
# sentence-transformers layout (pooling, normalize, max_seq_length) or None: mean, plain)
CASES = {
    "bert": (
        "BertConfig",
        "BertModel",
        {"hidden_act": "gelu", "layer_norm_eps": 1e-7, "type_vocab_size": 2},
        wordpiece,
        None,
    ),
    "bert-st-cls": (
        "BertConfig",
        "BertModel",
        {"hidden_act": "gelu_new"},
        vocab_txt_only,
        ("cls", True, 24),
    ),
    "distilbert": (
        "DistilBertConfig",
        "DistilBertModel",
        {"activation": "relu"},
        wordpiece,
        ("max", False, 32),
    ),
    "roberta": (
        "RobertaConfig",
        "RobertaModel",
        {"hidden_act": "gelu", "pad_token_id": 1, "type_vocab_size": 1},
        byte_bpe,
        ("mean", True, 30),
    ),
    "xlm-roberta": (
        "XLMRobertaConfig",
        "XLMRobertaModel",
        {"pad_token_id": 1, "layer_norm_eps": 1e-5},
        unigram,
        None,
    ),
}


def make_folder(root: Path, name: str) -> Path:
    import torch

    config_name, model_name, fields, tokenizer, st = CASES[name]
    folder = root / name
    folder.mkdir()
    tokenizer(folder)
    vocab = 200 if name != "roberta" else 400
    if config_name == "DistilBertConfig":
        sizes = {"dim": 48, "n_heads": 4, "n_layers": 2, "hidden_dim": 96}
    else:
        sizes = {
            "hidden_size": 48,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "intermediate_size": 96,
        }
    cfg = getattr(transformers, config_name)(
        vocab_size=vocab, max_position_embeddings=MAX_POSITIONS, **sizes, **fields
    )
    torch.manual_seed(len(name))
    model = getattr(transformers, model_name)(cfg).eval()
    with torch.no_grad():  # LayerNorms away from 1 / 0, so that their weights matter
        for n, p in model.named_parameters():
            if "LayerNorm" in n or "layer_norm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder)
    if st is not None:
        sentence_transformers(folder, *st)
    return folder


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """{case: (folder, package)}, each package with fp32, int8, int8-dynamic, int4."""
    root = tmp_path_factory.mktemp("encoders")
    out = {}
    for name in CASES:
        folder = make_folder(root, name)
        out[name] = (
            folder,
            export_encoder(folder, root / f"{name}.pkg", "int8,int8-dynamic,int4", verbose=False),
        )
    return out


def transformers_embeddings(folder: Path, texts: list[str]) -> np.ndarray:
    """transformers' model and tokenizer, pooled as sentence-transformers pools."""
    import torch

    _, _, _, _, st = CASES[folder.name]
    mode, normalize = (st[0], st[1]) if st else ("mean", False)
    model = transformers.AutoModel.from_pretrained(folder).eval()
    tok = (
        transformers.AutoTokenizer.from_pretrained(folder)
        if (folder / "vocab.txt").is_file()
        else transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    )
    tok.pad_token = tok.pad_token or tok.convert_ids_to_tokens(model.config.pad_token_id)
    offset = model.config.pad_token_id + 1 if "roberta" in model.config.model_type else 0
    length = st[2] if st else MAX_POSITIONS - offset
    batch = tok(texts, padding=True, truncation=True, max_length=length, return_tensors="pt")
    batch.pop("token_type_ids", None)
    with torch.no_grad():
        h = model(**batch).last_hidden_state.double()
    m = batch["attention_mask"][..., None].double()
    if mode == "cls":
        e = h[:, 0]
    elif mode == "max":
        e = torch.where(m > 0, h, torch.tensor(-1e9, dtype=h.dtype)).max(1).values
    else:
        e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
    if normalize:
        e = torch.nn.functional.normalize(e, dim=-1)
    return e.numpy()


@pytest.mark.parametrize("name", list(CASES))
def test_parity_with_transformers(packages, name):
    """fp32 cosine >= 0.9999 with transformers' pooled output on 300 sentences (the longest
    truncated at max_seq_length); int8 and int8-dynamic >= 0.99, int4 >= 0.95."""
    folder, package = packages[name]
    want = transformers_embeddings(folder, SENTENCES)
    for variant, bound in (
        ("fp32", 0.9999),
        ("int8", 0.99),
        ("int8-dynamic", 0.99),
        ("int4", 0.95),
    ):
        got = Embedder(package, variant, batch_size=16).embed(SENTENCES)
        assert got.shape == want.shape and got.dtype == np.float32
        low = cosines(got, want).min()
        assert low >= bound, (name, variant, low)
        if variant == "fp32":  # cosine alone is weak on random weights (export/encoder.py)
            assert relative_errors(got, want).max() < 1e-4
    if CASES[name][4] and CASES[name][4][1]:  # normalized
        assert np.allclose(np.linalg.norm(got, axis=-1), 1, atol=1e-5)
    ids = Embedder(package).tokenizer.encode(SENTENCES, truncate=True)
    assert max(map(len, ids)) == Embedder(package).max_seq_length  # truncation was exercised


def test_package_contents(packages):
    """The folder's pooling reaches the config; the graph is one MultiHeadAttention a layer."""
    import onnx

    _, package = packages["bert-st-cls"]
    config = json.loads((package / "config.json").read_text())
    assert config["family"] == "encoder"
    assert (config["model"]["pooling"], config["model"]["normalize"]) == ("cls", True)
    assert config["model"]["max_seq_length"] == 24
    assert set(config["variants"]) == {"fp32", "int8", "int8-dynamic", "int4"}
    assert config["variants"]["fp32"]["measured"]["min_cosine"] >= 0.9999
    ops = [
        n.op_type
        for n in onnx.load(str(package / "encoder.onnx"), load_external_data=False).graph.node
    ]
    assert ops.count("MultiHeadAttention") == 2 and "Softmax" not in ops
    int8 = [
        n.op_type
        for n in onnx.load(str(package / "encoder.int8.onnx"), load_external_data=False).graph.node
    ]
    assert "MatMulNBits" in int8 and "MatMul" not in int8
    plain = json.loads((packages["bert"][1] / "config.json").read_text())["model"]
    assert (plain["pooling"], plain["normalize"]) == ("mean", False)  # sentence-transformers'


def test_batching_order_and_threads(packages):
    """Rows come back in the texts' order whatever the batching; one Embedder, four threads."""
    _, package = packages["distilbert"]
    texts = SENTENCES[:40]
    one = Embedder(package, batch_size=1).embed(texts)
    many = Embedder(package, batch_size=7)
    assert np.allclose(many.embed(texts), one, atol=1e-5)
    assert np.allclose(many.embed(texts[::-1]), one[::-1], atol=1e-5)
    results: dict[int, np.ndarray] = {}

    def work(k: int) -> None:
        results[k] = many.embed(texts[k::4])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        assert np.allclose(results[k], one[k::4], atol=1e-5)

    async def both() -> list[np.ndarray]:
        return list(await asyncio.gather(many.embed_async(texts[:5]), many.embed_async(texts)))

    first, second = asyncio.run(both())
    assert np.allclose(first, one[:5], atol=1e-5) and np.allclose(second, one, atol=1e-5)


def test_bad_input(packages, tmp_path):
    folder, package = packages["bert"]
    model = Embedder(package)
    with pytest.raises(ValueError, match="empty list"):
        model.embed([])
    with pytest.raises(ValueError, match="list of texts"):
        model.embed("one text")  # type: ignore[arg-type]
    long = " ".join(WORDS * 3)
    assert model.embed([long]).shape == (1, 48)  # truncate=True: cut, as sentence-transformers
    with pytest.raises(ValueError, match=r"text 1 is over the model's max_seq_length of 40"):
        model.embed(["short", long], truncate=False)
    with pytest.raises(PackageError, match="a Hugging Face model folder, not a model package"):
        Embedder(folder)
    with pytest.raises(ValueError, match="variant 'int8-web' is not in this package"):
        Embedder(package, "int8-web")


def test_other_packages_named(packages, lm_package):
    """An encoder package given to the translator / LM runtime, and the reverse, say what it is."""
    from edgeformer.runtime.package import load_package

    with pytest.raises(PackageError, match="an encoder .sentence-embedding. package"):
        load_package(packages["bert"][1])
    with pytest.raises(PackageError, match="not an encoder .sentence-embedding. one"):
        Embedder(lm_package)


def test_unsupported_folders(tmp_path, packages):
    folder, _ = packages["bert"]
    cfg = json.loads((folder / "config.json").read_text())
    cross = tmp_path / "cross"
    cross.mkdir()
    (cross / "config.json").write_text(
        json.dumps(cfg | {"architectures": ["BertForSequenceClassification"]})
    )
    (cross / "config.json").write_text(
        json.dumps(cfg | {"architectures": ["BertForTokenClassification"]})
    )
    with pytest.raises(ValueError, match="unsupported encoder: architectures=.'BertForTokenCl"):
        export_encoder(cross, tmp_path / "out", verbose=False)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="has no variant"):
        export_encoder(folder, tmp_path / "out", "int8-web", verbose=False)


def test_parity_gate_fails(packages, tmp_path, monkeypatch):
    """A graph that is not the folder's model (a layer's weights changed after the reference
    was taken) is an EncoderParityError and nothing is written."""
    from edgeformer.export import encoder

    folder, _ = packages["bert"]
    real = encoder.reference_embeddings

    def wrong(enc, ids, mask, types=None):
        enc.tensors["layers.0.up.weight"] = enc.tensors["layers.0.up.weight"] * 0.9
        return real(enc, ids, mask, types)

    monkeypatch.setattr(encoder, "reference_embeddings", wrong)
    with pytest.raises(EncoderParityError, match="fp32: embeddings differ"):
        export_encoder(folder, tmp_path / "out", verbose=False)
    assert not (tmp_path / "out").exists()


def test_embed_command(packages, tmp_path, capsys):
    from edgeformer.cli import main

    folder, package = packages["roberta"]
    want = Embedder(package).embed(["a dog", "the zebra ran"])
    # edgeformer export sends an encoder folder to export_encoder: the same package
    assert main(["export", str(folder), str(tmp_path / "cli.pkg"), "--quantize", "int8"]) == 0
    assert np.allclose(Embedder(tmp_path / "cli.pkg").embed(["a dog", "the zebra ran"]), want)
    assert "int8" in Embedder(tmp_path / "cli.pkg", "int8").config.variants
    capsys.readouterr()  # export's lines
    (tmp_path / "in.txt").write_text("a dog\nthe zebra ran\n")
    assert (
        main(
            [
                "embed",
                str(package),
                "--input",
                str(tmp_path / "in.txt"),
                "--output",
                str(tmp_path / "x.npy"),
            ]
        )
        == 0
    )
    assert np.allclose(np.load(tmp_path / "x.npy"), want, atol=1e-6)
    assert main(["embed", str(package), "a dog", "the zebra ran"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == ["a dog", "the zebra ran"]
    assert np.allclose([r["embedding"] for r in rows], want, atol=1e-6)
    assert main(["info", str(package)]) == 0
    info = capsys.readouterr().out
    assert "encoder package" in info and "mean pooling, L2-normalised" in info
    assert "int8: " in info and "lowest cosine" in info
    assert main(["embed", str(package), "a", "--output", str(tmp_path / "x.csv")]) != 0
    assert "a .npy or .jsonl file" in capsys.readouterr().err


def test_embeddings_route(packages, lm_package):
    """/v1/embeddings beside an LM: OpenAI's client, base64, errors named as OpenAI's."""
    pytest.importorskip("starlette")
    openai = pytest.importorskip("openai")
    import base64

    import httpx

    from edgeformer.runtime.serve.app import ServeConfig, create_app, running

    _, package = packages["bert-st-cls"]
    want = Embedder(package).embed(["a dog", "the zebra ran"])
    app = create_app(ServeConfig(packages=(f"emb={package}", f"lm={lm_package}")))
    with running(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none")
        got = client.embeddings.create(model="emb", input=["a dog", "the zebra ran"])
        assert [d.index for d in got.data] == [0, 1] and got.usage.prompt_tokens > 4
        assert np.allclose([d.embedding for d in got.data], want, atol=1e-6)
        raw = httpx.post(
            f"{url}/v1/embeddings",
            json={"model": "emb", "input": "a dog", "encoding_format": "base64"},
        ).json()
        vector = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), "<f4")
        assert np.allclose(vector, want[0], atol=1e-6)
        for body, message in (
            ({"model": "emb", "input": []}, "non-empty list of texts"),
            ({"model": "emb", "input": " ".join(WORDS * 3)}, "over the model's max_seq_length"),
            ({"model": "emb", "input": "a", "dimensions": 8}, "this model gives 48"),
            ({"model": "lm", "input": "a"}, "is a language model"),
            ({"model": "emb", "input": "a", "top_k": 3}, "unrecognized request argument"),
        ):
            r = httpx.post(f"{url}/v1/embeddings", json=body)
            assert r.status_code == 400 and message in r.json()["error"]["message"], r.text
        r = httpx.post(f"{url}/v1/completions", json={"model": "emb", "prompt": "a"})
        assert "a sentence-embedding model: use /v1/embeddings" in r.json()["error"]["message"]
        card = httpx.get(f"{url}/v1/models/emb").json()
        assert (card["task"], card["dimensions"], card["normalized"]) == ("embed", 48, True)


# cross-encoders: (config class, model class, fields, tokenizer, labels)
RERANKERS = {
    "bert-rerank": ("BertConfig", "BertForSequenceClassification", {}, wordpiece, 1),
    "distilbert-rerank": ("DistilBertConfig", "DistilBertForSequenceClassification", {},
                          wordpiece, 2),
    "xlm-roberta-rerank": ("XLMRobertaConfig", "XLMRobertaForSequenceClassification",
                           {"pad_token_id": 1}, unigram, 1),
}  # fmt: skip


@pytest.fixture(scope="module")
def rerankers(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("rerankers")
    out = {}
    for name, (config_name, model_name, fields, tokenizer, labels) in RERANKERS.items():
        CASES[name] = (config_name, model_name, {**fields, "num_labels": labels}, tokenizer, None)
        try:
            folder = make_folder(root, name)
        finally:
            del CASES[name]
        out[name] = folder, export_encoder(folder, root / f"{name}.pkg", "int8", verbose=False)
    return out


@pytest.mark.parametrize("name", list(RERANKERS))
def test_reranker_parity(rerankers, packages, name):
    """Reranker.score equals transformers' logits of the (query, document) pairs (token types
    and longest-first truncation included); int8 keeps the order of the documents' scores."""
    import torch

    from edgeformer.runtime.embed import Reranker

    folder, package = rerankers[name]
    query, docs = SENTENCES[5], SENTENCES[:120]
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    tok.pad_token = tok.convert_ids_to_tokens(model.config.pad_token_id)
    offset = model.config.pad_token_id + 1 if "roberta" in model.config.model_type else 0
    bert = model.config.model_type == "bert"  # BERT reads the pair's segment ids
    batch = tok([query] * len(docs), docs, padding=True, truncation=True,
                max_length=MAX_POSITIONS - offset, return_tensors="pt",
                return_token_type_ids=bert)  # fmt: skip
    with torch.no_grad():
        want = model(**batch).logits.numpy()
    want = want[:, 0] if want.shape[1] == 1 else want
    got = Reranker(package, batch_size=16).score(query, docs)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max())
    low = Reranker(package, "int8").score(query, docs)
    assert cosines(low.reshape(1, -1), want.reshape(1, -1))[0] >= 0.99
    with pytest.raises(
        PackageError, match="is a cross-encoder .a text pair -> scores.: use Rerank"
    ):
        Embedder(package)
    with pytest.raises(PackageError, match="not a cross-encoder: use Embedder"):
        Reranker(packages["bert"][1])


# runs cases {package, backend, variant, call, texts | query + documents, truncate} in one node
# process (runtime/js/embed.mjs): "embed" -> rows, "ids" -> ids, "score" -> scores, "pairIds";
# a refused case gives {error, kind}; the cases come on stdin
EMBED_DRIVER = """
const { loadEmbedder, loadPackage } = await import(process.argv[1]);
const { readFileSync } = await import("node:fs");
const out = [];
for (const c of JSON.parse(readFileSync(0, "utf8"))) {
  let m = null;
  try {
    if (c.call === "loadPackage") { await loadPackage(c.package); continue; }
    m = await loadEmbedder(c.package, { backend: c.backend, variant: c.variant, threads: 1,
                                        batchSize: c.batch_size ?? 32 });
    const o = { truncate: c.truncate ?? true };
    const rows = (r) => Array.from(r);
    if (c.call === "embed") out.push({ rows: (await m.embed(c.texts, o)).map(rows) });
    else if (c.call === "ids") out.push({ ids: m.ids(c.texts, o) });
    else if (c.call === "score") out.push({ scores: await m.score(c.query, c.texts, o) });
    else if (c.call === "pairIds") out.push({ pairs: m.pairIds(c.query, c.texts, o) });
  } catch (e) {
    out.push({ error: String(e.message ?? e), kind: e.name });
  }
  if (m) await m.release();
}
console.log(JSON.stringify(out));
"""


def run_embed_js(node: str, cases: list[dict]) -> list[dict]:
    import subprocess

    cmd = [node, "--input-type=module", "-e", EMBED_DRIVER, (test_js.JS / "index.mjs").as_uri()]
    run = subprocess.run(cmd, input=json.dumps(cases, default=str), capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def test_js_embeddings_equal_pythons(js_node, packages):
    """runtime/js/embed.mjs on onnxruntime-node and -web (wasm): every folder kind's token ids
    (truncation at max_seq_length included) equal the Python runtime's, and its fp32 and int8
    embeddings of the 300 sentences equal Embedder's (the same graph: within float rounding)."""
    cases, want = [], []
    for _, package in packages.values():
        python = Embedder(package)
        cases.append({"package": package, "call": "ids", "texts": SENTENCES})
        want.append(("ids", python.tokenizer.encode(SENTENCES, truncate=True)))
        for backend, variant in (("node", "fp32"), ("wasm", "fp32"), ("node", "int8")):
            cases.append({"package": package, "backend": backend, "variant": variant,
                          "call": "embed", "texts": SENTENCES, "batch_size": 16})  # fmt: skip
            want.append(("rows", Embedder(package, variant).embed(SENTENCES)))
    for case, got, (key, expected) in zip(cases, run_embed_js(js_node, cases), want, strict=True):
        assert "error" not in got, (case["package"], got)
        if key == "ids":
            assert got["ids"] == expected, case["package"]
        else:
            rows = np.asarray(got["rows"], np.float32)
            assert rows.shape == expected.shape
            far = np.abs(rows - expected).max()
            assert far <= 1e-5 * np.abs(expected).max(), (case["package"], case["variant"], far)


def test_js_scores_equal_pythons(js_node, rerankers):
    """A cross-encoder's pairs (token types, longest-first truncation) and scores in JS equal
    the Python Reranker's."""
    from edgeformer.runtime.embed import Reranker

    query, docs = SENTENCES[59], SENTENCES[:120]  # a 60-word query: both sides of a pair cut
    cases, want = [], []
    for _, package in rerankers.values():
        python = Reranker(package)
        ids, types = python.tokenizer.encode_pairs([(query, d) for d in docs], True)
        cases.append({"package": package, "call": "pairIds", "query": query, "texts": docs})
        want.append(("pairs", [{"ids": i, "types": t} for i, t in zip(ids, types, strict=True)]))
        for backend in ("node", "wasm"):
            cases.append({"package": package, "backend": backend, "call": "score",
                          "query": SENTENCES[5], "texts": docs})  # fmt: skip
            want.append(("scores", python.score(SENTENCES[5], docs)))
    for case, got, (key, expected) in zip(cases, run_embed_js(js_node, cases), want, strict=True):
        assert "error" not in got, (case["package"], got)
        if key == "pairs":
            assert got["pairs"] == expected, case["package"]
        else:
            scores = np.asarray(got["scores"], np.float32)
            assert scores.shape == expected.shape
            assert np.abs(scores - expected).max() <= 1e-5 * max(1.0, np.abs(expected).max())


def test_js_bad_input_is_named(js_node, packages, rerankers, lm_package):
    """The Python runtime's errors, in JS: an empty list, a text over max_seq_length without
    truncation, a package of the other kind or family, a Hugging Face folder."""
    folder, package = packages["bert"]
    long = " ".join(WORDS * 3)
    cases = [
        ({"package": package, "call": "embed", "texts": []}, "embed got an empty list of texts"),
        ({"package": package, "call": "embed", "texts": "one"}, "give [text] for one"),
        ({"package": package, "call": "embed", "texts": ["a", long], "truncate": False},
         "text 1 is over the model's max_seq_length of 40 tokens"),
        ({"package": package, "call": "embed", "texts": ["a"], "variant": "int8-web"},
         'variant "int8-web" is not in this package'),
        ({"package": rerankers["bert-rerank"][1], "call": "embed", "texts": ["a"]},
         "is a cross-encoder (a text pair -> scores): use score"),
        ({"package": lm_package, "call": "embed", "texts": ["a"]},
         "not an encoder (sentence-embedding) one: load it with loadPackage"),
        ({"package": folder, "call": "embed", "texts": ["a"]},
         "is a Hugging Face model folder, not a model package"),
        ({"package": package, "call": "loadPackage"}, "an encoder (sentence-embedding) package: "
         "load it with loadEmbedder"),
    ]  # fmt: skip
    got = run_embed_js(js_node, [c for c, _ in cases])
    assert len(got) == len(cases)
    for (case, message), result in zip(cases, got, strict=True):
        assert message in result.get("error", ""), (case, result)


def rewrite_golden(package: Path, out: Path, edit) -> Path:
    """A copy of the package whose golden.json is edit(golden) (None: removed), its checksum
    list updated: what `verify` reads is the edited file, not a corrupt one."""
    import shutil

    from edgeformer.core.files import sha256

    shutil.copytree(package, out)
    config = json.loads((out / "config.json").read_text())
    golden = edit(json.loads((out / "golden.json").read_text()))
    if golden is None:
        (out / "golden.json").unlink()
        del config["files"]["golden.json"]
    else:
        (out / "golden.json").write_text(json.dumps(golden))
        config["files"]["golden.json"] = sha256(out / "golden.json")
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_verify_an_encoder_package(packages, rerankers, tmp_path, capsys):
    """`edgeformer verify` on an encoder package: every variant's output on export's probe ids
    against the folder's model's (golden.json), within export's bounds; a reference that is
    not the graph's fails it, and a package without golden.json is named."""
    from edgeformer.cli import main
    from edgeformer.runtime.verify import verify_encoder

    _, package = packages["xlm-roberta"]
    checks, tokenizer = verify_encoder(package)
    assert [c.variant for c in checks] == ["fp32", "int8", "int8-dynamic", "int4"]
    assert tokenizer is None and all(c.passed for c in checks), checks
    assert checks[0].min_cosine >= 0.9999 and checks[0].max_relative_error < 1e-4
    assert main(["verify", str(rerankers["bert-rerank"][1])]) == 0
    out = capsys.readouterr().out
    assert "min cosine" in out and "tokenizer: ok" in out

    def shifted(g: dict) -> dict:  # the first probe's reference: another text's
        g["reference"][0] = g["reference"][3]
        return g

    wrong = rewrite_golden(package, tmp_path / "wrong", shifted)
    assert main(["verify", str(wrong), "--variants", "fp32"]) == 1
    assert "FAILED (cosine >= 0.9999, relative error <= 0.0001)" in capsys.readouterr().out

    def other_ids(g: dict) -> dict:  # export's ids no longer the tokenizer's
        g["ids"][0][1] = (g["ids"][0][1] + 1) % 100
        return g

    assert main(["verify", str(rewrite_golden(package, tmp_path / "ids", other_ids))]) == 1
    assert "does not encode export's probe text 0" in capsys.readouterr().out
    old = rewrite_golden(package, tmp_path / "old", lambda g: None)
    with pytest.raises(PackageError, match="has no golden.json .exported before 2026-12-02.: re-"):
        verify_encoder(old)
