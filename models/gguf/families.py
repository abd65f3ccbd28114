"""GGUF architectures -> the Hugging Face layout our converters read: one Family per
`general.architecture` (as CTranslate2's loaders), each saying how the file's metadata becomes a
config.json and how its tensor names become the transformers names (models/hf loads the rest).

    GGUF                         Hugging Face (LlamaForCausalLM, Qwen2ForCausalLM, ...)
    token_embd.weight            model.embed_tokens.weight
    blk.{i}.attn_q.weight        model.layers.{i}.self_attn.q_proj.weight   (Llama: rows
                                                                             un-permuted)
    blk.{i}.ffn_gate.weight      model.layers.{i}.mlp.gate_proj.weight
    output_norm.weight           model.norm.weight
    output.weight                lm_head.weight (absent: the head is tied)

Metadata keys and tensor names are llama.cpp's (gguf-py's constants), the config keys
transformers' for the same model; anything the file holds that a family does not map is an
error naming it, never a silently different model.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .reader import GGUFFile

LAYER_TENSORS = {  # blk.{i}.X -> model.layers.{i}.Y
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
GLOBAL_TENSORS = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}


class Family:
    """A GGUF architecture that maps onto a transformers decoder architecture."""

    gguf_names: ClassVar[tuple[str, ...]] = ()  # general.architecture values
    architecture: ClassVar[str] = ""  # config.json's "architectures" entry
    model_type: ClassVar[str] = ""
    permuted_qk: ClassVar[bool] = False  # llama.cpp permutes Q/K rows for its rotary layout

    def config(self, f: GGUFFile, arch: str) -> dict[str, Any]:
        """config.json of the same model, as transformers' GGUF loader reads it."""

        def key(name: str, default: object = ...) -> Any:
            return f.metadata(f"{arch}.{name}", default)

        heads = int(key("attention.head_count"))
        d_model = int(key("embedding_length"))
        tokens = f.metadata("tokenizer.ggml.tokens", None)
        vocab = int(key("vocab_size", len(tokens) if isinstance(tokens, list) else ...))
        rope_dims = key("rope.dimension_count", None)
        head_dim = int(key("attention.key_length", d_model // heads))
        if rope_dims is not None and int(rope_dims) != head_dim:
            raise ValueError(
                f"{f.path}: {arch}.rope.dimension_count {rope_dims} != the head dim {head_dim} "
                "(partial rotary is not converted from GGUF)"
            )
        scaling = key("rope.scaling.type", "none")
        if scaling not in ("none", None):
            raise ValueError(
                f"{f.path}: {arch}.rope.scaling.type {scaling!r} is not converted from GGUF yet"
            )
        if "rope_freqs.weight" in f.tensors:
            raise ValueError(
                f"{f.path}: rope_freqs.weight (Llama 3.1-style rope scaling factors) is not "
                "converted from GGUF yet"
            )
        cfg: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": self.model_type,
            "vocab_size": vocab,
            "hidden_size": d_model,
            "intermediate_size": int(key("feed_forward_length")),
            "num_hidden_layers": int(key("block_count")),
            "num_attention_heads": heads,
            "num_key_value_heads": int(key("attention.head_count_kv", heads)),
            "head_dim": head_dim,
            "max_position_embeddings": int(key("context_length")),
            "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon")),
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": float(key("rope.freq_base", 10000.0)),
            },
            "hidden_act": "silu",
            "tie_word_embeddings": "output.weight" not in f.tensors,
            "torch_dtype": "float32",
        }
        for ours, theirs in (("bos", "bos_token_id"), ("eos", "eos_token_id"),
                             ("padding", "pad_token_id")):  # fmt: skip
            value = f.metadata(f"tokenizer.ggml.{ours}_token_id", None)
            if value is not None:
                cfg[theirs] = int(value)  # type: ignore[call-overload]
        return cfg | self.extra_config(f, arch)

    def extra_config(self, f: GGUFFile, arch: str) -> dict[str, Any]:
        return {}

    def hf_name(self, name: str, n_layers: int) -> str:
        """The transformers name of a GGUF tensor; an unknown one is an error naming it."""
        stem, _, kind = name.rpartition(".")
        if kind in ("weight", "bias"):
            parts = stem.split(".")
            if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit():
                layer = int(parts[1])
                if layer < n_layers and parts[2] in LAYER_TENSORS:
                    return f"model.layers.{layer}.{LAYER_TENSORS[parts[2]]}.{kind}"
            elif stem in GLOBAL_TENSORS:
                return f"{GLOBAL_TENSORS[stem]}.{kind}"
        raise ValueError(f"GGUF tensor {name!r} is not part of a {self.architecture} model")

    def hf_tensor(self, name: str, values: np.ndarray, cfg: dict[str, Any]) -> np.ndarray:
        """The tensor in transformers' layout: Llama's Q/K rows back in rotate-half order."""
        if self.permuted_qk and (".attn_q." in name or ".attn_k." in name):
            heads = cfg["num_attention_heads"] if ".attn_q." in name else cfg["num_key_value_heads"]
            return unpermute_rows(values, heads)
        return values


def unpermute_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf stores each head's Q/K rows interleaved (pairs for its
    rotary): rows (h, D/2, 2) back to transformers' (h, 2, D/2). Works on any per-row array
    (weights, biases, raw block rows)."""
    n = w.shape[0]
    return w.reshape(heads, n // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class Llama(Family):
    gguf_names = ("llama",)
    architecture = "LlamaForCausalLM"
    model_type = "llama"
    permuted_qk = True

    def extra_config(self, f: GGUFFile, arch: str) -> dict[str, Any]:
        bias = "blk.0.attn_q.bias" in f.tensors
        return {"attention_bias": bias, "mlp_bias": "blk.0.ffn_up.bias" in f.tensors}


class Qwen2(Family):
    gguf_names = ("qwen2",)
    architecture = "Qwen2ForCausalLM"
    model_type = "qwen2"

    def extra_config(self, f: GGUFFile, arch: str) -> dict[str, Any]:
        return {"use_sliding_window": False}


class Qwen3(Family):
    gguf_names = ("qwen3",)
    architecture = "Qwen3ForCausalLM"
    model_type = "qwen3"

    def extra_config(self, f: GGUFFile, arch: str) -> dict[str, Any]:
        return {"use_sliding_window": False, "attention_bias": "blk.0.attn_q.bias" in f.tensors}


FAMILIES: dict[str, Family] = {n: cls() for cls in (Llama, Qwen2, Qwen3) for n in cls.gguf_names}


def family_of(f: GGUFFile) -> tuple[str, Family]:
    """(general.architecture, its Family); another architecture is an error naming it."""
    arch = f.metadata("general.architecture")
    if not isinstance(arch, str) or arch not in FAMILIES:
        raise ValueError(
            f"{f.path}: GGUF architecture {arch!r} is not converted (edgeformer converts "
            f"{', '.join(FAMILIES)} GGUF files; other families: convert their Hugging Face "
            "folder)"
        )
    return arch, FAMILIES[arch]
