"""How every edgeformer command runs, whichever entry starts it (`edgeformer COMMAND`, or
`python -m edgeformer.train` under torchrun): the log level (--log-level, $EDGEFORMER_LOG_LEVEL),
the `edgeformer` logger on stderr, warnings as one-line notes, and errors as one line and an
exit status instead of a traceback."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import stat
import sys
import warnings
from collections.abc import Callable
from typing import Any

from .files import describe_os_error

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


def pip_extra(extra: str) -> str:
    """How to install one of edgeformer's extras: from a clone of the repository, since
    edgeformer is not on PyPI (`pip install 'edgeformer[train]'` would find nothing)."""
    return f"pip install '.[{extra}]' in a clone of the repository"


def setup_logging(level: str, command: str) -> None:
    """The `edgeformer` logger on stderr as 'edgeformer COMMAND: message' lines."""
    logger = logging.getLogger("edgeformer")
    logger.setLevel(level.upper())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"edgeformer {command}: %(message)s"))
    logger.handlers[:] = [handler]
    logger.propagate = False


def stdout_kept() -> str:
    """What a full disk left of standard output (a file: its size; the last line may be cut)."""
    try:
        info = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return "standard output: the lines before were written, the last one may be cut"
    if not stat.S_ISREG(info.st_mode):
        return "standard output: the lines before were written, the last one may be cut"
    return (
        f"standard output holds the first {info.st_size} bytes of the output: whole lines "
        "then, at its end, a cut one"
    )


class NamedStdout:
    """sys.stdout while a command runs: a full disk under it (`edgeformer score > file`) is an
    OSError that says what the file holds (stdout_kept), never describe_os_error's "nothing was
    left half-written", which is true only of the safe writes of core/files.py."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as e:
            raise self.named(e) from None

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as e:
            raise self.named(e) from None

    def named(self, e: OSError) -> OSError:
        if e.errno != errno.ENOSPC or e.filename:
            return e
        return OSError(e.errno, stdout_kept())

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, buffer, encoding, ...
        return getattr(self.stream, name)


def run_command(
    command: str, run: Callable[[argparse.Namespace], int], args: argparse.Namespace
) -> int:
    """`run(args)` with warnings shown as one plain line and errors as one line and an exit
    status: 2 a bad input, 1 an OS error (disk full, permissions), 130 Ctrl-C, 141 a closed
    pipe."""

    def note(message, category, filename, lineno, file=None, line=None) -> None:
        """Warnings as one plain line on stderr (not file:line and the source line)."""
        print(f"edgeformer {command}: note: {message}", file=sys.stderr, flush=True)

    shown, warnings.showwarning = warnings.showwarning, note
    stdout = sys.stdout
    sys.stdout = NamedStdout(stdout)
    try:
        code = int(run(args) or 0)
        sys.stdout.flush()  # a full disk shows here, not after the command returned
        return code
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"edgeformer {command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:  # disk full, permissions, ...: one line, never a traceback
        print(f"edgeformer {command}: error: {describe_os_error(e)}", file=sys.stderr)
        return 1
    finally:
        warnings.showwarning = shown
        sys.stdout = stdout
