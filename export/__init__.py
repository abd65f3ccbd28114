"""edgeformer.export: a checkpoint -> an ONNX model package (edgeformer.runtime.package)."""

from .exporter import export_package
from .quantize import VARIANTS

__all__ = ["export_package", "VARIANTS"]
