"""edgeformer.export: a checkpoint -> an ONNX model package (edgeformer.core.format)."""

from ..core.format import VARIANTS
from .exporter import export_package

__all__ = ["export_package", "VARIANTS"]
