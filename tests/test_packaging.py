"""Installation layout: one `edgeformer` namespace, bundled data, the console script."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> list[str]:
    src = tmp_path_factory.mktemp("src")
    # build from a copy so that no build/ or egg-info lands in the checkout
    ignore = shutil.ignore_patterns(".git", ".venv", "build", "runs", "packages", "*.egg-info")
    shutil.copytree(ROOT, src / "edgeformer", ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        str(src / "edgeformer"),
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    (whl,) = out.glob("edgeformer-*.whl")
    return zipfile.ZipFile(whl).namelist()


def test_wheel_has_one_namespace(wheel_names):
    tops = {n.split("/")[0] for n in wheel_names}
    assert tops == {"edgeformer", "edgeformer-0.1.0.dist-info"}, tops
    for sub in ("models", "train", "export", "runtime", "benchmarks"):
        assert f"edgeformer/{sub}/__init__.py" in wheel_names
    assert "edgeformer/__init__.py" not in wheel_names  # implicit namespace package


def test_wheel_bundles_the_data(wheel_names):
    for name in (
        "multi30k/train.de.gz",
        "multi30k/test_2016_flickr.en.gz",
        "tinyshakespeare/input.txt",
        "README.md",
    ):
        assert f"edgeformer/train/data/{name}" in wheel_names


def test_console_script_lists_subcommands():
    exe = Path(sys.executable).parent / "edgeformer"
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=True).stdout
    for cmd in ("train", "export", "translate", "generate", "bench"):
        assert cmd in out
