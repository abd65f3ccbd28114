"""edgeformer.export: a checkpoint -> an ONNX model package (edgeformer.runtime.package)."""

from ..runtime.package import VARIANTS
from .exporter import export_package

__all__ = ["export_package", "VARIANTS"]
