"""edgeformer.export: a checkpoint -> an ONNX model package (the format: edgeformer.core.format).

    from edgeformer.export import convert_hf, export_package
    export_package("runs/m30k", "packages/m30k", variants=["fp32", "int4"])
    convert_hf("Qwen2.5-0.5B-Instruct", "checkpoints/qwen")  # a Hugging Face folder

export_package does the whole job, as `edgeformer export`: a checkpoint, a training run folder
or a Hugging Face folder in; every variant checked against PyTorch (verify=False skips it); the
package written whole or not at all. convert_hf is `edgeformer convert hf`.

Both need PyTorch (the `train` extra); they are imported on first use, so that the
`edgeformer export` / `convert` commands can say which extra is missing instead of failing.
"""

from typing import Any

from ..core.format import VARIANTS

__all__ = ["convert_hf", "export_package", "VARIANTS"]


def __getattr__(name: str) -> Any:
    if name == "export_package":
        from .exporter import export_package

        return export_package
    if name == "convert_hf":
        from ..models.hf import convert_hf

        return convert_hf
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
