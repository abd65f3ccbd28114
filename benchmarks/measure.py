"""Timing protocol and memory measurement.

Timing: every stack gets `warmup` untimed calls, then `rounds` interleaved rounds: in each round
each stack runs once in turn (the order rotates every round), so drift in machine load hits all
stacks alike. Each turn starts after a SETTLE_S pause: the engines' thread pools spin-wait for a
while after a call (OpenMP in CTranslate2 and PyTorch, onnxruntime's intra-op pool), and on 2
cores a stack timed while the previous one's threads still spin ran up to 5x slower (CTranslate2
ED W1: 5.4 ms/token right after an onnxruntime call, 1.0 alone or after a 50 ms pause).
One turn times three calls: the full forced-length generation (total), the same
with one new token (time to first token: encoder or prefill + first step), and the encoder
alone (ED stacks that expose it). Figures are medians with min-max over rounds.

Memory (the helpers below; the child processes are `benchmarks.child`): the RSS of the stack's
own process once loaded; the peak RSS of a fresh child process that loads one stack and runs
each workload once (`--memory subprocess`, the default: it includes the interpreter and every
library the stack imports, as a deployment would), or the growth of peak RSS while loading a
stack (`--memory delta`: cheap).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from .shapes import Workload

SETTLE_S = 0.1  # pause before each turn, so that no other stack's threads are still spinning


def stats(values: list[float]) -> dict:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def _timed(fn, *args) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn(*args)
    return (time.perf_counter() - t) * 1e3, out


def timed_generate(r, ids, n: int) -> tuple[float, object]:
    """(ms, outputs) of one generation: measured in the stack's process when it has its own."""
    return r.timed_generate(ids, n) if r.timed_generate else _timed(r.generate, ids, n)


def timed_encode(r, ids) -> float:
    return (r.timed_encode(ids) if r.timed_encode else _timed(r.encode, ids))[0]


def agreement(out: list[list[int]], ref: list[list[int]] | None) -> float | None:
    """Fraction of generated positions equal to the reference's (None without a reference)."""
    if ref is None:
        return None
    pairs = [(a, b) for r, s in zip(out, ref) for a, b in zip(r, s)]
    total = max(sum(len(s) for s in ref), 1)
    return sum(a == b for a, b in pairs) / total


def turns(names: list[str], rounds: int):
    """The interleaved order: every name once a round, rotating; a settle pause before each."""
    for rnd in range(rounds if names else 0):
        k = rnd % len(names)
        for name in names[k:] + names[:k]:
            time.sleep(SETTLE_S)
            yield name


def run_workload(
    runners: dict, inputs: dict, workload: Workload, rounds: int, warmup: int, log=print
) -> dict[str, dict]:
    """Time every runner on one workload; returns {stack: record} (see module docstring)."""
    n = workload.new_tokens
    outputs: dict[str, list[list[int]]] = {}
    for name, r in runners.items():
        for i in range(max(warmup, 1)):
            out = r.generate(inputs[name], n)
            if i == 0:
                outputs[name] = out
        r.generate(inputs[name], 1)
        if r.encode:
            r.encode(inputs[name])
    times: dict[str, dict[str, list[float]]] = {k: {} for k in runners}
    for name in turns(list(runners), rounds):
        r, ids, t = runners[name], inputs[name], times[name]
        t.setdefault("total", []).append(timed_generate(r, ids, n)[0])
        t.setdefault("ttft", []).append(timed_generate(r, ids, 1)[0])
        if r.encode:
            t.setdefault("encoder", []).append(timed_encode(r, ids))
    records: dict[str, dict[str, Any]] = {}
    for name, t in times.items():
        total, ttft = t["total"], t["ttft"]
        decode = [(a - b) / max(n - 1, 1) for a, b in zip(total, ttft)]
        out = outputs[name]
        records[name] = {
            "total_ms": stats(total),
            "ms_per_token": stats([x / n for x in total]),
            "ttft_ms": stats(ttft),
            "decode_ms_per_token": stats(decode),
            "encoder_ms": stats(t["encoder"]) if "encoder" in t else None,
            "tokens_per_s": workload.batch * n / (statistics.median(total) / 1e3),
            "forced_length_ok": all(len(o) == n for o in out) and len(out) == workload.batch,
            "distinct_tokens": len({tok for o in out for tok in o}),
            "outputs_head": [o[:8] for o in out[:2]],
            "_outputs": out,
        }
        ms = records[name]["ms_per_token"]
        log(
            f"  {workload.name:<9} {name:<22} {ms['median']:8.3f} ms/token "
            f"(min {ms['min']:.3f}, max {ms['max']:.3f})"
        )
    return records


def run_sweep(
    runners: dict, inputs: dict, workload: Workload, rounds: int, warmup: int, log=print
) -> dict[str, dict]:
    """Throughput at one batch size: total time only, interleaved like `run_workload`."""
    n = workload.new_tokens
    for name, r in runners.items():
        for _ in range(max(warmup, 1)):
            r.generate(inputs[name], n)
    times: dict[str, list[float]] = {k: [] for k in runners}
    for name in turns(list(runners), rounds):
        times[name].append(timed_generate(runners[name], inputs[name], n)[0])
    records: dict[str, dict[str, Any]] = {}
    for name, t in times.items():
        tps = [workload.batch * n / (x / 1e3) for x in t]
        records[name] = {"total_ms": stats(t), "tokens_per_s": stats(tps)}
        log(f"  batch {workload.batch:<3} {name:<22} {statistics.median(tps):10.1f} tokens/s")
    return records


def logits_nll(logits, targets) -> float:
    """-sum log softmax(logits)[t, targets[t]] in float64: a window's (T, V) logits of the
    positions before each target (the teacher-forced score every stack's `nll` sums)."""
    import numpy as np

    x = np.asarray(logits, dtype=np.float64)
    top = x.max(axis=1, keepdims=True)
    logz = top[:, 0] + np.log(np.exp(x - top).sum(axis=1))
    return float((logz - x[np.arange(len(targets)), np.asarray(targets)]).sum())


# ---- memory ------------------------------------------------------------------------------------


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reset_peak_rss() -> bool:
    """Reset this process's VmHWM (Linux >= 4.0); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def rss_mb() -> float:
    return _status_kb("VmRSS") / 1024


def peak_rss_mb() -> float:
    return _status_kb("VmHWM") / 1024
