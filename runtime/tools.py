"""Tool calls in a chat reply: the calls the model wrote, as the families' chat templates define
them, parsed into ToolCall objects (Generator.chat_message).

    Qwen2.5 / Qwen3 (Hermes style):  <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>
    Llama 3.x (JSON tool calling):   {"name": ..., "parameters": {...}}  (the whole reply; several
                                     separated by ";"; after <|python_tag|> when it is kept)

A block whose JSON does not parse, or names no function, stays in the reply's text (vLLM's
parsers do the same): nothing is dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
PYTHON_TAG = "<|python_tag|>"


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


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """(the reply's text without the calls, the calls in order)."""
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
