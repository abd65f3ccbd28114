"""The served models: a language model's completions over the continuous batch, and a
translator's translations; both run their decoding on threads, never on the event loop."""

from __future__ import annotations

import collections.abc as abc
import copy
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ...core.constraints import log_softmax
from ...core.decoding import DecodeInputs, GenerationOptions, PreparedOptions
from ..api import Generator, SourcePlan, Translator
from ..chat import EMPTY_CHAT_PROMPT, ChatTemplateError
from ..text import StopCut, TextStream, stop_test
from ..tools import ToolError, ToolUse, tool_use
from .protocol import (
    APIError,
    bad,
    choices_asked,
    decoding_fields,
    options_error,
    top_logprobs_asked,
)
from .scheduler import BatchScheduler, BatchSettings

MAX_TRANSLATION_INPUTS = 64
MAX_PROMPTS = 16  # prompts of one completion request
MAX_CHOICES = 64  # prompts x n


@dataclass
class TokenLogprob:
    """One generated token's log-probability under the model (its distribution at that step,
    before any option changed it) and the `top` most likely tokens there."""

    id: int
    token: str
    logprob: float
    top: list[tuple[str, float]]


@dataclass
class Piece:
    """What one choice adds: text, the tokens it came from, and at its end why it ended."""

    index: int
    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)
    tokens: int = 0  # tokens generated for this piece
    finish_reason: str | None = None  # "stop" | "length" at the choice's last piece
    cached_tokens: int = 0  # at the last piece: prompt tokens the prefix cache held


@dataclass
class Request:
    """One completion request, checked and prepared: its prompts' ids and options. Choice c
    continues prompt c // n."""

    prompts: list[list[int]]
    opts: PreparedOptions
    n: int  # choices per prompt
    top_logprobs: int | None  # None: no logprobs
    tools: ToolUse = field(default_factory=ToolUse)  # chat: the tools and how they are called

    @property
    def choices(self) -> int:
        return len(self.prompts) * self.n

    @property
    def prompt_tokens(self) -> int:
        return sum(map(len, self.prompts))


class ServedLM:
    """A decoder-only package served over one BatchScheduler."""

    kind = "generate"

    def __init__(self, name: str, generator: Generator, settings: BatchSettings,
                 truncate: bool = False):  # fmt: skip
        self.name, self.generator, self.truncate = name, generator, truncate
        self.model = generator.model
        self.scheduler = BatchScheduler(self.model, settings)
        self.context = self.scheduler.capacity

    # -- requests -> prompt ids ------------------------------------------------------------
    def completion_prompts(self, prompt: object) -> list[list[int]]:
        """The `prompt` field's prompts as ids: a text, token ids, or a list of either."""
        vocab = self.model.tokenizer.get_vocab_size()

        def is_ids(p: object) -> bool:
            return isinstance(p, list) and bool(p) and all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in p
            )  # fmt: skip

        several = isinstance(prompt, list) and bool(prompt) and not is_ids(prompt)
        items = prompt if several else [prompt]
        assert isinstance(items, list)
        if len(items) > MAX_PROMPTS:
            raise bad(f"prompt has {len(items)} prompts: at most {MAX_PROMPTS}", "prompt")
        out = []
        for i, p in enumerate(items):
            where = f"prompt[{i}]" if several else "prompt"
            if isinstance(p, str):
                try:  # --truncate: the end of a longer one (prepare fits it to the context)
                    out.append(self.generator.prompt_ids(p, truncate=self.truncate))
                except ValueError as e:
                    code = "context_length_exceeded" if "longer than" in str(e) else None
                    raise bad(f"{where}: {e}", "prompt", code) from None
            elif is_ids(p):
                out.append(list(p))
            else:
                raise bad(f"{where} must be a string or a non-empty list of token ids < "
                          f"{vocab}", "prompt")  # fmt: skip
        return out

    def tool_use(self, body: Mapping) -> ToolUse:
        """The chat request's tools, tool_choice and parallel_tool_calls, checked once (as
        Generator.chat_message checks them); tools need a chat template that reads them."""
        try:
            use = tool_use(body.get("tools"), body.get("tool_choice"),
                           body.get("parallel_tool_calls", True))  # fmt: skip
        except ToolError as e:
            raise bad(str(e), e.param) from None
        template = self.model.chat_template
        if use.tools and template is not None and not template.reads_tools:
            raise bad(f"model {self.name}'s chat template takes no tools (it never reads "
                      "`tools`): send the request without them", "tools")  # fmt: skip
        return use

    def chat_prompt(self, messages: object, template_kwargs: object,
                    use: ToolUse | None = None) -> list[int]:  # fmt: skip
        """The conversation's prompt ids: the chat template rendered with the request's
        tools; an assistant message's tool_calls and the role "tool" messages reach it."""
        if template_kwargs is not None and not isinstance(template_kwargs, dict):
            raise bad("chat_template_kwargs must be an object", "chat_template_kwargs")
        if self.model.chat_template is None:
            raise bad(f"model {self.name} has no chat template: use /v1/completions", "model")
        if isinstance(messages, list):
            for i, m in enumerate(messages):
                content = m.get("content") if isinstance(m, dict) else None
                if isinstance(content, list):  # content parts: their text
                    texts = [p.get("text") for p in content if isinstance(p, dict)]
                    if not all(isinstance(t, str) for t in texts) or len(texts) != len(content):
                        raise bad(f"messages[{i}].content: only text parts are supported",
                                  "messages")  # fmt: skip
                    messages[i] = {**m, "content": "".join(str(t) for t in texts)}
        tools = use.tools if use is not None else None
        try:
            text = self.generator.chat_prompt(messages, True, template_kwargs, tools)  # type: ignore[arg-type]
        except ToolError as e:
            raise bad(str(e), e.param) from None
        except ChatTemplateError as e:
            raise bad(f"messages: {e}", "messages") from None
        ids = self.model.encode(text)
        if not ids:  # never answered from BOS alone (Generator.chat_ids refuses it too)
            raise bad(f"messages: {EMPTY_CHAT_PROMPT}", "messages")
        return ids

    def tool_fields(self, fields: dict, use: ToolUse) -> dict:
        """`fields` with the constraint tool_choice asks for ("required" / a named tool)."""
        constraint = self.generator.tool_options(use)
        if constraint and fields.get("response_format") is not None:
            raise bad("response_format and tool_choice (a required call) cannot be combined: "
                      "the reply is either the calls or the format", "tool_choice")  # fmt: skip
        return {**fields, **constraint}

    def prepare(self, body: Mapping, kind: str, prompts: list[list[int]], what: str,
                use: ToolUse | None = None) -> Request:  # fmt: skip
        """The request's options, validated once (GenerationOptions) and prepared for the model
        (Model.prepare) with the room its longest prompt leaves (as Generator prepares a
        batch's), the prompts fitted to the context; a chat's `use` adds its tools'
        constraint."""
        n = choices_asked(body)
        if n * len(prompts) > MAX_CHOICES:
            raise bad(f"{len(prompts)} prompts x n={n} choices: at most {MAX_CHOICES}", "n")
        k = top_logprobs_asked(body, kind)
        use = use or ToolUse()
        fields = decoding_fields(body, self.model.defaults)
        fields, constrained = self.tool_fields(fields, use), use.required is not None
        fitted = []
        for prompt in prompts:
            if len(prompt) > self.context:
                if not self.truncate:
                    raise bad(
                        f"this model's maximum context length is {self.context} tokens; the "
                        f"{what} has {len(prompt)} tokens", what, "context_length_exceeded",
                    )  # fmt: skip
                prompt = prompt[-self.context :]
            fitted.append(prompt)
        prompt = max(fitted, key=len)
        room = self.context - len(prompt) + 1
        asked = fields.get("max_new_tokens")
        if isinstance(asked, int) and asked > room:
            field_name = "max_tokens" if "max_tokens" in body else "max_completion_tokens"
            raise bad(
                f"{field_name}={asked} is more than the {room} new tokens the {what}'s "
                f"{len(prompt)} tokens leave in this model's context of {self.context}",
                field_name, "context_length_exceeded",
            )  # fmt: skip
        try:
            opts = self.model.options(**fields)
            prepared = self.model.prepare(opts, room)
        except ValueError as e:
            error = options_error(e)
            if constrained and error.param in ("response_format", None):
                error.param = "tools"  # the tools' schemas make the constraint
            raise error from None
        if prepared.num_beams > 1:
            raise bad("beam search is not served (its package default: pass temperature)",
                      "temperature")  # fmt: skip
        return Request(fitted, prepared, n, k, use)

    # -- decoding (on a request's thread) --------------------------------------------------
    def run(
        self, req: Request, index: int, stop: threading.Event
    ) -> abc.Generator[Piece, None, None]:
        """Choice `index` of `req`, piece by piece; the last piece has its finish_reason.
        `stop` set: the row is freed at the next step (the client went away)."""
        opts = req.opts
        if opts.seed is not None and index:
            opts = copy.copy(opts)  # valid options, a valid seed: no second validation
            opts.seed = req.opts.seed + index  # type: ignore[operator]
        m, prompt = self.model, req.prompts[index // req.n]
        stops = list(opts.stop)
        test = stop_test(m.decode, stops, [prompt], [0]) if stops else None
        inputs = DecodeInputs(m.eos_id, [prompt], self.generator.banned_ids, stop=test)
        text, shown = TextStream(m.tokenizer, prompt), StopCut(stops)
        made, finish, row = 0, "length", None
        found = self.scheduler.decode(prompt, opts, inputs, stop)
        try:
            for step, raw, last in found:
                row, token = last, int(step.tokens[0])
                if step.ended[0]:
                    finish = "stop"
                    break
                made += 1
                lps = [] if req.top_logprobs is None else [self.logprob(raw, token, req)]
                piece = shown.push(text.push(token))
                yield Piece(index, piece, lps, 1)
                if shown.stopped:
                    finish = "stop"
                    break
            else:
                if stop.is_set():
                    return
                assert opts.max_new_tokens is not None
                if made < opts.max_new_tokens:
                    finish = "stop"  # a stop string the held-back text has yet to show
        finally:
            found.close()
        tail = "" if shown.stopped else shown.push(text.flush(), final=True)
        yield Piece(index, tail, [], 0, finish, row.cached if row is not None else 0)

    def logprob(self, raw: np.ndarray, token: int, req: Request) -> TokenLogprob:
        lp = log_softmax(raw[0].astype(np.float64))
        k = req.top_logprobs or 0
        top = np.argsort(-lp, kind="stable")[:k].tolist() if k else []
        return TokenLogprob(token, self.token_text(token), float(lp[token]),
                            [(self.token_text(t), float(lp[t])) for t in top])  # fmt: skip

    def token_text(self, token: int) -> str:
        text = self.model.decode([token])
        return text or (self.model.tokenizer.id_to_token(token) or "")

    def close(self) -> None:
        self.scheduler.close()


@dataclass
class Translation:
    """One translation request, checked: its texts, their languages, the options (made once)."""

    texts: list[str]
    opts: GenerationOptions
    source_lang: str | None
    target_lang: str | None


def batched(opts: GenerationOptions) -> bool:
    """Options whose texts decode in the continuous batch, a row each: greedy or sampling
    with one output per text (beam search and alternatives run as their own batch)."""
    return opts.num_beams == 1 and opts.num_hypotheses == 1 and not opts.return_alternatives


class ServedTranslator:
    """An encoder-decoder package: /v1/translations. Greedy and sampled texts decode in the
    continuous batch (a row per text, joining between steps); beam search as one batch of the
    request's texts (Translator.translate_results)."""

    kind = "translate"

    def __init__(self, name: str, translator: Translator, settings: BatchSettings):
        self.name, self.translator = name, translator
        self.model = translator.model
        self.scheduler = BatchScheduler(self.model, settings)

    def prepare(self, body: Mapping) -> Translation:
        """The request's texts, languages and options, validated once (GenerationOptions)."""
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise bad("input must be a text or a non-empty list of texts", "input")
        if len(texts) > MAX_TRANSLATION_INPUTS:
            raise bad(f"input has {len(texts)} texts: at most {MAX_TRANSLATION_INPUTS}", "input")
        if choices_asked(body) != 1:
            raise bad("translations give one text per input (n=1)", "n")
        fields = decoding_fields(body, self.model.defaults)
        langs = {"source_lang": body.get("source_lang"), "target_lang": body.get("target_lang")}
        for key, value in langs.items():
            if value is not None and not isinstance(value, str):
                raise bad(f"{key} must be a language code", key)
        try:
            self.translator.check_languages(langs["source_lang"], langs["target_lang"])
            opts = self.model.options(**fields)
            for i, t in enumerate(texts):
                try:
                    self.translator.check_text(t, False, opts.max_input_length)
                except ValueError as e:
                    raise bad(f"input[{i}]: {e}", "input") from None
        except APIError:
            raise
        except ValueError as e:
            raise options_error(e) from None
        return Translation(texts, opts, langs["source_lang"], langs["target_lang"])

    def translate(self, req: Translation) -> tuple[list[str], int, int]:
        """(translations, source tokens, output tokens)."""
        t, lang = self.translator, req.source_lang
        if batched(req.opts):
            return self.translate_rows(req)
        results = t.translate_results_with(req.texts, req.opts, source_lang=lang,
                                           target_lang=req.target_lang)  # fmt: skip
        sources = sum(len(t.source_ids(text, source_lang=lang)) for text in req.texts)
        made = sum(len(r.hypotheses[0].ids) for r in results if r.hypotheses)
        return [r.text for r in results], sources, made

    def translate_rows(self, req: Translation) -> tuple[list[str], int, int]:
        """Each text a row of the continuous batch, decoded on a thread of its own."""
        t = self.translator
        plans = [t.plan(text, req.opts, req.source_lang, req.target_lang) for text in req.texts]
        todo = [p for p in plans if p is not None]
        with ThreadPoolExecutor(max(1, len(todo)), "edgeformer-translation") as pool:
            found = dict(zip(map(id, todo), pool.map(self.decode_row, todo)))
        out = ["" if p is None else t.plan_text(p, found[id(p)]) for p in plans]
        sources = sum(len(p.source) for p in todo)
        return out, sources, sum(map(len, found.values()))

    def decode_row(self, plan: SourcePlan) -> list[int]:
        """The tokens one planned text's decoding chooses in the batch (forced ones first)."""
        tokens = []
        found = self.scheduler.decode(plan.source, plan.opts, plan.inputs)
        try:
            for step, _, _ in found:
                if step.ended[0]:
                    break
                tokens.append(int(step.tokens[0]))
        finally:
            found.close()
        return tokens

    def close(self) -> None:
        self.scheduler.close()
