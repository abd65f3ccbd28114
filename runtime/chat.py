"""Chat templates: a conversation -> the prompt text the model was tuned on.

A package keeps its model's chat template and special-token strings in tokenizer_config.json
(Hugging Face's file; core.format.TOKENIZER_CONFIG_FILE). `ChatTemplate.render` renders it as
transformers' `apply_chat_template(messages, add_generation_prompt=True, tokenize=False)` does:
the same Jinja environment (sandboxed, trim_blocks, lstrip_blocks, loop controls, the
`generation` tag), the same globals (raise_exception, strftime_now, namespace, dict) and the
`tojson` filter, the special tokens (bos_token, eos_token, ...) as variables, messages whose
None values are dropped. The prompt is then encoded without adding special tokens (the template
writes them), as transformers does.

A template is code from whoever made the model: it runs in Jinja's immutable sandbox (no
attribute access to Python internals, no mutation of the inputs, ranges bounded) and its output
is bounded (MAX_PROMPT_CHARS): a hostile one is a ChatTemplateError, never code execution or an
unbounded string.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

MAX_PROMPT_CHARS = 1 << 21  # 2 Mi characters: above any context a package holds (~4 per token)
MAX_TEMPLATE_CHARS = 1 << 20
# the template's own work per render, in executed lines of its compiled code (a real template
# runs a few thousand; nested loops that print nothing would otherwise run unbounded)
MAX_TEMPLATE_STEPS = 2_000_000
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                      "cls_token", "mask_token")  # fmt: skip


class ChatTemplateError(ValueError):
    """A conversation the template refuses (raise_exception), or a template that fails, runs
    too long or is not one."""


def _plain(value: Any) -> Any:
    """JSON types only reach the template (transformers' _plain_template_data): str, int,
    float, bool, None, lists and dicts of them; anything else becomes '<TypeName>'."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return f"<{type(value).__name__}>"


def check_messages(messages: object) -> list[dict]:
    """A conversation: a non-empty list of dicts with a string `role`; their None values
    dropped (as transformers does: templates handle a missing key, not a None)."""
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise ChatTemplateError("messages must be a non-empty list of {'role', 'content'} dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ChatTemplateError(f"messages[{i}] must be a dict with a string 'role'")
        out.append({k: v for k, v in _plain(m).items() if v is not None})
    return out


def _environment():
    """transformers' chat-template environment (utils/chat_template_utils.py)."""
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """`{% generation %}...{% endgeneration %}` renders its body (transformers marks the
        assistant's tokens with it, for training masks)."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class Namespace(jinja2.utils.Namespace):
        """namespace() without underscore names (no way to reach Python internals)."""

        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r}")

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)  # fmt: skip

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now,
                       dict=TemplateDict(), namespace=Namespace)  # fmt: skip
    return env


@dataclass(frozen=True)
class ChatTemplate:
    """A model's chat template and the special-token strings it may name."""

    template: str
    special_tokens: dict[str, str] = field(default_factory=dict)  # bos_token -> "<s>", ...

    def __post_init__(self) -> None:
        if not isinstance(self.template, str) or not self.template.strip():
            raise ChatTemplateError("the chat template is empty")
        if len(self.template) > MAX_TEMPLATE_CHARS:
            raise ChatTemplateError(f"the chat template is over {MAX_TEMPLATE_CHARS} characters")
        try:
            object.__setattr__(self, "_compiled", _environment().from_string(self.template))
        except Exception as e:  # jinja2's TemplateSyntaxError and the like
            raise ChatTemplateError(f"the chat template does not compile: {e}") from None

    def render(
        self,
        messages: object,
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
        **variables: Any,
    ) -> str:
        """The prompt text of `messages` (list of {"role", "content", ...} dicts), ending with
        the assistant's header when add_generation_prompt; `variables` reach the template as
        transformers' apply_chat_template(**kwargs) do (enable_thinking=False, say)."""
        context = {
            **self.special_tokens,
            **_plain(variables),
            "messages": check_messages(messages),
            "tools": _plain(tools),
            "documents": None,
            "add_generation_prompt": bool(add_generation_prompt),
        }
        pieces, size = [], 0
        try:
            with _step_budget(MAX_TEMPLATE_STEPS):
                for piece in self._compiled.generate(**context):  # type: ignore[attr-defined]
                    size += len(piece)
                    if size > MAX_PROMPT_CHARS:
                        raise ChatTemplateError(
                            f"the chat template's output passed {MAX_PROMPT_CHARS} characters"
                        )
                    pieces.append(piece)
        except ChatTemplateError:
            raise
        except Exception as e:  # raise_exception's TemplateError, SecurityError, TypeError...
            raise ChatTemplateError(f"the chat template failed: {e}") from None
        return "".join(pieces)


@contextlib.contextmanager
def _step_budget(steps: int) -> Iterator[None]:
    """Raise ChatTemplateError in the template's code once it has executed `steps` lines (a
    line trace on this thread, on the template's frames only: Jinja compiles a template to
    Python whose code objects are named for it, `<template>`); the previous trace comes back
    after."""
    left = [steps]

    def trace(frame, event, arg):
        if frame.f_code.co_filename != "<template>":
            return None
        if event == "line":
            left[0] -= 1
            if left[0] < 0:
                raise ChatTemplateError(
                    f"the chat template ran over {steps} steps (a loop without end or output)"
                )
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        yield
    finally:
        sys.settrace(previous)


def token_string(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken's
    {"content": ...} object."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def chat_template_of(tokenizer_config: Mapping) -> ChatTemplate | None:
    """The package's chat template from its tokenizer_config.json (None: it has none). A
    list of named templates (transformers 4's) gives its "default" one."""
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default")
    if template is None:
        return None
    if not isinstance(template, str):
        raise ChatTemplateError("tokenizer_config.json: chat_template must be a string")
    special = {k: s for k in SPECIAL_TOKEN_KEYS
               if (s := token_string(tokenizer_config.get(k))) is not None}  # fmt: skip
    return ChatTemplate(template, special)
