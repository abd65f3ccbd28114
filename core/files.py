"""Safe writes: what edgeformer writes appears whole or not at all, and never eats a user's file.

One owner for writing files and folders: packages (export), checkpoints (training, convert) and
translated files all go through here.

    with atomic_folder(out) as tmp:      # build in .OUT.tmp-PID-xxxx beside OUT
        write everything into tmp
    # -> the crash-safe swap: tmp becomes .OUT.new-PID (finished), OUT moves to .OUT.old-PID,
    #    .OUT.new-PID becomes OUT, .OUT.old-PID is deleted

Killed at any point, the folder is the old one or the new one, never a mix and never lost:
`recover(out)` (run by the next write and by load_package) renames a finished new folder in when
OUT is missing (or the old one back when there is no new one) and deletes what dead processes
left behind. Folders follow the user's umask (mkdtemp would leave them 0700).

A replacement built over a longer time (a training run that replaces an older one with
`train --force`) takes `staging_folder(out)` and calls `swap_in(staging, out)` itself.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

KINDS = ("tmp", "new", "old")  # .NAME.{kind}-PID[-...]: building, finished, moved aside


def sha256(path: str | os.PathLike) -> str:
    """The hex SHA-256 of a file (the package's checksum list)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def current_umask() -> int:
    """The process umask (os.umask can only be read by setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: str | os.PathLike) -> None:
    """chmod `path` (and, for a folder, all inside) to what the umask gives a new file or folder:
    tempfile makes folders 0700 and files 0600, which another account cannot read."""
    mask = current_umask()
    path = Path(path)
    for p in [path, *(path.rglob("*") if path.is_dir() else ())]:
        if not p.is_symlink():
            p.chmod((0o777 if p.is_dir() else 0o666) & ~mask)


@contextlib.contextmanager
def atomic_text(path: str | os.PathLike) -> Iterator[TextIO]:
    """A text file (UTF-8, '\\n' line ends) written whole or not at all: into a temporary file
    beside `path`, renamed over it when the block ends without an error. The temporary files
    that killed writers of `path` left (.NAME.tmp-PID of a process that is gone) are deleted."""
    path = Path(path)
    for _, leftover in _leftovers(path, "tmp"):
        if leftover.is_file() and not leftover.is_symlink():
            leftover.unlink(missing_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            yield f
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _sibling(path: Path, kind: str) -> Path:
    return path.with_name(f".{path.name}.{kind}-{os.getpid()}")


def _leftovers(path: Path, kind: str) -> list[tuple[int, Path]]:
    """(pid, folder) of the .NAME.{kind}-PID siblings whose process is gone."""
    out = []
    prefix = f".{path.name}.{kind}-"
    for p in path.parent.glob(f"{glob_escape(prefix)}*"):
        head = p.name[len(prefix) :].split("-")[0]
        if head.isdigit() and not _alive(int(head)):
            out.append((int(head), p))
    return sorted(out, key=lambda item: item[1].stat().st_mtime)


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # ours: an earlier, failed call of this process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def recover(path: str | os.PathLike) -> None:
    """Finish or undo a swap that a killed process left half done (see the module docstring),
    then delete the temporary folders of processes that are gone."""
    path = Path(path)
    if not path.parent.is_dir():
        return
    if not path.exists() and not path.is_symlink():
        found = _leftovers(path, "new") or _leftovers(path, "old")
        if found:
            found[-1][1].rename(path)  # the newest finished (else moved-aside) folder
    for kind in KINDS:
        for _, leftover in _leftovers(path, kind):
            shutil.rmtree(leftover, ignore_errors=True)


def swap_in(tmp: Path, path: Path) -> None:
    """Make the finished folder `tmp` the folder `path`, crash-safely (module docstring)."""
    new = _sibling(path, "new")
    tmp.rename(new)  # finished: a killed swap from here on is completed by recover()
    old = None
    if path.exists() or path.is_symlink():
        old = _sibling(path, "old")
        path.rename(old)
    try:
        new.rename(path)
    except BaseException:
        if old is not None:
            old.rename(path)
        shutil.rmtree(new, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def staging_folder(path: str | os.PathLike) -> Path:
    """An empty hidden folder beside `path` (.NAME.tmp-PID-xxxx) to build a replacement of
    `path` in; `swap_in(it, path)` puts it in place. Until then `path` is untouched; a staging
    folder whose process died is deleted by the next recover(path)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recover(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent))
    follow_umask(tmp)
    return tmp


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike) -> Iterator[Path]:
    """An empty hidden folder beside `path` to build in; when the block ends without an error
    it replaces `path` (crash-safe swap), else it is removed. The caller checks beforehand that
    `path` may be replaced."""
    path = Path(path)
    tmp = staging_folder(path)
    try:
        yield tmp
        follow_umask(tmp)
        swap_in(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def describe_os_error(e: OSError) -> str:
    """One line for an OSError (disk full, permissions, ...), naming the file."""
    where = f": {e.filename}" if e.filename else ""
    if e.errno == errno.ENOSPC:
        if not e.filename and e.strerror and e.strerror != os.strerror(errno.ENOSPC):
            return f"no space left on the device: {e.strerror}"  # what the writer says it kept
        return f"no space left on the device{where} (nothing was left half-written)"
    return f"{e.strerror or e}{where}"


# a Hugging Face Hub id: OWNER/NAME, one slash, no ./ or ../ start (Qwen/Qwen2.5-0.5B-Instruct)
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def hub_id_hint(path: str | os.PathLike, then: str = "give DIR") -> str:
    """What to add to a 'not found' error when the missing `path` reads as a Hugging Face id:
    that ids are never downloaded, the one command that fetches the folder, and `then` what to
    do with it ("" otherwise)."""
    text = os.fspath(path)
    if os.path.exists(text) or not HUB_ID.fullmatch(text) or os.path.isdir(text.split("/")[0]):
        return ""  # there, not an id's shape, or inside a folder that exists (packages/x)
    return (
        f" (if {text} is a Hugging Face id: edgeformer never downloads one; fetch the folder "
        f"first, `huggingface-cli download {text} --local-dir DIR`, and {then})"
    )
