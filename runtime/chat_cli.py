"""`edgeformer chat PACKAGE [--system TEXT]`: talk to an instruct model, turn by turn.

Each line read (typed at the terminal, or piped in) is the user's next message; the reply
streams to stdout, and the conversation so far goes into the next prompt through the model's
chat template. Ctrl-D (end of input) ends the chat. When the conversation outgrows the model's
positions, its oldest turns are dropped (the system message stays), with a note on stderr.
"""

from __future__ import annotations

import argparse
import sys

from ..core.decoding import LM, GenerationOptions
from ..core.flags import add_flags
from .api import Generator
from .commands import PACKAGE_HELP, add_runtime_arguments, decoding_options, load, stdin_lines


def add_arguments(p: argparse.ArgumentParser, command: str = "chat") -> None:
    p.add_argument("package", help=PACKAGE_HELP)
    p.add_argument(
        "--system", metavar="TEXT",
        help="a system message that opens the conversation (default: none; the template's own)",
    )  # fmt: skip
    add_runtime_arguments(p.add_argument_group("runtime"), "generate")
    d = p.add_argument_group(
        "decoding (defaults: the package's generation_config.json where it sets one, else the "
        "values shown; the Python API takes the same options: Generator.chat)"
    )
    add_flags(d, GenerationOptions, LM)


def fit(model: Generator, messages: list[dict]) -> list[dict] | None:
    """The conversation with its oldest turns dropped until its prompt fits the model (the
    system message kept); None when the last message alone does not fit."""
    system = messages[:1] if messages[0]["role"] == "system" else []
    turns = messages[len(system) :]
    while turns:
        try:
            model.chat_ids(system + turns)
            return system + turns
        except ValueError as e:
            if "tokens; the model takes" not in str(e):
                raise
            turns = turns[1:]
            while turns and turns[0]["role"] != "user":  # a conversation starts with the user
                turns = turns[1:]
    return None


def run(args: argparse.Namespace) -> int:
    args.texts, args.input, args.command = [], None, "chat"
    options = decoding_options(args)
    model = load(args)
    assert isinstance(model, Generator)  # load gives a Translator only to `translate`
    if model.model.chat_template is None:
        raise ValueError(
            f"{args.package} has no chat template (a converted instruct model keeps its "
            "tokenizer_config.json's): use edgeformer generate"
        )
    messages: list[dict] = [] if args.system is None else [
        {"role": "system", "content": args.system}]  # fmt: skip
    live = sys.stdin.isatty()
    lines, bad = stdin_lines(), 0
    while True:
        if live:
            print("> ", end="", file=sys.stderr, flush=True)
        line = next(lines, None)
        if line is None:
            break
        _, text, problem = line
        if problem is not None or text is None or not text.strip():
            if problem is not None:
                bad += 1
                print(f"edgeformer chat: {problem}", file=sys.stderr, flush=True)
            continue
        turn = [*messages, {"role": "user", "content": text}]
        fitted = fit(model, turn)
        if fitted is None:
            bad += 1
            print("edgeformer chat: that message alone is longer than the model's context",
                  file=sys.stderr, flush=True)  # fmt: skip
            continue
        if len(fitted) < len(turn):
            print(f"edgeformer chat: note: the {len(turn) - len(fitted)} oldest messages no "
                  "longer fit the context and were dropped", file=sys.stderr)  # fmt: skip
        reply = []
        for piece in model.chat_stream(fitted, **options):
            reply.append(piece)
            print(piece, end="", flush=True)
        print(flush=True)
        messages = [*fitted, {"role": "assistant", "content": "".join(reply)}]
    return 1 if bad else 0
