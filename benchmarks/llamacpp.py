"""llama.cpp as a bench stack: the GGUF conversion, the quantization and the generation loop.

    python -m edgeformer.benchmarks.llamacpp convert VENDOR HF_DIR OUT.gguf
        llama.cpp's own convert_hf_to_gguf.py (VENDOR: the llama.cpp sources llama-cpp-python
        was built from, llama_env.vendor_dir) on a bench model folder, --outtype f32, under the
        bench's interpreter (the converter imports torch and transformers). One change: the
        bench's models carry a whitespace word-level tokenizer (random weights, no hub), which
        the converter's BPE / SentencePiece vocabulary readers refuse ("pre-tokenizer was not
        recognized"), so its model class writes the vocabulary with the converter's own
        whitespace writer (`_set_vocab_whitespace`); every tensor goes through llama.cpp's
        code unchanged. The bench feeds token ids, never text. --real (bench --hf): the model's
        own tokenizer, the converter's readers (`convert`).

`quantize` (llama.cpp's llama_model_quantize, as the llama-quantize tool; in llama.cpp's
environment) makes Q8_0, Q4_0 and Q4_K_M from that f32 GGUF with llama.cpp's defaults (the
output / tied-embedding tensor as llama-quantize picks it: Q6_K for Q4_0 and Q4_K_M, Q8_0 for
Q8_0). `load` runs it with the llama.h API through llama-cpp-python's bindings: all rows of a
batch as sequences of one context (one per row, no unified KV cache), the prompt in one
llama_decode, then one token per row per step, greedy (argmax of each row's logits with EOS
banned: the forced length, as min_new_tokens in the other stacks).

    python -m edgeformer.benchmarks.llamacpp perplexity GGUF WINDOWS.json THREADS
        in llama.cpp's environment: `perplexity` of the GGUF on the windows (a JSON list of
        token-id lists, core.metrics.windows) and `decode_ms` at batch 1, one JSON line.
        `measure` runs it from the bench's process under that environment's interpreter,
        OMP_NUM_THREADS = THREADS, as a stack's process runs.
    python -m edgeformer.benchmarks.llamacpp quantize SRC.gguf OUT.gguf QUANT THREADS
        `quantize` (in llama.cpp's environment), for scripts (benchmarks/llama_ppl.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUANTS = {"q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
          "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}  # fmt: skip
CTX_BLOCK = 256  # context sizes are rounded up to this (per sequence)


def _whitespace_vocab(model) -> None:
    """The converter's whitespace vocabulary writer, plus one merge: a word-level tokenizer has
    none, and llama.cpp's loader of this (BPE-typed) vocabulary requires the key. The merge is
    never applied: the bench gives llama.cpp token ids, not text."""
    model._set_vocab_whitespace()
    model.gguf_writer.add_token_merges(["t 0"])


def convert(vendor: Path, hf: Path, out: Path, real: bool = False) -> None:
    """llama.cpp's convert_hf_to_gguf.py, in this process (see the module docstring). `real`: a
    model's own tokenizer (bench --hf), written by the converter's own readers; only a
    pre-tokenizer the converter does not know by its hash (a test's tiny BPE) is pinned to
    "default" instead of refused: the bench gives llama.cpp ids, so its regex is never used."""
    import runpy

    sys.path.insert(0, str(vendor))
    sys.path.insert(1, str(vendor / "gguf-py"))
    import conversion  # type: ignore[import-not-found]  # llama.cpp's, beside the script

    found = conversion.get_model_class

    def real_vocab(*args, **kwargs):
        cls = found(*args, **kwargs)

        def pre_or_default(self, tokenizer):
            try:
                return cls.get_vocab_base_pre(self, tokenizer)
            except NotImplementedError:
                return "default"

        return type(cls.__name__, (cls,), {"model_arch": cls.model_arch,
                                           "get_vocab_base_pre": pre_or_default})  # fmt: skip

    def whitespace_vocab(*args, **kwargs):
        cls = found(*args, **kwargs)
        body = {
            "model_arch": cls.model_arch,
            "set_vocab": _whitespace_vocab,
            # the writer reads the tokens through get_vocab_base, whose pre-tokenizer check
            # knows hashes of published tokenizers only: ours is pinned, as the writer pins it
            "get_vocab_base_pre": lambda self, tokenizer: "whitespace",
        }
        return type(cls.__name__, (cls,), body)

    conversion.get_model_class = real_vocab if real else whitespace_vocab
    sys.argv = ["convert_hf_to_gguf.py", str(hf), "--outfile", str(out), "--outtype", "f32"]
    runpy.run_path(str(vendor / "convert_hf_to_gguf.py"), run_name="__main__")


def quantize(src: Path, out: Path, quant: str, threads: int) -> None:
    """llama_model_quantize(src -> out) at `quant` (QUANTS), llama.cpp's default choices."""
    import llama_cpp  # type: ignore[import-not-found]  # in llama.cpp's environment

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANTS[quant])
    params.nthread = threads
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), params)
    if rc != 0 or not out.is_file():
        raise RuntimeError(f"llama_model_quantize {quant} of {src} failed (code {rc})")


_CALLBACKS: list = []  # the log callback must outlive every call into llama.cpp


def _QUIET(L):  # noqa: N802 (a ctypes callback factory)
    if not _CALLBACKS:
        _CALLBACKS.append(L.llama_log_callback(lambda level, text, data: None))
    return _CALLBACKS[0]


def load(path: Path, threads: int):
    """A generate(ids, n) over the GGUF at `path` (see the module docstring), and a close()."""
    import llama_cpp as L
    import numpy as np

    L.llama_log_set(_QUIET(L), None)  # llama.cpp's load and graph logs: errors are raised here
    L.llama_backend_init()
    model = L.llama_model_load_from_file(str(path).encode(), L.llama_model_default_params())
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    eos = L.llama_vocab_eos(vocab)
    contexts: dict[int, tuple] = {}  # rows -> (context, tokens per sequence)

    def context(rows: int, tokens: int):
        per_seq = -(-tokens // CTX_BLOCK) * CTX_BLOCK
        if rows in contexts and contexts[rows][1] >= per_seq:
            return contexts[rows][0]
        if rows in contexts:
            L.llama_free(contexts.pop(rows)[0])
        cp = L.llama_context_default_params()
        cp.n_ctx = rows * per_seq
        cp.n_seq_max = rows
        cp.kv_unified = rows == 1  # rows > 1: one KV cache per sequence (llama.h's advice)
        cp.n_batch = max(512, rows * tokens)
        cp.n_threads = cp.n_threads_batch = threads
        cp.no_perf = True
        ctx = L.llama_init_from_model(model, cp)
        if not ctx:
            raise RuntimeError("llama.cpp could not create a context")
        contexts[rows] = (ctx, per_seq)
        return ctx

    def pick(ctx, index: int) -> int:
        row = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, index), shape=(n_vocab,))
        row[eos] = -np.inf  # forced length: EOS banned, as min_new_tokens
        return int(row.argmax())

    def generate(ids: list[list[int]], n: int) -> list[list[int]]:
        B, P = len(ids), len(ids[0])  # workloads have equal-length rows
        ctx = context(B, P + n)
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        batch = L.llama_batch_init(max(B * P, B), 0, 1)
        try:
            for b, row in enumerate(ids):
                for t, tok in enumerate(row):
                    i = b * P + t
                    batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, t, 1
                    batch.seq_id[i][0], batch.logits[i] = b, t == P - 1
            batch.n_tokens = B * P
            if L.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed on the prompt")
            out = [[pick(ctx, b * P + P - 1)] for b in range(B)]
            for step in range(1, n):
                for b in range(B):
                    batch.token[b], batch.pos[b], batch.n_seq_id[b] = out[b][-1], P + step - 1, 1
                    batch.seq_id[b][0], batch.logits[b] = b, True
                batch.n_tokens = B
                if L.llama_decode(ctx, batch) != 0:
                    raise RuntimeError(f"llama_decode failed at step {step}")
                for b in range(B):
                    out[b].append(pick(ctx, b))
        finally:
            L.llama_batch_free(batch)
        return out

    def close() -> None:
        for ctx, _ in contexts.values():
            L.llama_free(ctx)
        contexts.clear()
        L.llama_model_free(model)

    return generate, close


def perplexity(path: Path, windows: list[list[int]], threads: int) -> dict:
    """llama.cpp's teacher-forced perplexity of the GGUF at `path` on token windows: each window
    alone from an empty cache in one llama_decode (llama_cpp.Llama, logits_all), its ids as
    given (no BOS added); the first token is context only, every later one predicted once
    (log-softmax of the logits in float64)."""
    import llama_cpp
    import numpy as np

    from .measure import logits_nll

    longest = max(len(w) for w in windows)
    n_ctx = -(-longest // CTX_BLOCK) * CTX_BLOCK
    llm = llama_cpp.Llama(
        model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, logits_all=True,
        n_threads=threads, n_threads_batch=threads, verbose=False,
    )  # fmt: skip
    nll, count, t0 = 0.0, 0, time.perf_counter()
    try:
        for w in windows:
            llm.reset()
            llm.eval(w)
            nll += logits_nll(llm.scores[: len(w) - 1], w[1:])
            count += len(w) - 1
    finally:
        llm.close()
    ms = (time.perf_counter() - t0) * 1e3
    return {"ppl": float(np.exp(nll / count)), "nll": nll, "tokens": count, "eval_ms": ms}


def decode_ms(path: Path, prompt: list[int], new_tokens: int, threads: int, repeats: int = 5):
    """Batch-1 greedy generation of `new_tokens` after `prompt` with the stacks' loop (`load`):
    the fastest of `repeats` calls' ms per new token (prompt included, as the bench's W1) and
    per decode step alone (the call minus a 1-token call, over new_tokens - 1), after a warm-up
    call. The fastest, not the median: on a shared 2-core host other jobs only add time."""
    generate, close = load(path, threads)

    def best_ms(n: int) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            generate([prompt], n)
            times.append((time.perf_counter() - t0) * 1e3)
        return min(times)

    try:
        generate([prompt], new_tokens)  # warm-up
        whole, first = best_ms(new_tokens), best_ms(1)
    finally:
        close()
    return {
        "ms_per_token": whole / new_tokens,
        "decode_ms_per_step": (whole - first) / (new_tokens - 1),
        "call_ms": whole,
        "prompt_ms": first,
        "prompt_tokens": len(prompt),
        "new_tokens": new_tokens,
    }


PROMPT, NEW = 16, 32  # decode_ms's workload: W1's (16-token prompt, 32 new tokens)


def _measure_here(path: Path, windows: list[list[int]], threads: int) -> dict:
    prompt = windows[0][:PROMPT]
    out = perplexity(path, windows, threads)
    return {**out, **decode_ms(path, prompt, NEW, threads), "threads": threads}


def measure(python: str, path: Path, windows: list[list[int]], threads: int = 2,
            timeout: float = 3600) -> dict:  # fmt: skip
    """`perplexity` and `decode_ms` (W1's lengths, the prompt: the first window's first ids) of
    the GGUF at `path`, in a process of llama.cpp's environment (`python`: its interpreter,
    llama_env.resolve) with OMP_NUM_THREADS = threads; its JSON. Raises with the child's last
    line when it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        wfile = Path(tmp) / "windows.json"
        wfile.write_text(json.dumps(windows))
        cmd = [python, "-m", "edgeformer.benchmarks.llamacpp", "perplexity", str(path),
               str(wfile), str(threads)]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"llama.cpp perplexity of {path}: exit {p.returncode}: {tail[0][:300]}")
    return json.loads(lines[-1])


USAGE = """usage: python -m edgeformer.benchmarks.llamacpp convert VENDOR HF_DIR OUT.gguf [--real]
       python -m edgeformer.benchmarks.llamacpp quantize SRC.gguf OUT.gguf QUANT THREADS
       python -m edgeformer.benchmarks.llamacpp perplexity GGUF WINDOWS.json THREADS"""


def main(argv: list[str]) -> int:
    if len(argv) in (4, 5) and argv[0] == "convert" and argv[4:] in ([], ["--real"]):
        convert(Path(argv[1]), Path(argv[2]), Path(argv[3]), real=argv[4:] == ["--real"])
        return 0
    if len(argv) == 5 and argv[0] == "quantize":
        quantize(Path(argv[1]), Path(argv[2]), argv[3], int(argv[4]))
        return 0
    if len(argv) == 4 and argv[0] == "perplexity":
        windows = json.loads(Path(argv[2]).read_text())
        print(json.dumps(_measure_here(Path(argv[1]), windows, int(argv[3]))), flush=True)
        return 0
    print(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
