"""An encoder-only Hugging Face folder -> an encoder (sentence-embedding) package.

folder (BertModel, DistilBertModel, RobertaModel, XLMRobertaModel; sentence-transformers'
        modules.json / 1_Pooling / 2_Normalize)
  -> models.hf.encoders.load_encoder (sizes, pooling, tensors under our names)
  -> EncoderBuilder: one graph per variant (export/builder.py's parts: MultiHeadAttention
     with the padding mask, Add + LayerNormalization, BiasGelu, MatMulNBits /
     DynamicQuantizeMatMul), the pooling and normalisation inside it
  -> the parity gate: each variant's sentence_embedding against a numpy forward pass of the
     folder's float32 weights (reference_embeddings) on PROBE_TEXTS, a long one truncated;
     fp32 below FP32_MIN_COSINE or a quantized variant below QUANTIZED_MIN_COSINE is an
     error and nothing is written
  -> config.json (schema.EncoderPackageConfig) with checksums, written whole or not at all.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..core.files import sha256
from ..core.format import (
    CLASSIFIER_LOGITS,
    CONFIG_FILE,
    ENCODER_GRAPH,
    GOLDEN_FILE,
    SENTENCE_EMBEDDING,
    TOKENIZER_FILE,
    encoder_io_names,
)
from ..core.metrics import cosines, relative_errors
from ..core.schema import (
    ENCODER_FP32_MAX_RELATIVE_ERROR,
    ENCODER_FP32_MIN_COSINE,
    ENCODER_QUANTIZED_MIN_COSINE,
    EncoderGolden,
    EncoderModel,
    EncoderPackageConfig,
    VariantEntry,
)
from ..models.hf.encoders import EncoderWeights, encoder_tokenizer, load_encoder
from .builder import OPSET, Builder, Graph, _packed
from .recipes import VARIANT_SPECS, VariantSpec
from .writer import write_graphs

ENCODER_VARIANTS = ("fp32", "int8", "int4", "int8-dynamic")
FP32_MIN_COSINE = ENCODER_FP32_MIN_COSINE
FP32_MAX_RELATIVE_ERROR = ENCODER_FP32_MAX_RELATIVE_ERROR
QUANTIZED_MIN_COSINE = ENCODER_QUANTIZED_MIN_COSINE
PROBE_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on the street.",
    "Embeddings map sentences to vectors.",
    "hello",
    "Search and retrieval on the edge, without a server: " * 40,  # cut at max_seq_length
]


def _log(verbose: bool, msg: str) -> None:
    if verbose:
        print(msg, file=sys.stderr, flush=True)


@dataclass(eq=False)
class Linear:
    """A layer's weight (out, in) and bias, hashable by identity (the builder keys GPTQ's
    Hessians by layer)."""

    weight: Any
    bias: Any = None


class EncoderBuilder(Builder):
    """Builder's parts (linear layers per variant, embedding, norms, attention, feed-forward)
    over an encoder's tensors: the decoder builder's model is replaced by a namespace with the
    fields those parts read."""

    def __init__(self, enc: EncoderWeights, spec: VariantSpec, inits: dict[str, np.ndarray]):
        m = enc.model
        cfg = SimpleNamespace(
            n_heads=m.num_attention_heads, kv_heads=m.num_attention_heads,
            head_dim=m.hidden_size // m.num_attention_heads, d_model=m.hidden_size,
            rotary_dims=0, tie_embeddings=False, norm_type="layernorm", norm="post",
            layer_norm_eps=m.layer_norm_eps, activation=m.hidden_act, attention_scale=None,
            positional="learned", attn_softcap=None, head_scale=None, attention_window=None,
            n_decoder_layers=m.num_hidden_layers,
        )  # fmt: skip
        t = enc.tensors
        shim = SimpleNamespace(cfg=cfg, embed=SimpleNamespace(weight=t["embed.word"], scale=1.0))
        super().__init__(shim, spec, inits)
        self.enc, self.m = enc, m

    def module(self, name: str) -> Linear:
        t = self.enc.tensors
        return Linear(t[f"{name}.weight"], t.get(f"{name}.bias"))

    def graph(self) -> Graph:
        """input_ids, attention_mask, token_type_ids (B, S) -> last_hidden_state (B, S, C),
        sentence_embedding (B, C)."""
        from onnx import TensorProto as TP

        g, m, t = Graph(ENCODER_GRAPH, self.inits), self.m, self.enc.tensors
        B, S, C = "batch", "seq_len", m.hidden_size
        ids = g.input("input_ids", TP.INT64, [B, S])
        mask = g.input("attention_mask", TP.INT64, [B, S])
        types = g.input("token_type_ids", TP.INT64, [B, S])
        mask32 = g.op("Cast", [mask], to=TP.INT32)
        x = self.embedding(g, ids)
        # positions of the real tokens: offset, offset + 1, ... (right padding); pads: any row
        counted = g.op("Mul", [g.op("CumSum", [mask, g.const(1)]), mask])
        positions = g.op("Max", [g.op("Add", [counted, g.const(m.position_offset - 1)]),
                                 g.const(0)])  # fmt: skip
        table = g.weight("embed.position.table", t["embed.position"].numpy())
        x = g.op("Add", [x, g.op("Gather", [table, positions])])
        if "embed.type" in t:
            types_table = g.weight("embed.type.table", t["embed.type"].numpy())
            x = g.op("Add", [x, g.op("Gather", [types_table, types])])
        x = self.norm(g, x, self.norm_params(g, (self.module("embed.norm"), "embed.norm"), False))
        for i in range(m.num_hidden_layers):
            p = f"layers.{i}"
            q, k, v = (self.module(f"{p}.{n}") for n in ("q", "k", "v"))
            attn = SimpleNamespace(qkv=_packed(q, k, v), out=self.module(f"{p}.out"))
            y, b = self._encoder_attention(g, attn, f"enc.{i}.attn", mask32, "", "")(x)
            x = self.skip_norm(g, y, x, self.norm_params(g, (self.module(f"{p}.attn_norm"),
                               f"enc.{i}.attn_norm"), False), b)  # fmt: skip
            ffn = SimpleNamespace(up=self.module(f"{p}.up"), down=self.module(f"{p}.down"))
            y, b = self.feed_forward(g, ffn, f"enc.{i}.ffn")(x)
            x = self.skip_norm(g, y, x, self.norm_params(g, (self.module(f"{p}.ffn_norm"),
                               f"enc.{i}.ffn_norm"), False), b)  # fmt: skip
        g.output(x, "last_hidden_state", TP.FLOAT, [B, S, C])
        if m.num_labels:  # a cross-encoder: the classifier over the first token
            logits = self.classify(g, g.op("Gather", ["last_hidden_state", g.const(0)], axis=1))
            g.output(logits, CLASSIFIER_LOGITS, TP.FLOAT, [B, m.num_labels])
        else:
            g.output(self.pool(g, "last_hidden_state", mask), SENTENCE_EMBEDDING, TP.FLOAT, [B, C])
        return g

    def classify(self, g: Graph, first: str) -> str:
        """(B, C) -> (B, labels): dense, tanh (relu: DistilBERT), out."""
        h, _ = self.linear(g, first, self.module("head.dense"), "head.dense")
        h = g.op("Tanh" if self.m.classifier_act == "tanh" else "Relu", [h])
        return self.linear(g, h, self.module("head.out"), "head.out")[0]

    def pool(self, g: Graph, h: str, mask: str) -> str:
        """(B, S, C) -> (B, C): sentence-transformers' Pooling (mean: over real tokens, the
        count clamped at 1e-9; max: pads at -1e9; cls: the first token), then Normalize."""
        from onnx import TensorProto as TP

        m = g.op("Unsqueeze", [g.op("Cast", [mask], to=TP.FLOAT), g.const([-1])])  # (B, S, 1)
        axis = g.const([1])
        if self.m.pooling == "cls":
            e = g.op("Gather", [h, g.const(0)], axis=1)
        elif self.m.pooling == "max":
            pads = g.op("Mul", [g.op("Sub", [m, g.const(1.0, np.float32)]),
                                g.const(1e9, np.float32)])  # fmt: skip
            e = g.op("ReduceMax", [g.op("Add", [g.op("Mul", [h, m]), pads]), axis], keepdims=0)
        else:
            total = g.op("ReduceSum", [g.op("Mul", [h, m]), axis], keepdims=0)
            count = g.op("Max", [g.op("ReduceSum", [m, axis], keepdims=0),
                                 g.const(1e-9, np.float32)])  # fmt: skip
            e = g.op("Div", [total, count])
        if self.m.normalize:  # F.normalize: x / max(||x||, 1e-12)
            norm = g.op("ReduceL2", [e, g.const([-1])], keepdims=1)
            e = g.op("Div", [e, g.op("Max", [norm, g.const(1e-12, np.float32)])])
        return e


# -- the reference: the folder's float32 weights in numpy ---------------------------------------
def _ln(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _act(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "relu":
        return np.maximum(x, 0)
    if kind == "gelu_tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    from math import erf

    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def reference_embeddings(
    enc: EncoderWeights, ids: np.ndarray, mask: np.ndarray, types: np.ndarray | None = None
) -> np.ndarray:
    """(B, S) -> (B, C) in float64 numpy, independent of the graph: what the gate compares to
    (a cross-encoder: its (B, labels) logits)."""
    m = enc.model
    t = {k: v.double().numpy() for k, v in enc.tensors.items()}
    H, C = m.num_attention_heads, m.hidden_size
    D = C // H
    B, S = ids.shape
    pos = np.maximum(np.cumsum(mask, 1) * mask + m.position_offset - 1, 0)
    x = t["embed.word"][ids] + t["embed.position"][pos]
    if "embed.type" in t:
        x = x + t["embed.type"][np.zeros_like(ids) if types is None else types]
    x = _ln(x, t["embed.norm.weight"], t["embed.norm.bias"], m.layer_norm_eps)
    bias = np.where(mask[:, None, None, :] > 0, 0.0, -np.inf)  # (B, 1, 1, S)

    def lin(h: np.ndarray, name: str) -> np.ndarray:
        return h @ t[f"{name}.weight"].T + t[f"{name}.bias"]

    for i in range(m.num_hidden_layers):
        p = f"layers.{i}"
        q, k, v = (lin(x, f"{p}.{n}").reshape(B, S, H, D).transpose(0, 2, 1, 3) for n in "qkv")
        a = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D) + bias
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        y = (a @ v).transpose(0, 2, 1, 3).reshape(B, S, C)
        x = _ln(x + lin(y, f"{p}.out"), t[f"{p}.attn_norm.weight"], t[f"{p}.attn_norm.bias"],
                m.layer_norm_eps)  # fmt: skip
        y = lin(_act(lin(x, f"{p}.up"), m.hidden_act), f"{p}.down")
        x = _ln(x + y, t[f"{p}.ffn_norm.weight"], t[f"{p}.ffn_norm.bias"], m.layer_norm_eps)
    if m.num_labels:
        h = np.tanh if m.classifier_act == "tanh" else (lambda a: np.maximum(a, 0))
        return lin(h(lin(x[:, 0], "head.dense")), "head.out")
    mf = mask[..., None].astype(np.float64)
    if m.pooling == "cls":
        e = x[:, 0]
    elif m.pooling == "max":
        e = np.where(mf > 0, x, -1e9).max(1)
    else:
        e = (x * mf).sum(1) / np.maximum(mf.sum(1), 1e-9)
    if m.normalize:
        e = e / np.maximum(np.linalg.norm(e, axis=-1, keepdims=True), 1e-12)
    return e


class EncoderParityError(ValueError):
    """A variant's embeddings are not the folder's model's: nothing is written."""


def check_variants(variants: str | list[str] | tuple[str, ...]) -> list[str]:
    if isinstance(variants, str):
        variants = [v.strip() for v in variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in ENCODER_VARIANTS]
    if bad:
        raise ValueError(f"an encoder package has no variant {bad}; valid: "
                         f"{', '.join(ENCODER_VARIANTS)}")  # fmt: skip
    return list(dict.fromkeys(["fp32", *variants]))


def write_encoder_package(
    src: Path, tmp: Path, variants: list[str], verbose: bool
) -> EncoderPackageConfig:
    """Every file of the package into the empty folder `tmp`, the gate passed."""
    enc = load_encoder(src)
    with tempfile.TemporaryDirectory() as work:
        shutil.copyfile(encoder_tokenizer(src, Path(work)), tmp / TOKENIZER_FILE)
    m = enc.model
    metadata = {f"edgeformer.{k}": str(getattr(m, k)) for k in ("vocab_size", "hidden_size",
                "num_attention_heads", "num_hidden_layers", "max_position_embeddings")}  # fmt: skip
    entries: dict[str, VariantEntry] = {}
    for variant in variants:
        t = time.perf_counter()
        spec = VARIANT_SPECS[variant]
        inits: dict[str, np.ndarray] = {}
        proto = EncoderBuilder(enc, spec, inits).graph().proto(OPSET)
        files = write_graphs(tmp, variant, {ENCODER_GRAPH: proto}, metadata)
        weights = files.pop("weights")
        entries[variant] = VariantEntry(files, weights, "float32", spec.description)
        _log(verbose, f"{variant}: {time.perf_counter() - t:.1f} s")
    entries = parity_gate(tmp, enc, entries, verbose)
    listed = [TOKENIZER_FILE, GOLDEN_FILE, *(f for e in entries.values() for f in e.file_names)]
    config = EncoderPackageConfig(
        model=m, pad_id=enc.pad_id, graphs=encoder_io_names(m.num_labels > 0), variants=entries,
        files={name: sha256(tmp / name) for name in listed},
        source={"format": "huggingface", "architecture": enc.architecture}, opset=OPSET,
    )  # fmt: skip
    (tmp / CONFIG_FILE).write_text(json.dumps(config.to_json(), indent=2))
    return config


def parity_gate(
    tmp: Path, enc: EncoderWeights, entries: dict[str, VariantEntry], verbose: bool
) -> dict[str, VariantEntry]:
    """Each variant's embeddings of PROBE_TEXTS against reference_embeddings; the lowest cosine
    and ms per text recorded; below its bound an EncoderParityError."""
    from ..runtime.embed import EncoderTokenizer, run_encoder
    from ..runtime.session import create_session

    tok = EncoderTokenizer.from_file(tmp / TOKENIZER_FILE, enc.model, enc.pad_id)
    cross = enc.model.num_labels > 0
    if cross:  # (query, document) pairs; the logits of every pair compared as one vector
        rows, type_rows = tok.encode_pairs([(PROBE_TEXTS[0], t) for t in PROBE_TEXTS], True)
        ids, mask = tok.pad(rows)
        types: np.ndarray | None = tok.pad_types(type_rows, ids.shape[1])
    else:
        (ids, mask), types = tok.batch(PROBE_TEXTS, truncate=True), None
    want = reference_embeddings(enc, ids, mask, types)
    texts = [[PROBE_TEXTS[0], t] for t in PROBE_TEXTS] if cross else PROBE_TEXTS
    types_or_zeros = np.zeros_like(ids) if types is None else types
    golden = EncoderGolden(texts, ids.tolist(), mask.tolist(), types_or_zeros.tolist(),
                           want.tolist())  # fmt: skip
    (tmp / GOLDEN_FILE).write_text(json.dumps(golden.to_json()))
    output = CLASSIFIER_LOGITS if cross else SENTENCE_EMBEDDING
    out = {}
    for variant, entry in entries.items():
        session = create_session(tmp / entry.files[ENCODER_GRAPH], threads=1)
        t = time.perf_counter()
        got = run_encoder(session, ids, mask, types, output)
        ms = (time.perf_counter() - t) * 1e3 / len(PROBE_TEXTS)
        a, b = (got.reshape(1, -1), want.reshape(1, -1)) if cross else (got, want)
        low = float(cosines(a, b).min())
        rel = float(relative_errors(a, b).max())
        bound = FP32_MIN_COSINE if variant == "fp32" else QUANTIZED_MIN_COSINE[variant]
        _log(verbose, f"{variant}: lowest cosine to the reference {low:.6f} (bound {bound}), "
             f"largest relative error {rel:.1e}")  # fmt: skip
        far = variant == "fp32" and rel > FP32_MAX_RELATIVE_ERROR
        if not np.isfinite(got).all() or low < bound or far:
            raise EncoderParityError(
                f"{variant}: embeddings differ from the folder's model (lowest cosine {low:.6f}, "
                f"bound {bound}; largest relative error {rel:.1e}"
                f"{f', bound {FP32_MAX_RELATIVE_ERROR}' if variant == 'fp32' else ''}): "
                "not written"
            )
        measured = {"min_cosine": low, "max_relative_error": rel, "ms_per_text": ms}
        out[variant] = VariantEntry(entry.files, entry.weights, entry.io_dtype, entry.description,
                                    measured)  # fmt: skip
    return out


__all__ = [
    "EncoderModel", "cosines", "reference_embeddings", "relative_errors", "write_encoder_package",
]  # fmt: skip
