"""Every code block of README.md and docs/*.md that is meant to run, runs as written.

A fenced block whose language is python, sh, bash or shell is run, unless the line before it is
`<!-- skip: REASON -->` (a 79-minute training, a model to download, ...). text, console, json and
blocks without a language are outputs or formats, not run. A skipped block that makes folders
later blocks use says so: `<!-- skip: REASON. creates: PATH PATH -->`.

README.md is walked as a new user reads it: its blocks in order, in one fresh empty folder;
a skipped block's `creates:` paths appear there as random-weight stand-ins (STAND_INS: outputs
differ from trained models', every command works), so a block that uses a path that nothing
before it created fails. The walk must leave the layout below, which each block of docs/*.md
then starts from (on its own, in a fresh copy; the docs pages build on the README), except the
pages of FRESH, which promise to run on the bundled packages alone (what the runtime-only
quickstart has): their blocks run in a folder holding only the quickstart's test.en.

    runs/demo/best, runs/demo/averaged      an encoder-decoder (En->De) checkpoint
    runs/demo/package                       its package (fp32, int8, int4, int8-dynamic)
    runs/shakespeare/best                   a decoder-only checkpoint
    packages/m30k                           README's export of runs/demo/best
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
CREATES = re.compile(r"creates:\s*(.+)$")
README = ROOT / "README.md"
FRESH = {ROOT / "docs/api.md"}  # pages whose blocks run as a runtime-only install's first steps
LAYOUT = ("runs/demo/best", "runs/demo/averaged", "runs/demo/package", "runs/shakespeare/best",
          "packages/m30k", "packages/shakespeare", "test.en")  # fmt: skip


def walk(doc: Path) -> list[tuple[str, str, str | None, list[str]]]:
    """(language, code, skip reason or None, paths a skipped block creates) of every block of
    `doc` meant to run, in order."""
    text = doc.read_text()
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) not in RUN:
            continue
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        reason = skip.group(1) if skip else None
        creates = CREATES.search(reason or "")
        out.append(
            (RUN[m.group(1)], m.group(2), reason, creates.group(1).split() if creates else [])
        )
    return out


def blocks() -> list:
    """pytest params: one per runnable block of docs/*.md, id 'FILE:LINE'; skipped ones with
    their reason (README.md's run in test_readme_walk)."""
    out = []
    for doc in DOCS:
        if doc == README:
            continue
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
            out.append(pytest.param(RUN[lang], m.group(2), doc in FRESH, id=name, marks=marks))
    return out


@pytest.fixture(scope="session")
def stand_ins(ed_checkpoint, ed_package, lm_checkpoint, lm_package) -> dict[str, Path]:
    """What a skipped block's `creates:` path stands for (random weights, the real shapes)."""
    return {
        "runs/demo/best": ed_checkpoint,
        "runs/demo/averaged": ed_checkpoint,
        "runs/demo/package": ed_package,
        "runs/shakespeare/best": lm_checkpoint,
        "packages/shakespeare": lm_package,
    }


def run_block(kind: str, code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("EDGEFORMER_LOG_LEVEL", None)
    if kind == "python":
        cmd = [sys.executable, "-c", code]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", code]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)  # fmt: skip


@pytest.fixture(scope="session")
def readme_walk(tmp_path_factory, stand_ins) -> tuple[Path, list[str]]:
    """README.md's blocks run in order in one fresh folder: (the folder, problems found)."""
    root = tmp_path_factory.mktemp("user")
    problems = []
    for n, (kind, code, skip, creates) in enumerate(walk(README), 1):
        if skip is not None:
            for path in creates:
                if path not in stand_ins:
                    problems.append(f"block {n} creates {path}: no stand-in for it in the test")
                    continue
                shutil.copytree(stand_ins[path], root / path)
            continue
        run = run_block(kind, code, root)
        if run.returncode != 0:
            problems.append(f"block {n} exit {run.returncode}:\n{code}\n{run.stderr[-2000:]}")
        elif "note:" in run.stderr or "Warning" in run.stderr:  # e.g. max_new_tokens cut short
            problems.append(f"block {n} warns:\n{code}\n{run.stderr[-2000:]}")
    return root, problems


def test_readme_runs_in_order_in_a_fresh_folder(readme_walk):
    """Every path a README command uses exists after the commands before it (the skipped
    ones' `creates:` stand in for their trainings), and no command warns."""
    root, problems = readme_walk
    assert not problems, "\n\n".join(problems)
    missing = [p for p in LAYOUT if not (root / p).exists()]
    assert not missing, f"README.md's commands do not make what docs/*.md start from: {missing}"


def test_the_walk_fails_on_a_path_nothing_created(tmp_path):
    """The harness can fail: a README whose command uses a folder no block before made."""
    doc = tmp_path / "README.md"
    doc.write_text("```sh\nedgeformer info packages/nowhere\n```\n")
    ((kind, code, skip, creates),) = walk(doc)
    assert run_block(kind, code, tmp_path).returncode != 0


@pytest.fixture(scope="session")
def layout(tmp_path_factory, readme_walk) -> Path:
    """The folder every docs/*.md block starts from: the README walk's (copied per block)."""
    root, _ = readme_walk
    return root


def test_every_block_is_found():
    """The harness sees the blocks (a regex that matched nothing would pass everything)."""
    found = blocks()
    assert len(found) >= 5, [p.id for p in found]
    assert len(walk(README)) >= 5 and any(c for *_, c in walk(README))


@pytest.mark.parametrize("kind, code, fresh", blocks())
def test_block_runs_as_written(kind, code, fresh, layout, tmp_path):
    work = tmp_path / "work"
    if fresh:  # the runtime-only quickstart's test.en and the bundled packages only
        work.mkdir()
        shutil.copy(layout / "test.en", work / "test.en")
    else:
        shutil.copytree(layout, work)
    run = run_block(kind, code, work)
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
