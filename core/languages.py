"""A translator's source frame and languages: config.json's task keys, read and checked once.

A converted translator records what its tokenizer puts around a source text and which language
codes it knows (models/hf/seq2seq.py writes them); the runtime builds every source from it:

    task.source_prefix + text ids + task.source_suffix     (default: text ids + [EOS])

and a language token inside that frame (NLLB's `eng_Latn $A </s>`, mBART's `$A </s> en_XX`) is
the one `source_lang` replaces. The target language is the token forced after the decoder start
(transformers' forced_bos_token_id), unless `target_lang_position` is "start": the decoder starts
from it (mBART's fine-tuned models), and it cannot change.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .language_names import TABLE
from .schema import PackageError

AFTER_START, START = "after_start", "start"
# config.json's task keys a translator's frame and languages are read from, and their bounds
# (core/contract.py hands them to the JavaScript runtime, which checks them the same way)
TASK_KEYS = ("source_prefix", "source_suffix", "languages", "source_lang", "target_lang_position")
TARGET_POSITIONS = (AFTER_START, START)
MAX_FRAME_IDS = 16  # ids in source_prefix / source_suffix
MAX_CODE_CHARS = 64  # characters in a language code
# an unknown code's error: the model's codes of the same language (any code or English name
# of it, core/language_names.py), else of a name difflib finds close (cutoff NAME_CUTOFF), else
# difflib's close codes (how many, cutoff) and the codes that share its first characters (how
# many characters), else the model's first codes; a missing target language's error names a
# few codes
CLOSE_N, CLOSE_CUTOFF, SAME_START, FALLBACK_CODES, SAMPLE_CODES = 5, 0.6, 3, 8, 4
NAME_CUTOFF = 0.8


def _language(code: str) -> str:
    """The language part of a code, lowercased: deu_Latn -> deu, de_DE -> de, zh-CN -> zh."""
    return re.split(r"[_-]", code.lower(), maxsplit=1)[0]


def _rows() -> list[tuple[set[str], list[str]]]:
    """language_names.TABLE as (the language's codes, its English names lowercased)."""
    rows = []
    for line in TABLE.splitlines():
        a3, a2, b, names = line.split(" ", 3)
        rows.append(({c for c in (a3, a2, b) if c != "-"}, names.lower().split(";")))
    return rows


ROWS = _rows()


def same_language(lang: str) -> set[str]:
    """The ISO codes of the language(s) `lang` names: a code of any of its spellings (deu,
    de, ger, deu_Latn, de_DE) or an English name, or a word of one (greek: Modern Greek)."""
    key, name = _language(lang), lang.strip().lower()
    out: set[str] = set()
    for codes, names in ROWS:
        if key in codes or name in names or any(name in n.split() for n in names):
            out |= codes
    return out


def close_codes(lang: str, codes: Sequence[str]) -> list[str]:
    """The codes among `codes` close to the unknown `lang`: the same language's, else those of
    a language whose name is close to it (a misspelt name), else difflib's close codes and the
    codes with its first characters; [] when none is."""
    same = same_language(lang)
    if not same:  # a misspelt name: germna -> german
        names = {n: c for c, ns in ROWS for n in ns}
        for n in difflib.get_close_matches(lang.strip().lower(), list(names), 1, NAME_CUTOFF):
            same = names[n]
    near = [c for c in codes if _language(c) in same]
    if not near:
        near = difflib.get_close_matches(lang, list(codes), CLOSE_N, CLOSE_CUTOFF)
        start = lang.lower()[:SAME_START]
        near += [c for c in codes if c.lower().startswith(start)][:CLOSE_N]
    return list(dict.fromkeys(near))


def _ids(where: str, key: str, value: object, vocab: int) -> list[int]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab for i in value
    ):
        raise PackageError(f"{where}: task.{key} must be a list of token ids < {vocab}")
    if len(value) > MAX_FRAME_IDS:
        raise PackageError(f"{where}: task.{key} lists {len(value)} ids (at most {MAX_FRAME_IDS})")
    return list(value)


@dataclass(frozen=True)
class TranslationTask:
    """The source frame and language codes of a translator package."""

    prefix: list[int] = field(default_factory=list)  # before a source's ids
    suffix: list[int] = field(default_factory=list)  # after them (default: [EOS])
    languages: dict[str, int] = field(default_factory=dict)  # code -> token id
    source_lang: str | None = None  # the frame's own language token's code
    target_position: str = AFTER_START

    @classmethod
    def from_task(
        cls, task: Mapping, eos: int, vocab: int, where: str, source_vocab: int | None = None
    ) -> TranslationTask:
        """config.json's task -> a TranslationTask; every problem a PackageError naming the
        key. source_vocab: the encoder's own vocabulary (the frame's ids), else vocab."""
        src = vocab if source_vocab is None else source_vocab
        prefix = _ids(where, "source_prefix", task.get("source_prefix"), src)
        suffix = _ids(where, "source_suffix", task.get("source_suffix"), src)
        if "source_prefix" not in task and "source_suffix" not in task:
            if eos >= src:
                raise PackageError(
                    f"{where}: task.source_suffix is needed: the EOS id {eos} is beyond the "
                    f"sources' vocabulary of {src}"
                )
            suffix = [eos]
        langs = task.get("languages", {})
        if not isinstance(langs, dict) or not all(
            isinstance(c, str) and 0 < len(c) <= MAX_CODE_CHARS and isinstance(i, int)
            and not isinstance(i, bool) and 0 <= i < vocab
            for c, i in langs.items()
        ):  # fmt: skip
            raise PackageError(
                f"{where}: task.languages must map language codes (strings) to token ids < {vocab}"
            )
        source = task.get("source_lang")
        if source is not None and (not isinstance(source, str) or source not in langs):
            raise PackageError(f"{where}: task.source_lang {source!r} is not in task.languages")
        if source is not None and any(i >= src for i in langs.values()):  # sources take them
            raise PackageError(
                f"{where}: task.languages must be token ids < {src} (the sources' vocabulary)"
            )
        position = task.get("target_lang_position", AFTER_START)
        if position not in TARGET_POSITIONS:
            raise PackageError(
                f"{where}: task.target_lang_position must be {AFTER_START!r} or {START!r}"
            )
        return cls(prefix, suffix, dict(langs), source, position)

    @property
    def multilingual(self) -> bool:
        return bool(self.languages)

    def code(self, lang: str, what: str) -> int:
        """The token id of a language code; ValueError listing close matches."""
        if not isinstance(lang, str):
            raise ValueError(f"{what} must be a language code (a string), got {lang!r}")
        if lang in self.languages:
            return self.languages[lang]
        if not self.languages:
            raise ValueError(f"{what}={lang!r}: this model has no language codes")
        near = close_codes(lang, list(self.languages))
        first = ", ".join(list(self.languages)[:FALLBACK_CODES])
        hint = f"close: {', '.join(near)}" if near else f"none is close; they begin {first}, ..."
        raise ValueError(
            f"{what}={lang!r} is not one of this model's {len(self.languages)} language codes "
            f"({hint})"
        )

    def frame(self, source_lang: str | None) -> tuple[list[int], list[int]]:
        """(prefix, suffix) of a source in `source_lang` (None: the frame's own)."""
        if source_lang is None:
            return self.prefix, self.suffix
        new = self.code(source_lang, "source_lang")
        if self.source_lang is None:
            raise ValueError(
                "source_lang: this model's sources carry no language token (give only target_lang)"
            )
        old = self.languages[self.source_lang]
        return [new if i == old else i for i in self.prefix], [
            new if i == old else i for i in self.suffix
        ]

    def target_prefix(self, target_lang: str | None, forced: int | None, start: int) -> list[int]:
        """The tokens forced first (after the decoder start): the target language's, else the
        generation config's forced_bos_token_id; ValueError where a multilingual model is given
        no target language, or one its decoder start fixes otherwise."""
        if target_lang is not None:
            token = self.code(target_lang, "target_lang")
            if self.target_position == START:
                if token != start:
                    fixed = next((repr(c) for c, i in self.languages.items() if i == start),
                                 f"token {start}")  # fmt: skip
                    raise ValueError(
                        f"target_lang={target_lang!r}: this model's decoder always starts in "
                        f"{fixed} (its decoder_start_token_id)"
                    )
                return []
            return [token]
        if forced is not None:
            return [forced]
        if self.multilingual and self.target_position == AFTER_START:
            sample = ", ".join(list(self.languages)[:SAMPLE_CODES])
            raise ValueError(
                f"this model translates into {len(self.languages)} languages: give target_lang "
                f"(--target-lang), e.g. one of {sample}, ..."
            )
        return []


def per_text(value: str | Sequence[str | None] | None, n: int, what: str) -> list[str | None]:
    """A language argument for n texts: one code for all, or one (or None) per text."""
    if value is None or isinstance(value, str) or not isinstance(value, Iterable):
        return [value] * n  # not a code (a number): code() names it
    items = list(value)
    if len(items) != n:
        raise ValueError(f"{what}: {len(items)} codes for {n} texts")
    return items
