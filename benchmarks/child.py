"""The stack's own process: every child process `edgeformer bench` starts is this module.

    python -m edgeformer.benchmarks.child serve JOB    a stack's worker (--isolation process)
    python -m edgeformer.benchmarks.child memory JOB   load, run each workload once, peak RSS
    python -m edgeformer.benchmarks.child floor JOB    the fp32 step's weight-streaming floor
    python -m edgeformer.benchmarks.child build JOB    a stack's files, in its own environment
    python -m edgeformer.benchmarks.child overhead JOB W1's time outside session.run (--profile)
    python -m edgeformer.benchmarks.child bandwidth JOB the host's memory bandwidth (floor.py)

JOB is a `settings.Job` as JSON. Each child imports only what its stack needs (no torch for our
runtime), as a deployment of that stack would. It runs under the stack's interpreter
(`stacks.python_for`): the bench's own, or Optimum's environment for the optimum-* stacks
(benchmarks/optimum_env.py), which has this same module; `build` and `overhead` are there for
such stacks, whose files and profile cannot be made in the bench's process.

Why a process per stack: engines sharing one process on 2 cores slow each other down; a thread
pool left spinning or parked by one (onnxruntime's intra-op pool, CTranslate2's and PyTorch's
OpenMP) changed another's time by up to 5x (benchmarks/README.md). The parent still interleaves
the rounds, sending one call at a time.

Worker protocol: the child prints one JSON line when loaded ({"files": [...], "encode": bool,
"start_rss_mb", "loaded_rss_mb", "rss_delta_mb": peak RSS growth while loading}), then answers
each request line {"op": "generate", "ids": [[...]], "n": N}, {"op": "encode", "ids": ...},
{"op": "file", "ids", "n", "batching": files.FileBatching fields} (Runner.translate_file) with
{"ms": time of the call measured in the child, "out": token lists or null}, and {"op": "rss"}
with {"rss_mb", "peak_rss_mb"}. The frontier's text calls (runners.TextPath; the hello line
says "text": true): {"op": "texts", "texts", "beams"} -> {"ms", "out": translations},
{"op": "sentences", "texts"} -> {"ms": [ms of each text alone], "out": translations},
{"op": "text_file", "src", "out", "batching"} -> {"ms"}. An LM's teacher-forced score (bench
--hf; the hello line says "nll": true): {"op": "nll", "windows"} -> {"ms", "out": {"nll",
"tokens"}}. Failures are {"error": "..."}. Only
these lines go to the real stdout; anything a library prints goes to stderr.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .files import FileBatching
from .measure import peak_rss_mb, rss_mb
from .runners import Runner, env_threads, quiet_libraries
from .settings import Job

MODULE = "edgeformer.benchmarks.child"


def load_in_this_process(job: Job) -> Runner:
    """The stack a job names, loaded here from the files the parent built."""
    from . import artifacts
    from .stacks import for_job, get_stack

    artifacts.READ_ONLY = True
    return for_job(get_stack(job.stack), job).load(job)


def serve(job: Job) -> int:
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints from libraries go to stderr, not into the protocol
    sys.stdout = sys.stderr

    def reply(obj: dict) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    try:
        quiet_libraries()
        base = rss_mb()
        runner = load_in_this_process(job)
    except Exception as e:
        reply({"error": f"{type(e).__name__}: {e}"})
        return 1
    reply(
        {
            "files": [str(f) for f in runner.files],
            "encode": runner.encode is not None,
            "file": runner.translate_file is not None,
            "text": runner.sentences_ms is not None,
            "nll": runner.nll is not None,
            "start_rss_mb": base,
            "loaded_rss_mb": rss_mb(),
            "rss_delta_mb": peak_rss_mb() - base,
        }
    )
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["op"] == "rss":
                reply({"rss_mb": rss_mb(), "peak_rss_mb": peak_rss_mb()})
                continue
            if req["op"] == "nll":
                if runner.nll is None:
                    raise RuntimeError("this stack has no teacher-forced scoring")
                t = time.perf_counter()
                scored = runner.nll(req["windows"])
                reply({"ms": (time.perf_counter() - t) * 1e3, "out": scored})
                continue
            if req["op"] in ("texts", "sentences", "text_file"):
                reply(_text_call(runner, req))
                continue
            if req["op"] == "file":
                if runner.translate_file is None:
                    raise RuntimeError("this stack has no batch-translation path")
                batching = FileBatching(**req["batching"])
                ms = runner.translate_file(req["ids"], req["n"], batching)
                reply({"ms": ms, "out": None})
                continue
            fn = runner.generate if req["op"] == "generate" else runner.encode
            if fn is None:
                raise RuntimeError(f"this stack has no {req['op']!r}")
            args = (req["ids"], req["n"]) if req["op"] == "generate" else (req["ids"],)
            t = time.perf_counter()
            out = fn(*args)
            ms = (time.perf_counter() - t) * 1e3
            reply({"ms": ms, "out": out if req["op"] == "generate" else None})
        except Exception as e:
            reply({"error": f"{type(e).__name__}: {e}"})
    return 0


def _text_call(runner: Runner, req: dict) -> dict:
    """One of the frontier's text calls (see the module docstring)."""
    if not (runner.translate_texts and runner.sentences_ms and runner.text_file_ms):
        raise RuntimeError("this stack has no text path (runners.TextPath)")
    if req["op"] == "texts":
        t = time.perf_counter()
        out = runner.translate_texts(req["texts"], req["beams"])
        return {"ms": (time.perf_counter() - t) * 1e3, "out": out}
    if req["op"] == "sentences":
        ms, out = runner.sentences_ms(req["texts"])
        return {"ms": ms, "out": out}
    batching = FileBatching(**req["batching"])
    return {"ms": runner.text_file_ms(Path(req["src"]), Path(req["out"]), batching)}


def memory(job: Job) -> int:
    """Peak RSS of a fresh process that loads the stack and runs each workload once."""
    from .stacks import for_job, get_stack, inputs_for

    quiet_libraries()
    base = rss_mb()
    runner = load_in_this_process(job)
    loaded = rss_mb()
    stack = for_job(get_stack(job.stack), job)
    for batch, length, n in job.workloads:
        runner.generate(inputs_for(stack, job.shape, batch, length), n)
    out = {"peak_rss_mb": peak_rss_mb(), "start_rss_mb": base, "loaded_rss_mb": loaded}
    print(json.dumps(out), flush=True)
    return 0


def floor(job: Job) -> int:
    """The weight-streaming floor of the job's package's fp32 decoder (profile.floor_ms), in a
    process with no other onnxruntime session."""
    from ..runtime.package import load_package
    from . import artifacts, profile
    from .stacks import for_job, get_stack, package_of

    quiet_libraries()
    artifacts.READ_ONLY = True
    path = package_of(for_job(get_stack(job.stack), job), job)
    graph = load_package(path, verify=False).file("decoder", "fp32")
    n_bytes = profile.linear_weight_bytes(graph)
    ms = profile.floor_ms(n_bytes, job.shape.cfg.d_model, job.threads)
    print(json.dumps({"weights_mb": n_bytes / 1e6, "floor_ms": ms}), flush=True)
    return 0


def bandwidth(job: Job) -> int:
    """floor.bandwidth with the run's threads, in a process holding no model."""
    from .floor import bandwidth as measure_bandwidth

    print(json.dumps(measure_bandwidth(job.threads)), flush=True)
    return 0


def build(job: Job) -> int:
    """Build the stack's files in this (its own) environment; files it shares with the other
    stacks (the HF model) were built by the bench's environment and are only read."""
    from . import artifacts
    from .stacks import for_job, get_stack

    quiet_libraries()
    artifacts.OWN_ENV = True
    for_job(get_stack(job.stack), job).build(job)
    print(json.dumps({"built": job.stack}), flush=True)
    return 0


def overhead(job: Job) -> int:
    """`profile.python_overhead` of the stack on W1, after one warm-up call."""
    from . import profile
    from .shapes import WORKLOADS
    from .stacks import for_job, get_stack, inputs_for

    quiet_libraries()
    runner = load_in_this_process(job)
    w = WORKLOADS["W1"]
    ids = inputs_for(for_job(get_stack(job.stack), job), job.shape, w.batch, w.src_len)
    runner.generate(ids, w.new_tokens)  # warm-up
    print(json.dumps(profile.python_overhead(runner, ids, w.new_tokens)), flush=True)
    return 0


# ---- the parent's side -------------------------------------------------------------------------


def _command(mode: str, job: Job) -> list[str]:
    """The child's command line, under the stack's interpreter (`stacks.python_for`)."""
    from .stacks import get_stack, python_for

    python = python_for(get_stack(job.stack), job.settings)
    return [python, "-m", MODULE, mode, job.to_json()]


class Worker:
    """The parent's handle on a stack's process; `runner()` gives a measure-compatible Runner."""

    def __init__(self, job: Job):
        self.proc = subprocess.Popen(
            _command("serve", job), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=env_threads(job.threads),
        )  # fmt: skip
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both PIPE
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.hello = self._read()

    def _read(self) -> dict:
        line = self.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited with code {self.proc.wait()}")
        msg = json.loads(line)
        if "error" in msg:
            raise RuntimeError(msg["error"])
        return msg

    def _send(self, req: dict) -> dict:
        self.stdin.write(json.dumps(req) + "\n")
        self.stdin.flush()
        return self._read()

    def call(self, op: str, ids: list[list[int]], n: int | None = None) -> tuple[float, Any]:
        msg = self._send({"op": op, "ids": ids, "n": n})
        return msg["ms"], msg["out"]

    def translate_file(self, ids: list[list[int]], n: int, batching: FileBatching) -> float:
        req = {"op": "file", "ids": ids, "n": n, "batching": dataclasses.asdict(batching)}
        return self._send(req)["ms"]

    def translate_texts(self, texts: list[str], beams: int) -> list[str]:
        return self._send({"op": "texts", "texts": texts, "beams": beams})["out"]

    def sentences_ms(self, texts: list[str]) -> tuple[list[float], list[str]]:
        msg = self._send({"op": "sentences", "texts": texts})
        return msg["ms"], msg["out"]

    def text_file_ms(self, src: Path, out: Path, batching: FileBatching) -> float:
        req = {"op": "text_file", "src": str(src), "out": str(out)}
        return self._send({**req, "batching": dataclasses.asdict(batching)})["ms"]

    def nll(self, windows: list[list[int]]) -> dict:
        return self._send({"op": "nll", "windows": windows})["out"]

    def rss(self) -> dict:
        """The worker's current and peak RSS (MB)."""
        return self._send({"op": "rss"})

    def memory(self) -> dict:
        """RSS after loading (this process holds only this stack), growth while loading."""
        keys = ("start_rss_mb", "loaded_rss_mb", "rss_delta_mb")
        return {k: self.hello[k] for k in keys if k in self.hello}

    def runner(self) -> Runner:
        return Runner(
            generate=lambda ids, n: self.call("generate", ids, n)[1],
            encode=(lambda ids: self.call("encode", ids)[1]) if self.hello["encode"] else None,
            files=[Path(f) for f in self.hello["files"]],
            timed_generate=lambda ids, n: self.call("generate", ids, n),
            timed_encode=lambda ids: self.call("encode", ids),
            close=self.close,
            rss=self.rss,
            translate_file=self.translate_file if self.hello.get("file") else None,
            nll=self.nll if self.hello.get("nll") else None,
            **(self._text_calls() if self.hello.get("text") else {}),
        )

    def _text_calls(self) -> dict:
        return {
            "translate_texts": self.translate_texts,
            "sentences_ms": self.sentences_ms,
            "text_file_ms": self.text_file_ms,
        }

    def close(self) -> None:
        if self.proc.poll() is None:
            self.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def child_peak_rss(job: Job, timeout: float = 600) -> dict:
    """Run `memory` in a fresh process; its JSON result, or an error."""
    return _child_json("memory", job, timeout)


def child_floor(job: Job, timeout: float = 600) -> dict:
    """Run `floor` in a fresh process; its JSON result, or an error."""
    return _child_json("floor", job, timeout)


def child_bandwidth(job: Job, timeout: float = 300) -> dict:
    """Run `bandwidth` in a fresh process of the bench's interpreter."""
    return _child_json("bandwidth", job.with_stack("edgeformer-fp32"), timeout)


def child_build(job: Job, timeout: float = 1800) -> None:
    """Run `build` in the stack's environment; raises with the child's last line on failure."""
    out = _child_json("build", job, timeout)
    if "error" in out:
        raise RuntimeError(out["error"])


def child_overhead(job: Job, timeout: float = 600) -> dict:
    """Run `overhead` in a fresh process of the stack's environment."""
    return _child_json("overhead", job, timeout)


def _child_json(mode: str, job: Job, timeout: float) -> dict:
    """Run a one-shot mode in a fresh process: the last JSON line it prints, or an error."""
    try:
        p = subprocess.run(
            _command(mode, job), capture_output=True, text=True, timeout=timeout,
            env=env_threads(job.threads),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {p.returncode}: {tail[0][:200]}"}
    return json.loads(lines[-1])


def main(argv: list[str]) -> int:
    mode, job = argv[0], Job.from_json(argv[1])
    modes = {"serve": serve, "memory": memory, "floor": floor, "build": build}
    return {**modes, "overhead": overhead, "bandwidth": bandwidth}[mode](job)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
