"""Calibrating "does the store answer this?": SQuAD v1.1 dev questions against a store holding half of the
articles, so the other half's questions have no answer in it.

Every other article (the even ones, 24 of 48) is stored, chunked as any document is. For seeded questions
of all 48 articles, one chunk_retriever search gives the three signals `confidence.py` reads: the best
vector similarity, the best keyword hit's coverage of the question, and that hit's vector similarity. A
logistic regression is fitted on the questions of the first 24 articles and checked on the last 24
(articles never fitted on): the share of unanswerable questions called answerable (false answers) and of
answerable ones still answered, at the threshold that keeps 95% of the fitted answerable questions; then
the same for the calibration the library ships.

    python -m benchmarks.answerability             # 1,200 questions; prints the coefficients
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from agent_retrieval.confidence import LOW, calibrated, signals
from agent_retrieval.context import Context
from agent_retrieval.ingest import ingest
from agent_retrieval.models import ChunkSearchRequest
from agent_retrieval.search.retrieval import Retrieval
from benchmarks.answers import SQUAD, article_document, flat

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
KEEP = 0.95  # of answerable questions, at the threshold
MODEL = "local/all-MiniLM-L6-v2"  # the default embedder, which the shipped calibration is for


def search_signals(retrieval: Retrieval, question: str) -> tuple[float, float, float]:
    """The signals `confidence.py` reads, from the candidates of one chunk_retriever search."""
    found = retrieval.candidates(ChunkSearchRequest(query=question, top_k=10, hyde="off"), "chunks")
    return signals(found.vector_hits, found.keyword_hits)


def run(questions: int, seed: int = 11) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression

    data = json.loads(SQUAD.read_text(encoding="utf-8"))["data"]
    stored = [a for n, a in enumerate(data) if n % 2 == 0]
    pool = [
        (n, flat(qa["question"]), n % 2 == 0)
        for n, article in enumerate(data)
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    asked = random.Random(seed).sample(pool, questions)
    context = Context(db_path=str(RESULTS / "squad-half.db"))
    with Retrieval(context) as retrieval:
        documents = [article_document(article) for article in stored]
        ingest(documents, retrieval.store, retrieval.embedder, context, progress=True)
        rows = [
            (n, *search_signals(retrieval, q), answerable)
            for n, q, answerable in tqdm(asked, unit="question")
        ]
    features = np.array([r[1:4] for r in rows])
    labels = np.array([a for *_, a in rows])
    fitted = np.array([n < len(data) // 2 for n, *_ in rows])
    model = LogisticRegression(C=10).fit(features[fitted], labels[fitted])
    scores = model.predict_proba(features)[:, 1]
    threshold = float(np.quantile(scores[fitted & labels], 1 - KEEP))
    held = ~fitted
    shipped = np.array([calibrated(row[1:4], MODEL) for row in rows])
    report = {
        "questions": questions,
        "weights": [round(float(w), 2) for w in model.coef_[0]],
        "intercept": round(float(model.intercept_[0]), 2),
        "threshold": round(threshold, 3),
        "held out": {
            "answerable questions": int((held & labels).sum()),
            "unanswerable questions": int((held & ~labels).sum()),
            "answerable still answered %": round(100 * float((scores[held & labels] >= threshold).mean()), 1),
            "false answers %": round(100 * float((scores[held & ~labels] >= threshold).mean()), 1),
        },
        # the calibration agent_retrieval ships (confidence.py), on the same questions
        "shipped, held out": {
            "answerable still answered %": round(100 * float((shipped[held & labels] >= LOW).mean()), 1),
            "false answers %": round(100 * float((shipped[held & ~labels] >= LOW).mean()), 1),
        },
        "fitted": {
            "answerable still answered %": round(
                100 * float((scores[fitted & labels] >= threshold).mean()), 1
            ),
            "false answers %": round(100 * float((scores[fitted & ~labels] >= threshold).mean()), 1),
        },
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=1200)
    args = parser.parse_args()
    report = run(args.questions)
    (RESULTS / "answerability.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
