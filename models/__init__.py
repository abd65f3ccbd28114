"""The Transformer in PyTorch: an encoder-decoder for translation and a decoder-only LM."""

from ..core.config import ModelConfig
from .generation import complete_ids, translate_ids
from .transformer import DecoderOnly, EncoderDecoder, build_model

__all__ = [
    "ModelConfig",
    "EncoderDecoder",
    "DecoderOnly",
    "build_model",
    "translate_ids",
    "complete_ids",
]
