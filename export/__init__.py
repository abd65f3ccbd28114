"""edgeformer.export: a checkpoint -> an ONNX model package (the format: edgeformer.core.format).

    from edgeformer.export import export_package
    export_package("runs/m30k/averaged", "packages/m30k", variants=["fp32", "int4"])

export_package needs PyTorch (the `train` extra); it is imported on first use, so that the
`edgeformer export` / `convert` commands can say which extra is missing instead of failing.
"""

from typing import Any

from ..core.format import VARIANTS

__all__ = ["export_package", "VARIANTS"]


def __getattr__(name: str) -> Any:
    if name == "export_package":
        from .exporter import export_package

        return export_package
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
