"""One stack in a process of its own, driven over pipes by the benchmark (`--isolation process`).

Engines sharing one process on 2 cores slow each other down: a thread pool left spinning or
parked by one (onnxruntime's intra-op pool, CTranslate2's and PyTorch's OpenMP) changed another's
time by up to 5x (benchmarks/README.md). Each stack is therefore loaded in its own process, as
in a deployment; the parent still interleaves the rounds, sending one call at a time.

Protocol: the child prints one JSON line when loaded ({"files": [...], "encode": bool,
"rss_delta_mb": peak RSS growth while loading}), then
answers each request line {"op": "generate", "ids": [[...]], "n": N} or {"op": "encode", "ids":
...} with {"ms": time of the call measured in the child, "out": token lists or null}. Failures
are {"error": "..."}. Only these lines go to the real stdout; anything a library prints goes
to stderr.

    python -m edgeformer.benchmarks.worker '{"stack": ..., "shape": ..., "cfg": {...}, ...}'
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .measure import peak_rss_mb, rss_mb
from .memory import runner_from_spec
from .stacks import Runner


def serve(spec: dict) -> int:
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints from libraries go to stderr, not into the protocol
    sys.stdout = sys.stderr

    def reply(obj: dict) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    try:
        from .cli import _quiet_libraries

        _quiet_libraries()
        base = rss_mb()
        runner = runner_from_spec(spec)
    except Exception as e:
        reply({"error": f"{type(e).__name__}: {e}"})
        return 1
    files = [str(f) for f in runner.files]
    reply(
        {"files": files, "encode": runner.encode is not None, "rss_delta_mb": peak_rss_mb() - base}
    )
    for line in sys.stdin:
        req = json.loads(line)
        try:
            fn = runner.generate if req["op"] == "generate" else runner.encode
            args = (req["ids"], req["n"]) if req["op"] == "generate" else (req["ids"],)
            t = time.perf_counter()
            out = fn(*args)
            ms = (time.perf_counter() - t) * 1e3
            reply({"ms": ms, "out": out if req["op"] == "generate" else None})
        except Exception as e:
            reply({"error": f"{type(e).__name__}: {e}"})
    return 0


class Worker:
    """The parent's handle on a stack's process; `runner()` gives a measure-compatible Runner."""

    def __init__(self, spec: dict):
        cmd = [sys.executable, "-m", "edgeformer.benchmarks.worker", json.dumps(spec)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.hello = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited with code {self.proc.wait()}")
        msg = json.loads(line)
        if "error" in msg:
            raise RuntimeError(msg["error"])
        return msg

    def call(self, op: str, ids: list[list[int]], n: int | None = None) -> tuple[float, object]:
        self.proc.stdin.write(json.dumps({"op": op, "ids": ids, "n": n}) + "\n")
        self.proc.stdin.flush()
        msg = self._read()
        return msg["ms"], msg["out"]

    @property
    def rss_delta_mb(self) -> float:
        return self.hello["rss_delta_mb"]

    def runner(self) -> Runner:
        return Runner(
            generate=lambda ids, n: self.call("generate", ids, n)[1],
            encode=(lambda ids: self.call("encode", ids)[1]) if self.hello["encode"] else None,
            files=[Path(f) for f in self.hello["files"]],
            timed_generate=lambda ids, n: self.call("generate", ids, n),
            timed_encode=lambda ids: self.call("encode", ids),
            close=self.close,
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


if __name__ == "__main__":
    sys.exit(serve(json.loads(sys.argv[1])))
