"""A GGUF file, read with the format's own reader (gguf-py's GGUFReader), checked before use.

    GGUFFile(path).metadata("llama.block_count")    -> 30
    GGUFFile(path).tensors["blk.0.attn_q.weight"]   -> GGUFTensor(type Q4_1, shape (576, 576))
    GGUFFile(path).dequantized(name)                -> float32 (N, K), as gguf-py dequantizes

Shapes are PyTorch's: GGUF lists dimensions innermost first (ne0 = K, the row length), so a
(K, N) GGUF matrix is the (N, K) weight of nn.Linear, each row `row_bytes` of blocks. Every
tensor's extent is checked against the file before any is read, so a lying header is an error
naming the tensor, never a read past the end.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.metadata import version as _version
from pathlib import Path

import numpy as np

GGUF_MAGIC = b"GGUF"
MAX_METADATA_ITEMS = 4_000_000  # an array longer than any vocabulary's (Gemma's is 262,144)


def _gguf():
    try:
        import gguf
    except ImportError:
        raise ImportError(
            "reading a GGUF file needs the `gguf` package (pip install gguf, or the train "
            "extra: pip install '.[train]')"
        ) from None
    return gguf


def is_gguf_file(path: str | os.PathLike) -> bool:
    """A file that starts with GGUF's magic bytes."""
    p = Path(path)
    if not p.is_file():
        return False
    with open(p, "rb") as f:
        return f.read(4) == GGUF_MAGIC


class HostileTensor(ValueError):
    """A tensor header that does not fit the file (its type, its blocks, its extent)."""


def _checked_reader(gguf):
    """gguf-py's GGUFReader, each tensor's header checked before it maps the data: an unknown
    type id, a row that is not whole blocks, or an extent past the end of the file is an error
    naming the tensor (gguf-py's own: a reshape of a short memory map)."""

    class CheckedReader(gguf.GGUFReader):  # type: ignore[name-defined]
        def _build_tensors(self, start_offs, fields):
            size = len(self.data)
            for field in fields:
                _, name_data, _, dims, raw_dtype, offset = field.parts
                name = bytes(name_data).decode("utf-8", "replace")
                try:
                    kind = gguf.GGMLQuantizationType(int(raw_dtype[0]))
                except ValueError:
                    known = f"0..{max(int(t) for t in gguf.GGMLQuantizationType)}"
                    raise HostileTensor(
                        f"tensor {name!r} has GGML type id {int(raw_dtype[0])}, not one gguf "
                        f"knows ({known})"
                    ) from None
                block, type_bytes = gguf.GGML_QUANT_SIZES[kind]
                shape = tuple(int(d) for d in reversed(dims.tolist()))
                if not shape or any(d <= 0 for d in shape) or shape[-1] % block:
                    raise HostileTensor(
                        f"tensor {name!r} of shape {shape} does not fit {kind.name} blocks of "
                        f"{block}"
                    )
                end = int(start_offs) + int(offset[0])
                end += int(np.prod(shape, dtype=np.int64)) // block * type_bytes
                if end > size:
                    raise HostileTensor(
                        f"tensor {name!r} ends past the end of the file ({end:,} > {size:,} "
                        "bytes: truncated, or a header that lies)"
                    )
            return super()._build_tensors(start_offs, fields)

    return CheckedReader


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of the file: its GGML type's name (Q4_1, F32, ...), PyTorch shape, and its
    raw bytes, (rows, row_bytes) for a matrix (a view into the file: not copied)."""

    name: str
    type_name: str
    shape: tuple[int, ...]
    raw: np.ndarray

    @property
    def rows(self) -> int:
        return int(np.prod(self.shape[:-1])) if len(self.shape) > 1 else 1


class GGUFFile:
    """The file's metadata (key -> Python value) and tensors (name -> GGUFTensor)."""

    def __init__(self, path: str | os.PathLike):
        gguf = _gguf()
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"GGUF file not found: {self.path}")
        if not is_gguf_file(self.path):
            raise ValueError(f"{self.path} is not a GGUF file (no GGUF magic)")
        try:
            reader = _checked_reader(gguf)(self.path, "r")
        except HostileTensor as e:
            raise ValueError(f"{self.path}: {e}") from None
        except (ValueError, IndexError, OSError, KeyError, OverflowError, MemoryError) as e:
            raise ValueError(f"{self.path}: not a readable GGUF file ({e})") from None
        self._reader = reader
        self.version = int(reader.fields["GGUF.version"].contents())
        self._meta: dict[str, object] = {}
        for key, field in reader.fields.items():
            if key.startswith("GGUF."):
                continue
            if len(field.data) > MAX_METADATA_ITEMS:
                raise ValueError(
                    f"{self.path}: metadata {key!r} has {len(field.data):,} items (at most "
                    f"{MAX_METADATA_ITEMS:,})"
                )
            self._meta[key] = field.contents()
        self.tensors = self._read_tensors(gguf)

    def _read_tensors(self, gguf) -> dict[str, GGUFTensor]:
        size = self.path.stat().st_size
        out: dict[str, GGUFTensor] = {}
        for t in self._reader.tensors:
            kind = gguf.GGMLQuantizationType(int(t.tensor_type))
            block, type_bytes = gguf.GGML_QUANT_SIZES[kind]
            dims = tuple(int(d) for d in reversed(t.shape.tolist()))  # PyTorch order
            if any(d <= 0 for d in dims) or dims[-1] % block:
                raise ValueError(
                    f"{self.path}: tensor {t.name!r} of shape {dims} does not fit {kind.name} "
                    f"blocks of {block}"
                )
            row_bytes = dims[-1] // block * type_bytes
            n_bytes = int(np.prod(dims[:-1], dtype=np.int64)) * row_bytes
            if t.data_offset + n_bytes > size:
                raise ValueError(
                    f"{self.path}: tensor {t.name!r} ends past the end of the file "
                    f"({t.data_offset + n_bytes:,} > {size:,} bytes)"
                )
            if t.name in out:
                raise ValueError(f"{self.path}: tensor {t.name!r} is listed twice")
            raw = np.asarray(t.data).view(np.uint8).reshape(-1, row_bytes)
            out[t.name] = GGUFTensor(t.name, kind.name, dims, raw)
        return out

    def metadata(self, key: str, default: object = ...) -> object:
        """A metadata value; a missing key without a default is an error naming it."""
        if key in self._meta:
            return self._meta[key]
        if default is ...:
            raise ValueError(f"{self.path}: GGUF metadata has no {key!r}")
        return default

    def keys(self) -> list[str]:
        return list(self._meta)

    def dequantized(self, name: str) -> np.ndarray:
        """The tensor as float32 in its PyTorch shape, as gguf-py dequantizes it (what
        transformers and llama.cpp compute with)."""
        gguf = _gguf()
        t = self.tensors[name]
        kind = gguf.GGMLQuantizationType[t.type_name]
        try:
            values = gguf.quants.dequantize(t.raw, kind)
        except NotImplementedError:
            raise ValueError(
                f"{self.path}: tensor {name!r} is {t.type_name}, which gguf "
                f"{_version('gguf')} cannot dequantize"
            ) from None
        values = np.asarray(values, dtype=np.float32).reshape(t.shape)
        if not np.isfinite(values).all():
            raise ValueError(f"{self.path}: tensor {name!r} holds NaN or infinite values")
        return values
