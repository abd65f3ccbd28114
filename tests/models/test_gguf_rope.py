"""Llama 3.1-style rope scaling read back from llama.cpp's rope_freqs.weight (models/gguf/
families.py llama3_rope), at the real models' head sizes, and divisors of no such rule refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
from gguf_files import llama3_rope_factors  # noqa: E402

from edgeformer.models.gguf.families import ROPE_FREQS, Meta, llama3_rope  # noqa: E402


class FakeFile:
    """The two things llama3_rope reads of a GGUF file: a tensor's values and the metadata."""

    def __init__(self, divisors: np.ndarray, metadata: dict | None = None):
        self.path = Path("model.gguf")
        self.divisors, self.meta = divisors, metadata or {}

    def dequantized(self, name: str) -> np.ndarray:
        assert name == ROPE_FREQS
        return self.divisors

    def metadata(self, key: str, default: object = ...) -> object:
        return self.meta.get(key, default)


LLAMA31 = {"rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}  # fmt: skip
LLAMA32 = LLAMA31 | {"factor": 32.0}


@pytest.mark.parametrize("rope,dim", [(LLAMA31, 128), (LLAMA32, 64), (LLAMA31, 16),
                                      (LLAMA31 | {"low_freq_factor": 2.0}, 128)])  # fmt: skip
def test_llama3_parameters_come_back_from_the_divisors(rope, dim):
    f = FakeFile(llama3_rope_factors(rope, dim))
    params = llama3_rope(f, Meta(f, "llama"), rope["rope_theta"], dim)  # type: ignore[arg-type]
    assert params["rope_type"] == "llama3"
    assert params["factor"] == pytest.approx(rope["factor"], rel=1e-6)
    assert params["original_max_position_embeddings"] == 8192
    if dim >= 64:  # enough frequencies on the ramp: the very values of the config
        assert params["low_freq_factor"] == pytest.approx(rope["low_freq_factor"], rel=1e-4)
        assert params["high_freq_factor"] == pytest.approx(rope["high_freq_factor"], rel=1e-4)
    again = llama3_rope_factors({**rope, **params}, dim)
    np.testing.assert_allclose(again, f.divisors, rtol=1e-5)


def test_all_ones_is_no_scaling():
    f = FakeFile(np.ones(64, np.float32))
    assert llama3_rope(f, Meta(f, "llama"), 500000.0, 128) == {}  # type: ignore[arg-type]


@pytest.mark.parametrize("divisors,match", [
    (np.linspace(1, 8, 64), "not Llama 3's rope scaling"),  # a ramp in frequency, not 1/wavelength
    (np.ones(10), "holds 10 values, not 64"),
    (np.r_[np.ones(63), np.nan], "positive rotary divisors"),
    (np.r_[np.ones(63), -2.0], "positive rotary divisors"),
])  # fmt: skip
def test_other_divisors_are_refused(divisors, match):
    f = FakeFile(divisors.astype(np.float32))
    with pytest.raises(ValueError, match=match):
        llama3_rope(f, Meta(f, "llama"), 500000.0, 128)  # type: ignore[arg-type]


def test_yarn_keys_as_transformers_fields_and_others_refused():
    from edgeformer.models.gguf.families import yarn_rope

    keys = {"qwen2.rope.scaling.factor": 4.0, "qwen2.rope.scaling.original_context_length": 32768,
            "qwen2.rope.scaling.yarn_beta_fast": 32.0}  # fmt: skip
    f = FakeFile(np.ones(1), keys)
    assert yarn_rope(f, Meta(f, "qwen2")) == {  # type: ignore[arg-type]
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
        "beta_fast": 32.0}  # fmt: skip
    f = FakeFile(np.ones(1), keys | {"qwen2.rope.scaling.yarn_ext_factor": 0.5})
    with pytest.raises(ValueError, match="yarn_ext_factor 0.5 is not converted"):
        yarn_rope(f, Meta(f, "qwen2"))  # type: ignore[arg-type]
    f = FakeFile(np.ones(1), {"qwen2.rope.scaling.factor": 4.0})
    with pytest.raises(ValueError, match="original_context_length"):
        yarn_rope(f, Meta(f, "qwen2"))  # type: ignore[arg-type]
