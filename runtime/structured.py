"""Structured output: a JSON schema, a regular expression or a context-free grammar (Lark, or
llama.cpp's GBNF) that every output follows, by a token mask at each step.

The masks come from llguidance (the `structured` extra): onnxruntime-genai's and llama.cpp's
engine, a Rust library that reads a `tokenizers` tokenizer.json as it is (no transformers) and
computes one step's mask in tens of microseconds (docs/structured.md). Each row of a decoding
holds its own matcher state (a beam's copies are cloned when the search repeats a row).

    compile_constraint(opts, tokenizer_json, vocab, ends)  ->  a ProcessorFactory (or None)

is called once per request by Model.prepare, which hands the factory to the decoding loop
through PreparedOptions.logits_processors (core/constraints.py applies it in order with the
other rules). An invalid schema / grammar is a ValueError naming the problem; one whose
first token no token of the vocabulary can give is refused there, before decoding.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ..core.commandline import pip_extra
from ..core.constraints import LogitsProcessor, ProcessorFactory
from ..core.options import GenerationOptions

ENGINE = "llguidance"
_CACHE_SIZE = 32  # compiled grammars kept per tokenizer (a server's requests repeat schemas)
# JSON as json.dumps writes it: no free whitespace (a small model would fill it with newlines);
# a schema's own "x-guidance" object overrides these
JSON_STYLE = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False}


def _engine() -> Any:
    try:
        import llguidance
        import llguidance.numpy  # noqa: F401  (the bitmask helpers)
    except ImportError:
        raise ValueError(
            "structured output (response_format, json_schema, regex, grammar) needs llguidance: "
            + pip_extra("structured")
        ) from None
    return llguidance


class Grammars:
    """One tokenizer's llguidance tokenizer (built once: ~0.1 s for a 50k vocabulary) and its
    recently compiled grammars."""

    def __init__(self, tokenizer_json: str, vocab: int, eos_id: int, special: list[int]):
        llg = _engine()
        self.llg = llg
        self.tokenizer = llg.LLTokenizer(tokenizer_json, n_vocab=vocab, eos_token=eos_id)
        self.vocab = vocab
        self.special = np.asarray(special, dtype=np.int64)  # never text (an [UNK] matches any)
        self.compiled: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self.lock = threading.Lock()

    def grammar(self, kind: str, text: str) -> str:
        """llguidance's grammar of a constraint; a ValueError naming the problem if invalid."""
        llg = self.llg
        try:
            if kind == "json_schema":
                grammar = llg.LLMatcher.grammar_from_json_schema(text, defaults=JSON_STYLE)
            elif kind == "regex":
                grammar = llg.LLMatcher.grammar_from_regex(text)
            else:
                grammar = llg.grammar_from("grammar", text)  # Lark, or GBNF converted to it
        except ValueError as e:
            raise ValueError(f"invalid {_what(kind)}: {e}") from None
        error = llg.LLMatcher.validate_grammar(grammar, self.tokenizer)
        if error:
            raise ValueError(f"invalid {_what(kind)}: {error.strip()}")
        return grammar

    def matcher(self, kind: str, text: str) -> Any:
        """A fresh matcher of the constraint (compiled once per constraint, then copied)."""
        key = (kind, text)
        with self.lock:
            template = self.compiled.get(key)
            if template is not None:
                self.compiled.move_to_end(key)
                return template.deep_copy()
        template = self.llg.LLMatcher(self.tokenizer, self.grammar(kind, text), log_level=0)
        if template.is_error():
            raise ValueError(f"invalid {_what(kind)}: {template.get_error()}")
        with self.lock:
            self.compiled[key] = template
            while len(self.compiled) > _CACHE_SIZE:
                self.compiled.popitem(last=False)
        return template.deep_copy()


def _what(kind: str) -> str:
    return {"json_schema": "JSON schema", "regex": "regex"}.get(kind, "grammar")


class GrammarConstraint(LogitsProcessor):
    """Each row's tokens follow the constraint: tokens the row's matcher does not allow next
    are -inf; the end tokens are allowed only where the output is complete (accepting)."""

    def __init__(self, grammars: Grammars, kind: str, text: str, ends: np.ndarray, n: int):
        self.grammars, self.kind = grammars, kind
        first = grammars.matcher(kind, text)
        self.matchers = [first] + [first.deep_copy() for _ in range(n - 1)]
        self.ends = ends
        self.ends_set = set(ends.tolist())
        self.words = (grammars.vocab + 31) // 32

    def allowed(self) -> np.ndarray:
        """(N, vocab) bool: the tokens each row's matcher allows next (end tokens: where it
        accepts)."""
        llg, n = self.grammars.llg, len(self.matchers)
        bits = np.zeros((n, self.words), dtype=np.int32)
        for i, m in enumerate(self.matchers):
            llg.numpy.fill_next_token_bitmask(m, bits, i)
        mask = np.unpackbits(bits.view(np.uint8), axis=1, bitorder="little")
        allowed = mask[:, : self.grammars.vocab].astype(bool)
        allowed[:, self.grammars.special] = False
        accepting = np.array([m.is_accepting() for m in self.matchers])
        allowed[:, self.ends] = accepting[:, None]
        return allowed

    def apply(self, logits: np.ndarray, n_generated: np.ndarray | int) -> np.ndarray:
        allowed = self.allowed()
        v = min(logits.shape[1], allowed.shape[1])
        logits[:, :v][~allowed[:, :v]] = -np.inf
        logits[:, v:] = -np.inf  # ids past the tokenizer's: never text
        stuck = np.flatnonzero(~allowed.any(axis=1))
        if len(stuck):
            raise ValueError(self.stuck(int(stuck[0])))
        return logits

    def stuck(self, row: int) -> str:
        m = self.matchers[row]
        why = m.get_error() if m.is_error() else "no token of the vocabulary continues it"
        return f"the {_what(self.kind)} cannot be continued here: {why}"

    def observe(self, tokens: np.ndarray) -> None:
        for m, tok in zip(self.matchers, tokens.tolist()):
            if tok in self.ends_set or m.is_stopped():
                continue  # the row ends here (a beam's dead rows repeat an end token)
            if not m.consume_token(tok):
                raise ValueError(f"token {tok} does not follow the {_what(self.kind)}: "
                                 f"{m.get_error()}")  # fmt: skip

    def select(self, rows: np.ndarray) -> None:
        """Row i becomes rows[i]: a row taken twice (beam search) is cloned."""
        taken: set[int] = set()
        out = []
        for r in rows.tolist():
            m = self.matchers[r]
            out.append(m.deep_copy() if r in taken else m)
            taken.add(r)
        self.matchers = out


def compile_constraint(
    opts: GenerationOptions, grammars: Grammars | None, ends: np.ndarray
) -> ProcessorFactory | None:
    """The constraint `opts` asks for as a factory of GrammarConstraint for n rows, checked
    now: an invalid one, or one no token of the vocabulary can start, is a ValueError."""
    asked = opts.constraint()
    if asked is None:
        return None
    if grammars is None:
        raise ValueError("structured output needs the package's tokenizer.json")
    kind, text = asked
    probe = GrammarConstraint(grammars, kind, text, ends, 1)
    allowed = probe.allowed()
    if not allowed.any():
        raise ValueError(
            f"the {_what(kind)} cannot be satisfied with this model's tokenizer: no token of its "
            "vocabulary can start it"
        )

    def make(n: int) -> LogitsProcessor:
        return GrammarConstraint(grammars, kind, text, ends, n)

    return make
