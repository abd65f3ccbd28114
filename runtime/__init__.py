"""The edge runtime: runs a model package with numpy, onnxruntime and tokenizers only."""

from .api import Generator, ScoringResult, Translator
from .decoding import GenerationOptions
from .package import PackageError, load_package

__all__ = [
    "Translator",
    "Generator",
    "GenerationOptions",
    "ScoringResult",
    "load_package",
    "PackageError",
]
