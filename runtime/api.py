"""Translator and Generator: text in, text out, over a model package (CTranslate2-like API).

    t = Translator("packages/multi30k")            # provider="auto": the CPU (see cpu_only)
    t.translate("a man rides a bike .")            # greedy
    t.translate_batch(texts, num_beams=4)          # any decoding.GenerationOptions field
    g = Generator("packages/shakespeare")
    for piece in g.stream("ROMEO:", sampling=True, top_p=0.9, seed=0): print(piece, end="")
    t.translate_results(texts, target_prefix=["Ein", None], return_alternatives=True,
                        num_hypotheses=3)              # TranslationResult per text
    g.generate_results(prompts, sampling=True, num_hypotheses=4, seed=0, stop=["\\n\\n"])

Text conventions: a source is its tokens + EOS (as edgeformer.models.translate_ids expects);
an LM prompt is its tokens (BOS alone when empty). Outputs never contain BOS or EOS: the text
API and the *_ids methods never choose padding or BOS (`banned_ids`; `banned=` overrides it),
exactly as edgeformer.models decodes. A generation is the text that
follows the prompt (a leading space included). Whitespace-only text counts as empty; an empty
batch gives an empty list. A bare string where a list is expected, or an item that is not a
string, holds a lone surrogate or is longer than max_len (without truncate), is a ValueError
naming the item's index.
Instances are thread-safe: each call builds its own stepper over the shared sessions.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import threading
import warnings
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from ..core.decoding import (
    DecodeInputs,
    GenerationOptions,
    Hypothesis,
    StopTest,
    decode,
    generate,
    iter_tokens,
    score,
)
from ..core.format import TOKENIZER_FILE, graph_names
from ..core.schema import PackageError
from ..core.variants import pick_variant
from .aio import WorkerPool
from .batching import Batching, Throughput, translate_file, translate_stream
from .package import Package, load_package
from .session import PROVIDERS, Providers, SessionSettings
from .steppers import (
    CachedDecoder,
    Graph,
    SlidingDecoder,
    start_decoder_only,
    start_encoder_decoder,
)

OPTION_NAMES = tuple(f.name for f in dataclasses.fields(GenerationOptions))


@dataclass(frozen=True)
class ScoringResult:
    """Teacher-forced log-probabilities of one target (as CTranslate2's ScoringResult)."""

    tokens: list[str]  # the scored tokens (a translation's final EOS included)
    token_ids: list[int]
    log_probs: list[float]  # natural log, one per token

    @property
    def total(self) -> float:
        return float(sum(self.log_probs))

    @property
    def normalized(self) -> float:
        """Mean log-probability per token (the length-normalised score)."""
        return self.total / max(len(self.log_probs), 1)

    @property
    def perplexity(self) -> float:
        return math.exp(-self.normalized)


@dataclass(frozen=True)
class TextHypothesis:
    """One hypothesis of a TranslationResult / GenerationResult."""

    text: str  # a translation: its target prefix included; a generation: what follows the prompt
    ids: list[int]  # token ids of `text` (no BOS / end token; see `stop` for a stop string)
    score: float  # sum(log_probs) / len(log_probs) ** length_penalty
    # natural-log probability of each id, then of the end token when it ended with one
    log_probs: list[float]


@dataclass(frozen=True)
class TranslationResult:
    """What translate_results gives per input (CTranslate2's TranslationResult, in text):
    beam search: the num_hypotheses best, best first; sampling: num_hypotheses samples;
    return_alternatives: one per top-k token after the prefix, in that order."""

    hypotheses: list[TextHypothesis]

    @property
    def text(self) -> str:
        return self.hypotheses[0].text

    @property
    def score(self) -> float:
        return self.hypotheses[0].score


@dataclass(frozen=True)
class GenerationResult(TranslationResult):
    """What generate_results gives per prompt (same fields as TranslationResult)."""


def _cut(text: str, stops: Sequence[str], start: int = 0) -> str:
    """`text` up to the first stop string found at or after `start` (whole text if none)."""
    found = [i for i in (text.find(s, start) for s in stops) if i >= 0]
    return text[: min(found)] if found else text


def _stop_test(decode, stops: Sequence[str], bases: list[list[int]], skip: list[int]) -> StopTest:
    """stop(row, tokens): the text that tokens[skip[row]:] add after bases[row] + the skipped
    tokens (a prompt, a target prefix) contains a stop string."""
    shown: dict[tuple[int, int], int] = {}

    def stop(row: int, tokens: list[int]) -> bool:
        base = bases[row] + tokens[: skip[row]]
        key = (row, len(tokens[: skip[row]]))
        if key not in shown:
            shown[key] = len(decode(base))
        text = decode(base + tokens[skip[row] :])[shown[key] :]
        return any(s in text for s in stops)

    return stop


def _prefix_list(value: object, n: int) -> list[object]:
    """target_prefix: None, or a list aligned with the batch (None / text / id list per item)."""
    if value is None:
        return [None] * n
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ValueError(
            f"target_prefix must be a list aligned with the inputs (got {type(value).__name__})"
        )
    if len(value) != n:
        raise ValueError(f"target_prefix has {len(value)} items for {n} inputs")
    return list(value)


def _texts(texts: object, what: str) -> list[str]:
    """A list of strings; a bare string is an error, not one request per character.

    Every item is checked (a string, encodable as UTF-8: no lone surrogates); the error names
    the first bad item's index.
    """
    if isinstance(texts, (str, bytes, bytearray)):
        raise ValueError(f"{what} must be a list of strings (got {type(texts).__name__})")
    try:
        items = list(texts)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(f"{what} must be a list of strings (got {type(texts).__name__})") from None
    for i, text in enumerate(items):
        problem = text_problem(text)
        if problem:
            raise ValueError(f"{what}[{i}]: {problem}")
    return items


def text_problem(text: object) -> str | None:
    """Why `text` cannot be tokenized (not a string, a lone surrogate), or None."""
    if not isinstance(text, str):
        return f"must be a string (got {type(text).__name__})"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return (
            f"not valid Unicode text: lone surrogate U+{ord(text[e.start]):04X} "
            f"at character {e.start + 1}"
        )
    return None


def make_options(opts: GenerationOptions | None = None, **options) -> GenerationOptions:
    """GenerationOptions from keyword options on top of `opts` (a package's defaults); unknown
    names: ValueError. Asking for sampling without num_beams turns a default beam search off."""
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise ValueError(f"unknown generation option(s) {unknown}; valid: {list(OPTION_NAMES)}")
    if options.get("sampling") and "num_beams" not in options:
        options["num_beams"] = 1
    return dataclasses.replace(opts or GenerationOptions(), **options)


def pad(seqs: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Id lists -> right-padded (B, T) int64 ids and 0/1 mask."""
    T = max(len(s) for s in seqs)
    ids = np.full((len(seqs), T), pad_id, dtype=np.int64)
    mask = np.zeros((len(seqs), T), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], mask[i, : len(s)] = s, 1
    return ids, mask


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def check_onnxruntime(pkg: Package) -> None:
    """The package's min_onnxruntime, enforced before any graph is loaded."""
    if _version(ort.__version__) < _version(pkg.config.min_onnxruntime):
        raise PackageError(
            f"model package {pkg.path} needs onnxruntime >= {pkg.config.min_onnxruntime}; "
            f"this is {ort.__version__} (pip install -U onnxruntime)"
        )


def cpu_only(provider: str) -> str:
    """Format-2 packages decode on the CPU provider.

    Their self-attention is GroupQueryAttention, which onnxruntime's CUDA provider runs for
    float16/bfloat16 only (an fp32 graph would run it on the CPU, copying the cache across every
    step), and no float16 variant is exported yet. `auto` therefore means the CPU, and `cuda` is
    an error rather than a silent fallback.
    """
    if provider not in PROVIDERS:
        raise ValueError(f"provider={provider!r}, expected one of {PROVIDERS}")
    if provider == "cuda":
        raise ValueError(
            "provider 'cuda': this package's graphs decode on the CPU provider only "
            "(GroupQueryAttention has no float32 CUDA kernel and no float16 variant is exported "
            "yet); use provider 'cpu' or 'auto'"
        )
    return "cpu"


class Model:
    """A loaded package: sessions for every graph of a variant, tokenizer, special ids."""

    def __init__(
        self,
        package_path: str | os.PathLike,
        family: str,
        variant: str = "fp32",
        provider: str = "auto",
        settings: SessionSettings | None = None,
        max_quality_loss: float | None = None,
    ):
        settings = settings or SessionSettings()
        pkg: Package = load_package(package_path)
        self.variant_reason = "asked for"
        if variant == "auto":  # export's measurements decide (core.variants.pick_variant)
            variant, self.variant_reason = pick_variant(pkg.config, max_quality_loss)
        if pkg.family != family:
            use = "Translator" if pkg.family == "encoder-decoder" else "Generator"
            raise PackageError(
                f"model package {pkg.path} is {pkg.family}, not {family}: use {use} "
                f"(edgeformer {'translate' if use == 'Translator' else 'generate'})"
            )
        if settings.providers is not None and provider != "auto":
            raise ValueError(f"provider={provider!r} and providers=[...] given: choose one")
        provider = cpu_only(provider)
        self.package, self.family, self.variant = pkg, family, variant
        check_onnxruntime(pkg)
        self.config = pkg.config
        self.n_layers, self.max_len = self.config.model.n_decoder_layers, self.config.model.max_len
        # generation_config.json: the package's default decoding settings (fields it sets)
        self.default_settings = pkg.generation_settings()  # checked there
        self.defaults = GenerationOptions(**self.default_settings)
        special = self.config.special_tokens
        self.pad_id, self.bos_id, self.eos_id = special.pad_id, special.bos_id, special.eos_id
        self.tokenizer = Tokenizer.from_file(str(pkg.path / TOKENIZER_FILE))
        # the sources' own tokenizer (source_tokenizer.json: converted Marian models), or the same
        source = pkg.source_tokenizer
        own = source.name != TOKENIZER_FILE
        self.source_tokenizer = Tokenizer.from_file(str(source)) if own else self.tokenizer
        names = self.config.graphs  # io_names of its format, checked by load_package
        self.graphs: dict[str, Graph] = {}
        for graph in graph_names(family):
            try:
                sess = settings.session(pkg.file(graph, variant), graph)
            except ValueError:
                raise
            except Exception as e:  # onnxruntime refused the graph (corrupt, escaping data, ...)
                raise PackageError(
                    f"model package {pkg.path}: onnxruntime cannot load the {variant} {graph} "
                    f"graph: {str(e).splitlines()[0][:300]}"
                ) from None
            inputs = [i.name for i in sess.get_inputs()]
            outputs = [o.name for o in sess.get_outputs()]
            want = names[graph]
            if sorted(inputs) != sorted(want["inputs"]) or sorted(outputs) != sorted(
                want["outputs"]
            ):
                raise PackageError(
                    f"model package {pkg.path}: {graph} graph's inputs/outputs do not match "
                    f"the package contract (inputs {inputs}, outputs {outputs})"
                )
            self.graphs[graph] = Graph(sess)
        # what the sessions run on: "cpu", or the providers asked for (onnxruntime's names)
        self.provider = (
            provider
            if settings.providers is None
            else ",".join(self.graphs["decoder"].session.get_providers())
        )

    def options(self, **options) -> GenerationOptions:
        """Keyword options on top of the package's defaults (make_options)."""
        return make_options(self.defaults, **options)

    def encode(self, text: str) -> list[int]:
        """Target-side ids (LM prompts, target prefixes, suppress_sequences, targets)."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_source(self, text: str) -> list[int]:
        """Source ids (a translation's input), with the source tokenizer."""
        return self.source_tokenizer.encode(text, add_special_tokens=False).ids

    def resolve(self, opts: GenerationOptions) -> GenerationOptions:
        """opts with suppress_sequences texts and end_token strings turned into ids (texts are
        encoded alone, as the tokenizer encodes them; a token string must be in the
        vocabulary, or be digits: an id); ids outside the vocabulary are a ValueError."""
        vocab = self.tokenizer.get_vocab_size()
        seqs: list[tuple[int, ...]] = []
        for seq in opts.suppress_sequences:
            ids = tuple(self.encode(seq)) if isinstance(seq, str) else tuple(seq)
            if not ids or max(ids) >= vocab:
                raise ValueError(f"suppress_sequences: {seq!r} has no token ids in the vocabulary")
            seqs.append(ids)
        ends: list[int] = []
        for tok in opts.end_token:
            i = self.tokenizer.token_to_id(tok) if isinstance(tok, str) else tok
            if i is None and isinstance(tok, str) and tok.isdigit():  # the CLI's ids
                i = int(tok)
            if i is None or not 0 <= i < vocab:
                raise ValueError(f"end_token {tok!r} is not a token of the vocabulary")
            ends.append(int(i))
        if seqs == list(opts.suppress_sequences) and ends == list(opts.end_token):
            return opts
        return dataclasses.replace(opts, suppress_sequences=seqs, end_token=ends)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


class TextStream:
    """Incremental detokenization: push token ids, get the text they add.

    The `tokenizers` library's DecodeStream, prefilled with the context (the prompt: the first
    piece then keeps its leading space); it holds back a character split over tokens until it
    completes. flush() gives what it still holds at the end (then as tokenizer.decode shows it),
    so that the pieces always concatenate to decode(context + ids) minus decode(context).
    """

    def __init__(self, tokenizer: Tokenizer, context: list[int] | None = None):
        self.tokenizer, self.context = tokenizer, list(context or [])
        self.ids: list[int] = []
        self.stream = DecodeStream(ids=self.context, skip_special_tokens=True)
        self.shown = 0  # characters given out so far

    def push(self, token: int) -> str:
        self.ids.append(token)
        piece = self.stream.step(self.tokenizer, token) or ""
        self.shown += len(piece)
        return piece

    def flush(self) -> str:
        decode = functools.partial(self.tokenizer.decode, skip_special_tokens=True)
        text = decode(self.context + self.ids)[len(decode(self.context)) :]
        piece, self.shown = text[self.shown :], len(text)
        return piece


class _WarnOnce:
    """The max_new_tokens cut warning, given once per Translator / Generator object."""

    def __init__(self) -> None:
        self.lock, self.done = threading.Lock(), False

    def cut(self, asked: int, n: int, max_len: int, sliding_hint: bool = False) -> None:
        if n >= asked:
            return
        with self.lock:
            if self.done:
                return
            self.done = True
        hint = (
            "; sliding_window=True (--sliding-window) goes on by re-encoding the last "
            f"{max(1, max_len // 2)} tokens"
            if sliding_hint
            else ""
        )
        warnings.warn(
            f"max_new_tokens={asked} cut to {n}: the model's positions end at max_len {max_len}"
            f"{hint} (warned once per object)",
            stacklevel=4,
        )


class _Loaded:
    """What Translator and Generator share: the loaded package and the text API's state."""

    def __init__(self, m: Model, async_workers: int):
        self.pool = WorkerPool(async_workers)  # the *_async methods' threads (runtime.aio)
        self.model = m
        # variant: the one running ("auto" resolved); variant_reason: why it was chosen
        self.variant, self.variant_reason = m.variant, m.variant_reason
        self.provider, self.max_len = m.provider, m.max_len
        self._warn = _WarnOnce()
        self.banned_ids = (m.pad_id, m.bos_id)  # never chosen by the text API


class Translator(_Loaded):
    """Encoder-decoder package -> translations. Options: see decoding.GenerationOptions."""

    def __init__(
        self,
        package_path: str | os.PathLike,
        variant: str = "fp32",
        provider: str = "auto",
        threads: int | None = None,
        spinning: bool | None = None,
        session_options: ort.SessionOptions | None = None,
        providers: Providers | None = None,
        async_workers: int = 1,
        max_quality_loss: float | None = None,
        inter_threads: int = 1,
    ):
        # translate_file / translate_iterable: sub-batches translated at once, each on its own
        # thread (CTranslate2's inter_threads); then each gets cores // inter_threads threads
        self.batch_pool = WorkerPool(inter_threads, "inter_threads")
        if threads is None and inter_threads > 1 and session_options is None:
            threads = max(1, (os.cpu_count() or 1) // inter_threads)
        settings = SessionSettings(threads, spinning, session_options, providers)
        m = Model(package_path, "encoder-decoder", variant, provider, settings, max_quality_loss)
        super().__init__(m, async_workers)

    def _stepper(
        self, sources: list[list[int]], opts: GenerationOptions, longest_prefix: int = 0
    ) -> tuple[CachedDecoder, np.ndarray]:
        m = self.model
        for s in sources:
            if not s or len(s) > m.max_len:
                raise ValueError(
                    f"source of {len(s)} tokens (with EOS): must be 1 .. the model's max_len "
                    f"{m.max_len} (translate_batch(..., truncate=True) cuts longer ones)"
                )
        src, mask = pad(sources, m.pad_id)
        new = opts.max_new_tokens + longest_prefix
        return start_encoder_decoder(m.graphs, m.config, src, mask, new)

    def _fit(self, opts: GenerationOptions, longest_prefix: int = 0) -> GenerationOptions:
        """Target positions are limited to max_len: BOS + prefix + max_new_tokens - 1 fed."""
        room = self.max_len - longest_prefix
        n = min(opts.max_new_tokens, room)
        self._warn.cut(opts.max_new_tokens, n, self.max_len)
        return dataclasses.replace(
            opts, max_new_tokens=n, min_new_tokens=min(n, opts.min_new_tokens)
        )

    def _check_prefixes(self, prefixes: Sequence[Sequence[int]] | None, n: int) -> int:
        """The longest target prefix (ValueError for one that leaves no room)."""
        if prefixes is None:
            return 0
        if len(prefixes) != n:
            raise ValueError(f"{len(prefixes)} target prefixes for {n} sources")
        longest = max((len(p) for p in prefixes), default=0)
        if longest >= self.max_len:
            raise ValueError(
                f"a target prefix of {longest} tokens leaves no room: the model's max_len is "
                f"{self.max_len} target positions"
            )
        return longest

    def translate_ids(
        self,
        sources: list[list[int]],
        opts: GenerationOptions | None = None,
        banned: Sequence[int] | None = None,
        target_prefix: Sequence[Sequence[int]] | None = None,
    ) -> list[list[int]]:
        """Source id lists (ending in EOS) -> output ids (no BOS/EOS), as models.translate_ids;
        `target_prefix[i]` (ids, may be empty) is forced and included in the output."""
        longest = self._check_prefixes(target_prefix, len(sources))
        opts = self._fit(self.model.resolve(opts or self.model.defaults), longest)
        stepper, first = self._stepper(sources, opts, longest)
        banned = self.banned_ids if banned is None else banned
        inputs = DecodeInputs(self.model.eos_id, banned=banned, prefixes=target_prefix)
        return generate(first, stepper, opts, inputs)

    def translate_ids_nbest(
        self,
        sources: list[list[int]],
        opts: GenerationOptions | None = None,
        banned: Sequence[int] | None = None,
        target_prefix: Sequence[Sequence[int]] | None = None,
        stop: StopTest | None = None,
    ) -> list[list[Hypothesis]]:
        """Scored hypotheses per source (decoding.decode): the num_hypotheses best of a beam
        search (num_beams=1: greedy with scores), num_hypotheses samples, or alternatives."""
        longest = self._check_prefixes(target_prefix, len(sources))
        opts = self._fit(self.model.resolve(opts or self.model.defaults), longest)
        stepper, first = self._stepper(sources, opts, longest)
        banned = self.banned_ids if banned is None else banned
        inputs = DecodeInputs(self.model.eos_id, None, banned, target_prefix, stop=stop)
        return decode(first, stepper, opts, inputs)

    def source_ids(self, text: str, truncate: bool = False, max_input_length: int = 0) -> list[int]:
        """A text's source ids (+ EOS); [] for empty or whitespace-only text. ValueError (without
        an index) for a non-string, a lone surrogate, or more than max_len ids (or
        max_input_length, when set: EOS included) without truncate."""
        problem = text_problem(text)
        if problem:
            raise ValueError(problem)
        m = self.model
        ids = m.encode_source(text) if text.strip() else []
        if not ids:
            return []
        limit = min(max_input_length or m.max_len, m.max_len)
        if truncate:
            ids = ids[: limit - 1]
        elif len(ids) + 1 > limit:
            what = f"the model's max_len {m.max_len}"
            if limit < m.max_len:
                what = f"max_input_length {limit}"
            raise ValueError(
                f"source of {len(ids) + 1} tokens (with EOS) is longer than {what} "
                "(truncate=True or --truncate cuts longer ones)"
            )
        return ids + [m.eos_id]

    def check_text(self, text: str, truncate: bool = False, max_input_length: int = 0) -> None:
        """ValueError (the reason, without an index) where translate_batch would refuse `text`."""
        self.source_ids(text, truncate, max_input_length)

    def _sources(
        self, texts: list[str], truncate: bool, max_input_length: int = 0
    ) -> tuple[list[int], list[list[int]]]:
        """(indices of non-empty texts, their source ids); empty texts translate to ''."""
        keep, sources = [], []
        for i, text in enumerate(_texts(texts, "texts")):
            try:
                ids = self.source_ids(text, truncate, max_input_length)
            except ValueError as e:
                raise ValueError(f"texts[{i}]: {e}") from None
            if ids:
                keep.append(i)
                sources.append(ids)
        return keep, sources

    def _prefix_ids(self, target_prefix: object, n: int) -> list[list[int]] | None:
        """target_prefix (None, or per input: None / text / ids) -> id lists, or None."""
        if target_prefix is None:
            return None
        vocab = self.model.tokenizer.get_vocab_size()
        out = []
        for i, p in enumerate(_prefix_list(target_prefix, n)):
            if p is None:
                ids: list[int] = []
            elif isinstance(p, str):
                problem = text_problem(p)
                if problem:
                    raise ValueError(f"target_prefix[{i}]: {problem}")
                ids = self.model.encode(p) if p.strip() else []
            elif isinstance(p, (list, tuple, np.ndarray)) and all(
                isinstance(t, (int, np.integer)) and not isinstance(t, bool) and 0 <= t < vocab
                for t in p
            ):
                ids = [int(t) for t in p]
            else:
                raise ValueError(
                    f"target_prefix[{i}] must be None, a text or a list of token ids < {vocab}"
                )
            out.append(ids)
        return out

    def translate_results(
        self,
        texts: list[str],
        target_prefix: Sequence[str | Sequence[int] | None] | None = None,
        truncate: bool = False,
        **options,
    ) -> list[TranslationResult]:
        """A TranslationResult per text: scored hypotheses with their ids and per-token
        log-probabilities. `target_prefix` (aligned with texts; None, a text or ids per item)
        is forced, scored and included in every hypothesis; `stop` strings cut the text."""
        opts = self.model.options(**options)
        texts = _texts(texts, "texts")
        prefixes = self._prefix_ids(target_prefix, len(texts))
        keep, sources = self._sources(texts, truncate, opts.max_input_length)
        out = [TranslationResult([TextHypothesis("", [], 0.0, [])]) for _ in texts]
        if not sources:
            return out
        kept = None if prefixes is None else [prefixes[i] for i in keep]
        decode_ids = self.model.decode
        stop = None
        stops = list(opts.stop)
        if stops:
            skip = [len(p) for p in kept] if kept is not None else [0] * len(keep)
            stop = _stop_test(decode_ids, stops, [[] for _ in keep], skip)
        found = self.translate_ids_nbest(sources, opts, self.banned_ids, kept, stop)
        for j, (i, hyps) in enumerate(zip(keep, found)):
            start = len(decode_ids(kept[j])) if kept is not None else 0
            out[i] = TranslationResult([
                TextHypothesis(
                    _cut(decode_ids(h.tokens), stops, start) if stops else decode_ids(h.tokens),
                    h.tokens, h.score, h.log_probs or [],
                )
                for h in hyps
            ])  # fmt: skip
        return out

    def translate_batch(
        self,
        texts: list[str],
        truncate: bool = False,
        target_prefix: Sequence[str | Sequence[int] | None] | None = None,
        **options,
    ) -> list[str]:
        """One translation per text ([] for an empty list): the best hypothesis (the first
        sample / alternative when there are several)."""
        opts = self.model.options(**options)
        texts = _texts(texts, "texts")
        if opts.stop or opts.num_hypotheses > 1 and (opts.sampling or opts.return_alternatives):
            results = self.translate_results(texts, target_prefix, truncate, **options)
            return [r.text for r in results]
        prefixes = self._prefix_ids(target_prefix, len(texts))
        keep, sources = self._sources(texts, truncate, opts.max_input_length)
        out = [""] * len(texts)
        if sources:
            kept = None if prefixes is None else [prefixes[i] for i in keep]
            for i, ids in zip(keep, self.translate_ids(sources, opts, self.banned_ids, kept)):
                out[i] = self.model.decode(ids)
        return out

    def translate_batch_nbest(
        self,
        texts: list[str],
        truncate: bool = False,
        target_prefix: Sequence[str | Sequence[int] | None] | None = None,
        **options,
    ) -> list[list[tuple[str, float]]]:
        """[(translation, length-normalised log-probability)] * num_hypotheses per text."""
        results = self.translate_results(texts, target_prefix, truncate, **options)
        return [[(h.text, h.score) for h in r.hypotheses] for r in results]

    def score_ids(self, sources: list[list[int]], targets: list[list[int]]) -> list[np.ndarray]:
        """log p of each target token and of the EOS after it, given the source (teacher
        forcing through the step loop, float64). Sources end in EOS, targets do not."""
        if len(sources) != len(targets) or not sources:
            raise ValueError("score_ids needs as many targets as sources (and at least one)")
        eos = self.model.eos_id
        scored = [list(t) + [eos] for t in targets]
        if max(map(len, scored)) > self.max_len:
            raise ValueError(f"a target of more than {self.max_len - 1} tokens cannot be scored")
        stepper, first = self._stepper(sources, GenerationOptions(max(map(len, scored))))
        return score(first, stepper, scored)

    def score_batch(
        self, sources: list[str], targets: list[str], truncate: bool = False
    ) -> list[ScoringResult]:
        """Per-token log-probabilities of each target translation given its source."""
        sources, targets = _texts(sources, "sources"), _texts(targets, "targets")
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
        if not sources:
            return []
        m = self.model
        src = [m.encode_source(t) for t in sources]
        src = [(ids[: m.max_len - 1] if truncate else ids) + [m.eos_id] for ids in src]
        tgt = [m.encode(t) for t in targets]
        results = []
        for ids, logp in zip(tgt, self.score_ids(src, tgt)):
            ids = ids + [m.eos_id]
            tokens = [m.tokenizer.id_to_token(i) or "" for i in ids]
            results.append(ScoringResult(tokens, ids, logp.tolist()))
        return results

    def translate(
        self, text: str, target_prefix: str | Sequence[int] | None = None, **options
    ) -> str:
        prefix = None if target_prefix is None else [target_prefix]
        return self.translate_batch([text], target_prefix=prefix, **options)[0]

    def stream(
        self,
        text: str,
        target_prefix: str | Sequence[int] | None = None,
        truncate: bool = False,
        **options,
    ) -> Iterator[str]:
        """Translation pieces as they are produced (greedy or sampling; a target prefix comes
        first); their concatenation equals translate()'s output. Beam search, several hypotheses
        or stop strings know their output only at the end: it comes as one piece."""
        opts = self.model.options(**options)
        prefix = None if target_prefix is None else [target_prefix]
        if opts.num_beams > 1 or opts.num_hypotheses > 1 or opts.return_alternatives or opts.stop:
            whole = self.translate_batch([text], truncate, prefix, **options)[0]
            if whole:
                yield whole
            return
        _, sources = self._sources([text], truncate, opts.max_input_length)
        if not sources:
            return
        prefixes = self._prefix_ids(prefix, 1)
        longest = self._check_prefixes(prefixes, 1)
        opts = self._fit(self.model.resolve(opts), longest)
        stepper, first = self._stepper(sources, opts, longest)
        out = TextStream(self.model.tokenizer)
        inputs = DecodeInputs(self.model.eos_id, banned=self.banned_ids, prefixes=prefixes)
        for _, tokens in iter_tokens(first, stepper, opts, inputs):
            piece = out.push(int(tokens[0]))
            if piece:
                yield piece
        piece = out.flush()
        if piece:
            yield piece

    async def translate_async(self, text: str, **options) -> str:
        """translate() on this object's worker pool (the event loop is never blocked)."""
        return await self.pool.run(self.translate, text, **options)

    async def translate_batch_async(self, texts: list[str], **options) -> list[str]:
        return await self.pool.run(self.translate_batch, texts, **options)

    async def translate_results_async(self, texts: list[str], **options) -> list[TranslationResult]:
        return await self.pool.run(self.translate_results, texts, **options)

    def stream_async(self, text: str, **options) -> AsyncIterator[str]:
        """stream() as an async iterator: each piece is decoded on the worker pool."""
        return self.pool.iterate(lambda: self.stream(text, **options))

    def translate_iterable(
        self,
        texts: Iterable[str],
        max_batch_size: int = 32,
        batch_type: str = "examples",
        truncate: bool = False,
        **options,
    ) -> Iterator[str]:
        """Translations of any iterable of texts, lazily and in input order: read-ahead buffers
        sorted by length, sub-batches of max_batch_size examples or padded source tokens."""
        batching, opts = (
            Batching(max_batch_size, batch_type, truncate),
            self.model.options(**options),
        )
        return translate_stream(self, texts, batching, opts)

    def translate_file(
        self,
        src_path: str | os.PathLike,
        out_path: str | os.PathLike,
        max_batch_size: int = 32,
        batch_type: str = "examples",
        truncate: bool = False,
        progress: bool | None = None,
        **options,
    ) -> Throughput:
        """Translate a text file line by line into out_path (written whole or not at all);
        returns sentences, tokens and their rates. progress=None: a progress line on a tty."""
        batching, opts = (
            Batching(max_batch_size, batch_type, truncate),
            self.model.options(**options),
        )
        return translate_file(self, src_path, out_path, batching, opts, progress)


class Generator(_Loaded):
    """Decoder-only package -> continuations. Options: see decoding.GenerationOptions."""

    def __init__(
        self,
        package_path: str | os.PathLike,
        variant: str = "fp32",
        provider: str = "auto",
        threads: int | None = None,
        spinning: bool | None = None,
        session_options: ort.SessionOptions | None = None,
        providers: Providers | None = None,
        async_workers: int = 1,
        max_quality_loss: float | None = None,
    ):
        settings = SessionSettings(threads, spinning, session_options, providers)
        m = Model(package_path, "decoder-only", variant, provider, settings, max_quality_loss)
        super().__init__(m, async_workers)

    def _stepper(self, prompts: list[list[int]], opts: GenerationOptions):
        """(stepper, opts with max_new_tokens cut to the context: prompt + new <= max_len + 1)."""
        T = max(len(p) for p in prompts)
        if min(len(p) for p in prompts) == 0 or T > self.max_len:
            raise ValueError(
                f"prompt of {T} tokens: must be 1 .. the model's max_len {self.max_len} "
                "(generate_batch(..., truncate=True) keeps the end of longer ones)"
            )
        m = self.model
        ids, mask = pad(prompts, m.pad_id)
        n = min(opts.max_new_tokens, self.max_len - T + 1)
        if opts.sliding_window and n < opts.max_new_tokens:
            sliding = SlidingDecoder(m.graphs, m.config, ids, mask, keep=max(1, self.max_len // 2))
            return sliding, sliding.first, opts
        self._warn.cut(opts.max_new_tokens, n, self.max_len, sliding_hint=True)
        opts = dataclasses.replace(
            opts, max_new_tokens=n, min_new_tokens=min(n, opts.min_new_tokens)
        )
        stepper, first = start_decoder_only(m.graphs, m.config, ids, mask, n)
        return stepper, first, opts

    def generate_ids(
        self,
        prompts: list[list[int]],
        opts: GenerationOptions | None = None,
        banned: Sequence[int] | None = None,
    ) -> list[list[int]]:
        """Prompt id lists -> continuation id lists (no EOS); as models.complete_ids."""
        opts = self.model.resolve(opts or self.model.defaults)
        stepper, first, opts = self._stepper(prompts, opts)
        banned = self.banned_ids if banned is None else banned
        return generate(first, stepper, opts, DecodeInputs(self.model.eos_id, prompts, banned))

    def generate_ids_nbest(
        self,
        prompts: list[list[int]],
        opts: GenerationOptions | None = None,
        banned: Sequence[int] | None = None,
        stop: StopTest | None = None,
    ) -> list[list[Hypothesis]]:
        """Scored continuations per prompt (decoding.decode): the num_hypotheses best of a beam
        search (num_beams=1: greedy with scores), num_hypotheses samples, or alternatives (the
        prompt plays the target prefix's part: they branch at the first new token)."""
        opts = self.model.resolve(opts or self.model.defaults)
        stepper, first, opts = self._stepper(prompts, opts)
        banned = self.banned_ids if banned is None else banned
        inputs = DecodeInputs(self.model.eos_id, prompts, banned, stop=stop)
        return decode(first, stepper, opts, inputs)

    def score_ids(self, sequences: list[list[int]]) -> list[np.ndarray]:
        """log p(token t | tokens < t) for tokens 1 .. n - 1 of each sequence (teacher forcing,
        float64); a sequence may be up to max_len + 1 tokens (the last one is never fed)."""
        if (
            not sequences
            or min(map(len, sequences)) < 2
            or max(map(len, sequences)) > self.max_len + 1
        ):
            raise ValueError(
                f"score_ids needs sequences of 2 .. max_len + 1 = {self.max_len + 1} tokens"
            )
        m = self.model
        ids, mask = pad([s[:1] for s in sequences], m.pad_id)
        targets = [s[1:] for s in sequences]
        stepper, first = start_decoder_only(m.graphs, m.config, ids, mask, max(map(len, targets)))
        return score(first, stepper, targets)

    def score_batch(self, texts: list[str]) -> list[ScoringResult]:
        """Per-token log-probabilities of each text's tokens after the first (teacher forcing);
        `perplexity` of a result is the text's perplexity."""
        m = self.model
        ids = [m.encode(t) for t in _texts(texts, "texts")]
        if not ids:
            return []
        for i, seq in enumerate(ids):
            if not 2 <= len(seq) <= self.max_len + 1:
                raise ValueError(
                    f"text {i} has {len(seq)} tokens; scoring needs 2 .. {self.max_len + 1}"
                )
        results = []
        for seq, logp in zip(ids, self.score_ids(ids)):
            tokens = [m.tokenizer.id_to_token(i) or "" for i in seq[1:]]
            results.append(ScoringResult(tokens, seq[1:], logp.tolist()))
        return results

    def prompt_ids(self, text: str, truncate: bool = False, max_input_length: int = 0) -> list[int]:
        """A prompt's ids (BOS alone for empty or whitespace-only text). ValueError (without an
        index) for a non-string, a lone surrogate, or more than max_len ids (or
        max_input_length, when set) without truncate (which keeps the end)."""
        problem = text_problem(text)
        if problem:
            raise ValueError(problem)
        ids = (self.model.encode(text) if text.strip() else []) or [self.model.bos_id]
        limit = min(max_input_length or self.max_len, self.max_len)
        if truncate:
            return ids[-limit:]
        if len(ids) > limit:
            what = (
                f"max_input_length {limit}" if limit < self.max_len
                else f"the model's max_len {self.max_len}"
            )  # fmt: skip
            raise ValueError(
                f"prompt of {len(ids)} tokens is longer than {what} "
                "(truncate=True or --truncate keeps the end of longer ones)"
            )
        return ids

    def check_text(self, text: str, truncate: bool = False, max_input_length: int = 0) -> None:
        """ValueError (the reason, without an index) where generate_batch would refuse `text`."""
        self.prompt_ids(text, truncate, max_input_length)

    def _prompts(
        self, prompts: list[str], truncate: bool, max_input_length: int = 0
    ) -> list[list[int]]:
        out = []
        for i, text in enumerate(_texts(prompts, "prompts")):
            try:
                out.append(self.prompt_ids(text, truncate, max_input_length))
            except ValueError as e:
                raise ValueError(f"prompts[{i}]: {e}") from None
        return out

    def generate_results(
        self, prompts: list[str], truncate: bool = False, **options
    ) -> list[GenerationResult]:
        """A GenerationResult per prompt: scored continuations with their ids and per-token
        log-probabilities; a `stop` string ends a continuation, whose text is cut before it."""
        opts = self.model.options(**options)
        ids = self._prompts(prompts, truncate, opts.max_input_length)
        if not ids:
            return []
        stops = list(opts.stop)
        stop = _stop_test(self.model.decode, stops, ids, [0] * len(ids)) if stops else None
        out = []
        for prompt, hyps in zip(ids, self.generate_ids_nbest(ids, opts, self.banned_ids, stop)):
            out.append(GenerationResult([
                TextHypothesis(
                    _cut(self._continuation(prompt, h.tokens), stops), h.tokens, h.score,
                    h.log_probs or [],
                )
                for h in hyps
            ]))  # fmt: skip
        return out

    def generate_batch(self, prompts: list[str], truncate: bool = False, **options) -> list[str]:
        """One continuation per prompt ([] for an empty list): the best hypothesis (the first
        sample / alternative when there are several)."""
        opts = self.model.options(**options)
        if opts.stop or opts.num_hypotheses > 1 and (opts.sampling or opts.return_alternatives):
            return [r.text for r in self.generate_results(prompts, truncate, **options)]
        ids = self._prompts(prompts, truncate, opts.max_input_length)
        if not ids:
            return []
        new = self.generate_ids(ids, opts, self.banned_ids)
        return [self._continuation(p, c) for p, c in zip(ids, new)]

    def _continuation(self, prompt: list[int], new: list[int]) -> str:
        """The text the new ids add after the prompt (with its leading space, if any)."""
        decode = self.model.decode
        return decode(prompt + new)[len(decode(prompt)) :]

    def generate(self, prompt: str, **options) -> str:
        return self.generate_batch([prompt], **options)[0]

    async def generate_async(self, prompt: str, **options) -> str:
        """generate() on this object's worker pool (the event loop is never blocked)."""
        return await self.pool.run(self.generate, prompt, **options)

    async def generate_batch_async(self, prompts: list[str], **options) -> list[str]:
        return await self.pool.run(self.generate_batch, prompts, **options)

    async def generate_results_async(self, prompts: list[str], **options) -> list[GenerationResult]:
        return await self.pool.run(self.generate_results, prompts, **options)

    def stream_async(self, prompt: str, **options) -> AsyncIterator[str]:
        """stream() as an async iterator: each piece is decoded on the worker pool."""
        return self.pool.iterate(lambda: self.stream(prompt, **options))

    def stream(self, prompt: str, truncate: bool = False, **options) -> Iterator[str]:
        """Text pieces as they are produced; their concatenation equals generate()'s output.
        With `stop` strings, text that may begin one is held back until it cannot."""
        opts = self.model.options(**options)
        if opts.num_beams > 1 or opts.num_hypotheses > 1 or opts.return_alternatives:
            # beam search (or alternatives) knows its output only at the end
            yield self.generate(prompt, truncate=truncate, **options)
            return
        ids = self._prompts([prompt], truncate, opts.max_input_length)
        stepper, first, opts = self._stepper(ids, self.model.resolve(opts))
        stops = list(opts.stop)
        stop = _stop_test(self.model.decode, stops, ids, [0]) if stops else None
        text = TextStream(self.model.tokenizer, ids[0])
        pending = ""  # text that may be the start of a stop string

        def emit(piece: str, final: bool) -> tuple[str, bool]:
            """(text to yield now, whether a stop string was reached)."""
            nonlocal pending
            pending += piece
            cut = _cut(pending, stops)
            if len(cut) < len(pending):
                pending = ""
                return cut, True
            hold = 0 if final else max(
                (k for s in stops for k in range(1, min(len(s), len(pending) + 1))
                 if pending.endswith(s[:k])), default=0,
            )  # fmt: skip
            out, pending = pending[: len(pending) - hold], pending[len(pending) - hold :]
            return out, False

        inputs = DecodeInputs(self.model.eos_id, ids, self.banned_ids, stop=stop)
        for _, tokens in iter_tokens(first, stepper, opts, inputs):
            piece, stopped = emit(text.push(int(tokens[0])), False)
            if piece:
                yield piece
            if stopped:
                return
        piece, _ = emit(text.flush(), True)
        if piece:
            yield piece
