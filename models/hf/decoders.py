"""Decoder-only language models: GPT-2 and the rotary (Llama-like) families.

Every family maps onto one ModelConfig (pre-RMSNorm, rotary positions, gated FFN, GQA) plus the
fields it adds, which our own models can train with too:

- Llama (Llama 2 / 3.x, SmolLM2, TinyLlama): llama3 rope scaling, several EOS ids.
- Mistral: a sliding window on every layer (when set).
- Qwen2 / Qwen2.5: q/k/v biases (`qkv_bias`), sliding layers from `max_window_layers`.
- Qwen3: a per-head q/k RMSNorm (`qk_norm`), a `head_dim` of its own.
- Phi-3 / Phi-4-mini: fused qkv and gate_up weights, partial rotary, LongRoPE, a window.
- Gemma: (1 + w) RMSNorms (folded into w), scaled embeddings, GeGLU, `head_dim` 256.
- Gemma 2: + norms after attention and FFN (`sandwich_norm`), attention and final logit
  soft-capping, `query_pre_attn_scalar`, sliding layers alternating with full ones.
- Gemma 3 (text): + q/k norm, the sliding layers' own rotary base (`local_rope_theta`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ...core.config import FULL, SLIDING, ModelConfig
from .fields import Fields, rope_from, rope_settings
from .loaders import Loader, WeightReader, Weights, register

GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
                    "relu": "relu"}  # fmt: skip


@register
class GPT2Loader(Loader):
    """GPT2LMHeadModel: pre-LN, learned positions, tanh-approximated GELU ("gelu_new"), Conv1D
    weights (stored (in, out): transposed here), biases, tied head, unscaled embeddings."""

    architectures = ("GPT2LMHeadModel",)
    model_types = ("gpt2",)
    prefix = "transformer."
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
        "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
        "add_cross_attention": False, "tie_word_embeddings": True, "bos_token_id": 50256,
        "eos_token_id": 50256, "pad_token_id": None, "reorder_and_upcast_attn": False,
    }  # fmt: skip

    def config(self, f: Fields) -> ModelConfig:
        act = f.require("activation_function", tuple(GPT2_ACTIVATIONS))
        f.require("scale_attn_weights", (True,))
        f.require("scale_attn_by_inverse_layer_idx", (False,))
        f.require("add_cross_attention", (False,))
        d_model, vocab = f.positive("n_embd"), f.positive("vocab_size")
        inner = f.get("n_inner")
        return ModelConfig(
            family="decoder-only",
            vocab_size=vocab,
            d_model=d_model,
            n_heads=f.positive("n_head"),
            n_decoder_layers=f.positive("n_layer"),
            d_ff=4 * d_model if inner is None else f.positive("n_inner"),
            activation=GPT2_ACTIVATIONS[str(act)],
            norm="pre",
            norm_type="layernorm",
            positional="learned",
            max_len=f.positive("n_positions"),
            dropout=0.0,
            tie_embeddings=f.flag("tie_word_embeddings"),
            layer_norm_eps=f.number("layer_norm_epsilon"),
            scale_embeddings=False,
            bias=True,
            **f.special_ids(vocab),
        )

    def weights(self, w: WeightReader, cfg: ModelConfig) -> tuple[Weights, set[str]]:
        """Conv1D stores (in, out): transposed."""
        sd = {"embed.weight": w["wte.weight"], "pos.table": w["wpe.weight"]}
        for i in range(cfg.n_decoder_layers):
            h, o = f"h.{i}.", f"layers.{i}."
            for hf, ours, conv in (
                ("ln_1", "res_attn.norm", False),
                ("attn.c_attn", "attn.qkv", True),  # packed q, k, v in that order, as ours
                ("attn.c_proj", "attn.out", True),
                ("ln_2", "res_ffn.norm", False),
                ("mlp.c_fc", "ffn.up", True),
                ("mlp.c_proj", "ffn.down", True),
            ):
                weight = w[f"{h}{hf}.weight"]
                sd[f"{o}{ours}.weight"] = weight.t().contiguous() if conv else weight
                sd[f"{o}{ours}.bias"] = w[f"{h}{hf}.bias"]
        sd["norm.weight"], sd["norm.bias"] = w["ln_f.weight"], w["ln_f.bias"]
        if not cfg.tie_embeddings:
            sd["lm_head.weight"] = w["lm_head.weight"]
        ignored = {k for k in w if k.endswith((".attn.bias", ".attn.masked_bias"))}  # masks
        if cfg.tie_embeddings:
            ignored.add("lm_head.weight")  # a copy of wte when saved
        return sd, ignored


# ---------------------------------------------------------------- the rotary families


@register
class LlamaLoader(Loader):
    """LlamaForCausalLM: pre-RMSNorm, SwiGLU, rotary positions (rotate-half; rope scaling:
    linear, llama3, yarn, longrope), grouped-query attention, no biases, tied or untied head,
    unscaled embeddings. The other rotary families override its hooks."""

    architectures = ("LlamaForCausalLM",)
    model_types = ("llama",)
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": None,
        "hidden_act": "silu", "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
        "pad_token_id": None, "bos_token_id": 1, "eos_token_id": 2,
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "head_dim": None, "rope_theta": 10000.0, "pretraining_tp": 1,
    }  # fmt: skip
    activation_key: ClassVar[str] = "hidden_act"
    activations: ClassVar[dict[str, str]] = {"silu": "swiglu"}
    norm_offset: ClassVar[float] = 0.0  # Gemma's norms multiply by (1 + w): 1.0, folded in

    # -- config ----------------------------------------------------------------------------------
    def config(self, f: Fields) -> ModelConfig:
        self.refuse(f)
        vocab, d_model = f.positive("vocab_size"), f.positive("hidden_size")
        heads, layers = f.positive("num_attention_heads"), f.positive("num_hidden_layers")
        kv = f.positive("num_key_value_heads", heads) if f.get("num_key_value_heads") else heads
        if heads % kv:
            raise f.bad("num_key_value_heads", kv, f"a divisor of num_attention_heads={heads}")
        head_dim = self.head_dim(f, d_model, heads)
        act = f.require(self.activation_key, tuple(self.activations))
        max_len = f.positive("max_position_embeddings")
        fields: dict[str, Any] = dict(
            family="decoder-only",
            vocab_size=vocab,
            d_model=d_model,
            n_heads=heads,
            n_kv_heads=kv,
            n_decoder_layers=layers,
            d_ff=f.positive("intermediate_size"),
            d_head=None if head_dim * heads == d_model else head_dim,
            activation=self.activations[str(act)],
            norm="pre",
            norm_type="rmsnorm",
            positional="rotary",
            max_len=max_len,
            dropout=0.0,
            tie_embeddings=f.flag("tie_word_embeddings"),
            layer_norm_eps=f.number("rms_norm_eps"),
            scale_embeddings=False,
            bias=False,
            **self.rope(f, head_dim, max_len),
            **self.attention(f, layers),
            **f.special_ids(vocab),
        )
        return ModelConfig(**(fields | self.extra(f)))

    def refuse(self, f: Fields) -> None:
        """Fields of the family that edgeformer does not model (or must have one value)."""
        f.require("attention_bias", (False,))
        f.require("mlp_bias", (False,))
        f.require("pretraining_tp", (1, None))
        f.refuse_set(("sliding_window", "use_sliding_window", "layer_types", "no_rope_layers"),
                     "none (full attention with rotary positions everywhere)")  # fmt: skip

    def head_dim(self, f: Fields, d_model: int, heads: int) -> int:
        if f.get("head_dim") is not None:
            return f.positive("head_dim")
        if d_model % heads:
            raise f.bad("hidden_size", d_model, f"a multiple of num_attention_heads={heads}")
        return d_model // heads

    def rope(self, f: Fields, head_dim: int, max_len: int) -> dict[str, Any]:
        return rope_settings(f, head_dim, max_len)

    def attention(self, f: Fields, layers: int) -> dict[str, Any]:
        """attention_window, layer_types, attention_scale, attn_softcap (none for Llama)."""
        return {}

    def extra(self, f: Fields) -> dict[str, Any]:
        """Further ModelConfig fields of the family (qkv_bias, qk_norm, ...)."""
        return {}

    # -- weights ---------------------------------------------------------------------------------
    def weights(self, w: WeightReader, cfg: ModelConfig) -> tuple[Weights, set[str]]:
        """q, k, v packed into one projection (rows q, k, v: SelfAttention.split), gate and up
        kept apart; norms as (offset + w)."""
        sd = {"embed.weight": w["embed_tokens.weight"], "norm.weight": self.norm(w["norm.weight"])}
        for i in range(cfg.n_decoder_layers):
            h, o = f"layers.{i}.", f"layers.{i}."
            sd.update(self.attention_weights(w, h, o, cfg))
            sd.update(self.layer_norms(w, h, o))
            sd.update(self.mlp_weights(w, h, o))
        if not cfg.tie_embeddings:
            sd["lm_head.weight"] = w["lm_head.weight"]
        ignored = {k for k in w if k.endswith("rotary_emb.inv_freq")}  # recomputed here
        if cfg.tie_embeddings:
            ignored.add("lm_head.weight")
        return sd, ignored

    def norm(self, t: torch.Tensor) -> torch.Tensor:
        return t + self.norm_offset if self.norm_offset else t

    def attention_weights(self, w: WeightReader, h: str, o: str, cfg: ModelConfig) -> Weights:
        a = f"{h}self_attn."
        sd = {
            f"{o}attn.qkv.weight": torch.cat([w[f"{a}{p}_proj.weight"] for p in "qkv"]),
            f"{o}attn.out.weight": w[f"{a}o_proj.weight"],
        }
        if cfg.attention_bias:
            sd[f"{o}attn.qkv.bias"] = torch.cat([w[f"{a}{p}_proj.bias"] for p in "qkv"])
        if cfg.qk_norm:
            sd[f"{o}attn.q_norm.weight"] = self.norm(w[f"{a}q_norm.weight"])
            sd[f"{o}attn.k_norm.weight"] = self.norm(w[f"{a}k_norm.weight"])
        return sd

    def layer_norms(self, w: WeightReader, h: str, o: str) -> Weights:
        return {
            f"{o}res_attn.norm.weight": self.norm(w[f"{h}input_layernorm.weight"]),
            f"{o}res_ffn.norm.weight": self.norm(w[f"{h}post_attention_layernorm.weight"]),
        }

    def mlp_weights(self, w: WeightReader, h: str, o: str) -> Weights:
        return {f"{o}ffn.{p}.weight": w[f"{h}mlp.{p}_proj.weight"] for p in ("gate", "up", "down")}


def window_layers(f: Fields, layers: int, window: int | None) -> list[str] | None:
    """layer_types as config.json gives them (checked), None when every layer is full."""
    types = f.get("layer_types")
    if types is None or window is None:
        return None
    if (
        not isinstance(types, list)
        or len(types) != layers
        or any(t not in (FULL, SLIDING) for t in types)
    ):
        raise f.bad("layer_types", types, f"{layers} of {FULL!r} / {SLIDING!r}")
    return None if SLIDING not in types else list(types)


@register
class MistralLoader(LlamaLoader):
    """MistralForCausalLM: Llama with a sliding window on every layer (when set)."""

    architectures = ("MistralForCausalLM",)
    model_types = ("mistral",)
    defaults = LlamaLoader.defaults | {
        "intermediate_size": 14336, "num_key_value_heads": 8, "max_position_embeddings": 131072,
        "sliding_window": 4096,
    }  # fmt: skip

    def refuse(self, f: Fields) -> None:
        f.refuse_set(("attention_bias", "mlp_bias", "layer_types"), "none")

    def attention(self, f: Fields, layers: int) -> dict[str, Any]:
        return {"attention_window": f.optional_positive("sliding_window")}


@register
class Qwen2Loader(LlamaLoader):
    """Qwen2ForCausalLM (Qwen2, Qwen2.5): Llama with q/k/v biases; a sliding window on the
    layers from max_window_layers on when use_sliding_window is set."""

    architectures = ("Qwen2ForCausalLM",)
    model_types = ("qwen2",)
    defaults = LlamaLoader.defaults | {
        "vocab_size": 151936, "intermediate_size": 22016, "num_key_value_heads": 32,
        "max_position_embeddings": 32768, "bos_token_id": None, "eos_token_id": None,
        "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28,
    }  # fmt: skip

    def refuse(self, f: Fields) -> None:
        pass

    def attention(self, f: Fields, layers: int) -> dict[str, Any]:
        if not f.flag("use_sliding_window"):
            return {}
        window = f.optional_positive("sliding_window")
        if window is None:
            return {}
        types = window_layers(f, layers, window)
        if f.get("layer_types") is None:  # transformers derives them
            first = f.get("max_window_layers")
            if not isinstance(first, int) or isinstance(first, bool) or first < 0:
                raise f.bad("max_window_layers", first, "a layer count >= 0")
            types = [SLIDING if i >= first else FULL for i in range(layers)]
            types = types if SLIDING in types else None
        return {"attention_window": window if types else None, "layer_types": types}

    def extra(self, f: Fields) -> dict[str, Any]:
        return {"qkv_bias": True}


@register
class Qwen3Loader(Qwen2Loader):
    """Qwen3ForCausalLM: Qwen2 without the q/k/v biases, with a per-head RMSNorm on q and k
    before rotary and a head_dim of its own (128 by default)."""

    architectures = ("Qwen3ForCausalLM",)
    model_types = ("qwen3",)
    defaults = Qwen2Loader.defaults | {"head_dim": 128, "attention_bias": False}

    def refuse(self, f: Fields) -> None:
        f.require("attention_bias", (False,))

    def extra(self, f: Fields) -> dict[str, Any]:
        return {"qk_norm": True}


@register
class Phi3Loader(LlamaLoader):
    """Phi3ForCausalLM (Phi-3, Phi-3.5-mini, Phi-4-mini): fused qkv_proj and gate_up_proj
    weights, partial rotary (partial_rotary_factor), LongRoPE with short and long factors
    (original_max_position_embeddings beside rope_scaling), a sliding window on every layer."""

    architectures = ("Phi3ForCausalLM",)
    model_types = ("phi3",)
    defaults = LlamaLoader.defaults | {
        "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
        "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 32000, "pad_token_id": 32000,
        "sliding_window": None,
    }  # fmt: skip

    def refuse(self, f: Fields) -> None:
        f.refuse_set(("attention_bias", "mlp_bias", "layer_types"), "none")

    def attention(self, f: Fields, layers: int) -> dict[str, Any]:
        return {"attention_window": f.optional_positive("sliding_window")}

    def attention_weights(self, w: WeightReader, h: str, o: str, cfg: ModelConfig) -> Weights:
        return {
            f"{o}attn.qkv.weight": w[f"{h}self_attn.qkv_proj.weight"],  # rows q, k, v: ours
            f"{o}attn.out.weight": w[f"{h}self_attn.o_proj.weight"],
        }

    def mlp_weights(self, w: WeightReader, h: str, o: str) -> Weights:
        gate, up = w[f"{h}mlp.gate_up_proj.weight"].chunk(2, dim=0)  # gate rows first
        return {
            f"{o}ffn.gate.weight": gate.contiguous(),
            f"{o}ffn.up.weight": up.contiguous(),
            f"{o}ffn.down.weight": w[f"{h}mlp.down_proj.weight"],
        }


@register
class GemmaLoader(LlamaLoader):
    """GemmaForCausalLM: (1 + w) RMSNorms (folded into w), embeddings scaled by
    sqrt(hidden_size), GeGLU (gelu_pytorch_tanh on the gate), head_dim 256, tied head."""

    architectures = ("GemmaForCausalLM",)
    model_types = ("gemma",)
    defaults = LlamaLoader.defaults | {
        "vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16,
        "head_dim": 256, "hidden_act": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
        "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2, "tie_word_embeddings": True,
    }  # fmt: skip
    # Gemma's configs name gelu (exact) but transformers runs the tanh approximation
    activations = {"gelu_pytorch_tanh": "geglu", "gelu": "geglu"}
    norm_offset = 1.0

    def refuse(self, f: Fields) -> None:
        f.require("attention_bias", (False,))
        f.refuse_set(("use_bidirectional_attention",), "false (causal attention)")

    def extra(self, f: Fields) -> dict[str, Any]:
        return {"scale_embeddings": True}


@register
class Gemma2Loader(GemmaLoader):
    """Gemma2ForCausalLM: Gemma with norms after attention and FFN too (sandwich_norm),
    attention logits soft-capped (attn_logit_softcapping) and scaled by
    query_pre_attn_scalar^-0.5, final logits soft-capped, sliding-window layers alternating
    with full ones (layer_types)."""

    architectures = ("Gemma2ForCausalLM",)
    model_types = ("gemma2",)
    defaults = GemmaLoader.defaults | {
        "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4,
        "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256,
        "sliding_window": 4096, "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0,
    }  # fmt: skip
    activation_key = "hidden_activation"
    activations = {"gelu_pytorch_tanh": "geglu"}

    def pattern(self, f: Fields) -> int:
        """Without layer_types, every pattern-th layer is full, the others sliding."""
        return 2

    def attention(self, f: Fields, layers: int) -> dict[str, Any]:
        window = f.optional_positive("sliding_window")
        types = window_layers(f, layers, window)
        if f.get("layer_types") is None and window is not None:  # transformers derives them
            n = self.pattern(f)
            types = [SLIDING if (i + 1) % n else FULL for i in range(layers)]
            types = types if SLIDING in types else None
        return {
            "attention_window": window if types else None,
            "layer_types": types,
            "attention_scale": f.number("query_pre_attn_scalar") ** -0.5,
            "attn_softcap": f.optional_number("attn_logit_softcapping"),
            "logit_softcap": f.optional_number("final_logit_softcapping"),
        }

    def extra(self, f: Fields) -> dict[str, Any]:
        return {"scale_embeddings": True, "sandwich_norm": True}

    def layer_norms(self, w: WeightReader, h: str, o: str) -> Weights:
        names = {
            "res_attn.norm": "input_layernorm", "res_attn.post": "post_attention_layernorm",
            "res_ffn.norm": "pre_feedforward_layernorm",
            "res_ffn.post": "post_feedforward_layernorm",
        }  # fmt: skip
        return {f"{o}{ours}.weight": self.norm(w[f"{h}{hf}.weight"]) for ours, hf in names.items()}


@register
class Gemma3Loader(Gemma2Loader):
    """Gemma3ForCausalLM (Gemma 3 text, model_type gemma3_text): Gemma 2 with a per-head q/k
    RMSNorm, five sliding layers to a full one, the sliding layers' own rotary base
    (rope_local_base_freq / rope_parameters.sliding_attention), no soft-capping by default."""

    architectures = ("Gemma3ForCausalLM",)
    model_types = ("gemma3_text",)
    defaults = Gemma2Loader.defaults | {
        "vocab_size": 262208, "max_position_embeddings": 131072,
        "final_logit_softcapping": None, "attn_logit_softcapping": None,
        "rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0,
    }  # fmt: skip

    def pattern(self, f: Fields) -> int:
        """transformers 4's sliding_window_pattern (6 by default)."""
        return f.positive("sliding_window_pattern", 6)

    def rope(self, f: Fields, head_dim: int, max_len: int) -> dict[str, Any]:
        """rope_parameters nested by layer type (transformers 5), or transformers 4's
        rope_theta / rope_scaling (full layers) and rope_local_base_freq (sliding layers)."""
        params = f.get("rope_parameters")
        if isinstance(params, dict) and (FULL in params or SLIDING in params):
            full = dict(params.get(FULL) or {})
            local = dict(params.get(SLIDING) or {})
        elif params is not None and not isinstance(params, dict):
            raise f.bad("rope_parameters", params, "a JSON object")
        else:
            full = dict(f.get("rope_scaling") or params or {})  # type: ignore[call-overload]
            local = {"rope_theta": f.get("rope_local_base_freq")}
        full.setdefault("rope_theta", f.get("rope_theta"))
        local.setdefault("rope_theta", f.get("rope_local_base_freq"))
        out = rope_from(f, f"rope_parameters.{FULL}", full, head_dim, max_len)
        sliding = rope_from(f, f"rope_parameters.{SLIDING}", local, head_dim, max_len)
        if sliding["rope_scaling"] is not None or sliding["rotary_dim"] != out["rotary_dim"]:
            raise f.bad(f"rope_parameters.{SLIDING}", local, "no scaling, the full layers' dims")
        return out | {"local_rope_theta": sliding["rope_theta"]}

    def extra(self, f: Fields) -> dict[str, Any]:
        return super().extra(f) | {"qk_norm": True}
