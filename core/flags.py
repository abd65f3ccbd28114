"""Command-line flags derived from dataclasses: each option is declared once, with its help.

    @dataclass
    class GenerationOptions:
        num_beams: int = doc(1, "beam search with N beams (1: greedy)", flags=("--beam",))

    add_flags(parser, GenerationOptions)          # --beam N ... (help: "... (default: 1)")
    GenerationOptions(**given(args, GenerationOptions))    # only what the command line set

A field's metadata holds its help text, its flags (default: --field-name), metavar, the
Hugging Face generation_config.json name it maps to (`hf`), and the commands it belongs to.
Booleans that default to False are switches (`--sample`), those that default to True get a
`--no-` form, those declared with choices=ON_OFF take `on` / `off` (None when not given:
another rule decides); sequences are repeatable flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys
import types
import typing
from collections.abc import Sequence
from typing import Any

_MISSING: Any = dataclasses.MISSING


def doc(
    default: Any = _MISSING,
    help: str = "",
    *,
    default_factory: Any = _MISSING,
    flags: tuple[str, ...] = (),
    metavar: str | None = None,
    hf: str | None = None,
    commands: tuple[str, ...] | None = None,
    shown: str | None = None,
    choices: tuple | None = None,
    aliases: tuple[str, ...] = (),
) -> Any:
    """A dataclass field with its documentation (see the module docstring). `shown`: how the
    default reads in help texts (default: its value); `aliases`: older spellings of the flag,
    still accepted, not shown in --help."""
    metadata = {
        "help": help,
        "flags": flags,
        "aliases": aliases,
        "metavar": metavar,
        "hf": hf,
        "commands": commands,
        "shown": shown,
        "choices": choices,
    }
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


METAVARS = {int: "N", float: "X", str: "TEXT"}
ON_OFF = ("on", "off")  # choices of a boolean flag that takes a value: --spinning on


def on_off(text: str) -> bool:
    """argparse's type for an ON_OFF boolean: 'on' -> True, 'off' -> False."""
    if text not in ON_OFF:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from 'on', 'off')")
    return text == "on"


def _base_type(t: Any) -> Any:
    """int for `int | None`, the argument's type for a sequence, else t."""
    if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union:
        args = [a for a in typing.get_args(t) if a is not type(None)]
        t = args[0]
    return t


def _is_sequence(t: Any) -> bool:
    origin = typing.get_origin(t)
    return origin in (list, tuple, Sequence) or origin is typing.get_origin(Sequence[int])


def default_text(f: dataclasses.Field) -> str:
    """The default of a field, as help texts show it."""
    if f.metadata.get("shown") is not None:
        return str(f.metadata["shown"])
    if f.default is not _MISSING:
        value = f.default
    elif f.default_factory is not _MISSING:
        value = f.default_factory()  # type: ignore[operator]
    else:
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)) and not value:
        return "none"
    return str(value)


def json_object(text: str) -> dict:
    """argparse's type for a dict field: a JSON object, or a clear error."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON ({e})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object expected, got {text!r}")
    return value


def flag_names(f: dataclasses.Field) -> tuple[str, ...]:
    return tuple(f.metadata.get("flags") or ()) or ("--" + f.name.replace("_", "-"),)


def add_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    command: str | None = None,
    skip: Sequence[str] = (),
    default: str | None = None,
) -> None:
    """One flag per documented field of `cls` (those for `command`, when fields name commands),
    default None so that `given` can tell what the command line set. Each help text ends with
    "(default: ...)": the field's default, or `default` when another value applies (a
    preset's)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        commands = meta.get("commands")
        if (
            "help" not in meta
            or f.name in skip
            or (command and commands and command not in commands)
        ):
            continue
        t = hints[f.name]
        base = _base_type(t)
        shown = default if default is not None else default_text(f)
        help_text = meta["help"] + (f" (default: {shown})" if shown else "")
        names = flag_names(f)
        kw: dict[str, Any] = {"dest": f.name, "default": None, "help": help_text}
        if base is bool and meta.get("choices") == ON_OFF:
            kw["type"], kw["metavar"] = on_off, "{on,off}"
        elif base is bool:
            if f.default is True or default is not None:  # a preset may have turned it on
                kw["action"] = argparse.BooleanOptionalAction
            else:
                kw["action"] = "store_const"
                kw["const"] = True
        elif base is dict:  # a JSON object: --rope-scaling '{"rope_type": "linear", ...}'
            kw["type"] = json_object
            kw["metavar"] = meta.get("metavar") or "JSON"
        elif _is_sequence(base):
            kw["action"] = "append"
            kw["metavar"] = meta.get("metavar") or "TEXT"
        else:
            kw["type"] = base
            kw["metavar"] = meta.get("metavar") or METAVARS.get(base, "VALUE")
            if meta.get("choices"):
                kw["choices"] = meta["choices"]
                kw["metavar"] = "{" + ",".join(meta["choices"]) + "}"
        parser.add_argument(*names, **kw)
        if meta.get("aliases"):
            parser.add_argument(*meta["aliases"], **(kw | {"help": argparse.SUPPRESS}))


def given(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The fields of `cls` that the command line set (flags added by add_flags)."""
    out = {}
    for f in dataclasses.fields(cls):
        value = getattr(args, f.name, None)
        if value is not None:
            out[f.name] = value
    return out


def hf_names(cls: type) -> dict[str, str]:
    """{Hugging Face generation_config.json name: field} for the fields that declare one."""
    return {f.metadata["hf"]: f.name for f in dataclasses.fields(cls) if f.metadata.get("hf")}


# ---- errors that say what was meant ----------------------------------------------------------


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """'; did you mean X?' (or 'X or Y') for the choices close to `word`, else ''."""
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def unknown_flags(parser: argparse.ArgumentParser, extra: Sequence[str]) -> str:
    """The error for arguments a parser does not take, with the flags close to each."""
    flags = [s for s in parser._option_string_actions if s.startswith("--")]
    shown = [f for f in flags if parser._option_string_actions[f].help != argparse.SUPPRESS]
    unknown = [e for e in extra if e.startswith("-")] or list(extra)
    plural = "s" if len(unknown) > 1 else ""
    hints = "".join(did_you_mean(e.split("=", 1)[0], shown) for e in unknown if e.startswith("-"))
    return f"unrecognized argument{plural}: {' '.join(unknown)}{hints}"


class Parser(argparse.ArgumentParser):
    """argparse with close matches for a mistyped choice (a preset, a subcommand) and an error
    in one line: the usage is printed only when it is short, else a pointer to --help (a
    command with 60 flags would bury the one line that matters under them)."""

    USAGE_LINES = 3  # the most lines of usage printed above an error

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is None or value in choices:
            return
        names = [str(c) for c in choices]
        listed = ", ".join(map(repr, names))
        raise argparse.ArgumentError(
            action,
            f"invalid choice: {value!r}{did_you_mean(str(value), names)} (choose from {listed})",
        )

    def error(self, message: str) -> typing.NoReturn:
        usage = self.format_usage()
        if usage.count("\n") <= self.USAGE_LINES:
            sys.stderr.write(usage)
            self.exit(2, f"{self.prog}: error: {message}\n")
        self.exit(2, f"{self.prog}: error: {message} (all options: {self.prog} --help)\n")
