"""GGUF files in (models/gguf, issue 57): small random models of every decoder family the GGUF
path converts, written as llama.cpp writes them (tests/models/gguf_files.py: gguf-py's writer and
name map, llama.cpp's permutations and offsets, weights in a GGML type), read by transformers' own
GGUF loader as the reference where it reads the file as llama.cpp does (else: the transformers
model holding the file's dequantized values): our checkpoint's logits equal the reference's, the
tokenizer gives transformers' ids, and the `gguf` variant keeps the file's blocks."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
pytest.importorskip("onnxruntime")

from gguf_files import TEMPLATE, byte_level_tokenizer, write_gguf  # noqa: E402

from edgeformer.export import export_package  # noqa: E402
from edgeformer.models.checkpoint import load_checkpoint  # noqa: E402
from edgeformer.models.gguf import FAMILIES, GGUFFile, convert_gguf  # noqa: E402
from edgeformer.runtime.api import Generator  # noqa: E402
from edgeformer.runtime.package import load_package  # noqa: E402

SMALL = dict(vocab_size=280, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             initializer_range=0.05, bos_token_id=0, eos_token_id=0)  # fmt: skip
GPT2_SMALL = dict(vocab_size=280, n_embd=64, n_layer=2, n_head=4, n_positions=1024,
                  initializer_range=0.05, bos_token_id=0, eos_token_id=0)  # fmt: skip
GEMMA = dict(head_dim=256, sliding_window=8)  # transformers' query_pre_attn_scalar: 256


@dataclass
class Case:
    """A GGUF file of `arch` from a random transformers model; reference "gguf": transformers
    reads the file (from_pretrained(gguf_file=...)), "values": the model with the file's values
    (for what transformers' GGUF loader does not read: Phi-3's LongRoPE, Gemma 3's scaling)."""

    arch: str
    cls: str
    config: str
    fields: dict
    qtype: str
    reference: str = "gguf"
    base: dict = field(default_factory=lambda: SMALL)
    name: str = "test-model"


CASES = {
    "llama-q4_0": Case("llama", "LlamaForCausalLM", "LlamaConfig",
                       dict(tie_word_embeddings=True), "Q4_0"),
    "llama-q4_1-untied": Case("llama", "LlamaForCausalLM", "LlamaConfig",
                              dict(tie_word_embeddings=False), "Q4_1"),
    # llama.cpp writes Mistral as `llama` (transformers 5.24 would read a file named "mistral"
    # as Mistral, but asks gguf-py for a `mistral` architecture it does not have)
    "mistral-q8_0": Case("llama", "MistralForCausalLM", "MistralConfig",
                         dict(tie_word_embeddings=False, sliding_window=None), "Q8_0",
                         reference="values", name="Mistral"),
    "qwen2-q8_0": Case("qwen2", "Qwen2ForCausalLM", "Qwen2Config",
                       dict(tie_word_embeddings=True), "Q8_0"),
    # Qwen3 at head_dim 128, its real models' (transformers' GGUF loader does not read key_length)
    "qwen3-q5_0": Case("qwen3", "Qwen3ForCausalLM", "Qwen3Config",
                       dict(head_dim=128, tie_word_embeddings=False), "Q5_0"),
    "phi3-q8_0": Case("phi3", "Phi3ForCausalLM", "Phi3Config",
                      dict(tie_word_embeddings=False, pad_token_id=0), "Q8_0"),
    "phi3-longrope-q4_0": Case(
        "phi3", "Phi3ForCausalLM", "Phi3Config",
        dict(tie_word_embeddings=False, pad_token_id=0, sliding_window=8,
             partial_rotary_factor=0.5, original_max_position_embeddings=16,
             rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                              "long_factor": [1.0, 1.5, 2.0, 3.0],
                              "short_factor": [1.0, 1.1, 1.2, 1.3]}),
        "Q4_0", reference="values"),
    "gemma2-q8_0": Case("gemma2", "Gemma2ForCausalLM", "Gemma2Config", GEMMA, "Q8_0"),
    "gemma3-q4_0": Case("gemma3", "Gemma3ForCausalLM", "Gemma3TextConfig",
                        GEMMA | dict(num_hidden_layers=6), "Q4_0"),
    "gemma3-linear-q8_0": Case(
        "gemma3", "Gemma3ForCausalLM", "Gemma3TextConfig",
        GEMMA | dict(rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
            num_hidden_layers=6),
        "Q8_0", reference="values"),
    # Llama 3.1 / 3.2's rope scaling: llama.cpp keeps it as rope_freqs.weight only
    "llama31-rope-q8_0": Case(
        "llama", "LlamaForCausalLM", "LlamaConfig",
        dict(tie_word_embeddings=True, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
        "Q8_0", reference="values"),
    "qwen2-yarn-q8_0": Case(
        "qwen2", "Qwen2ForCausalLM", "Qwen2Config",
        dict(tie_word_embeddings=True, rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
            "original_max_position_embeddings": 16, "beta_fast": 16.0}),
        "Q8_0", reference="values"),
    "gpt2-q8_0": Case("gpt2", "GPT2LMHeadModel", "GPT2Config", {}, "Q8_0", base=GPT2_SMALL),
}  # fmt: skip
PROMPTS = [list(range(5, 25)), list(range(40, 49))]
TEXTS = ["the quick brown fox", "jumps over the lazy dog!", "  spaced\ttabs\nand lines", "ünï"]


def random_model(case: Case):
    torch.manual_seed(0)
    config = getattr(transformers, case.config)(**(case.base | case.fields))
    hf = getattr(transformers, case.cls)(config).eval()
    with torch.no_grad():
        for n, p in hf.named_parameters():
            if "norm" in n or ".ln_" in n:
                p.add_(torch.randn_like(p) * 0.2)
    return hf


def reference(case: Case, hf, root, path, values):
    if case.reference == "gguf":
        return transformers.AutoModelForCausalLM.from_pretrained(
            str(root), gguf_file=path.name, dtype=torch.float32
        ).eval()
    with torch.no_grad():
        for name, p in hf.state_dict().items():
            if name in values:
                p.copy_(torch.from_numpy(values[name]))
    return hf


@pytest.fixture(scope="module", params=list(CASES))
def family(request, tmp_path_factory):
    """(name, the GGUF file, the reference model, our checkpoint, the package)."""
    case = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    hf = random_model(case)
    specials = ("<|endoftext|>", "<mask>") if case.arch.startswith("gemma") else ("<|endoftext|>",)
    byte_level_tokenizer(root / "tokenizer.json", specials)
    path = root / "model.gguf"
    values = write_gguf(path, case.arch, hf, root / "tokenizer.json", case.qtype, name=case.name)
    ref = reference(case, hf, root, path, values)
    ckpt = convert_gguf(path, root / "checkpoint")
    pkg = export_package(path, root / "package", verbose=False)
    return request.param, path, ref, ckpt, pkg


def test_every_family_is_tested():
    assert {c.arch for c in CASES.values()} == set(FAMILIES)


def test_reference_is_the_expected_class(family):
    name, _, ref, _, _ = family
    assert type(ref).__name__ == CASES[name].cls


def test_logits_equal_the_references(family):
    _, _, ref, ckpt, _ = family
    ours = load_checkpoint(ckpt)[0]
    for p in PROMPTS:
        ids = torch.tensor([p])
        with torch.no_grad():
            want = ref(ids).logits
            got, _ = ours(ids, torch.ones_like(ids))
        assert float((got - want).abs().max()) <= 1e-4 * max(1.0, float(want.abs().max()))


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
    """LongRoPE: prompts already past the original context (the switch from the short to the
    long factors during a generation is the Hugging Face path's, tests/models/test_hf_families;
    the logits test above reads both tables)."""
    _, _, ref, _, pkg = family
    gen = Generator(pkg)
    opts = gen.model.options(max_new_tokens=16)
    original = getattr(ref.config, "original_max_position_embeddings", None)
    longrope = (getattr(ref.config, "rope_parameters", None) or {}).get("rope_type") == "longrope"
    for p in PROMPTS if not longrope else [p for p in PROMPTS if len(p) > original]:
        want = ref.generate(torch.tensor([p]), max_new_tokens=16, do_sample=False,
                            eos_token_id=None, pad_token_id=0)[0, len(p):].tolist()  # fmt: skip
        got = gen.generate_ids([p], opts)[0]
        assert got == want[: len(got)] and (len(got) == 16 or want[len(got)] == 0)


def test_gguf_variant_keeps_the_files_blocks(family):
    name, path, _, _, pkg = family
    qtype = CASES[name].qtype
    entry = load_package(pkg, verify=False).config.variants["gguf"]
    assert f"kept from model.gguf: {qtype}: " in entry.description, entry.description
    exact = qtype in ("Q8_0", "Q4_0", "Q5_0")
    assert (f"{qtype}: " in entry.description and "(exact)" in entry.description) == exact
    assert "re-quantized" not in entry.description, entry.description  # every matrix kept
    assert entry.measured["agreement"] >= 0.9
    fp32 = load_package(pkg, verify=False).config.variants["fp32"].measured["perplexity"]
    assert entry.measured["perplexity"] / fp32 < 1.02


def test_gguf_metadata_is_read_as_llama_cpp_names_it(family):
    name, path, ref, _, _ = family
    f = GGUFFile(path)
    assert f.metadata("general.architecture") == CASES[name].arch
    assert len(f.metadata("tokenizer.ggml.tokens")) == ref.config.vocab_size
