"""Calibrating "does the store answer this?": SQuAD v1.1 dev questions against a store holding half of the
articles, so the other half's questions have no answer in it.

Every other article (the even ones, 24 of 48) is stored, chunked as any document is. For seeded questions
of all 48 articles, one chunk_retriever search gives the four signals `confidence.py` reads: the best
vector similarity, the best keyword hit's coverage of the question, that hit's vector similarity, and how
many of the question's words no stored passage holds. A
logistic regression is fitted on the questions of the first 24 articles and checked on the last 24
(articles never fitted on): the share of unanswerable questions called answerable (false answers) and of
answerable ones still answered, at the threshold that keeps 96% of the fitted answerable questions; then
the same for the calibration the library ships, and the mean over 40 random halves of the articles (one
split's 300 unanswerable questions move the share by a few points).

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
KEEP = 0.96  # of the fitted answerable questions at the threshold: unseen ones run about half a point lower
SPLITS = 40  # random halves of the articles, fitted on one and checked on the other
SIGNALS = (  # confidence.signals, in order: each row of the report adds one
    "best vector similarity",
    "+ the best keyword hit's coverage",
    "+ that hit's vector similarity",
    "+ the question's words no stored passage holds",
)
MODEL = "local/all-MiniLM-L6-v2"  # the default embedder, which the shipped calibration is for


def search_signals(retrieval: Retrieval, question: str) -> tuple[float, ...]:
    """The signals `confidence.py` reads, from the candidates of one chunk_retriever search."""
    found = retrieval.candidates(ChunkSearchRequest(query=question, top_k=10, hyde="off"), "chunks")
    return signals(found.vector_hits, found.keyword_hits)


def run(questions: int, seed: int = 11, squad: Path = SQUAD, results: Path = RESULTS) -> dict[str, Any]:
    data = json.loads(squad.read_text(encoding="utf-8"))["data"]
    stored = [a for n, a in enumerate(data) if n % 2 == 0]
    pool = [
        (n, flat(qa["question"]), n % 2 == 0)
        for n, article in enumerate(data)
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    ]
    asked = random.Random(seed).sample(pool, questions)
    context = Context(db_path=str(results / "squad-half.db"))
    with Retrieval(context) as retrieval:
        documents = [article_document(article) for article in stored]
        ingest(documents, retrieval.store, retrieval.embedder, context, progress=True)
        rows = [
            (n, *search_signals(retrieval, q), answerable)
            for n, q, answerable in tqdm(asked, unit="question")
        ]
    features = np.array([r[1:-1] for r in rows])
    labels = np.array([a for *_, a in rows])
    articles = [n for n, *_ in rows]
    fitted = np.array([n < len(data) // 2 for n in articles])
    shipped = np.array([calibrated(row[1:-1], MODEL) for row in rows]) >= LOW
    by_signals = {}
    for count, name in enumerate(SIGNALS, start=1):  # the last, with every signal, is the model to ship
        some = features[:, :count]
        model, threshold = fit(some, labels, fitted)
        answers = model.predict_proba(some)[:, 1] >= threshold
        by_signals[name] = {
            "held out": shares(answers, labels, ~fitted),
            "fitted": shares(answers, labels, fitted),
            f"mean of {SPLITS} random halves, held out": splits(some, labels, articles),
        }
    return {
        "questions": questions,
        "weights": [round(float(w), 2) for w in model.coef_[0]],
        "intercept": round(float(model.intercept_[0]), 2),
        "threshold": round(threshold, 3),
        "shipped (confidence.py), held out": shares(shipped, labels, ~fitted),
        "by signals": by_signals,
    }


def shares(answers: Any, labels: Any, rows: Any) -> dict[str, float]:
    """Of the chosen rows: the share of answerable questions answered, and of unanswerable ones."""
    return {
        "answerable still answered %": round(100 * float(answers[rows & labels].mean()), 1),
        "false answers %": round(100 * float(answers[rows & ~labels].mean()), 1),
    }


def fit(features: Any, labels: Any, fitted: Any) -> tuple[Any, float]:
    """The logistic model fitted on the `fitted` rows, and the threshold keeping KEEP of their answerable."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=10, max_iter=1000).fit(features[fitted], labels[fitted])
    scores = model.predict_proba(features[fitted & labels])[:, 1]
    return model, float(np.quantile(scores, 1 - KEEP))


def splits(features: Any, labels: Any, articles: list[int]) -> dict[str, float]:
    """`shares` on held-out articles, averaged over SPLITS random halves of the stored articles and of the
    others (both kinds of question in each half)."""
    found = []
    for seed in range(SPLITS):
        chance = random.Random(seed)
        chosen = [
            n
            for kind in (0, 1)
            for group in [sorted({a for a in articles if a % 2 == kind})]
            for n in chance.sample(group, len(group) // 2)
        ]
        fitted = np.isin(articles, chosen)
        model, threshold = fit(features, labels, fitted)
        found.append(shares(model.predict_proba(features)[:, 1] >= threshold, labels, ~fitted))
    return {key: round(float(np.mean([f[key] for f in found])), 1) for key in found[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=1200)
    args = parser.parse_args()
    report = run(args.questions)
    (RESULTS / "answerability.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
