"""response_format on /v1/chat/completions and /v1/completions (json_object, json_schema): each
choice of a request follows it (its own matcher, rows of the shared batch), whole and streamed;
a bad schema, or one the model's tokenizer cannot write, is a 400 naming response_format. Tools
on /v1/chat/completions: tool_choice's calls come back as message.tool_calls (streamed as
delta.tool_calls), the history's calls and tool results reach the template, bad tools are 400s
naming their field."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

pytest.importorskip("llguidance", reason="needs llguidance (the structured extra)")
jsonschema = pytest.importorskip("jsonschema", reason="needs jsonschema (the test extra)")
openai = pytest.importorskip("openai", reason="needs the openai package (the test extra)")

from edgeformer.runtime.serve.app import ServeConfig, Server, app_of, load_models, running
from edgeformer.runtime.serve.scheduler import BatchSettings
from edgeformer.runtime.session import RuntimeSettings

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 3},
        "sun": {"type": "boolean"},
        "deg": {"type": "integer", "minimum": -40, "maximum": 50},
    },
    "required": ["city", "sun", "deg"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
MESSAGES = [{"role": "user", "content": "the weather?"}]


@pytest.fixture(scope="module")
def server(byte_lm, tool_lm):
    config = ServeConfig((f"json={byte_lm}", f"tools={tool_lm}", "shakespeare"),
                         BatchSettings(max_batch=4),
                         runtime=RuntimeSettings(threads=1))  # fmt: skip
    with running(app_of(Server(load_models(config)))) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="none", timeout=60, max_retries=0)


def test_chat_choices_follow_the_schema(client):
    chat = client.chat.completions.create(
        model="json", messages=MESSAGES, max_tokens=50, n=3, temperature=1.0, seed=5,
        response_format=FORMAT,
    )  # fmt: skip
    texts = [c.message.content for c in chat.choices]
    assert len(set(texts)) > 1, texts  # sampled: different answers, each valid
    for c in chat.choices:
        jsonschema.validate(json.loads(c.message.content), SCHEMA)
        assert c.finish_reason == "stop"


def test_streamed_and_concurrent_requests_follow_the_schema(client):
    """Requests at once share the batch's steps; each row has its own matcher state."""
    out: dict[int, str] = {}

    def ask(i: int) -> None:
        stream = client.chat.completions.create(
            model="json", messages=MESSAGES, max_tokens=50, temperature=1.0, seed=i,
            response_format=FORMAT, stream=True,
        )  # fmt: skip
        out[i] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 4
    for text in out.values():  # finish_reason "length" would leave it cut: invalid
        jsonschema.validate(json.loads(text), SCHEMA)


def test_completions_take_json_object(client):
    fmt = {"type": "json_object"}
    done = client.completions.create(model="json", prompt="fox", max_tokens=50, temperature=0,
                                     extra_body={"response_format": fmt})  # fmt: skip
    assert isinstance(json.loads(done.choices[0].text), dict)
    plain = client.completions.create(model="json", prompt="fox", max_tokens=20, temperature=0)
    with pytest.raises(ValueError):  # the same request without response_format: no JSON
        json.loads(plain.choices[0].text)


@pytest.mark.parametrize(
    "model, fmt, match",
    [
        (
            "json",
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objectx"}}},
            "invalid JSON schema",
        ),
        ("json", {"type": "yaml"}, "response_format type 'yaml'"),
        ("json", {"type": "json_schema"}, "response_format json_schema needs"),
        ("shakespeare", FORMAT, "cannot be satisfied with this model's tokenizer"),
    ],  # fmt: skip
)
def test_bad_response_format_is_a_400_naming_it(server, model, fmt, match):
    body = {"model": model, "messages": MESSAGES, "response_format": fmt, "max_tokens": 5}
    if model == "shakespeare":  # no chat template: the completions route
        body = {"model": model, "prompt": "x", "response_format": fmt, "max_tokens": 5}
    route = "chat/completions" if "messages" in body else "completions"
    r = httpx.post(f"{server}/v1/{route}", json=body, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "response_format" and match in error["message"], error


# -- tools ---------------------------------------------------------------------------------------
def tool(name: str, properties: dict) -> dict:
    params = {"type": "object", "properties": properties, "required": list(properties),
              "additionalProperties": False}  # fmt: skip
    return {"type": "function", "function": {"name": name, "parameters": params}}


WX = tool("w", {"c": {"type": "string", "maxLength": 2}})
FN = tool("f", {"x": {"type": "integer", "minimum": 0, "maximum": 9}})
ASK = [{"role": "user", "content": "?"}]


def test_a_required_call_comes_back_as_tool_calls(client):
    chat = client.chat.completions.create(model="tools", messages=ASK, tools=[WX, FN],
                                          tool_choice="required", parallel_tool_calls=False,
                                          max_tokens=45, temperature=0)  # fmt: skip
    (choice,) = chat.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content is None, choice
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    schema = {"w": WX, "f": FN}[call.function.name]["function"]["parameters"]
    jsonschema.validate(json.loads(call.function.arguments), schema)


def test_a_named_tool_streamed_equals_the_whole_answer(client):
    ask = dict(model="tools", messages=ASK, tools=[WX, FN], max_tokens=45, temperature=0,
               tool_choice={"type": "function", "function": {"name": "f"}})  # fmt: skip
    whole = client.chat.completions.create(**ask).choices[0]
    (call,) = whole.message.tool_calls
    assert call.function.name == "f"
    jsonschema.validate(json.loads(call.function.arguments), FN["function"]["parameters"])
    chunks = [c for c in client.chat.completions.create(**ask, stream=True) if c.choices]
    deltas = [tc for c in chunks for tc in c.choices[0].delta.tool_calls or []]
    assert [(d.index, d.function.name, d.function.arguments) for d in deltas] == [
        (0, "f", call.function.arguments)
    ]
    assert deltas[0].id.startswith("call_") and deltas[0].type == "function"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not "".join(c.choices[0].delta.content or "" for c in chunks)


def test_tool_choice_none_and_auto_answer_text(client):
    for choice in ("none", "auto"):
        chat = client.chat.completions.create(model="tools", messages=ASK, tools=[WX],
                                              tool_choice=choice, max_tokens=8,
                                              temperature=0)  # fmt: skip
        message = chat.choices[0].message
        assert message.tool_calls is None and isinstance(message.content, str), message
        assert chat.choices[0].finish_reason in ("stop", "length")
    stream = client.chat.completions.create(model="tools", messages=ASK, tools=[WX], max_tokens=8,
                                            temperature=0, stream=True)  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == message.content  # buffered till the end, then the whole text


def test_tool_calls_and_results_in_the_history_reach_the_template(server, tool_lm):
    """The API's assistant message (arguments as JSON text) and the tool's reply: the template
    gets the arguments as an object (the prompt has its JSON, not a quoted string)."""
    from edgeformer.runtime import Generator

    history = [
        {"role": "user", "content": "?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "w", "arguments": '{"c": "ab"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "9"},
    ]  # fmt: skip
    lm = Generator(str(tool_lm))
    prompt = lm.chat_prompt(history, True, None, [WX])
    assert prompt == 'T:w;\nuser: ?\nassistant: w{"c": "ab"}\ntool: 9\n', prompt
    body = {"model": "tools", "messages": history, "tools": [WX], "max_tokens": 1}
    r = httpx.post(f"{server}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == len(lm.chat_ids(history, None, [WX]))


BAD_ARGS = [{"role": "assistant", "tool_calls": [
    {"id": "c", "type": "function", "function": {"name": "w", "arguments": "{oops"}}]}]  # fmt: skip


@pytest.mark.parametrize(
    "model, fields, param, match",
    [
        ("tools", {"tools": "w"}, "tools", "tools must be a list"),
        ("tools", {"tools": [{"type": "function", "function": {}}]}, "tools", "function name"),
        ("tools", {"tools": [tool("w", {}) | {"type": "code"}]}, "tools", "only 'function'"),
        (
            "tools",
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "w", "parameters": {"type": "string"}},
                    }
                ]
            },
            "tools",
            "must be a JSON schema of an object",
        ),
        (
            "tools",
            {"tools": [WX], "tool_choice": {"type": "function", "function": {"name": "q"}}},
            "tool_choice",
            "not among the tools: w",
        ),
        ("tools", {"tools": [WX], "tool_choice": "always"}, "tool_choice", "must be 'auto'"),
        ("tools", {"tool_choice": "required"}, "tool_choice", "needs tools"),
        (
            "tools",
            {"tools": [WX], "parallel_tool_calls": "yes"},
            "parallel_tool_calls",
            "must be true or false",
        ),
        (
            "tools",
            {"tools": [WX], "tool_choice": "required", "response_format": FORMAT},
            "tool_choice",
            "cannot be combined",
        ),
        ("tools", {"messages": BAD_ARGS}, "messages", "arguments is not JSON"),
        ("json", {"tools": [WX]}, "tools", "chat template takes no tools"),
    ],  # fmt: skip
)
def test_bad_tools_are_a_400_naming_the_field(server, model, fields, param, match):
    body = {"model": model, "messages": MESSAGES, "max_tokens": 5, **fields}
    r = httpx.post(f"{server}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and match in error["message"], error
