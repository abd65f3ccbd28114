"""Type-check the installed `edgeformer.*` namespace with mypy, straight from the source folders.

The top-level folders (models/, train/, ...) are installed as `edgeformer.models`, ... through
setuptools' `package-dir`; an editable install maps them with an import hook that mypy cannot
follow, and mypy itself would name `models/config.py` the module `models.config`. This runs
mypy's own command line on the folders named in pyproject's `[tool.setuptools.package-dir]`,
with each module renamed to the name it is installed under, so that `from edgeformer.models
import ...` resolves to the checked sources and errors point at the real files.

Usage (from the repository root): python tools/typecheck.py [extra mypy options]
Configuration: pyproject.toml's [tool.mypy].
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from mypy import util
from mypy.fscache import FileSystemCache
from mypy.main import process_options, run_build

if sys.version_info >= (3, 11):
    import tomllib
else:  # mypy depends on tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def package_dirs() -> dict[str, str]:
    """`{"models": "edgeformer.models", ...}`: source folder -> installed package name, from
    pyproject.toml and benchmarks/pyproject.toml (edgeformer-bench, a distribution of its own)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        mapping = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    with open(ROOT / "benchmarks" / "pyproject.toml", "rb") as f:
        bench = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    dirs = {folder: package for package, folder in mapping.items()}
    return dirs | {str(Path("benchmarks", folder)): p for p, folder in bench.items()}


def main(argv: list[str]) -> int:
    t0 = time.time()
    folders = package_dirs()
    fscache = FileSystemCache()
    sources, options = process_options(
        [*argv, *sorted(folders)], stdout=sys.stdout, stderr=sys.stderr, fscache=fscache
    )
    for source in sources:
        top, dot, rest = source.module.partition(".")
        if top not in folders:
            sys.exit(f"typecheck: {source.path} is not in a package of {sorted(folders)}")
        source.module = folders[top] + dot + rest
    options.fast_exit = False
    _, messages, blockers = run_build(sources, options, fscache, t0, sys.stdout, sys.stderr)

    # The end of mypy.main.main: the summary line and the exit code.
    formatter = util.FancyFormatter(sys.stdout, sys.stderr, options.hide_error_codes)
    n_errors, n_notes, n_files = util.count_stats(messages)
    if n_errors:
        summary = formatter.format_error(
            n_errors, n_files, len(sources), blockers=blockers, use_color=options.color_output
        )
    else:
        summary = formatter.format_success(len(sources), options.color_output)
    print(summary, flush=True)
    if messages and n_notes < len(messages):
        return 2 if blockers else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
