"""Optimum's own Python environment: the `optimum-*` stacks run there, in the same bench run.

Optimum cannot be installed beside the bench's transformers 5: optimum-onnx 0.1.0 (the latest
release) requires `transformers<4.58` and `optimum~=2.1.0`, and transformers 4.57 refuses
tokenizers newer than 0.23.0 and huggingface-hub 1.x. So its stacks get a virtual environment of
their own (benchmarks/README.md, "Optimum's environment"):

    edgeformer bench --make-optimum-env runs/optimum-env ...   # create it if missing, use it
    python -m edgeformer.benchmarks.optimum_env runs/optimum-env   # create it only
    edgeformer bench --optimum-python runs/optimum-env/bin/python ...   # or
    EDGEFORMER_OPTIMUM_PYTHON=runs/optimum-env/bin/python edgeformer bench ...

Without either, `runs/optimum-env` under the working directory is used when it exists, else the
bench's own interpreter (where Optimum may be installed). The environment holds the same torch
and onnxruntime as the bench's (same kernels, same threads settings), transformers 4.57,
optimum-onnx[onnxruntime] 0.1.0, and this checkout of edgeformer installed without dependencies
(editable), so that the stack's process is the same `edgeformer.benchmarks.child` as every
other stack's. Only the ONNX export, the quantization and the run happen there; the Hugging Face
model they start from is the one the bench builds (`artifacts.hf_model_dir`): the same weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from functools import cache
from importlib import metadata
from pathlib import Path

ENV_VAR = "EDGEFORMER_OPTIMUM_PYTHON"
DEFAULT_ENV = "runs/optimum-env"  # under the working directory, as runs/bench
RECORD = "edgeformer-optimum-env.json"  # in the environment: how it was made, what resolved
# Pinned: the newest releases that resolve together (optimum-onnx 0.1.0 requires optimum~=2.1.0
# and transformers<4.58); tokenizers, huggingface-hub, onnx, numpy are left to pip (recorded).
OPTIMUM = ("optimum-onnx[onnxruntime]==0.1.0", "transformers==4.57.6")
# The modules the stacks import there (stacks.Stack.needs) and the versions the results record
MODULES = ("torch", "transformers", "optimum.onnxruntime", "onnxruntime", "edgeformer.benchmarks")
VERSIONS = (
    "optimum", "optimum-onnx", "transformers", "tokenizers", "huggingface-hub", "onnxruntime",
    "onnx", "torch", "numpy",
)  # fmt: skip
FALLBACK = {"torch": "2.13.0", "onnxruntime": "1.32.0"}  # when the bench's env has neither
REPO = Path(__file__).resolve().parent.parent  # this checkout (pyproject.toml's folder)
# this checkout's edgeformer and edgeformer-bench (the stacks' child process is the latter's)
EDITABLE = ("-e", str(REPO), "-e", str(REPO / "benchmarks"))


def venv_python(env: str | Path) -> Path:
    """The interpreter of the virtual environment folder `env`."""
    return Path(env) / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def python_of(env: str | Path) -> Path:
    """The interpreter of a virtual environment folder (or the path itself if it is none)."""
    return venv_python(env) if Path(env).is_dir() else Path(env)


def resolve(given: str | None = None) -> str | None:
    """The Optimum stacks' interpreter: `given` (--optimum-python), else $EDGEFORMER_OPTIMUM_PYTHON,
    else DEFAULT_ENV's when that exists; None: the bench's own interpreter. Returned absolute
    (not resolved: a venv's python is a link to the base interpreter) so that it is recorded as
    given and does not depend on the working directory."""
    chosen = given or os.environ.get(ENV_VAR)
    if not chosen and venv_python(DEFAULT_ENV).exists():
        chosen = DEFAULT_ENV
    return str(Path(os.path.abspath(python_of(chosen)))) if chosen else None


def pins() -> list[str]:
    """torch and onnxruntime as in the bench's own environment (same kernels on both sides),
    then Optimum's requirements."""
    out = []
    for name in ("torch", "onnxruntime"):
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = FALLBACK[name]
        out.append(f"{name}=={version}")
    return [*out, *OPTIMUM]


def create(env: str | Path, python: str | None = None, log=print) -> dict:
    """Make the virtual environment `env` (python -m venv), pip install `pins()` and this
    checkout's edgeformer and edgeformer-bench (--no-deps, editable); write and return its
    RECORD (seconds taken, requirements, the versions that resolved)."""
    env = Path(env).absolute()
    t0 = time.time()
    base = python or sys.executable  # venv uses the base interpreter of a venv's python
    py = str(venv_python(env))
    steps = [
        [base, "-m", "venv", str(env)],
        [py, "-m", "pip", "install", "--quiet", *pins()],
        [py, "-m", "pip", "install", "--quiet", "--no-deps", *EDITABLE],
    ]
    for cmd in steps:
        log("$ " + " ".join(cmd))
        subprocess.run(cmd, check=True)
    info = probe(py)
    record = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(time.time() - t0, 1),
        "requirements": pins(),
        "python": info.get("python"),
        "versions": info.get("versions", {}),
        "missing": info.get("missing", []),
    }
    (env / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    log(json.dumps(record, indent=2))
    return record


def ensure(env: str | Path, log=print) -> str:
    """The interpreter of `env`, creating the environment first unless it is usable."""
    python = str(Path(os.path.abspath(venv_python(env))))
    if not Path(python).exists() or probe(python).get("missing") != []:
        log(f"creating Optimum's environment in {env} (a few minutes)")
        create(env, log=log)
        probe.cache_clear()
    return python


_PROBE = """
import importlib.util, json, platform, sys
from importlib import metadata
def found(m):
    try:
        return importlib.util.find_spec(m) is not None
    except (ImportError, ValueError):
        return False
def version(n):
    try:
        return metadata.version(n)
    except metadata.PackageNotFoundError:
        return None
mods, names = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {"python": platform.python_version(), "missing": [m for m in mods if not found(m)],
       "versions": {n: version(n) for n in names}}
if found("edgeformer.benchmarks"):
    spec = importlib.util.find_spec("edgeformer.benchmarks")
    out["edgeformer"] = str(list(spec.submodule_search_locations)[0])
print(json.dumps(out))
"""


@cache
def probe(
    python: str, modules: tuple[str, ...] = MODULES, versions: tuple[str, ...] = VERSIONS
) -> dict:
    """What the interpreter `python` has: {"python", "missing": `modules` it cannot import,
    "versions": of `versions`, "edgeformer": the benchmarks folder it imports}, or {"error"}."""
    if not Path(python).exists():
        return {"error": f"no such interpreter: {python}"}
    cmd = [python, "-c", _PROBE, json.dumps(modules), json.dumps(versions)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"{python}: {type(e).__name__}: {e}"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"{python} exit {p.returncode}: {tail[0][:200]}"}
    return json.loads(lines[-1])


def describe(python: str) -> dict:
    """For the results' meta: the interpreter, its Python and package versions, and how the
    environment was made (its RECORD, when `create` made it)."""
    info = probe(python)
    out = {"interpreter": python, "python": info.get("python"), "versions": info.get("versions")}
    if "error" in info:
        out["error"] = info["error"]
    record = Path(python).parent.parent / RECORD
    if record.is_file():
        made = json.loads(record.read_text())
        out |= {k: made.get(k) for k in ("requirements", "created", "seconds")}
    return out


def problem(python: str) -> str | None:
    """Why the Optimum stacks cannot run with `python` (None: they can)."""
    how = "edgeformer bench --make-optimum-env DIR; benchmarks/README.md, Optimum's environment"
    info = probe(python)
    if "error" in info:
        return f"Optimum's environment unusable: {info['error']} ({how})"
    if info["missing"]:
        return f"not installed in Optimum's environment {python}: {', '.join(info['missing'])}"
    ours = str(Path(__file__).resolve().parent)
    if Path(info["edgeformer"]).resolve() != Path(ours):
        return (
            f"Optimum's environment {python} imports edgeformer from {info['edgeformer']}, not "
            f"this checkout ({ours}): pip install --no-deps -e {REPO} -e {REPO / 'benchmarks'} "
            "there"
        )
    return None


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m edgeformer.benchmarks.optimum_env", description=__doc__.split("\n")[0]
    )
    p.add_argument("env", nargs="?", default=DEFAULT_ENV, help=f"(default: {DEFAULT_ENV})")
    create(p.parse_args(argv).env)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
