"""How likely it is that the store answers a query: a confidence from the search's own signals, calibrated.

Two signals: the best vector similarity among the candidates (is anything stored about this?) and the vector
similarity of the keyword side's best hit (do both paths agree on one passage?). A logistic model of the
two turns them into a probability that the answer is in the store. It was fitted on five datasets with
questions the store answers and questions it does not, each held out in turn to check it
(`python -m benchmarks.answerability`): SQuAD, SciFact, MuSiQue, the documentation-set benchmark and the
demo's paraphrased questions. Signals that held on one dataset failed on another: words the store has
never seen (`Hit.unknown_terms`) caught SQuAD's unanswerable questions and flagged the demo's paraphrased
answerable ones, so they are not used. Below LOW a result says the documents probably do not cover the
question: chosen on held-out predictions so that at least 90% of what is called low has no answer stored.
The fit holds for the embedder it was made with: other models' similarities sit on other scales, so their
results carry no confidence (None) rather than a wrong one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from agent_retrieval.models import Hit


@dataclass(frozen=True)
class Calibration:
    """A logistic model's weights: one per signal (`signals`), and the intercept."""

    weights: tuple[float, float]
    intercept: float


# benchmarks/answerability.py, 2026-11-29: fitted on all five datasets, each class weighted alike.
CALIBRATIONS = {"local/all-MiniLM-L6-v2": Calibration(weights=(3.02, 4.72), intercept=-3.574)}
# Below it, "probably not covered": the held-out threshold at which 90% or more of the questions called low
# had no answer stored, no dataset's answerable questions were flagged past 10%, and none of the demo's.
LOW = 0.2


def signals(vector_hits: Sequence[Hit], keyword_hits: Sequence[Hit]) -> tuple[float, float]:
    """The best vector similarity, and the vector similarity of the best keyword hit (0 where a path found
    nothing or that hit is not among the vector candidates)."""
    similarity = max((hit.vector_similarity or 0.0 for hit in vector_hits), default=0.0)
    if not keyword_hits:
        return similarity, 0.0
    best = keyword_hits[0]
    agreed = next((hit.vector_similarity or 0.0 for hit in vector_hits if hit.key == best.key), 0.0)
    return similarity, agreed


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
