"""The physical floor of a decode step: the host's memory bandwidth and the bytes a stack reads
per step, so ms/token can be set against what the memory allows.

    bandwidth(threads)   STREAM-like: numpy copy, scale, add and a read-only sum over arrays
                         of 256 MB (far beyond any CPU cache), `threads` Python threads each on
                         its slice (numpy drops the GIL in these loops); GB/s per kernel, best
                         of `repeats`. STREAM's byte counts (copy 2, scale 2, add 3, sum 1 array
                         per element); `best_gbps` is the largest: the floor is a lower bound.
    step_bytes(files)    the bytes of the weights one decode step reads, from the stack's own
                         model files: ONNX graphs (the decoder's initializers), GGUF, safetensors
                         and CTranslate2's model.bin. Left out: tables read one row per token
                         (an embedding only gathered, position tables, rotary caches) and the
                         encoder of a translator (run once per request); a tied embedding that
                         is also the head is counted once. The KV cache is not counted (at
                         these workloads' lengths it is < 3 % of the weights).
    floor_ms = step_bytes / best bandwidth: the time one step takes if it does nothing but
    stream its weights once from memory. Every real shape's row shows its decode ms/token over
    this floor (report.markdown).
"""

from __future__ import annotations

import json
import struct
import threading
import time
from pathlib import Path

import numpy as np

ARRAY_MB = 256


def bandwidth(threads: int, array_mb: int = ARRAY_MB, repeats: int = 5) -> dict:
    """GB/s of copy / scale / add / sum (STREAM's bytes), best of `repeats`; `best_gbps`."""
    n = array_mb * 2**20 // 8
    a, b, c = (np.full(n, v, dtype=np.float64) for v in (1.0, 2.0, 0.0))
    parts = [slice(i * n // threads, (i + 1) * n // threads) for i in range(threads)]
    kernels = {
        "copy": (2, lambda s: np.copyto(c[s], a[s])),
        "scale": (2, lambda s: np.multiply(c[s], 3.0, out=b[s])),
        "add": (3, lambda s: np.add(a[s], b[s], out=c[s])),
        "sum": (1, lambda s: a[s].sum()),
    }
    out: dict = {"threads": threads, "array_mb": array_mb}
    for name, (arrays, fn) in kernels.items():
        best = float("inf")
        for _ in range(repeats):
            workers = [threading.Thread(target=fn, args=(s,)) for s in parts]
            t = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            best = min(best, time.perf_counter() - t)
        out[f"{name}_gbps"] = arrays * n * 8 / best / 1e9
    out["best_gbps"] = max(out[f"{k}_gbps"] for k in kernels)
    return out


# ---- bytes per decode step, from the stack's files ---------------------------------------------

ONNX_SIZES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}
ONNX_4BIT = (21, 22)  # UINT4 / INT4: half a byte each
# inputs read one row (or position) per token: (op, input index)
ROW_READS = {
    ("Gather", 0), ("GatherBlockQuantized", 0), ("GatherBlockQuantized", 2),
    ("GatherBlockQuantized", 3), ("RotaryEmbedding", 2), ("RotaryEmbedding", 3),
    ("GroupQueryAttention", 7), ("GroupQueryAttention", 8),
}  # fmt: skip


def _onnx_tensor_bytes(t) -> int:
    count = int(np.prod(t.dims)) if len(t.dims) else 1
    if t.data_type in ONNX_4BIT:
        return (count + 1) // 2
    return count * ONNX_SIZES.get(t.data_type, 4)


def onnx_step_bytes(graph: Path) -> int:
    """Initializer bytes of one ONNX graph (subgraphs included) less those only read a row at a
    time (ROW_READS)."""
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    sizes = {t.name: _onnx_tensor_bytes(t) for t in model.graph.initializer}
    uses: dict[str, set[bool]] = {}  # name -> {a row read?}

    def walk(g) -> None:
        for node in g.node:
            for i, name in enumerate(node.input):
                if name in sizes:
                    uses.setdefault(name, set()).add((node.op_type, i) in ROW_READS)
            for attr in node.attribute:
                if attr.g is not None and attr.g.node:
                    walk(attr.g)
                for sub in attr.graphs:
                    walk(sub)

    walk(model.graph)  # counted: initializers some node reads whole (unused ones are not read)
    return sum(size for name, size in sizes.items() if False in uses.get(name, ()))


GGML_BLOCKS = {  # type id: (elements per block, bytes per block)
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
    14: (256, 210), 15: (256, 292), 30: (1, 2),
}  # fmt: skip
GGUF_VALUE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_tensors(path: Path) -> dict[str, int]:
    """Tensor name -> bytes of a GGUF file (v2/v3), from its header."""
    with open(path, "rb") as f:
        magic, version = f.read(4), struct.unpack("<I", f.read(4))[0]
        if magic != b"GGUF" or version < 2:
            raise ValueError(f"{path}: not a GGUF v2+ file")
        n_tensors, n_kv = struct.unpack("<QQ", f.read(16))

        def string() -> str:
            (length,) = struct.unpack("<Q", f.read(8))
            return f.read(length).decode("utf-8", "replace")

        def skip(kind: int) -> None:
            if kind == 8:
                string()
            elif kind == 9:
                inner, count = struct.unpack("<IQ", f.read(12))
                for _ in range(count):
                    skip(inner)
            else:
                f.read(GGUF_VALUE[kind])

        for _ in range(n_kv):
            string()
            skip(struct.unpack("<I", f.read(4))[0])
        out = {}
        for _ in range(n_tensors):
            name = string()
            (dims,) = struct.unpack("<I", f.read(4))
            shape = struct.unpack(f"<{dims}Q", f.read(8 * dims))
            kind, _offset = struct.unpack("<IQ", f.read(12))
            per, size = GGML_BLOCKS.get(kind, (1, 4))
            out[name] = int(np.prod(shape)) // per * size
    return out


def gguf_step_bytes(path: Path) -> int:
    """A GGUF's tensors, less the embedding table when a separate output tensor is the head."""
    t = gguf_tensors(path)
    if "output.weight" in t:
        t.pop("token_embd.weight", None)
    return sum(t.values())


SAFETENSORS_SIZES = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I8": 1, "U8": 1,
                     "F64": 8, "BOOL": 1}  # fmt: skip


def _once_per_request(name: str) -> bool:
    """An encoder's weights (HF Marian: model.encoder.*; ours: enc.*; CTranslate2: encoder/*)."""
    return name.startswith(("model.encoder.", "encoder.", "enc.", "encoder/"))


def _position_table(name: str) -> bool:
    return any(k in name for k in ("embed_positions", "wpe", "pos.table", "position_encodings"))


def safetensors_step_bytes(path: Path) -> int:
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    sizes = {
        k: int(np.prod(v["shape"])) * SAFETENSORS_SIZES.get(v["dtype"], 4)
        for k, v in header.items()
        if k != "__metadata__"
    }
    head = any(k.endswith("lm_head.weight") for k in sizes)
    return sum(
        v
        for k, v in sizes.items()
        if not _once_per_request(k)
        and not _position_table(k)
        and not (head and ("embed_tokens" in k or k.endswith("wte.weight") or "shared" in k))
    )


CT2_SIZES = {0: 1, 1: 2, 2: 4, 3: 4, 4: 2, 5: 2}  # int8, int16, int32, float32, float16, bf16


def ct2_step_bytes(path: Path) -> int:
    """CTranslate2's model.bin (specs/model_spec.py _serialize): its decoder's variables, an
    embedding counted only when the output projection is an alias of it."""
    with open(path, "rb") as f:

        def string() -> str:
            (length,) = struct.unpack("<H", f.read(2))
            return f.read(length)[:-1].decode("utf-8")

        f.read(4)  # binary version
        string()  # spec name
        f.read(4)  # revision
        (count,) = struct.unpack("<I", f.read(4))
        sizes = {}
        for _ in range(count):
            name = string()
            (rank,) = struct.unpack("<B", f.read(1))
            f.read(4 * rank)
            _dtype, nbytes = struct.unpack("<BI", f.read(5))
            f.seek(nbytes, 1)
            sizes[name] = nbytes
        (n_alias,) = struct.unpack("<I", f.read(4))
        aliases = {}
        for _ in range(n_alias):
            alias = string()
            aliases[alias] = string()
    head = aliases.get("decoder/projection/weight", "decoder/projection/weight")
    return sum(
        v
        for k, v in sizes.items()
        if not _once_per_request(k)
        and not _position_table(k)
        and ("embeddings" not in k or k == head)
    )


def step_bytes(files: list[Path]) -> tuple[int, str] | None:
    """(bytes one decode step reads, from which file) for a stack's model files; None when no
    file is of a known kind. Several decoder graphs (Optimum's) share weights: the largest."""
    found: list[tuple[int, str]] = []
    onnx_files = [f for f in files if f.suffix == ".onnx"]
    decoders = [f for f in onnx_files if "decoder" in f.name] or onnx_files
    for f in decoders:
        found.append((onnx_step_bytes(f), f.name))
    for f in files:
        if f.suffix == ".gguf":
            found.append((gguf_step_bytes(f), f.name))
        elif f.suffix == ".safetensors":
            found.append((safetensors_step_bytes(f), f.name))
        elif f.name == "model.bin":
            found.append((ct2_step_bytes(f), f.name))
    if not found:
        return None
    if any(f.suffix == ".safetensors" for f in files):  # sharded: every file's tensors
        shards = [b for b, name in found if name.endswith(".safetensors")]
        return sum(shards), "*.safetensors"
    return max(found)
