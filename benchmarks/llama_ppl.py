"""llama.cpp's perplexity of a real model's GGUF files against transformers fp32 (issue 57).

    python -m edgeformer.benchmarks.llama_ppl --hf HF_DIR --llama-python ENV/bin/python \
        [--gguf NAME=FILE.gguf ...] [--work DIR] [--out RESULT.json]

The windows: Tiny Shakespeare's val split (core.data.load_shakespeare) tokenized by the
folder's tokenizer.json line by line (keepends, no special tokens), cut by
core.metrics.windows(ids, 256, 8). Each GGUF: llama.cpp's `convert_hf_to_gguf.py` (the
environment's own sources, unpatched: a real tokenizer) on HF_DIR, f32, then
`llama_model_quantize` to Q8_0, Q4_0 and Q4_K_M (benchmarks.llamacpp.quantize), plus any file
given with --gguf (a published quantization); each measured by benchmarks.llamacpp.measure in
llama.cpp's environment (perplexity, batch-1 ms/token: 16-token prompt, 32 new tokens). The
reference: AutoModelForCausalLM fp32 on HF_DIR, teacher-forced on the same windows, in this
process. Files are made once under --work and reused.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from . import llama_env, llamacpp

QUANTS = ("q8_0", "q4_0", "q4_k_m")


def shakespeare_windows(tokenizer_json: Path) -> list[list[int]]:
    """The val split's ids (line by line, keepends, no special tokens), cut into windows as
    export's held-out check cuts them (benchmarks.weights.text_windows: the bench's --hf)."""
    from .weights import text_windows

    return text_windows(tokenizer_json)


def convert_f32(vendor: Path, hf: Path, out: Path) -> Path:
    """llama.cpp's converter, as shipped, on a real model folder (f32), unless `out` exists."""
    if not out.is_file():
        cmd = [sys.executable, str(vendor / "convert_hf_to_gguf.py"), str(hf), "--outfile",
               str(out), "--outtype", "f32"]  # fmt: skip
        subprocess.run(
            cmd, check=True, capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
    return out


def quantized(python: str, src: Path, quant: str, out: Path, threads: int) -> Path:
    """`src` quantized by llama_model_quantize in llama.cpp's environment, unless `out` exists."""
    if not out.is_file():
        cmd = [python, "-m", "edgeformer.benchmarks.llamacpp", "quantize", str(src), str(out),
               quant, str(threads)]  # fmt: skip
        subprocess.run(cmd, check=True, capture_output=True)
    return out


def torch_perplexity(hf: Path, windows: list[list[int]], threads: int) -> dict:
    """transformers fp32, teacher-forced: the same nll sum as llamacpp.perplexity."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    nll, count, t0 = 0.0, 0, time.perf_counter()
    with torch.inference_mode():
        for w in windows:
            logits = model(torch.tensor([w])).logits[0, :-1].double()
            logp = torch.log_softmax(logits, dim=-1)
            nll -= float(logp[torch.arange(len(w) - 1), torch.tensor(w[1:])].sum())
            count += len(w) - 1
    ms = (time.perf_counter() - t0) * 1e3
    return {"ppl": float(torch.exp(torch.tensor(nll / count))), "nll": nll, "tokens": count,
            "eval_ms": ms}  # fmt: skip


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m edgeformer.benchmarks.llama_ppl",
                                description=__doc__.split("\n")[0])  # fmt: skip
    p.add_argument("--hf", type=Path, required=True, help="the Hugging Face model folder")
    p.add_argument("--llama-python", help="llama.cpp's environment (default: llama_env.resolve)")
    p.add_argument("--gguf", action="append", default=[], help="NAME=FILE.gguf, also measured")
    p.add_argument("--work", type=Path, default=Path("runs/llama-ppl"))
    p.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    python = llama_env.resolve(a.llama_python)
    if why := llama_env.problem(python):
        raise SystemExit(why)
    assert python is not None  # problem() says why otherwise
    a.work.mkdir(parents=True, exist_ok=True)
    windows = shakespeare_windows(a.hf / "tokenizer.json")
    f32 = convert_f32(llama_env.vendor_dir(python), a.hf, a.work / "f32.gguf")
    files = dict(g.split("=", 1) for g in a.gguf)
    for q in QUANTS:
        files[q] = str(quantized(python, f32, q, a.work / f"{q}.gguf", a.threads))
    files["f32"] = str(f32)
    rows = {}
    for name, path in files.items():
        rows[name] = {"file": path, "mb": Path(path).stat().st_size / 1e6,
                      **llamacpp.measure(python, Path(path), windows, a.threads)}  # fmt: skip
        print(f"{name}: ppl {rows[name]['ppl']:.3f}, {rows[name]['ms_per_token']:.2f} ms/token",
              flush=True)  # fmt: skip
    ref = torch_perplexity(a.hf, windows, a.threads)
    print(f"transformers fp32: ppl {ref['ppl']:.3f}", flush=True)
    out = {
        "hf": str(a.hf), "threads": a.threads, "windows": len(windows),
        "window_tokens": [len(w) for w in windows], "llama_cpp": rows,
        "transformers_fp32": ref, "llama_env": llama_env.describe(python),
    }  # fmt: skip
    text = json.dumps(out, indent=2) + "\n"
    if a.out:
        a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
