"""Head sizes and widths that onnxruntime's kernels do not take as they are.

GroupQueryAttention runs head sizes that are multiples of 8 only (its fused rotary: of 16), and
GatherBlockQuantized returns whole blocks, so a width that is not a multiple of the block size
(32) came back wider than the model. Export pads each attention head with zero dims up to the
next multiple of 8 (exact: the zeros add nothing to a dot product and give zeros in the padded
value dims, which the output projection's zero columns drop) and slices the quantized
embedding's rows back to d_model. Every variant of both families must export, load and match
PyTorch: fp32 exactly (the parity check and `edgeformer verify`'s greedy agreement), the
quantized variants within the bounds of test_export.test_quantized_variants.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from conftest import VARIANTS  # noqa: E402

from edgeformer.core.format import attention_head_size, graph_file  # noqa: E402
from edgeformer.export import export_package  # noqa: E402
from edgeformer.export.verify import compare  # noqa: E402
from edgeformer.models.checkpoint import load_checkpoint  # noqa: E402
from edgeformer.runtime.package import load_package  # noqa: E402

ED, LM = "encoder-decoder", "decoder-only"
# (family, ModelConfig sizes): head sizes 8, 10, 12, 17 and 60 (a usual size that is no
# multiple of 8), widths 40 and 48 (no multiple of the block size), rotary on padded heads
CASES = {
    "ed-head12-d48": (ED, dict(d_model=48, n_heads=4)),
    "lm-head12-d48-rotary-gqa": (
        LM,
        dict(
            d_model=48,
            n_heads=4,
            n_kv_heads=2,
            positional="rotary",
            norm="pre",
            norm_type="rmsnorm",
            activation="swiglu",
            tie_embeddings=False,
            bias=False,
        ),
    ),  # fmt: skip
    "ed-head10-d40-rotary": (ED, dict(d_model=40, n_heads=4, positional="rotary", norm="pre")),
    "lm-head10-d40": (LM, dict(d_model=40, n_heads=4, positional="learned", activation="gelu")),
    "ed-head8-d40": (ED, dict(d_model=40, n_heads=5, logits_bias=True)),
    "lm-head8-d48-rotary": (LM, dict(d_model=48, n_heads=6, n_kv_heads=3, positional="rotary")),
    "ed-head17": (ED, dict(d_model=34, n_heads=2, activation="gelu_tanh")),
    "lm-head17": (LM, dict(d_model=51, n_heads=3, positional="learned", norm="pre")),
    "ed-head60-rotary": (ED, dict(d_model=120, n_heads=2, positional="rotary")),
    "lm-head60-rotary": (LM, dict(d_model=120, n_heads=2, n_kv_heads=1, positional="rotary")),
}
# largest |logit difference| against PyTorch on these random-weight models (as in
# test_export.test_quantized_variants: int8-dynamic quantizes activations per tensor)
BOUNDS = {"fp32": 1e-4, "int8": 0.3, "int4": 2.0, "int8-dynamic": 2.0}


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tokenizer_json):
    """case -> (ModelConfig, checkpoint, package with every variant), each exported once."""
    from edgeformer.models import ModelConfig, build_model
    from edgeformer.models.checkpoint import save_checkpoint

    done: dict = {}

    def get(case: str):
        if case not in done:
            family, sizes = CASES[case]
            torch.manual_seed(0)
            base = dict(vocab_size=200, d_ff=64, dropout=0.0, max_len=48, n_encoder_layers=1,
                        n_decoder_layers=2)  # fmt: skip
            cfg = ModelConfig(family=family, **{**base, **sizes})
            folder = tmp_path_factory.mktemp(case)
            ckpt = save_checkpoint(folder / "ckpt", build_model(cfg).eval(), tokenizer_json)
            pkg = export_package(ckpt, folder / "pkg", variants=VARIANTS, verbose=False)
            done[case] = cfg, ckpt, pkg
        return done[case]

    return get


@pytest.mark.parametrize("case", list(CASES))
def test_every_variant_exports_and_matches_pytorch(case, exported):
    cfg, ckpt, pkg = exported(case)
    family = cfg.family

    # export's own measurement (`edgeformer verify`: PyTorch's greedy run through the runtime's
    # step loop): every variant ran, and fp32 chose PyTorch's token at every step
    config = json.loads((pkg / "config.json").read_text())
    measured = {v: e.get("measured") for v, e in config["variants"].items()}
    assert all(measured[v] for v in VARIANTS), measured
    assert measured["fp32"]["agreement"] == 1.0, measured["fp32"]
    assert measured["fp32"]["max_logit_diff"] <= BOUNDS["fp32"], measured["fp32"]

    model, package = load_checkpoint(ckpt)[0], load_package(pkg)
    for variant in VARIANTS:  # padded rows, several greedy steps, up to the last position
        diffs = compare(model, package, variant, batch=3, length=6, steps=8, seed=2)
        assert max(diffs) <= BOUNDS[variant], (variant, diffs)

    # the graphs' attention runs at the padded head size; the cache holds the padded heads
    D, Dp = cfg.head_dim, attention_head_size(cfg.head_dim)
    assert Dp % 8 == 0 and 0 <= Dp - D < 8
    decoder = onnx.load(str(pkg / graph_file("decoder", "fp32")), load_external_data=False)
    cache = [i for i in decoder.graph.input if i.name.startswith("past_key_values.0.")
             and i.name.endswith((".key", ".value"))]  # fmt: skip
    assert len(cache) == (4 if family == ED else 2)
    assert all(i.type.tensor_type.shape.dim[3].dim_value == Dp for i in cache)
    gqa = [n for n in decoder.graph.node if n.op_type == "GroupQueryAttention"]
    scales = [a.f for n in gqa for a in n.attribute if a.name == "scale"]
    assert scales == ([pytest.approx(D**-0.5)] * len(gqa) if Dp != D else []), scales
    if family == LM:  # onnxruntime-genai allocates the cache from head_size
        genai = json.loads((pkg / "genai_config.json").read_text())
        assert genai["model"]["decoder"]["head_size"] == Dp


PADDED_LM = "lm-head12-d48-rotary-gqa"


def test_padded_cache_holds_pytorchs_keys(exported):
    """The cache's first D dims of each head are PyTorch's keys (after rotary) and values, the
    padded dims stay zero."""
    from edgeformer.runtime.model import Model
    from edgeformer.runtime.session import RuntimeSettings
    from edgeformer.runtime.steppers import start_decoder_only

    cfg, ckpt, pkg = exported(PADDED_LM)
    model = load_checkpoint(ckpt)[0]
    runtime = Model(pkg, LM, settings=RuntimeSettings(threads=1))
    ids = np.array([[5, 6, 7, 8], [9, 10, 0, 0]])
    stepper, _ = start_decoder_only(runtime.graphs, runtime.config, ids, (ids > 0) * 1, 2)
    stepper.step(np.array([11, 12]))
    D = cfg.head_dim
    for layer in range(cfg.n_decoder_layers):
        for which, kind in enumerate(("key", "value")):
            buf = stepper.buffers[f"past_key_values.{layer}.{kind}"]
            assert buf.shape[1:] == (cfg.kv_heads, 6, 16) and not buf[..., D:].any()
            with torch.no_grad():
                for b, row in enumerate([[5, 6, 7, 8, 11], [9, 10, 12]]):
                    _, cache = model(torch.tensor([row]))
                    want = cache[layer][which][0].numpy()
                    np.testing.assert_allclose(buf[b, :, : len(row), :D], want, atol=1e-5)


def test_onnxruntime_genai_runs_padded_heads(exported):
    """genai_config.json's head_size is the padded one: onnxruntime-genai's cache fits the
    graph, and its greedy run is PyTorch's."""
    og = pytest.importorskip("onnxruntime_genai")
    _, ckpt, pkg = exported(PADDED_LM)
    model = load_checkpoint(ckpt)[0]
    prompt = [5, 9, 14, 3, 22, 8]
    params = og.GeneratorParams(og_model := og.Model(str(pkg)))
    params.set_search_options(max_length=len(prompt) + 8, do_sample=False)
    gen = og.Generator(og_model, params)
    gen.append_tokens(np.array([prompt], dtype=np.int32))
    while not gen.is_done():
        gen.generate_next_token()
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(8):
            seq.append(int(model(torch.tensor([seq]))[0][0, -1].argmax()))
    assert [int(i) for i in gen.get_sequence(0)] == seq


@pytest.mark.parametrize("size", ["8", "24", "twelve"])
def test_recorded_head_size_is_checked_at_load(size, exported, tmp_path):
    """The attention head size a graph records must be at least the model's head dim and be
    its K/V tensors' (else a PackageError at load, not an onnxruntime error at a translate)."""
    import shutil

    from edgeformer.core.files import sha256
    from edgeformer.core.format import ATTENTION_HEAD_SIZE_KEY
    from edgeformer.core.schema import PackageError
    from edgeformer.runtime.api import Generator

    pkg = shutil.copytree(exported(PADDED_LM)[2], tmp_path / "pkg")
    proto = onnx.load(str(pkg / "decoder.onnx"), load_external_data=False)
    (entry,) = [p for p in proto.metadata_props if p.key == ATTENTION_HEAD_SIZE_KEY]
    assert entry.value == "16"
    entry.value = size
    onnx.save_model(proto, str(pkg / "decoder.onnx"))
    config = json.loads((pkg / "config.json").read_text())
    config["files"]["decoder.onnx"] = sha256(pkg / "decoder.onnx")
    (pkg / "config.json").write_text(json.dumps(config))
    message = "disagree with the decoder graph" if size == "24" else "attention head size"
    with pytest.raises(PackageError, match=message):
        Generator(pkg)


@pytest.mark.parametrize("family", [ED, LM])
def test_gptq_int4_on_padded_heads(family, monkeypatch, tmp_path, tokenizer_json):
    """GPTQ's Hessian of an output projection over padded heads gets zero rows and columns at
    the padded inputs (whose weights are zero): int4 fitted to inputs still exports and runs."""
    from edgeformer.export import exporter
    from edgeformer.export.gptq import layer_hessians
    from edgeformer.models import ModelConfig, build_model
    from edgeformer.models.checkpoint import save_checkpoint

    torch.manual_seed(0)
    cfg = ModelConfig(family=family, vocab_size=200, d_model=48, n_heads=4, d_ff=64,
                      dropout=0.0, max_len=48, n_encoder_layers=1, n_decoder_layers=1)  # fmt: skip
    ckpt = save_checkpoint(tmp_path / "ckpt", build_model(cfg).eval(), tokenizer_json)
    x = torch.randint(4, 200, (16, 12))
    batch = (x, x) if family == ED else (x,)
    used = []

    def calibrate(model, *_):
        used.append(layer_hessians(model, [batch]))
        return used[-1], "GPTQ on random ids"

    monkeypatch.setattr(exporter, "calibrate", calibrate)
    pkg = export_package(ckpt, tmp_path / "pkg", variants=["int4"], verbose=False)
    assert used and "GPTQ on random ids" in json.loads((pkg / "config.json").read_text())[
        "variants"]["int4"]["description"]  # fmt: skip
    model = load_checkpoint(ckpt)[0]
    diffs = compare(model, load_package(pkg), "int4", batch=3, length=6, steps=8, seed=2)
    assert max(diffs) <= BOUNDS["int4"], diffs
