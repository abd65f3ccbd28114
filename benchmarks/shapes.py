"""Benchmark shapes and workloads: the model sizes every stack runs, and the inputs they get.

ED = encoder-decoder (post-LN, sinusoidal, ReLU), LM = decoder-only (pre-LN, learned positions,
GELU). A Hugging Face model of the same shape (MarianMTModel / GPT2LMHeadModel, and a Llama for
onnxruntime-genai) holds the random weights; every stack runs a conversion of it (ours too,
unless --package), so that all outputs can be compared with HF PyTorch's token for token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # edgeformer.models imports torch: the memory child of our runtime must not
    from edgeformer.core.config import ModelConfig

SEED = 1234


@dataclass(frozen=True)
class Shape:
    name: str  # "ed" | "lm"
    cfg: ModelConfig  # our model; peers mirror it

    @property
    def family(self) -> str:
        return self.cfg.family

    @property
    def is_ed(self) -> bool:
        return self.cfg.family == "encoder-decoder"

    def describe(self) -> str:
        c = self.cfg
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
}
SWEEP_BATCHES = (1, 2, 4, 8, 16, 32)
QUICK_SWEEP_BATCHES = (1, 4, 16)


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
