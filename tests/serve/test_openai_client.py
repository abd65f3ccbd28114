"""The server through the `openai` package, the client people already have: completions and
chat, whole and streamed, n, stop, logprobs, usage, models, and the API's errors."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

openai = pytest.importorskip("openai", reason="needs the openai package (the test extra)")

from edgeformer.runtime import GenerationOptions, Generator, RuntimeSettings


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=30, max_retries=0)


@pytest.fixture(scope="module")
def alone():
    return Generator("shakespeare", threads=1)


def test_models_lists_each_package_by_name(client):
    names = {m.id for m in client.models.list().data}
    assert names == {"shakespeare", "bard", "m30k-en-de"}
    assert client.models.retrieve("bard").id == "bard"


def test_completion_whole_and_streamed_equal_the_generator(client, alone):
    prompt = "ROMEO: What light"
    want = alone.generate(prompt, max_new_tokens=16)
    got = client.completions.create(model="shakespeare", prompt=prompt, max_tokens=16,
                                    temperature=0)  # fmt: skip
    assert got.choices[0].text == want
    assert got.choices[0].finish_reason == "length"
    n_prompt = len(alone.prompt_ids(prompt))
    assert got.usage.prompt_tokens == n_prompt and got.usage.completion_tokens == 16
    assert got.usage.total_tokens == n_prompt + 16
    chunks = list(client.completions.create(model="shakespeare", prompt=prompt, max_tokens=16,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}))  # fmt: skip
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want
    assert len([c for c in chunks if c.choices and c.choices[0].text]) > 1  # streamed
    assert chunks[-1].usage.completion_tokens == 16
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_chat_uses_the_template_whole_and_streamed(client, alone):
    messages = [{"role": "system", "content": "Speak verse."},
                {"role": "user", "content": "Who is there?"}]  # fmt: skip
    prompt = "SYSTEM: Speak verse.\nUSER: Who is there?\nROMEO:"
    want = alone.generate(prompt, max_new_tokens=12)
    got = client.chat.completions.create(model="bard", messages=messages, max_tokens=12,
                                         temperature=0)  # fmt: skip
    assert got.choices[0].message.role == "assistant"
    assert got.choices[0].message.content == want
    assert got.usage.prompt_tokens == len(alone.prompt_ids(prompt))
    stream = client.chat.completions.create(model="bard", messages=messages, max_tokens=12,
                                            temperature=0, stream=True)  # fmt: skip
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == want
    assert chunks[-1].choices[0].finish_reason == "length"


def test_n_choices_seeded_sampling_and_stop(client, alone):
    got = client.completions.create(model="shakespeare", prompt="KING", max_tokens=20,
                                    temperature=0.9, seed=3, n=3)  # fmt: skip
    texts = [c.text for c in sorted(got.choices, key=lambda c: c.index)]
    want = [alone.generate("KING", max_new_tokens=20, sampling=True, temperature=0.9, seed=3 + i)
            for i in range(3)]  # fmt: skip
    assert texts == want
    assert got.usage.completion_tokens == 60
    stopped = client.completions.create(model="shakespeare", prompt="ROMEO:", max_tokens=40,
                                        temperature=0, stop=["the"])  # fmt: skip
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == alone.generate("ROMEO:", max_new_tokens=40, stop=["the"])


def test_several_prompts_in_one_request(client, alone):
    """A list of prompts (texts or token ids): n choices each, prompt i's at i * n .. (vLLM's
    and the API's order)."""
    prompts = ["ROMEO:", "KING", alone.prompt_ids("JULIET:")]
    got = client.completions.create(model="shakespeare", prompt=prompts, max_tokens=10,
                                    temperature=0, n=2)  # fmt: skip
    texts = [c.text for c in sorted(got.choices, key=lambda c: c.index)]
    want = [alone.generate(p, max_new_tokens=10) for p in ("ROMEO:", "KING", "JULIET:")]
    assert texts == [w for w in want for _ in range(2)]
    assert got.usage.prompt_tokens == sum(len(alone.prompt_ids(p)) for p in prompts[:2]) + len(
        prompts[2])  # fmt: skip
    assert got.usage.completion_tokens == 60


def test_logprobs_are_the_models(client, alone):
    got = client.completions.create(model="shakespeare", prompt="ROMEO:", max_tokens=4,
                                    temperature=0, logprobs=2)  # fmt: skip
    lp = got.choices[0].logprobs
    assert "".join(lp.tokens) == got.choices[0].text and len(lp.tokens) == 4
    ids = alone.prompt_ids("ROMEO:")
    for i, (value, top) in enumerate(zip(lp.token_logprobs, lp.top_logprobs)):
        assert len(top) == 2 and max(top.values()) == pytest.approx(value)  # greedy: the best
        seq = ids + alone.model.encode(got.choices[0].text[: i + 1])
        assert value == pytest.approx(float(alone.score_ids([seq])[0][-1]), abs=1e-4)
    chat = client.chat.completions.create(
        model="bard", messages=[{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0,
        logprobs=True, top_logprobs=3,
    )  # fmt: skip
    content = chat.choices[0].logprobs.content
    assert len(content) == 3 and all(len(c.top_logprobs) == 3 for c in content)


@pytest.mark.parametrize(
    "kwargs, status, param",
    [
        ({"model": "nobody"}, 404, "model"),
        ({"temperature": 3}, 400, "temperature"),
        ({"top_p": 0}, 400, "top_p"),
        ({"max_tokens": 0}, 400, "max_tokens"),
        ({"n": 99}, 400, "n"),
        ({"logprobs": 9}, 400, "logprobs"),
        ({"prompt": "x" * 80}, 400, "prompt"),  # over the 64 positions
        ({"max_tokens": 70}, 400, "max_tokens"),
        ({"frequency_penalty": 0.5}, 400, "frequency_penalty"),
        ({"model": "m30k-en-de"}, 400, "model"),
    ],
)
def test_bad_requests_get_one_clear_error(client, kwargs, status, param):
    args = {"model": "shakespeare", "prompt": "ROMEO:", **kwargs}
    error = openai.NotFoundError if status == 404 else openai.BadRequestError
    with pytest.raises(error) as e:
        client.completions.create(**args)
    assert e.value.status_code == status
    body = e.value.body
    assert body["param"] == param and body["message"], body
    if "prompt" in kwargs or kwargs.get("max_tokens") == 70:
        assert body["code"] == "context_length_exceeded", body


def test_malformed_bodies(url):
    bad = httpx.post(f"{url}/v1/completions", content=b"{not json", timeout=10)
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    unknown = httpx.post(
        f"{url}/v1/completions",
        timeout=10,
        json={"model": "shakespeare", "prompt": "a", "tempreature": 0},
    )
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "tempreature"
    no_chat = httpx.post(f"{url}/v1/chat/completions", timeout=10, json={
        "model": "shakespeare", "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert no_chat.status_code == 400 and "no chat template" in no_chat.json()["error"]["message"]
    assert httpx.get(f"{url}/v1/nothing", timeout=10).status_code == 404


def test_translation_route(url):
    from edgeformer.runtime import Translator

    texts = ["A man is riding a bike.", "Two dogs play in the snow."]
    got = httpx.post(f"{url}/v1/translations", timeout=30,
                     json={"model": "m30k-en-de", "input": texts, "max_tokens": 30})  # fmt: skip
    assert got.status_code == 200, got.text
    want = Translator("m30k-en-de", threads=1).translate_batch(texts, max_new_tokens=30)
    assert [d["text"] for d in got.json()["data"]] == want
    lang = httpx.post(f"{url}/v1/translations", timeout=10,
                      json={"model": "m30k-en-de", "input": "x", "target_lang": "xx"})  # fmt: skip
    assert lang.status_code == 400 and lang.json()["error"]["message"]
    zero = httpx.post(f"{url}/v1/translations", timeout=10,
                      json={"model": "m30k-en-de", "input": "x", "max_tokens": 0})  # fmt: skip
    assert zero.status_code == 400 and zero.json()["error"]["param"] == "max_tokens"


def test_options_are_made_once_per_request(served, monkeypatch):
    """A completion's and a translation's options are made (GenerationOptions, validated) once:
    when the request comes; the decoding uses them as they are. Every served model runs with
    the server's one RuntimeSettings."""
    url, server = served
    made: list[str] = []
    for name in ("shakespeare", "m30k-en-de"):
        model = server.models[name].model
        assert model.settings == RuntimeSettings(threads=1), name
        options = model.options

        def counted(name=name, options=options, **fields):
            made.append(name)
            return options(**fields)

        monkeypatch.setattr(model, "options", counted)
    checked = []
    post_init = GenerationOptions.__post_init__
    monkeypatch.setattr(GenerationOptions, "__post_init__",
                        lambda self: (checked.append(1), post_init(self))[1])  # fmt: skip
    got = httpx.post(f"{url}/v1/translations", timeout=30,
                     json={"model": "m30k-en-de", "input": ["A man.", "Two dogs."],
                           "max_tokens": 5})  # fmt: skip
    assert got.status_code == 200, got.text
    assert made == ["m30k-en-de"] and len(checked) == 1
    body = {"model": "shakespeare", "prompt": "ROMEO:", "max_tokens": 5}
    got = httpx.post(f"{url}/v1/completions", timeout=30, json=body)
    assert got.status_code == 200, got.text
    assert made == ["m30k-en-de", "shakespeare"] and len(checked) == 2


def test_a_client_that_goes_away_mid_stream_frees_its_row(served, monkeypatch):
    """Steps slowed to 20 ms (the tiny model's take 0.2): the 55 asked would take over a
    second; the row leaves a few steps after the client does."""
    url, server = served
    lm = server.models["shakespeare"].scheduler
    step = lm._step

    def slow_step() -> None:
        time.sleep(0.02)
        step()

    monkeypatch.setattr(lm, "_step", slow_step)
    before = lm.counters.stepped_rows
    body = {"model": "shakespeare", "prompt": "ROMEO:", "max_tokens": 55, "stream": True,
            "temperature": 0.5, "seed": 1}  # fmt: skip
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=10) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                break
    deadline = time.monotonic() + 10
    while lm.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lm.running == 0 and lm.queue_depth == 0
    assert lm.counters.stepped_rows - before < 25


def test_a_client_that_goes_away_before_a_whole_answer_frees_its_row(served, monkeypatch):
    url, server = served
    lm = server.models["shakespeare"].scheduler
    step = lm._step

    def slow_step() -> None:
        time.sleep(0.02)
        step()

    monkeypatch.setattr(lm, "_step", slow_step)
    before = lm.counters.stepped_rows
    body = {"model": "shakespeare", "prompt": "ROMEO:", "max_tokens": 55, "temperature": 0}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{url}/v1/completions", json=body, timeout=0.3)
    deadline = time.monotonic() + 10
    while lm.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lm.running == 0 and lm.counters.stepped_rows - before < 40


def test_concurrent_clients_share_the_batch(served, alone):
    url, server = served
    counters = server.models["shakespeare"].scheduler.counters
    steps, rows = counters.steps, counters.stepped_rows
    prompts = ["ROMEO:", "JULIET: O Romeo", "KING RICHARD", "Hark"]
    out: dict[int, str] = {}
    go = threading.Barrier(len(prompts))

    def ask(i: int) -> None:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=30, max_retries=0)
        go.wait()
        out[i] = c.completions.create(model="shakespeare", prompt=prompts[i], max_tokens=40,
                                      temperature=0).choices[0].text  # fmt: skip

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert [out[i] for i in range(len(prompts))] == [
        alone.generate(p, max_new_tokens=40) for p in prompts]  # fmt: skip
    assert (counters.stepped_rows - rows) / (counters.steps - steps) > 1.2


def test_health_and_metrics(url, client):
    assert httpx.get(f"{url}/health", timeout=10).json()["status"] == "ok"
    client.completions.create(model="shakespeare", prompt="A", max_tokens=2)
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for name in (
        "edgeformer_requests_total",
        "edgeformer_completion_tokens_total",
        "edgeformer_queue_depth",
        "edgeformer_request_seconds_bucket",
        "edgeformer_time_to_first_token_seconds_count",
        "edgeformer_decode_steps",
    ):
        assert name in text, name
    assert 'edgeformer_requests_total{route="/v1/completions",status="200"}' in text


def test_api_key(chat_package):
    from edgeformer.runtime.serve.app import ServeConfig, create_app, running

    app = create_app(
        ServeConfig(("shakespeare",), api_key="sesame", runtime=RuntimeSettings(threads=1))
    )
    with running(app) as url:
        wrong = openai.OpenAI(base_url=f"{url}/v1", api_key="nope", max_retries=0, timeout=10)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
        right = openai.OpenAI(base_url=f"{url}/v1", api_key="sesame", max_retries=0, timeout=10)
        assert right.completions.create(model="shakespeare", prompt="A", max_tokens=2).choices
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200  # probes need no key
