"""One sentence-embedding stack in its own process (`edgeformer bench --embeddings`,
benchmarks/embeddings.py): a deployment of that stack imports only what it needs.

    python -m edgeformer.benchmarks.embed_child serve JOB   load, then answer requests
    python -m edgeformer.benchmarks.embed_child build JOB   the stack's files (Optimum's export
                                                            runs in its own environment)

JOB (JSON): {"stack", "folder": the sentence-transformers folder, "files": the stack's built
files, "threads", "pooling", "normalize", "max_len"}. `serve` prints one JSON line when loaded
({"start_rss_mb", "loaded_rss_mb"}), then answers each request line: {"op": "embed", "texts"}
-> {"ms": the call's wall time, "out": (B, C) embeddings as lists}, {"op": "queries",
"texts"} -> {"ms": [each text embedded alone]}, {"op": "rss"} -> {"rss_mb", "peak_rss_mb"};
a failure is {"error"}. Only these lines go to stdout.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .measure import peak_rss_mb, rss_mb

Embed = Callable[[list[str]], np.ndarray]


def pool(h: np.ndarray, mask: np.ndarray, mode: str, normalize: bool) -> np.ndarray:
    """(B, S, C) hidden states, (B, S) mask -> (B, C): sentence-transformers' Pooling (mean
    over real tokens, cls: the first token), then Normalize."""
    if mode == "cls":
        e = h[:, 0]
    else:
        m = mask[..., None].astype(h.dtype)
        e = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    if normalize:
        e = e / np.maximum(np.linalg.norm(e, axis=-1, keepdims=True), 1e-12)
    return e


def load_ours(job: dict) -> Embed:
    from edgeformer.runtime.embed import Embedder

    variant = job["stack"].removeprefix("edgeformer-")
    model = Embedder(job["files"], variant, threads=job["threads"], verify=False)
    return model.embed


def load_sentence_transformers(job: dict) -> Embed:
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(job["threads"])
    model = SentenceTransformer(job["folder"], device="cpu", local_files_only=True)

    def embed(texts: list[str]) -> np.ndarray:
        with torch.inference_mode():
            return model.encode(texts, batch_size=32, convert_to_numpy=True)

    return embed


def load_optimum(job: dict) -> Embed:
    import onnxruntime as ort
    from optimum.onnxruntime import ORTModelForFeatureExtraction
    from transformers import AutoTokenizer

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = job["threads"], 1
    name = "model_quantized.onnx" if job["stack"] == "optimum-int8" else "model.onnx"
    model = ORTModelForFeatureExtraction.from_pretrained(
        job["files"], file_name=name, session_options=options, provider="CPUExecutionProvider"
    )
    tok = AutoTokenizer.from_pretrained(job["folder"])

    def embed(texts: list[str]) -> np.ndarray:
        b = tok(texts, padding=True, truncation=True, max_length=job["max_len"],
                return_tensors="np")  # fmt: skip
        h = model(**b).last_hidden_state
        return pool(np.asarray(h), b["attention_mask"], job["pooling"], job["normalize"])

    return embed


def load_ctranslate2(job: dict) -> Embed:
    import ctranslate2
    from tokenizers import Tokenizer

    compute = "int8" if job["stack"] == "ct2-int8" else "float32"
    model = ctranslate2.Encoder(job["files"], device="cpu", compute_type=compute,
                                intra_threads=job["threads"], inter_threads=1)  # fmt: skip
    tok = Tokenizer.from_file(str(Path(job["folder"]) / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(job["max_len"])

    def embed(texts: list[str]) -> np.ndarray:
        ids = [e.ids for e in tok.encode_batch(texts)]
        h = np.asarray(model.forward_batch(ids).last_hidden_state)  # (B, longest, C)
        lengths = np.array([len(r) for r in ids])
        mask = np.arange(h.shape[1])[None, :] < lengths[:, None]
        return pool(h, mask, job["pooling"], job["normalize"])

    return embed


LOADERS = {
    "edgeformer": load_ours,
    "st": load_sentence_transformers,
    "optimum": load_optimum,
    "ct2": load_ctranslate2,
}


def loader(stack: str) -> Callable[[dict], Embed]:
    return LOADERS[stack.split("-")[0]]


def build_optimum(job: dict) -> None:
    """The folder exported by Optimum (model.onnx) and dynamically quantized by its
    ORTQuantizer (model_quantized.onnx: int8 weights, per-channel, AVX2 / VNNI kernels)."""
    from optimum.onnxruntime import ORTModelForFeatureExtraction, ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    out = Path(job["files"])
    ORTModelForFeatureExtraction.from_pretrained(job["folder"], export=True).save_pretrained(out)
    config = AutoQuantizationConfig.avx2(is_static=False, per_channel=True)
    ORTQuantizer.from_pretrained(out, file_name="model.onnx").quantize(config, out)


def serve(job: dict) -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # a library's prints go to stderr
    start = rss_mb()
    embed = loader(job["stack"])(job)
    print(json.dumps({"start_rss_mb": start, "loaded_rss_mb": rss_mb()}), file=out, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["op"] == "embed":
                t = time.perf_counter()
                e = embed(req["texts"])
                reply: dict = {"ms": (time.perf_counter() - t) * 1e3, "out": e.tolist()}
            elif req["op"] == "queries":
                times = []
                for text in req["texts"]:
                    t = time.perf_counter()
                    embed([text])
                    times.append((time.perf_counter() - t) * 1e3)
                reply = {"ms": times}
            else:
                reply = {"rss_mb": rss_mb(), "peak_rss_mb": peak_rss_mb()}
        except Exception as e:  # the parent reports the stack as failed
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), file=out, flush=True)


def main(argv: list[str]) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    command, job = argv[0], json.loads(argv[1])
    if not job["stack"].startswith("edgeformer-"):  # ours imports no transformers (its RSS)
        from .runners import quiet_libraries

        quiet_libraries()
    warnings.filterwarnings("ignore")
    if command == "build":
        build_optimum(job)
    else:
        serve(job)


if __name__ == "__main__":
    main(sys.argv[1:])
