"""llama.cpp's environment and measurements (issue 57): the CPU build's flags (no AMX kernels
on a CPU reporting AMX: their ldtilecfg killed the first decode on such a VM), the wheel cache
keyed by those flags, and llama.cpp's teacher-forced perplexity of a GGUF, checked against
transformers fp32 on a tiny Llama (skipped without llama.cpp's environment: `edgeformer bench
--make-llama-env DIR`, then --llama-python / $EDGEFORMER_LLAMA_PYTHON / runs/llama-env)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeformer.benchmarks import llama_env, llamacpp
from edgeformer.core.metrics import windows

HAVE_HF = all(importlib.util.find_spec(m) for m in ("transformers", "torch"))
AVX512 = {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"}
SAPPHIRE = {"sse4_2", "avx", "avx2", "avx_vnni", "bmi2", "fma", "f16c", *AVX512, "avx512vbmi",
            "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"}  # fmt: skip


def test_a_cpu_reporting_amx_builds_without_native_and_amx():
    args, arch = llama_env.cmake_args(SAPPHIRE)
    assert not arch["native"] and "amx_tile" in arch["why"]
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_NATIVE=ON" not in args
    for opt in ("TILE", "INT8", "BF16"):
        assert f"-DGGML_AMX_{opt}=OFF" in args
    for opt in ("AVX2", "FMA", "F16C", "AVX512", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI"):
        assert f"-DGGML_{opt}=ON" in args
    assert args.endswith(llama_env.LIBRARY_ARGS)
    # AVX-512 only when every part of GGML_AVX512's -mavx512{f,cd,vl,dq,bw} is reported
    partial = llama_env.cmake_args(SAPPHIRE - {"avx512dq"})[0]
    assert "-DGGML_AVX512=OFF" in partial and "-DGGML_AVX2=ON" in partial


def test_a_cpu_without_amx_keeps_the_native_build():
    args, arch = llama_env.cmake_args(SAPPHIRE - set(llama_env.AMX))
    assert arch["native"] and args == llama_env.CMAKE_ARGS
    assert llama_env.cmake_args(set())[0] == llama_env.CMAKE_ARGS  # no /proc/cpuinfo


def test_cpu_flags_reads_the_flags_lines(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_tile\n\nflags\t\t: fpu avx2\n")
    assert {"avx2", "amx_tile", "fpu"} <= llama_env.cpu_flags(info)
    assert llama_env.cpu_flags(tmp_path / "none") == set()


def test_a_cached_wheel_is_reused_only_when_built_with_the_same_args(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    name, version = llama_env.LLAMA_CPP_PYTHON.replace("-", "_").split("==")
    (wheels / f"{name}-{version}.tar.gz").touch()  # the sdist, never unpacked here
    src = tmp_path / "src" / f"{name}-{version}"
    src.mkdir(parents=True)
    wheel = wheels / f"{name}-{version}-cp311-cp311-linux_x86_64.whl"
    wheel.touch()  # no .cmake_args: a wheel of the GGML_NATIVE build
    assert llama_env.wheel_args(wheel) == llama_env.CMAKE_ARGS
    assert llama_env.build_wheel(tmp_path, llama_env.CMAKE_ARGS, log=lambda s: None) == wheel
    wheel.with_name(wheel.name + ".cmake_args").write_text("-DGGML_NATIVE=OFF\n")
    assert llama_env.build_wheel(tmp_path, "-DGGML_NATIVE=OFF", log=lambda s: None) == wheel


def _llama_python() -> str:
    python = llama_env.resolve(None)
    if why := llama_env.problem(python):
        pytest.skip(why)
    assert python is not None
    return python


def _tiny_llama(path: Path, vocab: int = 96) -> None:
    """A 2-layer Llama with peaked random outputs (a large init: the perplexity of a shifted
    target differs from the right one) and the bench's word-level tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from edgeformer.benchmarks.artifacts import LLAMA_SPECIALS, _word_tokenizer

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        initializer_range=0.3,
    )  # fmt: skip
    LlamaForCausalLM(cfg).eval().save_pretrained(path)
    words = LLAMA_SPECIALS + [f"t{i}" for i in range(len(LLAMA_SPECIALS), vocab)]
    specials = dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<unk>")
    tok = _word_tokenizer(words, "<unk>")
    PreTrainedTokenizerFast(tokenizer_object=tok, **specials).save_pretrained(path)


@pytest.mark.skipif(not HAVE_HF, reason="no transformers")
def test_llamacpp_perplexity_of_an_f32_gguf_is_transformers(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    python = _llama_python()
    hf, gguf = tmp_path / "hf", tmp_path / "model.gguf"
    _tiny_llama(hf)
    cmd = [sys.executable, "-m", "edgeformer.benchmarks.llamacpp", "convert",
           str(llama_env.vendor_dir(python)), str(hf), str(gguf)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    ids = np.random.default_rng(0).integers(3, 96, 100).tolist()
    wins = windows(ids, 40)  # 41, 41 and a shorter last window of 20
    assert [len(w) for w in wins] == [41, 41, 20]
    got = llamacpp.measure(python, gguf, wins, threads=2)

    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    nll = shifted = 0.0
    with torch.inference_mode():
        for w in wins:
            logp = torch.log_softmax(model(torch.tensor([w])).logits[0].double(), dim=-1)
            nll -= float(logp[torch.arange(len(w) - 1), torch.tensor(w[1:])].sum())
            shifted -= float(logp[torch.arange(len(w) - 2), torch.tensor(w[2:])].sum())
    assert got["tokens"] == sum(len(w) - 1 for w in wins) == 99
    assert got["nll"] == pytest.approx(nll, rel=1e-4)
    assert abs(shifted - nll) / nll > 1e-2  # the check tells a target one off apart
    assert got["ppl"] == pytest.approx(np.exp(nll / 99), rel=1e-4)
    assert got["threads"] == 2 and got["new_tokens"] == 32 and got["prompt_tokens"] == 16
    assert 0 < got["decode_ms_per_step"] and 0 < got["ms_per_token"] < got["call_ms"]


def test_measure_raises_with_the_childs_last_line(tmp_path):
    with pytest.raises(RuntimeError, match="exit"):
        llamacpp.measure(sys.executable, tmp_path / "missing.gguf", [[1, 2]], threads=1)
