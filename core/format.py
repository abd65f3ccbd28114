"""The model package format: its names and versions, in one place (as gguf-py's constants).

A package is a folder (docs/package-format.md is the contract, with every key):

    config.json                 metadata: schema.PackageConfig
    tokenizer.json              the `tokenizers` tokenizer (of the targets, when the next exists)
    source_tokenizer.json       optional: the sources' own tokenizer (converted Marian models)
    encoder.onnx                encoder-decoder only: source -> cross-attention K/V of every layer
    decoder.onnx                one decoding step, or a prompt prefill, over a preallocated cache
    weights.data                the fp32 weights, shared by the graphs (ONNX external data)
    {graph}.{variant}.onnx      the graphs of a quantized variant ...
    weights.{variant}.data      ... and its weights
    golden.json                 PyTorch's greedy run on fixed inputs, for `edgeformer verify`
    generation_config.json      default decoding settings (Hugging Face's file)
    tokenizer_config.json       decoder-only: chat template and special-token strings (HF's)
    genai_config.json           decoder-only: onnxruntime-genai's config for decoder.onnx
    (export --format ort: {graph}[.{variant}].ort instead of the .onnx graphs and weights
    files, each holding its weights, and required_operators.config)

Graph inputs/outputs (B batch, S source, T new tokens, M cache capacity, H heads, G key/value
heads of the self-attention cache, D the graphs' attention head size (attention_head_size: the
model's head dim, zero-padded to a multiple of 8), V vocabulary; ids, positions and masks int64,
masks 1 = real token; float tensors float32):

  encoder      in  input_ids (B,S), attention_mask (B,S)                 (right-padded)
               out present.{i}.encoder.key|value (B,H,S,D)               cross K/V per layer
                   present.{i}.encoder.last_key|last_value (B,1,H*D)     row b's at S_b - 1
  ED decoder   in  input_ids (B,1), position_ids (B,1), seqlens_k (B,) int32,
                   total_sequence_length () int32, encoder_seqlens_k (B,) int32,
                   encoder_total_sequence_length () int32,
                   past_key_values.{i}.decoder.key|value (B,G,M,D),
                   past_key_values.{i}.encoder.key|value (B,H,S,D),
                   past_key_values.{i}.encoder.last_key|last_value (B,1,H*D)
               out logits (B,V), present.{i}.decoder.key|value (B,G,M,D),
                   present.{i}.encoder.key|value (B,H,S,D)
  LM decoder   in  input_ids (B,T), position_ids (B,T), attention_mask (B,L),
                   past_key_values.{i}.key|value (B,G,M,D)
               out logits (B,V), present.{i}.key|value (B,G,M,D), logits_3d (B,1,V),
                   indexed_logits (B*K,V) (format 6+)
                   logits_index (K,) int64: an overridable initializer (a graph input with a
                   default, empty: K = 0), which new tokens indexed_logits holds the logits of

The cache rules: row b holds its tokens in positions 0 .. L_b - 1, where L_b =
attention_mask[b].sum() counts the tokens in the cache *after* the call; its T new tokens are
written at L_b - T .. L_b - 1. `past_key_values.X` and `present.X` bound to the same memory make
GroupQueryAttention write the cache in place. Format 4+ (encoder-decoder): the decoder takes one
token per call; its cross-attention is a GroupQueryAttention step whose "new" K/V are each row's
last source token's (the encoder's last_key/last_value), written back where they already are.
Format 5's encoder-decoder step takes the lengths as GroupQueryAttention does, not as masks:
seqlens_k[b] = L_b - 1 and total_sequence_length = max_b L_b (the width the mask had); of the
source, encoder_seqlens_k[b] = S_b - 1 (S_b: row b's real tokens) and
encoder_total_sequence_length = S (the padded length).
Format 6's LM decoder also returns the logits after several of a call's T new tokens
(speculative decoding's verification: runtime/speculative.py): indexed_logits[b * K + j] are
those after new token logits_index[j] of row b; the default index is empty, so a plain step
computes no extra logits and readers that do not feed it (onnxruntime-genai) run as before.
"""

from __future__ import annotations

from .config import ModelConfig

PACKAGE_FORMAT = "edgeformer-package"
CHECKPOINT_FORMAT = "edgeformer-checkpoint"  # a training checkpoint's config.json (models/)
FORMAT_VERSION = 6
# 2: `model` under ModelConfig's names, no logits_3d; 3: encoder-decoder cross-attention as
# MultiHeadAttention (no last_key/last_value, no cross presents); 4: the encoder-decoder step
# takes attention_mask and encoder_attention_mask (int64) instead of format 5's ED_LENGTHS;
# 5: the LM decoder has no indexed_logits (no speculative decoding)
READABLE_VERSIONS = (2, 3, 4, 5, 6)
MIN_ONNXRUNTIME = "1.22.0"  # GroupQueryAttention with a shared buffer and packed QKV on CPU

CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
SOURCE_TOKENIZER_FILE = "source_tokenizer.json"  # optional (encoder-decoder packages)
GOLDEN_FILE = "golden.json"  # PyTorch's greedy run on fixed inputs, for `edgeformer verify`
GENERATION_CONFIG_FILE = "generation_config.json"  # default decoding settings (HF's file)
# decoder-only packages: the tokenizer's Hugging Face config, with the chat template (when the
# model has one) and the special tokens' strings (runtime.chat; transformers' and
# onnxruntime-genai's tokenizers read it beside tokenizer.json)
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
GENAI_CONFIG_FILE = "genai_config.json"  # decoder-only packages: onnxruntime-genai's config
# `export --format ort`: graphs in onnxruntime's ORT format ({graph}[.{variant}].ort, weights
# inside each graph: no weights file), and the operator list a reduced onnxruntime build needs
ORT_SUFFIX = ".ort"
REQUIRED_OPERATORS_FILE = "required_operators.config"
GRAPH_FORMATS = ("onnx", "ort")

# the variants a package may hold (export.recipes says how each is made); fp32 always
VARIANTS = ("fp32", "int8", "int4", "int8-dynamic", "int8-web", "int4-web", "gguf")
# onnxruntime-web's wasm backend computes MatMulNBits in fp32 whatever accuracy_level says: these
# variants are int8 / int4's graphs with accuracy_level 0 (the same numbers on every backend),
# reading int8 / int4's weights file; slow on onnxruntime's CPU provider, never `auto`'s pick
WEB_VARIANTS = {"int8-web": "int8", "int4-web": "int4"}
LOGITS_3D = "logits_3d"  # LM decoder, format 3+: `logits` as (B, 1, V), for onnxruntime-genai
# LM decoder, format 6+: the logits after the new tokens `LOGITS_INDEX` names, (B * K, V); the
# index is an overridable initializer (default empty: a plain step computes no extra logits)
LOGITS_INDEX, INDEXED_LOGITS = "logits_index", "indexed_logits"
# the encoder-decoder step's length inputs (format 5+; int32, GroupQueryAttention's own): the
# runtime knows them, so the step graph no longer derives them from two masks at every step
ED_LENGTHS = (
    "seqlens_k", "total_sequence_length", "encoder_seqlens_k", "encoder_total_sequence_length"
)  # fmt: skip

# config.json's `model` uses Hugging Face's field names where one exists (format 3+); ModelConfig
# uses ours. Fields not listed keep their name in both.
HF_NAMES = {
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "n_encoder_layers": "encoder_layers",
    "n_decoder_layers": "decoder_layers",
    "d_ff": "intermediate_size",
    "decoder_d_ff": "decoder_ffn_dim",
    "activation": "hidden_act",
    "max_len": "max_position_embeddings",
    "tie_embeddings": "tie_word_embeddings",
    "scale_embeddings": "scale_embedding",
    "pad_id": "pad_token_id",
    "bos_id": "bos_token_id",
    "eos_id": "eos_token_id",
    "d_head": "head_dim",
    "local_rope_theta": "rope_local_base_freq",
    "attn_softcap": "attn_logit_softcapping",
    "logit_softcap": "final_logit_softcapping",
    "attention_window": "sliding_window",
    "relative_buckets": "relative_attention_num_buckets",
    "relative_max_distance": "relative_attention_max_distance",
    "embedding_norm": "layernorm_embedding",
}
OUR_NAMES = {hf: ours for ours, hf in HF_NAMES.items()}


# written only when not at these values (the fields added since format 5 first shipped): a model
# that does not use them has the keys of the packages before they existed, so earlier runtimes
# still read it
OMITTED_AT_DEFAULT: dict[str, object] = {
    "decoder_d_ff": None,
    "d_head": None,
    "qkv_bias": None,
    "qk_norm": False,
    "sandwich_norm": False,
    "rotary_dim": None,
    "rope_scaling": None,
    "attention_window": None,
    "layer_types": None,
    "local_rope_theta": None,
    "attention_scale": None,
    "attn_softcap": None,
    "logit_softcap": None,
    "relative_buckets": None,
    "relative_max_distance": None,
    "embedding_norm": False,
    "separate_positions": False,
    "head_scale": None,
    "src_vocab_size": None,
}


def model_to_json(model: dict) -> dict:
    """ModelConfig fields -> config.json's `model` (Hugging Face names where one exists)."""
    return {
        HF_NAMES.get(k, k): v
        for k, v in model.items()
        if not (k in OMITTED_AT_DEFAULT and v is OMITTED_AT_DEFAULT[k])  # None, False
    }


def model_from_json(model: dict, version: int) -> dict:
    """config.json's `model` -> ModelConfig fields (format 2 stored ours already)."""
    return dict(model) if version == 2 else {OUR_NAMES.get(k, k): v for k, v in model.items()}


def stored_name(field: str, version: int = FORMAT_VERSION) -> str:
    """How config.json names a ModelConfig field (for error messages)."""
    return f"model.{HF_NAMES.get(field, field) if version != 2 else field}"


# sizes every graph records in its metadata (ModelProto.metadata_props, "edgeformer.KEY" under
# config.json's names), which the runtime compares with config.json at load: a config that
# disagrees with its graphs is a clear error, not an onnxruntime failure at the first long input
METADATA_PREFIX = "edgeformer."
GRAPH_METADATA = (
    "vocab_size", "d_model", "n_heads", "n_kv_heads", "n_decoder_layers", "max_len"
)  # fmt: skip


# the head size of the graphs' attention and of their K/V tensors (the self-attention cache,
# the cross K/V): the model's head dim zero-padded up to a multiple of ATTENTION_HEAD_MULTIPLE,
# the sizes onnxruntime's GroupQueryAttention runs. Recorded in every graph's metadata under
# this key (exports since 2026-11-27; older graphs: the model's head dim)
ATTENTION_HEAD_SIZE_KEY = f"{METADATA_PREFIX}attention_head_size"
ATTENTION_HEAD_MULTIPLE = 8


def attention_head_size(head_dim: int) -> int:
    """The head size export gives the graphs' attention for a model head dim: the next multiple
    of 8 (onnxruntime's GroupQueryAttention CPU kernel takes no other), the padded dims zero."""
    return -(-head_dim // ATTENTION_HEAD_MULTIPLE) * ATTENTION_HEAD_MULTIPLE


def graph_metadata(model: ModelConfig) -> dict[str, str]:
    """The metadata written into every graph of a package (format 4, since 2026-11-25)."""
    sizes = {**{k: getattr(model, k) for k in GRAPH_METADATA}, "n_kv_heads": model.kv_heads}
    if model.src_vocab_size is not None:  # a separate source vocabulary (only then: the graphs
        sizes["src_vocab_size"] = model.src_vocab_size  # of the others stay as they were)
    return {f"{METADATA_PREFIX}{HF_NAMES.get(k, k)}": str(v) for k, v in sizes.items()}


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
                "inputs": [*step[:2], *ED_LENGTHS, *past]
                if version >= 5
                else [*step, "encoder_attention_mask", *past],
                "outputs": ["logits", *cache_names(family, n_layers, "present"), *shared],
            },
        }
    extra = [LOGITS_3D] if version >= 3 else []  # format 2 had no 3-D logits
    extra += [INDEXED_LOGITS] if version >= 6 else []  # format 6: speculative verification
    return {
        "decoder": {
            "inputs": [*step, *cache_names(family, n_layers)],
            "outputs": ["logits", *cache_names(family, n_layers, "present"), *extra],
        }
    }


# -- encoder packages (family "encoder": sentence embeddings; docs/embeddings.md) -----------------
# One graph, encoder.onnx: BERT / DistilBERT / RoBERTa / XLM-R's encoder with the pooling and
# normalisation of the folder it was converted from. Shapes: B batch, S tokens (right-padded),
# C hidden size; ids and masks int64 (1 = real token); token_type_ids all 0 for one text.
#   encoder  in  input_ids (B,S), attention_mask (B,S), token_type_ids (B,S)
#            out last_hidden_state (B,S,C), sentence_embedding (B,C) pooled (and normalised)
ENCODER_FAMILY = "encoder"
ENCODER_GRAPH = "encoder"
POOLING_MODES = ("mean", "cls", "max")  # sentence-transformers' pooling_mode_*_tokens
SENTENCE_EMBEDDING = "sentence_embedding"
# config.json's `model` of an encoder package (Hugging Face's names), each an integer bound
ENCODER_MODEL_KEYS = (
    "vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
    "max_position_embeddings", "type_vocab_size",
)  # fmt: skip
ENCODER_ACTIVATIONS = ("gelu", "gelu_tanh", "relu")


# a cross-encoder (model.num_labels >= 1: a text pair -> scores) outputs its classifier's
# logits (B, num_labels) instead of sentence_embedding
CLASSIFIER_LOGITS = "logits"
CLASSIFIER_ACTIVATIONS = ("tanh", "relu")  # between the classifier's two layers


def encoder_io_names(classifier: bool = False) -> dict[str, dict[str, list[str]]]:
    """The input and output names of an encoder package's one graph (classifier: a
    cross-encoder's)."""
    return {
        ENCODER_GRAPH: {
            "inputs": ["input_ids", "attention_mask", "token_type_ids"],
            "outputs": [
                "last_hidden_state",
                CLASSIFIER_LOGITS if classifier else SENTENCE_EMBEDDING,
            ],
        }
    }
