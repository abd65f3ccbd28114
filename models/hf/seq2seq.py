"""The encoder-decoder translators besides Marian: BART, mBART / mBART-50, M2M100 / NLLB, T5 /
flan-T5 / mT5.

Each maps onto the one EncoderDecoder (ModelConfig) plus the fields it adds:

- BART: post-LN, learned positions (their table starts at row 2: `offset`), a LayerNorm on the
  embeddings (`embedding_norm`), GELU, biases, final_logits_bias; decoding starts from </s>.
- mBART / mBART-50: BART made pre-LN, with a final norm per stack; language codes.
- M2M100 / NLLB-200: pre-LN, scaled embeddings, fairseq's sinusoids (frequencies over
  d/2 - 1, rows from padding_idx + 1: kept as the positions' table), ReLU; language codes.
- T5 / flan-T5 / mT5: RMSNorm without bias, no linear biases, unscaled attention
  (`attention_scale` 1), `d_kv` heads, relative position buckets (`positional="relative"`: one
  bias table per stack, the first layer's), ReLU or gated GELU (v1.1, flan, mT5: `geglu`), a
  tied head rescaled by d_model^-0.5 (`head_scale`); decoding starts from padding.

The language codes of the multilingual ones are read from the tokenizer (tokenizer_config.json's
language tokens, their ids from tokenizer.json) into the checkpoint's task (`languages`), with
where the source language token goes; the runtime's source_lang / target_lang use them.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, ClassVar

import torch

from ...core.config import ModelConfig
from ...core.schema import MODEL_LIMITS
from .fields import Fields
from .files import read_json
from .loaders import HF_TOKENIZER, Loader, WeightReader, Weights, register

ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "swish": "silu", "silu": "silu",
               "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}  # fmt: skip
FAIRSEQ_DEFAULTS: dict[str, Any] = {
    "vocab_size": 50265, "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
    "encoder_attention_heads": 16, "decoder_attention_heads": 16, "encoder_ffn_dim": 4096,
    "decoder_ffn_dim": 4096, "max_position_embeddings": 1024, "activation_function": "gelu",
    "scale_embedding": False, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
    "decoder_start_token_id": 2, "tie_word_embeddings": True,
}  # fmt: skip
TOKENIZER_CONFIG = "tokenizer_config.json"
log = logging.getLogger("edgeformer")


def bounded_length(f: Fields, name: str) -> int:
    """A length field (max_position_embeddings, n_positions) within what a package may hold
    (core.schema.MODEL_LIMITS): position tables and relative-bias tables are made from it
    before any weight tells its size."""
    n = f.positive(name)
    if n > MODEL_LIMITS["max_len"]:
        raise f.bad(name, n, f"at most {MODEL_LIMITS['max_len']} positions")
    return n


def fairseq_sinusoids(rows: int, d: int, padding_idx: int) -> torch.Tensor:
    """M2M100's (fairseq's) sinusoidal table: frequencies 10000^(-i / (d/2 - 1)), all sines then
    all cosines, the padding row zero (transformers' M2M100SinusoidalPositionalEmbedding)."""
    half = d // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000) / (half - 1)))
    angles = torch.arange(rows, dtype=torch.float32)[:, None] * freq[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    table[padding_idx] = 0
    return table


def fairseq_layers(w: WeightReader, cfg: ModelConfig) -> Weights:
    """The layers of the fairseq-style models (Marian, BART, mBART, M2M100): q/k/v (and cross
    k/v) packed, biases, three norms a decoder layer."""
    sd: Weights = {}
    for side, n in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(n):
            h, o = f"{side}.layers.{i}.", f"{side}.{i}."
            for b in ("weight", "bias"):
                sd[f"{o}attn.qkv.{b}"] = torch.cat([w[f"{h}self_attn.{p}_proj.{b}"] for p in "qkv"])
                sd[f"{o}attn.out.{b}"] = w[f"{h}self_attn.out_proj.{b}"]
                sd[f"{o}res_attn.norm.{b}"] = w[f"{h}self_attn_layer_norm.{b}"]
                sd[f"{o}ffn.up.{b}"] = w[f"{h}fc1.{b}"]
                sd[f"{o}ffn.down.{b}"] = w[f"{h}fc2.{b}"]
                sd[f"{o}res_ffn.norm.{b}"] = w[f"{h}final_layer_norm.{b}"]
                if side == "decoder":
                    sd[f"{o}cross.q.{b}"] = w[f"{h}encoder_attn.q_proj.{b}"]
                    sd[f"{o}cross.kv.{b}"] = torch.cat(
                        [w[f"{h}encoder_attn.{p}_proj.{b}"] for p in "kv"]
                    )
                    sd[f"{o}cross.out.{b}"] = w[f"{h}encoder_attn.out_proj.{b}"]
                    sd[f"{o}res_cross.norm.{b}"] = w[f"{h}encoder_attn_layer_norm.{b}"]
    return sd


def same_as(w: Weights, names: list[str], ref: torch.Tensor, arch: str, what: str) -> set[str]:
    """Copies that some checkpoints store (tied embeddings, fixed tables): they must equal
    `ref` (else the model is not the one we map), and are not used."""
    for name in names:
        if name in w and not torch.allclose(w[name], ref, atol=1e-5, rtol=0):
            raise ValueError(f"{arch} weights: {name} differs from {what}, which edgeformer's "
                             "mapping assumes it equals")  # fmt: skip
    return {n for n in names if n in w}


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


# tokenizer classes whose extra special tokens are language codes (transformers' NLLB, mBART,
# mBART-50, M2M100 tokenizers)
LANGUAGE_TOKENIZERS = ("NllbTokenizer", "MBart50Tokenizer", "MBartTokenizer", "M2M100Tokenizer")


def source_frame(tokenizer_json: Path, eos: int) -> dict[str, list[int]]:
    """The ids the tokenizer's post-processor puts around a source text, as the task's
    `source_prefix` / `source_suffix` ({} when it is the runtime's default: just EOS after):
    T5's `$A </s>`, BART's `<s> $A </s>`, NLLB's `eng_Latn $A </s>`, mBART's `$A </s> en_XX`.
    A language token in them is what source_lang replaces."""
    data = _json(tokenizer_json)
    prefix, suffix = _frame(data.get("post_processor"), tokenizer_json)
    if prefix == [] and suffix == [eos]:
        return {}
    return {"source_prefix": prefix, "source_suffix": suffix}


def _frame(proc: object, where: Path) -> tuple[list[int], list[int]]:
    if proc is None:
        return [], []
    if not isinstance(proc, dict):
        raise ValueError(f"{where}: post_processor is not a JSON object")
    kind = proc.get("type")
    if kind == "Sequence":  # e.g. ByteLevel (offsets only) then a template
        frames = [_frame(p, where) for p in proc.get("processors") or []]
        framed = [f for f in frames if f != ([], [])]
        if len(framed) > 1:
            raise ValueError(f"{where}: several post-processors add special tokens")
        return framed[0] if framed else ([], [])
    if kind == "ByteLevel":
        return [], []
    if kind in ("RobertaProcessing", "BertProcessing"):  # [cls, id], [sep, id]
        return [int(proc["cls"][1])], [int(proc["sep"][1])]
    if kind == "TemplateProcessing":
        specials = proc.get("special_tokens") or {}
        prefix: list[int] = []
        suffix: list[int] = []
        side = prefix
        for piece in proc.get("single") or []:
            if "Sequence" in piece:
                side = suffix
            elif "SpecialToken" in piece:
                name = piece["SpecialToken"]["id"]
                side += [int(i) for i in specials[name]["ids"]]
        return prefix, suffix
    raise ValueError(f"{where}: unsupported post_processor type {kind!r}")


def language_task(
    src: Path, tokenizer: Path, frame: dict[str, list[int]], cfg: ModelConfig
) -> dict[str, Any]:
    """The checkpoint task's `languages` {code: token id} of a multilingual tokenizer
    (tokenizer_config.json's extra / additional special tokens that tokenizer.json has), with
    `source_lang` (the one in the source frame); {} for a tokenizer without language codes.
    `target_lang_position` "start": the decoder starts from the target language (mBART's
    fine-tuned models), which is then fixed."""
    if not (src / TOKENIZER_CONFIG).is_file():
        return {}
    tc = _json(src / TOKENIZER_CONFIG)
    cls = str(tc.get("tokenizer_class", "")).removesuffix("Fast")
    if cls not in LANGUAGE_TOKENIZERS:
        return {}
    codes = tc.get("extra_special_tokens") or tc.get("additional_special_tokens") or []
    if isinstance(codes, dict):  # transformers 5 may store named extra tokens
        codes = list(codes.values())
    ids = _added_ids(tokenizer)
    if cls == "M2M100Tokenizer":  # its codes are "de", its tokens __de__ (M2M100Tokenizer's)
        from ..spm import M2M100_LANGUAGES, m2m100_language_token

        setting = str(tc.get("language_codes") or "m2m100")
        codes = [m2m100_language_token(c) for c in M2M100_LANGUAGES.get(setting, [])]
        named = {t: t[2:-2] for t in codes}
    else:
        named = {c: c for c in codes if isinstance(c, str)}
    languages = {named[t]: ids[t] for t in named if t in ids}
    if not languages:
        raise ValueError(
            f"{src / TOKENIZER_CONFIG}: a {cls} without language tokens (its extra_special_tokens "
            "/ additional_special_tokens name none of tokenizer.json's added tokens)"
        )
    task: dict[str, Any] = {"languages": languages}
    framed = [c for c, i in languages.items()
              if i in frame.get("source_prefix", []) + frame.get("source_suffix", [])]  # fmt: skip
    if len(framed) == 1:
        task["source_lang"] = framed[0]
    if cfg.bos_id in languages.values():
        task["target_lang_position"] = "start"
    return task


def _added_ids(tokenizer_json: Path) -> dict[str, int]:
    if not tokenizer_json.is_file():
        return {}
    data = _json(tokenizer_json)
    added = data.get("added_tokens") or []
    return {t["content"]: t["id"] for t in added if isinstance(t, dict) and "content" in t}


def translation_task(src: Path, tokenizer: Path, cfg: ModelConfig) -> dict[str, Any]:
    """The task fields of a converted translator: source frame and languages."""
    frame = source_frame(tokenizer, cfg.eos_id)
    return frame | language_task(src, tokenizer, frame, cfg)


class FairseqLoader(Loader):
    """BART, mBART, M2M100: the configuration keys and layer weights they share."""

    norm: ClassVar[str] = "post"
    positional: ClassVar[str] = "learned"
    embedding_norm: ClassVar[bool] = True
    logits_bias: ClassVar[bool] = True  # final_logits_bias

    def config(self, f: Fields) -> ModelConfig:
        act = f.require("activation_function", tuple(ACTIVATIONS))
        vocab = f.positive("vocab_size")
        heads, d_ff = f.positive("encoder_attention_heads"), f.positive("encoder_ffn_dim")
        if f.positive("decoder_attention_heads") != heads:
            raise f.bad("decoder_attention_heads", f.get("decoder_attention_heads"),
                        f"encoder_attention_heads ({heads})")  # fmt: skip
        decoder_d_ff = f.positive("decoder_ffn_dim")
        pad, eos = f.token_id("pad_token_id", vocab), f.token_id("eos_token_id", vocab)
        if pad is None or eos is None or pad == eos:
            field, got = ("pad_token_id", pad) if pad is None else ("eos_token_id", eos)
            raise f.bad(field, got, "pad and EOS tokens, two different ids")
        # decoding starts from decoder_start_token_id, else BOS (transformers' generate)
        start = f.token_id("decoder_start_token_id", vocab)
        start = f.token_id("bos_token_id", vocab) if start is None else start
        if start is None or start == pad:
            raise f.bad("decoder_start_token_id", start, "a token id other than the padding")
        return ModelConfig(
            family="encoder-decoder",
            vocab_size=vocab,
            d_model=f.positive("d_model"),
            n_heads=heads,
            n_encoder_layers=f.positive("encoder_layers"),
            n_decoder_layers=f.positive("decoder_layers"),
            d_ff=d_ff,
            decoder_d_ff=None if decoder_d_ff == d_ff else decoder_d_ff,
            activation=ACTIVATIONS[str(act)],
            norm=self.norm,
            norm_type="layernorm",
            positional=self.positional,
            max_len=bounded_length(f, "max_position_embeddings"),
            dropout=0.0,
            tie_embeddings=f.flag("tie_word_embeddings", True),
            scale_embeddings=f.flag("scale_embedding"),
            embedding_norm=self.embedding_norm,
            separate_positions=self.positional == "learned" and self.embedding_norm,
            bias=True,
            logits_bias=self.logits_bias,
            pad_id=pad,
            bos_id=start,
            eos_id=eos,
        )

    def positions(self, w: WeightReader, cfg: ModelConfig, side: str) -> torch.Tensor:
        """A stack's position table, row i for position i: BART's learned one from row 2."""
        table = w[f"{side}.embed_positions.weight"]
        if table.shape[0] != cfg.max_len + 2:
            raise ValueError(
                f"{side}.embed_positions.weight has {table.shape[0]} rows, not "
                f"max_position_embeddings + 2 = {cfg.max_len + 2}"
            )
        return table[2:]

    def weights(self, w: WeightReader, cfg: ModelConfig) -> tuple[Weights, set[str]]:
        shared = w["shared.weight"]
        sd = {"embed.weight": shared, **fairseq_layers(w, cfg)}
        arch = type(self).__name__.removesuffix("Loader")
        sd["pos.table"] = self.positions(w, cfg, "decoder")
        if cfg.separate_positions:
            sd["src_pos.table"] = self.positions(w, cfg, "encoder")
        if self.embedding_norm:
            for side, ours in (("encoder", "enc_emb_norm"), ("decoder", "dec_emb_norm")):
                for b in ("weight", "bias"):
                    sd[f"{ours}.{b}"] = w[f"{side}.layernorm_embedding.{b}"]
        if cfg.norm == "pre":
            for side, ours in (("encoder", "enc_norm"), ("decoder", "dec_norm")):
                for b in ("weight", "bias"):
                    sd[f"{ours}.{b}"] = w[f"{side}.layer_norm.{b}"]
        if self.logits_bias:
            sd["logits_bias"] = w["final_logits_bias"].reshape(-1)
        tied = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]
        if cfg.tie_embeddings:
            tied.append("lm_head.weight")
        else:
            sd["lm_head.weight"] = w["lm_head.weight"]
        return sd, same_as(w, tied, shared, arch, "shared.weight")

    def task(self, src: Path, tokenizer: Path, cfg: ModelConfig) -> dict[str, Any]:
        return translation_task(src, tokenizer, cfg)


@register
class BartLoader(FairseqLoader):
    """BartForConditionalGeneration: post-LN, learned positions, embedding LayerNorm."""

    architectures = ("BartForConditionalGeneration",)
    model_types = ("bart",)
    defaults = dict(FAIRSEQ_DEFAULTS)


@register
class MBartLoader(FairseqLoader):
    """MBartForConditionalGeneration (mBART, mBART-50): BART pre-LN, a final norm per stack."""

    architectures = ("MBartForConditionalGeneration",)
    model_types = ("mbart",)
    defaults = FAIRSEQ_DEFAULTS | {"vocab_size": 50265, "decoder_start_token_id": None}
    norm = "pre"


@register
class M2M100Loader(FairseqLoader):
    """M2M100ForConditionalGeneration (M2M100, NLLB-200): pre-LN, fairseq sinusoids, scaled
    embeddings, ReLU, no logits bias."""

    architectures = ("M2M100ForConditionalGeneration",)
    model_types = ("m2m_100",)
    defaults = FAIRSEQ_DEFAULTS | {
        "vocab_size": 128112, "activation_function": "relu", "scale_embedding": True,
    }  # fmt: skip
    norm = "pre"
    positional = "learned"  # fairseq's sinusoids, computed here, as the positions' table
    embedding_norm = False
    logits_bias = False

    def positions(self, w: WeightReader, cfg: ModelConfig, side: str) -> torch.Tensor:
        """fairseq's table, made here: its size is checked against the embedding's first (a
        config.json must not make us allocate what no weight accounts for)."""
        shared = w["shared.weight"]
        if shared.shape[-1] != cfg.d_model:
            raise ValueError(
                f"config.json's d_model {cfg.d_model} is not the width of shared.weight "
                f"{list(shared.shape)}"
            )
        if cfg.max_len * cfg.d_model > max(shared.numel(), 1 << 26):
            raise ValueError(
                f"config.json's max_position_embeddings {cfg.max_len} makes a position table "
                f"larger than the embedding ({list(shared.shape)})"
            )
        table = fairseq_sinusoids(cfg.max_len + cfg.pad_id + 1, cfg.d_model, cfg.pad_id)
        return table[cfg.pad_id + 1 :]

    def tokenizers(self, src: Path, tmp: Path, arch: str) -> tuple[Path, Path | None]:
        """NLLB's tokenizer.json; M2M100's SentencePiece-only tokenizer (its transformers
        tokenizer has no fast form: sentencepiece.bpe.model and vocab.json) made into one."""
        if (src / HF_TOKENIZER).is_file():
            return super().tokenizers(src, tmp, arch)
        from ..spm import m2m100_tokenizer

        cfg = self.config(self.fields(read_json(src / "config.json"), arch))
        text, lacking = m2m100_tokenizer(src, cfg.vocab_size)
        if lacking:
            log.warning(
                "%s: %d pieces of sentencepiece.bpe.model are not in vocab.json: transformers "
                "encodes them as <unk>, edgeformer as their parts", src, lacking,
            )  # fmt: skip
        path = tmp / HF_TOKENIZER
        path.write_text(text, encoding="utf-8")
        return path, None


T5_ACTIVATIONS = {"relu": "relu", "gated-gelu": "geglu", "gated-silu": "swiglu",
                  "gelu_new": "gelu_tanh", "gelu": "gelu", "silu": "silu"}  # fmt: skip


@register
class T5Loader(Loader):
    """T5ForConditionalGeneration / MT5ForConditionalGeneration (T5, flan-T5, mT5)."""

    architectures = ("T5ForConditionalGeneration", "MT5ForConditionalGeneration")
    model_types = ("t5", "mt5")
    prefix = ""
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6,
        "num_decoder_layers": None, "num_heads": 8, "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128, "layer_norm_epsilon": 1e-6,
        "feed_forward_proj": "relu", "tie_word_embeddings": True, "pad_token_id": 0,
        "eos_token_id": 1, "decoder_start_token_id": 0, "n_positions": 512,
        "scale_decoder_outputs": None,
    }  # fmt: skip
    # MT5Config's own defaults where they differ from T5Config's
    mt5_defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 250112, "d_ff": 1024, "num_layers": 8, "num_heads": 6,
        "feed_forward_proj": "gated-gelu",
    }  # fmt: skip

    def fields(self, hf: dict, arch: str) -> Fields:
        mt5 = arch == "MT5ForConditionalGeneration"
        return Fields(hf, arch, self.defaults | (self.mt5_defaults if mt5 else {}))

    def config(self, f: Fields) -> ModelConfig:
        proj = str(f.require("feed_forward_proj", tuple(T5_ACTIVATIONS)))
        vocab, d_model = f.positive("vocab_size"), f.positive("d_model")
        layers = f.positive("num_layers")
        dec = f.get("num_decoder_layers")
        pad, eos = f.token_id("pad_token_id", vocab), f.token_id("eos_token_id", vocab)
        if pad is None or eos is None or pad == eos:
            field, got = ("pad_token_id", pad) if pad is None else ("eos_token_id", eos)
            raise f.bad(field, got, "pad and EOS tokens, two different ids")
        start = f.token_id("decoder_start_token_id", vocab)
        tied = f.flag("tie_word_embeddings", True)
        # the tied head's d_model^-0.5: transformers 5 writes scale_decoder_outputs; before it,
        # T5 scaled exactly when tied (v1.1 / flan: untied, unscaled); mT5 5.x never scales
        scaled = f.get("scale_decoder_outputs")
        if scaled is None:
            scaled = tied and f.hf.get("model_type", "t5") == "t5"
        # T5 has no length limit of its own: n_positions (512) bounds our caches and tables
        max_len = bounded_length(f, "n_positions") if f.get("n_positions") is not None else 512
        return ModelConfig(
            family="encoder-decoder",
            vocab_size=vocab,
            d_model=d_model,
            n_heads=f.positive("num_heads"),
            d_head=f.positive("d_kv"),
            n_encoder_layers=layers,
            n_decoder_layers=layers if dec is None else f.positive("num_decoder_layers"),
            d_ff=f.positive("d_ff"),
            activation=T5_ACTIVATIONS[proj],
            norm="pre",
            norm_type="rmsnorm",
            layer_norm_eps=f.number("layer_norm_epsilon"),
            positional="relative",
            relative_buckets=f.positive("relative_attention_num_buckets"),
            relative_max_distance=f.positive("relative_attention_max_distance"),
            attention_scale=1.0,
            max_len=max_len,
            dropout=0.0,
            tie_embeddings=tied,
            head_scale=d_model**-0.5 if scaled else None,
            scale_embeddings=False,
            bias=False,
            pad_id=pad,
            bos_id=pad if start is None else start,
            eos_id=eos,
        )

    def weights(self, w: WeightReader, cfg: ModelConfig) -> tuple[Weights, set[str]]:
        shared = w["shared.weight"]
        sd: Weights = {"embed.weight": shared}
        for side, n, ours in (("encoder", cfg.n_encoder_layers, "encoder"),
                              ("decoder", cfg.n_decoder_layers, "decoder")):  # fmt: skip
            for i in range(n):
                h, o = f"{side}.block.{i}.layer.", f"{ours}.{i}."
                a = f"{h}0.SelfAttention."
                sd[f"{o}attn.qkv.weight"] = torch.cat([w[f"{a}{p}.weight"] for p in "qkv"])
                sd[f"{o}attn.out.weight"] = w[f"{a}o.weight"]
                sd[f"{o}res_attn.norm.weight"] = w[f"{h}0.layer_norm.weight"]
                ff = 1
                if side == "decoder":
                    c = f"{h}1.EncDecAttention."
                    sd[f"{o}cross.q.weight"] = w[f"{c}q.weight"]
                    sd[f"{o}cross.kv.weight"] = torch.cat([w[f"{c}{p}.weight"] for p in "kv"])
                    sd[f"{o}cross.out.weight"] = w[f"{c}o.weight"]
                    sd[f"{o}res_cross.norm.weight"] = w[f"{h}1.layer_norm.weight"]
                    ff = 2
                d = f"{h}{ff}.DenseReluDense."
                if cfg.gated:
                    sd[f"{o}ffn.gate.weight"] = w[f"{d}wi_0.weight"]
                    sd[f"{o}ffn.up.weight"] = w[f"{d}wi_1.weight"]
                else:
                    sd[f"{o}ffn.up.weight"] = w[f"{d}wi.weight"]
                sd[f"{o}ffn.down.weight"] = w[f"{d}wo.weight"]
                sd[f"{o}res_ffn.norm.weight"] = w[f"{h}{ff}.layer_norm.weight"]
            first = f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
            sd[f"{'enc' if side == 'encoder' else 'dec'}_bias.table"] = w[first]
            sd[f"{'enc' if side == 'encoder' else 'dec'}_norm.weight"] = w[
                f"{side}.final_layer_norm.weight"
            ]
        tied = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]
        if cfg.tie_embeddings:
            tied.append("lm_head.weight")
        else:
            sd["lm_head.weight"] = w["lm_head.weight"]
        return sd, same_as(w, tied, shared, "T5", "shared.weight")

    def task(self, src: Path, tokenizer: Path, cfg: ModelConfig) -> dict[str, Any]:
        return translation_task(src, tokenizer, cfg)
