"""Hugging Face GPT-2, Llama and Marian checkpoints -> edgeformer checkpoints, packages (issue 12).

Each architecture is built with random weights by `transformers` (nothing is downloaded), saved
with save_pretrained, converted, exported (fp32 and int4) and compared with Hugging Face: logits
of a padded batch, and greedy / beam-4 continuations of `model.generate`, token for token.
Marian (skipped without `sentencepiece`) also gets SentencePiece models trained here on Multi30k,
and its converted tokenizers are checked against sentencepiece and MarianTokenizer.
"""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

from conftest import byte_level_tokenizer  # noqa: E402

from edgeformer.core.decoding import GenerationOptions  # noqa: E402
from edgeformer.export import export_package  # noqa: E402
from edgeformer.export.verify import compare  # noqa: E402
from edgeformer.models import ModelConfig  # noqa: E402
from edgeformer.models.checkpoint import load_checkpoint  # noqa: E402
from edgeformer.models.hf import convert_hf, hf_model_config, is_hf_model_dir  # noqa: E402
from edgeformer.runtime.api import Generator  # noqa: E402
from edgeformer.runtime.package import load_package  # noqa: E402

VOCAB = 300
GPT2_EOS = VOCAB - 1  # GPT-2's <|endoftext|> is its last id, and its BOS and EOS at once
CONFIGS = {
    # GPT-2: learned positions, LayerNorm + biases, gelu_new, Conv1D, tied head
    "gpt2": lambda: transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=64,
        n_embd=64,
        n_layer=2,
        n_head=4,
        bos_token_id=GPT2_EOS,
        eos_token_id=GPT2_EOS,
    ),  # fmt: skip
    # Llama: GQA (4 query heads, 2 KV heads, head dim 16: GQA's fused rotary), untied head
    "llama": lambda: transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rope_theta=5000.0,
        bos_token_id=1,
        eos_token_id=2,
    ),  # fmt: skip
    # Llama: multi-query (8 heads, 1 KV head, head dim 8: separate RotaryEmbedding), tied head
    "llama-mqa-tied": lambda: transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=1,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    ),  # fmt: skip
}
VARIANTS = ("fp32", "int8", "int4")
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [20, 21, 22, 23, 24]]  # padded in a batch


def save_hf(name: str, folder):
    """A random-weight Hugging Face model of one architecture, saved with its tokenizer."""
    torch.manual_seed(0)
    config = CONFIGS[name]()
    cls = transformers.GPT2LMHeadModel if name == "gpt2" else transformers.LlamaForCausalLM
    hf = cls(config).eval()
    hf.save_pretrained(folder, safe_serialization=True)
    byte_level_tokenizer(folder / "tokenizer.json")
    return hf


@pytest.fixture(scope="module", params=list(CONFIGS))
def arch(request, tmp_path_factory):
    """(name, HF model, HF folder, checkpoint, package with every variant)."""
    root = tmp_path_factory.mktemp(request.param)
    hf = save_hf(request.param, root / "hf")
    ckpt = convert_hf(root / "hf", root / "checkpoint")
    pkg = export_package(ckpt, root / "package", variants=VARIANTS, verbose=False)
    return request.param, hf, root / "hf", ckpt, pkg


def left_padded(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    T = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (T - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (T - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def test_config_maps_exactly(arch):
    name, hf, src, ckpt, _ = arch
    _, cfg = hf_model_config(src)
    assert is_hf_model_dir(src) and not is_hf_model_dir(ckpt)
    c = hf.config
    assert (cfg.vocab_size, cfg.d_model, cfg.n_decoder_layers) == (VOCAB, 64, 2)
    assert cfg.family == "decoder-only" and cfg.dropout == 0.0 and not cfg.scale_embeddings
    if name == "gpt2":
        assert (cfg.norm_type, cfg.positional, cfg.activation, cfg.bias) == (
            "layernorm", "learned", "gelu_tanh", True)  # fmt: skip
        assert cfg.pad_id == cfg.bos_id == cfg.eos_id == GPT2_EOS and cfg.tie_embeddings
    else:
        assert (cfg.norm_type, cfg.positional, cfg.activation, cfg.bias) == (
            "rmsnorm", "rotary", "swiglu", False)  # fmt: skip
        assert cfg.n_kv_heads == c.num_key_value_heads and cfg.d_ff == c.intermediate_size
        assert cfg.tie_embeddings == c.tie_word_embeddings and cfg.layer_norm_eps == c.rms_norm_eps
        assert (cfg.bos_id, cfg.eos_id, cfg.pad_id) == (1, 2, 2)  # no pad token: EOS pads
    assert load_checkpoint(ckpt)[0].cfg == cfg


def test_logits_equal_hugging_face(arch):
    """A left-padded batch through both PyTorch models: every real position within 1e-4."""
    _, hf, _, ckpt, _ = arch
    ours = load_checkpoint(ckpt)[0]
    ids, mask = left_padded([[t + 30 for t in p] for p in PROMPTS], 0)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # as generate computes them for HF
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        got, cache = ours(ids, mask)
    assert (ref - got).abs()[mask.bool()].max() <= 1e-4
    kv_heads = getattr(hf.config, "num_key_value_heads", None) or hf.config.num_attention_heads
    assert cache[0][0].shape[1] == kv_heads  # the cache holds the key/value heads only


def test_package_parity(arch):
    """The package against the converted checkpoint, step by step (export's own check)."""
    _, _, _, ckpt, pkg = arch
    model = load_checkpoint(ckpt)[0]
    package = load_package(pkg)
    assert max(compare(model, package, "fp32", batch=3, length=7, steps=6)) <= 1e-4
    assert max(compare(model, package, "int8", batch=2, length=5, steps=2)) < 0.1  # int4: below


def test_package_config_speaks_hugging_face(arch):
    """config.json's model section uses HF's field names with HF's values; the model's own
    generation_config.json travels into the package (its decoding defaults)."""
    _, hf, folder, _, pkg = arch
    model = json.loads((pkg / "config.json").read_text())["model"]
    for key in ("vocab_size", "hidden_size", "num_attention_heads", "max_position_embeddings"):
        assert model[key] == getattr(hf.config, key), key
    own = folder / "generation_config.json"
    assert own.is_file()  # save_pretrained writes one
    assert (pkg / "generation_config.json").read_bytes() == own.read_bytes()
    assert load_package(pkg).generation_settings()[1] == []  # every field it sets is applied


def test_decoder_graph_uses_the_fused_ops(arch):
    """RMSNorm -> SimplifiedLayerNormalization after the residual Add (not the fused Skip* ops:
    builder.skip_norm), SwiGLU -> packed gate/up MatMul + Split, gelu_new -> FastGelu; GQA
    with kv_num_heads; no Softmax, no cache Concat."""
    import collections

    import onnx

    name, hf, _, _, pkg = arch
    g = onnx.load(str(pkg / "decoder.onnx"), load_external_data=False).graph
    count = collections.Counter(n.op_type for n in g.node)
    assert count["GroupQueryAttention"] == 2 and count["Softmax"] == count["Concat"] == 0
    gqa = next(n for n in g.node if n.op_type == "GroupQueryAttention")
    attrs = {a.name: a.i for a in gqa.attribute}
    G = getattr(hf.config, "num_key_value_heads", None) or hf.config.num_attention_heads
    assert attrs["kv_num_heads"] == G and attrs["num_heads"] == hf.config.num_attention_heads
    if name == "gpt2":
        assert count["FastGelu"] == 2 and count["LayerNormalization"] == 5, count
    else:
        assert count["SimplifiedLayerNormalization"] == 5 and count["Sigmoid"] == 2, count
        assert count["LayerNormalization"] == 0, count
    assert count["SkipLayerNormalization"] == count["SkipSimplifiedLayerNormalization"] == 0


def test_package_cache_shapes_use_the_kv_heads(arch, tmp_path):
    from edgeformer.core.schema import PackageError

    _, hf, _, _, pkg = arch
    config = json.loads((pkg / "config.json").read_text())
    G = getattr(hf.config, "num_key_value_heads", None) or hf.config.num_attention_heads
    assert load_package(pkg).config.model.kv_heads == G
    copy = tmp_path / "pkg"
    shutil.copytree(pkg, copy)
    config["model"]["num_key_value_heads"] = 3
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(PackageError, match="num_key_value_heads"):
        load_package(copy)


@pytest.mark.parametrize("beams", [1, 4])
def test_generation_equals_hugging_face(arch, beams):
    """Greedy and beam-4 continuations of a padded batch: the package (onnxruntime) and
    `model.generate` agree token for token (HF bans nothing: banned=() on our side)."""
    _, hf, _, _, pkg = arch
    eos = hf.config.eos_token_id
    ids, mask = left_padded(PROMPTS, eos)
    with torch.no_grad():
        out = hf.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
            num_beams=beams, early_stopping=True, length_penalty=1.0, pad_token_id=eos,
            eos_token_id=eos,
        )  # fmt: skip
    want = []
    for row in out[:, ids.shape[1] :].tolist():
        want.append(row[: row.index(eos)] if eos in row else row)
    opts = GenerationOptions(max_new_tokens=8, num_beams=beams, early_stopping=True)
    got = Generator(pkg, threads=1).generate_ids(PROMPTS, opts, banned=())
    assert got == want
    if beams == 1:  # the int4 variant runs (4-bit weights change the choices: no equality)
        int4 = Generator(pkg, "int4", threads=1).generate_ids(PROMPTS, opts, banned=())
        assert len(int4) == 3 and all(0 <= t < VOCAB for row in int4 for t in row)


# ---------------------------------------------------------------- refusals


def hf_folder(tmp_path, name: str, **changes):
    """A folder with one architecture's config.json, some fields changed (no weights: the
    config is checked first)."""
    dst = tmp_path / "hf"
    CONFIGS[name]().save_pretrained(dst)
    arch = "GPT2LMHeadModel" if name == "gpt2" else "LlamaForCausalLM"
    config = {**json.loads((dst / "config.json").read_text()), "architectures": [arch], **changes}
    (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.mark.parametrize(
    "name, changes, match",
    [
        ("gpt2", dict(activation_function="swish"), "activation_function='swish'"),
        ("gpt2", dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
        ("gpt2", dict(add_cross_attention=True), "add_cross_attention=True"),
        ("gpt2", dict(architectures=["GPT2ForSequenceClassification"]), "architectures="),
        ("llama", dict(hidden_act="gelu"), "hidden_act='gelu'"),
        ("llama", dict(attention_bias=True), "attention_bias=True"),
        ("llama", dict(mlp_bias=True), "mlp_bias=True"),
        ("llama", dict(sliding_window=128), "sliding_window=128"),
        ("llama", dict(num_key_value_heads=3), "num_key_value_heads=3"),
        (
            "llama",
            dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0}),
            "rope_type='dynamic'",
        ),
        ("llama", dict(rope_parameters=None, rope_scaling={"type": "dynamic"}), "rope_type="),
        (
            "llama",
            dict(
                rope_parameters={
                    "rope_type": "longrope",
                    "short_factor": [1.0],
                    "long_factor": [1.0] * 8,
                }
            ),
            "short_factor=",
        ),  # fmt: skip
        ("llama", dict(partial_rotary_factor=0.1), "partial_rotary_factor=0.1"),
        ("llama", dict(pretraining_tp=2), "pretraining_tp=2"),
        ("llama", dict(eos_token_id=[2, 300]), "eos_token_id=[2, 300]"),
        ("llama", dict(model_type="mistral"), "model_type='mistral'"),
    ],
)
def test_unsupported_config_names_the_field(name, changes, match, tmp_path):
    src = hf_folder(tmp_path, name, **changes)
    with pytest.raises(ValueError, match=match.replace("[", r"\[")):
        convert_hf(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_pickles_missing_files_and_targets_are_refused(tmp_path):
    src = tmp_path / "src"
    save_hf("gpt2", src)
    bad = hf_folder(tmp_path, "gpt2")
    (bad / "pytorch_model.bin").write_bytes(b"not unpickled")
    shutil.copy(src / "tokenizer.json", bad / "tokenizer.json")
    with pytest.raises(ValueError, match="never unpickles.*safetensors"):
        convert_hf(bad, tmp_path / "out")
    (src / "tokenizer.json").rename(tmp_path / "tokenizer.json")
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        convert_hf(src, tmp_path / "out")
    (tmp_path / "tokenizer.json").rename(src / "tokenizer.json")
    with pytest.raises(ValueError, match="is or contains"):
        convert_hf(src, src)
    ckpt = convert_hf(src, tmp_path / "ckpt")
    with pytest.raises(FileExistsError, match="already exists"):
        convert_hf(src, ckpt)
    assert convert_hf(src, ckpt, force=True) == ckpt
    with pytest.raises(FileExistsError, match="not an edgeformer checkpoint"):
        convert_hf(src, bad, force=True)
    assert (bad / "config.json").is_file()  # untouched


def test_a_tokenizer_of_another_model_is_refused_naming_both_sizes(tmp_path):
    """docs/huggingface.md's GPT-2 once had vocab 50,257 and a 272-token tokenizer: generate
    printed the prompt only (ids the tokenizer decodes to ''). Convert refuses it; a table
    padded past the tokenizer (VOCAB 300 for its 272 tokens, as Qwen2.5 pads) converts."""
    src = tmp_path / "hf"  # a whole folder: config.json and the tensors agree, the tokenizer not
    config = CONFIGS["gpt2"]()
    config.vocab_size = 50257
    transformers.GPT2LMHeadModel(config).save_pretrained(src, safe_serialization=True)
    byte_level_tokenizer(src / "tokenizer.json")
    with pytest.raises(
        ValueError, match=r"tokenizer has 2\d\d tokens and the model's vocab_size is 50257"
    ):
        convert_hf(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    fits = tmp_path / "fits"
    save_hf("gpt2", fits)
    assert convert_hf(fits, tmp_path / "ckpt").is_dir()


def test_a_missing_folder_an_hf_id_and_a_config_without_architectures(tmp_path, monkeypatch):
    """A missing folder is said missing, a Hugging Face id says it is never downloaded and how
    to fetch it; a config.json without `architectures` is read by its model_type."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="nowhere: no such folder$"):
        convert_hf(tmp_path / "nowhere", tmp_path / "out")
    with pytest.raises(FileNotFoundError, match=r"never downloads.*huggingface-cli download "
                       r"Qwen/Qwen2.5-0.5B-Instruct --local-dir DIR"):  # fmt: skip
        convert_hf("Qwen/Qwen2.5-0.5B-Instruct", tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="checkpoint folder not found.*never downloads"):
        export_package("Qwen/Qwen2.5-0.5B-Instruct", tmp_path / "pkg", verbose=False)
    src = tmp_path / "src"
    save_hf("llama", src)
    config = json.loads((src / "config.json").read_text())
    del config["architectures"]
    (src / "config.json").write_text(json.dumps(config))
    assert hf_model_config(src)[0] == "LlamaForCausalLM"
    assert is_hf_model_dir(src) and convert_hf(src, tmp_path / "ckpt").is_dir()
    config["model_type"] = "bert-generation"
    (src / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="model_type='bert-generation' and no architectures"):
        hf_model_config(src)


def test_sharded_safetensors(tmp_path):
    """model.safetensors.index.json and its shards read as one file."""
    hf = save_hf("llama", tmp_path / "one")
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="60KB")
    shutil.copy(tmp_path / "one" / "tokenizer.json", tmp_path / "sharded")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    one = load_checkpoint(convert_hf(tmp_path / "one", tmp_path / "a"))[0].state_dict()
    sharded = load_checkpoint(convert_hf(tmp_path / "sharded", tmp_path / "b"))[0].state_dict()
    assert all(torch.equal(one[k], sharded[k]) for k in one)


def test_cli_convert_and_export_from_the_hf_folder(tmp_path, capsys):
    from edgeformer.cli import main

    src = tmp_path / "hf"
    save_hf("llama", src)
    assert main(["convert", "hf", str(src), str(tmp_path / "ckpt"), "-q"]) == 0
    assert load_checkpoint(tmp_path / "ckpt")[0].cfg.activation == "swiglu"
    assert main(["export", str(src), str(tmp_path / "pkg"), "-q"]) == 0  # parity check included
    assert load_package(tmp_path / "pkg").config.model.kv_heads == 2
    assert main(["convert", "hf", str(tmp_path / "pkg"), str(tmp_path / "x")]) == 2
    assert "architectures=None" in capsys.readouterr().err


# ---------------------------------------------------------------- ModelConfig


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(n_kv_heads=3), "n_kv_heads=3"),
        (dict(family="encoder-decoder", n_kv_heads=2), "decoder-only"),
        (dict(norm_type="batchnorm"), "norm_type"),
        (dict(activation="swish"), "activation"),  # "silu" is Marian's (ungated)
        (dict(rope_theta=0.0), "rope_theta"),
        (dict(pad_id=1, bos_id=1, eos_id=2), "pad_id and bos_id must differ"),
    ],
)
def test_new_config_fields_are_checked(kw, match):
    base = dict(family="decoder-only", vocab_size=50, d_model=32, n_heads=4)
    with pytest.raises(ValueError, match=match):
        ModelConfig(**{**base, **kw})


def test_gpt2_special_ids_are_allowed():
    cfg = ModelConfig(family="decoder-only", vocab_size=50, pad_id=49, bos_id=49, eos_id=49)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    old = {k: v for k, v in ModelConfig().to_dict().items() if k not in ("n_kv_heads", "bias")}
    assert ModelConfig.from_dict(old) == ModelConfig()  # configs written before issue 12
    assert np.isclose(ModelConfig().rope_theta, 10000.0)


# ---------------------------------------------------------------- MarianMTModel


def marian_vocab(root, lines_en: list[str], lines_de: list[str]) -> dict[str, int]:
    """source.spm and target.spm (Unigram, trained here on Multi30k) and a shared vocab.json
    laid out as OPUS-MT's: </s> 0, <unk> 1, the pieces of both models, <pad> last."""
    spm = pytest.importorskip("sentencepiece")
    vocab = {"</s>": 0, "<unk>": 1}
    for side, lines in (("source", lines_en), ("target", lines_de)):
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_prefix=str(root / side), vocab_size=200,
            model_type="unigram", character_coverage=1.0, minloglevel=2,
        )  # fmt: skip
        (root / f"{side}.model").rename(root / f"{side}.spm")
        sp = spm.SentencePieceProcessor(model_file=str(root / f"{side}.spm"))
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """(HF model, MarianTokenizer, HF folder, checkpoint, package with fp32 and int4)."""
    pytest.importorskip("sentencepiece")
    from edgeformer.core.data import load_multi30k

    root = tmp_path_factory.mktemp("marian")
    en, de = load_multi30k("train", "en", "de", max_sentences=800)
    vocab = marian_vocab(root, en, de)
    (root / "vocab.json").write_text(json.dumps(vocab))
    with warnings.catch_warnings():  # "Recommended: pip install sacremoses" (not used here)
        warnings.simplefilter("ignore")
        tok = transformers.MarianTokenizer(
            str(root / "source.spm"), str(root / "target.spm"), str(root / "vocab.json")
        )
    pad = vocab["<pad>"]
    config = transformers.MarianConfig(
        vocab_size=len(vocab), d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_position_embeddings=64, activation_function="swish",
        scale_embedding=True, pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
        forced_eos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.MarianMTModel(config).eval()
    with torch.no_grad():  # weights large enough for outputs that depend on the source, and
        for name, p in hf.named_parameters():  # embedding rows of one norm (else the tied head
            if p.requires_grad and "layer_norm" not in name:  # picks the longest row always)
                p.normal_(0.0, 0.25)
        rows = hf.model.shared.weight
        rows.copy_(rows / rows.norm(dim=1, keepdim=True) * 2.0)
        # a random logits bias; padding (never emitted) far below the rest: HF bans it after
        # log_softmax, the runtime before, which beam scores would otherwise show
        bias = torch.randn(len(vocab)) * 0.5
        bias[pad] = -30.0
        hf.final_logits_bias.copy_(bias[None])
    hf.save_pretrained(root / "hf", safe_serialization=True)
    tok.save_pretrained(root / "hf")
    ckpt = convert_hf(root / "hf", root / "checkpoint")
    pkg = export_package(ckpt, root / "package", variants=("fp32", "int4"), verbose=False)
    return hf, tok, root / "hf", ckpt, pkg


MARIAN_TEXTS = ["A man rides a bike.", "Two dogs play in the snow near a red house", "Hi!"]


def test_marian_config_maps_exactly(marian):
    hf, _, src, ckpt, pkg = marian
    arch, cfg = hf_model_config(src)
    pad = hf.config.pad_token_id
    assert arch == "MarianMTModel" and load_checkpoint(ckpt)[0].cfg == cfg
    assert (cfg.family, cfg.norm, cfg.positional, cfg.sinusoid_layout) == (
        "encoder-decoder", "post", "sinusoidal", "split")  # fmt: skip
    assert (cfg.activation, cfg.scale_embeddings, cfg.logits_bias, cfg.tie_embeddings) == (
        "silu", True, True, True)  # fmt: skip
    assert (cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.max_len) == (pad, pad, 0, 64)
    assert (ckpt / "source_tokenizer.json").is_file()
    package = load_package(pkg)
    assert "source_tokenizer.json" in package.config.files
    assert package.source_tokenizer == pkg / "source_tokenizer.json"


def test_marian_positions_are_marians(marian):
    hf, _, _, ckpt, _ = marian
    ours = load_checkpoint(ckpt)[0].pos.table
    theirs = hf.model.encoder.embed_positions.weight
    assert torch.allclose(ours, theirs, atol=1e-6)


def test_marian_logits_equal_hugging_face(marian):
    """A right-padded source batch and teacher-forced targets: every logit within 1e-4."""
    hf, tok, _, ckpt, _ = marian
    assert marian_logits_gap(hf, load_checkpoint(ckpt)[0], tok) <= 1e-4


def marian_logits_gap(hf, ours, tok) -> float:
    """The largest difference between Hugging Face's logits and ours on MARIAN_TEXTS (a
    right-padded source batch, teacher-forced targets)."""
    batch = tok(MARIAN_TEXTS, text_target=MARIAN_TEXTS[::-1], padding=True, return_tensors="pt")
    start = torch.full((3, 1), hf.config.decoder_start_token_id)
    tgt_in = torch.cat([start, batch["labels"][:, :-1]], dim=1)
    with torch.no_grad():
        ref = hf(batch["input_ids"], batch["attention_mask"], decoder_input_ids=tgt_in).logits
        got = ours(batch["input_ids"], tgt_in, batch["attention_mask"])
    return float((ref - got).abs().max())


def test_marian_package_parity_and_graph(marian):
    import collections

    import onnx

    _, _, _, ckpt, pkg = marian
    assert max(compare(load_checkpoint(ckpt)[0], load_package(pkg), "fp32", 3, 7, 6)) <= 1e-4
    g = onnx.load(str(pkg / "decoder.onnx"), load_external_data=False).graph
    count = collections.Counter(n.op_type for n in g.node)
    assert count["QuickGelu"] == 2 and count["LayerNormalization"] == 6, count
    gemm = next(n for n in g.node if n.op_type == "Gemm")
    assert len(gemm.input) == 3  # final_logits_bias: the head's bias


def marian_generate(hf, tok, texts: list[str], beams: int, new: int = 8):
    """(the tokenizer's padded batch, `generate()`'s output, its ids after the decoder start up
    to EOS 0) with OPUS-MT's generation settings (bad_words_ids [[pad]], length penalty 1)."""
    pad = hf.config.pad_token_id
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = hf.generate(
            **batch, max_new_tokens=new, do_sample=False, num_beams=beams, early_stopping=True,
            length_penalty=1.0, bad_words_ids=[[pad]],
        )  # fmt: skip
    want = []
    for row in out[:, 1:].tolist():  # after the decoder start
        row = row[: row.index(0)] if 0 in row else row
        want.append([t for t in row if t != pad])  # a finished beam row is padded
    return batch, out, want


@pytest.mark.parametrize("beams", [1, 4])
def test_marian_generation_equals_hugging_face(marian, beams):
    """Greedy and beam-4 translations of a padded batch: the package and `model.generate`
    (bad_words_ids [[pad]], as OPUS-MT's config) agree token for token, and as text."""
    from edgeformer.runtime.api import Translator

    hf, tok, _, _, pkg = marian
    pad = hf.config.pad_token_id
    batch, out, want = marian_generate(hf, tok, MARIAN_TEXTS, beams)
    translator = Translator(pkg, threads=1)
    sources = [translator.source_ids(t) for t in MARIAN_TEXTS]
    assert sources == [[t for t in row if t != pad] for row in batch["input_ids"].tolist()]
    opts = GenerationOptions(max_new_tokens=8, num_beams=beams, early_stopping=True)
    assert translator.translate_ids(sources, opts) == want
    texts = translator.translate_batch(MARIAN_TEXTS, max_new_tokens=8, num_beams=beams)
    assert texts == tok.batch_decode(out, skip_special_tokens=True)
    if beams == 1:  # the int4 variant runs
        int4 = Translator(pkg, "int4", threads=1).translate_ids(sources, opts)
        assert len(int4) == 3 and all(0 <= t < len(tok) for row in int4 for t in row)


@pytest.mark.parametrize("beams", [1, 4])
def test_marian_equals_hugging_face_at_the_length_cap(marian, beams, tmp_path):
    """OPUS-MT's generation_config.json (forced_eos_token_id, max_length, bad_words_ids): a
    package carrying it translates, with no option given, as HF generate with the same file,
    token for token also when outputs hit the length cap (the last one forced to </s>), and
    names no field as ignored."""
    from edgeformer.core.files import sha256
    from edgeformer.runtime.api import Translator

    hf, tok, _, _, pkg = marian
    pad = hf.config.pad_token_id
    settings = {
        "bad_words_ids": [[pad]], "bos_token_id": 0, "decoder_start_token_id": pad,
        "eos_token_id": 0, "forced_eos_token_id": 0, "max_length": 4, "num_beams": beams,
        "pad_token_id": pad, "transformers_version": transformers.__version__,
    }  # fmt: skip
    copy = tmp_path / "opus"
    shutil.copytree(pkg, copy)
    (copy / "generation_config.json").write_text(json.dumps(settings))
    config = json.loads((copy / "config.json").read_text())
    config["files"]["generation_config.json"] = sha256(copy / "generation_config.json")
    (copy / "config.json").write_text(json.dumps(config))
    batch = tok(MARIAN_TEXTS, padding=True, return_tensors="pt")
    gen = {k: v for k, v in settings.items() if k != "transformers_version"}
    with torch.no_grad():
        out = hf.generate(**batch, do_sample=False, early_stopping=True, **gen)
    want = []
    for row in out[:, 1:].tolist():
        row = row[: row.index(0)] if 0 in row else row
        want.append([t for t in row if t != pad])
    assert any(len(row) == 2 for row in want)  # the cap is hit (max_length 4: 3 new, </s> last)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every field understood: no warning
        translator = Translator(copy, threads=1)
    sources = [translator.source_ids(t) for t in MARIAN_TEXTS]
    assert translator.translate_ids(sources) == want
    plain = Translator(pkg, threads=1)  # without forcing, a capped row differs in its last token
    unforced = plain.translate_ids(sources, GenerationOptions(max_new_tokens=3, num_beams=beams))
    assert unforced != want


def test_marian_tokenizers_equal_sentencepiece(marian):
    """300 Multi30k sentences each side: our tokenizer.json ids == sentencepiece's pieces mapped
    through vocab.json (and == MarianTokenizer); decoding gives MarianTokenizer's text."""
    import sentencepiece
    from tokenizers import Tokenizer

    from edgeformer.core.data import load_multi30k

    _, tok, src, ckpt, _ = marian
    vocab = json.loads((src / "vocab.json").read_text())
    en, de = load_multi30k("val", "en", "de", max_sentences=300)
    en += ["  Two  spaces\tand a tab ", "Ünïcödé ｆｕｌｌｗｉｄｔｈ … ﬁ", "new\nlines", ""]
    for side, file, texts in (("source", "source_tokenizer.json", en),
                              ("target", "tokenizer.json", de)):  # fmt: skip
        sp = sentencepiece.SentencePieceProcessor(model_file=str(src / f"{side}.spm"))
        ours = Tokenizer.from_file(str(ckpt / file))
        for text in texts:
            ids = ours.encode(text, add_special_tokens=False).ids
            want = [vocab.get(p, vocab["<unk>"]) for p in sp.encode(text, out_type=str)]
            assert ids == want, text
            marian = tok(text_target=text) if side == "target" else tok(text)
            got = marian.get("labels", marian.get("input_ids"))  # text_target alone: input_ids
            assert ids + [0] == (got or [0]), text  # </s> appended
            if side == "target":
                assert ours.decode(ids) == tok.decode(ids, skip_special_tokens=True), text


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(normalize_before=True), "normalize_before=True"),
        (dict(add_final_layer_norm=True), "add_final_layer_norm=True"),
        (dict(static_position_embeddings=False), "static_position_embeddings=False"),
        (dict(activation_function="tanh"), "activation_function='tanh'"),
        (dict(decoder_vocab_size=99), "decoder_vocab_size=99"),
        (dict(decoder_attention_heads=2), "decoder_attention_heads=2"),
        (dict(decoder_start_token_id=0), "decoder_start_token_id=0"),
        (dict(bad_words_ids=[[5]]), "bad_words_ids"),
        # the sinusoids' table is made from config.json alone: bounded as the other families'
        (dict(max_position_embeddings=1_048_577), "max_position_embeddings=1048577"),
        (dict(max_position_embeddings=10**9), "at most 1048576 positions"),
    ],
)
def test_unsupported_marian_config_names_the_field(marian, changes, match, tmp_path):
    _, _, src, _, _ = marian
    dst = tmp_path / "hf"
    shutil.copytree(src, dst)
    config = {**json.loads((dst / "config.json").read_text()), **changes}
    (dst / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=match.replace("[", r"\[")):
        convert_hf(dst, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_marian_with_its_own_decoder_ffn_width_matches_hugging_face(marian, tmp_path):
    """encoder_ffn_dim != decoder_ffn_dim: our decoder_d_ff, every logit within 1e-4."""
    _, tok, src, _, _ = marian
    dst = tmp_path / "hf"
    shutil.copytree(src, dst)
    config = transformers.MarianConfig.from_pretrained(src)
    config.decoder_ffn_dim = 48
    torch.manual_seed(1)
    narrow = transformers.MarianMTModel(config).eval()
    narrow.save_pretrained(dst, safe_serialization=True)
    ours = load_checkpoint(convert_hf(dst, tmp_path / "checkpoint"))[0]
    assert (ours.cfg.d_ff, ours.cfg.decoder_ffn) == (128, 48)
    assert marian_logits_gap(narrow, ours, tok) <= 1e-4


def test_marian_folder_without_spm_files(marian, tmp_path):
    _, _, src, _, _ = marian
    shutil.copytree(src, tmp_path / "hf")
    (tmp_path / "hf" / "target.spm").unlink()
    with pytest.raises(FileNotFoundError, match="target.spm"):
        convert_hf(tmp_path / "hf", tmp_path / "out")


def test_marian_cli_export_and_translate(marian, tmp_path, capsys):
    """`edgeformer export HF_DIR` on a Marian folder, then `edgeformer translate`: the text
    of HF's greedy translation (sources through the package's source_tokenizer.json)."""
    from edgeformer.cli import main

    hf, tok, src, _, _ = marian
    assert main(["export", str(src), str(tmp_path / "pkg"), "-q"]) == 0
    capsys.readouterr()
    text = "Two dogs play in the snow near a red house"
    assert main(["translate", str(tmp_path / "pkg"), text, "--max-new-tokens", "8"]) == 0
    with torch.no_grad():
        out = hf.generate(**tok([text], return_tensors="pt"), max_new_tokens=8, num_beams=1,
                          do_sample=False, bad_words_ids=[[hf.config.pad_token_id]])  # fmt: skip
    assert capsys.readouterr().out.strip() == tok.decode(out[0], skip_special_tokens=True)


def test_marian_with_a_fast_tokenizer_json_converts_and_matches_hf_generate(tmp_path):
    """The benchmark's Marian (a word-level tokenizer.json, no .spm files): converted, exported
    and decoded by our runtime, it gives HF generate's greedy ids on the same weights."""
    import torch
    from transformers import MarianMTModel

    from edgeformer.benchmarks.artifacts import hf_model_dir
    from edgeformer.benchmarks.shapes import get_shape
    from edgeformer.core.decoding import GenerationOptions
    from edgeformer.export import export_package
    from edgeformer.models.hf import convert_hf
    from edgeformer.runtime import Translator

    shape = get_shape("ed", quick=True)
    src = hf_model_dir(shape, tmp_path / "work")
    ckpt = convert_hf(src, tmp_path / "ckpt")
    pkg = export_package(ckpt, tmp_path / "pkg", verbose=False)
    hf = MarianMTModel.from_pretrained(src).eval()
    ids = [[5, 9, 17, 33, 0], [40, 41, 42, 43, 0]]  # '</s>' = 0 ends a Marian source
    with torch.no_grad():
        x = torch.tensor(ids)
        out = hf.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=8,
                          min_new_tokens=8, num_beams=1, do_sample=False)  # fmt: skip
    want = out[:, 1:].tolist()  # without the decoder start token
    t = Translator(pkg, threads=1)
    got = t.translate_ids(ids, GenerationOptions(max_new_tokens=8, ignore_eos=True), banned=())
    assert got == want
