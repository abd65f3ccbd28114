"""Hugging Face checkpoints -> edgeformer checkpoints, without importing transformers.

A local Hugging Face model folder (config.json, model.safetensors or a sharded
model.safetensors.index.json, tokenizer.json) is read, its config is mapped exactly onto
ModelConfig and its weights onto our module names, and the result is written by the one
checkpoint writer (models.checkpoint.save_checkpoint). Supported architectures:

- GPT2LMHeadModel: pre-LN, learned positions, tanh-approximated GELU ("gelu_new"), Conv1D weights
  (stored (in, out): transposed here), biases, tied head, unscaled embeddings.
- LlamaForCausalLM: pre-RMSNorm, SwiGLU, rotary positions (rotate-half, rope_theta), grouped-
  query attention (num_key_value_heads), no biases, tied or untied head, unscaled embeddings.
- MarianMTModel (OPUS-MT): encoder-decoder, post-LN, Marian's sinusoids (all sines, then all
  cosines), scaled embeddings (scale_embedding), swish = SiLU, biases, final_logits_bias, one
  embedding shared by encoder and decoder (tied or untied head), decoding starts from
  decoder_start_token_id (the pad token). Its tokenizers come from source.spm / target.spm and
  vocab.json (models.spm), or from a fast tokenizer.json for both sides when the folder has no
  .spm files: the checkpoint gets tokenizer.json (targets) and
  source_tokenizer.json (sources).

Anything else a config asks for (another activation, rope scaling, sliding windows, biases we do
not model, ...) is a ValueError that names the field and its value: never a silently different
model. Pickled `.bin` weights are refused (never unpickled).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..core.config import ModelConfig
from .checkpoint import CHECKPOINT_FORMAT, GENERATION_CONFIG, save_checkpoint
from .transformer import build_model

HF_CONFIG, HF_WEIGHTS, HF_INDEX, HF_TOKENIZER = (
    "config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
)
PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def _config_format(path: str | os.PathLike) -> object:
    """The "format" of a folder's config.json; "huggingface" for a Hugging Face model config
    (it has architectures / model_type), None for no readable config."""
    try:
        config = json.loads((Path(path) / HF_CONFIG).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    if "format" not in config and ("architectures" in config or "model_type" in config):
        return "huggingface"
    return config.get("format")


def is_hf_model_dir(path: str | os.PathLike) -> bool:
    """A folder whose config.json is a Hugging Face model config (architectures / model_type)."""
    return _config_format(path) == "huggingface"


def read_hf_config(src: Path) -> dict:
    if not (src / HF_CONFIG).is_file():
        raise FileNotFoundError(f"{src} has no {HF_CONFIG}: not a Hugging Face model folder")
    try:
        config = json.loads((src / HF_CONFIG).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{src / HF_CONFIG} is not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{src / HF_CONFIG} is not a JSON object")
    return config


# ---------------------------------------------------------------- config


class _Fields:
    """Reads a Hugging Face config; every refusal names the field, its value and what works."""

    def __init__(self, hf: dict, arch: str):
        self.hf, self.arch = hf, arch

    def bad(self, name: str, value: object, supported: str) -> ValueError:
        return ValueError(
            f"unsupported {self.arch} config: {name}={value!r} (edgeformer supports {supported})"
        )

    def get(self, name: str, default: object = None) -> object:
        return self.hf.get(name, default)

    def positive(self, name: str, default: int | None = None) -> int:
        value = self.hf.get(name, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise self.bad(name, value, "a positive integer")
        return value

    def require(self, name: str, allowed: tuple, default: object = None) -> object:
        value = self.hf.get(name, default)
        if value not in allowed:
            raise self.bad(name, value, " or ".join(repr(a) for a in allowed))
        return value

    def token_id(self, name: str, vocab: int) -> int | None:
        value = self.hf.get(name)
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < vocab:
            raise self.bad(name, value, f"one token id in [0, {vocab})")
        return value

    def special_ids(self, vocab: int) -> dict[str, Any]:  # ints (Any: ModelConfig's **)
        """bos/eos/pad ids. Without a pad token (GPT-2, Llama) padding uses EOS: it is only a
        filler under the attention mask and never chosen as such."""
        eos = self.token_id("eos_token_id", vocab)
        if eos is None:
            raise self.bad("eos_token_id", self.hf.get("eos_token_id"), "one token id")
        bos = self.token_id("bos_token_id", vocab)
        bos = eos if bos is None else bos
        pad = self.token_id("pad_token_id", vocab)
        if pad is None or (pad == bos and bos != eos):
            pad = eos
        return {"pad_id": pad, "bos_id": bos, "eos_id": eos}


GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
                    "relu": "relu"}  # fmt: skip


def gpt2_config(hf: dict) -> ModelConfig:
    f = _Fields(hf, "GPT2LMHeadModel")
    act = f.require("activation_function", tuple(GPT2_ACTIVATIONS), "gelu_new")
    f.require("scale_attn_weights", (True,), True)
    f.require("scale_attn_by_inverse_layer_idx", (False,), False)
    f.require("add_cross_attention", (False,), False)
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
        tie_embeddings=bool(f.require("tie_word_embeddings", (True, False), True)),
        layer_norm_eps=float(f.get("layer_norm_epsilon", 1e-5)),  # type: ignore[arg-type]
        scale_embeddings=False,
        bias=True,
        **f.special_ids(vocab),
    )


def _rope_theta(f: _Fields) -> float:
    """rope_theta from transformers 5's rope_parameters or 4's rope_theta / rope_scaling."""
    params = f.get("rope_parameters")
    if params is None:
        f.require("rope_scaling", (None,), None)
        theta = f.get("rope_theta", 10000.0)
    else:
        if not isinstance(params, dict):
            raise f.bad("rope_parameters", params, "a JSON object")
        kind = params.get("rope_type", params.get("type", "default"))
        if kind != "default":
            raise f.bad("rope_parameters.rope_type", kind, "'default' (no rope scaling)")
        if params.get("partial_rotary_factor", 1.0) != 1.0:
            raise f.bad("rope_parameters.partial_rotary_factor",
                        params["partial_rotary_factor"], "1.0")  # fmt: skip
        theta = params.get("rope_theta", 10000.0)
    if f.get("partial_rotary_factor", 1.0) != 1.0:
        raise f.bad("partial_rotary_factor", f.get("partial_rotary_factor"), "1.0")
    if not isinstance(theta, int | float) or isinstance(theta, bool) or theta <= 0:
        raise f.bad("rope_theta", theta, "a positive number")
    return float(theta)


def llama_config(hf: dict) -> ModelConfig:
    f = _Fields(hf, "LlamaForCausalLM")
    f.require("hidden_act", ("silu",), "silu")
    f.require("attention_bias", (False,), False)
    f.require("mlp_bias", (False,), False)
    for name in ("sliding_window", "use_sliding_window", "layer_types", "no_rope_layers"):
        if f.get(name) not in (None, False):
            raise f.bad(name, f.get(name), "none (full attention with rotary positions everywhere)")
    d_model, heads, vocab = (
        f.positive("hidden_size"),
        f.positive("num_attention_heads"),
        f.positive("vocab_size"),
    )
    kv = f.positive("num_key_value_heads", heads)
    if f.get("head_dim") is not None and f.get("head_dim") != d_model // heads:
        raise f.bad("head_dim", f.get("head_dim"), f"hidden_size / num_attention_heads = "
                    f"{d_model // heads}")  # fmt: skip
    if heads % kv:
        raise f.bad("num_key_value_heads", kv, f"a divisor of num_attention_heads={heads}")
    return ModelConfig(
        family="decoder-only",
        vocab_size=vocab,
        d_model=d_model,
        n_heads=heads,
        n_kv_heads=kv,
        n_decoder_layers=f.positive("num_hidden_layers"),
        d_ff=f.positive("intermediate_size"),
        activation="swiglu",
        norm="pre",
        norm_type="rmsnorm",
        positional="rotary",
        rope_theta=_rope_theta(f),
        max_len=f.positive("max_position_embeddings"),
        dropout=0.0,
        tie_embeddings=bool(f.require("tie_word_embeddings", (True, False), False)),
        layer_norm_eps=float(f.get("rms_norm_eps", 1e-6)),  # type: ignore[arg-type]
        scale_embeddings=False,
        bias=False,
        **f.special_ids(vocab),
    )


MARIAN_ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu",
                      "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}  # fmt: skip
# BART-era fields some OPUS-MT config.json files carry: only Marian's own values are mapped
MARIAN_FIXED = {"normalize_before": False, "add_final_layer_norm": False,
                "normalize_embedding": False, "layernorm_embedding": False,
                "static_position_embeddings": True, "add_bias_logits": False,
                "is_decoder": False}  # fmt: skip


def marian_config(hf: dict) -> ModelConfig:
    f = _Fields(hf, "MarianMTModel")
    act = f.require("activation_function", tuple(MARIAN_ACTIVATIONS), "gelu")
    for name, value in MARIAN_FIXED.items():
        f.require(name, (value,), value)
    f.require("share_encoder_decoder_embeddings", (True,), True)
    vocab = f.positive("vocab_size")
    if f.get("decoder_vocab_size") not in (None, vocab):
        raise f.bad("decoder_vocab_size", f.get("decoder_vocab_size"), f"vocab_size ({vocab})")
    heads, d_ff = f.positive("encoder_attention_heads"), f.positive("encoder_ffn_dim")
    if f.positive("decoder_attention_heads") != heads:
        raise f.bad("decoder_attention_heads", f.get("decoder_attention_heads"),
                    f"encoder_attention_heads ({heads})")  # fmt: skip
    decoder_d_ff = f.positive("decoder_ffn_dim")
    pad = f.token_id("pad_token_id", vocab)
    eos = f.token_id("eos_token_id", vocab)
    if pad is None or eos is None or pad == eos:
        field, got = ("pad_token_id", pad) if pad is None else ("eos_token_id", eos)
        raise f.bad(field, got, "pad and EOS tokens, two different ids")
    start = f.token_id("decoder_start_token_id", vocab)
    start = pad if start is None else start
    if start == eos:
        raise f.bad("decoder_start_token_id", start, "an id other than eos_token_id")
    # generation: the runtime never emits padding (nor the decoder start)
    f.require("bad_words_ids", (None, [[pad]]), None)
    return ModelConfig(
        family="encoder-decoder",
        vocab_size=vocab,
        d_model=f.positive("d_model"),
        n_heads=heads,
        n_encoder_layers=f.positive("encoder_layers"),
        n_decoder_layers=f.positive("decoder_layers"),
        d_ff=d_ff,
        decoder_d_ff=None if decoder_d_ff == d_ff else decoder_d_ff,
        activation=MARIAN_ACTIVATIONS[str(act)],
        norm="post",
        norm_type="layernorm",
        positional="sinusoidal",
        sinusoid_layout="split",
        max_len=f.positive("max_position_embeddings"),
        dropout=0.0,
        tie_embeddings=bool(f.require("tie_word_embeddings", (True, False), True)),
        scale_embeddings=bool(f.require("scale_embedding", (True, False), False)),
        bias=True,
        logits_bias=True,
        pad_id=pad,
        bos_id=start,
        eos_id=eos,
    )


# ---------------------------------------------------------------- weights

Weights = dict[str, torch.Tensor]


def load_weights(src: Path) -> Weights:
    """All tensors of the folder's safetensors file(s), as float32. Pickles are refused."""
    from safetensors.torch import load_file

    if (src / HF_WEIGHTS).is_file():
        files = [src / HF_WEIGHTS]
    elif (src / HF_INDEX).is_file():
        index = json.loads((src / HF_INDEX).read_text())
        files = [src / name for name in sorted(set(index.get("weight_map", {}).values()))]
    elif any((src / name).is_file() for name in PICKLED):
        raise ValueError(
            f"{src} holds pickled PyTorch weights (pytorch_model.bin), which edgeformer never "
            "unpickles. Convert them to safetensors first, in an environment you trust: "
            "`AutoModelForCausalLM.from_pretrained(SRC).save_pretrained(SRC, "
            "safe_serialization=True)`, or the `convert` Space of the safetensors project"
        )
    else:
        raise FileNotFoundError(f"{src} has no {HF_WEIGHTS} (or {HF_INDEX})")
    weights: Weights = {}
    for file in files:
        if not file.is_file():
            raise FileNotFoundError(f"{src}: {file.name} (listed in {HF_INDEX}) is missing")
        weights.update({k: v.float() for k, v in load_file(str(file)).items()})
    return weights


class _Read(dict):
    """The Hugging Face tensors, base-model prefix dropped; remembers which ones were read."""

    def __init__(self, weights: Weights, prefix: str):
        # "transformer.h.0..." and "h.0..." (GPT-2), "model.layers.0..." (Llama) both occur
        super().__init__({k.removeprefix(prefix): v for k, v in weights.items()})
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> torch.Tensor:
        self.read.add(key)
        return super().__getitem__(key)


def gpt2_weights(w: Weights, cfg: ModelConfig) -> tuple[Weights, set[str]]:
    """(our state dict, HF names deliberately not used). Conv1D stores (in, out): transpose."""
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
    ignored = {k for k in w if k.endswith((".attn.bias", ".attn.masked_bias"))}  # mask buffers
    if cfg.tie_embeddings:
        ignored.add("lm_head.weight")  # a copy of wte when saved
    return sd, ignored


def llama_weights(w: Weights, cfg: ModelConfig) -> tuple[Weights, set[str]]:
    """(our state dict, HF names deliberately not used); q, k, v packed into one projection."""
    sd = {"embed.weight": w["embed_tokens.weight"], "norm.weight": w["norm.weight"]}
    for i in range(cfg.n_decoder_layers):
        h, o = f"layers.{i}.", f"layers.{i}."
        sd[f"{o}attn.qkv.weight"] = torch.cat(
            [w[f"{h}self_attn.{p}_proj.weight"] for p in "qkv"]
        )  # (C + 2 G D, C): q, k, v rows, as SelfAttention.split
        sd[f"{o}attn.out.weight"] = w[f"{h}self_attn.o_proj.weight"]
        sd[f"{o}res_attn.norm.weight"] = w[f"{h}input_layernorm.weight"]
        sd[f"{o}res_ffn.norm.weight"] = w[f"{h}post_attention_layernorm.weight"]
        for p in ("gate", "up", "down"):
            sd[f"{o}ffn.{p}.weight"] = w[f"{h}mlp.{p}_proj.weight"]
    if not cfg.tie_embeddings:
        sd["lm_head.weight"] = w["lm_head.weight"]
    ignored = {k for k in w if k.endswith("rotary_emb.inv_freq")}  # recomputed from rope_theta
    if cfg.tie_embeddings:
        ignored.add("lm_head.weight")
    return sd, ignored


def _same(w: Weights, names: list[str], ref: torch.Tensor, what: str) -> set[str]:
    """Copies that some checkpoints store (tied embeddings, fixed sinusoids): they must equal
    `ref` (else the model is not the one we map), and are not used."""
    for name in names:
        if name in w and not torch.allclose(w[name], ref, atol=1e-5, rtol=0):
            raise ValueError(f"MarianMTModel weights: {name} differs from {what}, which "
                             "edgeformer's mapping assumes it equals")  # fmt: skip
    return {n for n in names if n in w}


def marian_weights(w: Weights, cfg: ModelConfig) -> tuple[Weights, set[str]]:
    """(our state dict, HF names deliberately not used); q/k/v (and cross k/v) packed."""
    from .layers import sinusoidal_table

    shared = w["shared.weight"]
    sd = {"embed.weight": shared, "logits_bias": w["final_logits_bias"].reshape(-1)}
    for side, n in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(n):
            h, o = f"{side}.layers.{i}.", f"{side}.{i}."
            for b in ("weight", "bias"):
                sd[f"{o}attn.qkv.{b}"] = torch.cat([w[f"{h}self_attn.{p}_proj.{b}"] for p in "qkv"])
                sd[f"{o}attn.out.{b}"] = w[f"{h}self_attn.out_proj.{b}"]
                sd[f"{o}res_attn.norm.{b}"] = w[f"{h}self_attn_layer_norm.{b}"]
                sd[f"{o}ffn.up.{b}"], sd[f"{o}ffn.down.{b}"] = w[f"{h}fc1.{b}"], w[f"{h}fc2.{b}"]
                sd[f"{o}res_ffn.norm.{b}"] = w[f"{h}final_layer_norm.{b}"]
                if side == "decoder":
                    sd[f"{o}cross.q.{b}"] = w[f"{h}encoder_attn.q_proj.{b}"]
                    sd[f"{o}cross.kv.{b}"] = torch.cat(
                        [w[f"{h}encoder_attn.{p}_proj.{b}"] for p in "kv"]
                    )
                    sd[f"{o}cross.out.{b}"] = w[f"{h}encoder_attn.out_proj.{b}"]
                    sd[f"{o}res_cross.norm.{b}"] = w[f"{h}encoder_attn_layer_norm.{b}"]
    tied = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]
    if cfg.tie_embeddings:
        tied.append("lm_head.weight")
    else:
        sd["lm_head.weight"] = w["lm_head.weight"]
    ignored = _same(w, tied, shared, "shared.weight")
    table = sinusoidal_table(cfg.max_len, cfg.d_model, "split")
    positions = [f"{side}.embed_positions.weight" for side in ("encoder", "decoder")]
    return sd, ignored | _same(w, positions, table, "Marian's sinusoidal table")


Mapper = Callable[[Weights, ModelConfig], tuple[Weights, set[str]]]
ARCHITECTURES: dict[str, tuple[str, str, Callable[[dict], ModelConfig], Mapper]] = {
    # architecture -> (model_type, weight name prefix, config mapping, weight mapping)
    "GPT2LMHeadModel": ("gpt2", "transformer.", gpt2_config, gpt2_weights),
    "LlamaForCausalLM": ("llama", "model.", llama_config, llama_weights),
    "MarianMTModel": ("marian", "model.", marian_config, marian_weights),
}


def architecture(hf: dict) -> str:
    archs = hf.get("architectures")
    if not isinstance(archs, list) or len(archs) != 1 or archs[0] not in ARCHITECTURES:
        raise ValueError(
            f"unsupported Hugging Face model: architectures={archs!r} "
            f"(edgeformer converts {', '.join(ARCHITECTURES)})"
        )
    arch = archs[0]
    model_type = ARCHITECTURES[arch][0]
    if hf.get("model_type", model_type) != model_type:
        raise ValueError(
            f"unsupported {arch} config: model_type={hf.get('model_type')!r} "
            f"(edgeformer supports {model_type!r})"
        )
    return arch


def hf_model_config(src: str | os.PathLike) -> tuple[str, ModelConfig]:
    """(architecture, ModelConfig) of a Hugging Face folder; errors name the field."""
    hf = read_hf_config(Path(src))
    arch = architecture(hf)
    return arch, ARCHITECTURES[arch][2](hf)


def map_weights(arch: str, weights: Weights, cfg: ModelConfig) -> Weights:
    """Our state dict; a missing tensor, or one nobody maps, is an error naming it."""
    _, prefix, _, mapping = ARCHITECTURES[arch]
    w = _Read(weights, prefix)
    try:
        sd, ignored = mapping(w, cfg)
    except KeyError as e:
        raise ValueError(f"{arch} weights: missing tensor {e.args[0]!r}") from None
    extra = sorted(set(w) - w.read - ignored)
    if extra:
        raise ValueError(f"{arch} weights: tensors edgeformer does not model: {extra[:5]}")
    return sd


def check_out(src: Path, out: Path, force: bool) -> None:
    """Refuse an OUT that would replace the source, or anything but a checkpoint without force."""
    if out.resolve() == src.resolve() or out.resolve() in src.resolve().parents:
        raise ValueError(f"{out} is or contains the Hugging Face folder {src}; choose another")
    if out.exists() or out.is_symlink():
        if not force:
            raise FileExistsError(f"{out} already exists (use force=True / --force to replace it)")
        if _config_format(out) != CHECKPOINT_FORMAT:
            raise FileExistsError(
                f"{out} exists and is not an edgeformer checkpoint: --force replaces checkpoints "
                "only; remove it yourself or choose another folder"
            )


def _copy_generation_config(src: Path) -> Callable[[Path], None]:
    """Copy the model's generation_config.json (default decoding settings), when it has one."""

    def copy(folder: Path) -> None:
        if (src / GENERATION_CONFIG).is_file():
            shutil.copyfile(src / GENERATION_CONFIG, folder / GENERATION_CONFIG)

    return copy


def convert_hf(
    src: str | os.PathLike, out: str | os.PathLike, force: bool = False, verbose: bool = False
) -> Path:
    """Convert the Hugging Face folder `src` into the edgeformer checkpoint `out`."""
    from tokenizers import Tokenizer

    src, out = Path(src), Path(out)
    check_out(src, out, force)
    arch, cfg = hf_model_config(src)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, source_tokenizer = src / HF_TOKENIZER, None
        spm_files = (src / "source.spm").is_file() or (src / "target.spm").is_file()
        if arch == "MarianMTModel" and not spm_files and tokenizer.is_file():
            pass  # a fast tokenizer.json saved beside the model: one for both sides
        elif arch == "MarianMTModel":  # source.spm, target.spm, vocab.json -> two tokenizer.json
            from .spm import marian_tokenizers

            texts = marian_tokenizers(src)
            source_tokenizer, tokenizer = Path(tmp) / "source.json", Path(tmp) / "target.json"
            source_tokenizer.write_text(texts[0])
            tokenizer.write_text(texts[1])
        elif not tokenizer.is_file():
            raise FileNotFoundError(
                f"{src} has no {HF_TOKENIZER} (a `tokenizers` fast tokenizer): save one with "
                "`AutoTokenizer.from_pretrained(SRC).save_pretrained(SRC)` (slow-only "
                "tokenizers are not supported)"
            )
        for file in (tokenizer, source_tokenizer):
            size = 0 if file is None else Tokenizer.from_file(str(file)).get_vocab_size()
            if size > cfg.vocab_size:
                raise ValueError(
                    f"{src}: the tokenizer has {size} tokens, more than the model's vocab_size "
                    f"{cfg.vocab_size}"
                )
        sd = map_weights(arch, load_weights(src), cfg)
        model = build_model(cfg)
        try:
            model.load_state_dict(sd, strict=True)
        except RuntimeError as e:  # shapes that config.json does not explain
            raise ValueError(f"{src}: weights do not match config.json ({e})") from None
        kind = "translation" if cfg.family == "encoder-decoder" else "lm"
        meta = {"task": {"kind": kind}, "source": {"format": "huggingface", "architecture": arch}}
        path = save_checkpoint(
            out, model.eval(), tokenizer, meta, extra=_copy_generation_config(src),
            source_tokenizer_json=source_tokenizer,
        )  # fmt: skip
    if verbose:
        n = model.num_params() / 1e6
        print(f"converted {arch} ({n:.1f} M parameters) -> {path}", file=sys.stderr, flush=True)
    return path
