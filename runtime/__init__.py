"""The edge runtime: runs a model package with numpy, onnxruntime and tokenizers only (and
jinja2 for chat templates)."""

from ..core.decoding import GenerationOptions
from ..core.schema import PackageError
from .api import (
    GenerationResult,
    Generator,
    ScoringResult,
    TextHypothesis,
    TranslationResult,
    Translator,
)
from .chat import ChatTemplateError
from .embed import Embedder, Reranker
from .package import load_package
from .session import RuntimeSettings

__all__ = [
    "Translator",
    "Generator",
    "Embedder",
    "Reranker",
    "GenerationOptions",
    "RuntimeSettings",
    "ScoringResult",
    "TranslationResult",
    "GenerationResult",
    "TextHypothesis",
    "load_package",
    "PackageError",
    "ChatTemplateError",
]
