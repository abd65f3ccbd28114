"""Model configuration: one dataclass for both families, validated on construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from .flags import doc

FAMILIES = ("encoder-decoder", "decoder-only")
# gelu_tanh: GPT-2's "gelu_new"; swiglu / geglu: gated (silu(gate) * up, gelu_tanh(gate) * up)
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swiglu", "silu", "geglu")
GATED = ("swiglu", "geglu")
NORMS = ("post", "pre")
NORM_TYPES = ("layernorm", "rmsnorm")
# relative: T5's learned bias per (bucketed) query-key distance, added to the attention logits
POSITIONALS = ("sinusoidal", "learned", "rotary", "relative")
SINUSOID_LAYOUTS = ("interleaved", "split")
# per-layer attention (Hugging Face's layer_types values)
FULL, SLIDING = "full_attention", "sliding_attention"
LAYER_TYPES = (FULL, SLIDING)
# rotary scalings (Hugging Face's rope_type): each fixes the rotary angles once (longrope: two
# sets, the long one for calls reaching past original_max_position_embeddings)
ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope")


@dataclass
class ModelConfig:
    """The model's hyperparameters, for both families; validated on construction."""

    family: str = doc(
        "encoder-decoder", "encoder-decoder (translation) or decoder-only (LM)", choices=FAMILIES
    )
    vocab_size: int = doc(8000, "vocabulary size")
    src_vocab_size: int | None = doc(
        None, "the encoder's own vocabulary and embedding (encoder-decoder: OPUS-MT tc-big's "
        "separate source vocabulary); none: the one shared vocabulary",
    )  # fmt: skip
    d_model: int = doc(256, "width of the model (embedding and residual stream)")
    n_heads: int = doc(4, "attention heads")
    n_encoder_layers: int = doc(3, "encoder layers (encoder-decoder only)")
    n_decoder_layers: int = doc(3, "decoder layers")
    d_ff: int = doc(1024, "hidden width of each feed-forward block")
    decoder_d_ff: int | None = doc(
        None, "hidden width of the decoder's feed-forward blocks (encoder-decoder; none: --d-ff)"
    )
    activation: str = doc(
        "relu", "feed-forward activation: relu, gelu, gelu_tanh (GPT-2's gelu_new), swiglu "
        "(gated SiLU: Llama), silu (ungated: Marian's swish), geglu (gated gelu_tanh: Gemma)",
        choices=ACTIVATIONS,
    )  # fmt: skip
    norm: str = doc("post", "post-LN (the paper) or pre-LN residuals", choices=NORMS)
    norm_type: str = doc(
        "layernorm", "layernorm, or rmsnorm (no mean, no bias: Llama)", choices=NORM_TYPES
    )
    positional: str = doc(
        "sinusoidal", "position encoding: sinusoidal (the paper), learned, rotary or relative "
        "(T5's bucketed attention bias; encoder-decoder)", choices=POSITIONALS,
    )  # fmt: skip
    separate_positions: bool = doc(
        False, "learned positions: the encoder has its own table (BART, mBART; "
        "encoder-decoder)",
    )  # fmt: skip
    relative_buckets: int | None = doc(
        None, "relative positions: distance buckets of the attention bias (none: 32, T5's)"
    )
    relative_max_distance: int | None = doc(
        None, "relative positions: the distance from which buckets stop growing (none: 128)"
    )
    sinusoid_layout: str = doc(
        "interleaved", "sinusoids: interleaved (sin, cos of each frequency side by side: the "
        "paper) or split (all sines, then all cosines: Marian)", choices=SINUSOID_LAYOUTS,
    )  # fmt: skip
    max_len: int = doc(256, "longest sequence (source, target or context) the model accepts")
    dropout: float = doc(0.1, "dropout on embeddings and each residual branch (training only)")
    attention_dropout: float | None = doc(
        None, "dropout on attention probabilities (none: --dropout; fairseq's attention_dropout)"
    )
    activation_dropout: float | None = doc(
        None, "dropout on the feed-forward hidden activations (none: --dropout)"
    )
    tie_embeddings: bool = doc(True, "the output projection shares the token embedding matrix")
    layer_norm_eps: float = doc(1e-5, "epsilon of every norm (LayerNorm or RMSNorm)")
    n_kv_heads: int | None = doc(None, "key/value heads: grouped-query attention (none: --n-heads)")
    rope_theta: float = doc(10000.0, "rotary base")
    d_head: int | None = doc(
        None, "width of each attention head (none: d_model / n_heads; Qwen3 and Gemma set it)"
    )
    qkv_bias: bool | None = doc(
        None, "the query/key/value projections have biases (none: as --bias; Qwen2: on, the "
        "other linear layers without)",
    )  # fmt: skip
    qk_norm: bool = doc(
        False, "an RMSNorm over each head's query and key, before rotary (Qwen3, Gemma 3)"
    )
    sandwich_norm: bool = doc(
        False, "pre-LN with a second norm on each sublayer's output before the residual add "
        "(Gemma 2 and 3)",
    )  # fmt: skip
    rotary_dim: int | None = doc(
        None, "head dims that rotary turns, the first ones (none: all; Phi-4-mini: 3/4)"
    )
    rope_scaling: dict | None = doc(
        None, "rotary scaling as Hugging Face's rope_parameters: a JSON object with rope_type "
        "linear (factor), llama3 (factor, low_freq_factor, high_freq_factor, "
        "original_max_position_embeddings), yarn (factor, original_max_position_embeddings, "
        "...) or longrope (short_factor, long_factor, original_max_position_embeddings, ...)",
        metavar="JSON",
    )  # fmt: skip
    attention_window: int | None = doc(
        None, "local attention: a token sees itself and the N - 1 before it, in the layers "
        "--layer-types names sliding_attention (all, without --layer-types)",
    )  # fmt: skip
    layer_types: list[str] | None = doc(
        None, "each decoder layer's attention, full_attention or sliding_attention, in order "
        "(repeat the flag once per layer)", metavar="TYPE",
    )  # fmt: skip
    local_rope_theta: float | None = doc(
        None, "rotary base of the sliding_attention layers (none: rope_theta; Gemma 3: 10000)"
    )
    attention_scale: float | None = doc(
        None, "factor on the attention logits (none: 1/sqrt(head width); Gemma: "
        "query_pre_attn_scalar^-0.5)",
    )  # fmt: skip
    attn_softcap: float | None = doc(
        None, "attention logits capped smoothly at +-X: X tanh(s / X) (Gemma 2: 50)"
    )
    logit_softcap: float | None = doc(
        None, "output logits capped smoothly at +-X: X tanh(z / X) (Gemma 2: 30)"
    )
    scale_embeddings: bool = doc(True, "token vectors times sqrt(d_model) (the paper; not GPT-2)")
    embedding_norm: bool = doc(
        False, "a LayerNorm on the input vectors (token + position) before the first layer, one "
        "per stack (BART's and mBART's layernorm_embedding; encoder-decoder)",
    )  # fmt: skip
    head_scale: float | None = doc(
        None, "factor on the last hidden states before the output projection (T5 with tied "
        "embeddings: d_model^-0.5)",
    )  # fmt: skip
    bias: bool = doc(True, "linear layers have biases (norms keep theirs)")
    logits_bias: bool = doc(
        False, "a learned bias added to the logits (Marian's final_logits_bias)"
    )
    pad_id: int = doc(0, "padding token id")
    bos_id: int = doc(1, "beginning-of-sequence token id")
    eos_id: int = doc(2, "end-of-sequence token id")

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise ValueError(f"invalid ModelConfig: {msg}")

        if self.family not in FAMILIES:
            bad(f"family={self.family!r}, expected one of {FAMILIES}")
        if self.activation not in ACTIVATIONS:
            bad(f"activation={self.activation!r}, expected one of {ACTIVATIONS}")
        if self.norm not in NORMS:
            bad(f"norm={self.norm!r}, expected one of {NORMS}")
        if self.norm_type not in NORM_TYPES:
            bad(f"norm_type={self.norm_type!r}, expected one of {NORM_TYPES}")
        if self.positional not in POSITIONALS:
            bad(f"positional={self.positional!r}, expected one of {POSITIONALS}")
        if self.sinusoid_layout not in SINUSOID_LAYOUTS:
            bad(f"sinusoid_layout={self.sinusoid_layout!r}, expected one of {SINUSOID_LAYOUTS}")
        for name in ("vocab_size", "d_model", "n_heads", "n_decoder_layers", "d_ff", "max_len"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                bad(f"{name}={getattr(self, name)!r} must be a positive integer")
        ff = self.decoder_d_ff
        if ff is not None and (not isinstance(ff, int) or ff < 1):
            bad(f"decoder_d_ff={ff!r} must be a positive integer (or none: d_ff)")
        if ff is not None and self.family == "decoder-only":
            bad(f"decoder_d_ff={ff} is for encoder-decoder models (decoder-only: d_ff)")
        if self.family == "encoder-decoder" and self.n_encoder_layers < 1:
            bad(f"n_encoder_layers={self.n_encoder_layers} must be >= 1 for an encoder-decoder")
        kv = self.n_kv_heads
        if kv is not None and (not isinstance(kv, int) or kv < 1 or self.n_heads % kv):
            bad(f"n_kv_heads={kv!r} must be a positive divisor of n_heads={self.n_heads}")
        if kv not in (None, self.n_heads) and self.family == "encoder-decoder":
            bad(f"n_kv_heads={kv} (grouped-query attention) is supported for decoder-only models")
        if not self.rope_theta > 0:
            bad(f"rope_theta={self.rope_theta} must be > 0")
        if self.positional == "sinusoidal" and self.d_model % 2:
            bad(f"sinusoidal positional encoding needs an even d_model, got {self.d_model}")
        dh = self.d_head
        if dh is not None and (not isinstance(dh, int) or isinstance(dh, bool) or dh < 1):
            bad(f"d_head={dh!r} must be a positive integer (or none: d_model / n_heads)")
        if dh is None and self.d_model % self.n_heads:
            bad(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.positional == "rotary" and self.rotary_dims % 2:
            bad(
                f"rotary positional encoding needs an even head dim (rotary dims), got "
                f"{self.rotary_dims}"
            )
        rd = self.rotary_dim
        if rd is not None and (self.positional != "rotary" or not isinstance(rd, int)
                               or not 0 < rd <= self.head_dim):  # fmt: skip
            bad(f"rotary_dim={rd!r} must be in [1, head dim {self.head_dim}] with rotary positions")
        self._check_rope(bad)
        self._check_attention(bad)
        self._check_encoder_decoder(bad)
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            p = getattr(self, name)
            if p is not None and not (isinstance(p, (int, float)) and 0.0 <= p < 1.0):
                bad(f"{name}={p!r} must be in [0, 1)")
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in ids.items():
            if not 0 <= value < self.vocab_size:
                bad(f"{name}={value} is outside the vocabulary (size {self.vocab_size})")
        # encoder-decoder: the decoder starts from bos_id, which may be the padding id (Marian,
        # T5: padding is always masked, never chosen) or the EOS (BART, mBART-50, M2M100, NLLB:
        # fed first, it ends nothing); eos_id differs from pad_id
        if self.family == "encoder-decoder" and self.eos_id == self.pad_id:
            bad(f"eos_id must differ from pad_id, got {ids}")
        # decoder-only: padding is masked and never chosen, so pad_id and bos_id may equal eos_id
        # (GPT-2: 50256 is all three); otherwise they differ
        if self.family == "decoder-only" and self.pad_id == self.bos_id != self.eos_id:
            bad(f"pad_id and bos_id must differ unless both equal eos_id, got {ids}")

    def _check_rope(self, bad) -> None:
        """rope_scaling's type and the fields it needs; local_rope_theta."""
        for name in ("local_rope_theta",):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and v > 0):
                bad(f"{name}={v!r} must be > 0")
        rs = self.rope_scaling
        if rs is None:
            return
        if not isinstance(rs, dict) or rs.get("rope_type") not in ROPE_TYPES:
            bad(f"rope_scaling={rs!r} needs a rope_type in {ROPE_TYPES}")
        if self.positional != "rotary":
            bad("rope_scaling needs rotary positions")
        need = {
            "default": (),
            "linear": ("factor",),
            "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                       "original_max_position_embeddings"),
            "yarn": ("factor", "original_max_position_embeddings"),
            "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
        }[rs["rope_type"]]  # fmt: skip
        missing = [k for k in need if rs.get(k) is None]
        if missing:
            bad(f"rope_scaling of rope_type {rs['rope_type']!r} needs {missing}")
        for k in ("short_factor", "long_factor"):
            if k in need and (not isinstance(rs[k], list) or len(rs[k]) != self.rotary_dims // 2):
                bad(f"rope_scaling.{k} must list {self.rotary_dims // 2} numbers (rotary dims / 2)")

    def _check_attention(self, bad) -> None:
        """Sliding windows, layer types, logit caps, q/k and sandwich norms: decoder-only."""
        extras = {
            "attention_window": self.attention_window, "layer_types": self.layer_types,
            "attn_softcap": self.attn_softcap, "logit_softcap": self.logit_softcap,
            "qk_norm": self.qk_norm or None, "sandwich_norm": self.sandwich_norm or None,
            "local_rope_theta": self.local_rope_theta,
        }  # fmt: skip
        if self.family == "encoder-decoder" and any(v is not None for v in extras.values()):
            given = {k: v for k, v in extras.items() if v is not None}
            bad(f"{given} are supported for decoder-only models")
        w = self.attention_window
        if w is not None and (not isinstance(w, int) or isinstance(w, bool) or w < 1):
            bad(f"attention_window={w!r} must be a positive integer")
        lt = self.layer_types
        if lt is not None:
            if not isinstance(lt, list) or len(lt) != self.n_decoder_layers:
                bad(f"layer_types must list {self.n_decoder_layers} layer types, got {lt!r}")
            if any(t not in LAYER_TYPES for t in lt):
                bad(f"layer_types={lt!r}: each one of {LAYER_TYPES}")
            if SLIDING in lt and w is None:
                bad("layer_types names sliding_attention layers but attention_window is none")
        for name in ("attention_scale", "attn_softcap", "logit_softcap"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not 0 < v < float("inf")):  # fmt: skip
                bad(f"{name}={v!r} must be a positive number (or none)")
        if self.sandwich_norm and self.norm != "pre":
            bad("sandwich_norm needs norm='pre' (a norm before and after each sublayer)")
        if self.qk_norm and self.norm_type != "rmsnorm":
            bad("qk_norm is an RMSNorm: it needs norm_type='rmsnorm'")

    def _check_encoder_decoder(self, bad) -> None:
        """Embedding norms, their own positions, relative positions: encoder-decoder only."""
        extras = {
            "embedding_norm": self.embedding_norm or None,
            "positional": "relative" if self.positional == "relative" else None,
            "separate_positions": self.separate_positions or None,
        }  # fmt: skip
        if self.family == "decoder-only" and any(v is not None for v in extras.values()):
            given = {k: v for k, v in extras.items() if v is not None}
            bad(f"{given} are supported for encoder-decoder models")
        for name in ("relative_buckets", "relative_max_distance"):
            v = getattr(self, name)
            if v is not None and self.positional != "relative":
                bad(f"{name} needs positional='relative'")
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 2):
                bad(f"{name}={v!r} must be an integer >= 2")
        sv = self.src_vocab_size
        if sv is not None and (not isinstance(sv, int) or isinstance(sv, bool) or sv < 1):
            bad(f"src_vocab_size={sv!r} must be a positive integer (or none: vocab_size)")
        if sv is not None and self.family == "decoder-only":
            bad(f"src_vocab_size={sv} is for encoder-decoder models (decoder-only: vocab_size)")
        if self.separate_positions and self.positional != "learned":
            bad("separate_positions needs positional='learned'")
        hs = self.head_scale
        if hs is not None and (isinstance(hs, bool) or not isinstance(hs, (int, float))
                               or not 0 < hs < float("inf")):  # fmt: skip
            bad(f"head_scale={hs!r} must be a positive number (or none)")

    @property
    def buckets(self) -> tuple[int, int]:
        """Relative positions' (buckets, max distance), T5's defaults where unset."""
        return (self.relative_buckets or 32, self.relative_max_distance or 128)

    @property
    def source_vocab(self) -> int:
        """The encoder's vocabulary: src_vocab_size, or the one shared vocab_size."""
        return self.vocab_size if self.src_vocab_size is None else self.src_vocab_size

    @property
    def source_pad_id(self) -> int:
        """The id that pads sources: pad_id, or 0 where pad_id is beyond a separate source
        vocabulary (padding is masked: any id of the source vocabulary does)."""
        return self.pad_id if self.pad_id < self.source_vocab else 0

    @property
    def head_dim(self) -> int:
        """Each attention head's width: d_head, or d_model / n_heads."""
        return self.d_model // self.n_heads if self.d_head is None else self.d_head

    @property
    def rotary_dims(self) -> int:
        """The head dims rotary turns (the first ones): rotary_dim, or all of them."""
        return self.head_dim if self.rotary_dim is None else self.rotary_dim

    @property
    def attention_bias(self) -> bool:
        """Whether the query/key/value projections have biases (qkv_bias, or bias)."""
        return self.bias if self.qkv_bias is None else self.qkv_bias

    def layer_type(self, i: int) -> str:
        """Decoder layer i's attention: full_attention or sliding_attention."""
        if self.layer_types is not None:
            return self.layer_types[i]
        return FULL if self.attention_window is None else SLIDING

    @property
    def gated(self) -> bool:
        """A gated feed-forward block (swiglu, geglu): down(act(gate(x)) * up(x))."""
        return self.activation in GATED

    @property
    def decoder_ffn(self) -> int:
        """The decoder layers' feed-forward width: decoder_d_ff, or d_ff when None."""
        return self.d_ff if self.decoder_d_ff is None else self.decoder_d_ff

    @property
    def attention_p(self) -> float:
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    @property
    def activation_p(self) -> float:
        return self.dropout if self.activation_dropout is None else self.activation_dropout

    @property
    def kv_heads(self) -> int:
        """Key/value heads: n_kv_heads, or n_heads when None (plain multi-head attention)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"invalid ModelConfig: unknown keys {unknown}")
        return cls(**d)
