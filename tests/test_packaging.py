"""Installed as users install it: `python -m build` makes an sdist and a wheel without warnings;
the wheel, installed into a fresh virtual environment with only the `cpu` extra (no torch), runs
a package; the commands that need torch say which extra to install."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from edgeformer.core.format import FORMAT_VERSION

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("build", reason="the dev extra's `build` makes the wheel")


@pytest.fixture(scope="session")
def dist(tmp_path_factory) -> Path:
    """`python -m build` on a copy of the checkout (no build/ or egg-info lands in it)."""
    src = tmp_path_factory.mktemp("src") / "edgeformer"
    ignore = shutil.ignore_patterns(
        ".git", ".venv", "build", "runs", "packages", "*.egg-info", "node_modules", "__pycache__"
    )
    shutil.copytree(ROOT, src, ignore=ignore)
    out = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    run = subprocess.run(
        [sys.executable, "-m", "build", "-o", str(out), str(src)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-3000:]
    warnings = [line for line in log.splitlines() if "warning" in line.lower()]
    assert not warnings, warnings
    return out


def wheel(dist: Path) -> Path:
    (whl,) = dist.glob("edgeformer-*.whl")
    return whl


def test_sdist_and_wheel(dist):
    assert len(list(dist.glob("edgeformer-*.tar.gz"))) == 1
    names = zipfile.ZipFile(wheel(dist)).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"edgeformer", "edgeformer-0.1.0.dist-info"}, tops
    for sub in ("core", "models", "train", "export", "runtime", "cli"):
        assert f"edgeformer/{sub}/__init__.py" in names
    # the bench and its peers' adapters are edgeformer-bench's (benchmarks/pyproject.toml)
    assert not [n for n in names if n.startswith("edgeformer/benchmarks/")]
    assert "edgeformer/__init__.py" not in names  # implicit namespace package
    assert "edgeformer/models/hf/convert.py" in names  # edgeformer convert hf
    assert "edgeformer/runtime/serve/app.py" in names  # edgeformer serve
    for name in (
        "multi30k/train.de.gz",
        "multi30k/test_2016_flickr.en.gz",
        "tinyshakespeare/input.txt",
        "README.md",
    ):
        assert f"edgeformer/train/data/{name}" in names


@pytest.fixture(scope="session")
def runtime_env(dist, tmp_path_factory) -> Path:
    """A fresh venv with the wheel and its `cpu` extra only: numpy, tokenizers, onnxruntime."""
    venv = tmp_path_factory.mktemp("device") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin/pip"), "install", "-q", f"{wheel(dist)}[cpu]"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    return venv / "bin"


def edgeformer(bin: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(bin / "edgeformer"), *map(str, args)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_the_runtime_runs_on_a_fresh_install_without_torch(runtime_env, ed_package, lm_package):
    no_torch = subprocess.run([str(runtime_env / "python"), "-c", "import torch"])
    assert no_torch.returncode != 0  # really a device install
    t = edgeformer(runtime_env, "translate", ed_package, "two dogs .", "--max-new-tokens", "4")
    assert t.returncode == 0 and len(t.stdout.splitlines()) == 1, t.stderr
    g = edgeformer(runtime_env, "generate", lm_package, "two", "--max-new-tokens", "4")
    assert g.returncode == 0 and g.stdout.startswith("two"), g.stderr
    info = edgeformer(runtime_env, "info", ed_package)
    assert info.returncode == 0 and f"format {FORMAT_VERSION}" in info.stdout, info.stderr
    verify = edgeformer(runtime_env, "verify", lm_package, "--variants", "fp32")
    assert verify.returncode == 0 and "fp32" in verify.stdout, verify.stderr


@pytest.mark.parametrize(
    "args", [["train"], ["export", "ckpt", "pkg"], ["convert", "hf", "src", "out"], ["bench"]]
)
def test_commands_that_need_torch_name_the_extra(runtime_env, args):
    run = edgeformer(runtime_env, *args)
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.strip().splitlines()  # one line, no traceback
    assert "needs" in line and "pip install torch==2.13.0" in line and "pip install '.[" in line
    helped = edgeformer(runtime_env, args[0], "--help")
    if args[0] == "bench":  # not installed at all: its flags are edgeformer-bench's
        assert "needs the edgeformer-bench distribution, torch" in line and "./benchmarks" in line
        assert helped.returncode == 2 and helped.stderr.strip() == line, helped.stderr
        return
    assert "needs torch" in line
    assert helped.returncode == 0 and "usage: edgeformer" in helped.stdout, helped.stderr  # help


def test_serve_without_its_extra_names_it(runtime_env):
    run = edgeformer(runtime_env, "serve", "shakespeare")
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.strip().splitlines()  # one line, no traceback
    assert "edgeformer serve needs starlette" in line and "'.[cpu,serve]' in a clone" in line, line


def test_the_bench_is_a_distribution_of_its_own(tmp_path):
    """benchmarks/ builds as edgeformer-bench: edgeformer.benchmarks only, needing edgeformer."""
    src = tmp_path / "benchmarks"
    shutil.copytree(
        ROOT / "benchmarks", src, ignore=shutil.ignore_patterns("results", "__pycache__")
    )
    run = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "-o", str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    (whl,) = (tmp_path / "dist").glob("edgeformer_bench-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    assert {n.split("/")[0] for n in names} == {"edgeformer", "edgeformer_bench-0.1.0.dist-info"}
    assert "edgeformer/benchmarks/cli.py" in names and "edgeformer/__init__.py" not in names
    assert {n.split("/")[1] for n in names if n.startswith("edgeformer/")} == {"benchmarks"}
    meta = zipfile.ZipFile(whl).read("edgeformer_bench-0.1.0.dist-info/METADATA").decode()
    assert "Requires-Dist: edgeformer[bench,train]==0.1.0" in meta


def test_the_bundled_packages_translate_right_after_install(runtime_env, dist):
    """The wheel carries runtime/pretrained/: a device install translates and generates with no
    training and no package argument."""
    from edgeformer.runtime.package import BUNDLED, PRETRAINED_DIR

    if not all((PRETRAINED_DIR / n / "config.json").is_file() for n in BUNDLED):
        pytest.skip("runtime/pretrained/ has no packages (make models)")
    names = zipfile.ZipFile(wheel(dist)).namelist()
    for name in BUNDLED:
        assert f"edgeformer/runtime/pretrained/{name}/config.json" in names
    t = edgeformer(runtime_env, "translate", "A man is riding a bike.", "Two dogs play.")
    assert t.returncode == 0 and len(t.stdout.splitlines()) == 2, t.stderr
    g = edgeformer(runtime_env, "generate", "ROMEO:", "--max-new-tokens", "8")
    assert g.returncode == 0 and g.stdout.startswith("ROMEO:"), g.stderr


GIT_INSTALL = re.compile(r'pip install "([^"]+ @ git\+[^"]+)"')


def test_the_documented_git_install_lines_parse_with_a_fresh_venvs_pip(runtime_env):
    """pip 23.x (what `python -m venv` bundles) refuses `name @ git+file:///path` (its URL check
    wants a host); the git lines README.md and the docs give must parse with it."""
    pip_python = str(runtime_env / "python")
    check = (
        "import sys; from pip._vendor.packaging.requirements import Requirement; "
        "Requirement(sys.argv[1])"
    )

    def parses(line: str) -> bool:
        return subprocess.run([pip_python, "-c", check, line], capture_output=True).returncode == 0

    if parses("edgeformer[cpu] @ git+file:///tmp/clone"):
        pytest.skip("this venv's pip takes file:/// URLs (pip >= 24): nothing to check")
    lines = [m for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
             for m in GIT_INSTALL.findall(doc.read_text())]  # fmt: skip
    assert lines, "no git install line found"
    for line in [*lines, "edgeformer[cpu] @ git+file://localhost/tmp/clone"]:
        assert parses(line.replace("HOST/PATH", "example.org/me")), line
