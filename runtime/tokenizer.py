"""A package's tokenizers, loaded and checked before anything is decoded.

tokenizer.json is the `tokenizers` library's file: its checksum proves it is the file export
wrote, not that it is sane. At load: it must parse (a bad regex or a normalizer nested
thousands deep is a PackageError, not a Rust panic or a RecursionError), its regular
expressions must lie inside core.patterns' bounds (a catastrophic one would panic at the first
input that triggers it), its token ids must lie inside the graphs' vocabulary, and it must
encode export's probe text to the same ids (a vocabulary permuted and re-checksummed would
otherwise decode to garbage without an error). Encoding and decoding go through `guarded`: a
panic that still comes (the regex engine's retry limit) is a PackageError, never a
BaseException that `except Exception` lets through.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tokenizers import Tokenizer

from ..core.patterns import refused_what, tokenizer_pattern_problem
from ..core.schema import PackageError

T = TypeVar("T")

PROBE_TOKENS = 48  # vocabulary entries that make up a probe text


def is_panic(e: BaseException) -> bool:
    """A Rust panic from the tokenizers library (pyo3's PanicException derives BaseException)."""
    return type(e).__name__ == "PanicException"


def load_tokenizer(path: Path, vocab_size: int, where: str) -> Tokenizer:
    """The tokenizer at `path`, every id of it < vocab_size; PackageError naming the problem."""
    try:
        text = path.read_text(encoding="utf-8")
        problem = tokenizer_pattern_problem(json.loads(text))
    except RecursionError:
        raise PackageError(f"{where}: {path.name} cannot be read (nested too deeply)") from None
    except (ValueError, OSError) as e:
        raise PackageError(f"{where}: {path.name} cannot be read ({str(e)[:200]})") from None
    if problem:
        raise PackageError(f"{where}: {path.name} has a refused {refused_what(problem)}")
    try:
        tok = Tokenizer.from_str(text)
        ids = tok.get_vocab(with_added_tokens=True).values()
    except Exception as e:
        raise PackageError(f"{where}: {path.name} cannot be read ({str(e)[:200]})") from None
    except BaseException as e:
        if not is_panic(e):
            raise
        raise PackageError(f"{where}: {path.name} cannot be read ({str(e)[:200]})") from None
    top = max(ids, default=-1)
    if top >= vocab_size:
        raise PackageError(
            f"{where}: {path.name} has token id {top}, beyond the model's vocabulary of "
            f"{vocab_size}"
        )
    return tok


def make_probe(tok: Tokenizer, file: str) -> dict:
    """A text made of tokens spread over the vocabulary, and the ids `tok` encodes it to."""
    vocab = sorted(tok.get_vocab(with_added_tokens=False).items(), key=lambda kv: kv[1])
    picked = [i for _, i in vocab[:: max(1, len(vocab) // PROBE_TOKENS)]]
    text = tok.decode(picked, skip_special_tokens=True)
    return {"file": file, "text": text, "ids": tok.encode(text, add_special_tokens=False).ids}


def check_probe(tok: Tokenizer, probe: dict, where: str) -> None:
    """`tok` encodes the probe as it did at export, or a PackageError."""
    try:
        ids = tok.encode(probe["text"], add_special_tokens=False).ids
    except BaseException as e:
        if not (isinstance(e, Exception) or is_panic(e)):
            raise
        raise PackageError(f"{where}: {probe['file']} fails on its probe text ({e})") from None
    if ids != probe["ids"]:
        raise PackageError(
            f"{where}: {probe['file']} does not encode as it did at export (its vocabulary or "
            "rules were edited): re-export the package, or restore the file"
        )


def guarded(call: Callable[[], T], file: str, where: str) -> T:
    """call() (an encode or decode of the package's tokenizer); a Rust panic in it (a regex the
    engine gives up on for this input) becomes a PackageError naming the file."""
    try:
        return call()
    except BaseException as e:
        if not is_panic(e):
            raise
        first = (str(e).splitlines() or [""])[0][:200]
        raise PackageError(
            f"{where}: {file} failed on this input ({first}): its rules cannot tokenize it"
        ) from None


def genai_tokenizer_problem(path: Path) -> str | None:
    """Why onnxruntime-genai's og.Tokenizer would encode text differently from this
    tokenizer.json, for the tokenizers edgeformer trains that it is known to misread (None
    otherwise: byte-level BPE, edgeformer's ASCII character tokenizers as export writes them,
    converted Hugging Face tokenizers).

    genai (onnxruntime-extensions) reads a BPE as byte-level (GPT-2's) unless its decoder is a
    SentencePiece one, and splits SentencePiece-style text with Llama's regex (letters apart from
    punctuation); a Metaspace BPE trained on text split at spaces only has merges across that
    line (`n:`), and a character tokenizer beyond ASCII has no byte-level form."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    pre, decoder = data.get("pre_tokenizer") or {}, data.get("decoder") or {}
    if pre.get("type") == "Metaspace" and pre.get("split", True):
        kind = "a BPE over words split at spaces (Metaspace)"
    elif decoder.get("type") == "Fuse" and not pre:
        kind = "characters beyond ASCII"
    else:
        return None
    return (
        f"onnxruntime-genai's og.Tokenizer does not encode this tokenizer ({kind}) as edgeformer "
        "does: give genai token ids from the package's tokenizer.json (tokenizers)"
    )
