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
host's SIMD: GGML_NATIVE, or explicit flags without AMX where the CPU reports AMX: `arch_args`)
into ENV/wheels (kept: a new environment reuses it if built with the same args), unpack the
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

from .optimum_env import EDITABLE, REPO, probe, python_of, venv_python

ENV_VAR = "EDGEFORMER_LLAMA_PYTHON"
DEFAULT_ENV = "runs/llama-env"
RECORD = "edgeformer-llama-env.json"
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"  # pinned: the vendored llama.cpp it builds
# A CPU build, only the library: no tools, tests, examples, server or multimodal library
# (minutes less on 2 cores); the SIMD flags in front of these come from `arch_args`
LIBRARY_ARGS = (
    "-DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "
    "-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF"
)
NATIVE = "-DGGML_NATIVE=ON"
CMAKE_ARGS = f"{NATIVE} {LIBRARY_ARGS}"  # a host without AMX (what every build used before)
AMX = ("amx_tile", "amx_int8", "amx_bf16")  # /proc/cpuinfo's names
# ggml-cpu's x86 options without GGML_NATIVE (its CMakeLists) and the /proc/cpuinfo flags
# each compiles for: on an AMX host these replace -march=native, AMX off
X86_OPTIONS = (
    ("GGML_SSE42", ("sse4_2",)), ("GGML_AVX", ("avx",)), ("GGML_AVX2", ("avx2",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)), ("GGML_BMI2", ("bmi2",)), ("GGML_FMA", ("fma",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    ("GGML_AVX512_VBMI", ("avx512vbmi",)), ("GGML_AVX512_VNNI", ("avx512_vnni",)),
    ("GGML_AVX512_BF16", ("avx512_bf16",)),
)  # fmt: skip
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


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags as Linux reports them (empty where there is no such file)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return set()
    return {f for line in text.splitlines() if line.startswith("flags") for f in line.split()}


def arch_args(flags: set[str]) -> dict:
    """The SIMD part of CMAKE_ARGS for a CPU reporting `flags`, and why. GGML_NATIVE unless the
    CPU reports AMX: -march=native then turns on ggml's AMX kernels (GGML_AMX_*=OFF beside it
    does not remove them), whose ldtilecfg killed the first decode (general protection fault)
    on a VM reporting AMX; there the flags are explicit, the reported x86 features but AMX."""
    amx = sorted(flags & set(AMX))
    if not amx:
        return {"args": NATIVE, "native": True, "why": "no AMX reported: GGML_NATIVE"}
    on = [opt for opt, need in X86_OPTIONS if all(f in flags for f in need)]
    args = ["-DGGML_NATIVE=OFF", *(f"-D{opt}={'ON' if opt in on else 'OFF'}"
                                   for opt, _ in X86_OPTIONS)]  # fmt: skip
    args += ["-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"]
    why = f"the CPU reports {', '.join(amx)}: GGML_NATIVE off, explicit SIMD flags, AMX off"
    return {"args": " ".join(args), "native": False, "why": why, "on": on, "amx_reported": amx}


def cmake_args(flags: set[str] | None = None) -> tuple[str, dict]:
    """CMAKE_ARGS for this host (or a CPU reporting `flags`) and `arch_args`' answer."""
    arch = arch_args(cpu_flags() if flags is None else flags)
    return f"{arch['args']} {LIBRARY_ARGS}", arch


def _run(cmd: list[str], log, **kw) -> None:
    log("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True, **kw)


def wheel_args(wheel: Path) -> str:
    """The CMAKE_ARGS a cached wheel was built with: its WHEEL.cmake_args file, else the
    GGML_NATIVE build every wheel was before the file existed."""
    side = wheel.with_name(wheel.name + ".cmake_args")
    return side.read_text().strip() if side.is_file() else CMAKE_ARGS


def build_wheel(env: Path, args: str = CMAKE_ARGS, log=print) -> Path:
    """The llama-cpp-python wheel built from its sdist with CMAKE_ARGS `args` (cached in
    ENV/wheels: reused only when built with the same args), and the sdist unpacked into
    ENV/src; returns the wheel."""
    wheels, src = env / "wheels", env / "src"
    name = LLAMA_CPP_PYTHON.split("==")[0].replace("-", "_")
    version = LLAMA_CPP_PYTHON.split("==")[1]
    found = [w for w in sorted(wheels.glob(f"{name}-{version}-*.whl")) if wheel_args(w) == args]
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
        env_vars = {**os.environ, "CMAKE_ARGS": args, "CMAKE_BUILD_PARALLEL_LEVEL": "2"}
        log(f"building {LLAMA_CPP_PYTHON} from source (CPU; many minutes on 2 cores)")
        log(f"CMAKE_ARGS={args}")
        for old in wheels.glob(f"{name}-{version}-*.whl"):  # built with other args
            old.unlink()
            old.with_name(old.name + ".cmake_args").unlink(missing_ok=True)
        _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(sdists[0]),
              "-w", str(wheels)], log, env=env_vars)  # fmt: skip
        found = sorted(wheels.glob(f"{name}-{version}-*.whl"))
        found[0].with_name(found[0].name + ".cmake_args").write_text(args + "\n")
    return found[0]


def create(env: str | Path, log=print) -> dict:
    """Make the environment `env` (see the module docstring); write and return its RECORD."""
    env = Path(env).absolute()
    t0 = time.time()
    args, arch = cmake_args()
    log(f"llama.cpp's CPU build: {arch['why']} ({arch['args']})")
    wheel = build_wheel(env, args, log)
    name, version = LLAMA_CPP_PYTHON.replace("-", "_").split("==")
    vendor = env / "src" / f"{name}-{version}" / "vendor" / "llama.cpp"
    py = str(venv_python(env))
    for cmd in (
        [sys.executable, "-m", "venv", str(env)],
        [py, "-m", "pip", "install", "--quiet", str(wheel), "numpy"],
        [py, "-m", "pip", "install", "--quiet", "--no-deps", *EDITABLE],  # both distributions
    ):
        _run(cmd, log)
    probe.cache_clear()
    info = probe(py, MODULES, VERSIONS)
    rec = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(time.time() - t0, 1),
        "requirements": [LLAMA_CPP_PYTHON, "numpy"],
        "cmake_args": args,
        "cpu_build": arch,
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
    keys = ("requirements", "cmake_args", "cpu_build", "created", "seconds")
    out |= {k: rec.get(k) for k in keys}
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
            f"not this checkout ({ours}): pip install --no-deps -e {REPO} -e {REPO / 'benchmarks'} "
            "there"
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
