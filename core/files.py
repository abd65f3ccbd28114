"""Safe writes: what edgeformer writes appears whole or not at all.

One owner for writing files and folders: checkpoints, packages, translated files and converted
models all go through here.
"""

from __future__ import annotations

import hashlib
import os


def sha256(path: str | os.PathLike) -> str:
    """The hex SHA-256 of a file (the package's checksum list)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
