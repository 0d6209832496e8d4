"""How likely it is that the store answers a query: a confidence from the search's own signals, calibrated.

Four signals say whether anything stored is about the question: the best vector similarity among the
candidates (meaning), how much of the question's words, weighted by rarity, the best keyword hit holds
(`keyword_coverage`), the vector similarity of that best keyword hit (both paths agreeing on one passage),
and how many of the question's words no stored passage holds (`unknown_terms`: a question about something
never stored asks for words the store has never seen, however close its meaning). A logistic model of the
four, fitted on SQuAD v1.1 dev questions against a store holding half of the articles
(`python -m benchmarks.answerability`), turns them into a probability that the answer is in the store;
below LOW a result says it probably is not. The fit holds for the embedder it was made with: other models'
similarities sit on other scales, so their results carry no confidence (None) rather than a wrong one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from agent_retrieval.models import Hit


@dataclass(frozen=True)
class Calibration:
    """A logistic model's weights: one per signal (`signals`), and the intercept."""

    weights: tuple[float, float, float, float]
    intercept: float


# benchmarks/answerability.py, 2026-11-27: fitted on the questions of SQuAD's first 24 articles.
CALIBRATIONS = {"local/all-MiniLM-L6-v2": Calibration(weights=(7.32, 6.15, 5.96, -2.1), intercept=-8.24)}
# The confidence that keeps 96% of the fitted answerable questions: below it, probably no answer stored.
LOW = 0.429


def signals(vector_hits: Sequence[Hit], keyword_hits: Sequence[Hit]) -> tuple[float, float, float, float]:
    """The best vector similarity, the best keyword hit's coverage of the query, that hit's vector
    similarity, and how many of the query's words no stored row holds (0 where a path found nothing, or the
    keyword hit is not among the vector candidates, or the store does not count them)."""
    similarity = max((hit.vector_similarity or 0.0 for hit in vector_hits), default=0.0)
    if not keyword_hits:
        return similarity, 0.0, 0.0, 0.0
    best = keyword_hits[0]
    agreed = next((hit.vector_similarity or 0.0 for hit in vector_hits if hit.key == best.key), 0.0)
    return similarity, best.keyword_coverage or 0.0, agreed, float(best.unknown_terms or 0)


def confidence(vector_hits: Sequence[Hit], keyword_hits: Sequence[Hit], model_id: str | None) -> float | None:
    """The probability that the store answers the query, from the candidates of a search whose vector side
    ran (`vector_hits` may be empty: nothing was similar enough); None for an uncalibrated embedder."""
    return calibrated(signals(vector_hits, keyword_hits), model_id)


def calibrated(found: Sequence[float], model_id: str | None) -> float | None:
    """The probability the model's calibration gives the `signals`; None for an uncalibrated embedder."""
    calibration = CALIBRATIONS.get(model_id or "")
    if calibration is None:
        return None
    z = calibration.intercept + sum(w * x for w, x in zip(calibration.weights, found, strict=True))
    return 1.0 / (1.0 + math.exp(-z))


def is_low(value: float | None) -> bool:
    """Whether a result's confidence says the store probably holds no answer (unknown is not low)."""
    return value is not None and value < LOW
