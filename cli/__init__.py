"""edgeformer: train a Transformer in PyTorch, export it as an ONNX model package, run it anywhere.

The command line, the top layer (docs/architecture.md): each subcommand's flags and work live
beside the code they drive (train/cli.py, export/cli.py, runtime/commands.py, ...), imported
here by plain imports inside functions, so that only the chosen one is loaded: the runtime's
commands (translate, generate, chat, score, info, verify) work on an install without torch,
and the others name what they need instead of failing with a traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from typing import Protocol

from ..core.commandline import (
    LOG_ENV,
    LOG_LEVELS,
    log_level,
    pip_extra,
    run_command,
    setup_logging,
)
from ..core.flags import Parser, unknown_flags

DESCRIPTION = "Train a Transformer in PyTorch, export it as an ONNX model package, run it."


class Command(Protocol):
    """A subcommand's module: its flags, and its work (the exit status)."""

    def add_arguments(self, parser: argparse.ArgumentParser, command: str) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _train() -> Command:
    from ..train import cli

    return cli


def _export() -> Command:
    from ..export import cli

    return cli


def _convert() -> Command:
    from ..export import convert_cli

    return convert_cli


def _runtime() -> Command:
    from ..runtime import commands

    return commands


def _chat() -> Command:
    from ..runtime import chat_cli

    return chat_cli


def _embed() -> Command:
    from ..runtime import embed_cli

    return embed_cli


def _verify() -> Command:
    from ..runtime import verify

    return verify


def _serve() -> Command:
    from ..runtime.serve import cli

    return cli


def _serve_bench() -> Command:
    from ..runtime.serve import bench

    return bench


def _bench() -> Command:
    from ..benchmarks import cli

    return cli


# subcommand -> (its module, imported when chosen; one-line help)
COMMANDS: dict[str, tuple[Callable[[], Command], str]] = {
    "train": (_train, "train a model (presets: tiny, multi30k-*, shakespeare-*)"),
    "export": (_export, "export a checkpoint to an ONNX model package"),
    "convert": (_convert, "convert a Hugging Face model to a checkpoint"),
    "translate": (_runtime, "translate text with an encoder-decoder package"),
    "generate": (_runtime, "generate text with a decoder-only package"),
    "chat": (_chat, "chat with an instruct model (its chat template)"),
    "score": (_runtime, "log-probabilities of given texts under a package"),
    "embed": (_embed, "sentence embeddings with an encoder package (BERT, MiniLM, BGE, E5)"),
    "info": (_runtime, "describe a model package: model, variants, graphs"),
    "verify": (_verify, "check a package on this machine against PyTorch"),
    "serve": (_serve, "serve packages over HTTP: an OpenAI-compatible server"),
    "serve-bench": (_serve_bench, "measure the server under 1 / 4 / 16 concurrent clients"),
    "bench": (_bench, "benchmark speed and quality against peers"),
}


# what a subcommand needs beyond the runtime: (modules, how to install them)
NEEDS = {
    "train": (("torch", "safetensors", "sacrebleu", "tqdm", "matplotlib"), "train"),
    "export": (("torch", "safetensors", "onnx", "onnxruntime"), "train"),
    "convert": (("torch", "safetensors"), "train"),
    "bench": (
        ("edgeformer.benchmarks", "torch", "safetensors", "onnx", "onnxruntime"),
        "train,bench",
    ),
    "translate": (("onnxruntime",), "cpu"),
    "generate": (("onnxruntime",), "cpu"),
    "chat": (("onnxruntime", "jinja2"), "cpu"),
    "score": (("onnxruntime",), "cpu"),
    "embed": (("onnxruntime",), "cpu"),
    "info": (("onnxruntime",), "cpu"),
    "verify": (("onnxruntime",), "cpu"),
    "serve": (("onnxruntime", "starlette", "uvicorn", "prometheus_client"), "cpu,serve"),
    "serve-bench": (("onnxruntime", "starlette", "uvicorn", "prometheus_client"), "cpu,serve"),
}


BENCH_DIST = "edgeformer-bench"  # edgeformer.benchmarks: a distribution of its own (benchmarks/)


def missing_extra(command: str) -> str | None:
    """One line naming what `command` needs and how to install it, or None when all is there."""
    modules, extra = NEEDS[command]
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    torch = "pip install torch==2.13.0 (the CPU build), then " if "torch" in missing else ""
    install = pip_extra(extra)
    if "edgeformer.benchmarks" in missing:
        missing[missing.index("edgeformer.benchmarks")] = f"the {BENCH_DIST} distribution"
        install = install.replace("]'", "]' ./benchmarks", 1)
    lacks = f"edgeformer {command} needs {', '.join(missing)}, which this install lacks"
    return f"{lacks}: {torch}{install}"


def main(argv: list[str] | None = None) -> int:
    level, argv = log_level(sys.argv[1:] if argv is None else argv)
    parser = Parser(prog="edgeformer", description=DESCRIPTION)
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="warning",
        help=f"what goes to stderr besides errors (default warning, or ${LOG_ENV}); info adds "
        "what ran where and throughput, debug also onnxruntime's warnings",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # Only the chosen subcommand's module is imported (torch stays out of translate/generate).
    chosen = next((a for a in argv if a in COMMANDS), None)
    for name, (load, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            try:
                mod = load()
            except ModuleNotFoundError:  # its extra is not installed: say which, no traceback
                problem = missing_extra(name)
                if problem is None:
                    raise
                print(problem, file=sys.stderr)
                return 2
            mod.add_arguments(p, name)
            p.set_defaults(_run=mod.run)
    # texts may follow options (`translate PKG --beam 4 "text"`): argparse leaves them over
    args, extra = parser.parse_known_args(argv)
    setup_logging(level, args.command)
    problem = missing_extra(args.command)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    if extra:
        if not hasattr(args, "texts") or any(e.startswith("-") for e in extra):
            command = sub.choices[args.command]  # its flags, for the did-you-mean
            command.error(unknown_flags(command, extra))
        args.texts = [*args.texts, *extra]

    return run_command(args.command, args._run, args)
