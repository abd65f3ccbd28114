"""The bundled packages (runtime/pretrained/, `make models`): a name stands for its folder
wherever a package is taken, `translate` / `generate` without a package use them, and the
committed ones are the trained models docs/pretrained.md describes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from edgeformer.cli import main
from edgeformer.core.data import load_multi30k
from edgeformer.core.metrics import bleu_scores
from edgeformer.runtime import Generator, Translator
from edgeformer.runtime import package as package_module
from edgeformer.runtime.package import BUNDLED, DEFAULT_PACKAGE, PRETRAINED_DIR, load_package

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bundled(tmp_path, monkeypatch, ed_package, lm_package):
    """Random-weight stand-ins under the bundled names (the CLI's logic, not the models)."""
    shutil.copytree(ed_package, tmp_path / "m30k-en-de")
    shutil.copytree(lm_package, tmp_path / "shakespeare")
    monkeypatch.setattr(package_module, "PRETRAINED_DIR", tmp_path)
    monkeypatch.chdir(tmp_path / "m30k-en-de")  # no folder named like a bundled package here
    return tmp_path


def test_translate_and_generate_default_to_the_bundled_packages(bundled, capsys):
    opts = ["--max-new-tokens", "3"]
    assert main(["translate", "A man is riding a bike.", "Two dogs.", *opts]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2  # both arguments are texts
    assert main(["translate", "m30k-en-de", "A man.", *opts]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1  # the name is the package
    assert main(["generate", "ROMEO:", *opts]) == 0
    assert capsys.readouterr().out.startswith("ROMEO:")
    assert main(["info", "shakespeare"]) == 0
    assert str(bundled / "shakespeare") in capsys.readouterr().out
    assert Translator("m30k-en-de", threads=1).model.family == "encoder-decoder"
    assert Generator("shakespeare", threads=1).model.family == "decoder-only"


def test_a_typo_of_a_bundled_name_or_a_missing_path_is_an_error(bundled, capsys):
    assert main(["translate", "m30k-en-dee", "A man."]) == 2
    assert "no model package 'm30k-en-dee'; did you mean m30k-en-de?" in capsys.readouterr().err
    assert main(["translate", "runs/nowhere", "A man."]) == 2
    assert "model package not found: runs/nowhere" in capsys.readouterr().err
    (Path.cwd() / "test.en").write_text("A man.\n")
    assert main(["translate", "test.en"]) == 2  # a file: the hint to use --input
    assert "use --input test.en" in capsys.readouterr().err


def test_a_folder_named_like_a_bundled_package_wins(bundled, tmp_path_factory, monkeypatch,
                                                   lm_package):  # fmt: skip
    here = tmp_path_factory.mktemp("cwd")
    shutil.copytree(lm_package, here / "m30k-en-de")
    monkeypatch.chdir(here)
    assert load_package("m30k-en-de").path == Path("m30k-en-de")
    assert load_package("shakespeare").path == bundled / "shakespeare"


def test_without_a_package_the_default_is_the_bundled_one_beside_a_folder_of_its_name(
    bundled, tmp_path_factory, monkeypatch, lm_package, capsys
):
    """A folder named m30k-en-de in the working directory wins only when named: `translate
    TEXT` (no package) runs the bundled translator, never the folder (an LM here)."""
    here = tmp_path_factory.mktemp("cwd")
    shutil.copytree(lm_package, here / "m30k-en-de")
    monkeypatch.chdir(here)
    assert main(["translate", "A man.", "--max-new-tokens", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


# ---- the committed packages -----------------------------------------------------------------

committed = pytest.mark.skipif(
    not all((PRETRAINED_DIR / n / "config.json").is_file() for n in BUNDLED),
    reason="runtime/pretrained/ has no packages (make models)",
)


def doc_figure(pattern: str) -> float:
    text = (ROOT / "docs" / "pretrained.md").read_text()
    m = re.search(pattern, text)
    assert m, pattern
    return float(m.group(1))


@committed
def test_the_committed_packages_are_the_documented_trained_models():
    """Checksums hold, the defaults are bundled names, and each package's quality measured at
    export is the figure docs/pretrained.md quotes; a quick check that the files are trained
    weights (random ones translate to BLEU ~0)."""
    assert set(DEFAULT_PACKAGE.values()) <= set(BUNDLED)
    ed = load_package("m30k-en-de").config
    assert ed.family == "encoder-decoder" and set(ed.variants) == {"fp32", "int8-dynamic"}
    val_bleu = ed.variants["fp32"].measured["bleu"]
    assert val_bleu == pytest.approx(
        doc_figure(r"val BLEU \(greedy, at export\) \*\*([\d.]+)"), abs=0.01
    )
    lm = load_package("shakespeare").config
    assert lm.family == "decoder-only"
    ppl = lm.variants["fp32"].measured["perplexity"]
    assert ppl == pytest.approx(doc_figure(r"perplexity \(at export\) \*\*([\d.]+)"), abs=0.01)
    src, refs = load_multi30k("val", "en", "de", max_sentences=40)
    out = Translator("m30k-en-de", threads=1).translate_batch(src)
    assert bleu_scores(out, refs)["bleu"] > val_bleu / 2


def test_info_says_what_a_bundled_package_knows_and_what_each_figure_is_measured_on(capsys):
    """`edgeformer info m30k-en-de` names the translator's domain (image captions) and says
    what its agreement, logit difference and held-out BLEU were measured on."""
    assert main(["info", "m30k-en-de"]) == 0
    out = capsys.readouterr().out
    assert "bundled      m30k-en-de: English -> German, trained on Multi30k's image captions" in out
    golden = load_package("m30k-en-de").golden()
    calls = f"{len(golden.tokens)} decoder calls x {len(golden.inputs)} inputs"
    assert "measured on: agreement = the share of PyTorch's greedy choices" in out and calls in out
    assert "held-out BLEU 29.89" in out
    assert "held-out BLEU = greedy translations of Multi30k's whole val split (en-de)" in out
