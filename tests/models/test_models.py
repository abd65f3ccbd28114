"""The PyTorch models: config validation, shapes, masks, positions, KV cache, learning."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch", reason="needs PyTorch (the train extra)")
import torch

from edgeformer.core.decoding import GenerationOptions
from edgeformer.models import ModelConfig, build_model, complete_ids, translate_ids
from edgeformer.models.checkpoint import load_checkpoint, save_checkpoint
from edgeformer.models.layers import sinusoidal_table

VARIANTS = [
    dict(positional=p, norm=n, activation=a)
    for p in ("sinusoidal", "learned", "rotary")
    for n, a in (("post", "relu"), ("pre", "gelu"))
]


def tiny(family: str = "encoder-decoder", **kw) -> ModelConfig:
    base = dict(vocab_size=40, d_model=32, n_heads=4, d_ff=64, dropout=0.0, max_len=32)
    base.update(n_encoder_layers=2, n_decoder_layers=2)
    return ModelConfig(family=family, **{**base, **kw})


def model(family: str = "encoder-decoder", seed: int = 0, **kw):
    torch.manual_seed(seed)
    return build_model(tiny(family, **kw)).eval()


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(d_model=30, n_heads=4), "not divisible"),
        (dict(d_model=33, n_heads=3), "even d_model"),
        (dict(activation="swish"), "activation"),
        (dict(norm="mid"), "norm"),
        (dict(positional="alibi"), "positional"),
        (dict(family="encoder-only"), "family"),
        (dict(dropout=1.5), "dropout"),
        (dict(attention_dropout=-0.1), "attention_dropout"),
        (dict(activation_dropout=1.0), "activation_dropout"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(pad_id=2), "must differ"),  # eos_id 2 (pad_id == bos_id is allowed: Marian)
        (dict(eos_id=99), "outside the vocabulary"),
        (dict(positional="rotary", d_model=36, n_heads=4), "even head dim"),
        (dict(decoder_d_ff=0), "decoder_d_ff=0 must be a positive integer"),
        (dict(family="decoder-only", decoder_d_ff=64), "for encoder-decoder models"),
        (dict(d_head=0), "d_head=0"),
        (dict(rotary_dim=4), "rotary_dim=4 must be in"),
        (dict(positional="rotary", rotary_dim=6, d_head=4), "rotary_dim=6"),
        (dict(attention_window=4), "decoder-only models"),
        (dict(family="decoder-only", attention_window=0), "attention_window=0"),
        (dict(family="decoder-only", layer_types=["full_attention"]), "layer_types must list"),
        (
            dict(family="decoder-only", n_decoder_layers=1, layer_types=["sliding_attention"]),
            "attention_window is none",
        ),
        (dict(family="decoder-only", logit_softcap=-1.0), "logit_softcap=-1.0"),
        (dict(family="decoder-only", sandwich_norm=True), "sandwich_norm needs norm='pre'"),
        (dict(family="decoder-only", qk_norm=True), "qk_norm is an RMSNorm"),
        (dict(qk_norm=True, norm_type="rmsnorm"), "decoder-only models"),
        (dict(positional="rotary", rope_scaling={"rope_type": "dynamic"}), "rope_type in"),
        (dict(positional="rotary", rope_scaling={"rope_type": "linear"}), "needs \\['factor'\\]"),
        (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "needs rotary positions"),
    ],
)
def test_bad_config_is_a_clear_error(kw, match):
    with pytest.raises(ValueError, match=match):
        tiny(**kw)


def test_dropout_sites():
    """dropout: embeddings and residual branches; attention / activation dropout default to it
    (None) or are set apart (fairseq's attention_dropout / activation_dropout); dropout runs in
    training only."""

    def rates(m) -> dict:
        layer = m.decoder[0]
        return dict(
            embed=m.drop.p,
            residual=layer.res_attn.drop.p,
            self_attn=layer.attn.dropout,
            cross_attn=layer.cross.dropout,
            ffn_hidden=layer.ffn.drop.p,
        )

    same = rates(build_model(tiny(dropout=0.3)))
    assert set(same.values()) == {0.3}
    apart = rates(build_model(tiny(dropout=0.3, attention_dropout=0.1, activation_dropout=0.0)))
    assert apart == dict(embed=0.3, residual=0.3, self_attn=0.1, cross_attn=0.1, ffn_hidden=0.0)
    m = model(dropout=0.0, attention_dropout=0.5, activation_dropout=0.5)
    src, tgt = torch.randint(3, 40, (2, 6)), torch.randint(3, 40, (2, 5))
    assert torch.equal(m(src, tgt), m(src, tgt))  # eval: no dropout anywhere
    m.train()
    assert not torch.equal(m(src, tgt), m(src, tgt))  # the two sites are live in training


def test_the_decoder_may_have_its_own_ffn_width():
    m = model(decoder_d_ff=96)
    assert m.cfg.decoder_ffn == 96 and tiny().decoder_ffn == tiny().d_ff
    assert m.encoder[0].ffn.up.out_features == m.cfg.d_ff
    assert m.decoder[0].ffn.up.out_features == m.decoder[0].ffn.down.in_features == 96
    src, tgt = torch.randint(3, 40, (2, 6)), torch.randint(3, 40, (2, 5))
    assert m(src, tgt).shape == (2, 5, 40)


def test_config_round_trip_and_unknown_keys():
    cfg = tiny()
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown keys"):
        ModelConfig.from_dict({**cfg.to_dict(), "n_layer": 3})


@pytest.mark.parametrize("kw", VARIANTS)
def test_shapes(kw):
    ed = model(**kw)
    src, tgt = torch.randint(3, 40, (3, 7)), torch.randint(3, 40, (3, 5))
    assert ed(src, tgt).shape == (3, 5, 40)
    lm = model("decoder-only", **kw)
    logits, cache = lm(torch.randint(3, 40, (3, 6)))
    assert logits.shape == (3, 6, 40)
    assert len(cache) == 2 and cache[0][0].shape == (3, 4, 6, 8)


def test_sinusoidal_matches_the_paper():
    d = 16
    table = sinusoidal_table(50, d)
    for pos in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


@pytest.mark.parametrize("kw", VARIANTS)
def test_causal_mask_future_tokens_do_not_leak(kw):
    lm = model("decoder-only", **kw)
    ids = torch.randint(3, 40, (2, 10))
    changed = ids.clone()
    changed[:, 6:] = torch.randint(3, 40, (2, 4))
    a, _ = lm(ids)
    b, _ = lm(changed)
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-6)
    assert not torch.allclose(a[:, 6:], b[:, 6:], atol=1e-3)  # the test can fail
    ed = model(**kw)
    src = torch.randint(3, 40, (2, 5))
    assert torch.allclose(ed(src, ids)[:, :6], ed(src, changed)[:, :6], atol=1e-6)


@pytest.mark.parametrize("kw", VARIANTS)
def test_padding_invariance(kw):
    ed = model(**kw)
    src = torch.randint(3, 40, (1, 6))
    tgt = torch.randint(3, 40, (1, 4))
    padded = torch.cat((src, torch.zeros(1, 3, dtype=torch.long)), dim=1)  # pad_id 0 on the right
    assert torch.allclose(ed(src, tgt), ed(padded, tgt), atol=1e-5)
    assert not torch.allclose(ed(src, tgt), ed(padded.clamp(min=5), tgt), atol=1e-3)

    lm = model("decoder-only", **kw)
    ids = torch.randint(3, 40, (1, 6))
    left = torch.cat((torch.zeros(1, 3, dtype=torch.long), ids), dim=1)
    mask = torch.tensor([[0, 0, 0] + [1] * 6])
    ref, _ = lm(ids)
    out, _ = lm(left, mask)
    assert torch.allclose(out[:, 3:], ref, atol=1e-5)


@pytest.mark.parametrize("kw", VARIANTS)
def test_kv_cache_equals_full_forward(kw):
    ed = model(**kw)
    src, tgt = torch.randint(3, 40, (2, 7)), torch.randint(3, 40, (2, 9))
    src[1, 5:] = 0
    src_mask = src != 0
    full = ed(src, tgt, src_mask)
    cross = ed.cross_kv(ed.encode(src, src_mask))
    logits, cache = ed.decode(tgt[:, :3], cross, src_mask)  # a 3-token first pass, then steps
    steps = [logits]
    for t in range(3, 9):
        logits, cache = ed.decode(tgt[:, t : t + 1], cross, src_mask, cache)
        steps.append(logits)
    assert (torch.cat(steps, 1) - full).abs().max().item() <= 1e-5

    lm = model("decoder-only", **kw)
    ids = torch.randint(3, 40, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, :4] = 0  # row 1 is a left-padded prompt
    full, _ = lm(ids, mask)
    logits, cache = lm(ids[:, :5], mask[:, :5])
    steps = [logits]
    for t in range(5, 12):
        logits, cache = lm(ids[:, t : t + 1], mask[:, : t + 1], cache)
        steps.append(logits)
    assert (torch.cat(steps, 1) - full).abs().max().item() <= 1e-5


def test_too_long_input_names_the_limit():
    with pytest.raises(ValueError, match="max_len 32"):
        model()(torch.randint(3, 40, (1, 33)), torch.randint(3, 40, (1, 2)))
    with pytest.raises(ValueError, match="max_len 32"):
        model("decoder-only")(torch.randint(3, 40, (1, 33)))


def test_tied_output_projection():
    m = model()
    assert not any("lm_head" in n for n, _ in m.named_parameters())
    untied = model(tie_embeddings=False)
    assert untied.lm_head.weight.shape == (40, 32)
    assert untied.num_params() == m.num_params() + 40 * 32


@pytest.mark.parametrize("family", ["encoder-decoder", "decoder-only"])
def test_tiny_model_overfits_a_small_batch(family):
    torch.manual_seed(0)
    m = build_model(tiny(family))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    src = torch.randint(3, 40, (4, 8))
    tgt = torch.randint(3, 40, (4, 9))
    for _ in range(150):
        if family == "encoder-decoder":
            logits = m(src, tgt[:, :-1])
        else:
            logits, _ = m(tgt[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 40), tgt[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05


def test_checkpoint_round_trip(tmp_path, tokenizer_json):
    m = model(positional="rotary")
    path = save_checkpoint(tmp_path / "ckpt", m, tokenizer_json, {"task": {"kind": "translation"}})
    loaded, config = load_checkpoint(path)
    src, tgt = torch.randint(3, 40, (2, 6)), torch.randint(3, 40, (2, 4))
    assert torch.equal(m(src, tgt), loaded(src, tgt))
    assert config["task"] == {"kind": "translation"}


def test_checkpoint_errors(tmp_path, tokenizer_json):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_checkpoint(tmp_path / "nope")
    path = save_checkpoint(tmp_path / "ckpt", model(), tokenizer_json)
    (path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="model.safetensors"):
        load_checkpoint(path)
    path = save_checkpoint(tmp_path / "ckpt2", model(), tokenizer_json)
    cfg = (path / "config.json").read_text().replace('"d_ff": 64', '"d_ff": 128')
    (path / "config.json").write_text(cfg)
    with pytest.raises(ValueError, match="do not match"):
        load_checkpoint(path)


def test_generation_greedy_and_beam_agree_with_a_manual_loop():
    m = model()
    sources = [[5, 6, 7, 2], [8, 9, 2]]
    opts = GenerationOptions(max_new_tokens=6, ignore_eos=True)
    out = translate_ids(m, sources, opts)
    # manual greedy for the first sentence, full forward each step (no cache)
    src = torch.tensor([sources[0]])
    ys = [m.cfg.bos_id]
    for _ in range(6):
        logits = m(src, torch.tensor([ys]))
        logits[0, -1, m.cfg.eos_id] = -float("inf")
        ys.append(int(logits[0, -1].argmax()))
    assert out[0] == ys[1:]
    beams = translate_ids(m, sources, GenerationOptions(max_new_tokens=6, num_beams=3))
    assert len(beams) == 2
    lm = model("decoder-only")
    cont = complete_ids(lm, [[5, 6, 7], [8]], GenerationOptions(max_new_tokens=4, ignore_eos=True))
    ref = complete_ids(lm, [[8]], GenerationOptions(max_new_tokens=4, ignore_eos=True))
    assert [len(c) for c in cont] == [4, 4] and cont[1] == ref[0]  # left padding is invisible
