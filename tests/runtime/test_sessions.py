"""Session settings passed through to onnxruntime: a caller's SessionOptions, providers, and the
log level onnxruntime follows."""

from __future__ import annotations

import logging

import onnxruntime as ort
import pytest

from edgeformer.runtime import Generator, RuntimeSettings, Translator
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


# ---- RuntimeSettings: the one declaration of how a package runs ------------------------------


@pytest.mark.parametrize(
    "fields,match",
    [
        (dict(threads=0), "threads=0 must be in"),
        (dict(threads="2"), "threads='2' must be an integer"),
        (dict(provider="tpu"), "provider='tpu'"),
        (dict(spinning="on"), "spinning='on' must be True, False or None"),
        (dict(max_quality_loss=1.5), r"max_quality_loss=1.5 must be a number in \[0, 1\]"),
        (dict(max_quality_loss=True), "max_quality_loss=True"),
        (dict(variant=""), "variant=''"),
        (dict(providers=["CPUExecutionProvider"], provider="cpu"), "choose one"),
        (dict(session_options=ort.SessionOptions(), spinning=True), "threads / spinning"),
    ],
)
def test_runtime_settings_are_checked_when_made(fields, match):
    with pytest.raises(ValueError, match=match):
        RuntimeSettings(**fields)


def test_settings_or_their_fields_as_keyword_arguments(ed_package, lm_package):
    """settings=RuntimeSettings(...) and the old keyword arguments give the same model; the
    second positional argument is still the variant; both at once is an error."""
    settings = RuntimeSettings(threads=1, spinning=False)
    t = Translator(ed_package, settings=settings)
    same = Translator(ed_package, threads=1, spinning=False)
    assert t.model.settings == settings == same.model.settings
    assert Translator(ed_package, "fp32", threads=1).model.settings == RuntimeSettings(threads=1)
    g = Generator(lm_package, settings=RuntimeSettings(variant="auto", max_quality_loss=1.0))
    assert g.model.settings.variant == "auto" and g.variant != "auto"
    key = "session.intra_op.allow_spinning"
    for graph in t.model.graphs.values():
        assert graph.session.get_session_options().get_session_config_entry(key) == "0"
    with pytest.raises(ValueError, match="threads= given: put them in the settings"):
        Translator(ed_package, threads=2, settings=settings)
    with pytest.raises(ValueError, match="settings must be a RuntimeSettings"):
        Generator(lm_package, settings={"threads": 1})  # type: ignore[arg-type]


def test_the_runtime_flags_are_the_settings_fields():
    """Every documented RuntimeSettings field is a flag of translate / generate / serve, and
    the parsed flags make the settings (--spinning on|off is the bool)."""
    import argparse
    import dataclasses

    from edgeformer.cli import COMMANDS
    from edgeformer.runtime.commands import runtime_of
    from edgeformer.runtime.serve.cli import config_of

    fields = [f.name for f in dataclasses.fields(RuntimeSettings) if f.metadata.get("help")]
    assert fields == ["variant", "threads", "provider", "spinning", "max_quality_loss"]
    argv = ["PKG", "--variant", "int8", "--threads", "2", "--spinning", "off",
            "--max-quality-loss", "0.1", "--provider", "cpu"]  # fmt: skip
    for command in ("translate", "generate", "serve"):
        parser = argparse.ArgumentParser()
        COMMANDS[command][0]().add_arguments(parser, command)
        args = parser.parse_args(argv)
        want = RuntimeSettings("int8", 2, "cpu", False, 0.1)
        got = config_of(args, args.packages).runtime if command == "serve" else runtime_of(args)
        assert got == want, command
        assert runtime_of(parser.parse_args(["PKG"])) == RuntimeSettings(), command
    score = argparse.ArgumentParser()
    COMMANDS["score"][0]().add_arguments(score, "score")
    assert runtime_of(score.parse_args(["PKG", "--threads", "1"])) == RuntimeSettings(threads=1)
    with pytest.raises(SystemExit):  # score runs on the CPU provider: no --provider flag
        score.parse_args(["PKG", "--provider", "cpu"])
