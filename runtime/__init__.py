"""The edge runtime: runs a model package with numpy, onnxruntime and tokenizers only."""

from .api import (
    GenerationResult,
    Generator,
    ScoringResult,
    TextHypothesis,
    TranslationResult,
    Translator,
)
from .decoding import GenerationOptions
from .package import PackageError, load_package

__all__ = [
    "Translator",
    "Generator",
    "GenerationOptions",
    "ScoringResult",
    "TranslationResult",
    "GenerationResult",
    "TextHypothesis",
    "load_package",
    "PackageError",
]
