"""Hugging Face checkpoints -> edgeformer checkpoints, without importing transformers.

A local Hugging Face model folder (config.json, model.safetensors or a sharded
model.safetensors.index.json, tokenizer.json) is read, its config is mapped exactly onto
ModelConfig and its weights onto our module names by the loader of its architecture
(`loaders.LOADERS`: decoders.py, marian.py), and the result is written by the one checkpoint
writer (models.checkpoint.save_checkpoint). Anything a config asks for that edgeformer does not
model is a ValueError that names the field and its value: never a silently different model.
"""

from __future__ import annotations

from . import decoders, marian, seq2seq  # noqa: F401  (each registers its loaders)
from .convert import (
    HF_CONFIG,
    HF_INDEX,
    HF_WEIGHTS,
    check_out,
    convert_hf,
    hf_model_config,
    is_hf_model_dir,
    load_weights,
    map_weights,
    read_hf_config,
)
from .loaders import HF_TOKENIZER, LOADERS, Loader, loader_for, register

__all__ = [
    "HF_CONFIG", "HF_INDEX", "HF_TOKENIZER", "HF_WEIGHTS", "LOADERS", "Loader", "check_out",
    "convert_hf", "hf_model_config", "is_hf_model_dir", "load_weights", "loader_for",
    "map_weights", "read_hf_config", "register",
]  # fmt: skip
