"""Child process for `--memory subprocess`: load one stack, run each workload once, print the
peak RSS as one JSON line. Imports only what that stack needs (no torch for our runtime).

    python -m edgeformer.benchmarks.memory '{"stack": ..., "shape": ..., "cfg": {...}, ...}'
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

from .measure import peak_rss_mb, rss_mb


class _Cfg(SimpleNamespace):
    """ModelConfig's fields without importing edgeformer.models (and so torch)."""

    def to_dict(self) -> dict:
        return dict(vars(self))


def _resolve(spec: dict):
    """(stack, shape, sources) that a spec names (files already built by the parent)."""
    from . import artifacts
    from .shapes import Shape
    from .stacks import Sources, all_stacks

    artifacts.READ_ONLY = True
    stack = next(s for s in all_stacks(cuda=True) if s.name == spec["stack"])
    shape = Shape(spec["shape"], _Cfg(**spec["cfg"]))
    opt = {k: Path(spec[k]) if spec.get(k) else None for k in ("package", "checkpoint")}
    src = Sources(shape, Path(spec["work"]), **opt, variants=tuple(spec["variants"]))
    src.spinning = spec.get("spinning")
    return stack, shape, src


def runner_from_spec(spec: dict):
    """Load the stack a spec names: a stacks.Runner."""
    from .stacks import load

    stack, _, src = _resolve(spec)
    return load(stack, src, spec["threads"])


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    from .stacks import inputs_for, load

    base = rss_mb()
    stack, shape, src = _resolve(spec)
    runner = load(stack, src, spec["threads"])
    loaded = rss_mb()
    for batch, length, n in spec["workloads"]:
        runner.generate(inputs_for(stack, shape, batch, length), n)
    print(
        json.dumps(
            {"peak_rss_mb": peak_rss_mb(), "start_rss_mb": base, "loaded_rss_mb": loaded},
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
