"""GGUF architectures -> the Hugging Face layout our converters read: one Family per
`general.architecture` (as CTranslate2's loaders), each saying how the file's metadata becomes a
config.json and how its tensor names become the transformers names (models/hf loads the rest).

    GGUF                         Hugging Face (LlamaForCausalLM, Qwen2ForCausalLM, ...)
    token_embd.weight            model.embed_tokens.weight
    blk.{i}.attn_q.weight        model.layers.{i}.self_attn.q_proj.weight   (Llama: rows
                                                                             un-permuted)
    blk.{i}.ffn_gate.weight      model.layers.{i}.mlp.gate_proj.weight
    output_norm.weight           model.norm.weight
    output.weight                lm_head.weight (absent, or the embedding's bytes: tied)

Every decoder family models/hf converts whose GGUF form transformers' GGUF loader reads: llama
(Llama, Mistral, SmolLM2, TinyLlama; Llama 3.1 / 3.2's rope_freqs.weight read back as
transformers' llama3 rope scaling), qwen2, qwen3, phi3 (fused qkv and gate/up), gemma2 /
gemma3 (the file's norms hold 1 + w), gpt2 (Conv1D weights: transposed back). Metadata keys and
tensor names are llama.cpp's (gguf-py's constants), the config keys transformers' for the same
model, the values llama.cpp's meaning of them (its attention scale for Gemma, its sliding layer
pattern). Anything the file holds that a family does not map, a tensor of another shape than
the config says, or a metadata value of the wrong kind is an error naming the file and the
field, never a silently different model.
"""

from __future__ import annotations

import math
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
GEMMA2_LAYER_TENSORS = LAYER_TENSORS | {
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
PHI3_LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_up": "mlp.gate_up_proj",  # gate rows, then up rows (llama.cpp's fused ffn_up)
    "ffn_down": "mlp.down_proj",
}
GPT2_LAYER_TENSORS = {  # blk.{i}.X -> transformer.h.{i}.Y
    "attn_norm": "ln_1",
    "attn_qkv": "attn.c_attn",
    "attn_output": "attn.c_proj",
    "ffn_norm": "ln_2",
    "ffn_up": "mlp.c_fc",
    "ffn_down": "mlp.c_proj",
}
GPT2_GLOBAL_TENSORS = {
    "token_embd": "transformer.wte",
    "position_embd": "transformer.wpe",
    "output_norm": "transformer.ln_f",
    "output": "lm_head",
}
SLIDING, FULL = "sliding_attention", "full_attention"
ROPE_FREQS = "rope_freqs.weight"  # llama.cpp's divisor per rotary frequency (Llama 3.1 scaling)
LLAMA3_ORIGINAL_CONTEXT = 8192  # what llama.cpp's converter assumes when the config has none


class Meta:
    """One architecture's metadata keys, read with their kinds checked: a missing key or a value
    of another kind is an error naming the file and the key."""

    def __init__(self, f: GGUFFile, arch: str):
        self.f, self.arch = f, arch

    def raw(self, name: str, default: object = ...) -> Any:
        return self.f.metadata(f"{self.arch}.{name}", default)

    def _bad(self, name: str, value: object, want: str) -> ValueError:
        return ValueError(
            f"{self.f.path}: GGUF metadata {self.arch}.{name} is {value!r}, not {want}"
        )

    def int(self, name: str, default: object = ...) -> Any:
        v = self.raw(name, default)
        if v is None and default is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise self._bad(name, v, "a whole number >= 0")
        return int(v)

    def positive(self, name: str, default: object = ...) -> Any:
        v = self.int(name, default)
        if v is not None and v == 0:
            raise self._bad(name, v, "a positive whole number")
        return v

    def float(self, name: str, default: object = ...) -> Any:
        v = self.raw(name, default)
        if v is None and default is None:
            return None
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float, np.number))
            or not math.isfinite(v)
        ):
            raise self._bad(name, v, "a finite number")
        return float(v)


class Family:
    """A GGUF architecture that maps onto a transformers decoder architecture."""

    gguf_names: ClassVar[tuple[str, ...]] = ()  # general.architecture values
    architecture: ClassVar[str] = ""  # config.json's "architectures" entry
    model_type: ClassVar[str] = ""
    layer_tensors: ClassVar[dict[str, str]] = LAYER_TENSORS
    global_tensors: ClassVar[dict[str, str]] = GLOBAL_TENSORS
    layer_prefix: ClassVar[str] = "model.layers"
    permuted_qk: ClassVar[bool] = False  # llama.cpp permutes Q/K rows for its rotary layout
    norm_offset: ClassVar[float] = 0.0  # Gemma: the file's norms hold 1 + w (transformers' w)
    transposed: ClassVar[tuple[str, ...]] = ()  # GPT-2's Conv1D weights, stored (in, out) by HF
    partial_rotary: ClassVar[bool] = False  # rope.dimension_count < the head dim allowed
    # tensors the family reads into the config (Phi-3's LongRoPE factors), not weights
    config_tensors: ClassVar[tuple[str, ...]] = ()

    def config(self, f: GGUFFile, arch: str) -> dict[str, Any]:
        """config.json of the same model, as llama.cpp runs it (transformers' GGUF loader reads
        the same keys)."""
        m = Meta(f, arch)
        heads = m.positive("attention.head_count")
        d_model = m.positive("embedding_length")
        head_dim = m.positive("attention.key_length", d_model // heads or 1)
        cfg: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": self.model_type,
            "vocab_size": vocab_size(f, m),
            "hidden_size": d_model,
            "intermediate_size": m.positive("feed_forward_length"),
            "num_hidden_layers": m.positive("block_count"),
            "num_attention_heads": heads,
            "num_key_value_heads": m.positive("attention.head_count_kv", heads),
            "head_dim": head_dim,
            "max_position_embeddings": m.positive("context_length"),
            "rms_norm_eps": m.float("attention.layer_norm_rms_epsilon"),
            "hidden_act": "silu",
            "tie_word_embeddings": tied_head(f),
            "torch_dtype": "float32",
        }
        cfg["rope_parameters"] = self.rope(f, m, head_dim)
        return cfg | special_ids(f) | self.extra_config(f, m, cfg)

    def rope(self, f: GGUFFile, m: Meta, head_dim: int) -> dict[str, Any]:
        """rope_parameters: the base, a partial rotary (where the family has one), linear
        scaling; other scalings are an error naming them."""
        params: dict[str, Any] = {"rope_type": "default",
                                  "rope_theta": m.float("rope.freq_base", 10000.0)}  # fmt: skip
        dims = m.positive("rope.dimension_count", head_dim)
        if dims != head_dim:
            if not self.partial_rotary or dims > head_dim or dims % 2:
                raise ValueError(
                    f"{f.path}: {m.arch}.rope.dimension_count {dims} != the head dim {head_dim} "
                    "(a partial rotary is converted for phi3 only)"
                )
            params["partial_rotary_factor"] = dims / head_dim
        scaling = m.raw("rope.scaling.type", "none")
        if scaling == "linear":
            factor = m.float("rope.scaling.factor")
            if factor != 1.0:
                params |= {"rope_type": "linear", "factor": factor}
        elif scaling == "yarn":
            params |= yarn_rope(f, m)
        elif scaling not in ("none", None):
            raise ValueError(
                f"{f.path}: {m.arch}.rope.scaling.type {scaling!r} is not converted from GGUF "
                "yet (linear and yarn are)"
            )
        if ROPE_FREQS in f.tensors:
            if ROPE_FREQS not in self.config_tensors or params["rope_type"] != "default":
                raise ValueError(f"{f.path}: {ROPE_FREQS} beside {m.arch}'s "
                                 f"{params['rope_type']} rope is not converted")  # fmt: skip
            params |= llama3_rope(f, m, params["rope_theta"], dims)
        return params

    def extra_config(self, f: GGUFFile, m: Meta, cfg: dict[str, Any]) -> dict[str, Any]:
        return {}

    def hf_name(self, name: str, n_layers: int) -> str:
        """The transformers name of a GGUF tensor; an unknown one is an error naming it."""
        stem, _, kind = name.rpartition(".")
        if kind in ("weight", "bias"):
            parts = stem.split(".")
            if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit():
                layer = int(parts[1])
                if layer < n_layers and parts[2] in self.layer_tensors:
                    return f"{self.layer_prefix}.{layer}.{self.layer_tensors[parts[2]]}.{kind}"
            elif stem in self.global_tensors:
                return f"{self.global_tensors[stem]}.{kind}"
        raise ValueError(f"GGUF tensor {name!r} is not part of a {self.architecture} model")

    def hf_tensor(self, name: str, values: np.ndarray, cfg: dict[str, Any]) -> np.ndarray:
        """The tensor in transformers' layout: Llama's Q/K rows back in rotate-half order,
        Gemma's norms back to w (the file holds 1 + w), GPT-2's Conv1D weights transposed."""
        if self.permuted_qk and (".attn_q." in name or ".attn_k." in name):
            heads = cfg["num_attention_heads"] if ".attn_q." in name else cfg["num_key_value_heads"]
            return unpermute_rows(values, heads)
        if self.norm_offset and name.endswith("norm.weight"):
            return values - np.float32(self.norm_offset)
        if name.endswith(".weight") and name.rsplit(".", 2)[-2] in self.transposed:
            return np.ascontiguousarray(values.T)
        return values

    def shapes(self, cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        """GGUF stem (token_embd, blk.{i}.attn_q, ...) -> the PyTorch shape of its weight under
        the config (a bias: the weight's rows)."""
        C, V, F = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
        H, G, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        layer = {"attn_norm": (C,), "attn_q": (H * D, C), "attn_k": (G * D, C),
                 "attn_v": (G * D, C), "attn_output": (C, H * D), "attn_q_norm": (D,),
                 "attn_k_norm": (D,), "ffn_norm": (C,), "post_attention_norm": (C,),
                 "post_ffw_norm": (C,), "ffn_gate": (F, C), "ffn_up": (F, C),
                 "ffn_down": (C, F), "attn_qkv": ((H + 2 * G) * D, C)}  # fmt: skip
        out = {"token_embd": (V, C), "output_norm": (C,), "output": (V, C)}
        for i in range(cfg["num_hidden_layers"]):
            out |= {f"blk.{i}.{k}": s for k, s in layer.items() if k in self.layer_tensors}
        return out | self.extra_shapes(cfg)

    def extra_shapes(self, cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        return {}

    def check_shapes(self, f: GGUFFile, cfg: dict[str, Any]) -> None:
        """Every tensor of the file of the shape its config says: a file whose tensors and
        metadata disagree is an error naming the tensor, the shapes and the config."""
        shapes = self.shapes(cfg)
        for name, t in f.tensors.items():
            if name in self.config_tensors:
                continue
            stem, _, kind = name.rpartition(".")
            want = shapes.get(stem)
            if want is None:
                try:
                    self.hf_name(name, cfg["num_hidden_layers"])  # names what is unknown
                except ValueError as e:
                    raise ValueError(f"{f.path}: {e}") from None
                continue
            want = want if kind == "weight" else want[:1]
            if t.shape != want:
                raise ValueError(
                    f"{f.path}: tensor {name!r} has shape {t.shape}, but the metadata "
                    f"({f.metadata('general.architecture')}.*) says {want}"
                )
        needed = ["token_embd.weight", "output_norm.weight"] + [
            f"blk.{i}.{k}.weight" for i in range(cfg["num_hidden_layers"])
            for k in self.required_layer_tensors()
        ]  # fmt: skip
        missing = [n for n in needed if n not in f.tensors]
        if missing:
            raise ValueError(
                f"{f.path}: the file has no tensor {missing[0]!r}"
                + (f" (and {len(missing) - 1} more missing)" if len(missing) > 1 else "")
            )

    def required_layer_tensors(self) -> tuple[str, ...]:
        names: tuple[str, ...] = ("attn_norm", "attn_output", "ffn_norm", "ffn_up", "ffn_down")
        if "attn_q" in self.layer_tensors:
            names += ("attn_q", "attn_k", "attn_v")
        if "ffn_gate" in self.layer_tensors:
            names += ("ffn_gate",)
        return names


def vocab_size(f: GGUFFile, m: Meta) -> int:
    tokens = f.metadata("tokenizer.ggml.tokens", None)
    if isinstance(tokens, list):
        return m.positive("vocab_size", len(tokens))
    return m.positive("vocab_size")


def tied_head(f: GGUFFile) -> bool:
    """No output.weight, or one that is the token embedding's bytes (llama.cpp's GPT-2 writes a
    copy): the head is the embedding."""
    out, emb = f.tensors.get("output.weight"), f.tensors.get("token_embd.weight")
    if out is None:
        return True
    return emb is not None and out.type_name == emb.type_name and out.shape == emb.shape and \
        bool(np.array_equal(out.raw, emb.raw))  # fmt: skip


def special_ids(f: GGUFFile) -> dict[str, int | None]:
    """bos / eos / pad ids from the tokenizer metadata; absent ones None (not the family's
    Hugging Face defaults, which name another vocabulary's ids)."""
    out: dict[str, int | None] = {}
    for ours, theirs in (("bos", "bos_token_id"), ("eos", "eos_token_id"),
                         ("padding", "pad_token_id")):  # fmt: skip
        key = f"tokenizer.ggml.{ours}_token_id"
        value = f.metadata(key, None)
        if value is None:
            out[theirs] = None
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{f.path}: GGUF metadata {key} is {value!r}, not a token id")
        out[theirs] = int(value)
    return out


def unpermute_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf stores each head's Q/K rows interleaved (pairs for its
    rotary): rows (h, D/2, 2) back to transformers' (h, 2, D/2). Works on any per-row array
    (weights, biases, raw block rows)."""
    n = w.shape[0]
    return w.reshape(heads, n // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def yarn_rope(f: GGUFFile, m: Meta) -> dict[str, Any]:
    """rope_parameters of YaRN from the keys llama.cpp's converter writes for it (factor, the
    original context; attention factor and betas when the config had them), as transformers
    computes them; a key of YaRN that transformers has no field for is an error naming it."""
    params: dict[str, Any] = {
        "rope_type": "yarn",
        "factor": m.float("rope.scaling.factor"),
        "original_max_position_embeddings": m.positive("rope.scaling.original_context_length"),
    }
    for key, field in (("yarn_attn_factor", "attention_factor"), ("yarn_beta_fast", "beta_fast"),
                       ("yarn_beta_slow", "beta_slow")):  # fmt: skip
        value = m.float(f"rope.scaling.{key}", None)
        if value is not None:
            params[field] = value
    for key, neutral in (("yarn_ext_factor", 1.0), ("yarn_log_multiplier", 0.0)):
        value = m.float(f"rope.scaling.{key}", None)
        if value is not None and value != neutral:
            raise ValueError(f"{f.path}: {m.arch}.rope.scaling.{key} {value} is not converted "
                             f"(transformers' YaRN has it at {neutral})")  # fmt: skip
    return params


def llama3_rope(f: GGUFFile, m: Meta, theta: float, dims: int) -> dict[str, Any]:
    """rope_parameters of Llama 3.1-style scaling from rope_freqs.weight, the divisor per
    frequency that llama.cpp's converter computes from factor, low_freq_factor,
    high_freq_factor and original_max_position_embeddings: 1 for short wavelengths, factor for
    long ones, 1 / ((1 - s) / factor + s) between, s linear in 1 / wavelength. The four values
    are read back from the divisors (the original context from the file's key, else llama.cpp's
    8192: only the ratios matter) and checked to give the file's divisors again; divisors of
    another shape are an error naming the tensor."""
    divisors = f.dequantized(ROPE_FREQS).reshape(-1).astype(np.float64)
    if divisors.shape != (dims // 2,) or not (np.isfinite(divisors) & (divisors > 0)).all():
        raise ValueError(f"{f.path}: {ROPE_FREQS} holds {divisors.shape[0]} values, not "
                         f"{dims // 2} positive rotary divisors")  # fmt: skip
    factor = float(divisors.max())
    if np.allclose(divisors, 1.0, rtol=1e-6, atol=0):
        return {}  # no scaling
    original = m.positive("rope.scaling.original_context_length", LLAMA3_ORIGINAL_CONTEXT)
    wavelen = 2 * math.pi * theta ** (np.arange(0, dims, 2) / dims)
    low, high = _llama3_bands(divisors, factor, wavelen, original)
    params = {"rope_type": "llama3", "factor": factor, "low_freq_factor": low,
              "high_freq_factor": high, "original_max_position_embeddings": original}  # fmt: skip
    again = _llama3_divisors(wavelen, factor, low, high, original)
    if not np.allclose(again, divisors, rtol=1e-5, atol=0):
        worst = float(np.max(np.abs(again / divisors - 1)))
        raise ValueError(f"{f.path}: {ROPE_FREQS} is not Llama 3's rope scaling (the closest "
                         f"llama3 parameters differ by {worst:.1e}): not converted")  # fmt: skip
    return params


def _llama3_divisors(wavelen: np.ndarray, factor: float, low: float, high: float,
                     original: int) -> np.ndarray:  # fmt: skip
    """llama.cpp's rope_freqs for llama3 scaling (convert_hf_to_gguf's LlamaModel)."""
    smooth = (original / wavelen - low) / (high - low)
    between = 1 / ((1 - smooth) / factor + smooth)
    return np.where(wavelen < original / high, 1.0,
                    np.where(wavelen > original / low, factor, between))  # fmt: skip


def _llama3_bands(divisors: np.ndarray, factor: float, wavelen: np.ndarray,
                  original: int) -> tuple[float, float]:  # fmt: skip
    """(low_freq_factor, high_freq_factor) whose ramp gives `divisors`: s = original /
    (wavelen (high - low)) - low / (high - low) fitted on the frequencies between the bands,
    with the bands' edges (between neighbouring wavelengths) where fewer than two are."""
    ones = np.isclose(divisors, 1.0, rtol=1e-6, atol=0)
    full = np.isclose(divisors, factor, rtol=1e-6, atol=0)
    mid = ~ones & ~full
    x = list(1 / wavelen[mid])
    y = list((1 / divisors[mid] - 1 / factor) / (1 - 1 / factor))
    if len(x) < 2 and ones.any():  # the short band's edge: s = 1
        x.append(1 / math.sqrt(wavelen[ones].max() * wavelen[~ones].min()))
        y.append(1.0)
    if len(x) < 2 and full.any():  # the long band's edge: s = 0
        x.append(1 / math.sqrt(wavelen[~full].max() * wavelen[full].min()))
        y.append(0.0)
    if len(x) < 2:
        raise ValueError(f"rotary divisors {divisors.tolist()} are not Llama 3's rope scaling")
    a, b = np.linalg.lstsq(np.stack([x, np.ones(len(x))], 1), np.array(y), rcond=None)[0]
    if not a > 0:
        raise ValueError(f"rotary divisors {divisors.tolist()} are not Llama 3's rope scaling")
    span = original / a  # high - low
    return float(-b * span), float(-b * span + span)


class Llama(Family):
    gguf_names = ("llama",)
    architecture = "LlamaForCausalLM"
    model_type = "llama"
    permuted_qk = True
    config_tensors = (ROPE_FREQS,)

    def extra_config(self, f: GGUFFile, m: Meta, cfg: dict[str, Any]) -> dict[str, Any]:
        bias = "blk.0.attn_q.bias" in f.tensors
        return {"attention_bias": bias, "mlp_bias": "blk.0.ffn_up.bias" in f.tensors}


class Qwen2(Family):
    gguf_names = ("qwen2",)
    architecture = "Qwen2ForCausalLM"
    model_type = "qwen2"

    def extra_config(self, f: GGUFFile, m: Meta, cfg: dict[str, Any]) -> dict[str, Any]:
        return {"use_sliding_window": False}


class Qwen3(Family):
    gguf_names = ("qwen3",)
    architecture = "Qwen3ForCausalLM"
    model_type = "qwen3"

    def extra_config(self, f: GGUFFile, m: Meta, cfg: dict[str, Any]) -> dict[str, Any]:
        return {"use_sliding_window": False, "attention_bias": "blk.0.attn_q.bias" in f.tensors}


class Phi3(Family):
    """Phi-3 / Phi-3.5 / Phi-4-mini: fused attn_qkv and ffn_up (gate, then up), a partial rotary
    (rope.dimension_count), a sliding window (attention.sliding_window, 0: none), LongRoPE from
    the rope_factors_long / rope_factors_short tensors."""

    gguf_names = ("phi3",)
    architecture = "Phi3ForCausalLM"
    model_type = "phi3"
    layer_tensors = PHI3_LAYER_TENSORS
    partial_rotary = True
    config_tensors = ("rope_factors_long.weight", "rope_factors_short.weight")

    def extra_config(self, f: GGUFFile, m: Meta, cfg: dict[str, Any]) -> dict[str, Any]:
        window = m.int("attention.sliding_window", 0)
        out: dict[str, Any] = {"sliding_window": window or None, "attention_bias": False}
        long, short = (f.tensors.get(n) for n in self.config_tensors)
        if (long is None) != (short is None):
            raise ValueError(f"{f.path}: one of rope_factors_long / rope_factors_short only")
        if long is not None and short is not None:
            original = m.positive("rope.scaling.original_context_length")
            params = dict(cfg["rope_parameters"])
            dims = round(cfg["head_dim"] * params.get("partial_rotary_factor", 1.0))
            factors = {}
            for key, name in (("long_factor", self.config_tensors[0]),
                              ("short_factor", self.config_tensors[1])):  # fmt: skip
                values = f.dequantized(name).reshape(-1)
                if values.shape != (dims // 2,) or not (values > 0).all():
                    raise ValueError(
                        f"{f.path}: tensor {name!r} holds {values.shape[0]} values, not "
                        f"{dims // 2} positive LongRoPE factors"
                    )
                factors[key] = [float(v) for v in values]
            params |= {"rope_type": "longrope", **factors}
            attn = m.float("rope.scaling.attn_factor", None)
            if attn is not None:
                params["attention_factor"] = attn
            out |= {"rope_parameters": params, "original_max_position_embeddings": original}
        return out

    def extra_shapes(self, cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        C, F = cfg["hidden_size"], cfg["intermediate_size"]
        return {f"blk.{i}.ffn_up": (2 * F, C) for i in range(cfg["num_hidden_layers"])}


class Gemma(Family):
    """Gemma's common ground: (1 + w) norms (the file holds 1 + w), embeddings scaled by
    sqrt(C) (in the graph), GeGLU. Gemma 1's own `gemma` files are not converted: transformers
    cannot read their tokenizer (nor their weights) to check them against."""

    norm_offset = 1.0

    def extra_config(self, f: GGUFFile, m: Meta, cfg: dict[str, Any]) -> dict[str, Any]:
        return {"hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
                "attention_bias": False}  # fmt: skip


class Gemma2(Gemma):
    """Gemma 2: norms after attention and FFN, soft-capping (attn_logit_softcapping,
    final_logit_softcapping), sliding layers alternating with full ones (llama.cpp's swa
    pattern 2), its attention scale (head_dim^-0.5; the 27B model's C / heads: llama.cpp's)."""

    gguf_names = ("gemma2",)
    architecture = "Gemma2ForCausalLM"
    model_type = "gemma2"
    layer_tensors = GEMMA2_LAYER_TENSORS
    swa_pattern: ClassVar[int] = 2
    layers_27b: ClassVar[int] = 46  # llama.cpp's LLM_TYPE_27B for this architecture

    def extra_config(self, f: GGUFFile, m: Meta, cfg: dict[str, Any]) -> dict[str, Any]:
        out = super().extra_config(f, m, cfg)
        layers = cfg["num_hidden_layers"]
        scalar = cfg["head_dim"]
        if layers == self.layers_27b:
            scalar = cfg["hidden_size"] // cfg["num_attention_heads"]
        window = m.int("attention.sliding_window", 0) or None
        out |= {
            "query_pre_attn_scalar": scalar,
            "attn_logit_softcapping": m.float("attn_logit_softcapping", None),
            "final_logit_softcapping": m.float("final_logit_softcapping", None),
            "sliding_window": window,
            "layer_types": self.layer_types(f, m, layers) if window else [FULL] * layers,
        }
        return out

    def layer_types(self, f: GGUFFile, m: Meta, layers: int) -> list[str]:
        """attention.sliding_window_pattern (a period, or a bool per layer: True sliding) where
        the file has one, else llama.cpp's pattern for the architecture."""
        pattern = m.raw("attention.sliding_window_pattern", self.swa_pattern)
        if isinstance(pattern, list):
            if len(pattern) != layers or not all(isinstance(p, bool) for p in pattern):
                raise ValueError(
                    f"{f.path}: GGUF metadata {m.arch}.attention.sliding_window_pattern is not "
                    f"{layers} booleans"
                )
            return [SLIDING if p else FULL for p in pattern]
        n = m.positive("attention.sliding_window_pattern", self.swa_pattern)
        return [SLIDING if (i + 1) % n else FULL for i in range(layers)]


class Gemma3(Gemma2):
    """Gemma 3 (text): Gemma 2 with q/k norms, five sliding layers to a full one, the sliding
    layers' own rotary base (10,000: llama.cpp's), linear rope scaling on the full layers."""

    gguf_names = ("gemma3",)
    architecture = "Gemma3ForCausalLM"
    model_type = "gemma3_text"
    swa_pattern = 6
    layers_27b = 62

    def extra_config(self, f: GGUFFile, m: Meta, cfg: dict[str, Any]) -> dict[str, Any]:
        out = super().extra_config(f, m, cfg)
        full = cfg["rope_parameters"]
        local = {"rope_type": "default", "rope_theta": 10000.0}
        return out | {"rope_parameters": {FULL: full, SLIDING: local}}


class GPT2(Family):
    """GPT-2: learned positions, LayerNorms with biases, Conv1D weights (transformers stores
    them (in, out): the file's (out, in) transposed back), GELU (tanh)."""

    gguf_names = ("gpt2",)
    architecture = "GPT2LMHeadModel"
    model_type = "gpt2"
    layer_tensors = GPT2_LAYER_TENSORS
    global_tensors = GPT2_GLOBAL_TENSORS
    layer_prefix = "transformer.h"
    transposed = ("attn_qkv", "attn_output", "ffn_up", "ffn_down")

    def config(self, f: GGUFFile, arch: str) -> dict[str, Any]:
        m = Meta(f, arch)
        d_model = m.positive("embedding_length")
        return {
            "architectures": [self.architecture],
            "model_type": self.model_type,
            "vocab_size": vocab_size(f, m),
            "n_embd": d_model,
            "n_inner": m.positive("feed_forward_length", 4 * d_model),
            "n_layer": m.positive("block_count"),
            "n_head": m.positive("attention.head_count"),
            "n_positions": m.positive("context_length"),
            "layer_norm_epsilon": m.float("attention.layer_norm_epsilon"),
            "activation_function": "gelu_new",
            "tie_word_embeddings": tied_head(f),
            "torch_dtype": "float32",
        } | special_ids(f)

    def shapes(self, cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        C, V, F = cfg["n_embd"], cfg["vocab_size"], cfg["n_inner"]
        layer = {"attn_norm": (C,), "attn_qkv": (3 * C, C), "attn_output": (C, C),
                 "ffn_norm": (C,), "ffn_up": (F, C), "ffn_down": (C, F)}  # fmt: skip
        out = {"token_embd": (V, C), "position_embd": (cfg["n_positions"], C),
               "output_norm": (C,), "output": (V, C)}  # fmt: skip
        for i in range(cfg["n_layer"]):
            out |= {f"blk.{i}.{k}": s for k, s in layer.items()}
        return out

    def check_shapes(self, f: GGUFFile, cfg: dict[str, Any]) -> None:
        super().check_shapes(f, {**cfg, "num_hidden_layers": cfg["n_layer"]})

    def required_layer_tensors(self) -> tuple[str, ...]:
        return tuple(GPT2_LAYER_TENSORS)


FAMILY_CLASSES: tuple[type[Family], ...] = (Llama, Qwen2, Qwen3, Phi3, Gemma2, Gemma3, GPT2)
FAMILIES: dict[str, Family] = {n: cls() for cls in FAMILY_CLASSES for n in cls.gguf_names}


def family_of(f: GGUFFile) -> tuple[str, Family]:
    """(general.architecture, its Family); another architecture is an error naming it and the
    ones converted."""
    arch = f.metadata("general.architecture")
    if not isinstance(arch, str) or arch not in FAMILIES:
        raise ValueError(
            f"{f.path}: GGUF architecture {arch!r} is not converted (edgeformer converts "
            f"{', '.join(FAMILIES)} GGUF files; other families: convert their Hugging Face "
            "folder)"
        )
    return arch, FAMILIES[arch]


def layer_count(cfg: dict[str, Any]) -> int:
    return int(cfg.get("num_hidden_layers", cfg.get("n_layer", 0)))
