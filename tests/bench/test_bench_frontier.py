"""`edgeformer bench --frontier`: quality next to speed on a tiny exported package (every variant,
and CTranslate2 on its converted weights when ctranslate2 is installed): the JSON's points, the
markdown table, the two-panel PNG; the conversion's exactness; the recipe labels, the Pareto
front, and the rule that a quick run never writes the committed results."""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip(
    "edgeformer.benchmarks", reason="needs the edgeformer-bench distribution (./benchmarks)"
)

from edgeformer.benchmarks import report
from edgeformer.benchmarks.cli import COMMITTED, add_arguments
from edgeformer.benchmarks.frontier import PEERS, VARIANTS, parse_spec
from edgeformer.benchmarks.settings import Settings
from edgeformer.cli import main

HAVE_CT2 = all(importlib.util.find_spec(m) is not None for m in ("ctranslate2", "onnx"))
SENTENCES = 6


@pytest.fixture(scope="module")
def translation_package(ed_package, tmp_path_factory):
    """The session's tiny encoder-decoder package (every variant) as an en-de translator: its
    config.json names the direction the frontier reads (the checkpoint fixture has none)."""
    out = tmp_path_factory.mktemp("frontier") / "tiny"
    shutil.copytree(ed_package, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["task"] = {"kind": "translation", "src_lang": "en", "tgt_lang": "de"}
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def test_frontier_points_table_and_plot(translation_package, tmp_path):
    out = tmp_path / "results"
    argv = ["bench", "--frontier", f"tiny={translation_package}", "--quick", "--threads", "1"]
    argv += ["--quality-limit", str(SENTENCES), "--out", str(out), "--work", str(tmp_path / "w")]
    assert main(argv) == 0

    res = json.loads((out / "latest.json").read_text())
    assert res["settings"]["workloads"] == [] and res["workloads"] == []  # --frontier alone
    points = {p["stack"]: p for p in res["frontier"]}
    want = [f"edgeformer-{v}" for v in VARIANTS] + (list(PEERS) if HAVE_CT2 else [])
    assert sorted(points) == sorted(want), res.get("frontier_skipped")
    # without CTranslate2 (the `bench` extra), its two stacks are skipped with that reason
    skipped = {s["stack"]: s["reason"] for s in res["frontier_skipped"]}
    assert skipped == ({} if HAVE_CT2 else {p: skipped.get(p, "") for p in PEERS})
    assert all("not installed" in reason for reason in skipped.values())
    for name, p in points.items():
        assert p["recipe"] == "tiny" and p["package"] == str(translation_package)
        assert p["variant"] == name.split("-", 1)[1]
        assert p["engine"] == ("ctranslate2" if name in PEERS else "edgeformer")
        assert p["sentences"] == SENTENCES
        assert 0 <= p["bleu"] <= 100 and 0 <= p["bleu_cased"] <= 100, p
        assert 0 <= p["bleu_greedy"] <= 100
        assert p["ms_per_sentence"] > 0 and p["sentences_per_s"] > 0, p
        assert 0 < p["ms_per_token"] < p["ms_per_sentence"], p  # every output has its EOS
        assert "beam 5" in p["bleu_decoding"] and "lowercased" in p["bleu_decoding"]
        assert p["speed_decoding"].startswith("greedy")
        assert p["file_batching"]["max_batch_size"] == 32 and p["size_mb"] > 0
        assert p["threads"] == 1
        assert 0 <= p["same_as_fp32"] <= 1
    assert points["edgeformer-fp32"]["same_as_fp32"] == 1.0
    if HAVE_CT2:  # the same weights, float32: the same greedy translations and beam BLEU
        assert points["ct2-fp32"]["same_as_fp32"] == 1.0
        assert points["ct2-fp32"]["bleu"] == points["edgeformer-fp32"]["bleu"]

    md = (out / "latest.md").read_text()
    assert "## Quality next to speed" in md and "beam 5, lowercased" in md
    for name in want:
        assert f"| tiny | {name} | **" in md
    assert "## Targets" not in md  # no workload ran: nothing to compare
    png = out / "latest-frontier.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_frontier_times_recipes_side_by_side(translation_package, tmp_path, capsys):
    """Two recipes are open at once and timed in the same turns: one point each, in the order
    given, the same numbers where the weights are the same."""
    out = tmp_path / "results"
    argv = ["bench", "--frontier", f"b={translation_package}", "--frontier",
            f"a={translation_package}", "--stacks", "edgeformer-fp32", "--quick", "--threads", "1",
            "--quality-limit", "4", "--out", str(out), "--work", str(tmp_path / "w")]  # fmt: skip
    assert main(argv) == 0
    res = json.loads((out / "latest.json").read_text())
    assert [p["recipe"] for p in res["frontier"]] == ["b", "a"]
    b, a = res["frontier"]
    assert a["bleu"] == b["bleu"] and a["bleu_greedy"] == b["bleu_greedy"]
    assert "2 stacks in turns" in capsys.readouterr().out


@pytest.fixture(scope="module")
def rotary_checkpoint(tmp_path_factory, tokenizer_json):
    """A random-weight encoder-decoder with rotary positions, pre-LN (head dim 16: the decoder
    step's GroupQueryAttention rotates q and k itself)."""
    from conftest import _checkpoint

    return _checkpoint(
        tmp_path_factory, tokenizer_json, d_model=64, n_encoder_layers=2, n_decoder_layers=2,
        positional="rotary", norm="pre",
    )  # fmt: skip


@pytest.fixture(scope="module")
def rotary_package(rotary_checkpoint, tmp_path_factory):
    from conftest import export

    return export(rotary_checkpoint, tmp_path_factory, "rotary")


# (checkpoint, package) fixtures: post-LN sinusoidal (the session's), pre-LN rotary
CT2_CASES = [("ed_checkpoint", "translation_package"), ("rotary_checkpoint", "rotary_package")]


@pytest.mark.skipif(not HAVE_CT2, reason="ctranslate2 not installed")
@pytest.mark.parametrize("case", CT2_CASES, ids=["sinusoidal", "rotary"])
def test_ct2_conversion_of_a_package_gives_our_greedy_ids(case, request, tmp_path):
    """CTranslate2 on the package's fp32 weights decodes what our runtime's fp32 decodes."""
    import ctranslate2

    from edgeformer.benchmarks import artifacts
    from edgeformer.core.decoding import GenerationOptions
    from edgeformer.runtime import Translator

    package = request.getfixturevalue(case[1])
    path = artifacts.ct2_package_dir(package, tmp_path)
    vocab = artifacts.package_vocab(package / "tokenizer.json", 200)
    ours = Translator(package, variant="fp32", threads=1)
    eos = ours.model.eos_id
    sources = [[5 + (7 * i + j) % 150 for j in range(3 + i)] + [eos] for i in range(6)]
    want = ours.translate_ids(sources, GenerationOptions(max_new_tokens=12, ignore_eos=True))
    ct2 = ctranslate2.Translator(str(path), device="cpu", intra_threads=1)
    banned = [[vocab[i]] for i in ours.banned_ids]  # padding and BOS, never chosen by ours
    res = ct2.translate_batch(
        [[vocab[i] for i in s] for s in sources], beam_size=1, max_decoding_length=12,
        min_decoding_length=12, suppress_sequences=banned,
    )  # fmt: skip
    index = {t: i for i, t in enumerate(vocab)}
    assert [[index[t] for t in r.hypotheses[0]] for r in res] == want


@pytest.mark.skipif(not HAVE_CT2, reason="ctranslate2 not installed")
@pytest.mark.parametrize("case", CT2_CASES, ids=["sinusoidal", "rotary"])
def test_ct2_conversion_of_a_package_scores_as_pytorch(case, request, tmp_path):
    """Teacher-forced log-probabilities of given targets: CTranslate2 on the converted package
    against the PyTorch checkpoint, token by token (random models' greedy outputs repeat one
    token, which positions barely change; these scores see every position)."""
    import ctranslate2
    import torch

    from edgeformer.benchmarks import artifacts
    from edgeformer.models.checkpoint import load_checkpoint

    model = load_checkpoint(request.getfixturevalue(case[0]))[0].eval()
    package = request.getfixturevalue(case[1])
    cfg = model.cfg
    vocab = artifacts.package_vocab(package / "tokenizer.json", cfg.vocab_size)
    g = torch.Generator().manual_seed(0)
    for n_src, n_tgt in ((5, 9), (11, 4)):
        src = torch.randint(5, cfg.vocab_size, (1, n_src), generator=g)
        tgt = torch.randint(5, cfg.vocab_size, (1, n_tgt), generator=g)
        with torch.no_grad():
            logits = model(src, torch.cat([torch.tensor([[cfg.bos_id]]), tgt], 1))
        want = logits.log_softmax(-1)[0, torch.arange(n_tgt), tgt[0]]
        ct2 = ctranslate2.Translator(
            str(artifacts.ct2_package_dir(package, tmp_path)), device="cpu", intra_threads=1
        )
        (res,) = ct2.score_batch([[vocab[i] for i in src[0]]], [[vocab[i] for i in tgt[0]]])
        got = torch.tensor(res.log_probs[:n_tgt])  # then the end token's
        assert torch.allclose(got, want, atol=1e-3), (got, want)


def test_recipe_names_and_pareto_front():
    assert parse_spec("student=runs/kd/package") == ("student", Path("runs/kd/package"))
    assert parse_spec("runs/m30k/package") == ("m30k", Path("runs/m30k/package"))
    assert parse_spec("packages/teacher") == ("teacher", Path("packages/teacher"))
    # lower ms is faster; higher sentences/s is faster: the points no other beats on both
    xy = [(1.0, 10.0), (2.0, 12.0), (3.0, 11.0), (0.5, 5.0)]
    assert report.pareto(xy, faster_is_lower=True) == [(0.5, 5.0), (1.0, 10.0), (2.0, 12.0)]
    assert report.pareto(xy, faster_is_lower=False) == [(3.0, 11.0), (2.0, 12.0)]


def test_frontier_settings_and_committed_results_rule(tmp_path):
    from edgeformer.benchmarks.cli import bench

    p = argparse.ArgumentParser()
    add_arguments(p)
    s = Settings.from_args(p.parse_args(["--frontier", "a=x", "--frontier", "y"]))
    assert s.frontier == ("a=x", "y") and s.workloads == ()  # the frontier alone by default
    s = Settings.from_args(p.parse_args(["--frontier", "x", "--workloads", "W1"]))
    assert s.workloads == ("W1",)
    assert Settings.from_dict(s.to_dict()) == s
    for quick in (["--quick"], ["--quality-limit", "5"]):
        args = p.parse_args(["--frontier", "x", "--out", str(COMMITTED), *quick])
        with pytest.raises(SystemExit, match="committed results"):
            bench(Settings.from_args(args))
