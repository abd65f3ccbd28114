"""config.json read into a typed PackageConfig: what export writes and the runtime reads.

Every check names the key and what it must be (PackageError), so that a damaged or hostile
config is one clear message and never an allocation, a recursion or a traceback. The names and
versions are format.py's; the model's fields are ModelConfig's (config.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

import numpy as np

from .config import FAMILIES, ModelConfig
from .format import (
    CLASSIFIER_ACTIVATIONS,
    CONFIG_FILE,
    ENCODER_ACTIVATIONS,
    ENCODER_FAMILY,
    ENCODER_MODEL_KEYS,
    FORMAT_VERSION,
    GOLDEN_FILE,
    HF_NAMES,
    MIN_ONNXRUNTIME,
    ORT_SUFFIX,
    PACKAGE_FORMAT,
    POOLING_MODES,
    READABLE_VERSIONS,
    SOURCE_TOKENIZER_FILE,
    encoder_io_names,
    io_names,
    model_from_json,
    model_to_json,
    stored_name,
)


class PackageError(ValueError):
    """A model package that is missing, incomplete, corrupt or of the wrong kind."""


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


@dataclass(frozen=True)
class Golden:
    """What the exporter's PyTorch model did on fixed inputs (GOLDEN_FILE): per decoder call c
    (the BOS step / prefill, then one per token) and row b, the token it chose, tokens[c][b],
    and its k largest logits, top_ids[c][b] / top_logits[c][b]."""

    inputs: list[list[int]]  # sources or prompts, unpadded
    tokens: list[list[int]]
    top_ids: list[list[list[int]]]
    top_logits: list[list[list[float]]]
    # how each tokenizer file encoded a probe text at export (exports since 2026-11-25):
    # [{"file": "tokenizer.json", "text": ..., "ids": [...]}]; the runtime re-encodes it at
    # load, so an edited vocabulary (a permuted one decodes to garbage) is an error
    probes: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(
        cls, data: object, vocab_size: int, where: str = GOLDEN_FILE,
        source_vocab: int | None = None,
    ) -> Golden:  # fmt: skip
        """source_vocab: the inputs' (an encoder's own vocabulary), else vocab_size."""
        data = _obj(where, "the top level", data)
        src = vocab_size if source_vocab is None else source_vocab
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
            and all(((a >= 0) & (a < vocab_size)).all() for a in (tokens, top_ids))
            and all(((a >= 0) & (a < src)).all() for a in inputs)
            and np.isfinite(top_logits).all()
        )  # fmt: skip
        if not ok:
            raise PackageError(f"{where}: shapes, ids or logits out of range")
        return cls(
            [r.tolist() for r in inputs], tokens.tolist(), top_ids.tolist(), top_logits.tolist(),
            _probes(where, data.get("probes", []), vocab_size, src),
        )  # fmt: skip


def _probes(where: str, value: object, vocab_size: int, source_vocab: int) -> list[dict]:
    """Each probe's ids within its tokenizer's vocabulary (source_tokenizer.json: the
    sources')."""
    if not isinstance(value, list):
        raise PackageError(f"{where}: probes must be a list")
    for i, p in enumerate(value):
        source = isinstance(p, dict) and p.get("file") == SOURCE_TOKENIZER_FILE
        vocab = source_vocab if source else vocab_size
        ok = (
            isinstance(p, dict) and isinstance(p.get("file"), str)
            and isinstance(p.get("text"), str) and isinstance(p.get("ids"), list)
            and all(_is_id(t, vocab) for t in p["ids"])
        )  # fmt: skip
        if not ok:
            raise PackageError(f"{where}: probes[{i}] must be {{file, text, ids < {vocab}}}")
    return value


def _is_id(value: object, vocab_size: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < vocab_size


@dataclass(frozen=True)
class VariantEntry:
    files: dict[str, str]  # graph -> file
    weights: str | None  # the variant's weights file; None: ORT-format graphs hold their own
    io_dtype: str = "float32"
    description: str = ""
    # what export measured on its machine (runtime.verify over golden.json): agreement (the
    # fraction of decoder calls whose top token is PyTorch's), max_logit_diff, ms_per_token
    measured: dict[str, float] = field(default_factory=dict)

    @property
    def file_names(self) -> list[str]:
        """The variant's files: its graphs, then its weights file when it has one."""
        return [*self.files.values(), *([self.weights] if self.weights else [])]


MEASURED_KEYS = ("agreement", "max_logit_diff", "ms_per_token")
# held-out quality, when the checkpoint's training data is bundled (export.quality): BLEU on
# Multi30k validation pairs (translation) or perplexity on Tiny Shakespeare's (LM)
HELD_OUT_KEYS = ("bleu", "perplexity")


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


def _source(where: str, value: object) -> dict[str, str]:
    """config.json's `source`: short strings only (it is printed by `edgeformer info`)."""
    source = _obj(where, "source", value)
    for key, text in source.items():
        _want(where, f"source.{key}", text, str, "a string")
        if len(text) > 200:
            raise PackageError(f"{where}: source.{key} is longer than 200 characters")
    return source


@dataclass(frozen=True)
class PackageConfig:
    """config.json, typed and checked: what export writes and the runtime reads."""

    family: str
    model: ModelConfig
    special_tokens: SpecialTokens
    graphs: dict[str, dict[str, list[str]]]
    variants: dict[str, VariantEntry]
    files: dict[str, str]  # file -> sha256
    task: dict = field(default_factory=dict)  # e.g. {kind, src_lang, tgt_lang}
    opset: int = 21
    # where the weights came from when not trained here: {"format": "huggingface",
    # "architecture": "Qwen2ForCausalLM"} (written only when set)
    source: dict = field(default_factory=dict)
    min_onnxruntime: str = MIN_ONNXRUNTIME
    format: str = PACKAGE_FORMAT
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict:
        data = asdict(self) | {"model": model_to_json(self.model.to_dict())}
        if not self.source:
            del data["source"]  # a model trained here: the keys of the packages before it
        return data

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
        if family == ENCODER_FAMILY:
            raise PackageError(
                f"{where}: an encoder (sentence-embedding) package: run it with "
                "edgeformer.runtime.embed.Embedder or `edgeformer embed`, not as a translator "
                "or a language model"
            )
        if family not in FAMILIES:
            raise PackageError(f"{where}: family must be one of {FAMILIES}, got {family!r}")
        model = _model(where, _obj(where, "model", data.get("model")), family, fmt)
        special = _obj(where, "special_tokens", data.get("special_tokens"))
        vocab = model.vocab_size
        ids = {k: _int(where, f"special_tokens.{k}", special.get(k), 0, vocab)
               for k in ("pad_id", "bos_id", "eos_id")}  # fmt: skip
        unk = special.get("unk_id")
        if unk is not None:
            _int(where, "special_tokens.unk_id", unk, 0, vocab)
        graphs = _obj(where, "graphs", data.get("graphs"))
        want = io_names(family, model.n_decoder_layers, fmt)
        if graphs != want:
            raise PackageError(f"{where}: graphs do not match the package contract of a {family}")
        variants = {}
        for name, entry in _obj(where, "variants", data.get("variants")).items():
            key, entry, files = _variant_files(where, name, entry, want)
            ort_graphs = all(f.endswith(ORT_SUFFIX) for f in files.values())
            if not (ort_graphs and entry.get("weights") is None):  # ORT: weights inside graphs
                _want(where, f"{key}.weights", entry.get("weights"), str, "a file name")
            measured = entry.get("measured")
            variants[name] = VariantEntry(
                files, entry.get("weights"), str(entry.get("io_dtype", "float32")),
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
            source=_source(where, data.get("source", {})),
            opset=_int(where, "opset", data.get("opset", 21), 1),
            min_onnxruntime=version,
            format_version=fmt,
        )


def _variant_files(
    where: str, name: str, entry: object, graphs: dict
) -> tuple[str, dict, dict[str, str]]:
    """(its key, the entry, {graph: file}) of variant `name`, its files naming every graph."""
    key = f"variants.{name}"
    entry = _obj(where, key, entry)
    files = _names(where, f"{key}.files", entry.get("files"))
    if set(files) != set(graphs):
        raise PackageError(f"{where}: {key}.files must name the graphs {sorted(graphs)}")
    return key, entry, files


# upper bounds on the sizes a config may declare (far above any model this runtime serves)
MODEL_LIMITS = {
    "vocab_size": 1 << 22,
    "d_model": 1 << 16,
    "n_heads": 1 << 10,
    "n_decoder_layers": 1 << 10,
    "max_len": 1 << 20,
}


def _model(where: str, stored: dict, family: str, version: int) -> ModelConfig:
    """config.json's `model` as a ModelConfig: sizes bounded first (a config must not make us
    allocate), then ModelConfig's own checks; every problem a PackageError naming the key."""
    fields = model_from_json(stored, version)
    for name, most in MODEL_LIMITS.items():
        _int(where, stored_name(name, version), fields.get(name), 1, most + 1)
    if fields.get("src_vocab_size") is not None:  # optional: bounded as vocab_size
        most = MODEL_LIMITS["vocab_size"]
        _int(where, "model.src_vocab_size", fields["src_vocab_size"], 1, most + 1)
    if fields.get("family", family) != family:
        raise PackageError(f"{where}: model.family {fields.get('family')!r} != {family!r}")
    try:
        return ModelConfig.from_dict(fields | {"family": family})
    except (TypeError, ValueError) as e:  # ModelConfig's message, in config.json's names
        message = str(e)
        if version != 2:
            for ours, hf in HF_NAMES.items():
                message = re.sub(rf"\b{ours}\b", hf, message)
        raise PackageError(f"{where}: model: {message}") from None


# -- encoder packages (core.format.ENCODER_FAMILY) --------------------------------------------
MAX_LABELS = (1 << 16) - 1  # a cross-encoder's classifier outputs
ENCODER_LIMITS = {k: MODEL_LIMITS.get(k, 1 << 20) for k in ENCODER_MODEL_KEYS} | {
    "vocab_size": MODEL_LIMITS["vocab_size"],
    "hidden_size": MODEL_LIMITS["d_model"],
    "num_attention_heads": MODEL_LIMITS["n_heads"],
    "num_hidden_layers": MODEL_LIMITS["n_decoder_layers"],
    "intermediate_size": 1 << 20,
    "max_position_embeddings": MODEL_LIMITS["max_len"],
    "type_vocab_size": 1 << 10,
}


@dataclass(frozen=True)
class EncoderModel:
    """An encoder's sizes (config.json's `model`, Hugging Face's names) and what its graph
    does after the layers: pooling (core.format.POOLING_MODES), normalize (L2), and the
    tokens a text is cut to (max_seq_length, special tokens included)."""

    architecture: str  # "bert", "distilbert", "roberta", "xlm-roberta"
    vocab_size: int
    hidden_size: int
    num_attention_heads: int
    num_hidden_layers: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    hidden_act: str
    layer_norm_eps: float
    position_offset: int  # the first real token's position id (RoBERTa: pad_token_id + 1)
    pooling: str
    normalize: bool
    max_seq_length: int
    # a cross-encoder: its classifier's labels (0: a sentence-embedding model) and the
    # activation between its two layers (BERT / RoBERTa: tanh, DistilBERT: relu)
    num_labels: int = 0
    classifier_act: str | None = None


@dataclass(frozen=True)
class EncoderPackageConfig:
    """config.json of an encoder package (family "encoder"); docs/package-format.md."""

    model: EncoderModel
    pad_id: int
    graphs: dict[str, dict[str, list[str]]]
    variants: dict[str, VariantEntry]
    files: dict[str, str]  # file name -> sha256
    source: dict[str, str] = field(default_factory=dict)
    opset: int = 21
    min_onnxruntime: str = MIN_ONNXRUNTIME
    format_version: int = FORMAT_VERSION
    family: str = ENCODER_FAMILY

    @property
    def dimension(self) -> int:
        return self.model.hidden_size

    def to_json(self) -> dict:
        data = asdict(self)
        return {"format": PACKAGE_FORMAT, **data}

    @classmethod
    def from_json(cls, data: object, where: str = CONFIG_FILE) -> EncoderPackageConfig:
        """Check types, ranges and names; PackageError names the key and what it must be."""
        data = _obj(where, "the top level", data)
        if data.get("format") != PACKAGE_FORMAT:
            raise PackageError(f"{where}: not an edgeformer model package (format)")
        if data.get("family") != ENCODER_FAMILY:
            raise PackageError(
                f"{where}: a {data.get('family')!r} package, not an encoder (sentence-embedding) "
                "one: run it with Translator / Generator"
            )
        if data.get("format_version") not in READABLE_VERSIONS:
            raise PackageError(f"{where}: format_version {data.get('format_version')!r} unknown")
        model = _obj(where, "model", data.get("model"))
        sizes = {k: _int(where, f"model.{k}", model.get(k), 1, ENCODER_LIMITS[k] + 1)
                 for k in ENCODER_MODEL_KEYS}  # fmt: skip
        if sizes["hidden_size"] % sizes["num_attention_heads"]:
            raise PackageError(f"{where}: model.hidden_size must divide by num_attention_heads")
        _want(where, "model.architecture", model.get("architecture"), str, "a string")
        if model.get("hidden_act") not in ENCODER_ACTIVATIONS:
            raise PackageError(f"{where}: model.hidden_act must be one of {ENCODER_ACTIVATIONS}")
        if model.get("pooling") not in POOLING_MODES:
            raise PackageError(f"{where}: model.pooling must be one of {POOLING_MODES}")
        _want(where, "model.normalize", model.get("normalize"), bool, "true or false")
        eps = model.get("layer_norm_eps")
        _want(where, "model.layer_norm_eps", eps, (int, float), "a number")
        offset = _int(where, "model.position_offset", model.get("position_offset"), 0)
        most = sizes["max_position_embeddings"] - offset
        length = _int(where, "model.max_seq_length", model.get("max_seq_length"), 2, most + 1)
        labels = _int(where, "model.num_labels", model.get("num_labels", 0), 0, MAX_LABELS + 1)
        act = model.get("classifier_act")
        if labels and act not in CLASSIFIER_ACTIVATIONS:
            raise PackageError(f"{where}: model.classifier_act must be one of "
                               f"{CLASSIFIER_ACTIVATIONS}")  # fmt: skip
        encoder = EncoderModel(
            model["architecture"], **sizes, hidden_act=model["hidden_act"],
            layer_norm_eps=float(eps), position_offset=offset,  # type: ignore[arg-type]
            pooling=model["pooling"], normalize=model["normalize"], max_seq_length=length,
            num_labels=labels, classifier_act=act if labels else None,
        )  # fmt: skip
        pad = _int(where, "pad_id", data.get("pad_id"), 0, sizes["vocab_size"])
        graphs = _obj(where, "graphs", data.get("graphs"))
        if graphs != encoder_io_names(labels > 0):
            raise PackageError(f"{where}: graphs do not match the package contract of an encoder")
        variants = {}
        for name, entry in _obj(where, "variants", data.get("variants")).items():
            key, entry, files = _variant_files(where, name, entry, graphs)
            _want(where, f"{key}.weights", entry.get("weights"), str, "a file name")
            variants[name] = VariantEntry(
                files, entry["weights"], "float32", str(entry.get("description", "")),
                _encoder_measured(where, f"{key}.measured", entry.get("measured", {})),
            )  # fmt: skip
        if "fp32" not in variants:
            raise PackageError(f"{where}: variants has no fp32")
        version = data.get("min_onnxruntime", MIN_ONNXRUNTIME)
        _want(where, "min_onnxruntime", version, str, "a version string")
        return cls(
            encoder, pad, graphs, variants, _names(where, "files", data.get("files")),
            _source(where, data.get("source", {})), _int(where, "opset", data.get("opset", 21), 1),
            version, data["format_version"],
        )  # fmt: skip


# what export measured of an encoder variant against the reference embeddings (export/encoder.py)
ENCODER_MEASURED_KEYS = ("min_cosine", "max_relative_error", "ms_per_text")


# an encoder package's bounds against the folder's model (export's parity gate, `verify`)
ENCODER_FP32_MIN_COSINE = 0.9999
# a random-weight encoder's embeddings share one large direction: halving one layer's FFN
# weights still gave cosine 0.99998 (design notes, 2026-12-02), so fp32 is held to the relative
# error too (measured ~1e-6)
ENCODER_FP32_MAX_RELATIVE_ERROR = 1e-4
ENCODER_QUANTIZED_MIN_COSINE = {"int8": 0.99, "int8-dynamic": 0.99, "int4": 0.95}


@dataclass(frozen=True)
class EncoderGolden:
    """An encoder package's GOLDEN_FILE (exports since 2026-12-02): export's probe texts (a
    cross-encoder's: (query, document) pairs), the ids its tokenizer gave them (right-padded,
    with their mask and token types) and the folder's model's output on those ids in float64
    (sentence embeddings (B, C), or a cross-encoder's logits (B, labels)), for `verify`."""

    texts: list  # str, or [query, document]
    ids: list[list[int]]
    mask: list[list[int]]
    token_type_ids: list[list[int]]
    reference: list[list[float]]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(
        cls, data: object, model: EncoderModel, where: str = GOLDEN_FILE
    ) -> EncoderGolden:
        data = _obj(where, "the top level", data)
        try:
            ids, mask, types = (np.asarray(data[k], dtype=np.int64)
                                for k in ("ids", "mask", "token_type_ids"))  # fmt: skip
            ref = np.asarray(data["reference"], dtype=np.float64)
            texts = data["texts"]
        except (KeyError, TypeError, ValueError) as e:
            raise PackageError(
                f"{where}: texts, ids, mask, token_type_ids, reference expected ({e})"
            ) from None
        width = model.num_labels or model.hidden_size
        ok = (
            ids.ndim == 2 and len(ids) > 0 and mask.shape == ids.shape == types.shape
            and 0 < ids.shape[1] <= model.max_seq_length
            and isinstance(texts, list) and len(texts) == len(ids)
            and ((ids >= 0) & (ids < model.vocab_size)).all()
            and ((types >= 0) & (types < model.type_vocab_size)).all()
            and np.isin(mask, (0, 1)).all() and (mask[:, 0] == 1).all()
            and ref.shape == (len(ids), width) and np.isfinite(ref).all()
        )  # fmt: skip
        if not ok:
            raise PackageError(f"{where}: shapes, ids or reference values out of range")
        return cls(texts, ids.tolist(), mask.tolist(), types.tolist(), ref.tolist())


def _encoder_measured(where: str, key: str, value: object) -> dict[str, float]:
    out = {}
    for name, x in _obj(where, key, value).items():
        ok = isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
        if name not in ENCODER_MEASURED_KEYS or not ok:
            raise PackageError(f"{where}: {key}.{name}: one of {ENCODER_MEASURED_KEYS}, a number")
        out[name] = float(x)
    return out
