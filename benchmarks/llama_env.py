"""llama.cpp's own Python environment: the `llamacpp-*` stacks run there, in the same bench run.

llama-cpp-python is built from PyPI's source distribution (it vendors llama.cpp; a CPU build,
minutes on 2 cores), so it gets a virtual environment of its own, as Optimum's stacks do
(benchmarks/README.md, "llama.cpp's environment"):

    edgeformer bench --make-llama-env runs/llama-env ...   # create it if missing, use it
    python -m edgeformer.benchmarks.llama_env runs/llama-env   # create it only
    edgeformer bench --llama-python runs/llama-env/bin/python ...   # or
    EDGEFORMER_LLAMA_PYTHON=runs/llama-env/bin/python edgeformer bench ...

Without either, `runs/llama-env` under the working directory is used when it exists; else the
llamacpp-* stacks are skipped with the reason. What `create` does: download the sdist of
LLAMA_CPP_PYTHON (pip download --no-binary), build its wheel once with CMAKE_ARGS (CPU, the
host's SIMD: GGML_NATIVE) into ENV/wheels (kept: a new environment reuses it), unpack the
sdist into ENV/src (llama.cpp's own `convert_hf_to_gguf.py` and `gguf-py` come from there),
then `python -m venv ENV`, `pip install` the wheel, numpy, and this checkout with --no-deps
(editable: the stacks' processes are the same `edgeformer.benchmarks.child` as every other).

Only the quantization (`llama_cpp.llama_model_quantize`) and the runs happen there; the GGUF
they start from is converted by llama.cpp's converter under the bench's own interpreter (it
needs torch and transformers, which this environment does not hold), from the same Hugging Face
folder every stack runs (`artifacts.hf_model_dir`): the same weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from .optimum_env import REPO, probe, python_of, venv_python

ENV_VAR = "EDGEFORMER_LLAMA_PYTHON"
DEFAULT_ENV = "runs/llama-env"
RECORD = "edgeformer-llama-env.json"
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"  # pinned: the vendored llama.cpp it builds
# A CPU build for this host (GGML_NATIVE: its SIMD), only the library: no tools, tests,
# examples, server or multimodal library (minutes less on 2 cores)
CMAKE_ARGS = (
    "-DGGML_NATIVE=ON -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF "
    "-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF "
    "-DLLAMA_OPENSSL=OFF"
)
MODULES = ("llama_cpp", "numpy", "edgeformer.benchmarks")
VERSIONS = ("llama_cpp_python", "numpy")


def resolve(given: str | None = None) -> str | None:
    """The llamacpp-* stacks' interpreter: `given` (--llama-python), else $EDGEFORMER_LLAMA_PYTHON,
    else DEFAULT_ENV's when that exists; None: not configured (the stacks are skipped)."""
    chosen = given or os.environ.get(ENV_VAR)
    if not chosen and venv_python(DEFAULT_ENV).exists():
        chosen = DEFAULT_ENV
    return str(Path(os.path.abspath(python_of(chosen)))) if chosen else None


def env_of(python: str) -> Path:
    """The environment folder of its interpreter ENV/bin/python."""
    return Path(python).parent.parent


def record(python: str) -> dict:
    """How the environment was made (RECORD), {} if it was not made by `create`."""
    path = env_of(python) / RECORD
    return json.loads(path.read_text()) if path.is_file() else {}


def vendor_dir(python: str) -> Path:
    """The llama.cpp sources the environment's llama-cpp-python was built from (its converter)."""
    rec = record(python)
    if not rec.get("vendor"):
        raise RuntimeError(
            f"{env_of(python)} has no {RECORD} naming llama.cpp's sources (make it with "
            "edgeformer bench --make-llama-env DIR)"
        )
    return Path(rec["vendor"])


def _run(cmd: list[str], log, **kw) -> None:
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True, **kw)


def build_wheel(env: Path, log=print) -> Path:
    """The llama-cpp-python wheel, built from its sdist once (cached in ENV/wheels), and the
    sdist unpacked into ENV/src; returns the wheel."""
    wheels, src = env / "wheels", env / "src"
    name = LLAMA_CPP_PYTHON.split("==")[0].replace("-", "_")
    version = LLAMA_CPP_PYTHON.split("==")[1]
    found = sorted(wheels.glob(f"{name}-{version}-*.whl"))
    sdists = sorted(wheels.glob(f"{name}-{version}.tar.gz"))
    if not sdists:
        wheels.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
              ":all:", LLAMA_CPP_PYTHON, "-d", str(wheels)], log)  # fmt: skip
        sdists = sorted(wheels.glob(f"{name}-{version}.tar.gz"))
    if not (src / f"{name}-{version}").is_dir():
        with tarfile.open(sdists[0]) as tar:
            tar.extractall(src, filter="data")
    if not found:
        env_vars = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": "2"}
        log(f"building {LLAMA_CPP_PYTHON} from source (CPU; many minutes on 2 cores)")
        _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(sdists[0]),
              "-w", str(wheels)], log, env=env_vars)  # fmt: skip
        found = sorted(wheels.glob(f"{name}-{version}-*.whl"))
    return found[0]


def create(env: str | Path, log=print) -> dict:
    """Make the environment `env` (see the module docstring); write and return its RECORD."""
    env = Path(env).absolute()
    t0 = time.time()
    wheel = build_wheel(env, log)
    name, version = LLAMA_CPP_PYTHON.replace("-", "_").split("==")
    vendor = env / "src" / f"{name}-{version}" / "vendor" / "llama.cpp"
    py = str(venv_python(env))
    for cmd in (
        [sys.executable, "-m", "venv", str(env)],
        [py, "-m", "pip", "install", "--quiet", str(wheel), "numpy"],
        [py, "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(REPO)],
    ):
        _run(cmd, log)
    probe.cache_clear()
    info = probe(py, MODULES, VERSIONS)
    rec = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(time.time() - t0, 1),
        "requirements": [LLAMA_CPP_PYTHON, "numpy"],
        "cmake_args": CMAKE_ARGS,
        "wheel": str(wheel),
        "vendor": str(vendor),
        "python": info.get("python"),
        "versions": info.get("versions", {}),
        "missing": info.get("missing", []),
    }
    (env / RECORD).write_text(json.dumps(rec, indent=2) + "\n")
    log(json.dumps(rec, indent=2))
    return rec


def ensure(env: str | Path, log=print) -> str:
    """The interpreter of `env`, creating the environment first unless it is usable."""
    python = str(Path(os.path.abspath(venv_python(env))))
    if not Path(python).exists() or probe(python, MODULES, VERSIONS).get("missing") != []:
        log(f"creating llama.cpp's environment in {env} (builds llama.cpp: many minutes)")
        create(env, log=log)
        probe.cache_clear()
    return python


def describe(python: str) -> dict:
    """For the results' meta: the interpreter, versions, and how the environment was made."""
    info = probe(python, MODULES, VERSIONS)
    out = {"interpreter": python, "python": info.get("python"), "versions": info.get("versions")}
    if "error" in info:
        out["error"] = info["error"]
    rec = record(python)
    out |= {k: rec.get(k) for k in ("requirements", "cmake_args", "created", "seconds")}
    return out


def problem(python: str | None) -> str | None:
    """Why the llamacpp-* stacks cannot run with `python` (None: they can)."""
    how = "edgeformer bench --make-llama-env DIR; benchmarks/README.md, llama.cpp's environment"
    if python is None:
        return f"no llama.cpp environment ({how})"
    info = probe(python, MODULES, VERSIONS)
    if "error" in info:
        return f"llama.cpp's environment unusable: {info['error']} ({how})"
    if info["missing"]:
        return f"not installed in llama.cpp's environment {python}: {', '.join(info['missing'])}"
    ours = str(Path(__file__).resolve().parent)
    if Path(info["edgeformer"]).resolve() != Path(ours):
        return (
            f"llama.cpp's environment {python} imports edgeformer from {info['edgeformer']}, "
            f"not this checkout ({ours}): pip install --no-deps -e {REPO} there"
        )
    try:
        vendor_dir(python)
    except RuntimeError as e:
        return str(e)
    return None


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m edgeformer.benchmarks.llama_env", description=__doc__.split("\n")[0]
    )
    p.add_argument("env", nargs="?", default=DEFAULT_ENV, help=f"(default: {DEFAULT_ENV})")
    create(p.parse_args(argv).env)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
