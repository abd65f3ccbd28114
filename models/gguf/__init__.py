"""GGUF files (llama.cpp's format) -> edgeformer checkpoints, read with the format's own reader.

reader.py opens and checks a file, families.py maps each architecture onto the Hugging Face
layout models/hf converts, convert.py writes the checkpoint with the file's raw quantized
blocks beside its weights (export's `gguf` variant keeps them: export/gguf_blocks.py).
"""

from __future__ import annotations

from .convert import GGUF_BLOCKS, convert_gguf
from .families import FAMILIES, family_of
from .reader import GGUFFile, GGUFTensor, is_gguf_file

__all__ = ["FAMILIES", "GGUF_BLOCKS", "GGUFFile", "GGUFTensor", "convert_gguf", "family_of",
           "is_gguf_file"]  # fmt: skip
