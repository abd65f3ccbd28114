"""Tool calls (issue 59): tools reach the chat template, and the reply's calls are parsed as
the Qwen2.5 / Qwen3 (<tool_call> JSON), Llama 3.x (a JSON reply), Mistral ([TOOL_CALLS]) and
Phi-4-mini (functools[...]) templates write them; tool_choice constrains a reply to the calls."""

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
        (
            '[TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]',
            "",
            [ToolCall("a", {"x": 1}), ToolCall("b")],
        ),  # Mistral, v3 tokenizers
        (
            'Sure.[TOOL_CALLS]a[ARGS]{"x": 1}[TOOL_CALLS]b[ARGS]{}',
            "Sure.",
            [ToolCall("a", {"x": 1}), ToolCall("b")],
        ),  # Mistral, v11+
        ("[TOOL_CALLS]a[ARGS]{not json", "[TOOL_CALLS]a[ARGS]{not json", []),
        (
            'functools[{"name": "a", "arguments": {"x": 1}}]',
            "",
            [ToolCall("a", {"x": 1})],
        ),  # Phi-4-mini
        (
            'Checking. <|tool_call|>[{"name": "a", "arguments": {}}]<|/tool_call|>',
            "Checking.",
            [ToolCall("a")],
        ),
        ("functools[oops]", "functools[oops]", []),
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
    assert message["role"] == "assistant" and message["content"] is None, message
    (made,) = message["tool_calls"]
    assert made["type"] == "function" and made["function"]["name"] == "wx"
    assert set(json.loads(made["function"]["arguments"])) == {"c"}


def tiny_tool(name: str, properties: dict) -> dict:
    params = {"type": "object", "properties": properties, "required": list(properties),
              "additionalProperties": False}  # fmt: skip
    return {"type": "function", "function": {"name": name, "parameters": params}}


@pytest.mark.parametrize("fmt", ["llama3", "hermes", "mistral", "phi4"])
def test_tool_choice_constrains_a_reply_to_the_tools_calls(byte_lm, fmt):
    """A random model under each template form's call constraint: the reply parses into calls
    of the chosen tool only, whose arguments follow its schema; chat_message does it for the
    template's own form (this one's: llama3) with tool_choice. (The byte-level test model has
    64 positions: Qwen's longer frame gets a tool without arguments.)"""
    pytest.importorskip("llguidance", reason="needs llguidance (the structured extra)")
    from edgeformer.runtime import Generator
    from edgeformer.runtime.tools import call_constraint, chosen_tools

    lm = Generator(str(byte_lm))
    props = {} if fmt == "hermes" else {"c": {"type": "string", "maxLength": 1}}
    tools = [tiny_tool("w", props), tiny_tool("f", {"x": {"type": "integer"}})]
    functions = chosen_tools(tools, {"type": "function", "function": {"name": "w"}})
    assert list(functions) == ["w"]
    option = call_constraint(functions, fmt, parallel=False)  # one call: never cut by the limit
    for seed in range(3):
        reply = lm.chat([{"role": "user", "content": "?"}], tools=tools, max_new_tokens=56,
                        sampling=True, seed=seed, **option)  # fmt: skip
        content, calls = parse_tool_calls(reply)
        assert calls and content == "", reply
        for call in calls:
            assert call.name == "w" and set(call.arguments) == set(props), reply
    message = lm.chat_message([{"role": "user", "content": "?"}], tools=tools,
                              tool_choice="required", parallel_tool_calls=False,
                              max_new_tokens=56)  # fmt: skip
    assert message["content"] is None and message["tool_calls"], message
    reply = lm.chat_message([{"role": "user", "content": "?"}], tools=tools, tool_choice="none",
                            max_new_tokens=5)  # fmt: skip
    assert "tool_calls" not in reply


def test_bad_tool_choices_are_named():
    from edgeformer.runtime.tools import chosen_tools

    with pytest.raises(ValueError, match="not among the tools: get_weather"):
        chosen_tools([WEATHER], {"type": "function", "function": {"name": "nope"}})
    with pytest.raises(ValueError, match="must be 'auto', 'none', 'required'"):
        chosen_tools([WEATHER], "always")
    with pytest.raises(ValueError, match="needs tools"):
        chosen_tools([], "required")
    with pytest.raises(ValueError, match=r"tools\[0\] must be"):
        chosen_tools([{"type": "function"}], "required")


def test_tool_use_checks_every_field_once():
    """tool_use (Generator.chat_message's and the server's one check): each malformed field
    named, as the ToolError's param; a reply's calls are parsed only when there are tools."""
    from edgeformer.runtime.tools import ToolError, tool_use

    cases = [
        (("w", None, True), "tools", "tools must be a list"),
        (([WEATHER, WEATHER], None, True), "tools", "two tools are named 'get_weather'"),
        (([tiny_tool("a", {}) | {"type": "code"}], None, True), "tools", "only 'function'"),
        (([{"type": "function", "function": {"name": "a", "parameters": []}}], None, True),
         "tools", "must be a JSON schema of an object"),
        (([WEATHER], "auto", "yes"), "parallel_tool_calls", "must be true or false"),
        ((None, "required", True), "tool_choice", "needs tools"),
    ]  # fmt: skip
    for args, param, match in cases:
        with pytest.raises(ToolError, match=match) as e:
            tool_use(*args)
        assert e.value.param == param
    call = '{"name": "get_weather", "parameters": {"city": "Oslo"}}'
    assert tool_use().message(call) == {"role": "assistant", "content": call}
    assert tool_use([WEATHER], "none").message(call) == {"role": "assistant", "content": call}
    (made,) = tool_use([WEATHER]).message(call)["tool_calls"]
    assert made["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}


def test_history_tool_calls_reach_templates_with_object_arguments():
    from edgeformer.runtime.tools import ToolError, template_messages

    fn = {"name": "a", "arguments": '{"x": 1}'}
    sent = [{"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": fn}]}]  # fmt: skip
    (fixed,) = template_messages(sent)
    assert fixed["tool_calls"][0]["function"]["arguments"] == {"x": 1}
    assert sent[0]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'  # not changed
    for args, match in (("{oops", "is not JSON"), ("[1]", "must be a JSON object")):
        sent[0]["tool_calls"][0]["function"]["arguments"] = args
        with pytest.raises(ToolError, match=match):
            template_messages(sent)
