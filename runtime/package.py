"""The model package: the contract between `edgeformer export` and the runtime (format 4).

A package is a folder:

    config.json                 this contract's metadata (below)
    tokenizer.json              the `tokenizers` tokenizer (of the targets, when the next exists)
    source_tokenizer.json       optional: the sources' own tokenizer (a converted Marian model has
                                two SentencePiece models over one vocabulary); when the checksum
                                list (`files`) names it, the runtime encodes sources with it
    encoder.onnx                encoder-decoder only: source -> cross-attention K/V of every layer
    decoder.onnx                one decoding step, or a prompt prefill, over a preallocated cache
    weights.data                the fp32 weights, shared by the graphs (ONNX external data)
    {graph}.{variant}.onnx      the graphs of a quantized variant (int8, int4) ...
    weights.{variant}.data      ... and its weights
    golden.json                 PyTorch's greedy run on fixed inputs (inputs, chosen tokens and
                                top-16 logits per decoder call), for `edgeformer verify`

Graph inputs/outputs (B batch, S source, T new tokens, M cache capacity, H heads, G key/value
heads of the self-attention cache (model.n_kv_heads, grouped-query attention; H when null),
D head dim, V vocabulary; ids, positions and masks int64, masks 1 = real token):

  encoder      in  input_ids (B,S), attention_mask (B,S)                 (right-padded)
               out present.{i}.encoder.key|value (B,H,S,D)               cross K/V per layer
                   present.{i}.encoder.last_key|last_value (B,1,H*D)     row b's at S_b - 1
  ED decoder   in  input_ids (B,1), position_ids (B,1), attention_mask (B,L),
                   encoder_attention_mask (B,S), past_key_values.{i}.decoder.key|value (B,G,M,D),
                   past_key_values.{i}.encoder.key|value (B,H,S,D),
                   past_key_values.{i}.encoder.last_key|last_value (B,1,H*D)
               out logits (B,V), present.{i}.decoder.key|value (B,G,M,D),
                   present.{i}.encoder.key|value (B,H,S,D)
  LM decoder   in  input_ids (B,T), position_ids (B,T), attention_mask (B,L),
                   past_key_values.{i}.key|value (B,G,M,D)
               out logits (B,V), present.{i}.key|value (B,G,M,D)

The decoder's cache is a buffer of capacity M (up to the model's max_len) that the graph writes
in place when `past_key_values.X` and `present.X` are bound to the same memory (GroupQuery-
Attention's shared buffer); row b holds its tokens in positions 0 .. L_b - 1, where
L_b = attention_mask[b].sum() counts the tokens in the cache *after* this call, and the T new
tokens of row b are written at L_b - T ... L_b - 1 (prefill: right-padded prompts, padding
positions get position id 0 and mask 0). `logits` are those of each row's last new token, the
one with the largest position id. Float tensors are float32.

Format 4 (encoder-decoder): the decoder takes one token per row and call (T = 1), and its
cross-attention is a GroupQueryAttention step whose "new" K/V are each row's last source
token's (the encoder's last_key/last_value; S_b = encoder_attention_mask[b].sum()): it writes
them back at position S_b - 1 of the cross K/V, where they already are, so bound to the same
memory as past_key_values.{i}.encoder.* the cross buffers stay as the encoder made them.
Formats 2 and 3 used MultiHeadAttention there (no last K/V, no cross presents; T any).

config.json keys: format ("edgeformer-package"), format_version (4), family, task (from the
checkpoint, e.g. {kind, src_lang, tgt_lang}), model (the ModelConfig dict), special_tokens
{pad_id, bos_id, eos_id, unk_id}, opset, graphs {name: {inputs, outputs}}, variants {variant:
{files: {graph: file}, weights, io_dtype, description}}, files {file: sha256}, min_onnxruntime.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

PACKAGE_FORMAT = "edgeformer-package"
FORMAT_VERSION = 4
# 2: `model` under ModelConfig's names, no logits_3d; 3: encoder-decoder cross-attention as
# MultiHeadAttention (no last_key/last_value, no cross presents)
READABLE_VERSIONS = (2, 3, 4)
LOGITS_3D = "logits_3d"  # LM decoder, format 3: `logits` as (B, 1, V), for onnxruntime-genai
# config.json's `model` uses Hugging Face's field names where one exists (format 3); the
# runtime and ModelConfig use ours. Fields not listed keep their name in both.
HF_NAMES = {
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "n_encoder_layers": "encoder_layers",
    "n_decoder_layers": "decoder_layers",
    "d_ff": "intermediate_size",
    "activation": "hidden_act",
    "max_len": "max_position_embeddings",
    "tie_embeddings": "tie_word_embeddings",
    "scale_embeddings": "scale_embedding",
    "pad_id": "pad_token_id",
    "bos_id": "bos_token_id",
    "eos_id": "eos_token_id",
}
OUR_NAMES = {hf: ours for ours, hf in HF_NAMES.items()}


def model_to_json(model: dict) -> dict:
    """ModelConfig fields -> config.json's `model` (Hugging Face names where one exists)."""
    return {HF_NAMES.get(k, k): v for k, v in model.items()}


def model_from_json(model: dict, version: int) -> dict:
    """config.json's `model` -> ModelConfig fields (format 2 stored ours already)."""
    return dict(model) if version == 2 else {OUR_NAMES.get(k, k): v for k, v in model.items()}


CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
SOURCE_TOKENIZER_FILE = "source_tokenizer.json"  # optional (encoder-decoder packages)
FAMILIES = ("encoder-decoder", "decoder-only")
MIN_ONNXRUNTIME = "1.22.0"  # GroupQueryAttention with a shared buffer and packed QKV on CPU


@dataclass(frozen=True)
class VariantSpec:
    """How a variant stores its weights. bits None = float32; else quantized by `method`:
    MatMulNBits (symmetric blocks of `block_size` along the input dimension, `accuracy_level`
    4 = int8 compute) or DynamicQuantizeMatMul (8 bits)."""

    name: str
    description: str
    bits: int | None = None  # decoder and encoder linear layers
    embed_bits: int | None = None  # token embedding (GatherBlockQuantized)
    head_bits: int | None = None  # output projection (shares the table when tied)
    block_size: int = 32
    accuracy_level: int = 4  # 0 was slower than fp32 on AVX2 CPUs (README design notes)
    io_dtype: str = "float32"
    # "nbits": MatMulNBits (weights in blocks of block_size, activations too when
    # accuracy_level is 4); "dynamic": DynamicQuantizeMatMul (8-bit only: int8 weights per
    # output column, activations quantized per call to uint8 by onnxruntime)
    method: str = "nbits"
    # 4 bits: each block's scale minimises its squared error (a search below the absmax
    # scale, export/builder.py) instead of onnxruntime's absmax; same format and kernels
    scale_search: bool = False
    # 4-bit linear layers: GPTQ against the activations of training examples when export has
    # them (export/gptq.py; the embedding / output projection keep scale_search); same format
    gptq: bool = False


VARIANT_SPECS: dict[str, VariantSpec] = {
    s.name: s
    for s in (
        VariantSpec("fp32", "float32 (reference)"),
        VariantSpec(
            "int8",
            "MatMulNBits 8-bit weights everywhere, block 32, int8 compute",
            bits=8,
            embed_bits=8,
            head_bits=8,
        ),
        VariantSpec(
            "int4",
            "MatMulNBits 4-bit weights everywhere, block 32 (scales fitted to each block), "
            "int8 compute",
            bits=4,
            embed_bits=4,
            head_bits=4,
            scale_search=True,
            gptq=True,
        ),
        VariantSpec(
            "int8-dynamic",
            "DynamicQuantizeMatMul: int8 weights (a scale per output column) everywhere, "
            "activations quantized per call (one scale per batch): fastest at batch >= 8",
            bits=8,
            embed_bits=8,
            head_bits=8,
            method="dynamic",
        ),
    )
}
VARIANTS = tuple(VARIANT_SPECS)


def variant_spec(name: str, family: str, calibration: str | None = None) -> VariantSpec:
    """The recipe of variant `name` for a model of `family`. A translator's int4 keeps its
    embedding and output projection at 8 bits: 4 bits there lost 0.55 BLEU on a trained
    translator's test set (README, Quantization), 8 bits nothing, at the same batch-1 speed;
    an LM keeps 4 bits everywhere (within its bound, and its head is a larger share of a step).
    calibration: what a GPTQ variant's linear layers were fitted to ("GPTQ on 512 training
    examples"), for its description; None: not calibrated (scales fitted to each block)."""
    spec = VARIANT_SPECS[name]
    if name != "int4":
        return spec
    how = "scales fitted to each block" if calibration is None else calibration
    if family == "encoder-decoder":
        return replace(
            spec,
            embed_bits=8,
            head_bits=8,
            description=f"MatMulNBits 4-bit weights, block 32 ({how}), int8 compute; 8-bit "
            "embedding and output projection",
        )
    return replace(
        spec,
        description=f"MatMulNBits 4-bit weights everywhere, block 32 ({how}), int8 compute",
    )


def graph_names(family: str) -> tuple[str, ...]:
    return ("encoder", "decoder") if family == "encoder-decoder" else ("decoder",)


def graph_file(graph: str, variant: str) -> str:
    return f"{graph}.onnx" if variant == "fp32" else f"{graph}.{variant}.onnx"


def weights_file(variant: str) -> str:
    return "weights.data" if variant == "fp32" else f"weights.{variant}.data"


def cache_names(family: str, n_layers: int, prefix: str = "past_key_values") -> list[str]:
    """The decoder's self-attention cache names, per layer key then value."""
    kind = ".decoder" if family == "encoder-decoder" else ""
    return [f"{prefix}.{i}{kind}.{kv}" for i in range(n_layers) for kv in ("key", "value")]


def cross_names(
    n_layers: int, prefix: str = "past_key_values", version: int = FORMAT_VERSION
) -> list[str]:
    """The encoder-decoder's cross-attention names per layer (encoder outputs: prefix 'present'):
    K/V (B,H,S,D), then (format 4) the K/V of each row's last source token (B,1,H*D)."""
    kinds = ("key", "value", "last_key", "last_value") if version >= 4 else ("key", "value")
    return [f"{prefix}.{i}.encoder.{kv}" for i in range(n_layers) for kv in kinds]


def io_names(
    family: str, n_layers: int, version: int = FORMAT_VERSION
) -> dict[str, dict[str, list[str]]]:
    """The input and output names of every graph of a package of this family (and format)."""
    step = ["input_ids", "position_ids", "attention_mask"]
    if family == "encoder-decoder":
        cross = cross_names(n_layers, version=version)
        per = len(cross) // n_layers
        past = [
            n
            for i in range(n_layers)
            for n in (
                *cache_names(family, n_layers)[2 * i : 2 * i + 2],
                *cross[per * i : per * (i + 1)],
            )  # fmt: skip
        ]
        # format 4: the cross K/V buffers come back as outputs (written in place, unchanged)
        shared = [n for n in cross_names(n_layers, "present", version) if ".last_" not in n]
        shared = shared if version >= 4 else []
        return {
            "encoder": {
                "inputs": ["input_ids", "attention_mask"],
                "outputs": cross_names(n_layers, "present", version),
            },
            "decoder": {
                "inputs": [*step, "encoder_attention_mask", *past],
                "outputs": ["logits", *cache_names(family, n_layers, "present"), *shared],
            },
        }
    extra = [LOGITS_3D] if version >= 3 else []  # format 2 had no 3-D logits
    return {
        "decoder": {
            "inputs": [*step, *cache_names(family, n_layers)],
            "outputs": ["logits", *cache_names(family, n_layers, "present"), *extra],
        }
    }


def sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


ALIGN = 4096  # external-data offsets on page boundaries: onnxruntime can mmap them
INLINE_BYTES = 1024  # smaller initializers stay inside the graph


def write_graphs(folder: Path, variant: str, protos: dict) -> dict[str, str]:
    """Save a variant's graphs (onnx ModelProtos with inline initializers) into `folder`.

    Initializers of INLINE_BYTES or more go to the variant's one weights file, each distinct
    content once (the tied embedding and output projection, shared by encoder and decoder,
    are stored once). Returns {graph: file name}, the weights file under "weights".
    """
    import onnx
    from onnx.external_data_helper import set_external_data

    weights = weights_file(variant)
    offsets: dict[bytes, tuple[int, int]] = {}
    files = {}
    with open(folder / weights, "wb") as data:
        for graph, proto in protos.items():
            for t in proto.graph.initializer:
                raw = t.raw_data
                if len(raw) < INLINE_BYTES:
                    continue
                key = hashlib.sha256(raw).digest()
                if key not in offsets:
                    data.seek(-data.tell() % ALIGN, os.SEEK_CUR)
                    offsets[key] = (data.tell(), len(raw))
                    data.write(raw)
                offset, length = offsets[key]
                set_external_data(t, weights, offset, length)
                t.ClearField("raw_data")
            onnx.save_model(proto, folder / graph_file(graph, variant))
            files[graph] = graph_file(graph, variant)
    return {**files, "weights": weights}


class PackageError(ValueError):
    """A model package that is missing, incomplete, corrupt or of the wrong kind."""


# upper bounds on the sizes a config may declare (far above any model this runtime serves)
MODEL_LIMITS = {
    "vocab_size": 1 << 22,
    "d_model": 1 << 16,
    "n_heads": 1 << 10,
    "n_decoder_layers": 1 << 10,
    "max_len": 1 << 20,
}


def _want(where: str, key: str, value: object, kind: type | tuple, what: str) -> None:
    ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
    if not ok:
        raise PackageError(f"{where}: {key} must be {what}, got {value!r}")


def _int(where: str, key: str, value: object, low: int, high: int | None = None) -> int:
    _want(where, key, value, int, "an integer")
    assert isinstance(value, int)
    if value < low or (high is not None and value >= high):
        bound = f">= {low}" if high is None else f"in [{low}, {high})"
        raise PackageError(f"{where}: {key} must be {bound}, got {value}")
    return value


def _obj(where: str, key: str, value: object) -> dict:
    _want(where, key, value, dict, "a JSON object")
    assert isinstance(value, dict)
    return value


def _names(where: str, key: str, value: object) -> dict[str, str]:
    for name, file in _obj(where, key, value).items():
        _want(where, f"{key}.{name}", file, str, "a string")
    return value  # type: ignore[return-value]


@dataclass(frozen=True)
class SpecialTokens:
    pad_id: int
    bos_id: int
    eos_id: int
    unk_id: int | None = None


GOLDEN_FILE = "golden.json"  # PyTorch's greedy run on fixed inputs, for `edgeformer verify`


@dataclass(frozen=True)
class Golden:
    """What the exporter's PyTorch model did on fixed inputs (GOLDEN_FILE): per decoder call c
    (the BOS step / prefill, then one per token) and row b, the token it chose, tokens[c][b],
    and its k largest logits, top_ids[c][b] / top_logits[c][b]."""

    inputs: list[list[int]]  # sources or prompts, unpadded
    tokens: list[list[int]]
    top_ids: list[list[list[int]]]
    top_logits: list[list[list[float]]]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object, vocab_size: int, where: str = GOLDEN_FILE) -> Golden:
        data = _obj(where, "the top level", data)
        try:
            inputs = [np.asarray(r, dtype=np.int64) for r in data["inputs"]]
            tokens = np.asarray(data["tokens"], dtype=np.int64)  # (calls, B)
            top_ids = np.asarray(data["top_ids"], dtype=np.int64)  # (calls, B, k)
            top_logits = np.asarray(data["top_logits"], dtype=np.float64)
        except (KeyError, TypeError, ValueError) as e:
            raise PackageError(
                f"{where}: inputs, tokens, top_ids, top_logits expected ({e})"
            ) from None
        B = len(inputs)
        ok = (
            B > 0
            and all(r.ndim == 1 and len(r) > 0 for r in inputs)
            and tokens.ndim == 2 and tokens.shape[1] == B and len(tokens) > 0
            and top_ids.ndim == 3 and top_ids.shape[:2] == tokens.shape
            and top_logits.shape == top_ids.shape
            and all(((a >= 0) & (a < vocab_size)).all() for a in (tokens, top_ids, *inputs))
            and np.isfinite(top_logits).all()
        )  # fmt: skip
        if not ok:
            raise PackageError(f"{where}: shapes, ids or logits out of range")
        return cls(
            [r.tolist() for r in inputs], tokens.tolist(), top_ids.tolist(), top_logits.tolist()
        )


@dataclass(frozen=True)
class VariantEntry:
    files: dict[str, str]  # graph -> file
    weights: str  # the variant's weights file
    io_dtype: str = "float32"
    description: str = ""
    # what export measured on its machine (runtime.verify over golden.json): agreement (the
    # fraction of decoder calls whose top token is PyTorch's), max_logit_diff, ms_per_token
    measured: dict[str, float] = field(default_factory=dict)


MEASURED_KEYS = ("agreement", "max_logit_diff", "ms_per_token")
# held-out quality, when the checkpoint's training data is bundled (export.quality): BLEU on
# Multi30k validation pairs (translation) or perplexity on Tiny Shakespeare's (LM)
HELD_OUT_KEYS = ("bleu", "perplexity")
# variant="auto": the largest quality loss (1 - agreement with PyTorch's golden run) accepted
# by default where held-out quality was not measured (pick_variant)
MAX_QUALITY_LOSS = 0.05
# ... and, where held-out quality was measured, the project's bounds against fp32's
MAX_BLEU_LOSS = 0.5  # BLEU points
MAX_PERPLEXITY_INCREASE = 0.03  # relative


def _measured(where: str, key: str, value: object) -> dict[str, float]:
    value = _obj(where, key, value)
    out = {}
    for name in MEASURED_KEYS:
        x = value.get(name)
        if not isinstance(x, int | float) or isinstance(x, bool) or not 0 <= x < math.inf:
            raise PackageError(f"{where}: {key}.{name} must be a number >= 0, got {x!r}")
        if name == "agreement" and x > 1:
            raise PackageError(f"{where}: {key}.agreement must be in [0, 1], got {x!r}")
        out[name] = float(x)
    for name in HELD_OUT_KEYS:  # optional
        x = value.get(name)
        if x is None:
            continue
        if not isinstance(x, int | float) or isinstance(x, bool) or not 0 <= x < math.inf:
            raise PackageError(f"{where}: {key}.{name} must be a number >= 0, got {x!r}")
        out[name] = float(x)
    return out


def held_out_loss(measured: dict[str, dict[str, float]], variant: str) -> str | None:
    """Why `variant`'s held-out quality is outside the project's bounds against fp32 (None: it
    is within them, or nothing was measured)."""
    m, ref = measured[variant], measured.get("fp32", {})
    if "bleu" in m and "bleu" in ref and ref["bleu"] - m["bleu"] > MAX_BLEU_LOSS:
        return f"BLEU {m['bleu'] - ref['bleu']:+.2f} (bound -{MAX_BLEU_LOSS})"
    if "perplexity" in m and "perplexity" in ref:
        rise = m["perplexity"] / ref["perplexity"] - 1
        if rise > MAX_PERPLEXITY_INCREASE:
            return f"perplexity {rise:+.1%} (bound +{MAX_PERPLEXITY_INCREASE:.0%})"
    return None


def pick_variant(config: PackageConfig, max_quality_loss: float | None = None) -> tuple[str, str]:
    """(variant, why) for variant="auto": the fastest variant export measured within the quality
    bounds; fp32 when nothing was measured (a package exported before measurements) or nothing
    else qualifies.

    The bounds: held-out BLEU / perplexity, where export measured them (a checkpoint trained on
    the bundled data), within MAX_BLEU_LOSS / MAX_PERPLEXITY_INCREASE of fp32's; and the loss
    1 - agreement with PyTorch on golden.json at most `max_quality_loss`. None (the default):
    held-out quality alone decides where it was measured (agreement on three short inputs is a
    coarse proxy that a variant inside the BLEU bound can fail), agreement at most
    MAX_QUALITY_LOSS where it was not."""
    if max_quality_loss is not None and not 0 <= max_quality_loss <= 1:
        raise ValueError(f"max_quality_loss={max_quality_loss} must be in [0, 1]")
    measured = {k: v.measured for k, v in config.variants.items() if v.measured}
    if "fp32" not in measured:
        return "fp32", "no export measurements in this package: fp32"
    held = {k: held_out_loss(measured, k) for k in measured}
    has_held_out = any(key in measured["fp32"] for key in HELD_OUT_KEYS)
    bound = max_quality_loss
    if bound is None:
        bound = 1.0 if has_held_out else MAX_QUALITY_LOSS

    def agreement_loss(k: str) -> str | None:  # why k fails the agreement bound
        loss = 1 - measured[k]["agreement"]
        return f"1 - agreement {loss:.3f}" if loss > bound + 1e-12 else None

    why_not = {k: held[k] or agreement_loss(k) for k in measured}
    ok = {k: m for k, m in measured.items() if why_not[k] is None}
    if not ok:  # fp32 itself failed its agreement bound (it disagreed with PyTorch at export)
        return "fp32", f"no variant within the bounds ({why_not['fp32']}): fp32"
    best = min(ok, key=lambda k: ok[k]["ms_per_token"])
    left = sorted(set(measured) - set(ok))
    others = "; too lossy: " + ", ".join(f"{k} {why_not[k]}" for k in left) if left else ""
    rules = []
    if has_held_out:
        key = next(k for k in HELD_OUT_KEYS if k in measured["fp32"])
        name, bound_text = ("BLEU", f"-{MAX_BLEU_LOSS}") if key == "bleu" else (
            "perplexity", f"+{MAX_PERPLEXITY_INCREASE:.0%}"
        )  # fmt: skip
        value = f"{ok[best][key]:.2f} " if key in ok[best] else ""
        rules.append(
            f"held-out {name} {value}against fp32's {measured['fp32'][key]:.2f} "
            f"(bound {bound_text})"
        )
    if bound < 1:
        rules.append(f"1 - agreement with PyTorch <= {bound:g} ({1 - ok[best]['agreement']:.3f})")
    within = " and ".join(rules) or "no quality bound"
    why = (
        f"{best}: fastest at export ({ok[best]['ms_per_token']:.3f} ms/token) with {within}{others}"
    )
    return best, why


@dataclass(frozen=True)
class PackageConfig:
    """config.json, typed and checked: what export writes and the runtime reads."""

    family: str
    model: dict  # the ModelConfig fields (edgeformer.models.ModelConfig.from_dict reads it)
    special_tokens: SpecialTokens
    graphs: dict[str, dict[str, list[str]]]
    variants: dict[str, VariantEntry]
    files: dict[str, str]  # file -> sha256
    task: dict = field(default_factory=dict)  # e.g. {kind, src_lang, tgt_lang}
    opset: int = 21
    min_onnxruntime: str = MIN_ONNXRUNTIME
    format: str = PACKAGE_FORMAT
    format_version: int = FORMAT_VERSION

    # the model fields the runtime uses, checked by from_json
    @property
    def n_layers(self) -> int:
        return self.model["n_decoder_layers"]

    @property
    def n_heads(self) -> int:
        return self.model["n_heads"]

    @property
    def n_kv_heads(self) -> int:
        """Heads of the self-attention cache (grouped-query attention); n_heads when absent."""
        return self.model.get("n_kv_heads") or self.model["n_heads"]

    @property
    def head_dim(self) -> int:
        return self.model["d_model"] // self.model["n_heads"]

    @property
    def max_len(self) -> int:
        return self.model["max_len"]

    @property
    def vocab_size(self) -> int:
        return self.model["vocab_size"]

    def to_json(self) -> dict:
        return asdict(self) | {"model": model_to_json(self.model)}

    @classmethod
    def from_json(cls, data: object, where: str = CONFIG_FILE) -> PackageConfig:
        """Check types, ranges and names; PackageError names the key and what it must be."""
        data = _obj(where, "the top level", data)
        if data.get("format") != PACKAGE_FORMAT:
            raise PackageError(f"{where}: not an edgeformer model package (format)")
        fmt = data.get("format_version")
        if fmt not in READABLE_VERSIONS:
            raise PackageError(
                f"{where}: format_version {fmt!r}; this runtime reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))} (re-export the checkpoint with this "
                "edgeformer)"
            )
        family = data.get("family")
        if family not in FAMILIES:
            raise PackageError(f"{where}: family must be one of {FAMILIES}, got {family!r}")
        model = model_from_json(_obj(where, "model", data.get("model")), fmt)

        def stored(name: str) -> str:  # a model field as config.json names it
            return f"model.{HF_NAMES.get(name, name) if fmt != 2 else name}"

        for name, most in MODEL_LIMITS.items():  # bounded: a config must not make us allocate
            _int(where, stored(name), model.get(name), 1, most + 1)
        if model["d_model"] % model["n_heads"]:
            raise PackageError(
                f"{where}: {stored('d_model')} is not divisible by {stored('n_heads')}"
            )
        if model.get("n_kv_heads") is not None:
            kv = _int(where, stored("n_kv_heads"), model["n_kv_heads"], 1, model["n_heads"] + 1)
            if model["n_heads"] % kv:
                raise PackageError(
                    f"{where}: {stored('n_heads')} is not divisible by {stored('n_kv_heads')}"
                )
        if model.get("family", family) != family:
            raise PackageError(f"{where}: model.family {model.get('family')!r} != {family!r}")
        special = _obj(where, "special_tokens", data.get("special_tokens"))
        vocab = model["vocab_size"]
        ids = {k: _int(where, f"special_tokens.{k}", special.get(k), 0, vocab)
               for k in ("pad_id", "bos_id", "eos_id")}  # fmt: skip
        unk = special.get("unk_id")
        if unk is not None:
            _int(where, "special_tokens.unk_id", unk, 0, vocab)
        graphs = _obj(where, "graphs", data.get("graphs"))
        want = io_names(family, model["n_decoder_layers"], fmt)
        if graphs != want:
            raise PackageError(f"{where}: graphs do not match the package contract of a {family}")
        variants = {}
        for name, entry in _obj(where, "variants", data.get("variants")).items():
            key = f"variants.{name}"
            entry = _obj(where, key, entry)
            files = _names(where, f"{key}.files", entry.get("files"))
            if set(files) != set(want):
                raise PackageError(f"{where}: {key}.files must name the graphs {sorted(want)}")
            _want(where, f"{key}.weights", entry.get("weights"), str, "a file name")
            measured = entry.get("measured")
            variants[name] = VariantEntry(
                files, entry["weights"], str(entry.get("io_dtype", "float32")),
                str(entry.get("description", "")),
                _measured(where, f"{key}.measured", measured) if measured else {},
            )  # fmt: skip
        if "fp32" not in variants:
            raise PackageError(f"{where}: variants has no fp32")
        version = data.get("min_onnxruntime", MIN_ONNXRUNTIME)
        _want(where, "min_onnxruntime", version, str, "a version string")
        return cls(
            family=family,
            model=model,
            special_tokens=SpecialTokens(**ids, unk_id=unk),
            graphs=graphs,
            variants=variants,
            files=_names(where, "files", data.get("files")),
            task=_obj(where, "task", data.get("task", {})),
            opset=_int(where, "opset", data.get("opset", 21), 1),
            min_onnxruntime=version,
            format_version=fmt,
        )


@dataclass
class Package:
    path: Path
    config: PackageConfig

    @property
    def family(self) -> str:
        return self.config.family

    @property
    def variants(self) -> list[str]:
        return list(self.config.variants)

    def variant(self, name: str) -> VariantEntry:
        if name not in self.config.variants:
            raise PackageError(
                f"package {self.path} has no variant {name!r}; it has {self.variants}"
            )
        return self.config.variants[name]

    def file(self, graph: str, variant: str = "fp32") -> Path:
        return self.path / self.variant(variant).files[graph]

    @property
    def source_tokenizer(self) -> Path:
        """The tokenizer of the sources: source_tokenizer.json when listed, else tokenizer.json."""
        own = SOURCE_TOKENIZER_FILE in self.config.files
        return self.path / (SOURCE_TOKENIZER_FILE if own else TOKENIZER_FILE)

    def generation_settings(self) -> dict:
        """The default decoding settings of generation_config.json, as GenerationOptions
        fields ({} for a package without one)."""
        if GENERATION_CONFIG_FILE not in self.config.files:
            return {}
        where = f"model package {self.path}: {GENERATION_CONFIG_FILE}"
        try:
            data = json.loads((self.path / GENERATION_CONFIG_FILE).read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise PackageError(f"{where} is not valid JSON ({e})") from None
        return generation_settings(data, self.config, where)

    def golden(self) -> Golden:
        """The exporter's PyTorch reference run (packages exported before it have none)."""
        if GOLDEN_FILE not in self.config.files:
            raise PackageError(
                f"model package {self.path} has no {GOLDEN_FILE} (exported by an older "
                "edgeformer): re-export it to verify it"
            )
        data = json.loads((self.path / GOLDEN_FILE).read_text())
        return Golden.from_json(data, self.config.vocab_size, f"{self.path / GOLDEN_FILE}")


def _inside(path: Path, name: object) -> Path:
    """The package file `name`: a plain file name that stays inside the package after symlinks
    are resolved. The error is the same whether or not an outside target exists."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or any(c in name for c in "/\\\0")
        or (path / name).resolve().parent != path.resolve()
    ):
        raise PackageError(
            f"model package {path}: {name!r} is not a file name inside the package "
            "(paths, '..' and links out of the package are refused)"
        )
    return path / name


def load_package(path: str | os.PathLike, verify: bool = True) -> Package:
    """Read and check a package folder: typed config, file names, every listed file present,
    checksums (verify=True). Nothing outside the folder is ever opened."""
    path = Path(path)
    if not path.is_dir():
        raise PackageError(f"model package not found: {path} is not a folder")
    cfg_path = path / CONFIG_FILE
    if not cfg_path.is_file():
        raise PackageError(f"model package {path} has no {CONFIG_FILE}")
    try:
        data = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PackageError(f"model package {path}: {CONFIG_FILE} is not valid JSON ({e})") from None
    config = PackageConfig.from_json(data, f"model package {path}: {CONFIG_FILE}")
    listed = config.files
    referenced = [f for v in config.variants.values() for f in (*v.files.values(), v.weights)]
    for name in [*listed, *referenced, TOKENIZER_FILE]:  # names checked before any file is read
        _inside(path, name)
        if name not in listed:
            raise PackageError(f"model package {path}: {name!r} is not in the checksum list")
    for name, digest in listed.items():
        f = path / name
        if not f.is_file():
            raise PackageError(f"model package {path} is missing {name}")
        if verify and sha256(f) != digest:
            raise PackageError(
                f"model package {path}: checksum mismatch for {name} (file changed or corrupt)"
            )
    return Package(path, config)


# ---- generation_config.json: default decoding settings (Hugging Face's file and names) ---------

GENERATION_CONFIG_FILE = "generation_config.json"
# Hugging Face's generation_config.json fields the runtime reads -> GenerationOptions fields
GENERATION_FIELDS = {
    "do_sample": "sampling",
    "num_beams": "num_beams",
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "repetition_penalty": "repetition_penalty",
    "length_penalty": "length_penalty",
    "no_repeat_ngram_size": "no_repeat_ngram_size",
    "early_stopping": "early_stopping",
    "max_new_tokens": "max_new_tokens",
    "min_new_tokens": "min_new_tokens",
    "num_return_sequences": "num_hypotheses",
    "bad_words_ids": "suppress_sequences",
}
HF_SAMPLING_TOP_K = 50  # transformers' top_k when do_sample is set and top_k is not


def default_generation_config(config: PackageConfig) -> dict:
    """What export writes for a model without its own generation_config.json: the special ids
    and greedy search (GenerationOptions' other defaults apply)."""
    sp = config.special_tokens
    ids = {"bos_token_id": sp.bos_id, "eos_token_id": sp.eos_id, "pad_token_id": sp.pad_id}
    if config.family == "encoder-decoder":
        ids["decoder_start_token_id"] = sp.bos_id
    return ids | {"do_sample": False, "num_beams": 1}


def generation_settings(data: object, config: PackageConfig, where: str) -> dict:
    """generation_config.json -> {GenerationOptions field: value} for the fields it sets (see
    GENERATION_FIELDS; eos_token_id lists add end tokens; other fields are ignored), checked:
    settings GenerationOptions refuses are a PackageError naming `where`."""
    from .decoding import GenerationOptions

    data = _obj(where, "the top level", data)
    out: dict = {}
    for hf, ours in GENERATION_FIELDS.items():
        if data.get(hf) is not None:
            out[ours] = data[hf]
    if out.get("early_stopping") == "never":
        out["early_stopping"] = False
    if out.get("sampling") and "top_k" not in out:
        out["top_k"] = HF_SAMPLING_TOP_K
    if isinstance(out.get("suppress_sequences"), list):
        out["suppress_sequences"] = [tuple(s) for s in out["suppress_sequences"]]
    eos = data.get("eos_token_id")
    if isinstance(eos, list):  # several end tokens: those besides the model's EOS
        out["end_token"] = [i for i in eos if i != config.special_tokens.eos_id]
    try:
        GenerationOptions(**out)
    except (TypeError, ValueError) as e:
        raise PackageError(f"{where}: {e}") from None
    return out


# ---- genai_config.json: the LM decoder as onnxruntime-genai runs it ----------------------------

GENAI_CONFIG_FILE = "genai_config.json"  # decoder-only packages


def genai_config(config: PackageConfig, variant: str = "fp32") -> dict:
    """onnxruntime-genai's config for a decoder-only package's `variant` (model type "decoder":
    genai's generic decoder-only LLM): our IO names, the 3-D logits, the shared cache buffer."""
    m = config.model
    sp = config.special_tokens
    decoder = {
        "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
        "filename": graph_file("decoder", variant),
        "head_size": config.head_dim,
        "hidden_size": m["d_model"],
        "num_attention_heads": config.n_heads,
        "num_hidden_layers": config.n_layers,
        "num_key_value_heads": config.n_kv_heads,
        "inputs": {
            "input_ids": "input_ids",
            "position_ids": "position_ids",
            "attention_mask": "attention_mask",
            "past_key_names": "past_key_values.%d.key",
            "past_value_names": "past_key_values.%d.value",
        },
        "outputs": {
            "logits": LOGITS_3D,
            "present_key_names": "present.%d.key",
            "present_value_names": "present.%d.value",
        },
    }
    model = {
        "type": "decoder",
        "vocab_size": config.vocab_size,
        "context_length": config.max_len,
        "bos_token_id": sp.bos_id,
        "eos_token_id": sp.eos_id,
        "pad_token_id": sp.pad_id,
        "decoder": decoder,
    }
    search = {
        "max_length": config.max_len,
        "past_present_share_buffer": True,
        "do_sample": False,
        "num_beams": 1,
    }
    return {"model": model, "search": search}
