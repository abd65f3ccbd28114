"""Sentence embeddings from an encoder package (family "encoder"): Embedder(pkg).embed(texts).

    texts -> tokenizer.json (cut at max_seq_length, special tokens included, as
             sentence-transformers) -> batches of similar length (sorted, at most batch_size
             rows, right-padded) -> encoder.onnx -> sentence_embedding (B, C), pooled (and
             normalised) inside the graph -> rows back in the texts' order

torch-free: onnxruntime, tokenizers and numpy. One Embedder may be shared by threads (a
session's run is thread-safe; the tokenizer is only read).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.files import sha256
from ..core.format import (
    CLASSIFIER_LOGITS,
    CONFIG_FILE,
    ENCODER_FAMILY,
    ENCODER_GRAPH,
    SENTENCE_EMBEDDING,
    TOKENIZER_FILE,
)
from ..core.schema import EncoderModel, EncoderPackageConfig, PackageError
from .aio import WorkerPool
from .package import _inside, read_json, resolve_package
from .session import SessionSettings
from .tokenizer import load_tokenizer

DEFAULT_BATCH = 32


@dataclass
class EncoderTokenizer:
    """The package's tokenizer, padding and truncation ours (not tokenizer.json's)."""

    tok: object  # tokenizers.Tokenizer
    max_len: int
    pad_id: int

    @classmethod
    def from_file(cls, path: Path, model: EncoderModel, pad_id: int) -> EncoderTokenizer:
        tok = load_tokenizer(path, model.vocab_size, f"model package {path.parent}")
        tok.no_padding()
        # the tokenizer's own truncation (its special tokens kept: [CLS] ... [SEP]); a text it
        # cut has overflowing parts
        tok.enable_truncation(model.max_seq_length)
        return cls(tok, model.max_seq_length, pad_id)

    def encodings(self, inputs: list, truncate: bool, what: str = "text") -> list:
        """tokenizers' Encodings of texts (or (query, document) pairs, cut longest first)."""
        encodings = self.tok.encode_batch(inputs)  # type: ignore[attr-defined]
        if not truncate:
            for i, e in enumerate(encodings):
                if e.overflowing:
                    raise ValueError(
                        f"{what} {i} is over the model's max_seq_length of {self.max_len} tokens "
                        "(truncate=True cuts it there, as sentence-transformers does)"
                    )
        return encodings

    def encode(self, texts: list[str], truncate: bool) -> list[list[int]]:
        return [e.ids for e in self.encodings(texts, truncate)]

    def encode_pairs(
        self, pairs: list[tuple[str, str]], truncate: bool
    ) -> tuple[list[list[int]], list[list[int]]]:
        """(ids, token type ids) of each pair, as a cross-encoder reads it."""
        found = self.encodings(pairs, truncate, "pair")
        return [e.ids for e in found], [e.type_ids for e in found]

    def pad(self, rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Right-padded (B, S) ids and mask."""
        S = max(len(r) for r in rows)
        ids = np.full((len(rows), S), self.pad_id, np.int64)
        mask = np.zeros((len(rows), S), np.int64)
        for b, r in enumerate(rows):
            ids[b, : len(r)], mask[b, : len(r)] = r, 1
        return ids, mask

    @staticmethod
    def pad_types(types: list[list[int]], S: int) -> np.ndarray:
        out = np.zeros((len(types), S), np.int64)
        for b, t in enumerate(types):
            out[b, : len(t)] = t
        return out

    def batch(self, texts: list[str], truncate: bool) -> tuple[np.ndarray, np.ndarray]:
        return self.pad(self.encode(texts, truncate))


def run_encoder(
    session, ids: np.ndarray, mask: np.ndarray, types: np.ndarray | None = None,
    output: str = SENTENCE_EMBEDDING,
) -> np.ndarray:  # fmt: skip
    """One batch through the graph: (B, S) -> (B, C) sentence embeddings (or, output
    CLASSIFIER_LOGITS, a cross-encoder's (B, num_labels) logits)."""
    types = np.zeros_like(ids) if types is None else types
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    return session.run([output], feed)[0]


def load_encoder_package(path: str | os.PathLike, verify: bool = True):
    """(folder, EncoderPackageConfig) of an encoder package, its files checked as
    runtime.package.load_package checks a translator's; a package of another family, or a
    folder that is not a package, is named as what it is."""
    folder = resolve_package(path)
    if not (folder / CONFIG_FILE).is_file():
        from .package import not_a_package

        what = not_a_package(folder) if folder.is_dir() else None
        if what is not None:
            raise PackageError(
                f"{folder} is {what}, not a model package: export it first "
                f"(edgeformer export {folder} PACKAGE_DIR)"
            )
        raise PackageError(f"model package not found: {folder} has no {CONFIG_FILE}")
    where = f"model package {folder}: {CONFIG_FILE}"
    data = read_json(folder / CONFIG_FILE, where)
    if isinstance(data, dict) and data.get("format") is None and "architectures" in data:
        raise PackageError(
            f"{folder} is a Hugging Face model folder, not a model package: export it first "
            f"(edgeformer export {folder} PACKAGE_DIR)"
        )
    config = EncoderPackageConfig.from_json(data, where)
    for name in [*config.files, *(f for v in config.variants.values() for f in v.file_names)]:
        _inside(folder, name)
        if name not in config.files:
            raise PackageError(f"model package {folder}: {name!r} is not in the checksum list")
    for name, digest in config.files.items():
        if not (folder / name).is_file():
            raise PackageError(f"model package {folder} is missing {name}")
        if verify and sha256(folder / name) != digest:
            raise PackageError(f"model package {folder}: checksum mismatch for {name}")
    return folder, config


def is_encoder_package(path: str | os.PathLike) -> bool:
    """A folder whose config.json says it is an encoder package (nothing else checked)."""
    try:
        data = read_json(resolve_package(path) / CONFIG_FILE, str(path))
    except (OSError, PackageError):
        return False
    return isinstance(data, dict) and data.get("family") == ENCODER_FAMILY


class Embedder:
    """Sentence embeddings: Embedder(pkg).embed(["a text", ...]) -> (N, C) float32.

    variant: one of the package's (fp32, int8, int4, int8-dynamic); async_workers: threads of
    embed_async's pool (runtime.aio, default 1); batch_size: rows per
    onnxruntime call (texts are sorted by length first, so a batch pads little); threads, or
    settings (SessionSettings: spinning, session options, providers) as Translator's."""

    classifier = False  # Reranker: a cross-encoder's package

    def __init__(
        self,
        package: str | os.PathLike,
        variant: str = "fp32",
        batch_size: int = DEFAULT_BATCH,
        threads: int | None = None,
        verify: bool = True,
        settings: SessionSettings | None = None,
        async_workers: int = 1,
    ):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1")
        self.path, self.config = load_encoder_package(package, verify)
        if bool(self.config.model.num_labels) != self.classifier:
            what = (
                "a sentence-embedding model, not a cross-encoder: use Embedder"
                if self.classifier
                else "a cross-encoder (a text pair -> scores): use Reranker"
            )
            raise PackageError(f"model package {self.path} is {what}")
        if variant not in self.config.variants:
            raise ValueError(
                f"variant {variant!r} is not in this package (it has "
                f"{', '.join(self.config.variants)})"
            )
        self.variant, self.batch_size = variant, batch_size
        self.pool = WorkerPool(async_workers)  # embed_async / score_async run there
        settings = settings or SessionSettings(threads=threads)
        graph = self.path / self.config.variants[variant].files[ENCODER_GRAPH]
        self.session = settings.session(graph, "encoder")
        self.tokenizer = EncoderTokenizer.from_file(
            self.path / TOKENIZER_FILE, self.config.model, self.config.pad_id
        )

    @property
    def dimension(self) -> int:
        return self.config.dimension

    @property
    def max_seq_length(self) -> int:
        return self.config.model.max_seq_length

    @property
    def normalized(self) -> bool:
        return self.config.model.normalize

    def embed(self, texts: list[str] | tuple[str, ...], truncate: bool = True) -> np.ndarray:
        """(len(texts), C) float32, row i the embedding of texts[i]. truncate: cut a text
        longer than max_seq_length tokens there (sentence-transformers' behaviour); False: such
        a text is a ValueError naming it."""
        texts = self.check_texts(texts)
        return self.embed_ids(self.tokenizer.encode(texts, truncate))

    async def embed_async(self, texts: list[str], truncate: bool = True) -> np.ndarray:
        """embed on the worker pool (runtime.aio), never on the event loop."""
        return await self.pool.run(self.embed, texts, truncate)

    def check_texts(self, texts: object) -> list[str]:
        """texts as a non-empty list of strings, or a ValueError naming the problem."""
        if isinstance(texts, str):
            raise ValueError("embed takes a list of texts; give [text] for one")
        if not isinstance(texts, list | tuple):
            raise ValueError(f"embed takes a list of texts, got a {type(texts).__name__}")
        if not texts:
            raise ValueError("embed got an empty list of texts")
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if bad:
            raise ValueError(f"text {bad[0]} is a {type(texts[bad[0]]).__name__}, not a string")
        return list(texts)

    def embed_ids(self, rows: list[list[int]]) -> np.ndarray:
        """Token ids (EncoderTokenizer.encode's) -> (N, C) float32: sorted by length, batched
        by batch_size, returned in the given order."""
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        out = np.empty((len(rows), self.dimension), np.float32)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            ids, mask = self.tokenizer.pad([rows[i] for i in chunk])
            out[chunk] = run_encoder(self.session, ids, mask)
        if not np.isfinite(out).all():
            raise FloatingPointError("the encoder gave non-finite embeddings")
        return out


class Reranker(Embedder):
    """A cross-encoder (BertForSequenceClassification, bge-reranker's XLMRoberta...): each
    (query, document) pair read together -> its classifier's logits, as sentence-transformers'
    CrossEncoder.predict without an activation (one label: a relevance logit; apply a sigmoid
    for a probability)."""

    classifier = True

    def score(
        self, query: str, documents: list[str] | tuple[str, ...], truncate: bool = True
    ) -> np.ndarray:
        """(len(documents),) float32 for a one-label model, else (len(documents), labels); a
        pair over max_seq_length is cut longest first (truncate) or a ValueError."""
        if not isinstance(query, str):
            raise ValueError(f"query must be a string, got a {type(query).__name__}")
        docs = self.check_texts(documents)
        ids, types = self.tokenizer.encode_pairs([(query, d) for d in docs], truncate)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.empty((len(ids), self.config.model.num_labels), np.float32)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            x, mask = self.tokenizer.pad([ids[i] for i in chunk])
            t = self.tokenizer.pad_types([types[i] for i in chunk], x.shape[1])
            out[chunk] = run_encoder(self.session, x, mask, t, CLASSIFIER_LOGITS)
        if not np.isfinite(out).all():
            raise FloatingPointError("the cross-encoder gave non-finite scores")
        return out[:, 0] if out.shape[1] == 1 else out

    async def score_async(
        self, query: str, documents: list[str], truncate: bool = True
    ) -> np.ndarray:
        """score on the worker pool (runtime.aio), never on the event loop."""
        return await self.pool.run(self.score, query, documents, truncate)


def encoder_info(package: str | os.PathLike) -> str:
    """`edgeformer info` of an encoder package: the model, its pooling, each variant's files
    and what export measured (its files checked as load does)."""
    path, config = load_encoder_package(package)
    m = config.model
    kind = (f"cross-encoder, {m.num_labels} label{'s' if m.num_labels != 1 else ''} (Reranker)"
            if m.num_labels else f"sentence embeddings of {m.hidden_size} dims (Embedder), "
            f"{m.pooling} pooling{', L2-normalised' if m.normalize else ''}")  # fmt: skip
    lines = [
        f"{path}: encoder package (format {config.format_version}), {kind}",
        f"model: {m.architecture} ({config.source.get('architecture', '?')}), "
        f"{m.num_hidden_layers} layers, {m.hidden_size} wide, {m.num_attention_heads} heads, "
        f"FFN {m.intermediate_size} {m.hidden_act}, vocabulary {m.vocab_size}, texts cut at "
        f"{m.max_seq_length} tokens",
        "variants:",
    ]
    for name, v in config.variants.items():
        size = sum((path / f).stat().st_size for f in v.file_names) / 1e6
        got = v.measured
        measured = (f"; lowest cosine {got['min_cosine']:.6f}, {got['ms_per_text']:.2f} ms/text"
                    if "min_cosine" in got and "ms_per_text" in got else "")  # fmt: skip
        lines.append(f"  {name}: {size:.1f} MB{measured} ({v.description})")
    return "\n".join(lines)
