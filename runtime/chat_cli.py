"""`edgeformer chat PACKAGE [--system TEXT]`: talk to an instruct model, turn by turn.

Each line read (typed at the terminal, or piped in) is the user's next message; the reply
streams to stdout, and the conversation so far goes into the next prompt through the model's
chat template. Ctrl-D (end of input) or /exit ends the chat. When the conversation outgrows the
model's positions, its oldest turns are dropped (the system message stays), with a note on
stderr. At a terminal a banner names the model and how to end. A line starting with `/` is a
command, never sent to the model (`//` sends one `/`):

    /help          the commands
    /exit, /quit   end the chat
    /reset         forget the conversation (the system message stays)
    /system TEXT   a new system message, and a new conversation (/system alone: none)
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


COMMANDS = {
    "/help": "the commands",
    "/exit": "end the chat (also /quit, Ctrl-D)",
    "/reset": "forget the conversation (the system message stays)",
    "/system TEXT": "a new system message, and a new conversation (/system alone: none)",
}
EXIT = ("/exit", "/quit")


def say(text: str) -> None:
    print(f"edgeformer chat: {text}", file=sys.stderr, flush=True)


def banner(args: argparse.Namespace, model: Generator) -> str:
    """What a chat at a terminal starts with: the model, and how to end."""
    m = model.model.package.config.model
    system = f", system message: {args.system!r}" if args.system is not None else ""
    return (
        f"{args.package} ({m.family}, {m.vocab_size:,} tokens, {m.max_len:,} positions), "
        f"variant {model.variant}{system}. Type a message; /help for commands, /exit or "
        "Ctrl-D to end."
    )


def command(text: str, messages: list[dict]) -> list[dict] | None:
    """A /command's new conversation (None: end the chat); ValueError for an unknown one."""
    name, _, rest = text.partition(" ")
    if name in EXIT:
        return None
    system = messages[:1] if messages and messages[0]["role"] == "system" else []
    if name == "/reset":
        say("a new conversation" + (" (the system message stays)" if system else ""))
        return system
    if name == "/system":
        say(f"system message: {rest.strip()!r}; a new conversation" if rest.strip()
            else "no system message; a new conversation")  # fmt: skip
        return [{"role": "system", "content": rest.strip()}] if rest.strip() else []
    if name == "/help":
        width = max(map(len, COMMANDS))
        for usage, what in COMMANDS.items():
            print(f"  {usage:<{width}}  {what}", file=sys.stderr)
        print("  //TEXT" + " " * (width - 4) + "a message that starts with /", file=sys.stderr)
        return messages
    raise ValueError(f"unknown command {name!r} (/help lists them; // sends a leading /)")


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
    if live:
        say(banner(args, model))
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
        if text.startswith("/") and not text.startswith("//"):
            try:
                after = command(text.strip(), messages)
            except ValueError as e:
                say(str(e))
                continue
            if after is None:
                break
            messages = after
            continue
        text = text.removeprefix("/")  # "//x" sends "/x"
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
