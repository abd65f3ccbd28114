"""Chat (issue 47): a converted instruct model keeps its chat template and EOS ids; Generator.chat
renders a conversation as transformers' apply_chat_template(add_generation_prompt=True) does, and
`edgeformer chat` talks to it turn by turn. Hostile templates are refused, never executed."""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from chat_templates import CHATML, SPECIALS, TEMPLATES, UNBOUNDED_RENDERS  # noqa: E402

from edgeformer.export import export_package  # noqa: E402
from edgeformer.models.hf import convert_hf  # noqa: E402
from edgeformer.models.hf.convert import tokenizer_config  # noqa: E402
from edgeformer.runtime import ChatTemplateError, Generator  # noqa: E402
from edgeformer.runtime.chat import ChatTemplate, chat_template_of  # noqa: E402

CONVERSATIONS = [
    [{"role": "user", "content": "Hello there!"}],
    [{"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": "Hi"}],
    [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4", "tool_calls": None},
        {"role": "user", "content": "And 3 + 3? \u00e9\u4e2d"},
    ],
    [
        {"role": "system", "content": "You translate."},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "eins"},
        {"role": "user", "content": "two"},
    ],
]
TOOLS = [{"type": "function", "function": {"name": "add", "description": "a < b & 'c' é",
                                           "parameters": {"a": "int"}}}]  # fmt: skip


def chat_tokenizer(folder, template: str | None, bos_post_processor: bool = False):
    """A byte-level BPE tokenizer with the templates' special tokens, saved with
    save_pretrained (tokenizer.json, tokenizer_config.json, chat_template.jinja)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    text = ["hello there what is two plus two and three you translate one two eins"] * 8
    tok.train_from_iterator(text, trainer)
    if bos_post_processor:  # Llama's: <s> before every encoded text
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
        )
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="</s>",
        chat_template=template,
    )  # fmt: skip
    hf.save_pretrained(folder)
    return hf


def valid(name: str, conversation: list[dict]) -> bool:
    """Conversations a template accepts (Mistral's has no system role)."""
    return not (name == "mistral" and conversation[0]["role"] == "system")


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_templates_render_as_transformers(name, tmp_path):
    """The converter's reading of a saved tokenizer folder renders every conversation as
    apply_chat_template(add_generation_prompt=True) does, tools and variables included; the
    ones the template refuses are refused with its message."""
    hf = chat_tokenizer(tmp_path, TEMPLATES[name])
    assert (tmp_path / "chat_template.jinja").is_file()  # transformers 5's layout
    ours = chat_template_of(tokenizer_config(tmp_path))
    assert ours is not None and ours.special_tokens["bos_token"] == "<s>"
    for conversation in CONVERSATIONS:
        if not valid(name, conversation):
            with pytest.raises(ChatTemplateError, match="Only user and assistant"):
                ours.render(conversation)
            continue
        for extra in ({}, {"tools": TOOLS}, {"enable_thinking": False}):
            want = hf.apply_chat_template(conversation, add_generation_prompt=True,
                                          tokenize=False, **extra)  # fmt: skip
            assert ours.render(conversation, True, **extra) == want
    odd = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    if name == "gemma":
        with pytest.raises(ChatTemplateError, match="must alternate"):
            ours.render(odd)


def test_a_template_inside_tokenizer_config_and_named_templates(tmp_path):
    """transformers 4's layouts: the template inside tokenizer_config.json, or a list of named
    templates (the default one is used), special tokens as AddedToken objects."""
    hf = chat_tokenizer(tmp_path, CHATML)
    (tmp_path / "chat_template.jinja").unlink()
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "tool_use", "template": "x"},
                               {"name": "default", "template": CHATML}]  # fmt: skip
    config["eos_token"] = {"content": "</s>", "special": True}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    ours = chat_template_of(tokenizer_config(tmp_path))
    assert ours is not None and ours.special_tokens["eos_token"] == "</s>"
    want = hf.apply_chat_template(CONVERSATIONS[2], add_generation_prompt=True, tokenize=False)
    assert ours.render(CONVERSATIONS[2]) == want


@pytest.mark.parametrize(
    "template, match",
    [
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "unsafe|failed"),
        ("{{ messages.append(1) }}", "unsafe|failed"),
        ("{% set ns = namespace(_x=1) %}{{ ns._x }}", "failed"),
        ("{% for i in range(1000) %}{{ 'x' * 100000 }}{% endfor %}", "passed 2097152 characters"),
        ("{{ 'x' * 10000000 }}", "at most 2097152"),
        # nested loops that print nothing: bounded in steps, not only in output
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
         "ran over 2000000 steps|work passed"),
        ("{% set ns = namespace(n=0) %}{% for c in 'x' * 2000000 %}{% set ns.n = ns.n + 1 %}"
         "{% endfor %}", "ran over|failed|work passed"),
        ("{% for %}", "does not compile"),
        ("", "empty"),
        ("{{ raise_exception('no system messages') }}", "no system messages"),
    ],
)  # fmt: skip
def test_hostile_templates_are_refused(template, match):
    """The sandbox refuses Python internals and mutation; output and work are bounded; a
    broken template is a ChatTemplateError, as is the template's own raise_exception."""
    with pytest.raises(ChatTemplateError, match=match):
        ChatTemplate(template, {}).render([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("name", list(UNBOUNDED_RENDERS))
def test_work_and_memory_of_a_render_are_bounded(name):
    """What one line of a template may do is bounded (runtime/chat.py): list and string
    sizes before they are made, int arguments, the work of every operation; refused with
    well under 100 MB traced (the first case asked for 3.4 GB before, and 130 s)."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(ChatTemplateError, match="at most|work passed|over"):
            ChatTemplate(UNBOUNDED_RENDERS[name]).render([{"role": "user", "content": "hi"}])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100e6, f"{peak / 1e6:.0f} MB"


@pytest.mark.parametrize(
    "template, match",
    [
        ("{{ 'a' * 1000000000 }}", "of 1000000000 items"),
        ("{{ 10 ** 100000000 }}", "int over 4096 bits"),
        ("{{ '%0999999999d'|format(1) }}", "width or precision of 7 digits"),
        ("{{ '{:>999999999}'.format(1) }}", "width or precision of 7 digits"),
        ("{{ ('a' * 2000000)|replace('a', 'bbbbbbbbbb') }}", "with replace of 22000000"),
        ("{{ ('\n' * 100000)|indent('x' * 100000) }}", "with indent of"),
        ("{{ [[1]]|tojson(indent=1000000) }}", "indent is over 64"),
        ("{{ lipsum(100000) }}", "undefined"),
    ],
)  # fmt: skip
def test_amplifying_operations_are_refused_before_they_run(template, match):
    with pytest.raises(ChatTemplateError, match=match):
        ChatTemplate(template).render([{"role": "user", "content": "hi"}])


def test_real_templates_stay_far_inside_the_work_bound():
    """Each family's template over a long conversation with tools uses under 5 % of the work
    bound (the bound is for hostile templates, not for long chats)."""
    from edgeformer.runtime import chat

    seen = []
    real_charge = chat._charge

    def charge(units):
        seen.append(units)
        real_charge(units)

    conversation = [{"role": "system", "content": "s " * 1000}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " * 200}
        for i in range(100)
    ]
    tools = [
        {"type": "function", "function": {"name": f"f{i}", "parameters": {}}} for i in range(20)
    ]
    for name, template in TEMPLATES.items():
        seen.clear()
        chat._charge, saved = charge, chat._charge
        try:
            messages = conversation[1:] if name in ("mistral", "gemma") else conversation
            ChatTemplate(template, {"bos_token": "<s>", "eos_token": "</s>"}).render(
                messages, tools=tools
            )
        finally:
            chat._charge = saved
        assert sum(seen) < chat.MAX_TEMPLATE_WORK // 20, (name, sum(seen))  # chatml: 3 %


@pytest.mark.parametrize("messages", [[], "hello", [{"content": "no role"}], [["user", "hi"]]])
def test_bad_conversations_name_the_problem(messages):
    with pytest.raises(ChatTemplateError, match="messages"):
        ChatTemplate(CHATML).render(messages)


# ---------------------------------------------------------------- a converted instruct model


@pytest.fixture(scope="module")
def instruct(tmp_path_factory):
    """A small Qwen2 with a ChatML template whose turns end at <|im_end|> (an EOS id besides
    </s>), converted and exported: (HF model, HF tokenizer, folder, package)."""
    root = tmp_path_factory.mktemp("instruct")
    hf_tok = chat_tokenizer(root / "hf", CHATML)
    im_end, eos = hf_tok.convert_tokens_to_ids(["<|im_end|>", "</s>"])
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=len(hf_tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        bos_token_id=hf_tok.bos_token_id, eos_token_id=[im_end, eos], initializer_range=0.05,
        tie_word_embeddings=True,
    )  # fmt: skip
    hf = transformers.Qwen2ForCausalLM(config).eval()
    hf.save_pretrained(root / "hf")
    ckpt = convert_hf(root / "hf", root / "ckpt")
    pkg = export_package(ckpt, root / "pkg", verbose=False)
    return hf, hf_tok, root / "hf", pkg


def hf_reply(hf, hf_tok, messages, new: int) -> str:
    ids = hf_tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                     return_dict=True)["input_ids"]  # fmt: skip
    eos = hf.generation_config.eos_token_id
    with torch.no_grad():
        out = hf.generate(ids, max_new_tokens=new, do_sample=False, eos_token_id=eos,
                          pad_token_id=eos[0])[0, ids.shape[1] :].tolist()  # fmt: skip
    return hf_tok.decode(out, skip_special_tokens=True)


def test_chat_equals_transformers(instruct):
    """The package keeps the template and every EOS id; Generator.chat's prompt ids are
    apply_chat_template's, and its reply is generate()'s, for each conversation."""
    hf, hf_tok, _, pkg = instruct
    config = json.loads((pkg / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHATML and "tokenizer_config.json" in json.loads(
        (pkg / "config.json").read_text())["files"]  # fmt: skip
    gen = Generator(pkg, threads=1)
    for messages in CONVERSATIONS:
        want = hf_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                          return_dict=True)["input_ids"]  # fmt: skip
        assert gen.chat_ids(messages) == list(want)
        assert gen.chat(messages, max_new_tokens=12) == hf_reply(hf, hf_tok, messages, 12)
    assert "".join(gen.chat_stream(CONVERSATIONS[1], max_new_tokens=12)) == gen.chat(
        CONVERSATIONS[1], max_new_tokens=12)  # fmt: skip


def test_a_reply_can_end_at_an_eos_that_is_also_the_padding(instruct):
    """A model without a pad token pads with its EOS (<|im_end|> here): the text API still
    lets it end a reply there (it bans padding and BOS only where they end nothing)."""
    hf, hf_tok, _, pkg = instruct
    gen = Generator(pkg)
    im_end = hf_tok.convert_tokens_to_ids("<|im_end|>")
    assert gen.model.pad_id == im_end and im_end not in gen.banned_ids
    assert hf.generation_config.eos_token_id[1] not in gen.banned_ids


def test_cli_chat_keeps_the_history(instruct, monkeypatch, capsys):
    """`edgeformer chat PKG --system S` reads a user message per line until the end of input,
    each reply following the whole conversation so far."""
    import io

    from edgeformer.cli import main

    _, _, _, pkg = instruct
    monkeypatch.setattr("sys.stdin", io.StringIO("hello there\n\nwhat is two\n"))
    assert main(["chat", str(pkg), "--system", "You translate.", "--max-new-tokens", "8"]) == 0
    replies = capsys.readouterr().out.splitlines()
    gen = Generator(pkg)
    messages = [{"role": "system", "content": "You translate."},
                {"role": "user", "content": "hello there"}]  # fmt: skip
    first = gen.chat(messages, max_new_tokens=8)
    messages += [{"role": "assistant", "content": first},
                 {"role": "user", "content": "what is two"}]  # fmt: skip
    assert replies == [first, gen.chat(messages, max_new_tokens=8)]


def test_cli_chat_commands_are_not_sent_to_the_model(instruct, monkeypatch, capsys):
    """At a terminal a banner names the model and how to end; /help, /reset, /system TEXT and
    an unknown /command act (or say so) without reaching the model, // sends a leading /, and
    /exit ends the chat (what follows is never read)."""
    import io

    from edgeformer.cli import main

    class Typed(io.StringIO):
        def isatty(self) -> bool:
            return True

    _, _, _, pkg = instruct
    typed = "/help\nhello there\n/reset\n/system Be brief.\nwhat is two\n/bogus\n//slash\n"
    monkeypatch.setattr("sys.stdin", Typed(typed + "/exit\nnever sent\n"))
    assert main(["chat", str(pkg), "--max-new-tokens", "6"]) == 0
    out, err = capsys.readouterr()
    gen = Generator(pkg)
    first = gen.chat([{"role": "user", "content": "hello there"}], max_new_tokens=6)
    second = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "what is two"},
    ]
    reply = gen.chat(second, max_new_tokens=6)
    third = [
        *second,
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "/slash"},
    ]
    assert out.splitlines() == [first, reply, gen.chat(third, max_new_tokens=6)]
    banner = err.splitlines()[0]
    assert str(pkg) in banner and "/exit or Ctrl-D to end" in banner and "/help" in banner, err
    assert "/reset" in err and "/system TEXT" in err  # /help's list
    assert "unknown command '/bogus'" in err and "system message: 'Be brief.'" in err


def test_a_model_without_a_template_says_so(instruct, tmp_path, capsys):
    """A package without a chat template: Generator.chat and `edgeformer chat` say so."""
    from edgeformer.cli import main

    _, _, src, _ = instruct
    plain = tmp_path / "hf"
    shutil.copytree(src, plain)
    (plain / "chat_template.jinja").unlink()
    pkg = export_package(convert_hf(plain, tmp_path / "ckpt"), tmp_path / "pkg", verbose=False)
    with pytest.raises(ChatTemplateError, match="no chat template"):
        Generator(pkg).chat(CONVERSATIONS[0])
    assert main(["chat", str(pkg)]) == 2
    assert "no chat template" in capsys.readouterr().err


def test_export_refuses_a_template_that_does_not_compile(instruct, tmp_path):
    _, _, src, _ = instruct
    bad = tmp_path / "hf"
    shutil.copytree(src, bad)
    (bad / "chat_template.jinja").write_text("{% for %}")
    ckpt = convert_hf(bad, tmp_path / "ckpt")
    with pytest.raises(ValueError, match="tokenizer_config.json.*does not compile"):
        export_package(ckpt, tmp_path / "pkg", verbose=False)
    assert not (tmp_path / "pkg").exists()


def test_prompts_get_the_special_tokens_their_tokenizer_adds(tmp_path):
    """generate()'s text prompts are encoded as transformers encodes them: a Llama-style
    tokenizer's <s> is there (its tokenizer.json's post-processor)."""
    from conftest import tiny_llama

    hf_tok = chat_tokenizer(tmp_path / "hf", None, bos_post_processor=True)
    tiny_llama(tmp_path / "hf", len(hf_tok), bos=hf_tok.bos_token_id, eos=hf_tok.eos_token_id)
    pkg = export_package(convert_hf(tmp_path / "hf", tmp_path / "ckpt"), tmp_path / "pkg",
                         verbose=False)  # fmt: skip
    gen = Generator(pkg)
    text = "hello there two"
    assert gen.prompt_ids(text) == hf_tok(text)["input_ids"]
    assert gen.prompt_ids(text)[0] == hf_tok.bos_token_id


def test_onnxruntime_genai_reads_the_tokenizer_and_the_template(instruct):
    """tokenizer_config.json lets onnxruntime-genai's tokenizer load an LM package and encode a
    converted model's (byte-level) tokenizer as edgeformer does; its chat template renders the
    same prompt. (A trained package's tokenizer, Metaspace BPE, loads too, but genai 0.18
    encodes it wrongly: -1 ids; docs/huggingface.md.)"""
    og = pytest.importorskip("onnxruntime_genai")
    _, _, _, pkg = instruct
    tokenizer = og.Tokenizer(og.Model(str(pkg)))
    text = "hello there two <|im_end|>"
    assert [int(i) for i in tokenizer.encode(text)] == Generator(pkg).model.encode(text)
    messages = CONVERSATIONS[3]
    rendered = tokenizer.apply_chat_template(json.dumps(messages), add_generation_prompt=True)
    assert rendered == Generator(pkg).chat_prompt(messages)
