"""What one `edgeformer bench` run does: `Settings`, made once from the command line and carried
unchanged to every run; and `Job`, one stack on one shape, which is all a stack's own process
needs (it travels there as JSON and comes back as the same objects).

The defaults resolve here, once: `--quick` picks fewer rounds, smaller sweeps and in-process
memory deltas unless those were given explicitly.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from edgeformer.core.config import ModelConfig

from ..core.contract import check_threads
from . import llama_env, optimum_env
from .shapes import (
    QUICK_SWEEP_BATCHES,
    REAL_SHAPES,
    SHAPE_GROUPS,
    SWEEP_BATCHES,
    WORKLOADS,
    Shape,
    Workload,
    is_shape_spec,
)
from .weights import HF_STACKS, HF_WORKLOADS

# Results go under the working directory's runs/ (git-ignored in this repository), never into
# the committed benchmarks/results/ unless that is given with --out.
DEFAULT_OUT = "runs/bench"
SPINNING = {"default": None, "on": True, "off": False}
MEMORY_MODES = ("subprocess", "delta", "off")
ISOLATION_MODES = ("process", "none")
DEFAULT_WORKLOADS = "W1,W2,W3,sweep,file"
# real shapes (tens to hundreds of MB of weights per stack): batch 1 with a 16- and a 512-token
# prompt, batch 8; fewer rounds (benchmarks/README.md, "Real shapes": ~30 min on 2 cores)
REAL_WORKLOADS = "W1,W2,W4"
REAL_ROUNDS = 3
REAL_WARMUP = 1
# RSS from the stacks' own processes (loaded, and peak after all runs), not a fresh process
# that runs every workload once more (minutes per stack at these sizes)
REAL_MEMORY = "delta"
MAX_SWEEP_BATCH = 1 << 12  # rows of one sweep batch (the default sweep ends at 32)


def check_file_stem(name: str, flag: str) -> str:
    """A results file stem: a plain name, written inside --out (no '/', '..' or NUL)."""
    bad = not name or name in (".", "..") or any(c in name for c in "/\\\0")
    if bad or len(name) > 200:
        raise ValueError(
            f"{flag} {name!r} must be a plain file name (no '/', '\\', '..'), written inside --out"
        )
    return name


@dataclass(frozen=True)
class Settings:
    quick: bool = False
    shapes: tuple[str, ...] = ("ed", "lm")
    workloads: tuple[str, ...] = ("W1", "W2", "W3", "sweep", "file")  # () = quality only
    stacks: str = "all"  # all | ours | peers | names or prefixes, comma-separated
    threads: int = 2
    rounds: int = 7
    warmup: int = 2
    sweep_batches: tuple[int, ...] = SWEEP_BATCHES
    out: str = DEFAULT_OUT
    name: str = "latest"
    packages: tuple[str, ...] = ()  # trained packages run as "ours" instead of random weights
    checkpoints: tuple[str, ...] = ()  # their checkpoints, same order (for edgeformer-torch)
    memory: str = "subprocess"  # subprocess | delta | off
    spinning: bool | None = None  # onnxruntime intra-op spinning for ours and Optimum
    isolation: str = "process"  # process | none
    profile: bool = False
    work: str | None = None  # keep built models here (else a temporary folder)
    quality_ed: str | None = None
    quality_lm: str | None = None
    quality_checkpoint: str | None = None
    quality_limit: int | None = None
    # the optimum-* stacks' interpreter (Optimum's own environment: optimum_env); None: this one
    optimum_python: str | None = None
    # the llamacpp-* stacks' interpreter (llama.cpp's own environment: llama_env); None: skipped
    llama_python: str | None = None
    # translation packages for the quality / speed frontier, "PATH" or "NAME=PATH" (frontier.py)
    frontier: tuple[str, ...] = ()
    # a real model's own weights, every stack on them, perplexity beside speed (weights.py): a
    # Hugging Face folder or a .gguf file; replaces --shapes
    hf: str | None = None

    def __post_init__(self):
        for w in self.workloads:
            if w not in WORKLOADS and w not in ("sweep", "file"):
                raise ValueError(f"unknown workload {w!r}; expected W1, W2, W3, W4, sweep, file")
        for s in self.shapes:
            if self.hf and s == "hf":
                continue
            if not is_shape_spec(s):
                known = ", ".join(["ed", "lm", *SHAPE_GROUPS, *REAL_SHAPES])
                raise ValueError(
                    f"unknown shape {s!r}; expected {known} or a Hugging Face config.json"
                )
        check_threads(self.threads, "--threads")
        for b in self.sweep_batches:
            if not 1 <= b <= MAX_SWEEP_BATCH:
                raise ValueError(f"--sweep-batches: {b} must be in [1, {MAX_SWEEP_BATCH}]")
        check_file_stem(self.name, "--name")
        if self.rounds < 1 or self.warmup < 0:
            raise ValueError("--rounds must be >= 1 and --warmup >= 0")
        if self.memory not in MEMORY_MODES:
            raise ValueError(f"--memory must be one of {', '.join(MEMORY_MODES)}")
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(f"--isolation must be one of {', '.join(ISOLATION_MODES)}")

    @classmethod
    def from_args(cls, args) -> Settings:
        """From `edgeformer bench`'s parsed arguments (benchmarks.cli.add_arguments)."""
        q = args.quick
        hf = getattr(args, "hf", None)
        sweep = tuple(_whole(b, "--sweep-batches") for b in _csv(args.sweep_batches or ""))
        shapes = tuple(x for s in _csv(args.shapes) for x in SHAPE_GROUPS.get(s, (s,)))
        real = bool(hf) or (bool(shapes) and all(s not in ("ed", "lm") for s in shapes))
        # --frontier alone runs only the frontier; --workloads adds the speed workloads
        default = REAL_WORKLOADS if real else DEFAULT_WORKLOADS
        if hf:  # batch 1 (W4's long prompt: its TTFT), not with --quick
            default = "W1" if q else HF_WORKLOADS
        workloads = args.workloads or ("none" if args.frontier else default)
        stacks = ",".join(HF_STACKS) if hf and args.stacks == "all" else args.stacks
        return cls(
            quick=q,
            shapes=("hf",) if hf else shapes,
            workloads=tuple(w for w in _csv(workloads) if w.lower() != "none"),
            stacks=stacks,
            threads=args.threads,
            rounds=args.rounds
            if args.rounds is not None
            else (2 if q else REAL_ROUNDS if real else 7),
            warmup=args.warmup
            if args.warmup is not None
            else (1 if q else REAL_WARMUP if real else 2),
            sweep_batches=sweep or (QUICK_SWEEP_BATCHES if q else SWEEP_BATCHES),
            out=args.out,
            name=args.name,
            packages=tuple(args.package),
            checkpoints=tuple(args.checkpoint),
            memory=args.memory or ("delta" if q else REAL_MEMORY if real else "subprocess"),
            spinning=SPINNING[args.spinning],
            isolation=args.isolation,
            profile=args.profile,
            work=args.work,
            quality_ed=args.quality_ed,
            quality_lm=args.quality_lm,
            quality_checkpoint=args.quality_checkpoint,
            quality_limit=args.quality_limit,
            optimum_python=optimum_env.resolve(args.optimum_python),
            llama_python=llama_env.resolve(getattr(args, "llama_python", None)),
            frontier=tuple(args.frontier),
            hf=str(hf) if hf else None,
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Settings:
        kinds = {f.name: f.type for f in dataclasses.fields(cls)}
        fields: dict[str, Any] = {k: tuple(v) if "tuple" in kinds[k] else v for k, v in d.items()}
        return cls(**fields)

    def fixed_workloads(self) -> list[Workload]:
        """The fixed workloads asked for (W1, W2, W3), in order; the sweep is separate."""
        return [WORKLOADS[w] for w in self.workloads if w in WORKLOADS]


class LightConfig(SimpleNamespace):
    """ModelConfig's fields without importing edgeformer.models (and so torch): what a stack's
    process gets, so that our runtime's process never imports torch."""

    def to_dict(self) -> dict:
        return dict(vars(self))


@dataclass(frozen=True)
class Job:
    """One stack on one shape, with the run's settings: what the stack's process needs."""

    stack: str
    shape: Shape
    work: Path
    settings: Settings
    package: Path | None = None  # a trained package given with --package
    checkpoint: Path | None = None  # its checkpoint, if given
    variants: tuple[str, ...] = ("fp32",)  # package variants to export (random weights)
    workloads: tuple[tuple[int, int, int], ...] = field(default=())  # (batch, length, new)
    # a frontier job (frontier.py): the stack translates text with `package`; the ct2-* stacks
    # run the conversion of that package's weights (artifacts.ct2_package_dir)
    frontier: bool = False

    @property
    def threads(self) -> int:
        return self.settings.threads

    def with_stack(self, stack: str) -> Job:
        return dataclasses.replace(self, stack=stack)

    def to_json(self) -> str:
        return json.dumps(
            {
                "stack": self.stack,
                "shape": {
                    "name": self.shape.name,
                    "cfg": self.shape.cfg.to_dict(),
                    "hf": self.shape.hf,
                },
                "work": str(self.work),
                "settings": self.settings.to_dict(),
                "package": str(self.package) if self.package else None,
                "checkpoint": str(self.checkpoint) if self.checkpoint else None,
                "variants": list(self.variants),
                "workloads": [list(w) for w in self.workloads],
                "frontier": self.frontier,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Job:
        d = json.loads(text)
        return cls(
            stack=d["stack"],
            # LightConfig stands in for ModelConfig (same fields) without importing torch
            shape=Shape(
                d["shape"]["name"],
                cast("ModelConfig", LightConfig(**d["shape"]["cfg"])),
                d["shape"].get("hf"),
            ),
            work=Path(d["work"]),
            settings=Settings.from_dict(d["settings"]),
            package=Path(d["package"]) if d["package"] else None,
            checkpoint=Path(d["checkpoint"]) if d["checkpoint"] else None,
            variants=tuple(d["variants"]),
            workloads=tuple(tuple(w) for w in d["workloads"]),
            frontier=d.get("frontier", False),
        )


def _whole(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{flag}: {text!r} is not a whole number") from None


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]
