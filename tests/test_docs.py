"""Every code block of README.md and docs/*.md that is meant to run, runs as written.

A fenced block whose language is python, sh, bash or shell is run, unless the line before it is
`<!-- skip: REASON -->` (a 79-minute training, a model to download, ...). text, console, json and
blocks without a language are outputs or formats, not run.

Each block runs on its own in a fresh folder laid out as a user's would be after the quickstart
(random-weight models stand in for trained ones, so outputs differ but every command works):

    runs/demo/best, runs/demo/averaged      an encoder-decoder (En->De) checkpoint
    runs/demo/package                       its package (fp32, int8, int4, int8-dynamic)
    runs/shakespeare/best                   a decoder-only checkpoint
    packages/m30k                           = runs/demo/package
    packages/shakespeare                    its package (every variant)
    test.en                                 a few English sentences

sh blocks run under `bash -euo pipefail` with the test's `edgeformer` on PATH; python blocks with
the test's interpreter. Both must exit 0 within TIMEOUT_S.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks/README.md"]
RUN = {"python": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
TIMEOUT_S = 120
SENTENCES = ["A man is riding a bike.", "Two dogs play in the snow.", "A woman sings."]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.M | re.S)
SKIP = re.compile(r"<!--\s*skip:\s*(.+?)\s*-->\s*$")


def blocks() -> list:
    """pytest params: one per runnable block, id 'FILE:LINE'; skipped ones with their reason."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in FENCE.finditer(text):
            lang = m.group(1)
            if lang not in RUN:
                continue
            line = text.count("\n", 0, m.start()) + 1
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            skip = SKIP.search(before)
            marks = [pytest.mark.skip(reason=skip.group(1))] if skip else []
            name = f"{doc.relative_to(ROOT)}:{line}"
            out.append(pytest.param(RUN[lang], m.group(2), id=name, marks=marks))
    return out


@pytest.fixture(scope="session")
def layout(tmp_path_factory, ed_checkpoint, ed_package, lm_checkpoint, lm_package) -> Path:
    """The folder every block starts from (copied per block: blocks may write into it)."""
    root = tmp_path_factory.mktemp("user")
    for src, dst in (
        (ed_checkpoint, "runs/demo/best"),
        (ed_checkpoint, "runs/demo/averaged"),
        (ed_package, "runs/demo/package"),
        (ed_package, "packages/m30k"),
        (lm_checkpoint, "runs/shakespeare/best"),
        (lm_package, "packages/shakespeare"),
    ):
        shutil.copytree(src, root / dst)
    (root / "test.en").write_text("\n".join(SENTENCES) + "\n")
    return root


def test_every_block_is_found():
    """The harness sees the blocks (a regex that matched nothing would pass everything)."""
    found = blocks()
    assert len(found) >= 5, [p.id for p in found]
    assert any(p.id.startswith("README.md") for p in found)


@pytest.mark.parametrize("kind, code", blocks())
def test_block_runs_as_written(kind, code, layout, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(layout, work)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("EDGEFORMER_LOG_LEVEL", None)
    if kind == "python":
        cmd = [sys.executable, "-c", code]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", code]
    run = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True,
                         timeout=TIMEOUT_S)  # fmt: skip
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"


LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


@functools.cache  # a file's ids are read once, not once per link to it
def anchors(doc: Path) -> frozenset[str]:
    """GitHub's heading ids: lowercased, punctuation dropped, spaces to '-', repeats numbered."""
    text = FENCE.sub("", doc.read_text())  # a '#' line inside a code block is not a heading
    ids: set[str] = set()
    repeats = Counter[str]()
    for title in HEADING.findall(text):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        ids.add(f"{slug}-{repeats[slug]}" if repeats[slug] else slug)
        repeats[slug] += 1
    return frozenset(ids)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_relative_links_reach_a_file_and_heading(doc):
    broken = []
    for target in LINK.findall(FENCE.sub("", doc.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{doc.name}: " + "; ".join(broken)
