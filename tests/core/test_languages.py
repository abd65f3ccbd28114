"""An unknown language code's close matches are close: the same language in the model's own
spelling (NLLB deu_Latn, M2M100 de, mBART de_DE), from any code or English name of it."""

from __future__ import annotations

import pytest

from edgeformer.core.language_names import TABLE
from edgeformer.core.languages import TranslationTask, close_codes

M2M = ["af", "am", "ar", "de", "el", "en", "fr", "ga", "mn", "nl", "zh"]  # M2M100's style
NLLB = ["arb_Arab", "ary_Arab", "deu_Latn", "ell_Grek", "eng_Latn", "fra_Latn", "zho_Hans"]
MBART = ["ar_AR", "de_DE", "en_XX", "fr_XX", "zh_CN"]


@pytest.mark.parametrize(
    "lang, codes, want",
    [
        ("deu_Latn", M2M, ["de"]),  # NLLB's spelling on an M2M100 model
        ("german", M2M, ["de"]),  # a name (was "mn, ga, en": difflib over two-letter codes)
        ("German", NLLB, ["deu_Latn"]),
        ("germna", MBART, ["de_DE"]),  # a misspelt name
        ("Deutsch", M2M, ["de"]),  # its own name, not Dutch
        ("ger", NLLB, ["deu_Latn"]),  # ISO 639-2/B
        ("de", NLLB, ["deu_Latn"]),
        ("de_DE", NLLB, ["deu_Latn"]),
        ("deu_latn", NLLB, ["deu_Latn"]),
        ("greek", M2M, ["el"]),  # a word of "Modern Greek"
        ("arabic", NLLB, ["arb_Arab", "ary_Arab"]),  # individual languages of a macrolanguage
        ("zh-CN", NLLB, ["zho_Hans"]),
        ("fra_Ltn", NLLB, ["fra_Latn"]),  # a misspelt code still finds its language
        ("xx_Yyyy", NLLB, []),  # nothing close: none suggested
        ("japanese", M2M, []),  # a language the model does not have
    ],
)
def test_close_codes_name_the_same_language(lang, codes, want):
    assert close_codes(lang, codes) == want


def test_an_unknown_code_error_suggests_only_close_codes():
    task = TranslationTask(languages={c: i for i, c in enumerate(M2M)})
    close = r"target_lang='deu_Latn' is not one of .* 11 .*\(close: de\)$"
    with pytest.raises(ValueError, match=close):
        task.code("deu_Latn", "target_lang")
    none = r"\(none is close; they begin af, am, ar, de, .*, \.\.\.\)$"
    with pytest.raises(ValueError, match=none):
        task.code("klingon", "target_lang")


def test_the_table_is_well_formed():
    """Each row: a 3-letter code, a 2-letter one or '-', a B code or '-', names; codes unique."""
    rows = [line.split(" ", 3) for line in TABLE.splitlines()]
    assert len(rows) > 250
    for a3, a2, b, names in rows:
        assert len(a3) == 3 and (a2 == "-" or len(a2) == 2) and (b == "-" or len(b) == 3), a3
        assert all(n.strip() == n and n for n in names.split(";")), a3
    assert len({r[0] for r in rows}) == len(rows)
