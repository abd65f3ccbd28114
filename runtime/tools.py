"""Tool calls in a chat reply: the calls the model wrote, as the families' chat templates define
them, parsed into ToolCall objects (Generator.chat_message).

    Qwen2.5 / Qwen3 (Hermes style):  <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>
    Llama 3.x (JSON tool calling):   {"name": ..., "parameters": {...}}  (the whole reply; several
                                     separated by ";"; after <|python_tag|> when it is kept)
    Mistral (v3 tokenizers):         [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]
    Mistral (v11+, tekken):          [TOOL_CALLS]name[ARGS]{...}  (repeated for several calls)
    Phi-4-mini:                      functools[{"name": ..., "arguments": {...}}, ...]
                                     (or a list inside <|tool_call|> ... <|/tool_call|>)

A block whose JSON does not parse, or names no function, stays in the reply's text (vLLM's
parsers do the same): nothing is dropped.

A chat request's tools (the OpenAI API's tools / tool_choice / parallel_tool_calls) are checked
once by tool_use(); its ToolUse gives the reply's constraint and the assistant message, for
Generator.chat_message and the server's /v1/chat/completions alike.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
PYTHON_TAG = "<|python_tag|>"
MISTRAL, MISTRAL_ARGS = "[TOOL_CALLS]", "[ARGS]"
PHI4 = re.compile(
    r"(?:<\|tool_call\|>\s*)?functools(\[.*\])(?:\s*<\|/tool_call\|>)?"
    r"|<\|tool_call\|>\s*(\[.*\])\s*<\|/tool_call\|>",
    re.S,
)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict = field(default_factory=dict)

    def to_openai(self) -> dict:
        """The OpenAI API's tool_calls entry (arguments as JSON text; an id of its own, which
        the tool's reply names as tool_call_id)."""
        return {
            "id": f"call_{secrets.token_hex(12)}",
            "type": "function",
            "function": {
                "name": self.name,
                "arguments": json.dumps(self.arguments, ensure_ascii=False),
            },
        }


def _call(text: str, key: str) -> ToolCall | None:
    """{"name": str, key: object} as a ToolCall; None for anything else."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get(key, obj.get("arguments", {}))
    if isinstance(args, str):  # some models write the arguments as JSON text
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    return ToolCall(obj["name"], args) if isinstance(args, dict) else None


def _call_list(text: str) -> list[ToolCall] | None:
    """A JSON array of {"name", "arguments"} objects as ToolCalls; None unless every entry is
    one (Mistral's and Phi-4-mini's lists)."""
    try:
        items = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(items, list) or not items:
        return None
    calls = [_call(json.dumps(item), "arguments") for item in items]
    return [c for c in calls if c is not None] if all(calls) else None


def _mistral(text: str) -> tuple[str, list[ToolCall]] | None:
    """Mistral's [TOOL_CALLS]: a JSON list after it (v3), or name[ARGS]{...} per call (v11+);
    the text before the first marker is the content. None: no marker, or a call that does not
    parse (the reply is then left as it is)."""
    if MISTRAL not in text:
        return None
    content, *blocks = text.split(MISTRAL)
    calls: list[ToolCall] = []
    for block in blocks:
        if MISTRAL_ARGS in block:
            name, _, args = block.partition(MISTRAL_ARGS)
            one = _call(json.dumps({"name": name.strip(), "arguments": args.strip()}), "arguments")
            if one is None or not one.name:
                return None
            calls.append(one)
        else:
            found = _call_list(block.strip())
            if found is None:
                return None
            calls.extend(found)
    return content.strip(), calls


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """(the reply's text without the calls, the calls in order)."""
    mistral = _mistral(text)
    if mistral is not None:
        return mistral
    phi = PHI4.search(text)
    if phi is not None:
        found = _call_list(phi.group(1) or phi.group(2))
        if found is not None:
            return (text[: phi.start()] + text[phi.end() :]).strip(), found
    calls: list[ToolCall] = []

    def hermes(m: re.Match) -> str:
        call = _call(m.group(1), "arguments")
        if call is None:
            return m.group(0)
        calls.append(call)
        return ""

    rest = HERMES.sub(hermes, text)
    if calls:
        return rest.strip(), calls
    body = text.strip().removeprefix(PYTHON_TAG).strip()
    if body.startswith("{"):  # Llama 3.x: the reply is the call(s)
        one = _call(body, "parameters")
        if one is not None:
            return "", [one]
        parts = [_call(p, "parameters") for p in body.split(";") if p.strip()]
        found = [p for p in parts if p is not None]
        if found and len(found) == len(parts):
            return "", found
    return text, []


# -- constraining a reply to the tools' calls (tool_choice) -------------------------------------
TOOL_FORMATS = ("hermes", "llama3", "mistral", "phi4")


def tool_format(template: str) -> str:
    """How a chat template's model writes its calls, read from the template: Qwen's
    <tool_call> (hermes), Mistral's [TOOL_CALLS], Phi-4-mini's functools / <|tool|>, else Llama
    3.x's JSON reply."""
    if "<tool_call>" in template:
        return "hermes"
    if MISTRAL in template:
        return "mistral"
    if "<|tool|>" in template or "functools" in template:
        return "phi4"
    return "llama3"


class ToolError(ValueError):
    """A malformed tools / tool_choice / parallel_tool_calls (or tool history) value; `param`:
    the request field it is in."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


TOOL_SHAPE = "{'type': 'function', 'function': {'name': ..., 'parameters': {...}}}"


def _functions(tools: list[dict]) -> dict[str, dict]:
    """{name: its parameters' JSON schema} of the OpenAI API's tool list; ToolError naming a
    malformed entry (no function name, a type other than "function", parameters that are not
    a JSON schema of an object)."""
    out = {}
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(fn, dict) or not isinstance(name, str) or not name:
            raise ToolError(f"tools[{i}] must be {TOOL_SHAPE} with a function name", "tools")
        if tool.get("type", "function") != "function":
            raise ToolError(f"tools[{i}].type={tool['type']!r}: only 'function' tools", "tools")
        params = fn.get("parameters")
        params = {"type": "object"} if params is None else params
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise ToolError(f"tools[{i}].function.parameters ({name}) must be a JSON schema of "
                            f"an object ({{'type': 'object', ...}}), not {params!r}",
                            "tools")  # fmt: skip
        if name in out:
            raise ToolError(f"tools[{i}]: two tools are named {name!r}", "tools")
        out[name] = params
    return out


def chosen_tools(tools: list[dict] | None, tool_choice: object) -> dict[str, dict] | None:
    """The functions a reply must call ({name: parameters schema}): every tool for "required",
    the one named by {"type": "function", "function": {"name": ...}}; None for "auto" / "none"
    (not constrained). ToolError for another value or an unknown name."""
    functions = _functions(tools or [])
    if tool_choice in (None, "auto", "none"):
        return None
    if not functions:
        raise ToolError(f"tool_choice={tool_choice!r} needs tools", "tool_choice")
    if tool_choice == "required":
        return functions
    name = None
    if isinstance(tool_choice, dict) and isinstance(tool_choice.get("function"), dict):
        name = tool_choice["function"].get("name")
    if not isinstance(name, str):
        raise ToolError(
            f"tool_choice={tool_choice!r} must be 'auto', 'none', 'required' or "
            "{'type': 'function', 'function': {'name': ...}}", "tool_choice"
        )  # fmt: skip
    if name not in functions:
        raise ToolError(f"tool_choice names {name!r}, which is not among the tools: "
                        f"{', '.join(functions)}", "tool_choice")  # fmt: skip
    return {name: functions[name]}


@dataclass(frozen=True)
class ToolUse:
    """A chat request's tools, checked (tool_use): the list the chat template gets, the
    functions a reply must call (None: not constrained), whether the reply's calls are parsed
    (tools given and tool_choice not "none"), and whether several calls may be made."""

    tools: list[dict] | None = None
    required: dict[str, dict] | None = None
    parses: bool = False
    parallel: bool = True

    def constraint(self, template: str) -> dict[str, str | dict]:
        """The structured-output option making the reply the required calls, in the form
        `template` (the chat template's text) writes them; {} when not constrained."""
        if self.required is None:
            return {}
        return call_constraint(self.required, tool_format(template), self.parallel)

    def message(self, reply: str) -> dict:
        """The reply as the OpenAI API's assistant message: {"role": "assistant", "content":
        the text without its calls (None when the calls were all), "tool_calls": [...] (when
        it made any)}."""
        content, calls = parse_tool_calls(reply) if self.parses else (reply, [])
        if not calls:
            return {"role": "assistant", "content": reply}
        return {"role": "assistant", "content": content or None,
                "tool_calls": [c.to_openai() for c in calls]}  # fmt: skip


def tool_use(tools: object = None, tool_choice: object = None,
             parallel_tool_calls: object = True) -> ToolUse:  # fmt: skip
    """The OpenAI API's tools, tool_choice and parallel_tool_calls, checked once; ToolError
    (its `param` the field) for a malformed one."""
    if tools is not None and not isinstance(tools, list):
        raise ToolError(f"tools must be a list of {TOOL_SHAPE} (got {type(tools).__name__})",
                        "tools")  # fmt: skip
    if not isinstance(parallel_tool_calls, bool):
        raise ToolError(f"parallel_tool_calls={parallel_tool_calls!r} must be true or false",
                        "parallel_tool_calls")  # fmt: skip
    required = chosen_tools(tools, tool_choice)
    return ToolUse(tools or None, required, bool(tools) and tool_choice != "none",
                   parallel_tool_calls)  # fmt: skip


def template_messages(messages: object) -> object:
    """`messages` as chat templates read them: an assistant message's tool_calls with their
    function.arguments as objects (the API sends JSON text; Qwen's, Llama's and Mistral's
    templates write `arguments | tojson`), as vLLM and llama.cpp give them. ToolError naming
    arguments that are not JSON of an object. Anything else is left to the template's check."""
    if not isinstance(messages, list):
        return messages
    out: list = []
    for i, m in enumerate(messages):
        calls = m.get("tool_calls") if isinstance(m, Mapping) else None
        if not isinstance(calls, list):
            out.append(m)
            continue
        fixed = []
        for j, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, Mapping) else None
            args = fn.get("arguments") if isinstance(fn, Mapping) else None
            if isinstance(args, str):
                where = f"messages[{i}].tool_calls[{j}].function.arguments"
                try:
                    args = json.loads(args)
                except json.JSONDecodeError as e:
                    raise ToolError(f"{where} is not JSON: {e}", "messages") from None
                if not isinstance(args, dict):
                    raise ToolError(f"{where} must be a JSON object", "messages")
                call = {**call, "function": {**fn, "arguments": args}}  # type: ignore[dict-item]
            fixed.append(call)
        out.append({**m, "tool_calls": fixed})
    return out


def _call_schema(functions: dict[str, dict], key: str) -> dict:
    """A JSON schema of one call of any of `functions`: {"name": its name, key: its params}."""
    calls = [
        {"type": "object", "properties": {"name": {"const": name}, key: params},
         "required": ["name", key], "additionalProperties": False}
        for name, params in functions.items()
    ]  # fmt: skip
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


def call_constraint(
    functions: dict[str, dict], fmt: str, parallel: bool = True
) -> dict[str, str | dict]:
    """The structured-output option (json_schema=... or grammar=...) under which the reply is
    one call (Llama 3.x; the others with `parallel` False) or one or more calls of
    `functions`, in the form `fmt`'s template writes them; each call's arguments valid under
    its tool's schema."""
    if fmt == "llama3":
        return {"json_schema": _call_schema(functions, "parameters")}
    # JSON as json.dumps writes it (a grammar's %json allows any whitespace otherwise)
    compact = {"x-guidance": {"whitespace_flexible": False, "item_separator": ", ",
                              "key_separator": ": "}}  # fmt: skip
    one = json.dumps({**_call_schema(functions, "arguments"), **compact})
    most = {} if parallel else {"maxItems": 1}
    array = json.dumps({"type": "array", "items": _call_schema(functions, "arguments"),
                        "minItems": 1, **most, **compact})  # fmt: skip
    if fmt == "hermes":  # one or more <tool_call> blocks, a newline between two
        more = ' ("\\n" call)*' if parallel else ""
        grammar = (
            f'start: call{more}\ncall: "<tool_call>\\n" body "\\n</tool_call>"\nbody: %json {one}'
        )
    elif fmt == "mistral":
        grammar = f'start: "[TOOL_CALLS]" " "? body\nbody: %json {array}'
    elif fmt == "phi4":
        grammar = f'start: "functools" body\nbody: %json {array}'
    else:
        raise ValueError(f"unknown tool call format {fmt!r}: one of {', '.join(TOOL_FORMATS)}")
    return {"grammar": grammar}
