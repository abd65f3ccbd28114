"""`edgeformer bench --hf DIR|FILE.gguf` (issue 57): every stack on a real model's own weights,
each stack's teacher-forced perplexity on the same Tiny Shakespeare windows beside its speed.
Cheap: a tiny Llama as a GGUF file (written as llama.cpp writes one: tests/models/test_gguf.py)
and as a Hugging Face folder, --quick; the llama.cpp stacks run where llama.cpp's environment
exists (`edgeformer bench --make-llama-env DIR`) and are skipped with the reason otherwise, the
table, JSON and plot are checked either way."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("onnx")

from conftest import byte_level_tokenizer  # noqa: E402

from edgeformer.benchmarks import artifacts, llama_env, weights  # noqa: E402
from edgeformer.benchmarks.cli import COMMITTED, add_arguments, main  # noqa: E402
from edgeformer.benchmarks.settings import Settings  # noqa: E402
from edgeformer.benchmarks.stacks import get_stack, inputs_for, package_variants  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
LLAMA = llama_env.problem(llama_env.resolve(None)) is None  # llama.cpp's environment is there
GENAI = importlib.util.find_spec("onnxruntime_genai") is not None
SMALL = dict(vocab_size=280, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
             initializer_range=0.05, bos_token_id=0, eos_token_id=0,
             tie_word_embeddings=True)  # fmt: skip
GGUF_STACKS = ["edgeformer-fp32", "edgeformer-int8", "edgeformer-gguf", "hf-torch",
               "llamacpp-gguf", "llamacpp-q8_0"] + (["genai-int4"] if GENAI else [])  # fmt: skip


def _write_gguf():
    """tests/models/gguf_files.py's writer: a GGUF file as llama.cpp's converter writes it."""
    if "gguf_files" not in sys.modules:  # tests/models' own tests import it by that name
        spec = importlib.util.spec_from_file_location("gguf_files", TESTS / "models/gguf_files.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["gguf_files"] = module  # before running it: its dataclasses look it up
        spec.loader.exec_module(module)
    return sys.modules["gguf_files"].write_gguf


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(the GGUF file: a 2-layer Llama, Q8_0 matrices; a Hugging Face folder of a Llama)."""
    root = tmp_path_factory.mktemp("tiny-hf")
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL)).eval()
    with torch.no_grad():
        for n, p in hf.named_parameters():
            if "norm" in n:
                p.add_(torch.randn_like(p) * 0.2)
    folder = root / "hf"
    hf.save_pretrained(folder)
    byte_level_tokenizer(folder / "tokenizer.json")
    transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"), eos_token="<|endoftext|>"
    ).save_pretrained(folder)
    path = root / "tiny.gguf"
    _write_gguf()(path, "llama", hf, folder / "tokenizer.json", "Q8_0")
    return path, folder


@pytest.fixture(scope="module")
def gguf_run(tiny, tmp_path_factory):
    """One quick --hf run on the GGUF file: (its JSON, its results folder)."""
    out = tmp_path_factory.mktemp("hf-out")
    argv = ["--hf", str(tiny[0]), "--quick", "--stacks", ",".join(GGUF_STACKS),
            "--rounds", "1", "--out", str(out), "--work", str(out / "work")]  # fmt: skip
    assert main(argv) == 0
    return json.loads((out / "latest.json").read_text()), out


def _settings(*argv: str) -> Settings:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return Settings.from_args(p.parse_args(list(argv)))


def test_hf_defaults_every_stack_batch_one_and_the_long_prompt(tiny):
    s = _settings("--hf", str(tiny[0]))
    assert s.hf == str(tiny[0]) and s.shapes == ("hf",)
    assert s.workloads == ("W1", "W4") and s.rounds == 3 and s.memory == "delta"
    assert tuple(s.stacks.split(",")) == weights.HF_STACKS
    q = _settings("--hf", str(tiny[1]), "--quick", "--stacks", "edgeformer-fp32")
    assert q.workloads == ("W1",) and q.stacks == "edgeformer-fp32" and q.rounds == 2


def test_gguf_run_scores_every_stack_on_the_same_windows(gguf_run):
    res, _ = gguf_run
    hf = res["hf"]
    w = hf["windows"]
    n, T = weights.QUICK_WINDOWS, weights.QUICK_WINDOW_TOKENS
    assert (w["windows"], w["window_tokens"], w["predicted_tokens"]) == (n, T, n * T)
    assert "GGUF file tiny.gguf" in hf["what"]
    stacks = res["stacks"][hf["shape"]]
    ok = {k for k, s in stacks.items() if s["status"] == "ok"}
    expected = {"edgeformer-fp32", "edgeformer-int8", "edgeformer-gguf", "hf-torch"}
    assert expected | ({"genai-int4"} if GENAI else set()) <= ok
    ref = stacks["hf-torch"]["perplexity"]
    assert ref["tokens"] == w["predicted_tokens"] and 1 < ref["ppl"] < 1e4
    for name in ok:
        p = stacks[name]["perplexity"]
        assert p["tokens"] == ref["tokens"] and math.isfinite(p["ppl"])
        assert p["ratio"] == pytest.approx(p["ppl"] / ref["ppl"])
    # fp32 is transformers on the same weights; the file's own Q8_0 blocks lose next to nothing
    assert stacks["edgeformer-fp32"]["perplexity"]["ratio"] == pytest.approx(1.0, abs=1e-4)
    assert stacks["edgeformer-gguf"]["perplexity"]["ratio"] == pytest.approx(1.0, abs=0.02)
    if LLAMA:  # llama.cpp on the file as given: the same dequantized weights
        assert {"llamacpp-gguf", "llamacpp-q8_0"} <= ok
        assert stacks["llamacpp-gguf"]["perplexity"]["ratio"] == pytest.approx(1.0, abs=0.02)
    else:
        for name in ("llamacpp-gguf", "llamacpp-q8_0"):
            assert "llama.cpp" in stacks[name]["reason"]
    rows = [r for r in res["workloads"] if r["shape"] == hf["shape"]]
    assert {r["workload"] for r in rows} == {"W1"}
    for r in rows:  # every stack generated from the text's ids, as hf-torch did
        assert r["forced_length_ok"] and r["ttft_ms"]["median"] > 0
        assert r["agreement"] == pytest.approx(1.0) if r["stack"] == "edgeformer-fp32" else True


def test_gguf_run_writes_the_table_and_the_plot(gguf_run):
    res, out = gguf_run
    md = (out / "latest.md").read_text()
    assert "## Perplexity beside speed" in md and "| stack | perplexity | × fp32 |" in md
    table = md.split("## Perplexity beside speed")[1].split("\n\n")[2].splitlines()
    names = [line.split("|")[1].strip() for line in table[2:]]
    ok = [k for k, s in res["stacks"][res["hf"]["shape"]].items() if s["status"] == "ok"]
    assert sorted(names) == sorted(ok)
    fp32 = next(line for line in table if line.startswith("| edgeformer-fp32 |"))
    assert "| 1.0000 |" in fp32
    assert "edgeformer-fp32 ÷ hf-torch: perplexity 1.0000×" in md
    png = out / "latest.png"
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"


def test_hf_folder_runs_without_the_gguf_stacks(tiny, tmp_path):
    out = tmp_path / "out"
    argv = ["--hf", str(tiny[1]), "--quick", "--stacks",
            "edgeformer-fp32,edgeformer-gguf,hf-torch,llamacpp-gguf", "--rounds", "1",
            "--out", str(out), "--work", str(tmp_path / "work")]  # fmt: skip
    assert main(argv) == 0
    res = json.loads((out / "latest.json").read_text())
    stacks = res["stacks"][res["hf"]["shape"]]
    for name in ("edgeformer-gguf", "llamacpp-gguf"):
        assert stacks[name]["status"] == "skipped" and "--hf FILE.gguf" in stacks[name]["reason"]
    assert stacks["edgeformer-fp32"]["perplexity"]["ratio"] == pytest.approx(1.0, abs=1e-4)
    assert "Hugging Face folder" in res["hf"]["what"]


def test_hf_shape_prompts_are_the_texts_ids(tiny, tmp_path):
    folder = artifacts.hf_folder(tiny[0].absolute(), tmp_path)  # the file dequantized
    assert folder != tiny[0] and (folder / "model.safetensors").is_file()
    assert artifacts.hf_folder(tiny[0].absolute(), tmp_path) == folder  # made once
    shape = weights.hf_shape(tiny[0], folder)
    assert weights.gguf_of(shape) == tiny[0].absolute() and weights.weights_of(shape) == folder
    ids = weights.text_ids(folder / "tokenizer.json")
    assert inputs_for(get_stack("hf-torch"), shape, 1, 16) == [ids[:16]]
    two = inputs_for(get_stack("llamacpp-q4_0"), shape, 2, 16)  # vocab "llama": the same ids
    assert two == [ids[:16], ids[16:32]]
    assert package_variants([get_stack("edgeformer-gguf")], gguf=True) == ("fp32", "gguf")
    assert package_variants([get_stack("edgeformer-gguf")]) == ("fp32",)


def test_bad_inputs_get_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no such GGUF file"):
        artifacts.hf_folder(tmp_path / "missing.gguf", tmp_path)
    with pytest.raises(ValueError, match="no config.json"):
        artifacts.hf_folder(tmp_path, tmp_path)
    with pytest.raises(ValueError, match="not a folder"):
        artifacts.hf_folder(tmp_path / "nothing", tmp_path)


def test_a_quick_hf_run_never_writes_the_committed_results(tiny):
    with pytest.raises(SystemExit, match="quick run"):
        main(["--hf", str(tiny[1]), "--quick", "--out", str(COMMITTED)])


def test_readme_quotes_the_committed_real_model_run():
    """README's real-weights row is the committed --hf run's (benchmarks/results)."""
    from edgeformer.benchmarks.report import hf_rows

    res = json.loads((COMMITTED / "real-smollm2.json").read_text())
    rows = {r["stack"]: r for r in hf_rows(res)}
    w1 = {r["stack"]: r for r in res["workloads"] if r["workload"] == "W1"}
    readme = (TESTS.parent / "README.md").read_text().splitlines()
    line = next(ln for ln in readme if "real SmolLM2-135M-Instruct weights" in ln)
    stacks = ("edgeformer-int4", "llamacpp-q4_k_m", "genai-int4")
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert " / ".join(f"×{rows[s]['ratio']:.3f}" for s in stacks) in cells[0]
    assert cells[1] == " / ".join(f"{rows[s]['ms_per_token']:.1f}" for s in stacks)
    assert cells[2] == " / ".join(f"{w1[s]['floor_ratio']:.1f}×" for s in stacks)
    assert cells[3] == " / ".join(f"{rows[s]['size_mb']:.0f}" for s in stacks)
