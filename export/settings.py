"""ExportSettings: how a checkpoint becomes a package, typed once, from `edgeformer export`'s
flags (export/cli.py) to export_package and the writer (export/exporter.py).

    ExportSettings(variants=("int8", "int4"), calibrate_on=Path("shakespeare"))
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..core.format import GRAPH_FORMATS


@dataclass(frozen=True)
class ExportSettings:
    """variants: export.recipes.VARIANT_SPECS names ("fp32" is always written; a comma-separated
    string is split); graph_format: "onnx" or "ort" (export.ort_format); verify: every variant
    checked against PyTorch before the package is kept (False: --no-verify); calibrate_on: GPTQ's
    text for int4 of a decoder-only model (a bundled name, export.quality.CALIBRATION_TEXTS, or a
    UTF-8 file; None: the bundled training data when there is one); force: replace an existing
    package at OUT_DIR; verbose: progress lines on stderr."""

    variants: tuple[str, ...] = ("fp32",)
    graph_format: str = "onnx"
    verify: bool = True
    calibrate_on: Path | None = None
    force: bool = False
    verbose: bool = True

    def __post_init__(self) -> None:
        names: str | tuple[str, ...] | list[str] = self.variants
        if isinstance(names, str):
            names = [v.strip() for v in names.split(",") if v.strip()]
        object.__setattr__(self, "variants", tuple(names))
        if self.graph_format not in GRAPH_FORMATS:
            raise ValueError(
                f"graph_format {self.graph_format!r}: one of {', '.join(GRAPH_FORMATS)}"
            )
        if self.calibrate_on is not None and not isinstance(self.calibrate_on, Path):
            object.__setattr__(self, "calibrate_on", Path(os.fspath(self.calibrate_on)))
