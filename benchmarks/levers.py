"""Where a real shape's decode step goes, and what the levers of issue 49 change (one process,
our package of the shape as the bench built it under --work, batch 1, one step after `past`
cached positions, onnxruntime's profiler: profile.decode_step_ops):

    python -m edgeformer.benchmarks.levers --shape smollm2-135m --work runs/real-work

- ops: each variant's step (fp32, int8, int4, int8-dynamic): kernel µs per op type, the
  largest nodes (the tied head among them), and the step's wall time;
- accuracy level: the int4 and int8 graphs with MatMulNBits' accuracy_level set to 0 (fp32
  compute, activations unquantized) and 4 (int8 activations: the export's), weights unchanged;
- block size: the fp32 graph quantized to 4 bits by onnxruntime's MatMulNBitsQuantizer
  (symmetric, accuracy level 4) at blocks of 32, 64 and 128 (its own quantization, the same for
  every size: the effect of the block size alone; the embedding stays a float Gather);
- threads: the int4 step with 1 and 2 intra-op threads;
- KV cache: the bytes a step reads from the cache at `past` and at 528 positions, against the
  int4 weights' (the floor's step bytes): what fp16 / int8 KV could save.

Each timing is the median wall time of `steps` steps after `warmup`, rounds interleaved across
the graphs (the host is shared: the same-run ratios are what count). Writes JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _graph_copy(src: Path, folder: Path, name: str, edit) -> Path:
    """`src` with `edit(model)` applied, saved as `folder/name` beside hard links to its weights
    (onnxruntime refuses external data outside the graph's folder, symbolic links too)."""
    import onnx

    model = onnx.load(str(src), load_external_data=False)
    edit(model)
    for f in src.parent.glob("*.data"):
        link = folder / f.name
        if not link.exists():
            os.link(f.resolve(), link)
    out = folder / name
    onnx.save(model, str(out))
    return out


def _accuracy(level: int):
    def edit(model) -> None:
        for node in model.graph.node:
            if node.op_type == "MatMulNBits":
                for a in node.attribute:
                    if a.name == "accuracy_level":
                        a.i = level

    return edit


def _block_graph(fp32: Path, folder: Path, block: int) -> Path:
    """The fp32 graph quantized by onnxruntime's MatMulNBitsQuantizer at `block`."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(str(fp32), load_external_data=False)
    load_external_data_for_model(model, str(fp32.parent))
    q = MatMulNBitsQuantizer(model, bits=4, block_size=block, is_symmetric=True, accuracy_level=4)
    q.process()
    out = folder / f"decoder.ort-int4-b{block}.onnx"
    q.model.save_model_to_file(str(out), use_external_data_format=True)
    return out


def _top_nodes(graph: Path, cfg, threads: int, past: int) -> list[dict]:
    """The five largest nodes of one step by kernel time (onnxruntime's profiler)."""
    import onnxruntime as ort

    from edgeformer.runtime.session import SPINNING, session_options

    from .profile import _stepper

    with tempfile.TemporaryDirectory() as tmp:
        so = session_options(threads, SPINNING["decoder"])
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(str(graph), so, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        dec, _ = _stepper(sess, cfg, past, 16, rng)
        token = rng.integers(4, cfg.vocab_size, (1,), dtype=np.int64)
        for _ in range(12):
            dec.step(token)
        trace = json.loads(Path(sess.end_profiling()).read_text())
    per: dict[str, float] = {}
    ops: dict[str, str] = {}
    for e in trace[-len(trace) // 3 :]:  # the last steps
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][: -len("_kernel_time")]
            per[name] = per.get(name, 0.0) + e["dur"]
            ops[name] = e.get("args", {}).get("op_name", "?")
    total = sum(per.values()) or 1.0
    top = sorted(per.items(), key=lambda kv: -kv[1])[:5]
    return [{"node": n, "op": ops[n], "pct": 100 * us / total} for n, us in top]


def _timer(graph: Path, cfg, threads: int, past: int):
    """A function timing one step of `graph` (µs), the runtime's session options."""
    import onnxruntime as ort

    from edgeformer.runtime.session import SPINNING, session_options

    from .profile import _stepper

    sess = ort.InferenceSession(
        str(graph),
        session_options(threads, SPINNING["decoder"]),
        providers=["CPUExecutionProvider"],
    )
    rng = np.random.default_rng(0)
    token = rng.integers(4, cfg.vocab_size, (1,), dtype=np.int64)

    def once(steps: int) -> list[float]:
        dec, _ = _stepper(sess, cfg, past, 16, rng)
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            dec.step(token)
            times.append((time.perf_counter() - t) * 1e6)
        return times

    return once


def measure(graphs: dict[str, tuple[Path, int]], cfg, past: int, steps: int, rounds: int):
    """Median step µs per graph (name -> (graph, threads)), rounds interleaved."""
    timers = {k: _timer(g, cfg, t, past) for k, (g, t) in graphs.items()}
    for fn in timers.values():
        fn(3)  # warm-up
    times: dict[str, list[float]] = {k: [] for k in timers}
    for r in range(rounds):
        names = list(timers)
        names = names[r % len(names) :] + names[: r % len(names)]
        for k in names:
            time.sleep(0.1)
            times[k] += timers[k](steps)
    return {k: float(np.median(v)) for k, v in times.items()}


def kv_bytes(cfg, positions: int) -> int:
    """fp32 K and V a step reads at `positions` cached positions."""
    return 2 * cfg.n_decoder_layers * cfg.kv_heads * cfg.head_dim * positions * 4


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m edgeformer.benchmarks.levers")
    p.add_argument("--shape", default="smollm2-135m")
    p.add_argument("--work", default="runs/real-work")
    p.add_argument("--past", type=int, default=24)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default="runs/levers.json")
    args = p.parse_args(argv)

    from ..runtime.package import load_package
    from .floor import onnx_step_bytes
    from .profile import decode_step_ops

    pkg = load_package(Path(args.work) / f"{args.shape}-hf-package", verify=False)
    cfg = pkg.config.model
    out: dict = {"shape": args.shape, "past": args.past, "command": " ".join(sys.argv)}
    variants = [v for v in ("fp32", "int8", "int4", "int8-dynamic") if v in pkg.variants]
    out["ops"] = {}
    for v in variants:
        graph = pkg.file("decoder", v)
        ops = decode_step_ops(graph, cfg, 2, steps=args.steps, past=args.past)
        ops["top_nodes"] = _top_nodes(graph, cfg, 2, args.past)
        ops["step_mb"] = onnx_step_bytes(graph) / 1e6
        out["ops"][v] = ops
        print(v, json.dumps({k: ops[k] for k in ("session_run_wall_us_per_step", "step_mb")}))
    folder = Path(tempfile.mkdtemp(prefix=".levers-", dir=args.work))  # hard links: same disk
    try:
        graphs: dict[str, tuple[Path, int]] = {}
        for block in (32, 64, 128):  # first: onnx refuses to read weights with hard links
            g = _block_graph(pkg.file("decoder", "fp32"), folder, block)
            graphs[f"ort int4 block {block}"] = (g, 2)
        for v in ("int4", "int8"):
            if v in pkg.variants:
                for level in (0, 4):
                    g = _graph_copy(pkg.file("decoder", v), folder, f"decoder.{v}.acc{level}.onnx",
                                    _accuracy(level))  # fmt: skip
                    graphs[f"{v} accuracy_level {level}"] = (g, 2)
        graphs["int4 1 thread"] = (pkg.file("decoder", "int4"), 1)
        out["step_us"] = measure(graphs, cfg, args.past, args.steps, args.rounds)
        out["block_step_mb"] = {
            k: onnx_step_bytes(g) / 1e6 for k, (g, _) in graphs.items() if "block" in k
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    int4_mb = out["ops"].get("int4", {}).get("step_mb")
    out["kv_mb"] = {n: kv_bytes(cfg, n) / 1e6 for n in (args.past, 528)}
    out["kv_share_of_int4_step"] = {
        n: mb / (mb + int4_mb) for n, mb in out["kv_mb"].items() if int4_mb
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["step_us"], indent=2))
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
