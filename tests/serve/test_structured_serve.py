"""response_format on /v1/chat/completions and /v1/completions (json_object, json_schema): each
choice of a request follows it (its own matcher, rows of the shared batch), whole and streamed;
a bad schema, or one the model's tokenizer cannot write, is a 400 naming response_format."""

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
def server(byte_lm):
    config = ServeConfig((f"json={byte_lm}", "shakespeare"), BatchSettings(max_batch=4),
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
