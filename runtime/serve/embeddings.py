"""/v1/embeddings over an encoder package (OpenAI's embeddings API).

    {"model": NAME, "input": "a text" | ["text", ...], "encoding_format": "float" | "base64"}
    -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}],
        "model": NAME, "usage": {"prompt_tokens": n, "total_tokens": n}}

base64: each vector's float32 bytes (little-endian), as OpenAI's. A text longer than the
model's max_seq_length is cut there when the server runs with --truncate, else a 400 naming
the input, as OpenAI's answers an over-long input. Token-id inputs and `dimensions` other than
the model's are refused by name.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

import numpy as np

from ..embed import Embedder
from .protocol import APIError, bad

EMBEDDING_FIELDS = {"model", "input", "encoding_format", "dimensions", "user"}
ENCODING_FORMATS = ("float", "base64")
MAX_EMBEDDING_INPUTS = 2048  # OpenAI's bound on a request's inputs


class ServedEmbedder:
    """An encoder package served on /v1/embeddings (a request's texts as one call)."""

    kind = "embed"

    def __init__(self, name: str, embedder: Embedder, truncate: bool = False):
        self.name, self.embedder, self.truncate = name, embedder, truncate

    @property
    def variant(self) -> str:
        return self.embedder.variant

    def prepare(self, body: Mapping) -> tuple[list[list[int]], str]:
        """(each input's token ids, the encoding format); a 400 naming the field otherwise."""
        for key in body:
            if key not in EMBEDDING_FIELDS:
                raise bad(f"unrecognized request argument: {key}", key)
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if isinstance(texts, list) and texts and all(isinstance(t, int) for t in texts):
            raise bad("input as token ids is not supported: give texts", "input")
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise bad("input must be a text or a non-empty list of texts", "input")
        if len(texts) > MAX_EMBEDDING_INPUTS:
            raise bad(f"input has {len(texts)} texts: at most {MAX_EMBEDDING_INPUTS}", "input")
        fmt = body.get("encoding_format") or "float"
        if fmt not in ENCODING_FORMATS:
            raise bad(f"encoding_format must be one of {ENCODING_FORMATS}", "encoding_format")
        dims = body.get("dimensions")
        if dims is not None and dims != self.embedder.dimension:
            raise bad(f"dimensions={dims!r}: this model gives {self.embedder.dimension} "
                      "(shortened embeddings are not supported)", "dimensions")  # fmt: skip
        try:
            rows = self.embedder.tokenizer.encode(texts, self.truncate)
        except ValueError as e:
            raise bad(f"input: {e} (the server truncates with --truncate)", "input") from None
        return rows, fmt

    def embed(self, rows: list[list[int]]) -> np.ndarray:
        return self.embedder.embed_ids(rows)

    def response(self, vectors: np.ndarray, rows: list[list[int]], fmt: str) -> dict:
        def encoded(v: np.ndarray) -> list[float] | str:
            if fmt == "base64":
                return base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")
            return v.tolist()

        tokens = sum(map(len, rows))
        return {
            "object": "list", "model": self.name,
            "data": [{"object": "embedding", "index": i, "embedding": encoded(v)}
                     for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }  # fmt: skip

    def card(self) -> dict:
        return {"dimensions": self.embedder.dimension,
                "normalized": self.embedder.normalized}  # fmt: skip

    def close(self) -> None:
        pass


__all__ = ["APIError", "ServedEmbedder"]
