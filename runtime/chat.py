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
unbounded string. A render's time and memory are bounded too, whatever one line of it does:

- every string or list an operation makes (`+ * ** %`, `~`, a call, a filter, a test) holds
  at most MAX_TEMPLATE_VALUE items, checked before it is built where the operation could
  amplify its inputs (`x * n`, `join`, `replace`, `indent`, `center(n)`, widths in `%` and
  `format`, `tojson(indent=...)`): `((range(100000)|list) * 300)` is refused before it asks for
  30 M items, list doubling stops at the bound;
- an int argument of a call or filter is at most MAX_TEMPLATE_VALUE, an int result at most
  MAX_INT_BITS bits (`x ** y`, repeated squaring);
- the work of a render: PYTHON_STEP_UNITS per executed line of the compiled template and per
  Python call it leads to (a filter's key function per item), plus the items every operation
  reads and makes (a `sort` of n items: n; `x in list`: the list's length), at most
  MAX_TEMPLATE_WORK units (a few seconds at most; a real template over a 100-turn
  conversation uses a few %).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

MAX_PROMPT_CHARS = 1 << 21  # 2 Mi characters: above any context a package holds (~4 per token)
MAX_TEMPLATE_CHARS = 1 << 20
# a rendered conversation of no tokens: refused, never answered from BOS alone (the JS runtime's
# chat says the same)
EMPTY_CHAT_PROMPT = (
    "the chat template renders this conversation as an empty prompt (no tokens): nothing for "
    "the model to answer"
)
# the template's own work per render, in executed lines of its compiled code (a real template
# runs a few thousand; nested loops that print nothing would otherwise run unbounded)
MAX_TEMPLATE_STEPS = 2_000_000
MAX_TEMPLATE_VALUE = MAX_PROMPT_CHARS  # items of any one string / list / dict a render makes
MAX_TEMPLATE_WORK = 1 << 25  # lines + items read and made by operations, per render
PYTHON_STEP_UNITS = 64  # a line or Python call costs ~64 items copied in C (~1 us vs ~15 ns)
MAX_INT_BITS = 1 << 12  # an int a template computes (2^4096: far above any count or id)
MAX_JSON_INDENT = 64
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


# the work left to the render running in this context (None: no render runs)
_WORK: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("work", default=None)
_WIDE_FORMAT_ERROR = "the chat template formats with a width or precision of 7 digits or more"
_WIDE_FORMAT = re.compile(r"%[-#0 +]*\d{7,}|%[-#0 +]*\d*\.\d{7,}|\{[^{}]*?\d{7,}[^{}]*\}")


def _size(value: Any) -> int:
    """The items a value holds (a string's characters), 1 for a scalar."""
    return len(value) if isinstance(value, str | list | tuple | dict | set | frozenset) else 1


def _charge(units: int) -> None:
    left = _WORK.get()
    if left is None:
        return
    left[0] -= units
    if left[0] < 0:
        raise ChatTemplateError(
            f"the chat template's work passed {MAX_TEMPLATE_WORK} units (lines and items an "
            "operation reads or makes): a loop or an operation without bound"
        )


def _refuse_size(items: int, what: str) -> None:
    if items > MAX_TEMPLATE_VALUE:
        raise ChatTemplateError(
            f"the chat template makes {what} of {items} items (at most {MAX_TEMPLATE_VALUE})"
        )


def _made(value: Any) -> Any:
    """A value an operation made: its size bounded and charged (and an int's bits)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > MAX_INT_BITS:
            raise ChatTemplateError(f"the chat template makes an int over {MAX_INT_BITS} bits")
        return value
    size = _size(value)
    _refuse_size(size, f"a {type(value).__name__}")
    _charge(size)
    return value


def _check_arguments(args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """The arguments of a call or filter: int ones bounded, their sizes charged."""
    for value in (*args, *kwargs.values()):
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and abs(value) > MAX_TEMPLATE_VALUE
        ):
            raise ChatTemplateError(
                f"the chat template passes {value} to a call (at most {MAX_TEMPLATE_VALUE})"
            )
        _charge(_size(value))


def _binop_result_size(operator: str, left: Any, right: Any) -> int:
    """The items `left operator right` would make, before it is computed (0: no sequence)."""
    sized = (str, list, tuple)
    if operator == "*":
        if isinstance(left, sized) and isinstance(right, int):
            return len(left) * max(right, 0)
        if isinstance(right, sized) and isinstance(left, int):
            return len(right) * max(left, 0)
    if operator == "+" and isinstance(left, sized) and isinstance(right, sized):
        return len(left) + len(right)
    return 0


def _bounded_binop(operator: str, left: Any, right: Any, compute: Any) -> Any:
    _charge(_size(left) + _size(right))
    _refuse_size(_binop_result_size(operator, left, right), f"a value with {operator!r}")
    ints = (isinstance(left, int) and not isinstance(left, bool)
            and isinstance(right, int) and not isinstance(right, bool))  # fmt: skip
    if operator == "**" and ints and right > 0 and left.bit_length() * right > MAX_INT_BITS:
        raise ChatTemplateError(f"the chat template makes an int over {MAX_INT_BITS} bits")
    if operator == "%" and isinstance(left, str) and _WIDE_FORMAT.search(left):
        raise ChatTemplateError(_WIDE_FORMAT_ERROR)
    if operator == "%" and isinstance(right, tuple | list):
        _check_arguments(right, {})
    return _made(compute(left, right))


def _amplified_size(name: str, value: Any, args: tuple, kwargs: dict) -> int:
    """The items a filter or str method that can multiply its input would make (0: other)."""
    if not isinstance(value, str | list | tuple | dict):
        return 0
    if name == "join" and isinstance(value, str) and args and isinstance(args[0], list | tuple):
        return _amplified_size("join", args[0], (value,), {})  # str.join: the separator's own
    if name == "join" and isinstance(value, list | tuple):
        sep = args[0] if args else kwargs.get("d", "")
        pieces = sum(_size(v) for v in value)
        return pieces + _size(sep) * max(len(value) - 1, 0) if isinstance(sep, str) else 0
    if name == "replace" and isinstance(value, str) and len(args) >= 2:
        old, new = args[0], args[1]
        if isinstance(old, str) and isinstance(new, str):
            count = value.count(old) if old else len(value) + 1
            return len(value) + count * len(new)
    if name == "indent" and isinstance(value, str):
        width = args[0] if args else kwargs.get("width", 4)
        per_line = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        return len(value) + (value.count("\n") + 1) * per_line
    if name in ("format", "format_map") and isinstance(value, str) and _WIDE_FORMAT.search(value):
        raise ChatTemplateError(_WIDE_FORMAT_ERROR)  # 1 M characters and up from one field
    if name == "tojson":
        indent = kwargs.get("indent", args[0] if args else None)
        width = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
        if width > MAX_JSON_INDENT:  # every nested line repeats it
            raise ChatTemplateError(f"the chat template's tojson indent is over {MAX_JSON_INDENT}")
    if name == "sum" and isinstance(value, list | tuple):
        start = kwargs.get("start", args[1] if len(args) > 1 else 0)
        if isinstance(start, str | list | tuple):
            return _size(start) + sum(_size(v) for v in value)
    return 0


def _bounded_call(name: str, function: Any, value: Any, args: tuple, kwargs: dict) -> Any:
    """A filter, test or method call of a template: its arguments checked, what it would make
    refused before it is made where it can amplify, its result checked and charged."""
    _check_arguments(args, kwargs)
    _charge(_size(value))
    _refuse_size(_amplified_size(name, value, args, kwargs), f"a value with {name}")
    return _made(function(value, *args, **kwargs))


def _bounded_filters(filters: dict) -> dict:
    """Every filter of the environment, bounded (the filtered value is its first argument;
    jinja2's pass_context / pass_environment filters keep their marker)."""
    import functools

    def bounded(name: str, function: Any) -> Any:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            pass_arg = getattr(function, "jinja_pass_arg", None)
            head, rest = (args[:1], args[1:]) if pass_arg is not None else ((), args)
            if not rest:
                return _made(function(*args, **kwargs))
            value, others = rest[0], rest[1:]
            return _bounded_call(name, lambda v, *a, **k: function(*head, v, *a, **k), value,
                                 others, kwargs)  # fmt: skip

        return run

    return {name: bounded(name, f) for name, f in filters.items()}


def _bounded_concat(pieces: tuple) -> str:
    """Jinja's `~` (str_join), bounded: the strings' total size before they are joined."""
    strings = [p if isinstance(p, str) else str(p) for p in pieces]
    total = sum(len(x) for x in strings)
    _refuse_size(total, "a string with '~'")
    _charge(total)
    return "".join(strings)


def _charged(container: Any) -> Any:
    """The right side of `in` / `not in`: its size charged (the search reads it)."""
    _charge(_size(container))
    return container


def _environment():
    """transformers' chat-template environment (utils/chat_template_utils.py), bounded in time
    and memory (this module's docstring)."""
    import jinja2
    from jinja2 import nodes
    from jinja2.compiler import CodeGenerator, operators
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedCodeGenerator(CodeGenerator):
        """`~` and `in` through the environment's bounded versions."""

        def visit_Concat(self, node, frame):
            self.write("environment.bounded_concat((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

        def visit_Operand(self, node, frame):
            if node.op not in ("in", "notin"):
                return super().visit_Operand(node, frame)
            self.write(f" {operators[node.op]} environment.charged(")
            self.visit(node.expr, frame)
            self.write(")")

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        code_generator_class = BoundedCodeGenerator
        intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

        def call_binop(self, context, operator, left, right):
            return _bounded_binop(operator, left, right, self.binop_table[operator])

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja2's names)
            target = getattr(__obj, "__wrapped__", __obj)  # str.format's sandbox wrapper
            owner = getattr(target, "__self__", None)
            name = getattr(target, "__name__", "")
            if (
                isinstance(owner, str)
                and name in ("format", "format_map")
                and _WIDE_FORMAT.search(owner)
            ):
                raise ChatTemplateError(_WIDE_FORMAT_ERROR)
            sandboxed = super().call
            if isinstance(owner, str | list | tuple | dict):  # a method: the owner is its input

                def method(_owner, *a, **k):
                    return sandboxed(__context, __obj, *a, **k)

                return _bounded_call(name, method, owner, args, kwargs)
            _check_arguments(args, kwargs)
            return _made(sandboxed(__context, __obj, *args, **kwargs))

        def getitem(self, obj, argument):
            _charge(1)
            value = super().getitem(obj, argument)
            return _made(value) if isinstance(argument, slice) else value

        @staticmethod
        def bounded_concat(pieces):
            return _bounded_concat(pieces)

        @staticmethod
        def charged(container):
            return _charged(container)

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

    env = BoundedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.filters = _bounded_filters(env.filters)
    env.tests = _bounded_filters(env.tests)
    env.globals.pop("lipsum", None)  # lipsum(n): n paragraphs from one small int
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
        import jinja2.meta

        env = _environment()
        try:  # parsed once: the variables it reads, then compiled from the same tree
            tree = env.parse(self.template)
            read = jinja2.meta.find_undeclared_variables(tree)
            object.__setattr__(self, "_compiled", env.from_string(tree))
        except Exception as e:  # jinja2's TemplateSyntaxError and the like
            raise ChatTemplateError(f"the chat template does not compile: {e}") from None
        object.__setattr__(self, "_reads", frozenset(read))

    @property
    def reads_tools(self) -> bool:
        """Whether the template reads the `tools` variable (a template that does not drops a
        request's tools: the model would never see them)."""
        return "tools" in self._reads  # type: ignore[attr-defined]

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
            _charge(PYTHON_STEP_UNITS)  # a Python call a filter makes (sort's key per item)
            return None
        if event == "line":
            left[0] -= 1
            _charge(PYTHON_STEP_UNITS)
            if left[0] < 0:
                raise ChatTemplateError(
                    f"the chat template ran over {steps} steps (a loop without end or output)"
                )
        return trace

    previous = sys.gettrace()
    work = _WORK.set([MAX_TEMPLATE_WORK])
    sys.settrace(trace)
    try:
        yield
    finally:
        sys.settrace(previous)
        _WORK.reset(work)


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
