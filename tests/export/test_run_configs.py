"""A package's run configurations: generation_config.json (its default decoding settings, in
Hugging Face's file and names), genai_config.json (onnxruntime-genai runs an LM package's
decoder graph as it is), and config.json's format versions (3: Hugging Face field names; 4:
cross-attention as a GroupQueryAttention step; 5: the encoder-decoder step fed GQA's lengths;
format-2, -3 and -4 packages still load)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs PyTorch (the train extra)")
import torch

from edgeformer.cli import main
from edgeformer.core.files import sha256
from edgeformer.core.format import OUR_NAMES, io_names, model_from_json
from edgeformer.core.schema import PackageError
from edgeformer.export import export_package
from edgeformer.models.checkpoint import load_checkpoint
from edgeformer.runtime import GenerationOptions, Generator, Translator
from edgeformer.runtime.package import load_package

TEXTS = ["two dogs .", "a man rides a bike in the park ."]


def with_generation_config(pkg: Path, out: Path, settings: dict) -> Path:
    """A copy of `pkg` whose generation_config.json holds `settings` (checksum updated)."""
    shutil.copytree(pkg, out)
    (out / "generation_config.json").write_text(json.dumps(settings))
    config = json.loads((out / "config.json").read_text())
    config["files"]["generation_config.json"] = sha256(out / "generation_config.json")
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_generation_config_gives_the_defaults(ed_package, tmp_path, capsys):
    pkg = with_generation_config(
        ed_package, tmp_path / "beam", {"num_beams": 3, "length_penalty": 0.6, "max_new_tokens": 5}
    )
    plain, t = Translator(ed_package), Translator(pkg)
    d = t.model.defaults
    assert (d.num_beams, d.length_penalty, d.max_new_tokens) == (3, 0.6, 5)
    assert plain.model.defaults.num_beams == 1  # export's own file: greedy
    beam = plain.translate_batch(TEXTS, num_beams=3, length_penalty=0.6, max_new_tokens=5)
    assert t.translate_batch(TEXTS) == beam
    greedy = plain.translate_batch(TEXTS, max_new_tokens=5)
    assert t.translate_batch(TEXTS, num_beams=1) == greedy  # an option overrides the file
    # the CLI: the package's defaults, and flags over them
    assert main(["translate", str(pkg), *TEXTS]) == 0
    assert capsys.readouterr().out.splitlines() == beam
    assert main(["translate", str(pkg), "--beam", "1", *TEXTS]) == 0
    assert capsys.readouterr().out.splitlines() == greedy
    # sampling asked for on a beam-search default: a sample, not an error
    assert len(t.translate_batch(TEXTS, sampling=True, seed=0)) == 2


def test_hugging_face_generation_semantics(lm_checkpoint, tmp_path):
    """A checkpoint's own generation_config.json (a converted model's) travels into the package
    as it is; do_sample without top_k means top_k 50, an eos_token_id list adds end tokens."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(lm_checkpoint, ckpt)
    settings = {"do_sample": True, "top_p": 0.9, "eos_token_id": [2, 7], "transformers_version": 1}
    (ckpt / "generation_config.json").write_text(json.dumps(settings))
    pkg = export_package(ckpt, tmp_path / "pkg", verbose=False)
    assert json.loads((pkg / "generation_config.json").read_text()) == settings
    g = Generator(pkg)
    d = g.model.defaults
    assert (d.sampling, d.top_k, d.top_p, list(d.end_token)) == (True, 50, 0.9, [7])
    assert g.generate("ab", seed=3, max_new_tokens=8) == g.generate(
        "ab", sampling=True, top_k=50, top_p=0.9, end_token=[7], seed=3, max_new_tokens=8
    )
    # a bad file fails the export, naming it, and leaves nothing behind
    (ckpt / "generation_config.json").write_text(json.dumps({"num_beams": 0}))
    with pytest.raises(ValueError, match="generation_config.json.*num_beams"):
        export_package(ckpt, tmp_path / "bad", verbose=False)
    assert not (tmp_path / "bad").exists()


def test_bad_generation_config_in_a_package(ed_package, tmp_path):
    pkg = with_generation_config(ed_package, tmp_path / "p", {"top_p": 2.0})
    with pytest.raises(PackageError, match="generation_config.json.*top_p"):
        Translator(pkg)


def _needed(graph) -> None:
    """Drop the nodes that no graph output depends on."""
    want = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if want & set(node.output):
            keep.append(node)
            want |= set(node.input)
    del graph.node[:]
    graph.node.extend(reversed(keep))


def _with_format(out: Path, config: dict, version: int) -> Path:
    """Write `config` as the config.json of an encoder-decoder package of format `version`."""
    config["format_version"] = version
    config["graphs"] = io_names("encoder-decoder", config["model"]["decoder_layers"], version)
    (out / "config.json").write_text(json.dumps(config))
    return out


def as_format_4(pkg: Path, out: Path) -> Path:
    """A copy of an encoder-decoder package with format 4's decoder, as edgeformer wrote it
    before format 5: the step takes attention_mask and encoder_attention_mask (int64) and
    derives GroupQueryAttention's lengths from them (ReduceSum - 1, and the mask's width)."""
    import onnx
    from onnx import TensorProto, helper

    shutil.copytree(pkg, out)
    config = json.loads((out / "config.json").read_text())
    for variant in config["variants"].values():
        name = variant["files"]["decoder"]
        proto = onnx.load(out / name, load_external_data=False)
        g = proto.graph
        lengths = {"seqlens_k", "total_sequence_length", "encoder_seqlens_k",
                   "encoder_total_sequence_length"}  # fmt: skip
        kept = [v for v in g.input if v.name not in lengths]
        del g.input[:]
        g.input.extend(kept[:2])  # input_ids, position_ids, then the masks, then the caches
        g.input.extend(
            helper.make_tensor_value_info(m, TensorProto.INT64, ["batch", axis])
            for m, axis in (("attention_mask", "total_len"), ("encoder_attention_mask", "src_len"))
        )
        g.input.extend(kept[2:])
        one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
        g.initializer.extend([one, helper.make_tensor("axis1", TensorProto.INT64, [1], [1])])
        nodes = []
        for mask, pre in (("attention_mask", ""), ("encoder_attention_mask", "encoder_")):
            i32 = TensorProto.INT32
            nodes += [
                helper.make_node("ReduceSum", [mask, "axis1"], [f"{mask}.n"], keepdims=0),
                helper.make_node("Sub", [f"{mask}.n", "one"], [f"{mask}.k"]),
                helper.make_node("Cast", [f"{mask}.k"], [f"{pre}seqlens_k"], to=i32),
                helper.make_node("Shape", [mask], [f"{mask}.shape"]),
                helper.make_node("Gather", [f"{mask}.shape", "one"], [f"{mask}.w"], axis=0),
                helper.make_node("Squeeze", [f"{mask}.w"], [f"{mask}.w0"]),
                helper.make_node("Cast", [f"{mask}.w0"], [f"{pre}total_sequence_length"], to=i32),
            ]  # fmt: skip
        nodes.extend(g.node)
        del g.node[:]
        g.node.extend(nodes)
        onnx.save(proto, out / name)
        config["files"][name] = sha256(out / name)
    return _with_format(out, config, 4)


def test_format_4_packages_still_load(ed_package, tmp_path):
    """Format 4's encoder-decoder step (masks in, GQA's lengths derived in the graph) decodes
    with this runtime: the same translations as format 5's, greedy and beam, every variant."""
    old = as_format_4(ed_package, tmp_path / "v4")
    assert "attention_mask" in load_package(old).config.graphs["decoder"]["inputs"]
    for variant in ("fp32", "int8-dynamic"):
        a, b = Translator(old, variant=variant), Translator(ed_package, variant=variant)
        assert not a.model.graphs["decoder"].takes_lengths
        assert b.model.graphs["decoder"].takes_lengths
        assert a.translate_batch(TEXTS) == b.translate_batch(TEXTS)
        assert a.translate_batch(TEXTS, num_beams=3) == b.translate_batch(TEXTS, num_beams=3)


def as_format_3(pkg: Path, out: Path) -> Path:
    """A copy of an encoder-decoder package with format 3's graphs, as edgeformer wrote them
    before format 4: cross-attention is MultiHeadAttention over the cross K/V with the encoder's
    key padding mask; no last_key/last_value, no cross presents (and format 4's masks)."""
    import onnx
    from onnx import TensorProto, helper

    as_format_4(pkg, out)
    config = json.loads((out / "config.json").read_text())
    heads = config["model"]["num_attention_heads"]
    for variant in config["variants"].values():
        for graph, name in variant["files"].items():
            proto = onnx.load(out / name, load_external_data=False)
            g = proto.graph
            for kept in (g.input, g.output):
                old = [
                    v
                    for v in kept
                    if ".last_" not in v.name
                    and not (
                        v.name.startswith("present.")
                        and ".encoder." in v.name
                        and graph == "decoder"
                    )
                ]
                del kept[:]
                kept.extend(old)
            if graph == "decoder":
                cast = helper.make_node(
                    "Cast", ["encoder_attention_mask"], ["mask32"], to=TensorProto.INT32
                )
                nodes = [cast]
                for node in g.node:
                    if node.op_type == "GroupQueryAttention" and ".encoder." in node.input[3]:
                        q, k, v = node.input[0], node.input[3], node.input[4]
                        node = helper.make_node(
                            "MultiHeadAttention",
                            [q, k, v, "", "mask32"],
                            [node.output[0]],
                            domain="com.microsoft",
                            num_heads=heads,
                        )
                    nodes.append(node)
                del g.node[:]
                g.node.extend(nodes)
            _needed(g)
            onnx.save(proto, out / name)
            config["files"][name] = sha256(out / name)
    return _with_format(out, config, 3)


def test_format_3_packages_still_load(ed_package, tmp_path):
    """Format 3's encoder-decoder graphs (cross-attention as MultiHeadAttention) decode with
    this runtime: the same translations as the current format's, greedy and beam."""
    import onnx

    old = as_format_3(ed_package, tmp_path / "v3")
    layers = load_package(old).config.model.n_decoder_layers
    for entry in json.loads((old / "config.json").read_text())["variants"].values():
        nodes = onnx.load(old / entry["files"]["decoder"], load_external_data=False).graph.node
        kinds = [n.op_type for n in nodes]
        assert kinds.count("MultiHeadAttention") == kinds.count("GroupQueryAttention") == layers
    for variant in ("fp32", "int8-dynamic"):
        a, b = Translator(old, variant=variant), Translator(ed_package, variant=variant)
        assert a.translate_batch(TEXTS) == b.translate_batch(TEXTS)
        assert a.translate_batch(TEXTS, num_beams=3) == b.translate_batch(TEXTS, num_beams=3)


def test_format_2_packages_still_load(ed_package, tmp_path):
    """Format 2 stored `model` under ModelConfig's names (its graphs are format 3's)."""
    old = as_format_3(ed_package, tmp_path / "v2")
    config = json.loads((old / "config.json").read_text())
    assert "hidden_size" in config["model"] and "d_model" not in config["model"]
    config["model"] = model_from_json(config["model"], 3)
    config["format_version"] = 2
    assert "d_model" in config["model"] and not set(config["model"]) & set(OUR_NAMES)
    (old / "config.json").write_text(json.dumps(config))
    assert load_package(old).config.model == load_package(ed_package).config.model
    assert Translator(old).translate_batch(TEXTS) == Translator(ed_package).translate_batch(TEXTS)


def test_onnxruntime_genai_runs_the_lm_package(lm_package, lm_checkpoint):
    """genai_config.json lets onnxruntime-genai load the package folder: the same prompt logits
    as PyTorch and the same greedy ids as edgeformer's runtime."""
    og = pytest.importorskip("onnxruntime_genai")
    prompt = [5, 9, 14, 3, 22, 8]
    model = og.Model(str(lm_package))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + 12, do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array([prompt], dtype=np.int32))
    logits = np.asarray(gen.get_logits()).reshape(-1)
    torch_model, _ = load_checkpoint(lm_checkpoint)
    with torch.no_grad():
        want = torch_model(torch.tensor([prompt]))[0][0, -1].numpy()  # (logits, cache)
    np.testing.assert_allclose(logits, want, atol=1e-4)
    while not gen.is_done():
        gen.generate_next_token()
    genai_ids = [int(i) for i in gen.get_sequence(0)][len(prompt) :]
    ours = Generator(lm_package).generate_ids([prompt], GenerationOptions(max_new_tokens=12))[0]
    assert genai_ids[: len(ours)] == ours and len(ours) > 0


def test_generation_config_fields_not_applied_are_named(ed_package, tmp_path, capsys):
    """forced_eos_token_id is honoured (a list of one too), an encoder-decoder's max_length is
    max_new_tokens + 1 (the decoder start), and a field the runtime cannot apply is named at
    load and by `edgeformer info`, never dropped silently."""
    settings = {
        "forced_eos_token_id": [5], "max_length": 4, "diversity_penalty": 0.5,
        "num_beam_groups": 2, "pad_token_id": 0, "transformers_version": "5.24.0",
    }  # fmt: skip
    pkg = with_generation_config(ed_package, tmp_path / "p", settings)
    with pytest.warns(UserWarning, match="does not apply diversity_penalty, num_beam_groups"):
        t = Translator(pkg)
    d = t.model.defaults
    assert (d.forced_end_token, d.max_new_tokens) == (5, 3)
    plain = Translator(ed_package)
    want = plain.translate_ids([[7, 8, 9]], GenerationOptions(max_new_tokens=3, forced_end_token=5))
    assert t.translate_ids([[7, 8, 9]]) == want
    capped = plain.translate_ids([[7, 8, 9]], GenerationOptions(max_new_tokens=3, ignore_eos=True))
    forced = plain.translate_ids(
        [[7, 8, 9]], GenerationOptions(max_new_tokens=3, ignore_eos=True, forced_end_token=5)
    )
    assert forced[0][:2] == capped[0][:2] and forced[0][2] == 5
    assert main(["info", str(pkg)]) == 0
    out = capsys.readouterr().out
    assert "not applied by edgeformer: diversity_penalty, num_beam_groups" in out
    with pytest.raises(ValueError, match="forced_end_token 999 is not a token"):
        plain.translate_ids([[7, 8]], GenerationOptions(forced_end_token=999))


def test_a_decoder_only_max_length_is_named_not_applied(lm_package, tmp_path):
    pkg = with_generation_config(lm_package, tmp_path / "p", {"max_length": 20})
    with pytest.warns(UserWarning, match=r"max_length \(counts the prompt"):
        g = Generator(pkg)
    assert g.model.defaults.max_new_tokens is None
