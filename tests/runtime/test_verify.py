"""`edgeformer verify`: the golden run stored at export, replayed on this machine per variant."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import VARIANTS

from edgeformer.cli import main
from edgeformer.core.files import sha256
from edgeformer.core.format import GOLDEN_FILE
from edgeformer.core.schema import PackageError
from edgeformer.core.variants import MAX_QUALITY_LOSS
from edgeformer.runtime.package import load_package
from edgeformer.runtime.verify import FP32_TOLERANCE, verify


@pytest.mark.parametrize("which", ["ed_package", "lm_package"])
def test_every_variant_replays_pytorchs_golden_run(which, request):
    path = request.getfixturevalue(which)
    golden = load_package(path).golden()
    assert len(golden.tokens) == 16 and len(golden.inputs) == 3  # 1 + 15 calls, 3 rows
    checks = {c.variant: c for c in verify(path, threads=1)}
    assert set(checks) == set(load_package(path).variants)
    fp32 = checks["fp32"]
    assert fp32.agreement == 1.0 and fp32.max_diff <= FP32_TOLERANCE and fp32.passed
    assert fp32.ms_per_token > 0
    for c in checks.values():
        assert c.error is None and 0 <= c.agreement <= 1, c


def _tampered(src, dst, edit) -> None:
    """A copy of the package whose golden.json was edited (checksum updated to match)."""
    shutil.copytree(src, dst)
    golden = json.loads((dst / GOLDEN_FILE).read_text())
    edit(golden)
    (dst / GOLDEN_FILE).write_text(json.dumps(golden))
    config = json.loads((dst / "config.json").read_text())
    config["files"][GOLDEN_FILE] = sha256(dst / GOLDEN_FILE)
    (dst / "config.json").write_text(json.dumps(config))


def test_verify_fails_when_fp32_disagrees(ed_package, tmp_path, capsys):
    def shift(g):  # PyTorch "said" other logits: fp32 no longer within tolerance
        g["top_logits"] = [[[x + 0.5 for x in row] for row in call] for call in g["top_logits"]]

    _tampered(ed_package, tmp_path / "pkg", shift)
    assert main(["verify", str(tmp_path / "pkg"), "--variants", "fp32", "--threads", "1"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "fp32" in out
    assert main(["verify", str(ed_package), "--variants", "fp32", "--threads", "1"]) == 0
    assert " ok" in capsys.readouterr().out


def test_verify_errors_are_clear(ed_package, tmp_path):
    with pytest.raises(PackageError, match="no variant 'int3'"):
        verify(ed_package, ["int3"])

    def drop(g):
        g["tokens"] = g["tokens"][:-1]  # shapes no longer agree

    _tampered(ed_package, tmp_path / "bad", drop)
    with pytest.raises(PackageError, match="golden.json: shapes"):
        verify(tmp_path / "bad")
    old = tmp_path / "old"
    shutil.copytree(ed_package, old)
    config = json.loads((old / "config.json").read_text())
    del config["files"][GOLDEN_FILE]
    (old / "config.json").write_text(json.dumps(config))
    with pytest.raises(PackageError, match="has no golden.json.*re-export"):
        verify(old)


def test_export_measures_each_variant_and_auto_picks_by_them(ed_package, capsys):
    import dataclasses

    from edgeformer.core.variants import fastest_within_margin, pick_variant
    from edgeformer.runtime import Translator

    config = load_package(ed_package).config
    measured = {k: v.measured for k, v in config.variants.items()}
    assert set(measured) == set(VARIANTS) and measured["fp32"]["agreement"] == 1.0
    assert all(m["ms_per_token"] > 0 and 0 <= m["agreement"] <= 1 for m in measured.values())

    def fastest_of(names):
        return fastest_within_margin({k: measured[k]["ms_per_token"] for k in names})

    fastest = fastest_of(measured)
    t = Translator(ed_package, variant="auto", max_quality_loss=1.0, threads=1)
    assert t.variant == fastest and t.model.variant == fastest
    assert t.variant_reason.startswith(f"{fastest}: fastest at export")
    exact = [k for k, m in measured.items() if m["agreement"] == 1.0]
    strict = Translator(ed_package, variant="auto", max_quality_loss=0.0, threads=1)
    assert strict.variant == fastest_of(exact)
    assert Translator(ed_package, threads=1).variant_reason == "asked for"
    bare = dataclasses.replace(
        config,
        variants={k: dataclasses.replace(v, measured={}) for k, v in config.variants.items()},
    )
    assert pick_variant(bare) == ("fp32", "no export measurements in this package: fp32")
    # no held-out quality in this package (an untrained checkpoint): by default agreement
    # decides, at most MAX_QUALITY_LOSS lost
    default, why = pick_variant(config)
    ok = [k for k, m in measured.items() if 1 - m["agreement"] <= MAX_QUALITY_LOSS]
    assert default == fastest_of(ok)
    assert f"1 - agreement with PyTorch <= {MAX_QUALITY_LOSS:g}" in why
    with pytest.raises(ValueError, match="max_quality_loss"):
        pick_variant(config, 2.0)
    assert main(["--log-level", "info", "translate", str(ed_package), "a", "--variant", "auto",
                 "--max-quality-loss", "1", "--max-new-tokens", "3"]) == 0  # fmt: skip
    assert f"variant {fastest}: fastest at export" in capsys.readouterr().err
    assert main(["info", str(ed_package)]) == 0
    assert "auto -> " in capsys.readouterr().out


def test_auto_is_stable_under_timing_noise():
    """Timings a few percent apart are a tie, settled by a fixed order (the more exact variant
    first): the same checkpoint exported twice on a busy machine gets the same `auto`; a variant
    clearly faster (past the margin) still wins."""
    from edgeformer.core.variants import SPEED_MARGIN, fastest_within_margin

    rng = np.random.default_rng(0)
    base = {"fp32": 1.0, "int8": 0.97, "int4": 0.99, "int8-dynamic": 1.02}
    picks = set()
    for _ in range(200):  # +-3 % noise on every timing
        noisy = {k: v * (1 + rng.uniform(-0.03, 0.03)) for k, v in base.items()}
        picks.add(fastest_within_margin(noisy))
    assert picks == {"fp32"}
    fast = {"fp32": 1.0, "int8": 1.0 / (1 + 3 * SPEED_MARGIN), "int4": 0.95}
    assert fastest_within_margin(fast) == "int8"
    assert fastest_within_margin({"int4": 0.5, "int8-dynamic": 0.52}) == "int8-dynamic"


def test_export_timings_are_interleaved(ed_package, monkeypatch):
    """verify (and so export's measurements) times the variants in rounds, each round every
    variant once, so a slow moment of the machine costs them alike."""
    from edgeformer.runtime import verify as verify_module

    order = []
    monkeypatch.setattr(verify_module, "_ms_per_token", lambda r: order.append(r.variant) or 1.0)
    checks = verify(ed_package, ["fp32", "int8"])
    assert [c.ms_per_token for c in checks] == [1.0, 1.0]
    rounds = order[2:]  # after one warm-up each
    assert order[:2] == ["fp32", "int8"] and rounds == ["fp32", "int8"] * (len(rounds) // 2)
    assert len(rounds) // 2 == verify_module.TIMED_ROUNDS >= 3


@pytest.mark.parametrize("bad", [{"agreement": 1.5}, {"ms_per_token": -1}, {"agreement": "1"}])
def test_bad_measurements_in_config_are_refused(ed_package, tmp_path, bad):
    pkg = tmp_path / "pkg"
    shutil.copytree(ed_package, pkg)
    config = json.loads((pkg / "config.json").read_text())
    config["variants"]["int4"]["measured"].update(bad)
    (pkg / "config.json").write_text(json.dumps(config))
    with pytest.raises(PackageError, match="variants.int4.measured"):
        load_package(pkg)


def test_export_records_held_out_quality_and_auto_respects_its_bounds(
    ed_checkpoint, lm_checkpoint, tmp_path
):
    """A checkpoint trained on bundled data gets held-out BLEU (Multi30k val) or perplexity
    (Tiny Shakespeare val) per variant in `measured`; auto leaves out a variant past the
    project's bounds against fp32 (0.5 BLEU, +3 % perplexity) whatever its agreement."""
    import dataclasses

    from edgeformer.core.data import TrainingData
    from edgeformer.core.variants import pick_variant
    from edgeformer.export import export_package

    m30k = TrainingData("multi30k", bundled=True, tokenizer="bpe", src_lang="en", tgt_lang="de")
    shakespeare = TrainingData("tinyshakespeare", bundled=True, tokenizer="char")
    metas = {
        "ed": (ed_checkpoint, {"data": m30k.to_json()}, "bleu"),
        # a checkpoint written before the record: read from its task and train keys
        "lm": (lm_checkpoint, {"task": {"kind": "lm"},
                               "train": {"tokenizer": "char", "data_dir": None}}, "perplexity"),
    }  # fmt: skip
    assert TrainingData.of_checkpoint(metas["lm"][1]) == shakespeare
    for name, (ckpt, meta, key) in metas.items():
        trained = tmp_path / f"{name}-ckpt"
        shutil.copytree(ckpt, trained)
        config = json.loads((trained / "config.json").read_text())
        (trained / "config.json").write_text(json.dumps(config | meta))
        pkg = export_package(trained, tmp_path / name, variants=("fp32", "int4"), verbose=False)
        package = load_package(pkg).config
        measured = {v: e.measured for v, e in package.variants.items()}
        assert all(key in m and m[key] >= 0 for m in measured.values()), measured
        # the same agreement and speed, but int4 made 1 BLEU / 10 % perplexity worse
        worse = {"bleu": measured["fp32"].get("bleu", 0) - 1.0}
        if key == "perplexity":
            worse = {"perplexity": measured["fp32"]["perplexity"] * 1.1}
        fast = dict(measured["int4"], agreement=1.0, ms_per_token=0.0, **worse)
        variants = dict(package.variants)
        variants["int4"] = dataclasses.replace(variants["int4"], measured=fast)
        variant, why = pick_variant(dataclasses.replace(package, variants=variants), 1.0)
        assert variant == "fp32" and "too lossy: int4" in why and key in why.lower(), why
        fast.update({key: measured["fp32"][key]})  # within the bound: int4, the fastest
        variant, _ = pick_variant(dataclasses.replace(package, variants=variants), 1.0)
        assert variant == "int4"
        # by default the held-out bound alone decides: a low agreement does not leave int4 out
        fast.update(agreement=0.5)
        variant, why = pick_variant(dataclasses.replace(package, variants=variants))
        assert variant == "int4" and "held-out" in why and "agreement" not in why, why
        # an explicit max_quality_loss adds the agreement bound
        variant, why = pick_variant(dataclasses.replace(package, variants=variants), 0.05)
        assert variant == "fp32" and "int4 1 - agreement 0.500" in why, why
    # a converted or untrained checkpoint has no held-out data: agreement only (other tests)
