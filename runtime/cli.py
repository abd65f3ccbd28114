"""edgeformer: train a Transformer in PyTorch, export it as an ONNX model package, run it anywhere.

Subcommands live beside the code they drive and are imported only when chosen, so that the
runtime's commands (translate, generate, chat, score, info, verify) work on an install without
torch; the others name the extra they need instead of failing with a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import warnings

from ..core.files import describe_os_error
from ..core.flags import Parser, unknown_flags

DESCRIPTION = "Train a Transformer in PyTorch, export it as an ONNX model package, run it."
# subcommand -> (module with add_arguments(parser, command) and run(args) -> int, one-line help)
COMMANDS = {
    "train": ("edgeformer.train.cli", "train a model (presets: tiny, multi30k-*, shakespeare-*)"),
    "export": ("edgeformer.export.cli", "export a checkpoint to an ONNX model package"),
    "convert": ("edgeformer.export.convert_cli", "convert a Hugging Face model to a checkpoint"),
    "translate": ("edgeformer.runtime.commands", "translate text with an encoder-decoder package"),
    "generate": ("edgeformer.runtime.commands", "generate text with a decoder-only package"),
    "chat": ("edgeformer.runtime.chat_cli", "chat with an instruct model (its chat template)"),
    "score": ("edgeformer.runtime.commands", "log-probabilities of given texts under a package"),
    "info": ("edgeformer.runtime.commands", "describe a model package: model, variants, graphs"),
    "verify": ("edgeformer.runtime.verify", "check a package on this machine against PyTorch"),
    "bench": ("edgeformer.benchmarks.cli", "benchmark speed and quality against peers"),
}


# what a subcommand needs beyond the runtime: (modules, how to install them)
NEEDS = {
    "train": (("torch", "safetensors", "sacrebleu", "tqdm", "matplotlib"), "train"),
    "export": (("torch", "safetensors", "onnx", "onnxruntime"), "train"),
    "convert": (("torch", "safetensors"), "train"),
    "bench": (("torch", "safetensors", "onnx", "onnxruntime"), "train,bench"),
    "translate": (("onnxruntime",), "cpu"),
    "generate": (("onnxruntime",), "cpu"),
    "chat": (("onnxruntime", "jinja2"), "cpu"),
    "score": (("onnxruntime",), "cpu"),
    "info": (("onnxruntime",), "cpu"),
    "verify": (("onnxruntime",), "cpu"),
}


def missing_extra(command: str) -> str | None:
    """One line naming what `command` needs and how to install it, or None when all is there."""
    modules, extra = NEEDS[command]
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    torch = "pip install torch==2.13.0 (the CPU build), then " if "torch" in missing else ""
    return (
        f"edgeformer {command} needs {', '.join(missing)}, which this install lacks: "
        f"{torch}pip install 'edgeformer[{extra}]'"
    )


LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_ENV = "EDGEFORMER_LOG_LEVEL"


def log_level(argv: list[str]) -> tuple[str, list[str]]:
    """(level, argv without it): --log-level LEVEL anywhere on the line, else
    $EDGEFORMER_LOG_LEVEL, else "warning": quiet by default (errors, warnings, results)."""
    level = os.environ.get(LOG_ENV, "warning").strip().lower() or "warning"
    rest, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--log-level" and i + 1 < len(argv):
            level, i = argv[i + 1].lower(), i + 2
            continue
        if a.startswith("--log-level="):
            level = a.split("=", 1)[1].lower()
        else:
            rest.append(a)
        i += 1
    if level not in LOG_LEVELS:
        raise SystemExit(f"edgeformer: error: log level {level!r}, expected one of {LOG_LEVELS}")
    return level, rest


def setup_logging(level: str, command: str) -> None:
    """The `edgeformer` logger on stderr as 'edgeformer COMMAND: message' lines."""
    logger = logging.getLogger("edgeformer")
    logger.setLevel(level.upper())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"edgeformer {command}: %(message)s"))
    logger.handlers[:] = [handler]
    logger.propagate = False


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
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            try:
                mod = importlib.import_module(module)
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

    def note(message, category, filename, lineno, file=None, line=None) -> None:
        """Warnings as one plain line on stderr (not file:line and the source line)."""
        print(f"edgeformer {args.command}: note: {message}", file=sys.stderr, flush=True)

    shown, warnings.showwarning = warnings.showwarning, note
    try:
        return int(args._run(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"edgeformer {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:  # disk full, permissions, ...: one line, never a traceback
        print(f"edgeformer {args.command}: error: {describe_os_error(e)}", file=sys.stderr)
        return 1
    finally:
        warnings.showwarning = shown


if __name__ == "__main__":
    sys.exit(main())
