"""Speculative decoding in the runtime (issue 59): format 6's multi-position logits, prompt
lookup and draft packages through the text API, and what is refused. The per-family greedy
equality is tests/models/test_hf_families.py's; the acceptance rule's is tests/core/'s."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from edgeformer.core.decoding import GenerationOptions  # noqa: E402
from edgeformer.core.format import INDEXED_LOGITS, LOGITS_INDEX  # noqa: E402
from edgeformer.runtime.api import Generator  # noqa: E402
from edgeformer.runtime.steppers import start_decoder_only  # noqa: E402

PROMPT = "to be or not to be, that is the question: to be or not"


def test_verify_returns_each_new_tokens_logits_and_drop_last_takes_them_back(lm_package):
    """One verify call of T tokens gives the logits T steps give; drop_last rolls the cache
    back so that the next call continues from the kept tokens. The index's default is empty: a
    plain run computes (0, V) extra logits."""
    gen = Generator(lm_package, threads=1)
    m = gen.model
    prompt = np.array([gen.prompt_ids(PROMPT)])
    dec, first = start_decoder_only(m.graphs, m.config, prompt, np.ones_like(prompt), 16)
    tokens, steps = [int(first[0].argmax())], []
    for _ in range(6):
        steps.append(dec.step(np.array(tokens[-1:])).copy()[0])
        tokens.append(int(steps[-1].argmax()))
    dec, _ = start_decoder_only(m.graphs, m.config, prompt, np.ones_like(prompt), 16)
    np.testing.assert_allclose(dec.verify(np.array(tokens[:4])), steps[:4], atol=1e-5)
    dec.drop_last(2)  # tokens 2 and 3 rejected
    np.testing.assert_allclose(dec.verify(np.array(tokens[2:5])), steps[2:5], atol=1e-5)
    np.testing.assert_allclose(dec.step(np.array(tokens[5:6]))[0], steps[5], atol=1e-5)
    session = m.graphs["decoder"].session
    assert LOGITS_INDEX in {i.name for i in session.get_overridable_initializers()}
    assert INDEXED_LOGITS in m.graphs["decoder"].output_names


def test_prompt_lookup_and_a_draft_give_plain_outputs(lm_package):
    plain = Generator(lm_package, threads=1)
    fast = Generator(lm_package, threads=1, draft=Generator(lm_package, "int4", threads=1))
    prompts = [PROMPT, "the question: to be", "or not to be"]
    for options in ({"prompt_lookup": 4}, {"draft_tokens": 3}, {"prompt_lookup": 2}):
        for extra in ({}, {"stop": ["the"]}, {"repetition_penalty": 1.3}):
            kwargs = dict(max_new_tokens=20, **extra)
            want = plain.generate_batch(prompts, **kwargs)
            assert fast.generate_batch(prompts, **kwargs, **options) == want, (options, extra)
            assert "".join(fast.stream(prompts[0], **kwargs, **options)) == want[0]
    stats = fast.speculation_stats
    assert stats.verifications > 0 and stats.drafted > stats.accepted > 0
    assert stats.tokens_per_call > 1
    scored = plain.generate_results([PROMPT], max_new_tokens=20)[0].hypotheses[0]
    drafted = fast.generate_results([PROMPT], max_new_tokens=20)[0].hypotheses[0]
    assert drafted.ids == scored.ids
    np.testing.assert_allclose(drafted.log_probs, scored.log_probs, atol=1e-4)


def test_sampling_with_a_seed_is_reproducible(lm_package):
    fast = Generator(lm_package, threads=1, draft=Generator(lm_package, "int4", threads=1))
    kwargs = dict(max_new_tokens=20, sampling=True, seed=3, top_k=20)
    outs = [fast.generate(PROMPT, **kwargs) for _ in range(2)]
    assert outs[0] == outs[1]
    assert fast.generate(PROMPT, **kwargs, prompt_lookup=3) == fast.generate(
        PROMPT, **kwargs, prompt_lookup=3
    )


def test_what_is_refused(lm_package, byte_lm):
    with pytest.raises(ValueError, match="tokenizer is not the target's"):
        Generator(byte_lm, draft=lm_package)
    with pytest.raises(ValueError, match="num_beams > 1"):
        Generator(lm_package).generate(PROMPT, prompt_lookup=3, num_beams=2)
    with pytest.raises(ValueError, match=r"prompt_lookup=65 must be in \[0, 64\]"):
        GenerationOptions(prompt_lookup=65)
    bundled = Generator("shakespeare")  # format 5: one position's logits
    assert bundled.model.config.format_version == 5
    with pytest.raises(ValueError, match="format 6 or later"):
        bundled.generate("ROMEO:", max_new_tokens=8, prompt_lookup=3)
    assert bundled.generate("ROMEO:", max_new_tokens=8)  # plain decoding as before
