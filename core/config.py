"""Model configuration: one dataclass for both families, validated on construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from .flags import doc

FAMILIES = ("encoder-decoder", "decoder-only")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swiglu", "silu")  # gelu_tanh: GPT-2's "gelu_new"
NORMS = ("post", "pre")
NORM_TYPES = ("layernorm", "rmsnorm")
POSITIONALS = ("sinusoidal", "learned", "rotary")
SINUSOID_LAYOUTS = ("interleaved", "split")


@dataclass
class ModelConfig:
    """The model's hyperparameters, for both families; validated on construction."""

    family: str = doc(
        "encoder-decoder", "encoder-decoder (translation) or decoder-only (LM)", choices=FAMILIES
    )
    vocab_size: int = doc(8000, "vocabulary size")
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
        "(gated SiLU: Llama), silu (ungated: Marian's swish)", choices=ACTIVATIONS,
    )  # fmt: skip
    norm: str = doc("post", "post-LN (the paper) or pre-LN residuals", choices=NORMS)
    norm_type: str = doc(
        "layernorm", "layernorm, or rmsnorm (no mean, no bias: Llama)", choices=NORM_TYPES
    )
    positional: str = doc(
        "sinusoidal", "position encoding: sinusoidal (the paper), learned or rotary",
        choices=POSITIONALS,
    )  # fmt: skip
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
    scale_embeddings: bool = doc(True, "token vectors times sqrt(d_model) (the paper; not GPT-2)")
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
        if self.d_model % self.n_heads:
            bad(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        kv = self.n_kv_heads
        if kv is not None and (not isinstance(kv, int) or kv < 1 or self.n_heads % kv):
            bad(f"n_kv_heads={kv!r} must be a positive divisor of n_heads={self.n_heads}")
        if kv not in (None, self.n_heads) and self.family == "encoder-decoder":
            bad(f"n_kv_heads={kv} (grouped-query attention) is supported for decoder-only models")
        if not self.rope_theta > 0:
            bad(f"rope_theta={self.rope_theta} must be > 0")
        if self.positional == "sinusoidal" and self.d_model % 2:
            bad(f"sinusoidal positional encoding needs an even d_model, got {self.d_model}")
        if self.positional == "rotary" and self.head_dim % 2:
            bad(f"rotary positional encoding needs an even head dim, got {self.head_dim}")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            p = getattr(self, name)
            if p is not None and not (isinstance(p, (int, float)) and 0.0 <= p < 1.0):
                bad(f"{name}={p!r} must be in [0, 1)")
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in ids.items():
            if not 0 <= value < self.vocab_size:
                bad(f"{name}={value} is outside the vocabulary (size {self.vocab_size})")
        # encoder-decoder: the decoder starts from bos_id, which may be the padding id (Marian:
        # padding is always masked, never chosen); eos_id differs from both
        if self.family == "encoder-decoder" and self.eos_id in (self.pad_id, self.bos_id):
            bad(f"eos_id must differ from pad_id and bos_id, got {ids}")
        # decoder-only: padding is masked and never chosen, so pad_id and bos_id may equal eos_id
        # (GPT-2: 50256 is all three); otherwise they differ
        if self.family == "decoder-only" and self.pad_id == self.bos_id != self.eos_id:
            bad(f"pad_id and bos_id must differ unless both equal eos_id, got {ids}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

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
