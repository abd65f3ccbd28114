"""GGUF files in (models/gguf, issue 57): small random models of each decoder family the GGUF
path converts, written as llama.cpp writes them (gguf-py's GGUFWriter; Llama's Q/K rows permuted
as convert_hf_to_gguf permutes them; weights in a GGML quantized type), read by transformers'
own GGUF loader as the reference: our checkpoint's logits equal transformers' on the same file,
the tokenizer gives transformers' ids, and the `gguf` variant keeps the file's blocks."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
pytest.importorskip("onnxruntime")

from conftest import byte_level_tokenizer  # noqa: E402

from edgeformer.export import export_package  # noqa: E402
from edgeformer.models.checkpoint import load_checkpoint  # noqa: E402
from edgeformer.models.gguf import GGUFFile, convert_gguf  # noqa: E402
from edgeformer.models.gguf.families import GLOBAL_TENSORS, LAYER_TENSORS  # noqa: E402
from edgeformer.runtime.api import Generator  # noqa: E402
from edgeformer.runtime.package import load_package  # noqa: E402

SMALL = dict(vocab_size=280, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             initializer_range=0.05, bos_token_id=0, eos_token_id=0)  # fmt: skip
# name -> (GGUF architecture, transformers class, config class, fields, GGML type of matrices);
# Qwen3 at head_dim 128, its real models' (transformers' GGUF loader does not read key_length)
FAMILIES = {
    "llama-q4_0": ("llama", "LlamaForCausalLM", "LlamaConfig",
                   dict(tie_word_embeddings=True), "Q4_0"),
    "llama-q4_1-untied": ("llama", "LlamaForCausalLM", "LlamaConfig",
                          dict(tie_word_embeddings=False), "Q4_1"),
    "qwen2-q8_0": ("qwen2", "Qwen2ForCausalLM", "Qwen2Config",
                   dict(tie_word_embeddings=True), "Q8_0"),
    "qwen3-q5_0": ("qwen3", "Qwen3ForCausalLM", "Qwen3Config",
                   dict(head_dim=128, tie_word_embeddings=False), "Q5_0"),
}  # fmt: skip
PROMPTS = [list(range(5, 25)), list(range(40, 49))]
TEXTS = ["the quick brown fox", "jumps over the lazy dog!", "  spaced\ttabs\nand lines", "ünï"]
TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"


def llama_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute: each head's rotate-half rows interleaved."""
    return (
        w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def write_gguf(path, arch: str, hf, tokenizer_json, qtype: str) -> None:
    """The model as a GGUF file: metadata as llama.cpp names it, matrices in `qtype`."""
    cfg = hf.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    tok = json.loads(tokenizer_json.read_text())
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([3 if t == "<|endoftext|>" else 1 for t, _ in vocab])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]])
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_chat_template(TEMPLATE)
    names = {v: k for k, v in LAYER_TENSORS.items()}
    kind = gguf.GGMLQuantizationType[qtype]
    for name, p in hf.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        t = p.detach().float().numpy()
        stem, _, suffix = name.rpartition(".")
        rest = ""
        if stem.startswith("model.layers."):
            i, rest = stem.removeprefix("model.layers.").split(".", 1)
            gname = f"blk.{i}.{names[rest]}.{suffix}"
        else:
            gname = f"{next(k for k, v in GLOBAL_TENSORS.items() if v == stem)}.{suffix}"
        if arch == "llama" and rest in ("self_attn.q_proj", "self_attn.k_proj") and \
                stem.startswith("model.layers."):  # fmt: skip
            heads = cfg.num_attention_heads if "q_proj" in rest else cfg.num_key_value_heads
            t = llama_permute(t, heads)
        if t.ndim == 2:
            w.add_tensor(gname, gguf.quants.quantize(t, kind), raw_dtype=kind)
        else:
            w.add_tensor(gname, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    """(name, the GGUF file, transformers' reading of it, our checkpoint, the package)."""
    arch, cls_name, config_name, fields, qtype = FAMILIES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    config = getattr(transformers, config_name)(**(SMALL | fields))
    hf = getattr(transformers, cls_name)(config).eval()
    with torch.no_grad():
        for n, p in hf.named_parameters():
            if "norm" in n:
                p.add_(torch.randn_like(p) * 0.2)
    byte_level_tokenizer(root / "tokenizer.json")
    path = root / "model.gguf"
    write_gguf(path, arch, hf, root / "tokenizer.json", qtype)
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(root), gguf_file=path.name, dtype=torch.float32
    ).eval()
    ckpt = convert_gguf(path, root / "checkpoint")
    pkg = export_package(path, root / "package", verbose=False)
    return request.param, path, ref, ckpt, pkg


def test_logits_equal_transformers_reading_of_the_file(family):
    _, _, ref, ckpt, _ = family
    ours = load_checkpoint(ckpt)[0]
    for p in PROMPTS:
        ids = torch.tensor([p])
        with torch.no_grad():
            want = ref(ids).logits
            got, _ = ours(ids, torch.ones_like(ids))
        assert float((got - want).abs().max()) <= 1e-4


def test_tokenizer_and_chat_template_as_transformers(family):
    _, path, _, _, pkg = family
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    gen = Generator(pkg)
    for text in TEXTS:
        assert gen.model.encode(text) == tok(text, add_special_tokens=False)["input_ids"]
    messages = [{"role": "user", "content": "hi there"}]
    assert gen.chat_prompt(messages, True) == tok.apply_chat_template(
        messages, chat_template=TEMPLATE, tokenize=False, add_generation_prompt=True
    )


def test_greedy_ids_equal_generate(family):
    _, _, ref, _, pkg = family
    gen = Generator(pkg)
    opts = gen.model.options(max_new_tokens=16)
    for p in PROMPTS:
        want = ref.generate(torch.tensor([p]), max_new_tokens=16, do_sample=False,
                            eos_token_id=None, pad_token_id=0)[0, len(p):].tolist()  # fmt: skip
        got = gen.generate_ids([p], opts)[0]
        assert got == want[: len(got)] and (len(got) == 16 or want[len(got)] == 0)


def test_gguf_variant_keeps_the_files_blocks(family):
    name, path, _, _, pkg = family
    qtype = FAMILIES[name][4]
    entry = load_package(pkg, verify=False).config.variants["gguf"]
    assert f"kept from model.gguf: {qtype}: " in entry.description, entry.description
    exact = qtype in ("Q8_0", "Q4_0", "Q5_0")
    assert ("(exact)" in entry.description) == exact
    assert entry.measured["agreement"] >= 0.9
    fp32 = load_package(pkg, verify=False).config.variants["fp32"].measured["perplexity"]
    assert entry.measured["perplexity"] / fp32 < 1.02


def test_gguf_metadata_is_read_as_llama_cpp_names_it(family):
    _, path, ref, _, _ = family
    f = GGUFFile(path)
    assert f.metadata("general.architecture") == FAMILIES[family[0]][0]
    assert len(f.metadata("tokenizer.ggml.tokens")) == ref.config.vocab_size
