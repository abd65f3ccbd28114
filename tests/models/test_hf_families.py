"""Every decoder-only family the converter takes, against transformers (issue 47).

For each family a small random-weight model of its transformers class is built (offline, no
download), saved with save_pretrained, converted and exported (fp32, int8, int4), and shown to
match transformers: logits of a left-padded batch within 1e-4 (prompts longer than the sliding
window where there is one), the package's greedy ids equal to `generate()`'s for 32 new tokens
over several prompts and batch sizes, the quantized variants close to fp32. The configs turn on
what each family adds (q/k/v biases, q/k norm, windows, soft-capping, partial and scaled rotary,
sandwich norms) at sizes where it changes the numbers.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from conftest import byte_level_tokenizer  # noqa: E402

from edgeformer.core.decoding import GenerationOptions  # noqa: E402
from edgeformer.export import export_package  # noqa: E402
from edgeformer.export.verify import compare  # noqa: E402
from edgeformer.models.checkpoint import load_checkpoint  # noqa: E402
from edgeformer.models.hf import LOADERS, convert_hf, hf_model_config  # noqa: E402
from edgeformer.runtime.api import Generator  # noqa: E402
from edgeformer.runtime.commands import package_info  # noqa: E402
from edgeformer.runtime.package import load_package  # noqa: E402

VOCAB = 300
SMALL = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    initializer_range=0.05,
)  # fmt: skip
WINDOW = 5  # shorter than every prompt below
LONGROPE = {
    "rope_type": "longrope",
    "short_factor": [1.0, 1.5, 2.0, 3.0],
    "long_factor": [2.0, 3.0, 5.0, 9.0],
}
# name -> (transformers class, its config class, config fields beyond SMALL)
FAMILIES = {
    # Llama 3.2: llama3 rope scaling, several EOS ids, tied head
    "llama3": ("LlamaForCausalLM", "LlamaConfig", dict(
        rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
                         "rope_theta": 500000.0},
        bos_token_id=1, eos_token_id=[2, 3], tie_word_embeddings=True)),
    # SmolLM2-135M's layout: 9 heads of 8 dims (padded to 8: none), 3 KV heads, tied
    "smollm2": ("LlamaForCausalLM", "LlamaConfig", dict(
        hidden_size=72, num_attention_heads=9, num_key_value_heads=3, bos_token_id=1,
        eos_token_id=2, tie_word_embeddings=True)),
    "mistral": ("MistralForCausalLM", "MistralConfig", dict(sliding_window=WINDOW)),
    "mistral-full": ("MistralForCausalLM", "MistralConfig", dict(sliding_window=None)),
    # Qwen2.5: q/k/v biases; sliding window from layer max_window_layers on
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", dict(
        use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1, bos_token_id=1,
        eos_token_id=2, tie_word_embeddings=True)),
    # Qwen3: q/k norm, head_dim 32 with 4 heads over hidden 64
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", dict(
        head_dim=32, bos_token_id=1, eos_token_id=2)),
    # Phi-3 / Phi-4-mini: fused weights, partial rotary, LongRoPE crossing its original
    # context (16) during generation, a window
    "phi3": ("Phi3ForCausalLM", "Phi3Config", dict(
        original_max_position_embeddings=16, partial_rotary_factor=0.5, rope_scaling=LONGROPE,
        sliding_window=7, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        tie_word_embeddings=True)),
    "gemma": ("GemmaForCausalLM", "GemmaConfig", dict(head_dim=16)),
    # Gemma 2: soft caps small enough to bend the logits, its own attention scale
    "gemma2": ("Gemma2ForCausalLM", "Gemma2Config", dict(
        head_dim=16, sliding_window=WINDOW, attn_logit_softcapping=2.0,
        final_logit_softcapping=3.0, query_pre_attn_scalar=24)),
    # Gemma 3 text: q/k norm, a rotary base for the sliding layers, linear scaling elsewhere
    "gemma3": ("Gemma3ForCausalLM", "Gemma3TextConfig", dict(
        head_dim=16, num_hidden_layers=3, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                            "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})),
}  # fmt: skip
PROMPTS = [list(range(5, 25)), list(range(40, 49)), list(range(70, 84))]  # 20, 9, 14 tokens
NEW = 32


def perturb_norms(model) -> None:
    """Random norm weights: transformers starts them at 1 (Gemma: at 0 of its 1 + w)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)


def build_hf(name: str, folder):
    cls_name, config_name, fields = FAMILIES[name]
    torch.manual_seed(0)
    config = getattr(transformers, config_name)(**(SMALL | fields))
    hf = getattr(transformers, cls_name)(config).eval()
    perturb_norms(hf)
    hf.save_pretrained(folder)
    byte_level_tokenizer(folder / "tokenizer.json")
    return hf


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    """(name, HF model, HF folder, checkpoint, package with fp32, int8 and int4)."""
    root = tmp_path_factory.mktemp(request.param)
    hf = build_hf(request.param, root / "hf")
    ckpt = convert_hf(root / "hf", root / "checkpoint")
    pkg = export_package(ckpt, root / "package", variants=("int8", "int4"), verbose=False)
    return request.param, hf, root / "hf", ckpt, pkg


def left_padded(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    T = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (T - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (T - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def test_every_family_has_a_loader():
    names = {FAMILIES[f][0] for f in FAMILIES}
    assert names <= set(LOADERS)


def test_logits_equal_transformers(family):
    """A left-padded batch of prompts longer than any window: every real position within
    1e-4 of transformers' logits."""
    _, hf, _, ckpt, _ = family
    ours = load_checkpoint(ckpt)[0]
    ids, mask = left_padded(PROMPTS, 0)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        got, _ = ours(ids, mask)
    assert (ref - got).abs()[mask.bool()].max() <= 1e-4


def test_package_matches_pytorch_and_quantized_variants_load(family):
    """fp32 graphs against the converted checkpoint step by step, over the windows (export's
    own check, longer); int8 / int4 load and run, and export measured their agreement with
    PyTorch's greedy choices (these random-weight models' logits are nearly flat: a bound on
    agreement, not on BLEU or perplexity, which need a trained model)."""
    _, _, _, ckpt, pkg = family
    model = load_checkpoint(ckpt)[0]
    package = load_package(pkg)
    assert max(compare(model, package, "fp32", batch=3, length=12, steps=10)) <= 1e-4
    measured = {v: e.measured for v, e in package.config.variants.items()}
    assert measured["int8"]["agreement"] >= 0.9 and measured["int8"]["max_logit_diff"] < 0.1
    assert measured["int4"]["agreement"] >= 0.4 and measured["int4"]["max_logit_diff"] < 1.0
    gen = Generator(pkg, "int4", threads=1)
    out = gen.generate_ids(PROMPTS, GenerationOptions(max_new_tokens=4), banned=())
    assert len(out) == 3 and all(0 <= t < VOCAB for row in out for t in row)


def generate_hf(hf, prompts: list[list[int]], eos: list[int]) -> list[list[int]]:
    ids, mask = left_padded(prompts, eos[0])
    with torch.no_grad():
        out = hf.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False,
            num_beams=1, pad_token_id=eos[0], eos_token_id=eos,
        )  # fmt: skip
    want = []
    for row in out[:, ids.shape[1] :].tolist():
        end = next((i for i, t in enumerate(row) if t in eos), len(row))
        want.append(row[:end])
    return want


@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_equals_generate(family, batch):
    """32 new tokens, greedy, batches of 1-3 prompts of different lengths: the package's ids
    are generate()'s (every EOS id ends a row, as in transformers)."""
    _, hf, _, _, pkg = family
    eos = hf.generation_config.eos_token_id
    eos = eos if isinstance(eos, list) else [eos]
    gen = Generator(pkg, threads=1)
    opts = GenerationOptions(max_new_tokens=NEW)
    for start in range(0, len(PROMPTS), batch):
        prompts = PROMPTS[start : start + batch]
        assert gen.generate_ids(prompts, opts, banned=()) == generate_hf(hf, prompts, eos)


def test_speculative_greedy_equals_plain(family):
    """Speculative decoding (issue 59): prompt lookup and a draft package (the int4 variant
    drafting for fp32: close, not equal, so drafts are kept and rejected) give the plain greedy
    ids of a batch, every draft verified in one call of the fp32 decoder."""
    _, _, _, _, pkg = family
    prompts = [PROMPTS[0] + PROMPTS[0][:12], PROMPTS[1]]  # a prompt that repeats: lookups
    opts = GenerationOptions(max_new_tokens=NEW)
    gen = Generator(pkg, threads=1)
    plain = gen.generate_ids(prompts, opts, banned=())
    lookup = gen.generate_ids(prompts, GenerationOptions(max_new_tokens=NEW, prompt_lookup=4),
                              banned=())  # fmt: skip
    drafted = Generator(pkg, threads=1, draft=Generator(pkg, variant="int4", threads=1))
    assert lookup == plain
    assert drafted.generate_ids(prompts, opts, banned=()) == plain
    for stats in (gen.speculation_stats, drafted.speculation_stats):
        assert stats.verifications > 0 and stats.accepted > 0
        assert stats.tokens == sum(len(p) for p in plain) + sum(len(p) < NEW for p in plain)


def test_config_names_the_family(family):
    """The checkpoint and the package name the source architecture; the fields the family
    adds are set."""
    name, hf, src, ckpt, pkg = family
    arch, cfg = hf_model_config(src)
    assert arch == FAMILIES[name][0] and load_checkpoint(ckpt)[0].cfg == cfg
    config = json.loads((pkg / "config.json").read_text())
    assert config["source"] == {"format": "huggingface", "architecture": arch}
    assert f"source       huggingface {arch}" in package_info(str(pkg))  # edgeformer info
    added = {
        "qwen2": lambda: (
            cfg.qkv_bias and cfg.layer_types == ["full_attention", "sliding_attention"]
        ),
        "qwen3": lambda: cfg.qk_norm and cfg.head_dim == 32 and cfg.d_model == 64,
        "phi3": lambda: cfg.rotary_dims == 8 and cfg.rope_scaling["rope_type"] == "longrope",
        "gemma2": lambda: cfg.sandwich_norm and (cfg.attn_softcap, cfg.logit_softcap) == (2, 3),
        "gemma3": lambda: cfg.qk_norm and (cfg.local_rope_theta, cfg.rope_theta) == (1e4, 1e6),
        "llama3": lambda: cfg.rope_scaling["rope_type"] == "llama3",
        "mistral": lambda: cfg.attention_window == WINDOW and cfg.layer_types is None,
    }
    assert added.get(name, lambda: True)()
    assert np.isfinite(load_package(pkg).config.model.rope_theta)


def test_onnxruntime_genai_runs_the_package(family):
    """onnxruntime-genai loads the package folder unchanged (genai_config.json) and its greedy
    ids are transformers' (batch 1: genai left-pads batches, which the graphs' right-padded
    cache does not follow)."""
    og = pytest.importorskip("onnxruntime_genai")
    _, hf, _, _, pkg = family
    eos = hf.generation_config.eos_token_id
    eos = eos if isinstance(eos, list) else [eos]
    model = og.Model(str(pkg))
    for prompt in PROMPTS[:2]:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + NEW, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(np.array([prompt], dtype=np.int32))
        while not gen.is_done():
            gen.generate_next_token()
        got = [int(i) for i in gen.get_sequence(0)][len(prompt) :]
        got = got[: next((i for i, t in enumerate(got) if t in eos), len(got))]
        assert got == generate_hf(hf, [prompt], eos)[0]


# ---------------------------------------------------------------- config defaults, refusals

# each architecture's model_type (a loader of several, T5 and mT5, lists them in the same order)
MODEL_TYPES = {
    arch: loader.model_types[i if len(loader.model_types) == len(loader.architectures) else 0]
    for loader in LOADERS.values()
    for i, arch in enumerate(loader.architectures)
}
CONFIG_CLASSES = {
    "GPT2LMHeadModel": "GPT2Config", "LlamaForCausalLM": "LlamaConfig",
    "MistralForCausalLM": "MistralConfig", "Qwen2ForCausalLM": "Qwen2Config",
    "Qwen3ForCausalLM": "Qwen3Config", "Phi3ForCausalLM": "Phi3Config",
    "GemmaForCausalLM": "GemmaConfig", "Gemma2ForCausalLM": "Gemma2Config",
    "Gemma3ForCausalLM": "Gemma3TextConfig", "MarianMTModel": "MarianConfig",
    "BartForConditionalGeneration": "BartConfig", "MBartForConditionalGeneration": "MBartConfig",
    "M2M100ForConditionalGeneration": "M2M100Config", "T5ForConditionalGeneration": "T5Config",
    "MT5ForConditionalGeneration": "MT5Config",
}  # fmt: skip


def write_config(folder, config: dict):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("arch", sorted(LOADERS))
def test_missing_keys_take_the_transformers_class_defaults(arch, tmp_path):
    """A config.json that names only its architecture (as older transformers wrote keys at
    their defaults: not at all) maps as transformers reads it: the same ModelConfig as the
    config transformers saves after filling in its class's defaults."""
    config_class = getattr(transformers, CONFIG_CLASSES[arch])
    bare = {"architectures": [arch], "model_type": MODEL_TYPES[arch]}
    if config_class().eos_token_id is None:  # Qwen's classes have none: a model always does
        bare["eos_token_id"] = 2
    reduced = write_config(tmp_path / "reduced", bare)
    full = config_class.from_pretrained(reduced).to_dict() | {"architectures": [arch]}
    assert hf_model_config(reduced)[1] == hf_model_config(write_config(tmp_path / "full", full))[1]


def family_config(tmp_path, name: str, **changes):
    cls_name, config_name, fields = FAMILIES[name]
    config = getattr(transformers, config_name)(**(SMALL | fields)).to_dict()
    return write_config(tmp_path / "hf", config | {"architectures": [cls_name], **changes})


@pytest.mark.parametrize(
    "name, changes, match",
    [
        ("qwen3", dict(attention_bias=True), "attention_bias=True"),
        ("mistral", dict(layer_types=["full_attention"] * 2), "layer_types="),
        ("gemma", dict(use_bidirectional_attention=True), "use_bidirectional_attention=True"),
        ("gemma2", dict(hidden_activation="relu"), "hidden_activation='relu'"),
        ("gemma2", dict(layer_types=["sliding_attention"]), "layer_types="),
        (
            "gemma3",
            dict(
                rope_parameters={
                    "sliding_attention": {"rope_type": "linear", "factor": 2.0},
                    "full_attention": {"rope_type": "default"},
                }
            ),
            "rope_parameters.sliding_attention",
        ),  # fmt: skip
        (
            "phi3",
            dict(rope_parameters=LONGROPE | {"partial_rotary_factor": 0.1}),
            "partial_rotary_factor=0.1",
        ),
        ("phi3", dict(rope_scaling=LONGROPE | {"long_factor": [1.0]}), "long_factor="),
        ("qwen2", dict(max_window_layers=-1, layer_types=None), "max_window_layers=-1"),
        ("llama3", dict(rope_parameters={"rope_type": "llama3", "factor": 8.0}), "factor"),
        ("llama3", dict(head_dim=0), "head_dim=0"),
    ],
)
def test_unsupported_fields_are_named(name, changes, match, tmp_path):
    """Whatever a family's config asks for that edgeformer does not model is refused with
    the field's name and value, before any weight is read."""
    src = family_config(tmp_path, name, **changes)
    with pytest.raises(ValueError, match=match.replace("[", r"\[")):
        convert_hf(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()
