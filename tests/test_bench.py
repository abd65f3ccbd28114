"""`edgeformer bench`: the quick run end to end (ours, and peers when installed), the JSON it
writes, fp32 agreement, and the report's targets on synthetic results."""

from __future__ import annotations

import importlib.util
import json

import pytest

from edgeformer.benchmarks import report
from edgeformer.benchmarks.stacks import missing_modules, select_stacks
from edgeformer.runtime.cli import main


def _have(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


@pytest.mark.slow
def test_quick_bench_end_to_end(tmp_path):
    """LM only (the faster export): our runtime fp32 must reproduce our PyTorch model exactly."""
    pytest.importorskip("onnxscript")  # the exporter
    stacks = ["edgeformer-torch", "edgeformer-fp32"]
    peers = _have("transformers", "ctranslate2") and _have("optimum")
    if peers:
        stacks += ["hf-torch", "optimum-fp32", "ct2-fp32"]
    out = tmp_path / "results"
    argv = ["bench", "--quick", "--shapes", "lm", "--stacks", ",".join(stacks)]
    argv += ["--workloads", "W1,W2,sweep", "--sweep-batches", "1,4", "--rounds", "1"]
    argv += ["--memory", "delta", "--profile", "--out", str(out), "--work", str(tmp_path / "w")]
    assert main(argv) == 0

    res = json.loads((out / "latest.json").read_text())
    assert {"meta", "settings", "shapes", "stacks", "workloads", "sweep", "targets"} <= set(res)
    meta = res["meta"]
    assert meta["threads"] == 2 and meta["cpu"] and meta["versions"]["onnxruntime"]
    assert res["shapes"]["lm"]["d_model"] == 64
    info = res["stacks"]["lm"]
    for name in stacks:
        assert info[name]["status"] == "ok", info[name]
        assert info[name]["size_mb"] > 0
    rows = {(r["workload"], r["stack"]): r for r in res["workloads"]}
    for w, batch in (("W1", 1), ("W2", 8)):
        for name in stacks:
            r = rows[(w, name)]
            assert r["batch"] == batch and r["new_tokens"] == 32 and r["forced_length_ok"]
            for key in ("total_ms", "ms_per_token", "ttft_ms", "decode_ms_per_token"):
                assert r[key]["min"] <= r[key]["median"] <= r[key]["max"]
            assert r["agreement"] == 1.0, (w, name)  # fp32: ours vs ours, peers vs HF PyTorch
    assert {(r["stack"], r["batch"]) for r in res["sweep"]} == {
        (s, b) for s in stacks for b in (1, 4)
    }
    t = res["targets"]
    assert {r["workload"] for r in t["speedup_vs_eager"]} == {"W1", "W2"}
    if peers:
        assert {r["workload"] for r in t["fp32_vs_fastest_peer"]} == {"W1", "W2"}
    assert "edgeformer-fp32" in res["profile"]["lm"]["decode_step"]
    assert (out / "latest.md").read_text().startswith("# edgeformer bench")
    assert (out / "latest.png").stat().st_size > 0


def test_stack_selection_and_missing_peers(monkeypatch):
    names = [s.name for s in select_stacks("ours")]
    assert "edgeformer-fp32" in names and "edgeformer-torch" in names
    assert "edgeformer-fp16" not in names  # CPU fp16 only when asked by name
    assert [s.name for s in select_stacks("ct2")] == ["ct2-fp32", "ct2-int8"]
    with pytest.raises(ValueError, match="unknown stack"):
        select_stacks("tensorrt")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert missing_modules(select_stacks("hf-torch")[0]) == ["torch", "transformers"]


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
                "edgeformer-torch": ok("ours", "fp32"),
                "ct2-fp32": ok("peers", "fp32"),
                "hf-torch": ok("peers", "fp32"),
                "ct2-int8": ok("peers", "int8"),
            }
        },  # fmt: skip
        "workloads": [
            _row("lm", "W1", "edgeformer-fp32", 2.0),
            _row("lm", "W1", "edgeformer-int4", 0.8),
            _row("lm", "W1", "edgeformer-torch", 12.0),
            _row("lm", "W1", "ct2-fp32", 3.0),
            _row("lm", "W1", "ct2-int8", 1.0),  # not fp32: not a target peer
            _row("lm", "W1", "hf-torch", 11.0),
        ],
        "sweep": [],
    }
    t = report.targets(res)
    (fp32,) = t["fp32_vs_fastest_peer"]
    assert fp32["peer"] == "ct2-fp32" and fp32["ratio"] == pytest.approx(2 / 3)
    assert fp32["met"] is True
    eager = {r["eager"]: r["speedup"] for r in t["speedup_vs_eager"]}
    assert eager == {"edgeformer-torch": 6.0, "hf-torch": 5.5}
    q = t["quantized_vs_genai"]
    assert q["stack"] == "edgeformer-int4" and q["met"] and "not measured" in q["reference"]
    res["targets"] = t
    md = report.markdown(res)
    assert "**0.67**" in md and "**6.0×**" in md and "0.88" in md
    res["settings"]["quick"] = True  # tiny shapes: no comparison with a full-shape constant
    assert report.targets(res)["quantized_vs_genai"] is None
    quality_only = {**res, "shapes": {}, "stacks": {}, "workloads": []}  # --workloads none
    assert report.targets(quality_only) == {
        "fp32_vs_fastest_peer": [],
        "speedup_vs_eager": [],
        "quantized_vs_genai": None,
    }
