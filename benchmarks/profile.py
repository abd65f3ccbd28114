"""`--profile`: where one decode step's time goes.

1. onnxruntime's profiler (SessionOptions.enable_profiling) on the package's decoder graph,
   driven by the runtime's own step loop (IO binding, cache written in place), batch 1, after
   `past` cached positions: kernel time per op type, per step.
2. Python outside session.run: the runtime's full W1 generation with every
   InferenceSession.run / run_with_iobinding timed, for each ORT-based stack (ours and Optimum).
3. The weight-streaming floor of an fp32 step: one MatMul of one row over as many fp32 bytes as
   the step's linear layers read (`floor_ms`, run in a fresh process: child.py `floor`; in a
   process that holds other onnxruntime sessions their thread pools skew it by up to 2x).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np


def _stepper(session, cfg, past: int, src: int, rng):
    """The runtime's CachedDecoder over `session`, batch 1, with `past` positions prefilled
    (ED: random cross K/V for a source of `src` tokens), and the graph runs that took."""
    from edgeformer.runtime.steppers import CachedDecoder, Graph, source_lengths

    from ..core.format import cross_names

    H, D, L = cfg.n_heads, cfg.d_model // cfg.n_heads, cfg.n_decoder_layers
    static = None
    ed = cfg.family == "encoder-decoder"
    graph = Graph(session)
    if ed:  # the K/V (1, H, S, D) and the last source token's (1, 1, C)
        shapes = {"key": (1, H, src, D), "value": (1, H, src, D)}
        static = {
            n: rng.standard_normal(shapes.get(n.rsplit(".", 1)[1], (1, 1, H * D)))
            .astype(np.float32) for n in cross_names(L)
        }  # fmt: skip
        static |= source_lengths(graph, np.ones((1, src), np.int64))
    G, Dh = (H, D) if ed else (cfg.kv_heads, cfg.head_dim)  # an LM's cache: its KV heads
    dec = CachedDecoder(graph, cfg.family, L, G, Dh, cfg.max_len, 1, static)
    ids = rng.integers(4, cfg.vocab_size, (1, past), dtype=np.int64)
    if ed:  # its decoder takes one token per call
        dec.prefill(ids[:, :1], np.ones_like(ids[:, :1]))
        for t in ids[0, 1:]:
            dec.step(np.array([t]))
        return dec, past
    dec.prefill(ids, np.ones_like(ids))
    return dec, 1


def decode_step_ops(
    graph: Path, cfg, threads: int, steps: int = 30, warmup: int = 5, past: int = 24
) -> dict:
    """Kernel time per op type for one decoder step, from onnxruntime's profiler."""
    import onnxruntime as ort

    from edgeformer.runtime.session import SPINNING, session_options

    with tempfile.TemporaryDirectory() as tmp:
        so = session_options(threads, SPINNING["decoder"])  # the runtime's, plus the profiler
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(str(graph), so, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        dec, filling = _stepper(sess, cfg, past, 16, rng)
        tokens = rng.integers(4, cfg.vocab_size, (1,), dtype=np.int64)
        walls = []
        for i in range(warmup + steps):
            t = time.perf_counter()
            dec.step(tokens)
            if i >= warmup:
                walls.append((time.perf_counter() - t) * 1e6)
        trace = json.loads(Path(sess.end_profiling()).read_text())
    runs = sorted(
        (e for e in trace if e.get("cat") == "Session" and e.get("name") == "model_run"),
        key=lambda e: e["ts"],
    )[filling + warmup :]  # the prefill, then the warm-up steps
    if not runs:
        return {"error": "the profiler recorded no model_run events"}
    start = runs[0]["ts"]
    per_op: dict[str, float] = defaultdict(float)
    nodes = 0
    for e in trace:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= start:
            per_op[e.get("args", {}).get("op_name", "?")] += e["dur"]
            nodes += 1
    n = len(runs)
    kernel = sum(per_op.values()) / n
    run_us = sum(e["dur"] for e in runs) / n
    ops = [
        {"op_type": op, "us_per_step": us / n, "pct_of_kernels": 100 * us / n / max(kernel, 1e-9)}
        for op, us in sorted(per_op.items(), key=lambda kv: -kv[1])
    ]
    return {
        "graph": graph.name,
        "past": past,
        "steps": n,
        "nodes_per_step": nodes / n,
        "kernel_us_per_step": kernel,
        "model_run_us_per_step": run_us,
        "session_run_wall_us_per_step": float(np.median(walls)),
        "ops": ops,
    }


def linear_weight_bytes(graph: Path) -> int:
    """Bytes of the float32 weights the graph's MatMul / Gemm nodes read: what one decode step
    at batch 1 streams (the embedding's Gather reads one row of its table)."""
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    dims = {
        i.name: i.dims for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT
    }
    read = {  # once each: a tied table read by both heads (logits, indexed_logits) streams once
        n.input[1]
        for n in model.graph.node
        if n.op_type in ("MatMul", "Gemm") and len(n.input) > 1 and n.input[1] in dims
    }
    return sum(4 * int(np.prod(dims[name])) for name in read)


def floor_ms(n_bytes: int, width: int, threads: int, rounds: int = 7, runs: int = 100) -> float:
    """One MatMul (1, width) x (width, N) over n_bytes of fp32 weights, the runtime's session
    options (decoder spinning): median ms of `rounds` rounds of `runs` calls."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from edgeformer.runtime.session import session_options

    n = max(1, n_bytes // 4 // width)
    w = np.random.default_rng(0).standard_normal((width, n)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "floor",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    so = session_options(threads, spinning=True)
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feed = {"x": np.ones((1, width), np.float32)}
    for _ in range(20):
        sess.run(None, feed)
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(runs):
            sess.run(None, feed)
        times.append((time.perf_counter() - t) / runs * 1e3)
    return float(np.median(times))


@contextlib.contextmanager
def count_session_time():
    """Time spent inside onnxruntime InferenceSession.run* calls (all sessions) while active."""
    import onnxruntime as ort

    cls = ort.InferenceSession
    acc = {"ms": 0.0, "calls": 0}
    saved = {}
    for name in ("run", "run_with_iobinding", "run_with_ort_values"):
        if not hasattr(cls, name):
            continue
        orig = getattr(cls, name)
        saved[name] = cls.__dict__.get(name)

        def timed(self, *a, _orig=orig, **kw):
            t = time.perf_counter()
            try:
                return _orig(self, *a, **kw)
            finally:
                acc["ms"] += (time.perf_counter() - t) * 1e3
                acc["calls"] += 1

        setattr(cls, name, timed)
    try:
        yield acc
    finally:
        for name, orig in saved.items():
            if orig is None:
                delattr(cls, name)
            else:
                setattr(cls, name, orig)


def python_overhead(runner, ids: list[list[int]], n: int, repeats: int = 3) -> dict:
    """Total generation time vs time inside session.run (median of `repeats`)."""
    rows = []
    for _ in range(repeats):
        with count_session_time() as acc:
            t = time.perf_counter()
            runner.generate(ids, n)
            total = (time.perf_counter() - t) * 1e3
        rows.append((total, acc["ms"], acc["calls"]))
    total, inside, calls = sorted(rows)[len(rows) // 2]
    return {
        "total_ms": total,
        "in_session_run_ms": inside,
        "outside_ms": total - inside,
        "outside_pct": 100 * (total - inside) / total if total else 0.0,
        "outside_ms_per_token": (total - inside) / n,
        "session_runs": calls,
    }
