"""`edgeformer bench` at real shapes (issue 49): named shapes and a user's config.json resolve
to the dimensions of the models they name; a config.json runs end to end with every stack on
the same random weights; the physical floor (bandwidth, bytes per step from each file kind);
the real-shape goals; the llama.cpp stacks' environment and their skip reasons. The
multilingual shape (issue 48): an NLLB config gets NLLB's tokenizer and every installed stack
translates `eng_Latn` sources with `deu_Latn` forced first, as HF PyTorch does."""

from __future__ import annotations

import argparse
import importlib.util
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from edgeformer.benchmarks import floor, llama_env, report, targets
from edgeformer.benchmarks.cli import add_arguments
from edgeformer.benchmarks.settings import Job, Settings
from edgeformer.benchmarks.shapes import (
    REAL_SHAPES,
    SHAPE_GROUPS,
    forced_target,
    languages,
    resolve_shape,
)
from edgeformer.benchmarks.stacks import (
    for_job,
    get_stack,
    inputs_for,
    package_variants,
    select_stacks,
    skip_reason,
)

HAVE_HF = all(importlib.util.find_spec(m) for m in ("transformers", "torch", "onnx"))
TINY_QWEN = dict(
    architectures=["Qwen2ForCausalLM"], model_type="qwen2", vocab_size=512, hidden_size=64,
    intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=1024, tie_word_embeddings=True, bos_token_id=500, eos_token_id=500,
    torch_dtype="bfloat16",
)  # fmt: skip
# NLLB-200's layout at a small width: M2M100, NLLB's tokenizer (words, 202 language codes,
# <mask>, 2 spare ids), larger random weights than transformers' init (outputs that vary:
# at 0.02 a random translator repeats one token)
TINY_NLLB = dict(
    architectures=["M2M100ForConditionalGeneration"], model_type="m2m_100", vocab_size=1000,
    d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=48,
    max_position_embeddings=64, scale_embedding=True, pad_token_id=1, bos_token_id=0,
    eos_token_id=2, decoder_start_token_id=2, tie_word_embeddings=True,
    tokenizer_class="NllbTokenizer", init_std=0.3,
)  # fmt: skip
# every stack of the multilingual row (Optimum's run in an environment of their own)
NLLB_STACKS = (
    "hf-torch", "edgeformer-torch", "edgeformer-fp32", "edgeformer-int8", "edgeformer-int4",
    "ct2-fp32", "ct2-int8", "optimum-fp32", "optimum-int8",
)  # fmt: skip


def _settings(*argv: str) -> Settings:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return Settings.from_args(p.parse_args(list(argv)))


@pytest.mark.skipif(not HAVE_HF, reason="no transformers")
def test_named_shapes_have_the_dimensions_of_the_models_they_name():
    marian, smol, qwen, nllb = (resolve_shape(n) for n in REAL_SHAPES)
    m = marian.cfg
    assert (m.family, m.d_model, m.n_encoder_layers, m.n_decoder_layers) == (
        "encoder-decoder", 512, 6, 6,
    )  # fmt: skip
    assert (m.vocab_size, m.n_heads, m.activation) == (58101, 8, "silu")
    s = smol.cfg
    assert (s.d_model, s.n_decoder_layers, s.n_heads, s.n_kv_heads, s.vocab_size) == (
        576, 30, 9, 3, 49152,
    )  # fmt: skip
    assert s.tie_embeddings and s.d_ff == 1536
    q = qwen.cfg
    assert (q.d_model, q.n_decoder_layers, q.n_heads, q.n_kv_heads, q.d_ff, q.vocab_size) == (
        896, 24, 14, 2, 4864, 151936,
    )  # fmt: skip
    assert q.tie_embeddings and q.head_dim == 64 and q.qkv_bias
    assert qwen.real and "random weights" in qwen.describe() and "Qwen2.5-0.5B" in qwen.describe()
    n = nllb.cfg
    assert (n.family, n.d_model, n.n_encoder_layers, n.n_decoder_layers, n.n_heads) == (
        "encoder-decoder", 1024, 12, 12, 16,
    )  # fmt: skip
    assert (n.vocab_size, n.d_ff, n.activation, n.norm, n.scale_embeddings) == (
        256206, 4096, "relu", "pre", True,
    )  # fmt: skip
    assert n.tie_embeddings and n.max_len == 1024 and n.bos_id == n.eos_id == 2
    # NLLB-200's own ids: words below 256,001, then the codes (eng_Latn 256047, deu_Latn 256042)
    assert languages(nllb) == {"words": 256001, "source": ["eng_Latn", 256047],
                               "target": ["deu_Latn", 256042]}  # fmt: skip
    assert forced_target(nllb) == 256042 and forced_target(marian) is None


@pytest.mark.skipif(not HAVE_HF, reason="no transformers")
def test_a_config_json_is_a_shape_and_bad_ones_are_named(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_QWEN))
    shape = resolve_shape(str(folder / "config.json"))
    assert shape.name.startswith("my-model-") and shape.cfg.d_model == 64
    assert shape.hf is not None and shape.hf["_bench_source"] == str(folder / "config.json")
    with pytest.raises(ValueError, match="no such file"):
        resolve_shape(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text(json.dumps({**TINY_QWEN, "architectures": []}))
    with pytest.raises(ValueError, match="architectures"):
        resolve_shape(str(tmp_path / "bad.json"))
    (tmp_path / "gpt.json").write_text(json.dumps({**TINY_QWEN, "architectures": ["NoSuchLM"]}))
    with pytest.raises(ValueError, match="NoSuchLM"):
        resolve_shape(str(tmp_path / "gpt.json"))
    with pytest.raises(ValueError, match="unknown shape 'qwen9'"):
        Settings(shapes=("qwen9",))


def test_real_settings_defaults_and_job_round_trip(tmp_path):
    s = _settings("--shape", "real")
    assert s.shapes == ("opus-mt-en-de", "smollm2-135m", "qwen2.5-0.5b") == SHAPE_GROUPS["real"]
    many = _settings("--shapes", "multilingual")
    assert many.shapes == ("nllb-600m",) and many.workloads == ("W1", "W2", "W4")
    assert set(REAL_SHAPES) == {n for group in SHAPE_GROUPS.values() for n in group}
    assert (s.workloads, s.rounds, s.warmup, s.memory) == (("W1", "W2", "W4"), 3, 1, "delta")
    mixed = _settings("--shapes", "lm,smollm2-135m")
    assert mixed.workloads == ("W1", "W2", "W3", "sweep", "file") and mixed.rounds == 7
    assert _settings("--shapes", "real", "--rounds", "5", "--workloads", "W1").rounds == 5


@pytest.mark.skipif(not HAVE_HF, reason="no transformers")
def test_real_shape_job_round_trip_and_stack_mapping(tmp_path):
    shape = resolve_shape("smollm2-135m")
    job = Job("genai-int4", shape, tmp_path, Settings(shapes=("smollm2-135m",)))
    back = Job.from_json(job.to_json())
    assert back.shape.hf == shape.hf and back.shape.real and back.to_json() == job.to_json()
    # one model per real shape: genai and llama.cpp run it, against hf-torch, with its ids
    genai = for_job(get_stack("genai-int4"), job)
    assert (genai.vocab, genai.ref) == ("hf", "hf-torch")
    for name in ("edgeformer-llama-int4", "hf-torch-llama"):
        assert "shape's own architecture" in (skip_reason(get_stack(name), shape, job) or "")


def test_llamacpp_stacks_skip_with_the_reason_when_no_environment(tmp_path, monkeypatch):
    from edgeformer.benchmarks.shapes import get_shape

    monkeypatch.delenv(llama_env.ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)  # no runs/llama-env here
    s = _settings("--stacks", "llamacpp")
    assert s.llama_python is None
    names = [x.name for x in select_stacks("llamacpp")]
    assert names == ["llamacpp-q8_0", "llamacpp-q4_0", "llamacpp-q4_k_m", "llamacpp-gguf"]
    job = Job("", get_shape("lm", quick=True), tmp_path, s)
    reason = skip_reason(get_stack("llamacpp-q4_0"), job.shape, job)
    assert reason and "--make-llama-env" in reason
    ed = skip_reason(get_stack("llamacpp-q4_0"), get_shape("ed", quick=True), job)
    assert ed and "decoder-only" in ed
    assert "no such interpreter" in (llama_env.problem(str(tmp_path / "py")) or "")


def test_bandwidth_is_measured_per_kernel():
    bw = floor.bandwidth(threads=2, array_mb=8, repeats=2)
    kernels = ("copy", "scale", "add", "sum")
    assert all(bw[f"{k}_gbps"] > 0 for k in kernels)
    assert bw["best_gbps"] == max(bw[f"{k}_gbps"] for k in kernels)


def _gguf(path: Path, tensors: list[tuple[str, tuple[int, ...], int]]) -> None:
    """A GGUF v3 header with one string key and the given (name, shape, ggml type) tensors."""

    def s(x: str) -> bytes:
        return struct.pack("<Q", len(x)) + x.encode()

    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1)
    out += s("general.name") + struct.pack("<I", 8) + s("x")
    for name, shape, kind in tensors:
        out += s(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
        out += struct.pack("<IQ", kind, 0)
    path.write_bytes(out)


def test_step_bytes_of_gguf_onnx_and_safetensors(tmp_path):
    tied = tmp_path / "tied.gguf"  # token_embd is the head: counted; Q4_0 18 bytes / 32
    _gguf(tied, [("token_embd.weight", (64, 100), 2), ("blk.0.ffn_up.weight", (64, 32), 8)])
    assert floor.gguf_step_bytes(tied) == 64 * 100 // 32 * 18 + 64 * 32 // 32 * 34
    untied = tmp_path / "untied.gguf"  # a separate output: the table is only gathered
    _gguf(untied, [("token_embd.weight", (64, 100), 0), ("output.weight", (64, 100), 14)])
    assert floor.gguf_step_bytes(untied) == 64 * 100 // 256 * 210

    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.zeros((100, 8), np.float32), "table")
    only_gathered = numpy_helper.from_array(np.zeros((50, 8), np.float32), "pos")
    w = numpy_helper.from_array(np.zeros((8, 8), np.float32), "w")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["x"]),
        helper.make_node("Gather", ["pos", "ids"], ["p"]),
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("MatMul", ["h", "table_t"], ["logits"]),
        helper.make_node("Transpose", ["table"], ["table_t"]),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        [table, only_gathered, w],
    )  # fmt: skip
    import onnx

    onnx.save(helper.make_model(g), str(tmp_path / "decoder.onnx"))
    # the tied table (gathered and the head) and w; not the position table
    assert floor.onnx_step_bytes(tmp_path / "decoder.onnx") == (100 * 8 + 8 * 8) * 4

    header = {
        "model.embed_tokens.weight": {"dtype": "F32", "shape": [100, 8], "data_offsets": [0, 0]},
        "model.layers.0.mlp.up_proj.weight": {"dtype": "BF16", "shape": [8, 8],
                                              "data_offsets": [0, 0]},
    }  # fmt: skip
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    got = floor.step_bytes([tmp_path / "model.safetensors"])
    assert got == (100 * 8 * 4 + 8 * 8 * 2, "*.safetensors")  # tied: the table is the head


def _real_row(stack: str, w: str, ms: float, ttft: float, floor_ms: float | None = None):
    stat = lambda x: {"median": x, "min": x, "max": x, "n": 1}  # noqa: E731
    row = {
        "shape": "smollm2-135m", "workload": w, "stack": stack, "batch": 1,
        "src_len": 512 if w == "W4" else 16, "new_tokens": 16, "ms_per_token": stat(ms),
        "total_ms": stat(ms * 16), "ttft_ms": stat(ttft), "decode_ms_per_token": stat(ms),
        "encoder_ms": None, "tokens_per_s": 1e3 / ms, "agreement": 1.0,
    }  # fmt: skip
    if floor_ms:
        row |= {"floor_ms": floor_ms, "floor_ratio": ms / floor_ms}
    return row


def test_real_goals_and_the_floor_columns_in_the_report():
    ok = {"group": "ours", "precision": "int4", "device": "cpu", "status": "ok", "step_mb": 90.0}
    rows = [
        _real_row("edgeformer-fp32", "W1", 40.0, 50.0, floor_ms=30.0),
        _real_row("edgeformer-int4", "W1", 12.0, 30.0, floor_ms=9.0),
        _real_row("llamacpp-q4_0", "W1", 10.0, 20.0, floor_ms=8.0),
        _real_row("genai-int4", "W1", 13.0, 25.0),
        _real_row("edgeformer-int4", "W4", 14.0, 900.0),
        _real_row("llamacpp-q4_k_m", "W4", 11.0, 700.0),
        _real_row("hf-torch", "W4", 90.0, 600.0),
    ]
    shape = {"real": "smollm2-135m: random weights at the shape of SmolLM2-135M", "family":
             "decoder-only"}  # fmt: skip
    res = {
        "meta": {"date": "d", "cpu": "c", "cpu_count": 2, "threads": 2, "versions": {}},
        "settings": {"rounds": 3, "warmup": 1, "quick": False, "spinning": None,
                     "isolation": "process", "memory": "off"},
        "shapes": {"smollm2-135m": shape},
        "stacks": {"smollm2-135m": {r["stack"]: dict(ok) for r in rows}},
        "workloads": rows, "sweep": [], "file": [],
        "bandwidth": {"smollm2-135m": {"best_gbps": 10.0, "measurements": [{"best_gbps": 9.0},
                                                                          {"best_gbps": 10.0}]}},
    }  # fmt: skip
    goals = {(r["workload"], r["goal"]): r for r in targets.real_targets(res)}
    best = goals[("W1", "best_vs_peers")]
    assert (best["ours"], best["peer"], best["ratio"]) == ("edgeformer-int4", "llamacpp-q4_0", 1.2)
    assert not best["met"]
    assert goals[("W1", "fp32_vs_floor")]["ratio"] == pytest.approx(40 / 30)
    ttft = goals[("W4", "ttft_512")]
    assert (ttft["peer"], ttft["ratio"], ttft["met"]) == ("hf-torch", 1.5, False)
    res["targets"] = targets.targets(res)
    md = report.markdown(res)
    assert "| step MB | floor ms | ÷ floor |" in md and "10.0 GB/s" in md
    assert "### Real shapes, batch 1" in md and "**1.20**" in md


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_HF, reason="no transformers")
def test_bench_of_a_config_json_runs_the_same_weights_with_a_floor(tmp_path):
    """`edgeformer bench --shape CONFIG.json`: the random model of that config, converted and
    exported by us, run beside HF PyTorch on the same ids (fp32 agrees token for token), the
    512-token workload where the positions allow it, and every row against its floor."""
    from edgeformer.benchmarks.cli import main

    folder = tmp_path / "tiny-qwen"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_QWEN))
    out = tmp_path / "out"
    argv = ["--shape", str(folder / "config.json"), "--stacks", "edgeformer-fp32,hf-torch",
            "--rounds", "1", "--warmup", "0", "--memory", "off", "--work", str(tmp_path / "w"),
            "--out", str(out), "--workloads", "W1,W4"]  # fmt: skip
    assert main(argv) == 0
    res = json.loads((out / "latest.json").read_text())
    (name,) = res["shapes"]
    assert name.startswith("tiny-qwen-") and "random weights" in res["shapes"][name]["real"]
    rows = {(r["workload"], r["stack"]): r for r in res["workloads"]}
    assert set(rows) == {(w, s) for w in ("W1", "W4") for s in ("edgeformer-fp32", "hf-torch")}
    assert rows[("W4", "edgeformer-fp32")]["src_len"] == 512
    for w in ("W1", "W4"):
        assert rows[(w, "edgeformer-fp32")]["agreement"] == 1.0
        assert rows[(w, "edgeformer-fp32")]["forced_length_ok"]
    assert all(r["floor_ms"] > 0 and "floor_ratio" in r for r in rows.values())
    assert res["bandwidth"][name]["best_gbps"] > 0
    hf = json.loads((tmp_path / "w" / f"{name}-hf" / "config.json").read_text())
    assert hf["architectures"] == ["Qwen2ForCausalLM"] and hf["vocab_size"] == 512


@pytest.fixture(scope="module")
def tiny_nllb(tmp_path_factory):
    """(shape, job) of TINY_NLLB given as a config.json, its HF model and tokenizer built."""
    from edgeformer.benchmarks import artifacts

    root = tmp_path_factory.mktemp("tiny-nllb")
    (root / "tiny-nllb").mkdir()
    path = root / "tiny-nllb" / "config.json"
    path.write_text(json.dumps(TINY_NLLB))
    shape = resolve_shape(str(path))
    settings = Settings(shapes=(str(path),))
    variants = package_variants([get_stack(n) for n in NLLB_STACKS])
    job = Job("", shape, root / "work", settings, variants=variants)
    artifacts.hf_model_dir(shape, job.work)
    return shape, job


@pytest.mark.skipif(not HAVE_HF, reason="no transformers")
def test_an_nllb_config_gets_nllbs_tokenizer_and_languages(tiny_nllb):
    from transformers import AutoTokenizer

    shape, job = tiny_nllb
    lang = languages(shape)
    assert lang is not None and lang["words"] == 1000 - 202 - 1 - 2
    tok = AutoTokenizer.from_pretrained(job.work / f"{shape.name}-hf")
    assert type(tok).__name__ == "NllbTokenizer" and len(tok) == 1000 - 2
    for side, code in (("source", "eng_Latn"), ("target", "deu_Latn")):
        assert lang[side] == [code, tok.convert_tokens_to_ids(code)]
    assert tok.convert_ids_to_tokens([0, 1, 2, 3, len(tok) - 1]) == [
        "<s>", "<pad>", "</s>", "<unk>", "<mask>",
    ]  # fmt: skip
    # the bench's sources: `eng_Latn words </s>`, the words below the codes, for every stack
    ids = inputs_for(for_job(get_stack("edgeformer-int4"), job), shape, 3, 16)
    assert ids == inputs_for(get_stack("ct2-int8"), shape, 3, 16)
    assert all(len(r) == 16 and r[0] == lang["source"][1] and r[-1] == 2 for r in ids)
    assert all(4 <= t < lang["words"] for r in ids for t in r[1:-1])
    bad = {**TINY_NLLB, "vocab_size": 208}
    (job.work / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="too small for NLLB's tokenizer"):
        resolve_shape(str(job.work / "bad.json"))


@pytest.mark.skipif(not HAVE_HF, reason="no transformers")
def test_every_installed_stack_translates_nllb_with_the_target_forced(tiny_nllb):
    """Each stack of the multilingual row that is installed here, built and loaded as the bench
    does (in this process): n tokens per row, the first the target language's, the fp32 ones
    equal to HF PyTorch's greedy ids with forced_bos_token_id; quantized ones run. Optimum
    runs in an environment of its own (not in CI): skipped with the reason."""
    from edgeformer.benchmarks.measure import agreement

    shape, job = tiny_nllb
    deu = forced_target(shape)
    outs, skipped = {}, {}
    for name in NLLB_STACKS:
        stack = for_job(get_stack(name), job)
        reason = skip_reason(stack, shape, job)
        if reason:
            skipped[name] = reason
            continue
        j = job.with_stack(name)
        stack.build(j)
        runner = stack.load(j)
        ids = inputs_for(stack, shape, 3, 12)
        outs[name] = {n: runner.generate(ids, n) for n in (1, 9)}
    assert {"hf-torch", "edgeformer-fp32", "edgeformer-int4"} <= set(outs), skipped
    assert set(outs) | set(skipped) == set(NLLB_STACKS)
    assert all("optimum" in n or "ctranslate2" in r for n, r in skipped.items()), skipped
    ref = outs["hf-torch"]
    assert len({t for r in ref[9] for t in r[1:]}) > 1  # not one repeated token
    for name, got in outs.items():
        for n, rows in got.items():
            assert len(rows) == 3 and all(len(r) == n and r[0] == deu for r in rows), name
        if get_stack(name).precision == "fp32":
            assert got == ref, name
        else:
            assert agreement(got[9], ref[9]) is not None
