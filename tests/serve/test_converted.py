"""A converted instruct model (a small random-weight Qwen2: grouped-query attention, a ChatML
template, two EOS ids) behind the server: concurrent chats equal transformers' generate, and
the next turn of a conversation reuses the cache of the turns before it."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
openai = pytest.importorskip("openai", reason="needs the openai package (the test extra)")

from chat_templates import CHATML  # tests/runtime (tests/conftest.py puts it on the path)
from test_chat import chat_tokenizer, hf_reply  # the runtime chat tests' model and reference

from edgeformer.export import export_package
from edgeformer.models.hf import convert_hf
from edgeformer.runtime.serve.app import ServeConfig, Server, app_of, load_models, running
from edgeformer.runtime.serve.scheduler import BatchSettings
from edgeformer.runtime.session import RuntimeSettings

CHATS = [
    [{"role": "user", "content": "Hello there!"}],
    [{"role": "system", "content": "You translate."}, {"role": "user", "content": "one two"}],
    [{"role": "user", "content": "What is two plus two and three?"}],
]


@pytest.fixture(scope="module")
def instruct(tmp_path_factory):
    """(HF model, HF tokenizer, package): a 2-layer Qwen2, 4 heads over 2 K/V heads."""
    root = tmp_path_factory.mktemp("serve-instruct")
    hf_tok = chat_tokenizer(root / "hf", CHATML)
    im_end, eos = hf_tok.convert_tokens_to_ids(["<|im_end|>", "</s>"])
    torch.manual_seed(1)
    config = transformers.Qwen2Config(
        vocab_size=len(hf_tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=hf_tok.bos_token_id, eos_token_id=[im_end, eos], initializer_range=0.05,
        tie_word_embeddings=True,
    )  # fmt: skip
    hf = transformers.Qwen2ForCausalLM(config).eval()
    hf.save_pretrained(root / "hf")
    pkg = export_package(convert_hf(root / "hf", root / "ckpt"), root / "qwen", verbose=False)
    return hf, hf_tok, pkg


@pytest.fixture(scope="module")
def server(instruct):
    config = ServeConfig(
        (f"qwen={instruct[2]}",), BatchSettings(max_batch=4), runtime=RuntimeSettings(threads=1)
    )
    server = Server(load_models(config))
    with running(app_of(server)) as url:
        yield url, server


def test_concurrent_chats_equal_transformers(instruct, server):
    hf, hf_tok, _ = instruct
    url, _ = server
    out: dict[int, str] = {}
    go = threading.Barrier(len(CHATS))

    def ask(i: int) -> None:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="-", timeout=60, max_retries=0)
        go.wait()
        reply = client.chat.completions.create(model="qwen", messages=CHATS[i], max_tokens=16,
                                               temperature=0)  # fmt: skip
        out[i] = reply.choices[0].message.content

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(CHATS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [out[i] for i in range(len(CHATS))] == [hf_reply(hf, hf_tok, m, 16) for m in CHATS]


def test_the_next_turn_reuses_the_conversation_so_far(instruct, server):
    hf, hf_tok, _ = instruct
    url, srv = server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="-", timeout=60, max_retries=0)
    messages = [{"role": "system", "content": "You translate."}]
    previous = 0  # the previous turn's prompt tokens
    for text in ["one", "two", "three"]:
        messages.append({"role": "user", "content": text})
        reply = client.chat.completions.create(model="qwen", messages=messages, max_tokens=8,
                                               temperature=0)  # fmt: skip
        content = reply.choices[0].message.content
        assert content == hf_reply(hf, hf_tok, messages, 8)
        cached = reply.usage.prompt_tokens_details.cached_tokens
        assert previous <= cached < reply.usage.prompt_tokens  # at least the turns before
        previous = reply.usage.prompt_tokens
        messages.append({"role": "assistant", "content": content})
    assert srv.models["qwen"].scheduler.prefix.hits >= 2
