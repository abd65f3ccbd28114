"""Translator and Generator: text in, text out, over a model package (CTranslate2-like API).

    t = Translator("packages/multi30k")            # provider="auto": the CPU (see model.cpu_only)
    t = Translator("packages/multi30k", settings=RuntimeSettings(variant="int8", threads=2))
    t.translate("a man rides a bike .")            # greedy
    t.translate_batch(texts, num_beams=4)          # any core.decoding.GenerationOptions field
    g = Generator("packages/shakespeare")
    for piece in g.stream("ROMEO:", sampling=True, top_p=0.9, seed=0): print(piece, end="")
    t.translate_results(texts, target_prefix=["Ein", None], return_alternatives=True,
                        num_hypotheses=3)              # TranslationResult per text
    g.generate_results(prompts, sampling=True, num_hypotheses=4, seed=0, stop=["\\n\\n"])

Every text call goes the same way: the options are prepared once for the request
(Model.prepare: the package's defaults under the caller's options, max_new_tokens fitted to the
model), the inputs are checked and encoded, and one decode over a stepper gives the hypotheses;
translate_batch and generate_batch are the first hypothesis's text of translate_results /
generate_results (decoded without scores, which is faster).

Text conventions: a source is its tokens + EOS (as edgeformer.models.translate_ids expects);
an LM prompt is its tokens (BOS alone when empty). Outputs never contain BOS or EOS: the text
API and the *_ids methods never choose padding or BOS (`banned_ids`; `banned=` overrides it),
exactly as edgeformer.models decodes. A generation is the text that follows the prompt (a
leading space included). Whitespace-only text counts as empty; an empty batch gives an empty
list. A bare string where a list is expected, or an item that is not a string, holds a lone
surrogate or is longer than max_len (without truncate), is a ValueError naming the item's index.
Instances are thread-safe: each call builds its own stepper over the shared sessions.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence

import numpy as np
import onnxruntime as ort

from ..core.decoding import (
    DecodeInputs,
    GenerationOptions,
    Hypothesis,
    Stepper,
    StopTest,
    decode,
    iter_tokens,
    score,
)
from ..core.languages import per_text
from ..core.schema import PackageError
from ..core.speculative import PromptLookup, Speculation, SpeculationStats
from .aio import WorkerPool
from .batching import (
    READ_AHEAD,
    Batching,
    Pipeline,
    Throughput,
    call_batching,
    in_sub_batches,
    translate_file,
    translate_stream,
)
from .chat import EMPTY_CHAT_PROMPT, ChatTemplateError
from .model import Model, WarnOnce, pad
from .results import GenerationResult, ScoringResult, TextHypothesis, TranslationResult
from .session import Providers, RuntimeSettings, runtime_settings
from .speculative import DraftModel, check_draft_tokenizer
from .steppers import (
    NO_VERIFY,
    CachedDecoder,
    SlidingDecoder,
    give_back,
    start_decoder_only,
    start_encoder_decoder,
)  # fmt: skip
from .text import (
    StopCut,
    TextStream,
    check_texts,
    cut_at_stop,
    prefix_list,
    stop_test,
    text_problem,
)
from .tools import ToolUse, template_messages, tool_use

__all__ = [
    "Translator",
    "Generator",
    "TranslationResult",
    "GenerationResult",
    "TextHypothesis",
    "ScoringResult",
]

Prefix = str | Sequence[int] | None  # a target prefix: text, ids, or none
LanguageArg = str | Sequence[str | None] | None  # a language code, or one per text
Languages = tuple[LanguageArg, LanguageArg]  # (source_lang, target_lang)


def with_forced(
    forced: list[list[int]], prefixes: list[list[int]] | None
) -> list[list[int]] | None:
    """Each text's target prefix after its forced first tokens (None: neither has any)."""
    if not any(forced):
        return prefixes
    return [f + (p if prefixes is not None else []) for f, p in zip(forced, prefixes or forced)]


def counting_forced(opts: GenerationOptions, k: int) -> GenerationOptions:
    """opts whose max_new_tokens / min_new_tokens count the k forced first tokens (a target
    language, BART's <s>) as transformers counts them: k fewer after the prefix."""
    if not k:
        return opts
    assert opts.max_new_tokens is not None
    return dataclasses.replace(
        opts, max_new_tokens=max(opts.max_new_tokens - k, 1),
        min_new_tokens=max(opts.min_new_tokens - k, 0),
    )  # fmt: skip


def _whole_only(opts: GenerationOptions) -> bool:
    """Decoding whose output is known only at the end (stream gives it as one piece)."""
    return opts.num_beams > 1 or opts.num_hypotheses > 1 or opts.return_alternatives


def _needs_results(opts: GenerationOptions) -> bool:
    """translate_batch / generate_batch must go through the scored results (stop strings cut
    the text; several samples or alternatives give the first)."""
    return bool(opts.stop) or (
        opts.num_hypotheses > 1 and (opts.sampling or opts.return_alternatives)
    )


@dataclasses.dataclass
class SourcePlan:
    """One text's translation for a caller that runs the decoding steps itself (the server's
    continuous batch, runtime/serve/scheduler.py): what Translator.translate_results would
    decode for it, prepared once."""

    source: list[int]  # its source ids, in the model's frame (+ EOS)
    opts: GenerationOptions  # prepared for it (Model.prepare; the forced tokens counted)
    inputs: DecodeInputs  # EOS, the text API's bans, the forced first tokens, stop strings
    forced: list[int]  # the target's forced first tokens (a language), output's first tokens


def _row_stop(stop: StopTest | None, row: int) -> StopTest | None:
    """A batch's stop test for its row `row` decoded alone (as row 0)."""
    if stop is None:
        return None
    return lambda _, seq: stop(row, seq)


class _Loaded:
    """What Translator and Generator share: the loaded package and the text API's state."""

    def __init__(self, m: Model, async_workers: int):
        self.pool = WorkerPool(async_workers)  # the *_async methods' threads (runtime.aio)
        self.model = m
        # variant: the one running ("auto" resolved); variant_reason: why it was chosen
        self.variant, self.variant_reason = m.variant, m.variant_reason
        self.provider, self.max_len = m.provider, m.max_len
        self._warn = WarnOnce()
        # never chosen by the text API: padding and BOS, unless one is also a token that ends
        # the output (GPT-2's one <|endoftext|>; an instruct model without a pad token, whose
        # padding is its EOS: banning it would never end a reply) or a language code (a decoder
        # that starts from its target language, as mBART's fine-tunes: transformers lets it
        # write that token again)
        ends = {m.eos_id, *(t for t in m.defaults.end_token if isinstance(t, int))}
        allowed = ends | set(m.translation.languages.values())
        self.banned_ids = tuple(i for i in dict.fromkeys((m.pad_id, m.bos_id)) if i not in allowed)

    @staticmethod
    def _decode(
        first: np.ndarray, stepper: Stepper, opts: GenerationOptions, inputs: DecodeInputs,
        scores: bool,
    ) -> list[list[Hypothesis]]:  # fmt: skip
        """core.decoding.decode, then the stepper given back for the next one-row request
        (steppers.give_back)."""
        found = decode(first, stepper, opts, inputs, scores)
        give_back(stepper)
        return found


class Translator(_Loaded):
    """Encoder-decoder package -> translations. Options: core.decoding.GenerationOptions."""

    def __init__(
        self,
        package_path: str | os.PathLike,
        variant: str | None = None,
        provider: str | None = None,
        threads: int | None = None,
        spinning: bool | None = None,
        session_options: ort.SessionOptions | None = None,
        providers: Providers | None = None,
        async_workers: int = 1,
        max_quality_loss: float | None = None,
        inter_threads: int = 1,
        *,
        settings: RuntimeSettings | None = None,
    ):
        """settings: how the package runs (RuntimeSettings); or its fields as the keyword
        arguments variant ... max_quality_loss (None: RuntimeSettings' default), not both.
        inter_threads: translate_file / translate_iterable's sub-batches translated at once."""
        runtime = runtime_settings(
            settings, variant=variant, provider=provider, threads=threads, spinning=spinning,
            session_options=session_options, providers=providers,
            max_quality_loss=max_quality_loss,
        )  # fmt: skip
        # translate_file / translate_iterable: sub-batches translated at once, each on its own
        # thread (CTranslate2's inter_threads); then each gets cores // inter_threads threads
        self.batch_pool = WorkerPool(inter_threads, "inter_threads")
        if runtime.threads is None and inter_threads > 1 and runtime.session_options is None:
            runtime = dataclasses.replace(
                runtime, threads=max(1, (os.cpu_count() or 1) // inter_threads)
            )
        super().__init__(Model(package_path, "encoder-decoder", runtime), async_workers)

    # ---- ids in, ids out ------------------------------------------------------------------

    def _prepare(self, opts: GenerationOptions, longest_prefix: int = 0) -> GenerationOptions:
        """Target positions are limited to max_len: BOS + prefix + max_new_tokens - 1 fed."""
        return self.model.prepare(opts, self.max_len - longest_prefix, self._warn)

    def _start(self, sources: list[list[int]], max_new: int) -> tuple[Stepper, np.ndarray]:
        for s in sources:
            if not s or len(s) > self.max_len:
                raise ValueError(
                    f"source of {len(s)} tokens (with EOS): must be 1 .. the model's max_len "
                    f"{self.max_len} (translate_batch(..., truncate=True) cuts longer ones)"
                )
        vocab = self.model.source_vocab
        for s in sources:
            if not all(0 <= t < vocab for t in s):
                raise ValueError(f"source {s[:16]}... has ids outside the sources' vocabulary "
                                 f"(size {vocab})")  # fmt: skip
        # padding is masked: any id of the source vocabulary does (pad_id, where it is one)
        src, mask = pad(sources, self.model.source_pad_id)
        return start_encoder_decoder(self.model.graphs, self.model.config, src, mask, max_new)

    def _translate_prepared(
        self,
        sources: list[list[int]],
        opts: GenerationOptions,
        prefixes: Sequence[Sequence[int]] | None = None,
        banned: Sequence[int] | None = None,
        stop: StopTest | None = None,
        scores: bool = True,
    ) -> list[list[Hypothesis]]:
        """Hypotheses per source, with options already prepared for this request."""
        longest = max((len(p) for p in prefixes or ()), default=0)
        assert opts.max_new_tokens is not None
        stepper, first = self._start(sources, opts.max_new_tokens + longest)
        banned = self.banned_ids if banned is None else banned
        inputs = DecodeInputs(self.model.eos_id, None, banned, prefixes, stop=stop)
        return self._decode(first, stepper, opts, inputs, scores)

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

    def translate_ids_nbest(
        self,
        sources: list[list[int]],
        opts: GenerationOptions | None = None,
        banned: Sequence[int] | None = None,
        target_prefix: Sequence[Sequence[int]] | None = None,
        stop: StopTest | None = None,
    ) -> list[list[Hypothesis]]:
        """Scored hypotheses per source (core.decoding.decode): the num_hypotheses best of a
        beam search (num_beams=1: greedy with scores), num_hypotheses samples, or alternatives.
        Sources end in EOS; `target_prefix[i]` (ids, may be empty) is forced and included."""
        longest = self._check_prefixes(target_prefix, len(sources))
        opts = self._prepare(opts or self.model.defaults, longest)
        return self._translate_prepared(sources, opts, target_prefix, banned, stop)

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
        opts = self._prepare(opts or self.model.defaults, longest)
        found = self._translate_prepared(sources, opts, target_prefix, banned, scores=False)
        return [h[0].tokens if h else [] for h in found]

    # ---- text in -------------------------------------------------------------------------

    def source_ids(
        self, text: str, truncate: bool = False, max_input_length: int = 0,
        source_lang: str | None = None,
    ) -> list[int]:  # fmt: skip
        """A text's source ids in the model's frame (+ EOS; a converted model's own: BART's
        <s> first, NLLB's language token, in `source_lang` where given); [] for empty or
        whitespace-only text. ValueError (without an index) for a non-string, a lone
        surrogate, an unknown language, or more than max_len ids (or max_input_length, when
        set: EOS included) without truncate."""
        problem = text_problem(text)
        if problem:
            raise ValueError(problem)
        m = self.model
        head, tail = m.translation.frame(source_lang)
        ids = m.encode_source(text) if text.strip() else []
        if not ids:
            return []
        limit = min(max_input_length or m.max_len, m.max_len)
        extra = len(head) + len(tail)
        if truncate:
            ids = ids[: max(limit - extra, 1)]
        elif len(ids) + extra > limit:
            what = f"the model's max_len {m.max_len}"
            if limit < m.max_len:
                what = f"max_input_length {limit}"
            raise ValueError(
                f"source of {len(ids) + extra} tokens (with EOS) is longer than {what} "
                "(truncate=True or --truncate cuts longer ones)"
            )
        return head + ids + tail

    def check_languages(self, source_lang: str | None, target_lang: str | None) -> None:
        """ValueError (naming close matches) for a code the model does not know, or a missing
        target language a multilingual model needs."""
        self.model.translation.frame(source_lang)
        self._forced(target_lang, 1)

    @property
    def languages(self) -> list[str]:
        """The model's language codes (source_lang / target_lang); [] for a one-pair model."""
        return list(self.model.translation.languages)

    def _forced(self, target_lang: str | Sequence[str | None] | None, n: int) -> list[list[int]]:
        """Per text, the tokens forced after the decoder start: its target language's, else
        the generation config's forced_bos_token_id (counted in max_new_tokens, as
        transformers counts them)."""
        m = self.model
        return [
            m.translation.target_prefix(t, m.forced_first, m.bos_id)
            for t in per_text(target_lang, n, "target_lang")
        ]

    def check_text(self, text: str, truncate: bool = False, max_input_length: int = 0) -> None:
        """ValueError (the reason, without an index) where translate_batch would refuse `text`."""
        self.source_ids(text, truncate, max_input_length)

    def _sources(
        self, texts: list[str], truncate: bool, max_input_length: int = 0,
        source_lang: str | Sequence[str | None] | None = None,
    ) -> tuple[list[int], list[list[int]]]:  # fmt: skip
        """(indices of non-empty texts, their source ids); empty texts translate to ''."""
        keep, sources = [], []
        langs = per_text(source_lang, len(texts), "source_lang")
        for i, text in enumerate(texts):
            try:
                ids = self.source_ids(text, truncate, max_input_length, langs[i])
            except ValueError as e:  # a PackageError (the tokenizer failed on it) stays one
                kind = PackageError if isinstance(e, PackageError) else ValueError
                raise kind(f"texts[{i}]: {e}") from None
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
        for i, p in enumerate(prefix_list(target_prefix, n)):
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

    def _results(
        self,
        texts: list[str],
        target_prefix: Sequence[Prefix] | None,
        truncate: bool,
        opts: GenerationOptions,
        scores: bool,
        langs: Languages = (None, None),
        batching: Batching | None = None,
    ) -> list[TranslationResult]:
        """The one path of the text API: a TranslationResult per text ('' for an empty one).
        `opts`: the package's defaults under the caller's options (Model.options); `langs`:
        (source_lang, target_lang), each one code or one per text; `batching`: the
        sub-batches (call_batching; None: its default)."""
        texts = check_texts(texts, "texts")
        forced = self._forced(langs[1], len(texts))
        prefixes = with_forced(forced, self._prefix_ids(target_prefix, len(texts)))
        keep, sources = self._sources(texts, truncate, opts.max_input_length, langs[0])
        out = [TranslationResult([TextHypothesis("", [], 0.0, [])]) for _ in texts]
        if not sources:
            return out
        kept = None if prefixes is None else [prefixes[i] for i in keep]
        opts = self._prepare(opts, self._check_prefixes(kept, len(sources)))
        opts = counting_forced(opts, min(len(forced[i]) for i in keep))
        text = self.model.decode
        stops = list(opts.stop)
        skip = [len(p) for p in kept] if kept is not None else [0] * len(keep)

        def translate(picked: list[int]) -> list[list[Hypothesis]]:
            stop = stop_test(text, stops, [[] for _ in picked], [skip[j] for j in picked])
            prefixes = None if kept is None else [kept[j] for j in picked]
            batch = [sources[j] for j in picked]
            return self._translate_prepared(batch, opts, prefixes, None, stop if stops else None,
                                            scores)  # fmt: skip

        batching = batching or call_batching(0, "examples")
        found = in_sub_batches([len(x) for x in sources], batching, translate)
        for j, (i, hyps) in enumerate(zip(keep, found)):
            start = len(text(kept[j])) if kept is not None else 0
            out[i] = TranslationResult([
                TextHypothesis(cut_at_stop(text(h.tokens), stops, start), h.tokens, h.score,
                               h.log_probs or [])
                for h in hyps
            ])  # fmt: skip
        return out

    def translate_results(
        self,
        texts: list[str],
        target_prefix: Sequence[Prefix] | None = None,
        truncate: bool = False,
        source_lang: LanguageArg = None,
        target_lang: LanguageArg = None,
        max_batch_size: int = 0,
        batch_type: str = "examples",
        **options,
    ) -> list[TranslationResult]:
        """A TranslationResult per text: scored hypotheses with their ids and per-token
        log-probabilities. `target_prefix` (aligned with texts; None, a text or ids per item)
        is forced, scored and included in every hypothesis; `stop` strings cut the text.
        source_lang / target_lang (a multilingual model's codes, e.g. "eng_Latn",
        "deu_Latn": one for all texts or one per text) pick the languages. The texts run in
        length-sorted sub-batches of max_batch_size examples or padded source tokens
        (batch_type "tokens"; 0: 32 examples or 1,024 tokens), as CTranslate2's."""
        batching = call_batching(max_batch_size, batch_type)
        opts = self.model.options(**options)
        return self.translate_results_with(texts, opts, target_prefix, truncate, source_lang,
                                           target_lang, batching)  # fmt: skip

    def translate_results_with(
        self,
        texts: list[str],
        opts: GenerationOptions,
        target_prefix: Sequence[Prefix] | None = None,
        truncate: bool = False,
        source_lang: LanguageArg = None,
        target_lang: LanguageArg = None,
        batching: Batching | None = None,
    ) -> list[TranslationResult]:
        """translate_results with the options made already (`Model.options`: the package's
        defaults under the caller's, validated when made), as the server makes a request's
        once, before it is queued; batching: call_batching's (None: its default)."""
        batching = batching or call_batching(0, "examples")
        langs = (source_lang, target_lang)
        return self._results(texts, target_prefix, truncate, opts, True, langs, batching)

    def plan(
        self, text: str, opts: GenerationOptions, source_lang: str | None = None,
        target_lang: str | None = None,
    ) -> SourcePlan | None:  # fmt: skip
        """What decoding `text` takes with `opts` (Model.options: validated once), for a caller
        that steps the decoder itself: translate_results' source ids, prepared options and
        decoding inputs for one text (None: an empty text, translated to ''). ValueError as
        translate_results."""
        m = self.model
        source = self.source_ids(text, False, opts.max_input_length, source_lang)
        if not source:
            return None
        forced = self._forced(target_lang, 1)[0]
        prefixes = [forced] if forced else None
        prepared = counting_forced(self._prepare(opts, len(forced)), len(forced))
        stops = list(prepared.stop)
        stop = stop_test(m.decode, stops, [[]], [len(forced)]) if stops else None
        inputs = DecodeInputs(m.eos_id, None, self.banned_ids, prefixes, stop=stop)
        return SourcePlan(source, prepared, inputs, forced)

    def plan_text(self, plan: SourcePlan, tokens: list[int]) -> str:
        """The translation of a planned text from the tokens its decoding chose (the forced
        ones first): as translate_results gives it, cut before a stop string."""
        decode = self.model.decode
        return cut_at_stop(decode(tokens), list(plan.opts.stop), len(decode(plan.forced)))

    def translate_batch(
        self,
        texts: list[str],
        truncate: bool = False,
        target_prefix: Sequence[Prefix] | None = None,
        source_lang: LanguageArg = None,
        target_lang: LanguageArg = None,
        max_batch_size: int = 0,
        batch_type: str = "examples",
        **options,
    ) -> list[str]:
        """One translation per text ([] for an empty list): the best hypothesis (the first
        sample / alternative when there are several). source_lang / target_lang,
        max_batch_size / batch_type: as translate_results."""
        batching = call_batching(max_batch_size, batch_type)
        opts = self.model.options(**options)
        langs = (source_lang, target_lang)
        scores = _needs_results(opts)
        results = self._results(texts, target_prefix, truncate, opts, scores, langs, batching)
        return [r.text for r in results]

    def translate_batch_nbest(
        self,
        texts: list[str],
        truncate: bool = False,
        target_prefix: Sequence[Prefix] | None = None,
        **options,
    ) -> list[list[tuple[str, float]]]:
        """[(translation, length-normalised log-probability)] * num_hypotheses per text."""
        results = self.translate_results(texts, target_prefix, truncate, **options)
        return [[(h.text, h.score) for h in r.hypotheses] for r in results]

    def translate(self, text: str, target_prefix: Prefix = None, **options) -> str:
        """One translation (options as translate_batch: source_lang, target_lang, ...)."""
        prefix = None if target_prefix is None else [target_prefix]
        return self.translate_batch([text], target_prefix=prefix, **options)[0]

    def stream(
        self, text: str, target_prefix: Prefix = None, truncate: bool = False,
        source_lang: str | None = None, target_lang: str | None = None, **options,
    ) -> Iterator[str]:  # fmt: skip
        """Translation pieces as they are produced (greedy or sampling; a target prefix comes
        first); their concatenation equals translate()'s output. Beam search, several hypotheses
        or stop strings know their output only at the end: it comes as one piece."""
        opts = self.model.options(**options)
        prefix = None if target_prefix is None else [target_prefix]
        langs = (source_lang, target_lang)
        if _whole_only(opts) or opts.stop:
            whole = self._results([text], prefix, truncate, opts, _needs_results(opts), langs)[0]
            if whole.text:
                yield whole.text
            return
        texts = check_texts([text], "texts")
        _, sources = self._sources(texts, truncate, opts.max_input_length, source_lang)
        if not sources:
            return
        forced = self._forced(target_lang, 1)
        prefixes = with_forced(forced, self._prefix_ids(prefix, 1))
        opts = self._prepare(opts, self._check_prefixes(prefixes, 1))
        opts = counting_forced(opts, len(forced[0]))
        assert opts.max_new_tokens is not None
        longest = len(prefixes[0]) if prefixes else 0
        stepper, first = self._start(sources, opts.max_new_tokens + longest)
        out = TextStream(self.model.tokenizer)
        inputs = DecodeInputs(self.model.eos_id, banned=self.banned_ids, prefixes=prefixes)
        for _, tokens in iter_tokens(first, stepper, opts, inputs):
            piece = out.push(int(tokens[0]))
            if piece:
                yield piece
        piece = out.flush()
        if piece:
            yield piece

    # ---- scoring -------------------------------------------------------------------------

    def score_ids(self, sources: list[list[int]], targets: list[list[int]]) -> list[np.ndarray]:
        """log p of each target token and of the EOS after it, given the source (teacher
        forcing through the step loop, float64). Sources end in EOS, targets do not."""
        if len(sources) != len(targets) or not sources:
            raise ValueError("score_ids needs as many targets as sources (and at least one)")
        eos = self.model.eos_id
        scored = [list(t) + [eos] for t in targets]
        if max(map(len, scored)) > self.max_len:
            raise ValueError(f"a target of more than {self.max_len - 1} tokens cannot be scored")
        stepper, first = self._start(sources, max(map(len, scored)))
        return score(first, stepper, scored)

    def score_batch(
        self, sources: list[str], targets: list[str], truncate: bool = False,
        source_lang: LanguageArg = None, target_lang: LanguageArg = None,
        max_batch_size: int = 0, batch_type: str = "examples",
    ) -> list[ScoringResult]:  # fmt: skip
        """Per-token log-probabilities of each target translation given its source (the
        target's forced first tokens, e.g. its language, included). Sub-batches: as
        translate_results' (a pair's tokens: its source's or target's, the longer)."""
        batching = call_batching(max_batch_size, batch_type)
        sources, targets = check_texts(sources, "sources"), check_texts(targets, "targets")
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
        if not sources:
            return []
        m = self.model
        langs = per_text(source_lang, len(sources), "source_lang")
        src = []
        for text, lang in zip(sources, langs):
            head, tail = m.translation.frame(lang)
            ids = m.encode_source(text)
            room = m.max_len - len(head) - len(tail)
            src.append(head + (ids[: max(room, 1)] if truncate else ids) + tail)
        forced = self._forced(target_lang, len(targets))
        tgt = [f + m.encode(t) for f, t in zip(forced, targets)]

        def scored(picked: list[int]) -> list[np.ndarray]:
            return self.score_ids([src[i] for i in picked], [tgt[i] for i in picked])

        lengths = [max(len(s), len(t) + 1) for s, t in zip(src, tgt)]
        results = []
        for ids, logp in zip(tgt, in_sub_batches(lengths, batching, scored)):
            ids = ids + [m.eos_id]
            tokens = [m.tokenizer.id_to_token(i) or "" for i in ids]
            results.append(ScoringResult(tokens, ids, logp.tolist()))
        return results

    # ---- large inputs --------------------------------------------------------------------

    def _pipeline(self, options: dict, truncate: bool) -> Pipeline:
        """translate_stream's view of this translator, with the request's options prepared
        once for all its sub-batches (one source_lang / target_lang for all texts)."""
        source_lang, target_lang = (
            options.pop("source_lang", None),
            options.pop("target_lang", None),
        )
        forced = self._forced(target_lang, 1)[0]
        opts = self._prepare(self.model.options(**options), len(forced))
        opts = counting_forced(opts, len(forced))

        def translate(sources: list[list[int]]) -> list[list[int]]:
            prefixes = [forced] * len(sources) if forced else None
            found = self._translate_prepared(sources, opts, prefixes, scores=False)
            return [h[0].tokens if h else [] for h in found]

        def encode(text: str) -> list[int]:
            return self.source_ids(text, truncate, opts.max_input_length, source_lang)

        return Pipeline(encode, translate, self.model.decode, self.batch_pool)

    def translate_iterable(
        self,
        texts: Iterable[str],
        max_batch_size: int = 32,
        batch_type: str = "examples",
        truncate: bool = False,
        read_ahead: int = READ_AHEAD,
        stats: Throughput | None = None,
        **options,
    ) -> Iterator[str]:
        """Translations of any iterable of texts, lazily and in input order: read-ahead buffers
        of max_batch_size * read_ahead sorted by length, sub-batches of max_batch_size examples
        or padded source tokens (read_ahead=1: each result as soon as its sub-batch is done,
        for interactive input). `stats` is filled as it goes."""
        batching = Batching(max_batch_size, batch_type, read_ahead)
        return translate_stream(self._pipeline(options, truncate), texts, batching, stats)

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
        batching = Batching(max_batch_size, batch_type)
        pipeline = self._pipeline(options, truncate)
        return translate_file(pipeline, src_path, out_path, batching, progress)

    # ---- asyncio -------------------------------------------------------------------------

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


class Generator(_Loaded):
    """Decoder-only package -> continuations. Options: core.decoding.GenerationOptions."""

    def __init__(
        self,
        package_path: str | os.PathLike,
        variant: str | None = None,
        provider: str | None = None,
        threads: int | None = None,
        spinning: bool | None = None,
        session_options: ort.SessionOptions | None = None,
        providers: Providers | None = None,
        async_workers: int = 1,
        max_quality_loss: float | None = None,
        draft: str | os.PathLike | Generator | None = None,
        *,
        settings: RuntimeSettings | None = None,
    ):
        """settings: how the package runs (RuntimeSettings); or its fields as the keyword
        arguments variant ... max_quality_loss (None: RuntimeSettings' default), not both.
        `draft`: a draft package (its path, or a Generator of it: another variant, its own
        threads) with this package's tokenizer, for speculative decoding: it proposes
        `draft_tokens` tokens per step, which this model verifies in one call (greedy: the
        same output; sampling: the same distribution). speculation_stats counts what it did."""
        runtime = runtime_settings(
            settings, variant=variant, provider=provider, threads=threads, spinning=spinning,
            session_options=session_options, providers=providers,
            max_quality_loss=max_quality_loss,
        )  # fmt: skip
        m = Model(package_path, "decoder-only", runtime)
        super().__init__(m, async_workers)
        if draft is not None and not isinstance(draft, Generator):
            draft = Generator(draft, settings=runtime)
        if draft is not None:
            check_draft_tokenizer(m, draft.model)
        self.draft = draft
        self.speculation_stats = SpeculationStats()  # every request's, added up

    def _speculation(self, opts: GenerationOptions, stepper: Stepper) -> Speculation | None:
        """The request's drafter: prompt lookup when asked (prompt_lookup), else the draft
        package's (draft_tokens); None: plain decoding (beams and several hypotheses)."""
        if not self._speculating(opts):
            return None
        if not isinstance(stepper, CachedDecoder):
            raise ValueError(
                "speculative decoding (prompt_lookup, a draft package) does not go past the "
                "model's context: not with sliding_window beyond max_len"
            )
        if not stepper.graph.verifies:
            raise ValueError(NO_VERIFY)
        if opts.prompt_lookup:
            return Speculation(PromptLookup(), opts.prompt_lookup)
        assert self.draft is not None
        vocab = self.model.config.model.vocab_size
        drafter = DraftModel(self.draft.model, opts, stepper.shape[1], vocab)
        return Speculation(drafter, opts.draft_tokens)

    def _speculating(self, opts: GenerationOptions) -> bool:
        """Whether a request of these options drafts (one prompt at a time)."""
        single = opts.num_beams == 1 and opts.num_hypotheses == 1
        return bool(opts.prompt_lookup) or (
            self.draft is not None and opts.draft_tokens > 0 and single
        )

    def _finish(self, spec: Speculation | None) -> None:
        """A request's speculation counted, its draft decoder given back."""
        if spec is not None:
            self.speculation_stats.add(spec.stats)
            if isinstance(spec.drafter, DraftModel):
                spec.drafter.close()

    # ---- ids in, ids out ------------------------------------------------------------------

    def _start(
        self, prompts: list[list[int]], opts: GenerationOptions
    ) -> tuple[Stepper, np.ndarray, GenerationOptions]:
        """(stepper, first logits, opts prepared for this request): prompt + new tokens fit in
        max_len + 1 positions, or the sliding window goes on past them."""
        T = max(len(p) for p in prompts)
        if min(len(p) for p in prompts) == 0 or T > self.max_len:
            raise ValueError(
                f"prompt of {T} tokens: must be 1 .. the model's max_len {self.max_len} "
                "(generate_batch(..., truncate=True) keeps the end of longer ones)"
            )
        m = self.model
        ids, mask = pad(prompts, m.pad_id)
        room = self.max_len - T + 1
        if opts.sliding_window and (opts.max_new_tokens or 0) > room:
            keep = max(1, self.max_len // 2)
            sliding = SlidingDecoder(m.graphs, m.config, ids, mask, keep)
            return sliding, sliding.first, m.prepare(opts, opts.max_new_tokens or room)
        opts = m.prepare(opts, room, self._warn, sliding_hint=True)
        assert opts.max_new_tokens is not None
        stepper, first = start_decoder_only(m.graphs, m.config, ids, mask, opts.max_new_tokens)
        return stepper, first, opts

    def _generate(
        self,
        prompts: list[list[int]],
        opts: GenerationOptions,
        banned: Sequence[int] | None = None,
        stop: StopTest | None = None,
        scores: bool = True,
    ) -> list[list[Hypothesis]]:
        if len(prompts) > 1 and self._speculating(opts):  # speculation runs one row at a time
            room = self.max_len - max(map(len, prompts)) + 1  # as the batch's: the longest's
            if room >= 1 and not opts.sliding_window:
                if opts.max_new_tokens is not None:
                    self._warn.cut(opts.max_new_tokens, room, self.max_len, sliding_hint=True)
                opts = dataclasses.replace(opts, max_new_tokens=min(opts.max_new_tokens or room,
                                                                    room))  # fmt: skip
            return [
                self._generate([p], opts, banned, _row_stop(stop, r), scores)[0]
                for r, p in enumerate(prompts)
            ]
        stepper, first, opts = self._start(prompts, opts)
        banned = self.banned_ids if banned is None else banned
        spec = self._speculation(opts, stepper)
        inputs = DecodeInputs(self.model.eos_id, prompts, banned, stop=stop, speculation=spec)
        try:
            return self._decode(first, stepper, opts, inputs, scores)
        finally:
            self._finish(spec)

    def generate_ids(
        self,
        prompts: list[list[int]],
        opts: GenerationOptions | None = None,
        banned: Sequence[int] | None = None,
    ) -> list[list[int]]:
        """Prompt id lists -> continuation id lists (no EOS); as models.complete_ids."""
        found = self._generate(prompts, opts or self.model.defaults, banned, scores=False)
        return [h[0].tokens if h else [] for h in found]

    def generate_ids_nbest(
        self,
        prompts: list[list[int]],
        opts: GenerationOptions | None = None,
        banned: Sequence[int] | None = None,
        stop: StopTest | None = None,
    ) -> list[list[Hypothesis]]:
        """Scored continuations per prompt (core.decoding.decode): the num_hypotheses best of a
        beam search (num_beams=1: greedy with scores), num_hypotheses samples, or alternatives
        (the prompt plays the target prefix's part: they branch at the first new token)."""
        return self._generate(prompts, opts or self.model.defaults, banned, stop)

    # ---- text in -------------------------------------------------------------------------

    def prompt_ids(self, text: str, truncate: bool = False, max_input_length: int = 0) -> list[int]:
        """A prompt's ids (BOS alone for empty or whitespace-only text). ValueError (without an
        index) for a non-string, a lone surrogate, or more than max_len ids (or
        max_input_length, when set) without truncate (which keeps the end)."""
        problem = text_problem(text)
        if problem:
            raise ValueError(problem)
        ids = (self.model.encode_prompt(text) if text.strip() else []) or [self.model.bos_id]
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
        for i, text in enumerate(check_texts(prompts, "prompts")):
            try:
                out.append(self.prompt_ids(text, truncate, max_input_length))
            except ValueError as e:
                raise ValueError(f"prompts[{i}]: {e}") from None
        return out

    def _continuation(self, prompt: list[int], new: list[int]) -> str:
        """The text the new ids add after the prompt (with its leading space, if any)."""
        decode = self.model.decode
        return decode(prompt + new)[len(decode(prompt)) :]

    def _results(
        self, prompts: list[str], truncate: bool, opts: GenerationOptions, scores: bool,
        batching: Batching | None = None,
    ) -> list[GenerationResult]:  # fmt: skip
        """The one path of the text API: a GenerationResult per prompt. `opts`: the package's
        defaults under the caller's options (Model.options)."""
        ids = self._prompts(prompts, truncate, opts.max_input_length)
        return self._results_of(ids, opts, scores, batching)

    def _results_of(
        self, ids: list[list[int]], opts: GenerationOptions, scores: bool,
        batching: Batching | None = None,
    ) -> list[GenerationResult]:  # fmt: skip
        """A GenerationResult per prompt of ids, in sub-batches (call_batching; None: its
        default)."""
        if not ids:
            return []
        stops = list(opts.stop)

        def generate(picked: list[int]) -> list[list[Hypothesis]]:
            batch = [ids[i] for i in picked]
            stop = stop_test(self.model.decode, stops, batch, [0] * len(batch)) if stops else None
            return self._generate(batch, opts, None, stop, scores)

        batching = batching or call_batching(0, "examples")
        found = in_sub_batches([len(p) for p in ids], batching, generate)
        out = []
        for prompt, hyps in zip(ids, found):
            out.append(GenerationResult([
                TextHypothesis(
                    cut_at_stop(self._continuation(prompt, h.tokens), stops), h.tokens, h.score,
                    h.log_probs or [],
                )
                for h in hyps
            ]))  # fmt: skip
        return out

    def generate_results(
        self, prompts: list[str], truncate: bool = False, max_batch_size: int = 0,
        batch_type: str = "examples", **options,
    ) -> list[GenerationResult]:  # fmt: skip
        """A GenerationResult per prompt: scored continuations with their ids and per-token
        log-probabilities; a `stop` string ends a continuation, whose text is cut before it.
        The prompts run in length-sorted sub-batches of max_batch_size examples or padded
        prompt tokens (batch_type "tokens"; 0: 32 examples or 1,024 tokens), as
        CTranslate2's."""
        batching = call_batching(max_batch_size, batch_type)
        return self._results(prompts, truncate, self.model.options(**options), True, batching)

    def generate_batch(
        self, prompts: list[str], truncate: bool = False, max_batch_size: int = 0,
        batch_type: str = "examples", **options,
    ) -> list[str]:  # fmt: skip
        """One continuation per prompt ([] for an empty list): the best hypothesis (the first
        sample / alternative when there are several); sub-batches as generate_results'."""
        batching = call_batching(max_batch_size, batch_type)
        opts = self.model.options(**options)
        results = self._results(prompts, truncate, opts, _needs_results(opts), batching)
        return [r.text for r in results]

    def generate(self, prompt: str, **options) -> str:
        return self.generate_batch([prompt], **options)[0]

    def stream(self, prompt: str, truncate: bool = False, **options) -> Iterator[str]:
        """Text pieces as they are produced; their concatenation equals generate()'s output.
        With `stop` strings, text that may begin one is held back until it cannot."""
        opts = self.model.options(**options)
        yield from self._stream_of(self._prompts([prompt], truncate, opts.max_input_length), opts)

    def _stream_of(self, ids: list[list[int]], opts: GenerationOptions) -> Iterator[str]:
        """stream() of one prompt's ids."""
        if _whole_only(opts):  # beam search (or alternatives) knows its output only at the end
            yield self._results_of(ids, opts, _needs_results(opts))[0].text
            return
        stepper, first, opts = self._start(ids, opts)
        stops = list(opts.stop)
        stop = stop_test(self.model.decode, stops, ids, [0]) if stops else None
        text = TextStream(self.model.tokenizer, ids[0])
        shown = StopCut(stops)
        spec = self._speculation(opts, stepper)
        inputs = DecodeInputs(self.model.eos_id, ids, self.banned_ids, stop=stop, speculation=spec)
        try:
            for _, tokens in iter_tokens(first, stepper, opts, inputs):
                piece = shown.push(text.push(int(tokens[0])))
                if piece:
                    yield piece
                if shown.stopped:
                    return
            piece = shown.push(text.flush(), final=True)
            if piece:
                yield piece
        finally:
            self._finish(spec)

    # ---- chat ----------------------------------------------------------------------------

    def chat_prompt(
        self, messages: list[dict], add_generation_prompt: bool = True,
        chat_template_kwargs: dict | None = None, tools: list[dict] | None = None,
    ) -> str:  # fmt: skip
        """The prompt text of a conversation: the model's chat template rendered as
        transformers' apply_chat_template(messages, add_generation_prompt=True, tools=tools)
        renders it. chat_template_kwargs: further template variables (enable_thinking=False,
        say); tools: the OpenAI API's [{"type": "function", "function": {...}}] list. An
        assistant message's tool_calls reach the template with their arguments as objects
        (runtime/tools.py template_messages)."""
        template = self.model.chat_template
        if template is None:
            raise ChatTemplateError(
                f"model package {self.model.package.path.name} has no chat template (its "
                "tokenizer_config.json has no chat_template): use generate() with a prompt"
            )
        kwargs = chat_template_kwargs or {}
        return template.render(template_messages(messages), add_generation_prompt, tools,
                               **kwargs)  # fmt: skip

    def chat_ids(
        self, messages: list[dict], chat_template_kwargs: dict | None = None,
        tools: list[dict] | None = None,
    ) -> list[int]:  # fmt: skip
        """The prompt ids of a conversation (the template writes the special tokens: none are
        added, as transformers' apply_chat_template(tokenize=True)). ValueError when they do
        not fit the model's positions."""
        ids = self.model.encode(self.chat_prompt(messages, True, chat_template_kwargs, tools))
        if not ids:  # the model would answer BOS alone, the conversation dropped
            raise ChatTemplateError(EMPTY_CHAT_PROMPT)
        if len(ids) > self.max_len:
            raise ValueError(
                f"the conversation's prompt is {len(ids)} tokens; the model takes 1 .. "
                f"{self.max_len} (drop earlier turns)"
            )
        return ids

    def chat(
        self, messages: list[dict], chat_template_kwargs: dict | None = None,
        tools: list[dict] | None = None, **options,
    ) -> str:  # fmt: skip
        """The assistant's reply to a conversation ([{"role": "system" | "user" | "assistant",
        "content": ...}, ...]): generated after the chat template's prompt, ending at any of the
        model's EOS ids (generation_config.json's list: the end-of-turn token of instruct
        models) or a `stop` string. tools: passed to the chat template (chat_message parses
        the calls of the reply). Options: GenerationOptions, as generate()."""
        opts = self.model.options(**options)
        ids = [self.chat_ids(messages, chat_template_kwargs, tools)]
        return self._results_of(ids, opts, _needs_results(opts))[0].text

    def chat_message(
        self, messages: list[dict], chat_template_kwargs: dict | None = None,
        tools: list[dict] | None = None, tool_choice: object = None,
        parallel_tool_calls: bool = True, **options,
    ) -> dict:  # fmt: skip
        """chat()'s reply as the OpenAI API's assistant message: {"role": "assistant",
        "content": the text without its tool calls (None when it was only calls), "tool_calls":
        [...] (when it made any)}, the calls parsed as the Qwen2.5 / Qwen3, Llama 3.x, Mistral
        and Phi-4-mini templates write them (runtime/tools.py). tool_choice (the OpenAI API's):
        "auto" (the default), "none" (the reply is text: its calls are not parsed), "required"
        or {"type": "function", "function": {"name": ...}}: the reply is constrained to calls
        of those tools, in the template's form, each call's arguments valid under its tool's
        schema (parallel_tool_calls False: exactly one call). The server's chat route answers
        the same way (tool_use, tool_options, ToolUse.message)."""
        use = tool_use(tools, tool_choice, parallel_tool_calls)
        options = {**options, **self.tool_options(use)}
        return use.message(self.chat(messages, chat_template_kwargs, use.tools, **options))

    def tool_options(self, use: ToolUse) -> dict:
        """The structured-output option that makes a reply call the tools `use`'s tool_choice
        requires, in this model's template's form ({} for "auto" / "none")."""
        template = self.model.chat_template
        return use.constraint(template.template if template else "")

    def chat_stream(
        self, messages: list[dict], chat_template_kwargs: dict | None = None,
        tools: list[dict] | None = None, **options,
    ) -> Iterator[str]:  # fmt: skip
        """chat() as text pieces while they are produced (stream())."""
        opts = self.model.options(**options)
        yield from self._stream_of([self.chat_ids(messages, chat_template_kwargs, tools)], opts)

    # ---- scoring -------------------------------------------------------------------------

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

    def score_batch(
        self, texts: list[str], max_batch_size: int = 0, batch_type: str = "examples"
    ) -> list[ScoringResult]:
        """Per-token log-probabilities of each text's tokens after the first (teacher forcing);
        `perplexity` of a result is the text's perplexity. Sub-batches: as generate_results'."""
        batching = call_batching(max_batch_size, batch_type)
        m = self.model
        ids = [m.encode(t) for t in check_texts(texts, "texts")]
        if not ids:
            return []
        for i, seq in enumerate(ids):
            if not 2 <= len(seq) <= self.max_len + 1:
                raise ValueError(
                    f"text {i} has {len(seq)} tokens; scoring needs 2 .. {self.max_len + 1}"
                )

        def scored(picked: list[int]) -> list[np.ndarray]:
            return self.score_ids([ids[i] for i in picked])

        results = []
        for seq, logp in zip(ids, in_sub_batches([len(s) for s in ids], batching, scored)):
            tokens = [m.tokenizer.id_to_token(i) or "" for i in seq[1:]]
            results.append(ScoringResult(tokens, seq[1:], logp.tolist()))
        return results

    # ---- asyncio -------------------------------------------------------------------------

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
