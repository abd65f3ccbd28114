"""onnxruntime sessions: provider choice (auto / cpu / cuda), threads and spinning.

`auto` takes CUDA only when the CUDA provider really runs: `get_available_providers()` lists
CUDA whenever onnxruntime-gpu is installed, even without the CUDA libraries, and such a session
silently runs on CPU, so the created session's `get_providers()` decides.
"""

from __future__ import annotations

import os

import onnxruntime as ort

PROVIDERS = ("auto", "cpu", "cuda")
CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"


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
    so.log_severity_level = 3  # errors only (a missing CUDA library is reported by us)
    return so


def create_session(
    path: str | os.PathLike,
    provider: str = "auto",
    threads: int | None = None,
    spinning: bool | None = None,
) -> tuple[ort.InferenceSession, str]:
    """(session, "cuda" | "cpu"). provider="cuda" that cannot really run raises ValueError."""
    if provider not in PROVIDERS:
        raise ValueError(f"provider={provider!r}, expected one of {PROVIDERS}")
    so = session_options(threads, spinning)
    if provider != "cpu" and CUDA in ort.get_available_providers():
        sess = ort.InferenceSession(str(path), so, providers=[CUDA, CPU])
        if CUDA in sess.get_providers():
            return sess, "cuda"
    if provider == "cuda":
        raise ValueError(
            "provider 'cuda' was asked for but the CUDA execution provider does not run here "
            f"(onnxruntime {ort.__version__}, available: {ort.get_available_providers()}); "
            "install edgeformer[gpu] (onnxruntime-gpu, not beside onnxruntime) with CUDA and "
            "cuDNN, or use --provider cpu"
        )
    return ort.InferenceSession(str(path), so, providers=[CPU]), "cpu"
