"""What the text API returns: scored hypotheses per input, teacher-forced scores (CTranslate2's
TranslationResult / ScoringResult, in text)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ScoringResult:
    """Teacher-forced log-probabilities of one target (as CTranslate2's ScoringResult)."""

    tokens: list[str]  # the scored tokens (a translation's final EOS included)
    token_ids: list[int]
    log_probs: list[float]  # natural log, one per token

    @property
    def total(self) -> float:
        return float(sum(self.log_probs))

    @property
    def normalized(self) -> float:
        """Mean log-probability per token (the length-normalised score)."""
        return self.total / max(len(self.log_probs), 1)

    @property
    def perplexity(self) -> float:
        return math.exp(-self.normalized)


@dataclass(frozen=True)
class TextHypothesis:
    """One hypothesis of a TranslationResult / GenerationResult."""

    text: str  # a translation: its target prefix included; a generation: what follows the prompt
    ids: list[int]  # token ids of `text` (no BOS / end token; see `stop` for a stop string)
    score: float  # sum(log_probs) / len(log_probs) ** length_penalty
    # natural-log probability of each id, then of the end token when it ended with one
    log_probs: list[float]


@dataclass(frozen=True)
class TranslationResult:
    """What translate_results gives per input (CTranslate2's TranslationResult, in text):
    beam search: the num_hypotheses best, best first; sampling: num_hypotheses samples;
    return_alternatives: one per top-k token after the prefix, in that order."""

    hypotheses: list[TextHypothesis]

    @property
    def text(self) -> str:
        return self.hypotheses[0].text

    @property
    def score(self) -> float:
        return self.hypotheses[0].score


@dataclass(frozen=True)
class GenerationResult(TranslationResult):
    """What generate_results gives per prompt (same fields as TranslationResult)."""
