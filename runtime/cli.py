"""The `edgeformer` command. Subcommands live beside the code they drive and are imported lazily,
so that `translate` / `generate` work on an edge install without torch."""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

# subcommand -> (module with add_arguments(parser, command) and run(args) -> int, one-line help)
COMMANDS = {
    "train": ("edgeformer.train.cli", "train a model (presets: tiny, multi30k-*, shakespeare-*)"),
    "export": ("edgeformer.export.cli", "export a checkpoint to an ONNX model package"),
    "translate": ("edgeformer.runtime.commands", "translate text with an encoder-decoder package"),
    "generate": ("edgeformer.runtime.commands", "generate text with a decoder-only package"),
    "score": ("edgeformer.runtime.commands", "log-probabilities of given texts under a package"),
    "info": ("edgeformer.runtime.commands", "describe a model package: model, variants, graphs"),
    "bench": ("edgeformer.benchmarks.cli", "benchmark speed and quality against peers"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="edgeformer", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # Only the chosen subcommand's module is imported (torch stays out of translate/generate).
    chosen = next((a for a in argv if a in COMMANDS), None)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            mod = importlib.import_module(module)
            mod.add_arguments(p, name)
            p.set_defaults(_run=mod.run)
    # texts may follow options (`translate PKG --beam 4 "text"`): argparse leaves them over
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not hasattr(args, "texts") or any(e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
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
    finally:
        warnings.showwarning = shown


if __name__ == "__main__":
    sys.exit(main())
