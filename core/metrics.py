"""The quality measures, one path each: BLEU for translations, perplexity windows for an LM,
cosines and relative errors for embeddings.

Training, export's held-out check and the benchmark all score through here, so the figures they
print are comparable. BLEU is sacreBLEU (the `train` extra) on detokenised text:
    bleu     cased, "13a" tokenisation: the standard, comparable sacreBLEU score
    bleu_lc  lowercase=True, "13a": the research protocol of Multi30k papers (multi-bleu on
             lowercased, tokenised text), which 13a approximates closely
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sacrebleu.metrics import BLEU


def bleu_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict:
    """{"bleu", "bleu_lc", "signature", "signature_lc", "sentences"} over the whole corpus."""
    from sacrebleu.metrics import BLEU

    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} translations for {len(refs)} references")
    cased, lower = BLEU(), BLEU(lowercase=True)
    return {
        "bleu": round(cased.corpus_score(list(hyps), [list(refs)]).score, 2),
        "bleu_lc": round(lower.corpus_score(list(hyps), [list(refs)]).score, 2),
        "signature": str(cased.get_signature()),
        "signature_lc": str(lower.get_signature()),
        "sentences": len(hyps),
    }


def sentence_bleu(hyp: str, ref: str) -> float:
    """sacreBLEU's sentence BLEU (13a, cased, exponential smoothing, effective order): how close
    one hypothesis is to its reference, to pick among hypotheses (not a corpus score)."""
    return _sentence_metric().sentence_score(hyp, [ref]).score


@cache
def _sentence_metric() -> BLEU:
    from sacrebleu.metrics import BLEU

    return BLEU(effective_order=True)


def windows(ids: Sequence[int], max_len: int, limit: int | None = None) -> list[list[int]]:
    """An id stream cut into non-overlapping windows of max_len + 1 tokens (the last may be
    shorter): every token after a window's first is predicted once, with up to max_len tokens of
    context. The first `limit` windows when given."""
    out = [list(ids[s : s + max_len + 1]) for s in range(0, len(ids) - 1, max_len)]
    out = [w for w in out if len(w) > 1]
    return out[:limit] if limit else out


def relative_errors(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """||got - want|| / ||want|| per row."""
    diff = np.linalg.norm(got.astype(np.float64) - want, axis=-1)
    return diff / np.maximum(np.linalg.norm(want, axis=-1), 1e-30)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The cosine of each row of a with the same row of b."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1),
                                        1e-30)  # fmt: skip
