"""Decoding algorithms over a step function, in numpy only.

Written once and used by both sides: the ONNX runtime (edgeformer.runtime) and the PyTorch
evaluation (edgeformer.train). A model is reached through a `Stepper`:

    step(tokens)  (N,) int64 next input token per row -> (N, V) float32 logits for the token after
    select(rows)  keep / reorder / repeat rows of the cache: row i of the new state is rows[i]

The caller runs the first pass itself (encoder + first decoder step, or the prompt prefill) and
hands over its last-position logits (B, V). Logits handed to the loop (those first ones and
every step's) are the loop's until its next call: greedy and sampling set banned tokens to
-inf in them in place. Outputs never include BOS or the final EOS.
`banned` ids (the runtime passes padding and BOS) are never chosen, by any strategy.

`decode` is the one entry that returns scored hypotheses: forced prefixes (their tokens are fed
as they are and scored by the model's distribution), alternatives (CTranslate2's
return_alternatives: num_hypotheses continuations, one per top-k token at the first position
after the prefix), several samples per input (num_hypotheses with sampling), end tokens, banned
token sequences, no_repeat_ngram_size, and a stop test (the text API's stop strings).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from .flags import doc


class Stepper(Protocol):
    def step(self, tokens: np.ndarray) -> np.ndarray: ...

    def select(self, rows: np.ndarray) -> None: ...


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
            "max_input_length",
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
        self.suppress_sequences = _sequences(self.suppress_sequences, bad)
        self.end_token = _items(self.end_token, "end_token", (str, int), bad)
        self.stop = _items(self.stop, "stop", (str,), bad)


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


@dataclass
class Hypothesis:
    tokens: list[int]  # a forced prefix included; never the end token
    score: float  # length-normalised log-probability: sum(log_probs) / len(log_probs) ** lp
    # one per token, then the end token's when the hypothesis ended with one (None: not scored)
    log_probs: list[float] | None = None


def end_ids(opts: GenerationOptions, eos_id: int) -> np.ndarray:
    """The tokens that end a hypothesis: EOS and opts.end_token (ids by now)."""
    extra = [t for t in opts.end_token if not isinstance(t, str)]
    if len(extra) != len(opts.end_token):
        raise ValueError("end_token given as token strings: resolve them to ids first")
    return np.array(sorted({eos_id, *extra}), dtype=np.int64)


def suppressed(opts: GenerationOptions) -> list[tuple[int, ...]]:
    """opts.suppress_sequences as id tuples (texts must be resolved by the caller)."""
    out = [s for s in opts.suppress_sequences if not isinstance(s, str)]
    if len(out) != len(opts.suppress_sequences):
        raise ValueError("suppress_sequences given as texts: resolve them to ids first")
    return [tuple(s) for s in out]


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _check_finite(logits: np.ndarray) -> None:
    """NaN anywhere in a row, or a row with no finite logit, is an error (never passed on)."""
    if not np.isfinite(logits.max(axis=-1)).all():
        raise FloatingPointError("the model produced NaN (or all -inf) logits")


def _check_model(logits: np.ndarray) -> None:
    """NaN or +inf anywhere is the model's (bans only ever write -inf, so this holds of logits
    whose banned tokens were set in place; a row of -inf there is told as all banned)."""
    top = logits.max(axis=-1)
    if np.isnan(top).any() or np.isposinf(top).any():
        raise FloatingPointError("the model produced NaN (or +inf) logits")


class _Penalties:
    """Per-row logit adjustments shared by all strategies: repetition penalty, min length,
    banned ids, banned sequences (suppress_sequences) and no_repeat_ngram_size.

    The history a row is checked against (n-grams, sequences) is its context (an LM's prompt)
    followed by every token fed since, a forced prefix included.
    """

    def __init__(
        self,
        opts: GenerationOptions,
        ends: np.ndarray | int,
        vocab: int,
        context: list[list[int]] | None,
        n: int,
        banned: Sequence[int] = (),
    ):
        self.opts = opts
        self.ends = np.atleast_1d(np.asarray(ends, dtype=np.int64))
        sequences = suppressed(opts)
        for seq in sequences:
            if max(seq) >= vocab:
                raise ValueError(f"suppress_sequences: token id {max(seq)} >= vocabulary {vocab}")
        ends_set = set(self.ends.tolist())
        never = {int(t) for t in banned if 0 <= t < vocab and t not in ends_set}
        self.banned = sorted(never | {s[0] for s in sequences if len(s) == 1})
        self.sequences = [s for s in sequences if len(s) > 1]
        self.ngram = opts.no_repeat_ngram_size
        self.history: list[list[int]] | None = None
        if self.ngram > 0 or self.sequences:
            self.history = [list(c) for c in context] if context else [[] for _ in range(n)]
        self.seen = None
        if opts.repetition_penalty != 1.0:
            self.seen = np.zeros((n, vocab), dtype=bool)
            for i, toks in enumerate(context or []):
                self.seen[i, [t for t in toks if 0 <= t < vocab]] = True
        self.forced = opts.forced_end_token
        if self.forced is not None and not 0 <= self.forced < vocab:
            raise ValueError(f"forced_end_token {self.forced} >= vocabulary {vocab}")
        # nothing but (maybe) the end tokens to ban: the common case, checked once here
        self.plain = (
            self.seen is None and not self.banned and self.history is None and self.forced is None
        )
        # nothing to apply at any step but bans (`banned`, and the end tokens while
        # min_new_tokens or ignore_eos say so): _greedy_one's case
        self.bans_only = self.seen is None and self.history is None and self.forced is None

    def apply(
        self, logits: np.ndarray, n_generated: np.ndarray | int, in_place: bool = False
    ) -> np.ndarray:
        """`n_generated`: tokens chosen so far per row (or one count for all): before
        min_new_tokens, the end tokens are banned. in_place: ban in `logits` itself (float32
        logits that nothing reads afterwards) instead of a copy (the copy per step was 64 of
        ~240 ms of Python per 1,000 sentences translated at batch 32)."""
        ban_all, ban_rows = self.opts.ignore_eos, None
        if not ban_all and self.opts.min_new_tokens > 0:
            below = np.asarray(n_generated) < self.opts.min_new_tokens
            if below.all():
                ban_all = True
            elif below.any():
                ban_rows = np.flatnonzero(np.broadcast_to(below, (len(logits),)))
        if self.plain and not ban_all and ban_rows is None:
            return logits
        if self.seen is not None:  # a new array
            p = self.opts.repetition_penalty
            hit = self.seen
            logits = np.where(hit, np.where(logits > 0, logits / p, logits * p), logits)
            logits = logits.astype(np.float32, copy=False)
        else:
            logits = logits.astype(np.float32, copy=not in_place)
        if ban_all:
            logits[:, self.ends] = -np.inf
        elif ban_rows is not None:
            logits[np.ix_(ban_rows, self.ends)] = -np.inf
        if self.banned:
            logits[:, self.banned] = -np.inf
        if self.history is not None:
            for i, h in enumerate(self.history):
                bans = self.history_bans(h)
                if bans:
                    logits[i, bans] = -np.inf
        if self.forced is not None:  # the last position max_new_tokens allows: forced
            last = np.broadcast_to(np.asarray(n_generated) >= _new_tokens(self.opts) - 1,
                                   (len(logits),))  # fmt: skip
            if last.any():
                logits[last] = -np.inf
                logits[last, self.forced] = 0.0
        return logits

    def history_bans(self, h: list[int]) -> list[int]:
        """Tokens that would complete an n-gram of `h` again, or a suppressed sequence."""
        out: list[int] = []
        n = self.ngram
        if n == 1:
            out.extend(h)
        elif n > 1 and len(h) >= n:
            key = h[len(h) - n + 1 :]
            out.extend(h[i + n - 1] for i in range(len(h) - n + 1) if h[i : i + n - 1] == key)
        for seq in self.sequences:
            m = len(seq) - 1
            if len(h) >= m and tuple(h[len(h) - m :]) == seq[:-1]:
                out.append(seq[-1])
        return out

    def observe(self, tokens: np.ndarray) -> None:
        if self.seen is not None:
            self.seen[np.arange(len(tokens)), tokens] = True
        if self.history is not None:
            for h, tok in zip(self.history, tokens.tolist()):
                h.append(tok)

    def select(self, rows: np.ndarray) -> None:
        if self.seen is not None:
            self.seen = self.seen[rows]
        if self.history is not None:
            self.history = [list(self.history[r]) for r in rows.tolist()]


class _Forcing:
    """Tokens a row does not choose: its prefix, fed as it is, then (alternatives) the
    rank-th best token at the first position after it."""

    def __init__(self, prefixes: Sequence[Sequence[int]] | None, ranks: Sequence[int] | None,
                 n: int):  # fmt: skip
        self.prefixes = [list(p) for p in prefixes] if prefixes is not None else [[]] * n
        if len(self.prefixes) != n:
            raise ValueError(f"{len(self.prefixes)} prefixes for a batch of {n}")
        self.lengths = np.array([len(p) for p in self.prefixes], dtype=np.int64)
        self.ranks = None if ranks is None else np.asarray(ranks, dtype=np.int64)
        self.on = bool(self.lengths.any()) or self.ranks is not None

    def prefix_tokens(self, t: int, rows: np.ndarray) -> np.ndarray:
        return np.array([self.prefixes[r][t] for r in rows.tolist()], dtype=np.int64)

    def branch(self, t: int, rows: np.ndarray) -> np.ndarray:
        """Mask of `rows` that branch at step t (alternatives)."""
        if self.ranks is None:
            return np.zeros(len(rows), dtype=bool)
        return self.lengths[rows] == t


def _ranked(logits: np.ndarray, rank: int) -> int:
    """The rank-th best token of a row (0: the argmax; ties by lower id)."""
    return int(np.argsort(-logits, kind="stable")[rank])


StopTest = Callable[[int, list[int]], bool]  # (batch row, its tokens so far) -> stop it here


@dataclass(frozen=True)
class DecodeInputs:
    """What decoding a batch needs besides its first logits, the stepper and the options; the
    sequences hold one entry per batch row."""

    eos_id: int
    context: list[list[int]] | None = None  # tokens before the new ones (repetition penalties)
    banned: Sequence[int] = ()  # ids never chosen (the runtime bans padding and BOS)
    prefixes: Sequence[Sequence[int]] | None = None  # forced first tokens of each row
    ranks: Sequence[int] | None = None  # the token after the prefix is the rank-th best
    stop: StopTest | None = None  # a row stops once stop(row, its tokens) says so

    def repeat(self, batch: int, n: int, ranked: bool) -> DecodeInputs:
        """Each of the `batch` rows n times in a row (`stop` still sees the original row);
        with `ranked`, copy i takes the i-th best token after its prefix (alternatives)."""
        rows = np.repeat(np.arange(batch), n).tolist()
        stop = self.stop
        return dataclasses.replace(
            self,
            context=None if self.context is None else [self.context[r] for r in rows],
            prefixes=None if self.prefixes is None else [self.prefixes[r] for r in rows],
            ranks=list(range(n)) * batch if ranked else None,
            stop=None if stop is None else (lambda r, seq: stop(r // n, seq)),
        )


def filter_logits(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """Temperature, then top-k, then nucleus (top-p) filtering; removed entries become -inf."""
    logits = logits.astype(np.float64) / temperature  # float64: a small temperature cannot overflow
    if 0 < top_k < logits.shape[-1]:
        kth = np.partition(logits, -top_k, axis=-1)[:, -top_k][:, None]
        logits = np.where(logits < kth, -np.inf, logits)
    if top_p < 1.0:
        order = np.argsort(-logits, axis=-1)
        sorted_logits = np.take_along_axis(logits, order, axis=-1)
        probs = np.exp(log_softmax(sorted_logits))
        before = np.cumsum(probs, axis=-1) - probs  # mass of strictly better tokens
        drop_sorted = before >= top_p  # keeps the smallest prefix reaching top_p (never empty)
        drop = np.zeros_like(drop_sorted)
        np.put_along_axis(drop, order, drop_sorted, axis=-1)
        logits = np.where(drop, -np.inf, logits)
    return logits


ALL_BANNED = "no token can be chosen: every token is banned at this step"


def _choose(
    logits: np.ndarray, opts: GenerationOptions, rng: np.random.Generator,
    raw: np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    """The next token of each row from its adjusted logits. `raw`: the model's logits when not
    yet checked for NaN (they may be `logits` itself, bans set in place); greedy checks them
    only when a chosen logit is not finite (argmax picks a NaN first), so a normal step costs
    one gather instead of a pass over the logits."""
    if not opts.sampling:
        tokens = logits.argmax(axis=-1)
        if len(tokens) == 1:  # batch 1: one scalar check
            if math.isfinite(logits[0, tokens[0]]):
                return tokens
        elif np.isfinite(logits[np.arange(len(tokens)), tokens]).all():
            return tokens
        if raw is not None:
            _check_model(raw)
        raise ValueError(ALL_BANNED)  # a chosen -inf: every token of its row is banned
    if raw is not None:
        _check_model(raw)
    if not np.isfinite(logits.max(axis=-1)).all():  # every token banned (tiny vocabularies)
        raise ValueError(ALL_BANNED)
    logits = filter_logits(logits, opts.temperature, opts.top_k, opts.top_p)
    if not np.isfinite(logits.max(axis=-1)).all():  # nothing left to sample from
        raise ValueError(
            f"sampling has no token with a finite probability (temperature={opts.temperature}, "
            f"top_k={opts.top_k}, top_p={opts.top_p})"
        )
    probs = np.exp(log_softmax(logits))  # max subtracted first: never overflows
    u = rng.random(len(probs))[:, None]
    return np.minimum((np.cumsum(probs, axis=-1) < u).sum(axis=-1), probs.shape[-1] - 1)


def _greedy_one(
    logits: np.ndarray, stepper: Stepper, max_new: int, ends: np.ndarray, banned: list[int],
    held: int = 0,
) -> Iterator[Step]:  # fmt: skip
    """`steps` for one row, greedy, with nothing to adjust but bans (no penalty, prefix or
    stop test): Python ints between the graph's runs, the batch-1 latency path. `banned` ids
    are never chosen, nor the end tokens in the first `held` steps (min_new_tokens;
    ignore_eos: all). The same tokens as the general loop: banned ids are set to -inf and the
    argmax taken again only when one comes out on top (tests/test_decoding.py)."""
    row = np.zeros(1, dtype=np.int64)
    ended, running = np.ones(1, dtype=bool), np.zeros(1, dtype=bool)
    for a in (row, ended, running):  # shared by every Step: read-only
        a.flags.writeable = False
    end_set = set(ends.tolist())
    with_ends = sorted(set(banned) | end_set)
    for t in range(max_new):
        bans = with_ends if t < held else banned
        tok = int(logits[0].argmax())
        if tok in bans:  # as _Penalties.apply would: banned ids out, argmax again
            logits[0, bans] = -np.inf
            tok = int(logits[0].argmax())
        if not math.isfinite(logits[0, tok]):  # argmax picks a NaN first; -inf: all banned
            _check_model(logits)
            raise ValueError(ALL_BANNED)
        tokens = np.array([tok], dtype=np.int64)
        end = tok in end_set
        yield Step(row, tokens, None, ended if end else running)
        if end or t + 1 == max_new:
            return
        logits = stepper.step(tokens)


class Step(NamedTuple):
    """One step of the greedy / sampling loop, for the rows still running (original indices)."""

    rows: np.ndarray
    tokens: np.ndarray  # the chosen (or forced) token of each row
    log_probs: np.ndarray | None  # their log-probabilities (when scores were asked for)
    ended: np.ndarray  # the token is an end token: the row stops without it


def steps(
    first_logits: np.ndarray,
    stepper: Stepper,
    opts: GenerationOptions,
    inputs: DecodeInputs,
    scores: bool = False,
) -> Iterator[Step]:
    """Greedy or sampling, one step at a time, for every row still running.

    A row stops at an end token, when `stop(row, tokens)` says so (its last token kept), or
    after max_new_tokens past its prefix; finished rows are dropped from the cache with
    `stepper.select`. Chosen tokens are scored by the adjusted distribution (penalties and bans
    applied, before temperature / top-k / top-p), forced ones by the model's.
    """
    n, vocab = first_logits.shape
    ends = end_ids(opts, inputs.eos_id)
    penalties = _Penalties(opts, ends, vocab, inputs.context, n, inputs.banned)
    forcing = _Forcing(inputs.prefixes, inputs.ranks, n)
    stop = inputs.stop
    max_new = _new_tokens(opts)
    if n == 1 and not (opts.sampling or scores or forcing.on or stop) and penalties.bans_only:
        held = max_new if opts.ignore_eos else opts.min_new_tokens  # steps with ends banned
        yield from _greedy_one(first_logits, stepper, max_new, ends, penalties.banned, held)
        return
    rng = np.random.default_rng(opts.seed)
    limit = forcing.lengths + max_new
    seqs: list[list[int]] = [[] for _ in range(n)]
    active = np.arange(n)
    logits = first_logits
    single_end = int(ends[0]) if len(ends) == 1 else None
    for t in range(int(limit.max())):
        if not forcing.on:
            adjusted = penalties.apply(logits, t, in_place=True)  # logits: read only here
            forced = None  # no row is forced
            tokens = _choose(adjusted, opts, rng, raw=logits).astype(np.int64, copy=False)
        else:
            _check_finite(logits)
            prefix_len = forcing.lengths[active]
            adjusted = penalties.apply(logits, t - prefix_len)
            forced = t < prefix_len
            tokens = np.zeros(len(active), dtype=np.int64)
            free = ~forced
            if free.any():
                tokens[free] = _choose(adjusted[free], opts, rng)
            if forced.any():
                tokens[forced] = forcing.prefix_tokens(t, active[forced])
            for i in np.flatnonzero(forcing.branch(t, active)).tolist():
                assert forcing.ranks is not None
                tokens[i] = _ranked(adjusted[i], int(forcing.ranks[active[i]]))
        lps = None
        if scores:
            rows_i = np.arange(len(tokens))
            lps = log_softmax(adjusted.astype(np.float64))[rows_i, tokens]
            if forced is not None and forced.any():
                raw = log_softmax(logits[forced].astype(np.float64))
                lps[forced] = raw[np.arange(len(raw)), tokens[forced]]
        ended = (tokens == single_end) if single_end is not None else np.isin(tokens, ends)
        if forced is not None:
            ended &= ~forced
        alive = ~ended
        if stop is not None:
            for i in np.flatnonzero(alive).tolist():
                r = int(active[i])
                seqs[r].append(int(tokens[i]))
                if (forced is None or not forced[i]) and stop(r, seqs[r]):
                    alive[i] = False
        yield Step(active, tokens, lps, ended)
        if forcing.on:
            alive &= t + 1 < limit[active]
        elif t + 1 == max_new:
            return
        n_alive = int(np.count_nonzero(alive))
        if n_alive == 0:
            return
        if n_alive < len(alive):
            keep = np.flatnonzero(alive)
            stepper.select(keep)
            penalties.select(keep)
            active, tokens = active[keep], tokens[keep]
        penalties.observe(tokens)
        logits = stepper.step(tokens)


def iter_tokens(
    first_logits: np.ndarray, stepper: Stepper, opts: GenerationOptions, inputs: DecodeInputs
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Greedy or sampling, one step at a time: yields (rows, tokens) for the rows still running.

    `rows` are indices into the original batch. A row stops at an end token (not yielded), at
    max_new_tokens past its prefix (whose tokens are yielded too) or when `stop` says so.
    """
    for step in steps(first_logits, stepper, opts, inputs):
        keep = ~step.ended
        if keep.any():
            yield step.rows[keep], step.tokens[keep]


def greedy_or_sample(
    first_logits: np.ndarray,
    stepper: Stepper,
    opts: GenerationOptions,
    inputs: DecodeInputs,
    scores: bool = False,
) -> list[Hypothesis]:
    """One hypothesis per row (score 0 and no log_probs unless `scores`)."""
    n = len(first_logits)
    out: list[list[int]] = [[] for _ in range(n)]
    lps: list[list[float]] = [[] for _ in range(n)]
    for step in steps(first_logits, stepper, opts, inputs, scores):
        ended = step.ended.tolist()
        for r, tok, end in zip(step.rows.tolist(), step.tokens.tolist(), ended):
            if not end:
                out[r].append(tok)
        if step.log_probs is not None:
            for r, x in zip(step.rows.tolist(), step.log_probs.tolist()):
                lps[r].append(x)
    if not scores:
        return [Hypothesis(o, 0.0) for o in out]
    lp = opts.length_penalty
    return [Hypothesis(o, sum(p) / max(len(p), 1) ** lp, p) for o, p in zip(out, lps)]


def beam_search(
    first_logits: np.ndarray, stepper: Stepper, opts: GenerationOptions, inputs: DecodeInputs
) -> list[list[Hypothesis]]:
    """Beam search; returns the n-best hypotheses per batch row, best first.

    A row's prefix is forced (one live beam until it ends, scored by the model's distribution);
    with `ranks`, the token after it is the rank-th best (alternatives). A beam that `stop`
    stops is a finished hypothesis (its last token kept).
    """
    B, vocab = first_logits.shape
    K = opts.num_beams
    lp = opts.length_penalty
    eos_id, context, stop = inputs.eos_id, inputs.context, inputs.stop
    ends = end_ids(opts, eos_id)
    ends_set = set(ends.tolist())
    forcing = _Forcing(inputs.prefixes, inputs.ranks, B)
    limit = forcing.lengths + _new_tokens(opts)
    prefix_rows = np.repeat(forcing.lengths, K)

    def normalise(score: float, length: int) -> float:
        return score / max(length, 1) ** lp

    _check_finite(first_logits)
    rep_context = [c for c in (context or [[]] * B) for _ in range(K)]
    penalties = _Penalties(opts, ends, vocab, rep_context, B * K, inputs.banned)
    rows = np.repeat(np.arange(B), K)
    stepper.select(rows)
    logits = np.repeat(first_logits, K, axis=0)
    # Only the first beam of each row is live at the start (the others are copies).
    beam_scores = np.tile(np.r_[0.0, np.full(K - 1, -np.inf)], B)
    seqs: list[list[int]] = [[] for _ in range(B * K)]
    seq_lps: list[list[float]] = [[] for _ in range(B * K)]
    finished: list[list[tuple[float, list[int], list[float]]]] = [[] for _ in range(B)]
    done = np.zeros(B, dtype=bool)

    for t in range(int(limit.max())):
        logp = log_softmax(penalties.apply(logits, t - prefix_rows))
        forced = t < forcing.lengths  # (B,)
        if forcing.on:  # a forced row: one candidate, from its live first beam
            branch = forcing.branch(t, np.arange(B))
            if forced.any():
                raw = log_softmax(logits.astype(np.float64))
            for b in np.flatnonzero(forced | branch).tolist():
                i = b * K
                if forced[b]:
                    tok, value = forcing.prefixes[b][t], raw[i, forcing.prefixes[b][t]]
                else:
                    assert forcing.ranks is not None
                    tok = _ranked(logp[i], int(forcing.ranks[b]))
                    value = logp[i, tok]
                logp[i : i + K] = -np.inf
                logp[i, tok] = value
        # the best 2K continuations of each beam, then the best 2K of each batch row
        cand = beam_scores[:, None] + logp  # (B*K, V)
        m = min(2 * K, vocab)
        best = np.argpartition(-cand, m - 1, axis=-1)[:, :m]  # (B*K, m) token ids
        best_scores = np.take_along_axis(cand, best, -1).reshape(B, K * m)
        flat = (np.arange(B * K)[:, None] * vocab + best).reshape(B, K * m) % (K * vocab)
        order = np.argsort(-best_scores, axis=-1, kind="stable")[:, : 2 * K]
        top = np.take_along_axis(flat, order, -1)  # (B, 2K) indices into beam * vocab + token
        top_scores = np.take_along_axis(best_scores, order, -1)
        new_rows: list[int] = []
        new_tokens: list[int] = []
        new_scores: list[float] = []
        new_lps: list[float] = []
        for b in range(B):
            chosen = 0
            for idx, score in zip(top[b].tolist(), top_scores[b].tolist()):
                beam, tok = divmod(int(idx), vocab)
                src = b * K + beam
                if done[b] or score == -np.inf:
                    new_rows.append(b * K)
                    new_tokens.append(eos_id)
                    new_scores.append(-np.inf)
                    new_lps.append(0.0)
                    chosen += 1
                elif tok in ends_set and not forced[b]:
                    lps = seq_lps[src] + [float(logp[src, tok])]
                    finished[b].append((normalise(score, t + 1), seqs[src], lps))
                    continue
                else:
                    new_rows.append(src)
                    new_tokens.append(tok)
                    new_scores.append(score)
                    new_lps.append(float(logp[src, tok]))
                    chosen += 1
                if chosen == K:
                    break
            while chosen < K:  # fewer than K live candidates (tiny vocabularies)
                new_rows.append(b * K)
                new_tokens.append(eos_id)
                new_scores.append(-np.inf)
                new_lps.append(0.0)
                chosen += 1
        rows = np.asarray(new_rows)
        tokens = np.asarray(new_tokens, dtype=np.int64)
        beam_scores = np.asarray(new_scores)
        seqs = [seqs[r] + [int(tok)] for r, tok in zip(rows, tokens)]
        seq_lps = [seq_lps[r] + [x] for r, x in zip(rows.tolist(), new_lps)]
        if stop is not None:  # a stopped beam is a finished hypothesis
            for i in np.flatnonzero(beam_scores > -np.inf).tolist():
                b = i // K
                if not forced[b] and stop(b, seqs[i]):
                    finished[b].append((normalise(beam_scores[i], t + 1), seqs[i], seq_lps[i]))
                    beam_scores[i] = -np.inf
        for b in range(B):
            if done[b]:
                continue
            if len(finished[b]) >= K:
                if opts.early_stopping:
                    done[b] = True
                else:  # stop when no live beam can still beat the worst kept hypothesis
                    worst = sorted(s for s, _, _ in finished[b])[-K]
                    best_live = beam_scores[b * K : (b + 1) * K].max()
                    longest = int(limit[b]) if lp > 0 else t + 1
                    done[b] = normalise(best_live, longest) <= worst
            if not done[b] and (t + 1 >= limit[b] or beam_scores[b * K : (b + 1) * K].max()
                                == -np.inf):  # fmt: skip
                # out of length: live beams count as hypotheses
                for i in range(b * K, (b + 1) * K):
                    if beam_scores[i] > -np.inf:
                        finished[b].append(
                            (normalise(beam_scores[i], len(seqs[i])), seqs[i], seq_lps[i])
                        )
                done[b] = True
        if done.all():
            break
        stepper.select(rows)
        penalties.select(rows)
        penalties.observe(tokens)
        logits = stepper.step(tokens)
        _check_finite(logits)

    results = []
    for b in range(B):
        hyps = sorted(finished[b], key=lambda h: -h[0])[: opts.num_hypotheses]
        results.append([Hypothesis(tokens, score, lps) for score, tokens, lps in hyps])
    return results


def decode(
    first_logits: np.ndarray,
    stepper: Stepper,
    opts: GenerationOptions,
    inputs: DecodeInputs,
    scores: bool = True,
) -> list[list[Hypothesis]]:
    """The hypotheses of every row, by the strategy `opts` selects.

    - beam search: the num_hypotheses best, best first;
    - greedy: one; sampling: num_hypotheses independent samples (one seeded generator);
    - return_alternatives: num_hypotheses continuations, the i-th starting with the i-th best
      token after the prefix (the prompt for an LM), each continued by the chosen strategy.
    `inputs.prefixes[b]` (ids) are forced; the hypotheses' tokens include them.
    """
    B = len(first_logits)
    A = opts.num_hypotheses if opts.sampling or opts.return_alternatives else 1
    if A > 1 or opts.return_alternatives:
        stepper.select(np.repeat(np.arange(B), A))
        first_logits = np.repeat(first_logits, A, axis=0)
        inputs = inputs.repeat(B, A, ranked=opts.return_alternatives)
    if opts.num_beams > 1:
        if A > 1 or opts.return_alternatives:
            opts = dataclasses.replace(opts, num_hypotheses=1)
        hyps = beam_search(first_logits, stepper, opts, inputs)
    else:
        hyps = [[h] for h in greedy_or_sample(first_logits, stepper, opts, inputs, scores)]
    if A == 1:
        return hyps
    return [[h for hs in hyps[b * A : (b + 1) * A] for h in hs] for b in range(B)]


def score(first_logits: np.ndarray, stepper: Stepper, targets: list[list[int]]) -> list[np.ndarray]:
    """Teacher forcing: log p(targets[b][t] | everything before it), float64, one array per row.

    `first_logits` (B, V) predict each row's first target; rows may differ in length (shorter
    rows step on with padding that is never read back).
    """
    T = max(len(t) for t in targets)
    tgt = np.zeros((len(targets), T), dtype=np.int64)
    for b, t in enumerate(targets):
        tgt[b, : len(t)] = t
    out = np.zeros(tgt.shape)
    rows, logits = np.arange(len(targets)), first_logits
    for i in range(T):
        _check_finite(logits)
        out[:, i] = log_softmax(logits.astype(np.float64))[rows, tgt[:, i]]
        if i + 1 < T:
            logits = stepper.step(tgt[:, i])
    return [out[b, : len(t)] for b, t in enumerate(targets)]


def generate(
    first_logits: np.ndarray, stepper: Stepper, opts: GenerationOptions, inputs: DecodeInputs
) -> list[list[int]]:
    """The best (or first) token sequence per row, by the strategy `opts` selects."""
    hyps = decode(first_logits, stepper, opts, inputs, scores=False)
    return [h[0].tokens if h else [] for h in hyps]
