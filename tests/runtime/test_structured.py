"""Structured output (issue 59): a JSON schema, a regex or a grammar that every output follows
(runtime/structured.py, llguidance's token masks), with greedy, sampling and beam search, on a
random-weight converted Llama with a real byte-level tokenizer (tests/conftest.py `byte_lm`)."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

pytest.importorskip("llguidance", reason="needs llguidance (the structured extra)")
jsonschema = pytest.importorskip("jsonschema", reason="needs jsonschema (the test extra)")

from edgeformer.cli import main  # noqa: E402
from edgeformer.core.constraints import LogitsProcessor  # noqa: E402
from edgeformer.core.decoding import DecodeInputs, GenerationOptions, generate  # noqa: E402
from edgeformer.runtime import Generator  # noqa: E402

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
SCHEMAS = [
    PERSON,
    {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3},
    {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
            "ok": {"type": "boolean"},
        },
        "required": ["color", "ok"],
        "additionalProperties": False,
    },  # fmt: skip
    {"anyOf": [{"type": "integer", "minimum": -50, "maximum": 50}, {"const": "none"}]},
]
STRATEGIES = [
    dict(),  # greedy
    dict(sampling=True, seed=0),
    dict(sampling=True, seed=1, temperature=1.5, top_k=40),
    dict(num_beams=3),
]
PROMPTS = ["the quick brown", "fox", "jumps over the lazy dog"]


@pytest.fixture(scope="module")
def lm(byte_lm):
    return Generator(str(byte_lm))


@pytest.mark.parametrize("schema", SCHEMAS, ids=["object", "array", "enum", "any-of"])
def test_every_output_under_a_schema_parses_and_validates(lm, schema):
    """The property: whatever the random model prefers, the output is JSON valid under the
    schema (3 prompts x greedy, two samplings and beam search)."""
    for prompt in PROMPTS:
        for strategy in STRATEGIES:
            text = lm.generate(prompt, max_new_tokens=50, json_schema=schema, **strategy)
            jsonschema.validate(json.loads(text), schema)  # fails the test if not


def test_unconstrained_outputs_are_not_json(lm):
    """The property above is the constraint's: the same model, unconstrained, writes no JSON."""
    for prompt in PROMPTS:
        with pytest.raises(ValueError):
            json.loads(lm.generate(prompt, max_new_tokens=30))


def test_response_format_json_object_and_json_schema(lm):
    text = lm.generate("fox", max_new_tokens=50, response_format={"type": "json_object"})
    assert isinstance(json.loads(text), dict)
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    for strategy in STRATEGIES:
        text = lm.generate("fox", max_new_tokens=50, response_format=fmt, **strategy)
        jsonschema.validate(json.loads(text), PERSON)


def test_several_samples_each_follow_the_schema(lm):
    """num_hypotheses samples: each row has its own matcher."""
    hyps = lm.generate_results(["fox", "dog"], max_new_tokens=50, json_schema=PERSON,
                             sampling=True, seed=3, num_hypotheses=3)  # fmt: skip
    texts = [h.text for row in hyps for h in row.hypotheses]
    assert len(texts) == 6 and len(set(texts)) > 1
    for text in texts:
        jsonschema.validate(json.loads(text), PERSON)


def test_beam_hypotheses_each_follow_the_schema(lm):
    """Beam search's n-best: every hypothesis, each beam's matcher cloned on select."""
    hyps = lm.generate_results(["fox"], max_new_tokens=50, json_schema=PERSON, num_beams=4,
                             num_hypotheses=4)  # fmt: skip
    texts = [h.text for h in hyps[0].hypotheses]
    assert len(texts) == 4 and len(set(texts)) == 4
    for text in texts:
        jsonschema.validate(json.loads(text), PERSON)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=["greedy", "sample", "sample-k", "beam"])
def test_regex_and_grammars(lm, strategy):
    pattern = r"[0-9]{3}-[a-z]{2,4}( (yes|no))?"
    assert re.fullmatch(pattern, lm.generate("fox", max_new_tokens=30, regex=pattern, **strategy))
    lark = 'start: "the " animal " " ("runs" | "jumps")\nanimal: "fox" | "dog" | "cat"'
    out = lm.generate("fox", max_new_tokens=30, grammar=lark, **strategy)
    assert re.fullmatch(r"the (fox|dog|cat) (runs|jumps)", out), out
    gbnf = 'root ::= "[" num ("," num)? "]"\nnum ::= [1-9] [0-9]?'
    out = lm.generate("fox", max_new_tokens=30, grammar=gbnf, **strategy)
    assert re.fullmatch(r"\[[1-9][0-9]?(,[1-9][0-9]?)?\]", out), out


def test_chat_takes_response_format(lm):
    """chat(): the chat template's prompt, the reply constrained; and a regex over the bundled
    shakespeare model's letters."""
    messages = [{"role": "user", "content": "who are you?"}]
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    for strategy in STRATEGIES:
        reply = lm.chat(messages, max_new_tokens=40, response_format=fmt, **strategy)
        jsonschema.validate(json.loads(reply), PERSON)
    bard = Generator("shakespeare")
    out = bard.generate("ROMEO:", max_new_tokens=20, regex=r"(ay|no), (my )?lord\.")
    assert re.fullmatch(r"(ay|no), (my )?lord\.", out)


@pytest.mark.parametrize(
    "options, match",
    [
        (dict(json_schema={"type": "objectx"}), "invalid JSON schema: .*objectx"),
        (dict(json_schema="{nope"), "json_schema is not JSON"),
        (dict(json_schema=[1]), "json_schema=.* must be a JSON schema: an object"),
        (dict(regex="a["), "(?s)invalid regex: .*unclosed character class"),
        (dict(grammar="start: foo"), 'invalid grammar: .*unknown name: "foo"'),
        (dict(grammar="root ::= ("), "invalid grammar"),
        (dict(response_format={"type": "xml"}), "response_format type 'xml'"),
        (dict(response_format={"type": "json_schema"}), "response_format json_schema needs"),
        (dict(regex="a", grammar='start: "a"'), "regex and grammar cannot be combined"),
        (
            dict(json_schema=PERSON, response_format={"type": "json_object"}),
            "response_format and json_schema cannot be combined",
        ),
    ],  # fmt: skip
)
def test_bad_constraints_name_the_problem(lm, options, match):
    with pytest.raises(ValueError, match=match):
        lm.generate("fox", max_new_tokens=5, **options)


def test_a_grammar_the_tokenizer_cannot_satisfy_is_refused_before_decoding():
    """The bundled shakespeare model's vocabulary has no '{' (nor [ or "): a JSON schema is
    refused by Model.prepare, before any step of decoding."""
    bard = Generator("shakespeare")
    opts = bard.model.options(json_schema=PERSON, max_new_tokens=5)
    with pytest.raises(ValueError, match="cannot be satisfied with this model's tokenizer"):
        bard.model.prepare(opts, 5)
    with pytest.raises(ValueError, match="cannot be satisfied"):
        bard.generate("x", max_new_tokens=5, regex=r"\{")


def test_the_search_without_the_runtime_refuses_a_constraint():
    """core.decoding alone has no tokenizer: a constraint there is an error, not ignored."""

    class Stepper:
        def step(self, tokens):
            return np.zeros((len(tokens), 5), dtype=np.float32)

        def select(self, rows):
            pass

    opts = GenerationOptions(max_new_tokens=3, regex="a+")
    with pytest.raises(ValueError, match="needs the runtime's Model.prepare"):
        generate(np.zeros((1, 5), np.float32), Stepper(), opts, DecodeInputs(eos_id=0))


def test_a_new_rule_is_a_new_processor_class():
    """PreparedOptions.logits_processors: a LogitsProcessor of the caller's joins the list
    the loop applies (here one that allows only odd ids after the first token)."""
    from edgeformer.core.options import prepare_options

    class OddAfterFirst(LogitsProcessor):
        def __init__(self, n: int):
            self.seen = np.zeros(n, dtype=bool)

        def apply(self, logits, n_generated):
            logits[np.ix_(np.flatnonzero(self.seen), np.arange(0, logits.shape[1], 2))] = -np.inf
            return logits

        def observe(self, tokens):
            self.seen[:] = True

        def select(self, rows):
            self.seen = self.seen[rows]

    class Stepper:  # prefers id 4, then 2, over all else
        def step(self, tokens):
            return np.tile(np.array([0, 1, 3, 0, 5, 0, 0, 0], np.float32), (len(tokens), 1))

        def select(self, rows):
            pass

    first = np.tile(np.array([0, 0, 9, 0, 0, 0, 0, 0], np.float32), (2, 1))
    plain, _ = prepare_options(GenerationOptions(max_new_tokens=4), 8, 4)
    assert generate(first.copy(), Stepper(), plain, DecodeInputs(eos_id=0)) == [[2, 4, 4, 4]] * 2
    for beams in (1, 2):
        ruled = dataclasses.replace(plain, num_beams=beams, logits_processors=(OddAfterFirst,))
        out = generate(first.copy(), Stepper(), ruled, DecodeInputs(eos_id=0))
        assert out == [[2, 1, 1, 1]] * 2


def test_cli_flags(byte_lm, tmp_path, capsys):
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    grammar = tmp_path / "yesno.gbnf"
    grammar.write_text('root ::= "yes" | "no"')
    base = ["generate", str(byte_lm), "fox", "--max-new-tokens", "60"]
    assert main([*base, "--json-schema", str(schema)]) == 0
    jsonschema.validate(json.loads(continuation(capsys)), PERSON)
    assert main([*base, "--grammar", str(grammar), "--beam", "2"]) == 0
    assert continuation(capsys) in ("yes", "no")
    assert main([*base, "--regex", "[a-c]{5}", "--sample", "--seed", "1"]) == 0
    assert re.fullmatch("[a-c]{5}", continuation(capsys))
    assert main([*base, "--json-schema", str(tmp_path / "missing.json")]) == 2
    assert "--json-schema" in capsys.readouterr().err


def continuation(capsys) -> str:
    """What `edgeformer generate PKG fox` printed after its prompt."""
    out = capsys.readouterr().out
    assert out.startswith("fox"), out
    return out[len("fox") :].rstrip("\n")
