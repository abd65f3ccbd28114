"""Session settings passed through to onnxruntime: a caller's SessionOptions, providers, and the
log level onnxruntime follows."""

from __future__ import annotations

import logging

import onnxruntime as ort
import pytest

from edgeformer.runtime import Generator, Translator
from edgeformer.runtime.session import SessionSettings, ort_log_severity


def test_a_callers_session_options_are_used_as_given(ed_package):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("edgeformer.test.marker", "yes")
    t = Translator(ed_package, session_options=so)
    for graph in t.model.graphs.values():
        got = graph.session.get_session_options()
        assert got.get_session_config_entry("edgeformer.test.marker") == "yes"
        assert got.intra_op_num_threads == 1
    assert t.translate("two dogs .", max_new_tokens=3) == Translator(ed_package).translate(
        "two dogs .", max_new_tokens=3
    )


def test_providers_passed_through(lm_package):
    g = Generator(lm_package, providers=["CPUExecutionProvider"], threads=1)
    assert g.provider == "CPUExecutionProvider"
    assert g.model.graphs["decoder"].session.get_providers() == ["CPUExecutionProvider"]
    assert g.generate("a", max_new_tokens=3) == Generator(lm_package).generate(
        "a", max_new_tokens=3
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(session_options=ort.SessionOptions(), threads=2), "threads / spinning"),
        (dict(session_options={"intra_op_num_threads": 1}), "onnxruntime.SessionOptions"),
        (dict(providers="CPUExecutionProvider"), "non-empty list"),
        (dict(providers=[]), "non-empty list"),
        (dict(providers=["NoSuchExecutionProvider"]), "'NoSuchExecutionProvider' is not available"),
        (dict(providers=["CPUExecutionProvider"], provider="cpu"), "choose one"),
    ],
)
def test_bad_session_settings_are_clear_errors(ed_package, kwargs, match):
    with pytest.raises(ValueError, match=match):
        Translator(ed_package, **kwargs)


def test_onnxruntime_follows_the_edgeformer_log_level(ed_package):
    assert [ort_log_severity(x) for x in (10, 20, 30, 40)] == [2, 3, 3, 3]
    logger = logging.getLogger("edgeformer")
    old = logger.level
    try:
        logger.setLevel(logging.DEBUG)
        sess = SessionSettings(threads=1).session(
            Translator(ed_package).model.package.file("decoder", "fp32"), "decoder"
        )
        assert sess.get_session_options().log_severity_level == 2
    finally:
        logger.setLevel(old)
