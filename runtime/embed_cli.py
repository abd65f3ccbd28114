"""`edgeformer embed PACKAGE TEXT... | --input FILE [--output X.npy | X.jsonl]`: sentence
embeddings of an encoder package.

Texts come from the arguments or the lines of --input (UTF-8, one text a line; blank lines are
texts too, so row i is line i). Output: a .npy file (an (N, C) float32 array), a .jsonl file
(one {"index", "text", "embedding"} object a line), or, without --output, JSONL on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from .embed import DEFAULT_BATCH, Embedder
from .session import check_threads

OUTPUT_KINDS = (".npy", ".jsonl")


def add_arguments(p: argparse.ArgumentParser, command: str = "embed") -> None:
    p.add_argument("package", help="an encoder package folder (edgeformer export of a BERT-like "
                   "Hugging Face folder)")  # fmt: skip
    p.add_argument("texts", nargs="*", help="texts to embed (default: the lines of --input)")
    p.add_argument(
        "--input",
        metavar="FILE",
        help="a UTF-8 file, one text a line (default: none; the TEXT arguments)",
    )
    p.add_argument("--output", metavar="FILE", help="X.npy (float32 (N, C)) or X.jsonl "
                   "(default: none; JSONL on stdout)")  # fmt: skip
    p.add_argument(
        "--variant", default="fp32", help="which of the package's variants runs (default: fp32)"
    )
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="onnxruntime intra-op threads (default: one per core)")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, metavar="N",
                   help=f"texts per onnxruntime call (default: {DEFAULT_BATCH})")  # fmt: skip
    p.add_argument(
        "--no-truncate", action="store_true",
        help="a text over the model's max_seq_length is an error, not cut there (default: "
        "off: cut there, as sentence-transformers)",
    )  # fmt: skip


def read_texts(args: argparse.Namespace) -> list[str]:
    if args.texts and args.input:
        raise ValueError("give texts as arguments or --input FILE, not both")
    if args.input is None:
        if not args.texts:
            raise ValueError("no texts: give them as arguments or --input FILE")
        return list(args.texts)
    try:
        text = Path(args.input).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"--input {args.input} is not UTF-8 text") from None
    except OSError as e:
        raise ValueError(f"--input {args.input} cannot be read ({e.strerror or e})") from None
    lines = text.splitlines()
    if not lines:
        raise ValueError(f"--input {args.input} is empty: no texts to embed")
    return lines


def output_kind(path: str | None) -> str | None:
    if path is None:
        return None
    kind = Path(path).suffix.lower()
    if kind not in OUTPUT_KINDS:
        raise ValueError(f"--output {path}: a .npy or .jsonl file")
    return kind


def jsonl(texts: list[str], vectors: np.ndarray) -> str:
    return "".join(
        json.dumps({"index": i, "text": t, "embedding": v.tolist()}, ensure_ascii=False) + "\n"
        for i, (t, v) in enumerate(zip(texts, vectors, strict=True))
    )


def run(args: argparse.Namespace) -> int:
    kind = output_kind(args.output)  # before any work: a bad name is the first error
    if args.threads is not None:
        check_threads(args.threads)
    texts = read_texts(args)
    model = Embedder(args.package, args.variant, args.batch_size, args.threads)
    vectors = model.embed(texts, truncate=not args.no_truncate)
    if kind == ".npy":
        np.save(args.output, vectors)
    elif kind == ".jsonl":
        Path(args.output).write_text(jsonl(texts, vectors), encoding="utf-8")
    else:
        sys.stdout.write(jsonl(texts, vectors))
    if args.output:
        print(f"{len(texts)} embeddings of {model.dimension} dims -> {args.output}",
              file=sys.stderr)  # fmt: skip
    return 0
