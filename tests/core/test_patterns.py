"""core.patterns: the bound on tokenizer.json regexes accepts real tokenizers' patterns and
refuses the catastrophic ones, and a refused pattern really is slow where an accepted one is not."""

from __future__ import annotations

import base64
import json
import time

import pytest

from edgeformer.core.patterns import (
    MAX_NORMALIZER_EXPANSION,
    MAX_PATTERN_CHARS,
    MAX_REPEAT_COUNT,
    MAX_WAYS,
    normalizer_expansion,
    pattern_problem,
    tokenizer_pattern_problem,
)

REAL = {  # the pre-tokenizer / normalizer patterns of published tokenizer.json files
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "cl100k / llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?"
    r"[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "o200k": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
    r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "deepseek": r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?"
    r"[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "deepseek digits": r"\p{N}{1,3}",
    "deepseek cjk": r"[一-龥぀-ゟ゠-ヿ]+",
    "deepseek-coder": r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "deepseek-coder end": r"\s+$",
    "bloom": r" ?[^(\s|[.,!?…。，、।۔،])]+",
    "t5 / xlm-r normalizer": r" {2,}",
    "newlines": r"[\r\n]",
}

HOSTILE = {
    r"(a+)+$": "repeats a repetition",
    r"(a*)*": "repeats a repetition",
    r"(a|aa)+": "repeats an alternation",
    r"(?:a|b)*": "repeats an alternation",
    r"a{2}{3}": "repeats a repetition",
    r"a**": "repeats a repetition",
    r"(?=a+)+": "repeats a repetition",
    r"(\w+\s?)+$": "repeats a repetition",
    r"(x+x+)+y": "more than one repetition in a row in a group",
    r"x*x*x*\w": "more than two repetitions in a row",
    r"x*x*$": "'$' at offset 4 must match after 2 repetitions",
    r"(?:x|xx)?x*x*\d": r"'\\d' at offset 13 must match after 2 repetitions",
    r"(?:a?){60}": "repeats an optional item",  # V8 backtracked 16 s on 6 characters
    r"(a?b?)+$": "repeats an optional item",
    r"(?:a{0,1}){2,9}": "repeats an optional item",
    r"a?{5}": "repeats an optional item",
    "a?" * 30 + "a" * 30: f"more than {MAX_WAYS} ways to match at one position",
    "(?:x|y|z)?" * 6: f"more than {MAX_WAYS} ways to match at one position",
    "|".join("x" * (MAX_WAYS + 1)): f"more than {MAX_WAYS} ways",
    r"(a)\1": r"backreference \1",
    r"\k<x>": "named backreference",
    r"\g<0>": "subroutine call",
    r"(?(1)a|b)": "conditional group",
    r"(?~abc)": "absent operator",
    "a{1000}": f"repetition count 1000 in '{{1000}}' is over {MAX_REPEAT_COUNT}",
    "((": "the group at offset 1 is not closed",
    "[abc": "the character class at offset 0 is not closed",
    "a)": "unbalanced ')' at offset 1",
    "(" * 40 + ")" * 40: "groups nest more than 32 deep",
    "x" * (MAX_PATTERN_CHARS + 1): f"over {MAX_PATTERN_CHARS}",
}


@pytest.mark.parametrize("name", list(REAL))
def test_real_tokenizers_patterns_are_accepted(name):
    assert pattern_problem(REAL[name]) is None


@pytest.mark.parametrize("pattern", list(HOSTILE))
def test_catastrophic_and_unreadable_patterns_are_refused(pattern):
    problem = pattern_problem(pattern)
    assert problem is not None and HOSTILE[pattern] in problem, problem


def test_a_refused_pattern_is_named_by_its_path_in_tokenizer_json():
    data = {
        "model": {"vocab": {"Regex": 3}},  # a token named Regex is no pattern
        "normalizer": {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": REAL["gpt2"]}},
            {"type": "Split", "pattern": {"String": "(a+)+"}},  # a literal string, no regex
            {"type": "Split", "pattern": {"Regex": "(a+)+"}},
        ]},
    }  # fmt: skip
    problem = tokenizer_pattern_problem(data)
    assert problem is not None
    assert problem.startswith("pre_tokenizer.pretokenizers[2].pattern.Regex '(a+)+': ")
    data["pre_tokenizer"]["pretokenizers"].pop()
    assert tokenizer_pattern_problem(data) is None
    assert tokenizer_pattern_problem({"decoder": {"pattern": {"Regex": 7}}}) == (
        "decoder.pattern.Regex 7: a pattern must be a string, got int"
    )


def test_a_tokenizer_nested_thousands_deep_is_walked_without_recursion():
    deep: dict = {"type": "Split", "pattern": {"Regex": "(a*)*"}}
    for _ in range(20_000):
        deep = {"type": "Sequence", "normalizers": [deep]}
    problem = tokenizer_pattern_problem({"normalizer": deep})
    assert problem is not None and problem.endswith("repeats a repetition (nested repetition "
                                                    "backtracks exponentially)")  # fmt: skip


def test_the_bound_separates_slow_patterns_from_fast_ones():
    """What the bound is for, measured on the engine tokenizers runs: the refused pattern
    panics (onig's retry limit) on 40 characters, the accepted ones are done with 20,000."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    def encode(pattern: str, text: str) -> str:
        tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), "isolated")
        try:
            tok.encode(text)
        except BaseException as e:  # pyo3's PanicException
            return type(e).__name__
        return "ok"

    assert pattern_problem("(x+x+)+y") and encode("(x+x+)+y", "x" * 40) == "PanicException"
    start = time.perf_counter()
    for name in ("gpt2", "cl100k / llama3", "o200k"):
        for ch in " x!1\n":
            assert encode(REAL[name], ch * 20_000) == "ok"
    assert time.perf_counter() - start < 30  # ~0.1 s measured; a catastrophic one never ends


def test_the_work_bound_separates_slow_patterns_from_fast_ones():
    """Rule 6 bounds work, not only shape: 2^n optional items that must all be tried (each
    accepted by rules 1-5 before) take Oniguruma exponential time; 2^9 of them stay fast."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    def seconds(pattern: str, text: str) -> float:
        tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), "isolated")
        start = time.perf_counter()
        try:
            tok.encode(text)
        except BaseException:  # pyo3's PanicException: onig's retry limit
            return float("inf")
        return time.perf_counter() - start

    slow = "a?" * 23 + "a" * 23 + r"\d"  # 2^23 ways: refused (rule 6)
    fast = "a?" * 9 + "a" * 9 + r"\d"  # 2^9: accepted
    assert pattern_problem(slow) and pattern_problem(fast) is None
    text = "a" * 23  # 60 ms for the slow one on the shared 2-core machine, 3x per extra a?
    # same-run ratio: the refused one costs far more than the accepted one on the same text
    assert seconds(slow, text) > 50 * max(seconds(fast, text), 1e-4)


def test_the_rule_is_json_clean():
    """The rule's inputs are tokenizer.json's own values: a parsed file is all it needs."""
    text = json.dumps({"pre_tokenizer": {"pattern": {"Regex": "(a|b)+"}}})
    assert "repeats an alternation" in (tokenizer_pattern_problem(json.loads(text)) or "")


def chained_replaces(size: int) -> dict:
    """Two Replace normalizers: '§' -> size x 'x', then 'x' -> size x 'y' (issue 63: size
    20,000 made one '§' 400 M characters, a SIGABRT in Python)."""
    return {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"String": "§"}, "content": "x" * size},
        {"type": "Replace", "pattern": {"String": "x"}, "content": "y" * size},
    ]}  # fmt: skip


REAL_NORMALIZERS = {  # as transformers' converters write them (charsmaps left out)
    "llama / mistral (sentencepiece bpe)": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "albert": {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"String": "``"}, "content": '"'},
        {"type": "Replace", "pattern": {"String": "''"}, "content": '"'},
        {"type": "NFKD"}, {"type": "StripAccents"}, {"type": "Lowercase"},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
    "bert": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
             "strip_accents": None, "lowercase": True},
    "byte level": {"type": "ByteLevel"},
    "none": None,
}  # fmt: skip


@pytest.mark.parametrize("name", list(REAL_NORMALIZERS))
def test_real_normalizers_are_inside_the_expansion_bound(name):
    assert normalizer_expansion(REAL_NORMALIZERS[name]) <= MAX_NORMALIZER_EXPANSION // 10
    assert tokenizer_pattern_problem({"normalizer": REAL_NORMALIZERS[name]}) is None


def test_a_normalizer_that_multiplies_its_input_is_refused_at_load():
    """The bound is on the chain's expansion, not one input: 20,000 x 20,000 is refused, as is a
    deep chain of small ones (2^11) and a charsmap with a huge entry; 30 x 30 passes."""
    problem = tokenizer_pattern_problem({"normalizer": chained_replaces(20_000)})
    assert problem == (
        "normalizer expansion: one character may become more than 1024 characters (its "
        "Replace / Prepend / charsmap expansions multiply)"
    )
    assert tokenizer_pattern_problem({"normalizer": chained_replaces(30)}) is None
    doubling = {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}
    deep: dict = {"type": "Sequence", "normalizers": [doubling] * 11}
    for _ in range(5_000):  # nested deep: walked without recursion
        deep = {"type": "Sequence", "normalizers": [deep]}
    assert tokenizer_pattern_problem({"normalizer": deep}) is not None
    charsmap = base64.b64encode((4).to_bytes(4, "little") + b"\0" * 4 + b"z" * 5000 + b"\0")
    assert normalizer_expansion({"type": "Precompiled",
                                 "precompiled_charsmap": charsmap.decode()}) > 1024  # fmt: skip


def test_the_expansion_bound_is_what_keeps_the_library_from_aborting():
    """What the refused chain does in the tokenizers library on one '§' (small enough here
    to run): the output grows as the product of the chain's contents."""
    from tokenizers import Tokenizer

    data = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": chained_replaces(300), "pre_tokenizer": None, "post_processor": None,
            "decoder": None, "model": {"type": "WordLevel", "vocab": {"y": 0, "[UNK]": 1},
                                       "unk_token": "[UNK]"}}  # fmt: skip
    tok = Tokenizer.from_str(json.dumps(data))
    assert len(tok.normalizer.normalize_str("§")) == 300 * 300  # 20,000: 400 M characters
    assert normalizer_expansion(data["normalizer"]) > MAX_NORMALIZER_EXPANSION
