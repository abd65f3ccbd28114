"""Model configuration: one dataclass for both families, validated on construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

FAMILIES = ("encoder-decoder", "decoder-only")
ACTIVATIONS = ("relu", "gelu")
NORMS = ("post", "pre")
POSITIONALS = ("sinusoidal", "learned", "rotary")


@dataclass
class ModelConfig:
    family: str = "encoder-decoder"  # "encoder-decoder" (translation) or "decoder-only" (LM)
    vocab_size: int = 8000
    d_model: int = 256
    n_heads: int = 4
    n_encoder_layers: int = 3  # ignored by decoder-only
    n_decoder_layers: int = 3
    d_ff: int = 1024
    activation: str = "relu"  # "relu" | "gelu"
    norm: str = "post"  # "post" (the paper) | "pre"
    positional: str = "sinusoidal"  # "sinusoidal" | "learned" | "rotary"
    max_len: int = 256  # longest sequence (source, target or context) the model accepts
    dropout: float = 0.1
    tie_embeddings: bool = True  # output projection shares the token embedding matrix
    layer_norm_eps: float = 1e-5
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise ValueError(f"invalid ModelConfig: {msg}")

        if self.family not in FAMILIES:
            bad(f"family={self.family!r}, expected one of {FAMILIES}")
        if self.activation not in ACTIVATIONS:
            bad(f"activation={self.activation!r}, expected one of {ACTIVATIONS}")
        if self.norm not in NORMS:
            bad(f"norm={self.norm!r}, expected one of {NORMS}")
        if self.positional not in POSITIONALS:
            bad(f"positional={self.positional!r}, expected one of {POSITIONALS}")
        for name in ("vocab_size", "d_model", "n_heads", "n_decoder_layers", "d_ff", "max_len"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                bad(f"{name}={getattr(self, name)!r} must be a positive integer")
        if self.family == "encoder-decoder" and self.n_encoder_layers < 1:
            bad(f"n_encoder_layers={self.n_encoder_layers} must be >= 1 for an encoder-decoder")
        if self.d_model % self.n_heads:
            bad(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.positional == "sinusoidal" and self.d_model % 2:
            bad(f"sinusoidal positional encoding needs an even d_model, got {self.d_model}")
        if self.positional == "rotary" and self.head_dim % 2:
            bad(f"rotary positional encoding needs an even head dim, got {self.head_dim}")
        if not 0.0 <= self.dropout < 1.0:
            bad(f"dropout={self.dropout} must be in [0, 1)")
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in ids.items():
            if not 0 <= value < self.vocab_size:
                bad(f"{name}={value} is outside the vocabulary (size {self.vocab_size})")
        if len(set(ids.values())) != 3:
            bad(f"pad_id, bos_id and eos_id must differ, got {ids}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"invalid ModelConfig: unknown keys {unknown}")
        return cls(**d)
