r"""Bounds on the regular expressions a tokenizer.json carries (one rule for every runtime).

A tokenizer.json may hold regular expressions (`{"Regex": "..."}`: Split pre-tokenizers, Replace
normalizers and decoders). The `tokenizers` library runs them with Oniguruma, which gives up
on a catastrophic pattern only after millions of backtracking steps, with a Rust panic (pyo3's
PanicException, a BaseException); a JavaScript RegExp never gives up (the event loop hangs). The
probe text of a package does not trigger such a pattern; the first matching input would. So a
pattern is refused when the file is read, by a structural bound that every real tokenizer's
patterns meet (GPT-2, cl100k / o200k, Llama 3, Qwen, Mistral tekken, DeepSeek, BLOOM, T5, ...).

The rule (docs/package-format.md; the JavaScript runtime applies the same one):

1. a pattern is a string of at most MAX_PATTERN_CHARS characters;
2. no backreference (`\1`..`\9`, `\k<..>`), subroutine call (`\g<..>`), conditional
   `(?(..)..)` or absent operator `(?~..)`: they make matching exponential or recursive;
3. every counted repetition `{n}`, `{n,}`, `{n,m}`, `{,m}` has n, m <= MAX_REPEAT_COUNT;
4. a repeated group (a group, or a quantified atom, under a quantifier that allows more than
   one repetition: `*`, `+`, `{n,}`, `{n,m}` with m >= 2) matches its text in one way only:
   no repetition, alternation or optional item inside: no `(a+)+`, `(a*)*`, `(a|aa)+`,
   `a{2}{3}`, `(?:a?){60}` (60 optional items: V8 backtracked 16 s on 6 characters),
   `(a?b?)+`;
5. repetitions in a row: the degree of a repeated item is 1, of a sequence the sum of its
   items', of an alternation the largest of its branches' (a group: its body's). A top-level
   branch has degree <= 2 and, once it reached 2, only optional items (`?`, `{0,1}`) follow;
   a group's body has degree <= 1. So `\s*[\r\n]+` and `[^\s\p{L}]+[\r\n]*` (cl100k) pass,
   `x*x*$`, `x*x*x*` and `(?:x*x*)y` do not: a repetition whose continuation can fail after
   another repetition costs the square of the input's length per position tried;
6. the ways a pattern may match at one position without repetitions: an item 1, an optional
   item its own + 1, a sequence the product of its items', an alternation the sum of its
   branches' (a group: its body's); at most MAX_WAYS anywhere. So `a?a?...a?aaa...a` (2^n
   paths tried on "aaa...a!") is refused whatever its length, while cl100k's 7-way
   contraction group (x 2 for its optional prefix) passes: rules 4 and 6 bound the work of a
   pattern, not only its shape (backtracking steps per position <= MAX_WAYS x the input's
   length ^ degree);
7. groups nest at most MAX_NESTING deep; a pattern this module cannot read (an unclosed
   group or class) is refused as well, never passed on.

What the bound leaves: an accepted pattern may still cost the square of the input's length
(one repetition and then an item that fails after it: `x*(?!x)\d` on "xxx...x" took 1.2 s for
10,000 characters, 129 s for 100,000, tokenizers 0.23 on the shared 2-core machine); real
tokenizers' patterns take ~1 ms for 20,000 hostile characters (tests/core/test_patterns.py).

`pattern_problem(pattern)` says why one pattern is refused (None: accepted);
`tokenizer_pattern_problem(data)` walks a parsed tokenizer.json for every `Regex` entry and
names the first refused one by its JSON path, and then bounds its normalizer's expansion
(`normalizer_expansion`): how many characters one input character may become, at most
MAX_NORMALIZER_EXPANSION. Two chained `Replace` normalizers of 20,000 characters each made one
'§' 400 M characters (Python: SIGABRT on a 10 GB allocation; JavaScript: "Invalid array length"
blamed on the input); real tokenizers' chains stay under 100 (ALBERT's: NFKD, a SentencePiece
charsmap and a Regex Replace). A Replace of a String multiplies by ceil(len(content) / len(the
string)), of a Regex by len(content) + 1 (an empty match inserts at every position), a Prepend by
1 + its length, a SentencePiece charsmap by its longest entry, ByteLevel by 4 (UTF-8 bytes); the
Unicode ones (NFKC / NFKD 18, NFC / NFD 4, Lowercase, BertNormalizer 3) by the largest of them
once (a normalized text stays normalized).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

MAX_PATTERN_CHARS = 4096
MAX_REPEAT_COUNT = 100
MAX_DEGREE = 2  # in a top-level branch; 1 in a group's body
MAX_NESTING = 32
MAX_WAYS = 1024  # ways to match at one position, counted without repetitions (rule 6)
MAX_NORMALIZER_EXPANSION = 1024  # characters one input character may become in the normalizer
EXPANSION_PROBLEM = "normalizer expansion"  # how tokenizer_pattern_problem names that one
UNICODE_EXPANSION = {"NFKC": 18, "NFKD": 18, "NFC": 4, "NFD": 4, "Lowercase": 3,
                     "BertNormalizer": 3}  # fmt: skip


class PatternRefused(ValueError):
    """A pattern outside the bounds (the message says which rule)."""


@dataclass
class _Node:
    """What the rule needs of a parsed piece: a repetition or alternation inside, its degree."""

    repeats: bool = False  # holds a quantifier allowing more than one repetition
    alternates: bool = False  # holds an alternation `|`
    degree: int = 0
    ways: int = 1  # ways to match (rule 6), capped at MAX_WAYS + 1
    optional: bool = False  # holds an optional item (`?`, `{0,1}`)


def _quantifier(p: str, i: int) -> tuple[int, int | None, int] | None:
    """(min, max or None for unbounded, index after it) of a quantifier at p[i], or None."""
    c = p[i] if i < len(p) else ""
    if c and c in "*+?":
        lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        end = i + 1
    elif c == "{":
        close = p.find("}", i)
        body = p[i + 1 : close] if close > 0 else ""
        parts = body.split(",")
        if close < 0 or len(parts) > 2 or not all(x.isdigit() or x == "" for x in parts):
            return None  # a literal "{" (Oniguruma and JavaScript read it so)
        if parts == [""] or parts == ["", ""]:
            return None
        lo = int(parts[0]) if parts[0] else 0
        hi = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
        for n in (lo, hi):
            if n is not None and n > MAX_REPEAT_COUNT:
                raise PatternRefused(
                    f"repetition count {n} in {p[i : close + 1]!r} is over {MAX_REPEAT_COUNT}"
                )
        end = close + 1
    else:
        return None
    if end < len(p) and p[end] in "?+":  # lazy or possessive
        end += 1
    return lo, hi, end


def _class_end(p: str, i: int) -> int:
    """The index after the character class opening at p[i] == "[" (classes may nest)."""
    j, depth = i + 1, 1
    if j < len(p) and p[j] == "^":
        j += 1
    if j < len(p) and p[j] == "]":  # a leading "]" is a literal
        j += 1
    while j < len(p):
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise PatternRefused(f"the character class at offset {i} is not closed")


REFUSED_ESCAPES = {
    "k": "a named backreference (\\k)",
    "g": "a subroutine call (\\g)",
}


def _escape_end(p: str, i: int) -> int:
    """The index after the escape at p[i] == "\\"; backreferences are refused."""
    if i + 1 >= len(p):
        raise PatternRefused("the pattern ends with a lone backslash")
    c = p[i + 1]
    if c in "123456789":
        raise PatternRefused(f"backreference \\{c} at offset {i} (matching becomes exponential)")
    if c in REFUSED_ESCAPES:
        raise PatternRefused(f"{REFUSED_ESCAPES[c]} at offset {i}")
    if c in "pPx" and i + 2 < len(p) and p[i + 2] == "{":  # \p{L}, \x{263a}
        close = p.find("}", i + 2)
        if close < 0:
            raise PatternRefused(f"the escape at offset {i} is not closed")
        return close + 1
    return i + 2


def _group_start(p: str, i: int) -> tuple[int, bool]:
    """(index where the group's body starts, whether it is a group at all) for p[i] == "(":
    an inline option `(?i)` or a comment `(?#...)` is no group (nothing to repeat)."""
    if not p.startswith("(?", i):
        return i + 1, True
    rest = p[i + 2 :]
    if rest.startswith("#"):
        close = p.find(")", i)
        if close < 0:
            raise PatternRefused(f"the comment at offset {i} is not closed")
        return close + 1, False
    if rest.startswith("("):
        raise PatternRefused(f"a conditional group (?(...) at offset {i}")
    if rest.startswith("~"):
        raise PatternRefused(f"an absent operator (?~...) at offset {i}")
    if rest.startswith("P=") or rest.startswith("P>") or rest.startswith("R") or rest[:1].isdigit():
        raise PatternRefused(f"a backreference or recursion at offset {i}")
    for opener in (":", "=", "!", "<=", "<!", ">"):
        if rest.startswith(opener):
            return i + 2 + len(opener), True
    for opener, closer in (("<", ">"), ("P<", ">"), ("'", "'")):  # named groups
        if rest.startswith(opener):
            close = p.find(closer, i + 2 + len(opener))
            if close < 0:
                raise PatternRefused(f"the group name at offset {i} is not closed")
            return close + 1, True
    j = i + 2  # option letters: (?imx-imx) or (?imx-imx:...)
    while j < len(p) and (p[j].isalpha() or p[j] == "-"):
        j += 1
    if j < len(p) and p[j] == ":":
        return j + 1, True
    if j < len(p) and p[j] == ")":
        return j + 1, False
    raise PatternRefused(f"the group at offset {i} is not one edgeformer reads")


class _Parser:
    def __init__(self, pattern: str):
        self.p, self.i = pattern, 0

    def alternation(self, depth: int) -> _Node:
        """Branches up to a ")" or the end."""
        if depth > MAX_NESTING:
            raise PatternRefused(f"groups nest more than {MAX_NESTING} deep")
        branches = [self.sequence(depth)]
        while self.i < len(self.p) and self.p[self.i] == "|":
            self.i += 1
            branches.append(self.sequence(depth))
        node = _Node(
            repeats=any(b.repeats for b in branches),
            alternates=len(branches) > 1 or any(b.alternates for b in branches),
            degree=max(b.degree for b in branches),
            ways=_capped(sum(b.ways for b in branches)),
            optional=any(b.optional for b in branches),
        )
        if node.ways > MAX_WAYS:
            raise PatternRefused(_too_many_ways(self.i))
        return node

    def sequence(self, depth: int) -> _Node:
        node = _Node()
        p, most = self.p, MAX_DEGREE if depth == 0 else 1
        while self.i < len(p) and p[self.i] not in "|)":
            start = self.i
            found = self.atom(depth)
            if found is None:
                continue
            item, optional = found
            if node.degree >= MAX_DEGREE and not optional:
                raise PatternRefused(
                    f"{p[start : self.i]!r} at offset {start} must match after {node.degree} "
                    "repetitions in a row (backtracking grows as a power of the input's length)"
                )
            node.repeats |= item.repeats
            node.alternates |= item.alternates
            node.optional |= item.optional
            node.degree += item.degree
            node.ways = _capped(node.ways * item.ways)
            if node.ways > MAX_WAYS:
                raise PatternRefused(_too_many_ways(start))
            if node.degree > most:
                where = (
                    "two repetitions in a row in a top-level branch"
                    if depth == 0
                    else ("one repetition in a row in a group")
                )
                raise PatternRefused(
                    f"more than {where} (at offset {start}): "
                    "backtracking grows as a power of the input's length"
                )
        return node

    def atom(self, depth: int) -> tuple[_Node, bool] | None:
        """One atom and its quantifiers, and whether it may match nothing (its last quantifier
        allows 0); None for what is no atom (an inline option, a comment)."""
        p, i = self.p, self.i
        c = p[i]
        if c == "(":
            body, is_group = _group_start(p, i)
            self.i = body
            if not is_group:
                return None
            inner = self.alternation(depth + 1)
            if self.i >= len(p) or p[self.i] != ")":
                raise PatternRefused(f"the group at offset {i} is not closed")
            self.i += 1
        elif c == "[":
            self.i, inner = _class_end(p, i), _Node()
        elif c == "\\":
            self.i, inner = _escape_end(p, i), _Node()
        else:
            if c in "*+?" or (c == "{" and _quantifier(p, i) is not None):
                raise PatternRefused(f"a quantifier with nothing to repeat at offset {i}")
            self.i, inner = i + 1, _Node()
        optional = False
        while (q := _quantifier(p, self.i)) is not None:
            lo, hi, end = q
            optional = lo == 0
            if hi is None or hi > 1:
                if inner.repeats or inner.alternates or inner.optional or inner.ways > 1:
                    what = (
                        "a repetition"
                        if inner.repeats
                        else ("an alternation" if inner.alternates else "an optional item")
                    )
                    raise PatternRefused(
                        f"{p[i:end]!r} at offset {i} repeats {what} (nested repetition "
                        "backtracks exponentially)"
                    )
                inner = _Node(repeats=True, degree=max(inner.degree, 1))
            elif lo == 0 and hi == 1:
                inner = _Node(
                    inner.repeats, inner.alternates, inner.degree, _capped(inner.ways + 1), True
                )
            self.i = end
        return inner, optional


def _capped(ways: int) -> int:
    return min(ways, MAX_WAYS + 1)


def _too_many_ways(offset: int) -> str:
    return (
        f"more than {MAX_WAYS} ways to match at one position (at offset {offset}): "
        "backtracking tries every one of them"
    )


def pattern_problem(pattern: object) -> str | None:
    """Why a tokenizer regex is refused (the rule in this module's docstring), or None."""
    if not isinstance(pattern, str):
        return f"a pattern must be a string, got {type(pattern).__name__}"
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"the pattern has {len(pattern)} characters, over {MAX_PATTERN_CHARS}"
    parser = _Parser(pattern)
    try:
        parser.alternation(0)
        if parser.i < len(pattern):
            raise PatternRefused(f"unbalanced ')' at offset {parser.i}")
    except PatternRefused as e:
        return str(e)
    return None


def _charsmap_longest(charsmap: object) -> int:
    """The longest replacement (in characters) of a SentencePiece precompiled charsmap: after a
    little-endian uint32 trie size and the trie, NUL-terminated UTF-8 strings (1: unreadable,
    left to the tokenizers library to refuse)."""
    if not isinstance(charsmap, str):
        return 1
    try:
        blob = base64.b64decode(charsmap, validate=False)
    except ValueError:
        return 1
    if len(blob) < 4:
        return 1
    strings = blob[4 + int.from_bytes(blob[:4], "little") :]
    return max((len(s.decode("utf-8", "replace")) for s in strings.split(b"\0")), default=1)


def _leaf_expansion(node: dict) -> int:
    """Characters one input character may become in one (non-Sequence) normalizer."""
    kind = node.get("type")
    if kind == "Replace":
        content, pattern = node.get("content"), node.get("pattern")
        size = len(content) if isinstance(content, str) else 0
        if (
            isinstance(pattern, dict)
            and isinstance(pattern.get("String"), str)
            and pattern["String"]
        ):
            return max(1, -(-size // len(pattern["String"])))
        return size + 1
    if kind == "Prepend":
        prepend = node.get("prepend")
        return 1 + (len(prepend) if isinstance(prepend, str) else 0)
    if kind == "Precompiled":
        return max(1, _charsmap_longest(node.get("precompiled_charsmap")))
    if kind == "ByteLevel":
        return 4
    return 1


def normalizer_expansion(normalizer: object) -> int:
    """How many characters one input character may become in a tokenizer.json normalizer (the
    rule in this module's docstring); walked without recursion, capped past the bound."""
    product, unicode, stack = 1, 1, [normalizer]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        if node.get("type") == "Sequence":
            children = node.get("normalizers")
            stack.extend(children if isinstance(children, list) else [])
            continue
        unicode = max(unicode, UNICODE_EXPANSION.get(str(node.get("type")), 1))
        product = min(product * _leaf_expansion(node), MAX_NORMALIZER_EXPANSION + 1)
    return min(product * unicode, MAX_NORMALIZER_EXPANSION + 1)


def refused_what(problem: str) -> str:
    """What a tokenizer_pattern_problem answer refuses, for a message: "FILE has a refused
    {refused_what(problem)}"."""
    return problem if problem.startswith(EXPANSION_PROBLEM) else f"regular expression: {problem}"


def tokenizer_pattern_problem(data: object) -> str | None:
    """The first refused `Regex` entry of a parsed tokenizer.json, as "PATH: why" (PATH: its
    JSON path, e.g. pre_tokenizer.pretokenizers[0].pattern.Regex), or a normalizer over the
    expansion bound, or None. Walked without recursion (a file nested thousands deep is not a
    RecursionError here)."""
    if not isinstance(data, dict):
        return None  # not a tokenizer.json: its reader says so
    return _regex_problem(data) or _expansion_problem(data.get("normalizer"))


def _expansion_problem(normalizer: object) -> str | None:
    expansion = normalizer_expansion(normalizer)
    if expansion <= MAX_NORMALIZER_EXPANSION:
        return None
    return (
        f"{EXPANSION_PROBLEM}: one character may become more than {MAX_NORMALIZER_EXPANSION} "
        "characters (its Replace / Prepend / charsmap expansions multiply)"
    )


def _regex_problem(data: dict) -> str | None:
    # the components that run patterns; the model's vocabulary and merges hold none
    stack: list[tuple[str, object]] = [
        (key, value) for key, value in data.items() if key not in ("model", "added_tokens")
    ]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            if "Regex" in node:
                problem = pattern_problem(node["Regex"])
                if problem:
                    where = f"{path}.Regex" if path else "Regex"
                    return f"{where} {_shown(node['Regex'])}: {problem}"
            for key, value in reversed(list(node.items())):
                if isinstance(value, (dict, list)):
                    stack.append((f"{path}.{key}" if path else str(key), value))
        elif isinstance(node, list):
            for k in range(len(node) - 1, -1, -1):
                if isinstance(node[k], (dict, list)):
                    stack.append((f"{path}[{k}]", node[k]))
    return None


def _shown(pattern: object) -> str:
    text = repr(pattern)
    return text if len(text) <= 60 else text[:57] + "..."
