"""Decoding options: GenerationOptions, the one declaration of every option (the API's keyword
arguments, the CLI's flags, a package's generation_config.json defaults), validated on its
own; and PreparedOptions, options checked against one model for one request (prepare_options:
texts and token strings as ids inside the vocabulary, max_new_tokens fitted to the model's
positions), which is what the search (core.decoding) runs.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .flags import doc
from .speculative import MAX_DRAFT_TOKENS

ED, LM = "translate", "generate"  # commands of flags that only one family has


@dataclass
class GenerationOptions:
    """How to decode: the one declaration of every option. The API takes them as keyword
    arguments, the CLI as flags (core.flags derives them, with these help texts), and a
    package's generation_config.json sets its defaults (the `hf` names)."""

    max_new_tokens: int | None = doc(
        None, "at most N new tokens", metavar="N", hf="max_new_tokens",
        shown="as many as the model's positions allow: max_len for a translation, max_len + 1 "
        "- the prompt's length for a generation",
    )  # fmt: skip
    min_new_tokens: int = doc(
        0, "no end token before N new tokens", metavar="N", hf="min_new_tokens"
    )
    sampling: bool = doc(
        False, "sample instead of greedy search", flags=("--sample",), hf="do_sample"
    )
    temperature: float = doc(1.0, "sampling temperature", metavar="T", hf="temperature")
    top_k: int = doc(0, "sample among the K most likely tokens (0: all)", metavar="K", hf="top_k")
    top_p: float = doc(
        1.0, "sample from the smallest set of tokens of probability >= P (1.0: all)",
        metavar="P", hf="top_p",
    )  # fmt: skip
    seed: int | None = doc(None, "random seed of sampling (none: a fresh one each call)")
    num_beams: int = doc(
        1, "beam search with N beams (1: greedy search)", flags=("--beam", "--num-beams"),
        aliases=("--beams",),
        metavar="N", hf="num_beams",
    )  # fmt: skip
    length_penalty: float = doc(
        1.0, "beam score = sum of log-probabilities / length ** X", metavar="X",
        hf="length_penalty",
    )  # fmt: skip
    early_stopping: bool = doc(
        True, "stop a beam search once N hypotheses have ended", hf="early_stopping"
    )
    num_hypotheses: int = doc(
        1, "N samples (--sample) or N alternatives (--alternatives) per input", metavar="N",
        hf="num_return_sequences",
    )  # fmt: skip
    repetition_penalty: float = doc(
        1.0, "> 1 discourages tokens already in the context or output (1.0: off)", metavar="X",
        hf="repetition_penalty",
    )  # fmt: skip
    ignore_eos: bool = doc(False, "always generate max_new_tokens tokens (benchmarks)")
    forced_end_token: int | None = doc(
        None, "the token chosen at the last position max_new_tokens allows, so that an output "
        "cut by the limit still ends as the model's do (Hugging Face's forced_eos_token_id)",
        metavar="ID", hf="forced_eos_token_id",
    )  # fmt: skip
    # constraints (CTranslate2's names); the text API resolves texts / token strings to ids
    no_repeat_ngram_size: int = doc(
        0, "never repeat an n-gram of N tokens (0: off)", metavar="N", hf="no_repeat_ngram_size"
    )
    suppress_sequences: Sequence[str | Sequence[int]] = doc(
        (), "never produce TEXT's tokens in a row (repeatable; one token: never that token)",
        flags=("--suppress",), hf="bad_words_ids",
    )  # fmt: skip
    end_token: Sequence[str | int] = doc(
        (), "a token (vocabulary string, or an id) that ends the output too (repeatable)",
        metavar="TOKEN",
    )  # fmt: skip
    stop: Sequence[str] = doc(
        (), "stop when the generated text contains TEXT, cut before it (repeatable; a newline: "
        "--stop $'\\n')", commands=(LM,),
    )  # fmt: skip
    return_alternatives: bool = doc(
        False, "N continuations branching at the first position after the target prefix or "
        "prompt: the N best tokens there, each continued (N: --num-hypotheses)",
        flags=("--alternatives",),
    )  # fmt: skip
    max_input_length: int = doc(
        0, "inputs of more than N tokens are an error (cut with --truncate; 0: max_len)",
        metavar="N",
    )  # fmt: skip
    sliding_window: bool = doc(
        False, "go on past the model's context: re-encode its last max_len/2 tokens when full "
        "(needs --max-new-tokens)", commands=(LM,),
    )  # fmt: skip

    # speculative decoding (core/speculative.py): drafts verified in one call of the model
    prompt_lookup: int = doc(
        0, "speculative decoding: draft N tokens per step from the prompt's n-grams (and the "
        "output's), verified in one call of the model; the same output, faster where the "
        "output repeats the prompt (0: off)", metavar="N", commands=(LM,),
    )  # fmt: skip
    draft_tokens: int = doc(
        4, "tokens the draft package (Generator(draft=...), --draft) proposes per step (0: "
        "the draft is not used)", metavar="N", commands=(LM,),
    )  # fmt: skip

    # structured output (runtime/structured.py: llguidance computes each step's token mask)
    response_format: dict | None = doc(
        None, "the OpenAI API's response_format: {\"type\": \"json_object\"}, or {\"type\": "
        "\"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": {...}}} (text: none)",
        commands=(LM,),
    )  # fmt: skip
    json_schema: str | dict | None = doc(
        None, "the output is JSON valid under this JSON schema (the API: a dict or its JSON "
        "text; the CLI: a FILE holding it)", metavar="FILE", commands=(LM,),
    )  # fmt: skip
    regex: str | None = doc(
        None, "the output matches this regular expression, whole (Rust regex syntax)",
        metavar="REGEX", commands=(LM,),
    )  # fmt: skip
    grammar: str | None = doc(
        None, "the output is a sentence of this context-free grammar: Lark (llguidance's) or "
        "GBNF (llama.cpp's; root ::= ...) text (the CLI: a FILE holding it)", metavar="FILE",
        commands=(LM,),
    )  # fmt: skip

    def __post_init__(self) -> None:
        """One validation for the API and the CLI: every problem is a ValueError."""

        def bad(msg: str) -> None:
            raise ValueError(f"invalid generation option: {msg}")

        if self.max_new_tokens is not None and not _is_int(self.max_new_tokens):
            bad(
                f"max_new_tokens={self.max_new_tokens!r} must be an integer or None (got "
                f"{type(self.max_new_tokens).__name__})"
            )
        for name in (
            "min_new_tokens", "top_k", "num_beams", "num_hypotheses", "no_repeat_ngram_size",
            "max_input_length", "prompt_lookup", "draft_tokens",
        ):  # fmt: skip
            value = getattr(self, name)
            if not _is_int(value):
                bad(f"{name}={value!r} must be an integer (got {type(value).__name__})")
        forced = self.forced_end_token
        if forced is not None and not (_is_int(forced) and forced >= 0):
            bad(f"forced_end_token={forced!r} must be a token id >= 0 or None")
        if self.seed is not None and not _is_int(self.seed):
            bad(f"seed={self.seed!r} must be an integer or None (got {type(self.seed).__name__})")
        for name in ("temperature", "top_p", "length_penalty", "repetition_penalty"):
            value = getattr(self, name)
            if not _is_real(value):
                bad(f"{name}={value!r} must be a number (got {type(value).__name__})")
            if not math.isfinite(value):
                bad(f"{name}={value!r} must be finite")
        for name in (
            "sampling", "early_stopping", "ignore_eos", "return_alternatives", "sliding_window",
        ):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                bad(f"{name}={value!r} must be True or False (got {type(value).__name__})")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            bad(f"max_new_tokens={self.max_new_tokens} must be >= 1 (or None: the model's length)")
        if self.min_new_tokens < 0 or (
            self.max_new_tokens is not None and self.min_new_tokens > self.max_new_tokens
        ):
            bad(f"min_new_tokens={self.min_new_tokens} must be in [0, max_new_tokens]")
        if self.sliding_window and self.max_new_tokens is None:
            bad("sliding_window needs max_new_tokens: past the context, nothing else ends it")
        if self.seed is not None and self.seed < 0:
            bad(f"seed={self.seed} must be >= 0 (or None)")
        if not self.temperature > 0:
            bad(f"temperature={self.temperature} must be > 0")
        if self.temperature < MIN_TEMPERATURE:
            bad(
                f"temperature={self.temperature} must be >= {MIN_TEMPERATURE} (smaller ones "
                "underflow the softmax; greedy decoding, sampling=False, is the limit)"
            )
        if self.top_k < 0:
            bad(f"top_k={self.top_k} must be >= 0")
        if not 0 < self.top_p <= 1:
            bad(f"top_p={self.top_p} must be in (0, 1]")
        if self.num_beams < 1:
            bad(f"num_beams={self.num_beams} must be >= 1")
        if self.num_beams > MAX_BEAMS:
            bad(f"num_beams={self.num_beams} must be <= {MAX_BEAMS}")
        if abs(self.length_penalty) > MAX_LENGTH_PENALTY:
            bad(
                f"length_penalty={self.length_penalty} must be in [-{MAX_LENGTH_PENALTY}, "
                f"{MAX_LENGTH_PENALTY}] (length ** penalty must stay a finite number)"
            )
        if self.sampling and self.num_beams > 1:
            bad("sampling and beam search (num_beams > 1) cannot be combined")
        if self.num_hypotheses < 1:
            bad(f"num_hypotheses={self.num_hypotheses} must be >= 1")
        if self.num_hypotheses > MAX_BEAMS:
            bad(f"num_hypotheses={self.num_hypotheses} must be <= {MAX_BEAMS}")
        if not (self.sampling or self.return_alternatives):
            if self.num_hypotheses > self.num_beams:
                bad(
                    f"num_hypotheses={self.num_hypotheses} must be in [1, num_beams] (or use "
                    "sampling=True or return_alternatives=True)"
                )
        if not self.repetition_penalty > 0:
            bad(f"repetition_penalty={self.repetition_penalty} must be > 0")
        if self.no_repeat_ngram_size < 0:
            bad(f"no_repeat_ngram_size={self.no_repeat_ngram_size} must be >= 0 (0 = off)")
        if self.max_input_length < 0:
            bad(f"max_input_length={self.max_input_length} must be >= 0 (0 = the model's max_len)")
        for name in ("prompt_lookup", "draft_tokens"):
            value = getattr(self, name)
            if not 0 <= value <= MAX_DRAFT_TOKENS:
                bad(f"{name}={value} must be in [0, {MAX_DRAFT_TOKENS}] (0: off)")
        if self.prompt_lookup and (self.num_beams > 1 or self.num_hypotheses > 1):
            bad(
                "prompt_lookup (speculative decoding) decodes one greedy or sampled hypothesis: "
                "not with num_beams > 1 or num_hypotheses > 1"
            )
        self.suppress_sequences = _sequences(self.suppress_sequences, bad)
        self.end_token = _items(self.end_token, "end_token", (str, int), bad)
        self.stop = _items(self.stop, "stop", (str,), bad)
        self.json_schema, self._schema = _constraint_fields(self, bad)

    def constraint(self) -> tuple[str, str] | None:
        """The structured-output constraint asked for, as (kind, text): ("json_schema", the
        schema as JSON text; "{}" for any JSON object), ("regex", ...) or ("grammar", ...)."""
        if self._schema is not None:
            return "json_schema", json.dumps(self._schema)
        if self.regex is not None:
            return "regex", self.regex
        if self.grammar is not None:
            return "grammar", self.grammar
        return None


@dataclass
class PreparedOptions(GenerationOptions):
    """GenerationOptions checked against one model for one request (prepare_options):
    suppress_sequences and end_token hold token ids only, every id is inside the vocabulary,
    and max_new_tokens is a number that fits the model's positions. The search runs these; a
    plain GenerationOptions handed to it is prepared there, against the logits' vocabulary.
    `logits_processors`: the runtime's own rules, each a factory of a core.constraints
    LogitsProcessor for n rows (the structured-output constraint's token masks)."""

    logits_processors: tuple = ()


def _as_prepared(opts: GenerationOptions, **changes) -> PreparedOptions:
    """opts with `changes` as a PreparedOptions: valid options and valid values, so no second
    validation (the options of every request pass here)."""
    prepared = PreparedOptions.__new__(PreparedOptions)
    prepared.__dict__.update(vars(opts), **changes)
    return prepared


def prepare_options(
    opts: GenerationOptions,
    vocab_size: int,
    room: int,
    encode: Callable[[str], list[int]] | None = None,
    token_id: Callable[[str], int | None] | None = None,
) -> tuple[PreparedOptions, bool]:
    """The one check of decoding options against a model (runtime.Model.prepare for a package,
    models.generation for a checkpoint, the search for plain options): suppress_sequences texts
    encoded alone by `encode` (as the tokenizer encodes them), end_token strings looked up by
    `token_id` (or digits: an id), every id inside [0, vocab_size) (else a ValueError naming
    it), and max_new_tokens fitted to the `room` the model's positions leave (fit_new_tokens).
    Returns (the prepared options, whether a number asked for was cut to the room)."""
    seqs: list[tuple[int, ...]] = []
    for seq in opts.suppress_sequences:
        if isinstance(seq, str):
            if encode is None:
                raise ValueError("suppress_sequences given as texts: resolve them to ids first")
            ids = tuple(encode(seq))
        else:
            ids = tuple(seq)
        if not ids or max(ids) >= vocab_size:
            raise ValueError(f"suppress_sequences: {seq!r} has no token ids in the vocabulary")
        seqs.append(ids)
    ends: list[int] = []
    for tok in opts.end_token:
        if isinstance(tok, str) and token_id is None and not tok.isdigit():
            raise ValueError("end_token given as token strings: resolve them to ids first")
        i = (token_id(tok) if token_id else None) if isinstance(tok, str) else tok
        if i is None and isinstance(tok, str) and tok.isdigit():  # the CLI's ids
            i = int(tok)
        if i is None or not 0 <= i < vocab_size:
            raise ValueError(f"end_token {tok!r} is not a token of the vocabulary")
        ends.append(int(i))
    forced = opts.forced_end_token
    if forced is not None and forced >= vocab_size:
        raise ValueError(f"forced_end_token {forced} is not a token of the vocabulary")
    fitted, cut = fit_new_tokens(opts, room)
    return _as_prepared(fitted, suppress_sequences=tuple(seqs), end_token=tuple(ends)), cut


def as_prepared(opts: GenerationOptions, vocab_size: int) -> PreparedOptions:
    """`opts` as the search runs them: prepared options as they are; plain ones prepared for
    a vocabulary of `vocab_size` ids (no tokenizer: ids only), their max_new_tokens a number."""
    if isinstance(opts, PreparedOptions):
        return opts
    if opts.max_new_tokens is None:
        raise ValueError("max_new_tokens=None: prepare the options for the model first")
    return prepare_options(opts, vocab_size, opts.max_new_tokens)[0]


def fit_new_tokens(opts: GenerationOptions, room: int) -> tuple[GenerationOptions, bool]:
    """(opts with max_new_tokens set to what the model's positions allow, whether a number
    asked for was cut to it): None means all `room`, a number at most `room`."""
    asked = opts.max_new_tokens
    n = room if asked is None else min(asked, room)
    cut = asked is not None and n < asked
    if n == asked and opts.min_new_tokens <= n:
        return opts, cut
    if n < 1:  # validated (a ValueError naming it)
        low = min(n, opts.min_new_tokens)
        return dataclasses.replace(opts, max_new_tokens=n, min_new_tokens=low), cut
    fitted = copy.copy(opts)  # valid options, two valid values: no second validation
    fitted.max_new_tokens, fitted.min_new_tokens = n, min(n, opts.min_new_tokens)
    return fitted, cut


def _new_tokens(opts: GenerationOptions) -> int:
    """max_new_tokens of options the caller fitted to the model (fit_new_tokens)."""
    if opts.max_new_tokens is None:
        raise ValueError("max_new_tokens=None: fit the options to the model first (fit_new_tokens)")
    return opts.max_new_tokens


def _constraint_fields(opts: GenerationOptions, bad) -> tuple[dict | None, dict | bool | None]:
    """Checks response_format, json_schema, regex and grammar (at most one constraint); returns
    (json_schema parsed, the JSON schema they ask for: response_format's or json_schema)."""
    schema: Any = opts.json_schema
    fmt: Any = opts.response_format
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            bad(f"json_schema is not JSON: {e}")
    parsed = schema
    if schema is not None and not isinstance(schema, dict):
        bad(f"json_schema={schema!r} must be a JSON schema: an object, not {type(schema).__name__}")
    if fmt is not None:
        if not isinstance(fmt, dict):
            bad(f"response_format={fmt!r} must be an object (got {type(fmt).__name__})")
        kind = fmt.get("type")
        if kind == "json_object":
            from_fmt: Any = {"type": "object"}
        elif kind == "json_schema":
            spec: Any = fmt.get("json_schema")
            if not isinstance(spec, dict) or not isinstance(spec.get("schema"), (dict, bool)):
                bad('response_format json_schema needs {"json_schema": {"name": ..., "schema": '
                    "{...}}} with the schema an object")  # fmt: skip
            from_fmt = spec["schema"]
        elif kind == "text":
            from_fmt = None
        else:
            bad(f"response_format type {kind!r} must be text, json_object or json_schema")
        if from_fmt is not None and schema is not None:
            bad("response_format and json_schema cannot be combined: give one schema")
        schema = from_fmt if from_fmt is not None else schema
    for name in ("regex", "grammar"):
        value = getattr(opts, name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            bad(f"{name}={value!r} must be a non-empty string")
    asked = [n for n, v in (("a JSON schema", schema), ("regex", opts.regex),
                            ("grammar", opts.grammar)) if v is not None]  # fmt: skip
    if len(asked) > 1:
        bad(f"{' and '.join(asked)} cannot be combined: give one constraint")
    return parsed, schema


def _items(value: object, name: str, kinds: tuple[type, ...], bad) -> tuple:
    """One item or a list of them -> a tuple; strings non-empty, ids >= 0."""
    if isinstance(value, str) or _is_int(value):
        value = (value,)
    if not isinstance(value, (list, tuple)):
        bad(f"{name}={value!r} must be a list (got {type(value).__name__})")
    assert isinstance(value, (list, tuple))
    for item in value:
        if int in kinds and _is_int(item):
            if item < 0:
                bad(f"{name}: token id {item} must be >= 0")
        elif isinstance(item, str):
            if not item:
                bad(f"{name}: an empty string")
        else:
            what = "strings or token ids" if int in kinds else "strings"
            bad(f"{name}={value!r} must hold {what} (got {type(item).__name__})")
    return tuple(int(v) if _is_int(v) else v for v in value)


def _sequences(value: object, bad) -> tuple:
    """suppress_sequences: texts and / or id lists (a bare text: one sequence)."""
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (list, tuple)):
        bad(f"suppress_sequences={value!r} must be a list (got {type(value).__name__})")
    assert isinstance(value, (list, tuple))
    out: list[str | tuple[int, ...]] = []
    for item in value:
        if isinstance(item, str):
            if not item.strip():
                bad("suppress_sequences: an empty text")
            out.append(item)
        elif isinstance(item, (list, tuple, np.ndarray)) and len(item) > 0:
            if not all(_is_int(t) and t >= 0 for t in item):
                bad(f"suppress_sequences: {item!r} must hold token ids >= 0")
            out.append(tuple(int(t) for t in item))
        else:
            bad(f"suppress_sequences: {item!r} must be a text or a non-empty list of token ids")
    return tuple(out)


MIN_TEMPERATURE = 1e-4
# upper bounds where a larger value only allocates (N x beams rows of cache) or overflows
MAX_BEAMS = 256  # num_beams and num_hypotheses (CTranslate2 and transformers users stay < 32)
MAX_LENGTH_PENALTY = 10.0  # |length_penalty|: a 2**20-token length ** 10 is still finite


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )
