"""MarianMTModel (OPUS-MT): the encoder-decoder translators."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from ...core.config import ModelConfig
from .fields import Fields
from .files import read_json
from .loaders import HF_TOKENIZER, Loader, WeightReader, Weights, register
from .seq2seq import bounded_length, fairseq_layers, same_as

MARIAN_ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu",
                      "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}  # fmt: skip
# BART-era fields some OPUS-MT config.json files carry: only Marian's own values are mapped
MARIAN_FIXED = {"normalize_before": False, "add_final_layer_norm": False,
                "normalize_embedding": False, "layernorm_embedding": False,
                "static_position_embeddings": True, "add_bias_logits": False,
                "is_decoder": False}  # fmt: skip


@register
class MarianLoader(Loader):
    """MarianMTModel (OPUS-MT): encoder-decoder, post-LN, Marian's sinusoids (all sines, then
    all cosines), scaled embeddings (scale_embedding), swish = SiLU, biases,
    final_logits_bias, one embedding shared by encoder and decoder (tied or untied head), or
    (share_encoder_decoder_embeddings false: OPUS-MT "tc-big") the encoder's own over its own
    vocabulary (vocab_size -> src_vocab_size; decoder_vocab_size -> vocab_size, the decoder's
    and the head's); decoding starts from decoder_start_token_id (the pad token). Its
    tokenizers come from source.spm / target.spm and vocab.json (and target_vocab.json with
    separate vocabularies: models.spm), or from a fast tokenizer.json for both sides when the
    folder has no .spm files."""

    architectures = ("MarianMTModel",)
    model_types = ("marian",)
    defaults: ClassVar[dict[str, Any]] = {
        "vocab_size": 58101, "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
        "encoder_attention_heads": 16, "decoder_attention_heads": 16, "encoder_ffn_dim": 4096,
        "decoder_ffn_dim": 4096, "max_position_embeddings": 1024, "pad_token_id": 58100,
        "eos_token_id": 0, "decoder_start_token_id": 58100,
        "activation_function": "gelu", "share_encoder_decoder_embeddings": True,
        "tie_word_embeddings": True, "scale_embedding": False, "decoder_vocab_size": None,
        "bad_words_ids": None, **MARIAN_FIXED,
    }  # fmt: skip

    def config(self, f: Fields) -> ModelConfig:
        act = f.require("activation_function", tuple(MARIAN_ACTIVATIONS))
        for name, value in MARIAN_FIXED.items():
            f.require(name, (value,))
        shared = f.flag("share_encoder_decoder_embeddings", True)
        src_vocab = f.positive("vocab_size")
        dec_vocab = f.get("decoder_vocab_size")
        if shared and dec_vocab not in (None, src_vocab):
            why = f"vocab_size ({src_vocab}) with share_encoder_decoder_embeddings"
            raise f.bad("decoder_vocab_size", dec_vocab, why)
        # separate vocabularies: the decoder's (and the head's) is decoder_vocab_size, which
        # transformers sets to vocab_size when absent
        vocab = src_vocab if dec_vocab is None else f.positive("decoder_vocab_size")
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
        f.require("bad_words_ids", (None, [[pad]]))
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
            max_len=bounded_length(f, "max_position_embeddings"),  # the sinusoids' table
            dropout=0.0,
            tie_embeddings=f.flag("tie_word_embeddings"),
            scale_embeddings=f.flag("scale_embedding"),
            bias=True,
            logits_bias=True,
            pad_id=pad,
            bos_id=start,
            eos_id=eos,
            src_vocab_size=None if shared else src_vocab,
        )

    def weights(self, w: WeightReader, cfg: ModelConfig) -> tuple[Weights, set[str]]:
        """q/k/v (and cross k/v) packed."""
        from ..layers import sinusoidal_table

        sd = {"logits_bias": w["final_logits_bias"].reshape(-1)}
        if cfg.src_vocab_size is None:
            shared = w["shared.weight"]
            tied = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]
        else:  # separate vocabularies: the encoder's table, the decoder's (the head's)
            shared = w["decoder.embed_tokens.weight"]
            sd["src_embed.weight"] = w["encoder.embed_tokens.weight"]
            tied = []
            for name, rows, field in (
                ("encoder.embed_tokens.weight", cfg.src_vocab_size, "vocab_size"),
                ("decoder.embed_tokens.weight", cfg.vocab_size, "decoder_vocab_size"),
                ("final_logits_bias", cfg.vocab_size, "decoder_vocab_size"),
            ):
                got = w[name].shape[-1 if name == "final_logits_bias" else 0]
                if got != rows:
                    raise ValueError(
                        f"MarianMTModel weights: {name} has {got} rows but config.json's "
                        f"{field} is {rows}"
                    )
        sd["embed.weight"] = shared
        sd |= fairseq_layers(w, cfg)
        if cfg.tie_embeddings:
            tied.append("lm_head.weight")
        else:
            sd["lm_head.weight"] = w["lm_head.weight"]
        what = "shared.weight" if cfg.src_vocab_size is None else "decoder.embed_tokens.weight"
        ignored = same_as(w, tied, shared, "MarianMTModel", what)
        table = sinusoidal_table(cfg.max_len, cfg.d_model, "split")
        positions = [f"{side}.embed_positions.weight" for side in ("encoder", "decoder")]
        return sd, ignored | same_as(
            w, positions, table, "MarianMTModel", "Marian's sinusoidal table"
        )

    def tokenizers(self, src: Path, tmp: Path, arch: str) -> tuple[Path, Path | None]:
        """source.spm, target.spm, vocab.json (target_vocab.json) -> two tokenizer.json
        (targets, sources); a fast tokenizer.json saved beside the model and no .spm files:
        one for both sides (one shared vocabulary only)."""
        cfg = self.config(self.fields(read_json(src / "config.json"), arch))
        separate = cfg.src_vocab_size is not None
        spm_files = (src / "source.spm").is_file() or (src / "target.spm").is_file()
        if not spm_files and (src / HF_TOKENIZER).is_file():
            if separate:
                raise FileNotFoundError(
                    f"{src} has no source.spm / target.spm: a Marian model with separate "
                    "vocabularies (share_encoder_decoder_embeddings false) needs them with "
                    "vocab.json and target_vocab.json (one tokenizer.json serves one vocabulary)"
                )
            return src / HF_TOKENIZER, None
        from ..spm import marian_tokenizers

        sizes = (cfg.source_vocab, cfg.vocab_size)
        texts = marian_tokenizers(src, separate, sizes)
        source, target = tmp / "source.json", tmp / "target.json"
        source.write_text(texts[0])
        target.write_text(texts[1])
        return target, source

    def task(self, src: Path, tokenizer: Path, cfg: ModelConfig) -> dict[str, Any]:
        """Separate vocabularies: the sources end with the source vocabulary's </s>
        (MarianTokenizer's, in its input mode), which need not be the target's id."""
        if cfg.src_vocab_size is None:
            return {}
        from tokenizers import Tokenizer

        eos = Tokenizer.from_file(str(tokenizer)).token_to_id("</s>")
        if eos is None:
            raise ValueError(f"{src / 'vocab.json'} has no </s> (Marian's EOS)")
        return {"source_suffix": [eos]}
