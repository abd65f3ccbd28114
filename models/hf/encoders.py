"""Encoder-only Hugging Face folders (BERT, DistilBERT, RoBERTa, XLM-R; sentence-transformers'
layout too) read into one EncoderWeights: the sizes, the pooling, the tensors under one naming.

One EncoderLoader per architecture, as loaders.py has one Loader per decoder architecture: it
maps config.json onto schema.EncoderModel's fields and the folder's tensor names onto ours
(`embed.*`, `layers.{i}.*`). export/encoder.py builds the graph from the result.

    folder/config.json, model.safetensors      the transformers model (BertModel, ...)
    folder/modules.json                        sentence-transformers: its modules, in order
    folder/1_Pooling/config.json               pooling_mode_{cls,mean,max}_tokens
    folder/2_Normalize                         an L2 normalisation after the pooling
    folder/sentence_bert_config.json           max_seq_length (the tokens a text is cut to)

A plain transformers folder (no modules.json) gets mean pooling without normalisation, as
sentence-transformers gives such a folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from ...core.format import POOLING_MODES
from ...core.schema import EncoderModel
from . import files
from .fields import Fields
from .loaders import HF_TOKENIZER, WeightReader

# the head modules of these classes sit beside the encoder and are left out (the embedding is
# the encoder's); a cross-encoder's classifier would be a different package (a score, not a
# vector): refused with that said
HEADS_IGNORED = ("pooler.", "cls.", "lm_head.", "vocab_transform.", "vocab_layer_norm.",
                 "vocab_projector.")  # fmt: skip
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "relu": "relu"}  # fmt: skip


@dataclass
class EncoderWeights:
    """What the graph is built from: the sizes and pooling, and the tensors under our names
    (float32, PyTorch layout: a linear's weight is (out, in))."""

    model: EncoderModel
    pad_id: int
    tensors: dict[str, torch.Tensor]
    architecture: str  # config.json's architectures[0]


class EncoderLoader:
    """One encoder architecture: config mapping, weight mapping."""

    architectures: ClassVar[tuple[str, ...]] = ()
    model_types: ClassVar[tuple[str, ...]] = ()
    prefix: ClassVar[str] = ""  # a task model's base prefix ("bert.")
    defaults: ClassVar[dict[str, Any]] = {}

    def sizes(self, f: Fields) -> dict[str, Any]:
        raise NotImplementedError

    def layer_names(self, i: int) -> dict[str, str]:
        """Our name (without `layers.{i}.`) -> the folder's (without its prefix)."""
        raise NotImplementedError

    embed_names: ClassVar[dict[str, str]] = {}

    # a cross-encoder's classifier: (its first layer, its second layer, the activation between)
    classifier: ClassVar[tuple[str, str, str]] = ("", "", "")

    def weights(
        self, w: WeightReader, n_layers: int, classifier: bool = False
    ) -> dict[str, torch.Tensor]:
        out = {ours: w[theirs] for ours, theirs in self.embed_names.items() if theirs in w}
        if classifier:
            first, second, _ = self.classifier
            for part in ("weight", "bias"):
                out[f"head.dense.{part}"] = w[f"{first}.{part}"]
                out[f"head.out.{part}"] = w[f"{second}.{part}"]
        for i in range(n_layers):
            for ours, theirs in self.layer_names(i).items():
                out[f"layers.{i}.{ours}"] = w[theirs]
        return out


class BertLoader(EncoderLoader):
    architectures: ClassVar[tuple[str, ...]] = (
        "BertModel",
        "BertForMaskedLM",
        "BertForPreTraining",
        "BertForSequenceClassification",
    )
    model_types: ClassVar[tuple[str, ...]] = ("bert",)
    classifier = ("pooler.dense", "classifier", "tanh")
    defaults = {"hidden_act": "gelu", "layer_norm_eps": 1e-12, "type_vocab_size": 2,
                "pad_token_id": 0, "position_embedding_type": "absolute"}  # fmt: skip
    embed_names = {
        "embed.word": "embeddings.word_embeddings.weight",
        "embed.position": "embeddings.position_embeddings.weight",
        "embed.type": "embeddings.token_type_embeddings.weight",
        "embed.norm.weight": "embeddings.LayerNorm.weight",
        "embed.norm.bias": "embeddings.LayerNorm.bias",
    }

    def sizes(self, f: Fields) -> dict[str, Any]:
        f.require("position_embedding_type", ("absolute",), "absolute")
        return {
            "vocab_size": f.positive("vocab_size"),
            "hidden_size": f.positive("hidden_size"),
            "num_attention_heads": f.positive("num_attention_heads"),
            "num_hidden_layers": f.positive("num_hidden_layers"),
            "intermediate_size": f.positive("intermediate_size"),
            "max_position_embeddings": f.positive("max_position_embeddings"),
            "type_vocab_size": f.positive("type_vocab_size"),
            "hidden_act": ACTIVATIONS[str(f.require("hidden_act", tuple(ACTIVATIONS)))],
            "layer_norm_eps": f.number("layer_norm_eps"),
            "position_offset": self.position_offset(f),
        }

    def position_offset(self, f: Fields) -> int:
        return 0

    def layer_names(self, i: int) -> dict[str, str]:
        p = f"encoder.layer.{i}."
        out = {}
        for ours, theirs in (
            ("q", "attention.self.query"), ("k", "attention.self.key"),
            ("v", "attention.self.value"), ("out", "attention.output.dense"),
            ("attn_norm", "attention.output.LayerNorm"), ("up", "intermediate.dense"),
            ("down", "output.dense"), ("ffn_norm", "output.LayerNorm"),
        ):  # fmt: skip
            out[f"{ours}.weight"], out[f"{ours}.bias"] = f"{p}{theirs}.weight", f"{p}{theirs}.bias"
        return out


class RobertaLoader(BertLoader):
    architectures = ("RobertaModel", "RobertaForMaskedLM", "XLMRobertaModel",
                     "XLMRobertaForMaskedLM", "RobertaForSequenceClassification",
                     "XLMRobertaForSequenceClassification")  # fmt: skip
    classifier = ("classifier.dense", "classifier.out_proj", "tanh")
    model_types = ("roberta", "xlm-roberta")
    defaults = BertLoader.defaults | {"type_vocab_size": 1, "pad_token_id": 1}

    def position_offset(self, f: Fields) -> int:
        # RoBERTa's positions start after padding_idx (create_position_ids_from_input_ids)
        return int(f.get("pad_token_id", 1)) + 1  # type: ignore[call-overload]


class DistilBertLoader(EncoderLoader):
    architectures = ("DistilBertModel", "DistilBertForMaskedLM",
                     "DistilBertForSequenceClassification")  # fmt: skip
    classifier = ("pre_classifier", "classifier", "relu")
    model_types = ("distilbert",)
    defaults = {"activation": "gelu", "pad_token_id": 0, "sinusoidal_pos_embds": False}
    embed_names = {
        "embed.word": "embeddings.word_embeddings.weight",
        "embed.position": "embeddings.position_embeddings.weight",
        "embed.norm.weight": "embeddings.LayerNorm.weight",
        "embed.norm.bias": "embeddings.LayerNorm.bias",
    }

    def sizes(self, f: Fields) -> dict[str, Any]:
        return {
            "vocab_size": f.positive("vocab_size"),
            "hidden_size": f.positive("dim"),
            "num_attention_heads": f.positive("n_heads"),
            "num_hidden_layers": f.positive("n_layers"),
            "intermediate_size": f.positive("hidden_dim"),
            "max_position_embeddings": f.positive("max_position_embeddings"),
            "type_vocab_size": 1,
            "hidden_act": ACTIVATIONS[str(f.require("activation", ("gelu", "relu")))],
            "layer_norm_eps": 1e-12,  # DistilBERT's LayerNorms, fixed in transformers
            "position_offset": 0,
        }

    def layer_names(self, i: int) -> dict[str, str]:
        p = f"transformer.layer.{i}."
        out = {}
        for ours, theirs in (
            ("q", "attention.q_lin"), ("k", "attention.k_lin"), ("v", "attention.v_lin"),
            ("out", "attention.out_lin"), ("attn_norm", "sa_layer_norm"), ("up", "ffn.lin1"),
            ("down", "ffn.lin2"), ("ffn_norm", "output_layer_norm"),
        ):  # fmt: skip
            out[f"{ours}.weight"], out[f"{ours}.bias"] = f"{p}{theirs}.weight", f"{p}{theirs}.bias"
        return out


ENCODER_LOADERS: dict[str, EncoderLoader] = {
    arch: cls()
    for cls in (BertLoader, RobertaLoader, DistilBertLoader)
    for arch in cls.architectures
}
PREFIXES = {"bert": "bert.", "roberta": "roberta.", "xlm-roberta": "roberta.",
            "distilbert": "distilbert."}  # fmt: skip


def architecture_of(hf: dict) -> str | None:
    archs = hf.get("architectures")
    return archs[0] if isinstance(archs, list) and len(archs) == 1 else None


def is_encoder_config(hf: dict) -> bool:
    """A config.json of an encoder-only model, converted or not (its task heads included: a
    cross-encoder is refused by name, not as an unknown architecture)."""
    arch = architecture_of(hf)
    known = arch in ENCODER_LOADERS
    return known or (isinstance(arch, str) and arch.split("For")[0] in ENCODER_BASES)


ENCODER_BASES = ("Bert", "DistilBert", "Roberta", "XLMRoberta")


def is_encoder_folder(path: Path) -> bool:
    try:
        return path.is_dir() and is_encoder_config(files.read_json(path / "config.json"))
    except (ValueError, OSError):
        return False


def loader_for(hf: dict) -> tuple[str, EncoderLoader]:
    arch = architecture_of(hf)
    if arch not in ENCODER_LOADERS:
        raise ValueError(
            f"unsupported encoder: architectures={hf.get('architectures')!r} (edgeformer "
            f"embeds with {', '.join(ENCODER_LOADERS)})"
        )
    loader = ENCODER_LOADERS[arch]
    if hf.get("model_type") not in loader.model_types:
        raise ValueError(
            f"{arch}: model_type={hf.get('model_type')!r}, expected {loader.model_types}"
        )
    return arch, loader


# -- sentence-transformers' modules -------------------------------------------------------------
ST_MODULES = "modules.json"
ST_CONFIG = "sentence_bert_config.json"


@dataclass(frozen=True)
class Pooling:
    mode: str = "mean"
    normalize: bool = False
    max_seq_length: int | None = None


def sentence_transformers_pooling(src: Path) -> Pooling:
    """The folder's pooling, normalisation and max_seq_length (sentence-transformers' modules);
    a plain transformers folder: mean, not normalised, its model's length."""
    length = None
    if (src / ST_CONFIG).is_file():
        value = files.read_json(src / ST_CONFIG).get("max_seq_length")
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 2
        ):
            raise ValueError(f"{src / ST_CONFIG}: max_seq_length must be an integer >= 2")
        length = value
    if not (src / ST_MODULES).is_file():
        return Pooling(max_seq_length=length)
    import json

    path = src / ST_MODULES
    if path.stat().st_size > files.MAX_JSON_BYTES:
        raise ValueError(f"{path} is over the {files.MAX_JSON_BYTES >> 20} MB limit")
    try:
        modules = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{path} is not valid JSON ({str(e)[:200]})") from None
    if not isinstance(modules, list):
        raise ValueError(f"{src / ST_MODULES} is not a list of modules")
    mode, normalize = "mean", False
    for m in modules:
        kind = str(m.get("type", "")) if isinstance(m, dict) else ""
        if kind.endswith(".Transformer"):
            if m.get("path", "") not in ("", "."):
                raise ValueError(f"{src / ST_MODULES}: the Transformer module must be the folder")
        elif kind.endswith(".Pooling"):
            pooling = files.read_json(files.inside(src, m.get("path"), ST_MODULES) / "config.json")
            mode = pooling_mode(pooling, src)
        elif kind.endswith(".Normalize"):
            normalize = True
        else:
            raise ValueError(
                f"{src / ST_MODULES}: module {kind or m!r} is not one edgeformer converts "
                "(Transformer, Pooling, Normalize)"
            )
    return Pooling(mode, normalize, length)


def pooling_mode(config: dict, src: Path) -> str:
    on = [m for m in ("cls", "mean", "max", "mean_sqrt_len", "weightedmean", "lasttoken")
          if config.get(f"pooling_mode_{m}_tokens") or config.get(f"pooling_mode_{m}")]  # fmt: skip
    if len(on) != 1 or on[0] not in POOLING_MODES:
        raise ValueError(
            f"{src}: pooling {on or 'none'}: edgeformer pools with exactly one of "
            f"{', '.join(POOLING_MODES)}"
        )
    return on[0]


def max_seq_length(src: Path, pooling: Pooling, positions: int) -> int:
    """The tokens a text is cut to: sentence-transformers' max_seq_length, else the tokenizer's
    model_max_length when it is a real bound, else every position the model has."""
    if pooling.max_seq_length is not None:
        return min(pooling.max_seq_length, positions)
    if (src / "tokenizer_config.json").is_file():
        value = files.read_json(src / "tokenizer_config.json").get("model_max_length")
        if isinstance(value, int) and not isinstance(value, bool) and 2 <= value < positions:
            return value
    return positions


def load_encoder(src: Path) -> EncoderWeights:
    """The folder's encoder: config, pooling and tensors (every tensor mapped or named)."""
    from .convert import load_weights, read_hf_config

    hf = read_hf_config(src)
    arch, loader = loader_for(hf)
    f = Fields(hf, arch, loader.defaults)
    sizes = loader.sizes(f)
    if sizes["hidden_size"] % sizes["num_attention_heads"]:
        raise f.bad("hidden_size", sizes["hidden_size"], "a multiple of num_attention_heads")
    pad = f.positive("pad_token_id") if f.get("pad_token_id") else 0
    cross = arch.endswith("ForSequenceClassification")
    pooling = Pooling("cls", False) if cross else sentence_transformers_pooling(src)
    positions = sizes["max_position_embeddings"] - sizes["position_offset"]
    if positions < 2:
        raise f.bad(
            "max_position_embeddings", sizes["max_position_embeddings"], "room for 2 tokens"
        )
    model = EncoderModel(
        str(hf["model_type"]),
        **sizes,
        pooling=pooling.mode,
        normalize=pooling.normalize,
        max_seq_length=max_seq_length(src, pooling, positions),
        num_labels=num_labels(f) if cross else 0,
        classifier_act=loader.classifier[2] if cross else None,
    )
    raw = load_weights(src)
    prefix = PREFIXES[hf["model_type"]]
    if not any(k.startswith(prefix) for k in raw):
        prefix = ""
    w = WeightReader(raw, prefix)
    try:
        tensors = loader.weights(w, model.num_hidden_layers, cross)
    except KeyError as e:
        raise ValueError(f"{arch} weights: missing tensor {e.args[0]!r}") from None
    extra = sorted(k for k in set(w) - w.read if not k.startswith(HEADS_IGNORED)
                   and not k.endswith("position_ids"))  # fmt: skip
    if extra:
        raise ValueError(f"{arch} weights: tensors edgeformer does not model: {extra[:5]}")
    check_shapes(model, tensors, arch)
    return EncoderWeights(model, pad, {k: v.float() for k, v in tensors.items()}, arch)


def num_labels(f: Fields) -> int:
    """A classifier's labels: config.json's id2label (transformers' num_labels), else 2."""
    labels = f.get("id2label")
    if labels is None:
        return 2
    if not isinstance(labels, dict) or not labels:
        raise f.bad("id2label", labels, "a map of label ids to names")
    return len(labels)


def check_shapes(m: EncoderModel, t: dict[str, torch.Tensor], arch: str) -> None:
    C, F = m.hidden_size, m.intermediate_size
    want: dict[str, tuple[int, ...]] = {
        "embed.word": (m.vocab_size, C), "embed.position": (m.max_position_embeddings, C),
        "embed.norm.weight": (C,), "embed.norm.bias": (C,),
    }  # fmt: skip
    if "embed.type" in t:
        want["embed.type"] = (m.type_vocab_size, C)
    if m.num_labels:
        L = m.num_labels
        want |= {"head.dense.weight": (C, C), "head.dense.bias": (C,),
                 "head.out.weight": (L, C), "head.out.bias": (L,)}  # fmt: skip
    for i in range(m.num_hidden_layers):
        for name, shape in (("q", (C, C)), ("k", (C, C)), ("v", (C, C)), ("out", (C, C)),
                            ("up", (F, C)), ("down", (C, F))):  # fmt: skip
            want[f"layers.{i}.{name}.weight"], want[f"layers.{i}.{name}.bias"] = shape, shape[:1]
        for name in ("attn_norm", "ffn_norm"):
            want[f"layers.{i}.{name}.weight"] = want[f"layers.{i}.{name}.bias"] = (C,)
    for name, size in want.items():
        if tuple(t[name].shape) != size:
            raise ValueError(
                f"{arch} weights: {name} is {tuple(t[name].shape)}, config.json says {size}"
            )


def encoder_tokenizer(src: Path, tmp: Path) -> Path:
    """The folder's tokenizer.json, or one transformers makes from its vocab.txt / sentencepiece
    model (files.fast_tokenizer, as the decoders' converter does)."""
    if (src / HF_TOKENIZER).is_file():
        return src / HF_TOKENIZER
    return files.fast_tokenizer(src, tmp)
