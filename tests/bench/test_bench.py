"""`edgeformer bench`: the quick run end to end (ours, and peers when installed), the JSON it
writes, fp32 agreement, the report's targets on synthetic results, the settings and the module
structure, the same-weights rule (ours run the conversions of the peers' HF models: Marian /
GPT-2 and the Llama of onnxruntime-genai), and the onnxruntime-genai stack (skipped cleanly when
it is not installed)."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "edgeformer.benchmarks", reason="needs the edgeformer-bench distribution (./benchmarks)"
)

from edgeformer.benchmarks import optimum_env, report, targets
from edgeformer.benchmarks.cli import add_arguments
from edgeformer.benchmarks.settings import DEFAULT_OUT, Job, Settings
from edgeformer.benchmarks.shapes import get_shape
from edgeformer.benchmarks.stacks import all_stacks, missing_modules, select_stacks
from edgeformer.cli import main

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _have(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


@pytest.mark.slow
def test_quick_bench_end_to_end(tmp_path):
    """LM only (the faster export): our runtime fp32 must reproduce the reference exactly: HF
    PyTorch on the same (converted) weights when transformers is installed, else our PyTorch."""
    pytest.importorskip("onnx")  # the exporter
    stacks = ["edgeformer-torch", "edgeformer-fp32"]
    if _have("transformers"):
        stacks += ["hf-torch"]
    peers = _have("transformers", "ctranslate2")
    if peers:
        stacks += ["ct2-fp32"]
    out = tmp_path / "results"
    argv = ["bench", "--quick", "--shapes", "lm", "--stacks", ",".join(stacks)]
    argv += ["--workloads", "W1,W2,sweep", "--sweep-batches", "1,4", "--rounds", "1"]
    argv += ["--memory", "delta", "--profile", "--out", str(out), "--work", str(tmp_path / "w")]
    assert main(argv) == 0

    res = json.loads((out / "latest.json").read_text())
    assert {"meta", "settings", "shapes", "stacks", "workloads", "sweep", "targets"} <= set(res)
    meta = res["meta"]
    assert meta["threads"] == 2 and meta["cpu"] and meta["versions"]["onnxruntime"]
    # the instruction sets behind the kernels, as /proc/cpuinfo lists them (Linux)
    if Path("/proc/cpuinfo").exists():
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        flags = next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), [])
        assert meta["cpu_features"].split() == [f for f in report.CPU_FEATURES if f in flags]
    assert res["settings"]["quick"] and res["settings"]["selected"] == stacks
    assert res["shapes"]["lm"]["d_model"] == 64
    info = res["stacks"]["lm"]
    for name in stacks:
        assert info[name]["status"] == "ok", info[name]
        assert info[name]["size_mb"] > 0
        assert info[name]["memory"]["loaded_rss_mb"] > 0  # the stack's own process
    rows = {(r["workload"], r["stack"]): r for r in res["workloads"]}
    for w, batch in (("W1", 1), ("W2", 8)):
        for name in stacks:
            r = rows[(w, name)]
            assert r["batch"] == batch and r["new_tokens"] == 32 and r["forced_length_ok"]
            for key in ("total_ms", "ms_per_token", "ttft_ms", "decode_ms_per_token"):
                assert r[key]["min"] <= r[key]["median"] <= r[key]["max"]
            assert r["agreement"] == 1.0, (w, name)  # fp32, same weights: all vs HF PyTorch
    assert {(r["stack"], r["batch"]) for r in res["sweep"]} == {
        (s, b) for s in stacks for b in (1, 4)
    }
    t = res["targets"]
    assert {r["workload"] for r in t["speedup_vs_eager"]} == {"W1", "W2"}
    if peers:
        assert {r["workload"] for r in t["fp32_vs_ct2"]} == {"W1", "W2"}
    assert "edgeformer-fp32" in res["profile"]["lm"]["decode_step"]
    floor = res["profile"]["lm"]["floor"]["edgeformer-fp32"]  # measured in a fresh process
    size = info["edgeformer-fp32"]["size_mb"] * 2**20 / 1e6  # graphs + weights, MB
    assert floor["floor_ms"] > 0 and 0 < floor["weights_mb"] < size, floor
    md = (out / "latest.md").read_text()
    assert "weight-streaming floor" in md and "edgeformer-fp32" in md
    assert md.startswith("# edgeformer bench") and "| size MB | RSS loaded MB |" in md
    assert (out / "latest.png").stat().st_size > 0


def test_stack_selection_and_missing_peers(monkeypatch):
    from edgeformer.core.format import VARIANTS, WEB_VARIANTS

    names = [s.name for s in select_stacks("ours")]
    assert "edgeformer-fp32" in names and "edgeformer-torch" in names
    assert "edgeformer-fp16" not in names  # CPU fp16 only when asked by name
    # our variants are the runtime's, nothing hard-coded
    assert {s.variant for s in all_stacks() if s.variant} == set(VARIANTS) - set(WEB_VARIANTS)
    assert [s.name for s in select_stacks("ct2")] == ["ct2-fp32", "ct2-int8"]
    assert [s.name for s in select_stacks("genai")] == ["genai-fp32", "genai-int4"]
    assert {s.ref for s in select_stacks("genai")} == {"hf-torch-llama"}
    llama = select_stacks("edgeformer-llama")  # ours on the Llama genai runs
    assert [s.name for s in llama] == [f"edgeformer-llama-{v}" for v in ("fp32", "int8", "int4")]
    assert {(s.group, s.ref, s.vocab, s.families) for s in llama} == {
        ("ours", "hf-torch-llama", "llama", ("decoder-only",))
    }
    assert {s.name for s in llama} <= {s.name for s in select_stacks("ours")}
    with pytest.raises(ValueError, match="unknown stack"):
        select_stacks("tensorrt")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert missing_modules(select_stacks("hf-torch")[0]) == ["torch", "transformers"]


def test_genai_stack_skipped_with_reason_when_not_installed(monkeypatch, tmp_path):
    real = importlib.util.find_spec

    def find_spec(name, *a, **kw):
        return None if name.split(".")[0] == "onnxruntime_genai" else real(name, *a, **kw)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    out = tmp_path / "results"
    argv = ["bench", "--quick", "--shapes", "ed,lm", "--stacks", "genai", "--workloads", "W1"]
    assert main(argv + ["--out", str(out), "--work", str(tmp_path / "w")]) == 0
    res = json.loads((out / "latest.json").read_text())
    for name in ("genai-fp32", "genai-int4"):
        lm, ed = res["stacks"]["lm"][name], res["stacks"]["ed"][name]
        assert lm["status"] == "skipped" and "not installed: onnxruntime_genai" in lm["reason"]
        assert ed["status"] == "skipped" and "encoder-decoder" in ed["reason"]
    assert res["workloads"] == [] and res["targets"]["quantized_vs_genai"] == []
    md = (out / "latest.md").read_text()
    assert "skipped genai-int4: not installed: onnxruntime_genai" in md
    assert "vs genai-int4 (LM W1 and LM W3): not computed" in md


@pytest.mark.skipif(not _have("onnxruntime_genai", "transformers"), reason="no onnxruntime-genai")
def test_genai_quick_lm_builds_and_generates_forced_length(tmp_path):
    """The quick-shape Llama through the model builder (fp32, int4), run by genai's loop: the
    forced number of tokens, and fp32 equal to HF PyTorch's greedy run of the same weights."""
    from edgeformer.benchmarks import measure
    from edgeformer.benchmarks.stacks import get_stack, inputs_for

    shape = get_shape("lm", quick=True)
    job = Job("", shape, tmp_path, Settings(quick=True))
    ref = get_stack("hf-torch-llama")
    ref.build(job)
    ids = inputs_for(ref, shape, 2, 16)
    expected = ref.load(job).generate(ids, 12)
    for precision in ("fp32", "int4"):
        s = get_stack(f"genai-{precision}")
        s.build(job)
        r = s.load(job)
        assert {f.suffix for f in r.files} == {".onnx", ".data"}
        for batch, length, n in ((1, 16, 1), (1, 16, 12), (2, 16, 12)):
            out = r.generate(inputs_for(s, shape, batch, length), n)
            assert len(out) == batch and all(len(o) == n for o in out), (precision, batch, n)
        if precision == "fp32":
            assert measure.agreement(r.generate(ids, 12), expected) == 1.0
    assert json.loads((tmp_path / "lm-genai-int4" / "genai_config.json").read_text())


@pytest.mark.skipif(not _have("transformers", "onnx"), reason="no transformers")
@pytest.mark.parametrize("name", ["ed", "lm"])
def test_quick_ours_run_the_converted_hf_model(tmp_path, name):
    """Same weights: our checkpoint is the HF model (Marian / GPT-2) converted, our stacks take
    its ids and are compared with hf-torch, and our PyTorch model's greedy output is HF's."""
    from edgeformer.benchmarks import artifacts, measure
    from edgeformer.benchmarks.stacks import for_job, get_stack, inputs_for

    shape = get_shape(name, quick=True)
    job = Job("", shape, tmp_path, Settings(quick=True))
    ours, hf = (for_job(get_stack(n), job) for n in ("edgeformer-torch", "hf-torch"))
    assert (ours.vocab, ours.ref) == ("hf", "hf-torch")
    assert for_job(get_stack("edgeformer-int4"), job).ref == "hf-torch"
    ours.build(job)
    source = json.loads((artifacts.checkpoint_for(job) / "config.json").read_text())["source"]
    arch = "MarianMTModel" if shape.is_ed else "GPT2LMHeadModel"
    assert source == {"format": "huggingface", "architecture": arch}
    ids = inputs_for(ours, shape, 2, 16)
    assert ids == inputs_for(hf, shape, 2, 16)
    got, expected = ours.load(job).generate(ids, 12), hf.load(job).generate(ids, 12)
    assert measure.agreement(got, expected) == 1.0
    # a --package: ours run the user's model, in our vocabulary, against edgeformer-torch
    given = dataclasses.replace(job, package=tmp_path / "package")
    mine = for_job(get_stack("edgeformer-fp32"), given)
    assert (mine.vocab, mine.ref) == ("ours", "edgeformer-torch")
    assert for_job(get_stack("edgeformer-llama-int4"), given).ref == "hf-torch-llama"


@pytest.mark.skipif(not _have("transformers", "onnx"), reason="no transformers")
def test_quick_llama_stacks_of_ours_run_genais_weights(tmp_path):
    """The edgeformer-llama-* stacks: the Llama that onnxruntime-genai converts, converted and
    exported by us (fp32, int8, int4 in one package); the forced length, and fp32 equal to HF
    PyTorch's greedy run of the same weights (no onnxruntime-genai needed)."""
    from edgeformer.benchmarks import artifacts, measure
    from edgeformer.benchmarks.stacks import get_stack, inputs_for

    shape = get_shape("lm", quick=True)
    job = Job("", shape, tmp_path, Settings(quick=True), variants=artifacts.LLAMA_VARIANTS)
    ref = get_stack("hf-torch-llama")
    ref.build(job)
    ids = inputs_for(ref, shape, 2, 16)
    expected = ref.load(job).generate(ids, 12)
    for v in artifacts.LLAMA_VARIANTS:
        s = get_stack(f"edgeformer-llama-{v}")
        s.build(job)
        r = s.load(job)
        assert ids == inputs_for(s, shape, 2, 16)
        out = r.generate(ids, 12)
        assert len(out) == 2 and all(len(o) == 12 for o in out), v
        if v == "fp32":
            assert measure.agreement(out, expected) == 1.0
    ckpt = json.loads((tmp_path / "lm-llama-checkpoint" / "config.json").read_text())
    assert ckpt["source"]["architecture"] == "LlamaForCausalLM"


def test_optimum_stacks_run_with_the_configured_interpreter(tmp_path, monkeypatch):
    """Optimum's stacks run (and build) under the interpreter of their own environment when one
    is configured: --optimum-python, $EDGEFORMER_OPTIMUM_PYTHON or a venv folder; a missing
    one skips them with the reason, and the other stacks keep the bench's interpreter."""
    import sys

    from edgeformer.benchmarks import child, optimum_env
    from edgeformer.benchmarks.stacks import elsewhere, get_stack, python_for, skip_reason

    fake = str(tmp_path / "no-env" / "bin" / "python")
    settings = Settings(quick=True, optimum_python=fake)
    job = Job("", get_shape("lm", quick=True), tmp_path, settings)
    for name in ("optimum-fp32", "optimum-int8"):
        s = get_stack(name)
        assert python_for(s, settings) == fake and elsewhere(s, settings)
        for mode in ("serve", "memory", "build"):  # the child's command line
            assert child._command(mode, job.with_stack(name))[:3] == [fake, "-m", child.MODULE]
        reason = skip_reason(s, job.shape, job)
        assert reason and "Optimum's environment unusable" in reason and fake in reason
    for name in ("ct2-fp32", "hf-torch", "edgeformer-fp32"):
        assert python_for(get_stack(name), settings) == sys.executable
    # where the interpreter comes from: the option, else the variable, else runs/optimum-env
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(optimum_env.ENV_VAR, raising=False)
    assert optimum_env.resolve(None) is None  # no runs/optimum-env here: the bench's own
    monkeypatch.setenv(optimum_env.ENV_VAR, "env/bin/python")
    assert optimum_env.resolve(None) == str(tmp_path / "env" / "bin" / "python")
    (tmp_path / "venv").mkdir()  # a folder: its interpreter
    assert optimum_env.resolve("venv") == str(tmp_path / "venv" / "bin" / "python")
    # a whole run: skipped with the reason, the environment's error in the meta
    out = tmp_path / "results"
    argv = ["bench", "--quick", "--shapes", "lm", "--stacks", "optimum", "--workloads", "W1"]
    argv += ["--optimum-python", fake, "--out", str(out), "--work", str(tmp_path / "w")]
    assert main(argv) == 0
    res = json.loads((out / "latest.json").read_text())
    assert res["settings"]["optimum_python"] == fake
    assert res["meta"]["optimum_env"]["interpreter"] == fake
    assert "no such interpreter" in res["meta"]["optimum_env"]["error"]
    for name in ("optimum-fp32", "optimum-int8"):
        assert res["stacks"]["lm"][name]["status"] == "skipped"
    assert "skipped optimum-fp32: Optimum's environment unusable" in (out / "latest.md").read_text()


OPTIMUM_ENV = Path(__file__).resolve().parents[2] / optimum_env.DEFAULT_ENV
OPTIMUM_PYTHON = str(optimum_env.venv_python(OPTIMUM_ENV))
needs_optimum_env = pytest.mark.skipif(
    not Path(OPTIMUM_PYTHON).exists(), reason=f"no Optimum environment at {OPTIMUM_ENV}"
)


@needs_optimum_env
def test_optimum_env_has_optimum_and_the_benchs_onnxruntime():
    """The environment `python -m edgeformer.benchmarks.optimum_env` made: Optimum, transformers
    4 and this checkout importable, the same onnxruntime and torch as the bench's."""
    from importlib import metadata

    assert optimum_env.problem(OPTIMUM_PYTHON) is None
    v = optimum_env.probe(OPTIMUM_PYTHON)["versions"]
    assert v["optimum-onnx"] and v["transformers"].startswith("4.")
    for name in ("onnxruntime", "torch"):
        if _have(name):
            assert v[name] == metadata.version(name), name


@pytest.mark.slow
@needs_optimum_env
@pytest.mark.skipif(not _have("transformers", "torch"), reason="no transformers")
def test_optimum_in_its_env_runs_the_benchs_hf_model(tmp_path):
    """optimum-fp32 on the quick LM: the GPT-2 folder the bench made (transformers 5) exported
    and run in Optimum's environment (transformers 4) through the stack's process, with the
    same greedy output as hf-torch here."""
    from edgeformer.benchmarks import child, measure
    from edgeformer.benchmarks.stacks import get_stack, inputs_for

    shape = get_shape("lm", quick=True)
    job = Job("", shape, tmp_path, Settings(quick=True, optimum_python=OPTIMUM_PYTHON))
    ref, s = get_stack("hf-torch"), get_stack("optimum-fp32")
    assert s.shared is not None
    s.shared(job)  # the HF model: here
    child.child_build(job.with_stack(s.name))  # Optimum's export: there
    assert (tmp_path / "lm-optimum-fp32" / ".bench-stamp.json").is_file()
    ids = inputs_for(ref, shape, 2, 16)
    worker = child.Worker(job.with_stack(s.name))
    try:
        out = worker.runner().generate(ids, 12)
    finally:
        worker.close()
    assert measure.agreement(out, ref.load(job.with_stack(ref.name)).generate(ids, 12)) == 1.0


def test_settings_defaults_and_job_round_trip(tmp_path):
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    s = Settings.from_args(p.parse_args([]))
    assert s.out == DEFAULT_OUT and not s.out.startswith("benchmarks")  # never the committed one
    assert (s.rounds, s.warmup, s.memory, s.spinning) == (7, 2, "subprocess", None)
    q = Settings.from_args(p.parse_args(["--quick", "--spinning", "off", "--workloads", "none"]))
    assert (q.rounds, q.warmup, q.memory, q.spinning, q.workloads) == (2, 1, "delta", False, ())
    assert Settings.from_dict(q.to_dict()) == q
    with pytest.raises(ValueError, match="unknown workload"):
        Settings(workloads=("W9",))
    for rounds in ("0", "-3"):  # an error, not the default (0 was falsy and became 7)
        with pytest.raises(ValueError, match="--rounds must be >= 1"):
            Settings.from_args(p.parse_args(["--rounds", rounds]))
    job = Job("ct2-fp32", get_shape("lm", quick=True), tmp_path, q, workloads=((1, 16, 32),))
    back = Job.from_json(job.to_json())
    assert back.settings == q and back.to_json() == job.to_json()
    assert back.shape.cfg.d_model == 64 and back.shape.is_ed is False


def _imports(path: Path) -> set[str]:
    """The benchmarks modules `path` imports anywhere (top level or inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                names |= {node.module} if node.module else {a.name for a in node.names}
            elif (node.module or "").startswith("edgeformer.benchmarks."):
                names.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            names |= {a.name.split(".")[2] for a in node.names
                      if a.name.startswith("edgeformer.benchmarks.")}  # fmt: skip
    return {n.split(".")[0] for n in names}


def test_benchmarks_modules_have_no_import_cycle():
    graph = {p.stem: _imports(p) for p in BENCHMARKS.glob("*.py") if p.stem != "__init__"}
    assert not {"worker", "memory"} & set(graph)  # one child-process module: child.py
    assert "cli" not in set().union(*graph.values())  # nothing imports the command

    def visit(node, path):
        assert node not in path, " -> ".join([*path, node])
        for dep in graph.get(node, ()):
            visit(dep, [*path, node])

    for module in graph:
        visit(module, [])


def _row(shape, w, stack, ms):
    stat = {"median": ms, "min": ms, "max": ms, "n": 1}
    return {
        "shape": shape, "workload": w, "stack": stack, "batch": 1, "src_len": 16,
        "new_tokens": 32, "ms_per_token": stat, "total_ms": stat, "ttft_ms": stat,
        "decode_ms_per_token": stat, "encoder_ms": None, "tokens_per_s": 1e3 / ms,
        "agreement": 1.0,
    }  # fmt: skip


def test_targets_and_markdown_on_synthetic_results():
    ok = lambda g, p: {"group": g, "precision": p, "device": "cpu", "status": "ok"}  # noqa: E731
    res = {
        "meta": report.environment(2),
        "settings": {"quick": False, "rounds": 1, "warmup": 1, "memory": "off"},
        "shapes": {
            "lm": {
                "family": "decoder-only",
                "d_model": 64,
                "n_decoder_layers": 2,
                "n_heads": 4,
                "d_ff": 256,
                "activation": "gelu",
                "vocab_size": 1000,
                "norm": "pre",
                "positional": "learned",
            }
        },  # fmt: skip
        "stacks": {
            "lm": {
                "edgeformer-fp32": ok("ours", "fp32"),
                "edgeformer-int4": ok("ours", "int4"),
                "edgeformer-int8": ok("ours", "int8"),
                "edgeformer-torch": ok("ours", "fp32"),
                "edgeformer-llama-fp32": ok("ours", "fp32"),
                "edgeformer-llama-int8": ok("ours", "int8"),
                "edgeformer-llama-int4": ok("ours", "int4"),
                "ct2-fp32": ok("peers", "fp32"),
                "hf-torch": ok("peers", "fp32"),
                "ct2-int8": ok("peers", "int8"),
                "genai-int4": ok("peers", "int4"),
                "genai-fp32": ok("peers", "fp32"),
            }
        },  # fmt: skip
        "workloads": [
            _row("lm", "W1", "edgeformer-fp32", 2.0),
            _row("lm", "W1", "edgeformer-int4", 0.7),  # GPT-2 weights: not genai's
            _row("lm", "W1", "edgeformer-int8", 0.9),
            _row("lm", "W1", "edgeformer-llama-int4", 0.8),
            _row("lm", "W1", "edgeformer-llama-int8", 0.9),
            _row("lm", "W1", "edgeformer-llama-fp32", 2.5),
            _row("lm", "W1", "edgeformer-torch", 12.0),
            _row("lm", "W1", "ct2-fp32", 3.0),
            _row("lm", "W1", "ct2-int8", 1.0),  # not the target peer
            _row("lm", "W1", "genai-fp32", 1.0),  # not the target peer either
            _row("lm", "W1", "hf-torch", 11.0),
            _row("lm", "W1", "genai-int4", 1.25),
            _row("lm", "W3", "edgeformer-int8", 1.0),  # GPT-2 weights: not genai's
            _row("lm", "W3", "edgeformer-llama-int8", 1.5),
            _row("lm", "W3", "genai-int4", 1.25),
        ],
        "sweep": [],
    }
    t = targets.targets(res)
    (fp32,) = t["fp32_vs_ct2"]
    assert fp32["peer"] == "ct2-fp32" and fp32["ratio"] == pytest.approx(2 / 3) and fp32["met"]
    eager = {r["eager"]: r["speedup"] for r in t["speedup_vs_eager"]}
    assert eager == {"edgeformer-torch": 6.0, "hf-torch": 5.5}
    w1, w3 = t["quantized_vs_genai"]
    assert (w1["workload"], w1["stack"], w1["met"]) == ("W1", "edgeformer-llama-int4", True)
    assert (w3["workload"], w3["stack"], w3["met"]) == ("W3", "edgeformer-llama-int8", False)
    assert (w1["ratio"], w3["ratio"]) == (pytest.approx(0.64), pytest.approx(1.2))
    # same Llama weights, precision by precision (W3: no edgeformer-llama-int4 row)
    pairs = {(r["workload"], r["ours"], r["peer"]): r["ratio"] for r in t["llama_vs_genai"]}
    assert pairs == {
        ("W1", "edgeformer-llama-fp32", "genai-fp32"): pytest.approx(2.5),
        ("W1", "edgeformer-llama-int4", "genai-int4"): pytest.approx(0.64),
    }
    res["targets"] = t
    md = report.markdown(res)
    assert "**0.67**" in md and "**6.00×**" in md and "**0.64**" in md and "**1.20**" in md
    assert "same Llama weights" in md and "| LM W1 | edgeformer-llama-fp32 | 2.500 |" in md
    assert "0.88" not in md  # no constant from the notes any more
    quality_only = {**res, "shapes": {}, "stacks": {}, "workloads": []}  # --workloads none
    assert targets.targets(quality_only) == {
        "fp32_vs_ct2": [],
        "speedup_vs_eager": [],
        "quantized_vs_genai": [],
        "file_vs_ct2": [],
        "llama_vs_genai": [],
        "real": [],
    }


def _file_row(stack: str, sentences_per_s: float, runs: list[float]) -> dict:
    settings = [(32, "examples"), (1024, "tokens")]
    return {
        "shape": "ed",
        "stack": stack,
        "sentences": 100,
        "new_tokens": 16,
        "best": {"max_batch_size": 32, "batch_type": "examples",
                 "sentences_per_s": sentences_per_s, "tokens_per_s": 16 * sentences_per_s},
        "runs": [{"max_batch_size": n, "batch_type": k, "ms": ms}
                 for (n, k), ms in zip(settings, runs)],
    }  # fmt: skip


def test_file_targets_compare_each_stacks_best():
    rows = [
        _file_row("edgeformer-fp32", 90.0, [1111.1, 2000.0]),
        _file_row("edgeformer-int4", 150.0, [666.7, 900.0]),
        _file_row("ct2-fp32", 100.0, [1000.0, 1200.0]),
        _file_row("ct2-int8", 120.0, [833.3, 1000.0]),
    ]
    fp32, best = targets.file_targets(rows)
    assert (fp32["ours"], fp32["peer"], fp32["met"]) == ("edgeformer-fp32", "ct2-fp32", False)
    assert fp32["ratio"] == pytest.approx(0.9)
    assert (best["ours"], best["peer"], best["met"]) == ("edgeformer-int4", "ct2-int8", True)
    assert best["ratio"] == pytest.approx(1.25)
    md = "\n".join(report._file_md(rows))
    assert "| edgeformer-int4 | **32 examples** | 150.0 |" in md and "| 90.0 | 50.0 |" in md
    assert targets.file_targets(rows[:2]) == []  # no CTranslate2 row: nothing to compare


@pytest.mark.slow
def test_quick_bench_file_translation(tmp_path):
    """ED file workload through our translate_file (and CTranslate2's when installed)."""
    stacks = ["edgeformer-fp32"] + (["ct2-fp32"] if _have("transformers", "ctranslate2") else [])
    out = tmp_path / "results"
    argv = ["bench", "--quick", "--shapes", "ed", "--stacks", ",".join(stacks)]
    argv += ["--workloads", "file", "--memory", "off", "--out", str(out)]
    assert main(argv) == 0
    res = json.loads((out / "latest.json").read_text())
    rows = {r["stack"]: r for r in res["file"]}
    assert set(rows) == set(stacks)
    for r in rows.values():
        assert r["sentences"] == 200 and r["new_tokens"] == 16
        assert r["best"]["sentences_per_s"] > 0 and r["runs"]
        assert {x["inter_threads"] for x in r["runs"]} == {1, 2}  # batches one or 2 at a time
    # edgeformer-fp32 against ct2-fp32 (the best-against-best line is the same one here)
    assert len(res["targets"]["file_vs_ct2"]) == (1 if len(stacks) == 2 else 0)
    assert "### File translation: 200 sentences" in (out / "latest.md").read_text()


def test_linear_weight_bytes_counts_what_a_step_streams(tmp_path):
    """The floor's byte count: the float weights MatMul / Gemm read, not a Gather's table."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from edgeformer.benchmarks.profile import linear_weight_bytes

    def w(name, *shape):
        return numpy_helper.from_array(np.zeros(shape, np.float32), name)

    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"]),
        helper.make_node("MatMul", ["e", "w1"], ["h"]),
        helper.make_node("Gemm", ["h", "w2"], ["y"]),
        helper.make_node("MatMul", ["y", "y"], ["z"]),  # no weight: not counted
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [w("table", 10, 4), w("w1", 4, 3), w("w2", 3, 5)],
    )  # fmt: skip
    path = tmp_path / "g.onnx"
    onnx.save(helper.make_model(graph), path)
    assert linear_weight_bytes(path) == 4 * (4 * 3 + 3 * 5)


def test_work_folder_replaces_only_what_bench_built(tmp_path):
    from edgeformer.benchmarks.artifacts import _cached

    def build(path: Path) -> None:
        path.mkdir()
        (path / "model.onnx").write_text("built")

    mine = tmp_path / "ed-package"  # a user's folder that has a build's name, in --work
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not built by edgeformer bench"):
        _cached(mine, {"v": 1}, build)
    assert (mine / "notes.txt").read_text() == "mine"
    built = _cached(tmp_path / "ed-checkpoint", {"v": 1}, build)
    (built / "model.onnx").write_text("old")
    assert (_cached(built, {"v": 1}, build) / "model.onnx").read_text() == "old"  # reused
    assert (_cached(built, {"v": 2}, build) / "model.onnx").read_text() == "built"  # rebuilt
    # a key holding a tuple (a recipe's more_bits) is the same key when its stamp reads back
    assert (_cached(built, {"v": (1, 2)}, build) / "model.onnx").read_text() == "built"
    (built / "model.onnx").write_text("old")
    assert (_cached(built, {"v": (1, 2)}, build) / "model.onnx").read_text() == "old"

    def killed(path: Path) -> None:
        path.mkdir()
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _cached(tmp_path / "lm-hf", {"v": 1}, killed)
    assert (_cached(tmp_path / "lm-hf", {"v": 1}, build) / "model.onnx").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ed-checkpoint", "ed-package", "lm-hf"
    ]  # fmt: skip
