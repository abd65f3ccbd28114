"""Tool calls (issue 59): tools reach the chat template, and the reply's calls are parsed as
the Qwen2.5 / Qwen3 (<tool_call> JSON) and Llama 3.x (a JSON reply) templates write them."""

from __future__ import annotations

import json

import pytest
from chat_templates import CHATML  # tests/runtime (tests/conftest.py puts it on the path)

from edgeformer.runtime.chat import ChatTemplate
from edgeformer.runtime.tools import ToolCall, parse_tool_calls

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 4}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def test_tools_reach_the_chat_template():
    prompt = ChatTemplate(CHATML).render([{"role": "user", "content": "hi"}], True, [WEATHER])
    assert "get_weather" in prompt and json.dumps(WEATHER["function"]["parameters"]) in prompt
    plain = ChatTemplate(CHATML).render([{"role": "user", "content": "hi"}], True)
    assert "get_weather" not in plain


@pytest.mark.parametrize(
    "text, content, calls",
    [
        (
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
            "",
            [ToolCall("get_weather", {"city": "Oslo"})],
        ),
        (
            'Let me look.\n<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n'
            '<tool_call>{"name": "b", "arguments": "{\\"x\\": 1}"}</tool_call>',
            "Let me look.",
            [ToolCall("a"), ToolCall("b", {"x": 1})],
        ),
        (
            '{"name": "get_weather", "parameters": {"city": "Rome"}}',
            "",
            [ToolCall("get_weather", {"city": "Rome"})],
        ),  # Llama 3.x
        (
            '<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"k": 2}}',
            "",
            [ToolCall("a"), ToolCall("b", {"k": 2})],
        ),
        ("<tool_call>{not json}</tool_call>", "<tool_call>{not json}</tool_call>", []),
        ('{"city": "Rome"}', '{"city": "Rome"}', []),  # JSON, but no call: the reply's text
        ("It is sunny.", "It is sunny.", []),
    ],  # fmt: skip
)
def test_tool_calls_are_parsed(text, content, calls):
    assert parse_tool_calls(text) == (content, calls)


def test_chat_message_gives_the_calls_of_a_constrained_reply(byte_lm):
    """A random model constrained to a Llama-3-style call of the tool (its name, then its
    parameters' schema): chat_message parses it into the OpenAI API's tool_calls."""
    pytest.importorskip("llguidance", reason="needs llguidance (the structured extra)")
    from edgeformer.runtime import Generator

    lm = Generator(str(byte_lm))
    params = {"type": "object", "properties": {"c": {"type": "string", "maxLength": 2}},
              "required": ["c"], "additionalProperties": False}  # fmt: skip
    tool = {"type": "function", "function": {"name": "wx", "parameters": params}}
    call = {"type": "object", "properties": {"name": {"const": "wx"}, "parameters": params},
            "required": ["name", "parameters"], "additionalProperties": False}  # fmt: skip
    message = lm.chat_message([{"role": "user", "content": "?"}], tools=[tool],
                              json_schema=call, max_new_tokens=50)  # fmt: skip
    assert message["role"] == "assistant" and message["content"] == "", message
    (made,) = message["tool_calls"]
    assert made["type"] == "function" and made["function"]["name"] == "wx"
    assert set(json.loads(made["function"]["arguments"])) == {"c"}
