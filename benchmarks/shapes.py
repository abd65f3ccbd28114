"""Benchmark shapes and workloads: the model sizes every stack runs, and the inputs they get.

ED = encoder-decoder (post-LN, sinusoidal, ReLU), LM = decoder-only (pre-LN, learned positions,
GELU). A Hugging Face model of the same shape (MarianMTModel / GPT2LMHeadModel, and a Llama for
onnxruntime-genai) holds the random weights; every stack runs a conversion of it (ours too,
unless --package), so that all outputs can be compared with HF PyTorch's token for token.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # edgeformer.models imports torch: the memory child of our runtime must not
    from edgeformer.core.config import ModelConfig

SEED = 1234


@dataclass(frozen=True)
class Shape:
    name: str  # "ed" | "lm" | a real shape's name (REAL_SHAPES, or a config.json's)
    cfg: ModelConfig  # our model; peers mirror it
    # a real shape: the Hugging Face config (every field, as transformers fills it in) of the
    # random-weight model every stack runs; None for the small ED / LM shapes
    hf: dict | None = field(default=None, compare=False)

    @property
    def family(self) -> str:
        return self.cfg.family

    @property
    def is_ed(self) -> bool:
        return self.cfg.family == "encoder-decoder"

    @property
    def real(self) -> bool:
        return self.hf is not None

    def describe(self) -> str:
        c = self.cfg
        if self.hf is not None and self.hf.get("_bench_weights"):  # --hf: its own weights
            return f"{self.name}: the weights of {self.hf.get('_bench_source')}"
        if self.hf is not None:
            return f"{self.name}: random weights at the shape of {real_title(self.hf)}"
        layers = f"{c.n_encoder_layers}+{c.n_decoder_layers}" if self.is_ed else c.n_decoder_layers
        return (
            f"{self.name.upper()}: d_model {c.d_model}, {layers} layers, {c.n_heads} heads, "
            f"FFN {c.d_ff} {c.activation}, vocab {c.vocab_size}, {c.norm}-LN, {c.positional}"
        )


def ed_config(quick: bool = False) -> ModelConfig:
    from edgeformer.core.config import ModelConfig

    if quick:
        return ModelConfig(
            vocab_size=1000, d_model=64, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
            d_ff=256, dropout=0.0, max_len=256,
        )  # fmt: skip
    return ModelConfig(
        vocab_size=8000, d_model=256, n_heads=4, n_encoder_layers=3, n_decoder_layers=3,
        d_ff=1024, activation="relu", norm="post", positional="sinusoidal", dropout=0.0,
        max_len=256,
    )  # fmt: skip


def lm_config(quick: bool = False) -> ModelConfig:
    from edgeformer.core.config import ModelConfig

    common: dict[str, Any] = dict(
        family="decoder-only", activation="gelu", norm="pre", positional="learned"
    )
    if quick:
        return ModelConfig(
            vocab_size=1000, d_model=64, n_heads=4, n_decoder_layers=2, d_ff=256, dropout=0.0,
            max_len=256, **common,
        )  # fmt: skip
    return ModelConfig(
        vocab_size=8000, d_model=384, n_heads=6, n_decoder_layers=6, d_ff=1536, dropout=0.0,
        max_len=256, **common,
    )  # fmt: skip


def get_shape(name: str, quick: bool = False, cfg: ModelConfig | None = None) -> Shape:
    if cfg is None:
        cfg = {"ed": ed_config, "lm": lm_config}[name](quick)
    return Shape(name, cfg)


@dataclass(frozen=True)
class Workload:
    name: str
    batch: int
    src_len: int  # source (ED) or prompt (LM) length, in tokens
    new_tokens: int  # forced output length (EOS ignored)
    families: tuple[str, ...] = ("encoder-decoder", "decoder-only")


WORKLOADS = {
    "W1": Workload("W1", 1, 16, 32),
    "W2": Workload("W2", 8, 16, 32),
    "W3": Workload("W3", 1, 128, 64, families=("decoder-only",)),
    # a long prompt: its TTFT is the prefill of 512 tokens (shapes with >= 528 positions)
    "W4": Workload("W4", 1, 512, 16, families=("decoder-only",)),
}
SWEEP_BATCHES = (1, 2, 4, 8, 16, 32)
QUICK_SWEEP_BATCHES = (1, 4, 16)


def fits(w: Workload, shape: Shape) -> bool:
    """Whether workload `w` runs on `shape`: its family, and prompt + new tokens within the
    model's positions (W4's 528 do not fit the small LM's 256)."""
    return shape.family in w.families and w.src_len + w.new_tokens <= shape.cfg.max_len


def sweep_workload(batch: int) -> Workload:
    return Workload(f"sweep-b{batch}", batch, 16, 32)


def make_inputs(
    batch: int, length: int, vocab: int, eos_id: int | None, low: int, high: int, seed: int = SEED
) -> list[list[int]]:
    """Random token ids in [low, high); each row ends with `eos_id` when given (ED sources)."""
    rng = np.random.default_rng(seed + 1000 * batch + length)
    n = length - (eos_id is not None)
    rows = rng.integers(low, min(high, vocab), size=(batch, n)).tolist()
    return [r + [eos_id] for r in rows] if eos_id is not None else rows


# ---- real shapes: random weights at the dimensions of models people ship ----------------------

# Hugging Face config fields of each named shape (transformers fills in the rest); the stacks
# run a random-weight model of that config (artifacts.hf_model_dir), never the real weights.
REAL_SHAPES: dict[str, dict[str, Any]] = {
    "opus-mt-en-de": dict(
        architectures=["MarianMTModel"], model_type="marian", vocab_size=58101, d_model=512,
        encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
        decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
        activation_function="swish", max_position_embeddings=512, scale_embedding=True,
        static_position_embeddings=True, normalize_before=False, pad_token_id=58100,
        eos_token_id=0, bos_token_id=0, decoder_start_token_id=58100, forced_eos_token_id=0,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0,
    ),
    "smollm2-135m": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=49152,
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, head_dim=64, hidden_act="silu", max_position_embeddings=8192,
        rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=0,
        eos_token_id=0, attention_bias=False, mlp_bias=False,
    ),
    "qwen2.5-0.5b": dict(
        architectures=["Qwen2ForCausalLM"], model_type="qwen2", vocab_size=151936,
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, hidden_act="silu", max_position_embeddings=32768,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        bos_token_id=151643, eos_token_id=151643, use_sliding_window=False,
        sliding_window=None, max_window_layers=24,
    ),
    # NLLB-200 distilled 600M: M2M100's architecture (pre-LN, scaled embeddings, fairseq's
    # sinusoids), NLLB's tokenizer (`tokenizer_class`: language codes after the words, a
    # source `eng_Latn ... </s>`, the target language forced after the decoder start </s>)
    "nllb-600m": dict(
        architectures=["M2M100ForConditionalGeneration"], model_type="m2m_100",
        vocab_size=256206, d_model=1024, encoder_layers=12, decoder_layers=12,
        encoder_attention_heads=16, decoder_attention_heads=16, encoder_ffn_dim=4096,
        decoder_ffn_dim=4096, activation_function="relu", max_position_embeddings=1024,
        scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2, tie_word_embeddings=True, tokenizer_class="NllbTokenizer",
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
    ),
}  # fmt: skip
REAL_TITLES = {
    "opus-mt-en-de": "Helsinki-NLP/opus-mt-en-de (Marian, d_model 512, 6+6 layers, vocab 58,101)",
    "smollm2-135m": "SmolLM2-135M (Llama, d_model 576, 30 layers, 9 heads / 3 KV, vocab 49,152, "
    "tied)",
    "qwen2.5-0.5b": "Qwen2.5-0.5B (Qwen2, d_model 896, 24 layers, 14 heads / 2 KV, FFN 4,864, "
    "vocab 151,936, tied, QKV bias)",
    "nllb-600m": "NLLB-200-distilled-600M (M2M100, d_model 1024, 12+12 layers, 16 heads, FFN "
    "4,096, vocab 256,206, tied; eng_Latn -> deu_Latn)",
}
# --shapes real: the translator and the LMs of issue 49 (~10 min with builds cached);
# --shapes multilingual: NLLB-600M alone (615 M parameters, its own run: benchmarks/README.md)
SHAPE_GROUPS = {
    "real": ("opus-mt-en-de", "smollm2-135m", "qwen2.5-0.5b"),
    "multilingual": ("nllb-600m",),
}

# NLLB's tokenizer (transformers' NllbTokenizer): <s> <pad> </s> <unk> and the words, then its
# language codes, then <mask>; a config's vocab_size may run past them (NLLB-200: 2 ids). The
# bench's random translations go from SOURCE_LANG to TARGET_LANG, as `translate(...,
# src_lang="eng_Latn", tgt_lang="deu_Latn")` does: the source's first token, and the token forced
# after the decoder start (forced_bos_token_id; CTranslate2's target prefix).
NLLB_TOKENIZER = "NllbTokenizer"
NLLB_SPARE = 2  # NLLB-200's vocab_size 256,206 = its tokenizer's 256,204 tokens + 2
SOURCE_LANG, TARGET_LANG = "eng_Latn", "deu_Latn"


def nllb_codes() -> list[str]:
    """NLLB's language codes, in the order its tokenizer numbers them (transformers' list)."""
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    return list(FAIRSEQ_LANGUAGE_CODES)


def nllb_layout(hf: dict) -> dict[str, Any]:
    """Where an NLLB-tokenizer config's tokens sit: `words` (the ids below the language codes:
    the 4 specials and the words), the source and target language codes and their ids."""
    codes = nllb_codes()
    words = hf["vocab_size"] - len(codes) - 1 - NLLB_SPARE  # - <mask>
    if words <= 4:
        raise ValueError(
            f"vocab_size {hf['vocab_size']}: too small for NLLB's tokenizer ({len(codes)} "
            f"language codes, <mask> and {NLLB_SPARE} spare ids after the words)"
        )
    ids = {c: words + codes.index(c) for c in (SOURCE_LANG, TARGET_LANG)}
    return {"words": words, "source": [SOURCE_LANG, ids[SOURCE_LANG]],
            "target": [TARGET_LANG, ids[TARGET_LANG]]}  # fmt: skip


def languages(shape: Shape) -> dict[str, Any] | None:
    """A multilingual shape's `nllb_layout` (None for a one-pair or LM shape)."""
    return None if shape.hf is None else shape.hf.get("_bench_languages")


def forced_target(shape: Shape) -> int | None:
    """The token every stack forces first in a translation of the shape (the target language's;
    None: none)."""
    lang = languages(shape)
    return None if lang is None else int(lang["target"][1])


def real_title(hf: dict) -> str:
    """What a real shape is the shape of, for the report."""
    name = hf.get("_bench_shape", "")
    if name in REAL_TITLES:
        return REAL_TITLES[name]
    return f"{hf.get('_bench_source', 'a config')} ({hf['architectures'][0]})"


def is_shape_spec(spec: str) -> bool:
    """A --shapes entry: ed, lm, a REAL_SHAPES name, or a Hugging Face config.json file."""
    return spec in ("ed", "lm") or spec in REAL_SHAPES or spec.endswith(".json")


def config_shape_name(path: Path, fields: dict) -> str:
    """A config.json's shape name: its folder's name (or file stem) and a digest of its fields,
    so that two different configs never share built models in --work."""
    stem = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:8]
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in stem) or "config"
    return f"{safe}-{digest}"


def read_config_json(path: Path) -> dict:
    """A user's Hugging Face config.json for --shapes PATH; errors name the file and key."""
    if not path.is_file():
        raise ValueError(f"--shapes {path}: no such file (a Hugging Face config.json)")
    try:
        fields = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"--shapes {path}: not a JSON file ({e})") from None
    except RecursionError:
        raise ValueError(f"--shapes {path}: nested too deeply to be a config.json") from None
    if not isinstance(fields, dict):
        raise ValueError(f"--shapes {path}: not a JSON object")
    archs = fields.get("architectures")
    if not isinstance(archs, list) or len(archs) != 1 or not isinstance(archs[0], str):
        raise ValueError(f"--shapes {path}: 'architectures' must list one model class")
    if not isinstance(fields.get("model_type"), str):
        raise ValueError(f"--shapes {path}: no 'model_type'")
    return fields


# the most parameters a --shapes config may ask for: its random weights are made in float32 by
# every stack (16 GB each at this bound); NLLB-600M, the largest real shape, has 615 M
MAX_SHAPE_PARAMETERS = 4 << 30


def parameter_count(cfg: ModelConfig) -> int:
    """About how many weights a model of `cfg` holds (embeddings, positions, attention, the
    feed-forward blocks, an untied head; norms and biases left out), from its sizes alone."""
    d, q, kv = (
        cfg.d_model,
        cfg.n_heads * cfg.head_dim,
        (cfg.n_kv_heads or cfg.n_heads) * cfg.head_dim,
    )
    attention = 2 * d * q + 2 * d * kv  # query and output, key and value
    ffn = (3 if cfg.gated else 2) * d
    decoder = cfg.n_decoder_layers * (attention + ffn * cfg.decoder_ffn)
    embeddings = (cfg.vocab_size + cfg.max_len) * d + (
        0 if cfg.tie_embeddings else cfg.vocab_size * d
    )
    if cfg.family != "encoder-decoder":
        return decoder + embeddings
    encoder = cfg.n_encoder_layers * (attention + ffn * cfg.d_ff)
    cross = cfg.n_decoder_layers * attention
    return decoder + encoder + cross + embeddings + (cfg.src_vocab_size or 0) * d


def check_shape_size(name: str, cfg: ModelConfig) -> None:
    """A shape within MAX_SHAPE_PARAMETERS, refused before any stack allocates its weights."""
    n = parameter_count(cfg)
    if n > MAX_SHAPE_PARAMETERS:
        raise ValueError(
            f"shape {name}: about {n / 1e9:,.1f} B parameters ({4 * n / 1e9:,.0f} GB of float32 "
            f"weights per stack), over the bound of {MAX_SHAPE_PARAMETERS / 1e9:.1f} B"
        )


def real_shape(name: str, fields: dict, source: str = "") -> Shape:
    """The Shape of a Hugging Face config: transformers fills in its defaults (the config the
    random model is saved with), and edgeformer's converter maps it to our ModelConfig (an
    architecture we cannot convert is refused here, with the converter's reason)."""
    import transformers

    from edgeformer.models.hf.loaders import loader_for

    given = {k: v for k, v in fields.items() if not k.startswith("_")}
    given.pop("torch_dtype", None)
    given.pop("dtype", None)  # the random model is float32 whatever the source was stored as
    model_type = given.pop("model_type")
    try:
        config = transformers.AutoConfig.for_model(model_type, **given)
    except Exception as e:  # ValueError, KeyError, a strict dataclass's field error, ...
        first = str(e).strip().splitlines()[-1].strip() if str(e).strip() else type(e).__name__
        msg = f"shape {name}: transformers cannot make a {model_type!r} config: {first}"
        raise ValueError(msg) from None
    arch = given["architectures"][0]
    if not hasattr(transformers, arch):
        raise ValueError(f"shape {name}: transformers has no model class {arch!r}")
    hf = json.loads(config.to_json_string(use_diff=False))
    hf["architectures"] = [arch]
    extra: dict[str, Any] = {"_bench_shape": name, "_bench_source": source or name}
    if hf.get("tokenizer_class") == NLLB_TOKENIZER and model_type == "m2m_100":
        try:
            extra["_bench_languages"] = nllb_layout(hf)
        except ValueError as e:
            raise ValueError(f"shape {name}: {e}") from None
    arch, loader = loader_for(hf)
    cfg = loader.config(loader.fields(hf, arch))
    cfg = type(cfg).from_dict({**cfg.to_dict(), "dropout": 0.0})
    check_shape_size(name, cfg)
    return Shape(name, cfg, {**hf, **extra})


def resolve_shape(spec: str, quick: bool = False) -> Shape:
    """ed / lm (our small shapes), a REAL_SHAPES name, or a path to a config.json."""
    if spec in ("ed", "lm"):
        return get_shape(spec, quick)
    if spec in REAL_SHAPES:
        return real_shape(spec, REAL_SHAPES[spec])
    path = Path(spec)
    fields = read_config_json(path)
    return real_shape(config_shape_name(path, fields), fields, str(path))
