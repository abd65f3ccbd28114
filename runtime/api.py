"""Translator and Generator: text in, text out, over a model package (CTranslate2-like API).

    t = Translator("packages/multi30k")            # provider="auto": the CPU (see cpu_only)
    t.translate("a man rides a bike .")            # greedy
    t.translate_batch(texts, num_beams=4)          # any decoding.GenerationOptions field
    g = Generator("packages/shakespeare")
    for piece in g.stream("ROMEO:", sampling=True, top_p=0.9, seed=0): print(piece, end="")

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
import math
import os
import re
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from .decoding import GenerationOptions, Hypothesis, beam_search, generate, iter_tokens, score
from .package import TOKENIZER_FILE, Package, PackageError, graph_names, io_names, load_package
from .session import PROVIDERS, SPINNING, create_session
from .steppers import CachedDecoder, Graph, start_decoder_only, start_encoder_decoder

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
    """GenerationOptions from keyword options (on top of `opts`); unknown names: ValueError."""
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise ValueError(f"unknown generation option(s) {unknown}; valid: {list(OPTION_NAMES)}")
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
    import onnxruntime as ort

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
        threads: int | None = None,
        spinning: bool | None = None,
    ):
        pkg: Package = load_package(package_path)
        if pkg.family != family:
            use = "Translator" if pkg.family == "encoder-decoder" else "Generator"
            raise PackageError(
                f"model package {pkg.path} is {pkg.family}, not {family}: use {use} "
                f"(edgeformer {'translate' if use == 'Translator' else 'generate'})"
            )
        provider = cpu_only(provider)
        self.package, self.family, self.variant = pkg, family, variant
        check_onnxruntime(pkg)
        self.config = pkg.config
        self.n_layers, self.max_len = self.config.n_layers, self.config.max_len
        special = self.config.special_tokens
        self.pad_id, self.bos_id, self.eos_id = special.pad_id, special.bos_id, special.eos_id
        self.tokenizer = Tokenizer.from_file(str(pkg.path / TOKENIZER_FILE))
        names = io_names(family, self.n_layers)
        self.graphs: dict[str, Graph] = {}
        for graph in graph_names(family):
            spin = SPINNING[graph] if spinning is None else spinning
            try:
                sess = create_session(pkg.file(graph, variant), threads, spin)
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
        self.provider = provider  # "cpu": what the sessions run on

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


class TextStream:
    """Incremental detokenization: push token ids, get the text they add.

    Decodes a short window (from the last emitted point) rather than single tokens, so that
    Metaspace word boundaries and multi-byte characters split over tokens come out right; a
    window ending in an incomplete character (U+FFFD) is held back until it completes.
    """

    def __init__(self, decode, context: list[int] | None = None):
        # context: ids already shown (the prompt); the first piece then keeps its leading space
        self.decode, self.ids = decode, list(context or [])
        self.prefix, self.read = 0, len(self.ids)

    def push(self, token: int) -> str:
        self.ids.append(token)
        prev = self.decode(self.ids[self.prefix : self.read])
        text = self.decode(self.ids[self.prefix :])
        if len(text) > len(prev) and not text.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.ids)
            return text[len(prev) :]
        return ""

    def flush(self) -> str:
        prev = self.decode(self.ids[self.prefix : self.read])
        text = self.decode(self.ids[self.prefix :])
        self.prefix = self.read = len(self.ids)
        return text[len(prev) :]


class _WarnOnce:
    """The max_new_tokens cut warning, given once per Translator / Generator object."""

    def __init__(self) -> None:
        self.lock, self.done = threading.Lock(), False

    def cut(self, asked: int, n: int, max_len: int) -> None:
        if n >= asked:
            return
        with self.lock:
            if self.done:
                return
            self.done = True
        warnings.warn(
            f"max_new_tokens={asked} cut to {n}: the model's positions end at max_len {max_len} "
            "(warned once per object)",
            stacklevel=4,
        )


class Translator:
    """Encoder-decoder package -> translations. Options: see decoding.GenerationOptions."""

    def __init__(
        self,
        package_path: str | os.PathLike,
        variant: str = "fp32",
        provider: str = "auto",
        threads: int | None = None,
        spinning: bool | None = None,
    ):
        self.model = Model(package_path, "encoder-decoder", variant, provider, threads, spinning)
        self.provider, self.max_len = self.model.provider, self.model.max_len
        self._warn = _WarnOnce()
        self.banned_ids = (self.model.pad_id, self.model.bos_id)  # never chosen by the text API

    def _stepper(
        self, sources: list[list[int]], opts: GenerationOptions
    ) -> tuple[CachedDecoder, np.ndarray]:
        m = self.model
        for s in sources:
            if not s or len(s) > m.max_len:
                raise ValueError(
                    f"source of {len(s)} tokens (with EOS): must be 1 .. the model's max_len "
                    f"{m.max_len} (translate_batch(..., truncate=True) cuts longer ones)"
                )
        src, mask = pad(sources, m.pad_id)
        return start_encoder_decoder(m.graphs, m.config, src, mask, opts.max_new_tokens)

    def _fit(self, opts: GenerationOptions) -> GenerationOptions:
        """Target positions are limited to max_len: BOS + max_new_tokens - 1 fed tokens."""
        n = min(opts.max_new_tokens, self.max_len)
        self._warn.cut(opts.max_new_tokens, n, self.max_len)
        return dataclasses.replace(
            opts, max_new_tokens=n, min_new_tokens=min(n, opts.min_new_tokens)
        )

    def translate_ids(
        self,
        sources: list[list[int]],
        opts: GenerationOptions | None = None,
        banned: Sequence[int] | None = None,
    ) -> list[list[int]]:
        """Source id lists (ending in EOS) -> output ids (no BOS/EOS), as models.translate_ids."""
        opts = self._fit(opts or GenerationOptions())
        stepper, first = self._stepper(sources, opts)
        banned = self.banned_ids if banned is None else banned
        return generate(first, stepper, opts, self.model.eos_id, banned=banned)

    def translate_ids_nbest(
        self,
        sources: list[list[int]],
        opts: GenerationOptions | None = None,
        banned: Sequence[int] | None = None,
    ) -> list[list[Hypothesis]]:
        """Beam search (num_beams=1 is greedy with scores): num_hypotheses best per source."""
        opts = self._fit(opts or GenerationOptions())
        if opts.sampling:
            raise ValueError("n-best lists come from beam search, not sampling")
        stepper, first = self._stepper(sources, opts)
        banned = self.banned_ids if banned is None else banned
        return beam_search(first, stepper, opts, self.model.eos_id, banned=banned)

    def source_ids(self, text: str, truncate: bool = False) -> list[int]:
        """A text's source ids (+ EOS); [] for empty or whitespace-only text. ValueError (without
        an index) for a non-string, a lone surrogate, or more than max_len ids without truncate."""
        problem = text_problem(text)
        if problem:
            raise ValueError(problem)
        m = self.model
        ids = m.encode(text) if text.strip() else []
        if not ids:
            return []
        if truncate:
            ids = ids[: m.max_len - 1]
        elif len(ids) + 1 > m.max_len:
            raise ValueError(
                f"source of {len(ids) + 1} tokens (with EOS) is longer than the model's max_len "
                f"{m.max_len} (truncate=True or --truncate cuts longer ones)"
            )
        return ids + [m.eos_id]

    def check_text(self, text: str, truncate: bool = False) -> None:
        """ValueError (the reason, without an index) where translate_batch would refuse `text`."""
        self.source_ids(text, truncate)

    def _sources(self, texts: list[str], truncate: bool) -> tuple[list[int], list[list[int]]]:
        """(indices of non-empty texts, their source ids); empty texts translate to ''."""
        keep, sources = [], []
        for i, text in enumerate(_texts(texts, "texts")):
            try:
                ids = self.source_ids(text, truncate)
            except ValueError as e:
                raise ValueError(f"texts[{i}]: {e}") from None
            if ids:
                keep.append(i)
                sources.append(ids)
        return keep, sources

    def translate_batch(self, texts: list[str], truncate: bool = False, **options) -> list[str]:
        """One translation per text ([] for an empty list)."""
        opts = make_options(**options)
        texts = _texts(texts, "texts")
        keep, sources = self._sources(texts, truncate)
        out = [""] * len(texts)
        if sources:
            for i, ids in zip(keep, self.translate_ids(sources, opts, self.banned_ids)):
                out[i] = self.model.decode(ids)
        return out

    def translate_batch_nbest(
        self, texts: list[str], truncate: bool = False, **options
    ) -> list[list[tuple[str, float]]]:
        """[(translation, length-normalised log-probability)] * num_hypotheses per text."""
        opts = make_options(**options)
        texts = _texts(texts, "texts")
        keep, sources = self._sources(texts, truncate)
        out: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in texts]
        if sources:
            for i, hyps in zip(keep, self.translate_ids_nbest(sources, opts, self.banned_ids)):
                out[i] = [(self.model.decode(h.tokens), h.score) for h in hyps]
        return out

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
        src = [m.encode(t) for t in sources]
        src = [(ids[: m.max_len - 1] if truncate else ids) + [m.eos_id] for ids in src]
        tgt = [m.encode(t) for t in targets]
        results = []
        for ids, logp in zip(tgt, self.score_ids(src, tgt)):
            ids = ids + [m.eos_id]
            tokens = [m.tokenizer.id_to_token(i) or "" for i in ids]
            results.append(ScoringResult(tokens, ids, logp.tolist()))
        return results

    def translate(self, text: str, **options) -> str:
        return self.translate_batch([text], **options)[0]


class Generator:
    """Decoder-only package -> continuations. Options: see decoding.GenerationOptions."""

    def __init__(
        self,
        package_path: str | os.PathLike,
        variant: str = "fp32",
        provider: str = "auto",
        threads: int | None = None,
        spinning: bool | None = None,
    ):
        self.model = Model(package_path, "decoder-only", variant, provider, threads, spinning)
        self.provider, self.max_len = self.model.provider, self.model.max_len
        self._warn = _WarnOnce()
        self.banned_ids = (self.model.pad_id, self.model.bos_id)  # never chosen by the text API

    def _stepper(self, prompts: list[list[int]], opts: GenerationOptions):
        """(stepper, opts with max_new_tokens cut to the context: prompt + new <= max_len + 1)."""
        T = max(len(p) for p in prompts)
        if min(len(p) for p in prompts) == 0 or T > self.max_len:
            raise ValueError(
                f"prompt of {T} tokens: must be 1 .. the model's max_len {self.max_len} "
                "(generate_batch(..., truncate=True) keeps the end of longer ones)"
            )
        n = min(opts.max_new_tokens, self.max_len - T + 1)
        self._warn.cut(opts.max_new_tokens, n, self.max_len)
        opts = dataclasses.replace(
            opts, max_new_tokens=n, min_new_tokens=min(n, opts.min_new_tokens)
        )
        m = self.model
        ids, mask = pad(prompts, m.pad_id)
        stepper, first = start_decoder_only(m.graphs, m.config, ids, mask, n)
        return stepper, first, opts

    def generate_ids(
        self,
        prompts: list[list[int]],
        opts: GenerationOptions | None = None,
        banned: Sequence[int] | None = None,
    ) -> list[list[int]]:
        """Prompt id lists -> continuation id lists (no EOS); as models.complete_ids."""
        stepper, first, opts = self._stepper(prompts, opts or GenerationOptions())
        banned = self.banned_ids if banned is None else banned
        return generate(first, stepper, opts, self.model.eos_id, prompts, banned)

    def generate_ids_nbest(
        self,
        prompts: list[list[int]],
        opts: GenerationOptions | None = None,
        banned: Sequence[int] | None = None,
    ) -> list[list[Hypothesis]]:
        if (opts or GenerationOptions()).sampling:
            raise ValueError("n-best lists come from beam search, not sampling")
        stepper, first, opts = self._stepper(prompts, opts or GenerationOptions())
        banned = self.banned_ids if banned is None else banned
        return beam_search(first, stepper, opts, self.model.eos_id, prompts, banned)

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

    def prompt_ids(self, text: str, truncate: bool = False) -> list[int]:
        """A prompt's ids (BOS alone for empty or whitespace-only text). ValueError (without an
        index) for a non-string, a lone surrogate, or more than max_len ids without truncate."""
        problem = text_problem(text)
        if problem:
            raise ValueError(problem)
        ids = (self.model.encode(text) if text.strip() else []) or [self.model.bos_id]
        if truncate:
            return ids[-self.max_len :]
        if len(ids) > self.max_len:
            raise ValueError(
                f"prompt of {len(ids)} tokens is longer than the model's max_len {self.max_len} "
                "(truncate=True or --truncate keeps the end of longer ones)"
            )
        return ids

    def check_text(self, text: str, truncate: bool = False) -> None:
        """ValueError (the reason, without an index) where generate_batch would refuse `text`."""
        self.prompt_ids(text, truncate)

    def _prompts(self, prompts: list[str], truncate: bool) -> list[list[int]]:
        out = []
        for i, text in enumerate(_texts(prompts, "prompts")):
            try:
                out.append(self.prompt_ids(text, truncate))
            except ValueError as e:
                raise ValueError(f"prompts[{i}]: {e}") from None
        return out

    def generate_batch(self, prompts: list[str], truncate: bool = False, **options) -> list[str]:
        """One continuation per prompt ([] for an empty list)."""
        opts = make_options(**options)
        ids = self._prompts(prompts, truncate)
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

    def stream(self, prompt: str, truncate: bool = False, **options) -> Iterator[str]:
        """Text pieces as they are produced; their concatenation equals generate()'s output."""
        opts = make_options(**options)
        if opts.num_beams > 1:  # beam search knows its output only at the end
            yield self.generate(prompt, truncate=truncate, **options)
            return
        ids = self._prompts([prompt], truncate)
        stepper, first, opts = self._stepper(ids, opts)
        text = TextStream(self.model.decode, ids[0])
        for _, tokens in iter_tokens(first, stepper, opts, self.model.eos_id, ids, self.banned_ids):
            piece = text.push(int(tokens[0]))
            if piece:
                yield piece
        piece = text.flush()
        if piece:
            yield piece
