"""Safe writes: what edgeformer writes appears whole or not at all.

One owner for writing files and folders: checkpoints, packages, translated files and converted
models all go through here.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO


def sha256(path: str | os.PathLike) -> str:
    """The hex SHA-256 of a file (the package's checksum list)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def atomic_text(path: str | os.PathLike) -> Iterator[TextIO]:
    """A text file (UTF-8, '\\n' line ends) written whole or not at all: into a temporary file
    beside `path`, renamed over it when the block ends without an error."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            yield f
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
