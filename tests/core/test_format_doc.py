"""docs/package-format.md is the package contract: its standalone greedy loop runs as written
and translates as the runtime does; it names every config key, file and graph input/output
that a package has."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

DOC = (Path(__file__).resolve().parents[2] / "docs" / "package-format.md").read_text()


def snippet() -> str:
    section = DOC.split("## Running a package without edgeformer", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_standalone_greedy_loop_matches_the_runtime(ed_package, tmp_path):
    from edgeformer.runtime import Translator

    code = snippet().replace('"runs/demo/package"', repr(str(ed_package)))
    assert "torch" not in code
    script = tmp_path / "loop.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    model = json.loads((ed_package / "config.json").read_text())["model"]
    max_len = model["max_position_embeddings"]
    t = Translator(ed_package)
    expected = t.translate("A man is riding a bike.", max_new_tokens=max_len - 1)
    assert out.stdout.rstrip("\n") == expected


def test_format_section_names_every_key_and_io_name(ed_package, lm_package):
    from edgeformer.core.format import HF_NAMES, OMITTED_AT_DEFAULT

    fmt = DOC.split("## Running a package without edgeformer", 1)[0]
    for key in HF_NAMES.values():  # also those a package has only when set (decoder_ffn_dim)
        assert f"`{key}`" in fmt, key
    for field in OMITTED_AT_DEFAULT:  # the keys written only when a model uses them
        assert f"`{HF_NAMES.get(field, field)}`" in fmt, field
    assert "`source`" in fmt
    for pkg in (ed_package, lm_package):
        cfg = json.loads((pkg / "config.json").read_text())
        for key in cfg:
            assert f"`{key}`" in fmt, key
        for key in cfg["model"]:  # Hugging Face names, or ours where HF has none
            assert f"`{key}`" in fmt, key
        for file in cfg["files"]:  # a variant's files by their pattern
            generic = re.sub(r"^weights\.(int8|int4|int8-dynamic)\.", "weights.{variant}.", file)
            generic = re.sub(
                r"^(\w+)\.(int8|int4|int8-dynamic)\.onnx", "{graph}.{variant}.onnx", generic
            )
            assert generic in fmt, file
        for graph, io in cfg["graphs"].items():
            assert f"`{graph}`" in fmt
            for name in io["inputs"] + io["outputs"]:
                generic = re.sub(r"\.\d+\.", ".{i}.", name)
                generic = re.sub(r"\.(last_)?(key|value)$", r".\1key", generic)
                assert f"`{generic}`" in fmt or f"`{name}`" in fmt, name
