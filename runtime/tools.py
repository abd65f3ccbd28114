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
"""

from __future__ import annotations

import json
import re
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

    def to_openai(self, index: int) -> dict:
        """The OpenAI API's tool_calls entry (arguments as JSON text)."""
        return {
            "id": f"call_{index}",
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
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


def _functions(tools: list[dict]) -> dict[str, dict]:
    """{name: its parameters' JSON schema} of the OpenAI API's tool list; ValueError naming a
    malformed entry."""
    out = {}
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(fn, dict) or not isinstance(name, str) or not name:
            raise ValueError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': "
                             "..., 'parameters': {...}}}}")  # fmt: skip
        params = fn.get("parameters") or {"type": "object"}
        if not isinstance(params, dict):
            raise ValueError(f"tools[{i}].function.parameters must be a JSON schema object")
        out[name] = params
    return out


def chosen_tools(tools: list[dict] | None, tool_choice: object) -> dict[str, dict] | None:
    """The functions a reply must call ({name: parameters schema}): every tool for "required",
    the one named by {"type": "function", "function": {"name": ...}}; None for "auto" / "none"
    (not constrained). ValueError for another value or an unknown name."""
    if tool_choice in (None, "auto", "none"):
        return None
    functions = _functions(tools or [])
    if not functions:
        raise ValueError(f"tool_choice={tool_choice!r} needs tools")
    if tool_choice == "required":
        return functions
    name = None
    if isinstance(tool_choice, dict) and isinstance(tool_choice.get("function"), dict):
        name = tool_choice["function"].get("name")
    if not isinstance(name, str):
        raise ValueError(
            f"tool_choice={tool_choice!r} must be 'auto', 'none', 'required' or "
            "{'type': 'function', 'function': {'name': ...}}"
        )
    if name not in functions:
        raise ValueError(f"tool_choice names {name!r}, which is not among the tools: "
                         f"{', '.join(functions)}")  # fmt: skip
    return {name: functions[name]}


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
