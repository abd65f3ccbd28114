"""onnxruntime sessions: the one session factory (CPU provider), threads and spinning.

Packages decode on the CPU provider (runtime.api.cpu_only says why); PROVIDERS are the names a
caller may ask for.
"""

from __future__ import annotations

import os

import onnxruntime as ort

PROVIDERS = ("auto", "cpu", "cuda")
CPU = "CPUExecutionProvider"


# Which sessions' idle intra-op threads spin by default: the decoder's, called step after step,
# keeps its threads hot; the encoder's, called once per request, must not spin while the decoder
# works (on 2 cores, two spinning pools made decoding up to 2.3x slower: README design notes).
SPINNING = {"decoder": True, "encoder": False}


def session_options(threads: int | None, spinning: bool | None) -> ort.SessionOptions:
    """threads: intra-op threads (None: onnxruntime's default, one per physical core).
    spinning: let idle intra-op threads spin (None: off, unless a caller passes its default)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.inter_op_num_threads = 1
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads={threads} must be >= 1")
        so.intra_op_num_threads = threads
    spin = bool(spinning)
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    so.log_severity_level = 3  # errors only
    return so


def create_session(
    path: str | os.PathLike, threads: int | None = None, spinning: bool | None = None
) -> ort.InferenceSession:
    """A CPU-provider session over the graph at `path`."""
    return ort.InferenceSession(str(path), session_options(threads, spinning), providers=[CPU])
