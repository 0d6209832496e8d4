"""Calibrating "does the store answer this?" across wordings: five datasets, each with questions the store
answers and questions it does not, and every dataset held out in turn.

- squad: SQuAD v1.1 dev, the 24 even articles stored; questions of the other 24 have no answer (300 + 300).
- scifact: SciFact's corpus without the judged abstracts of half its test claims; those claims have no
  answer (150 + 150). Scientific claims, not questions, in words close to their abstracts.
- musique: MuSiQue's closed corpus without the supporting paragraphs of half its questions (100 + 100);
  the paragraphs about the same entities stay, so "not stored" is hard to tell here.
- docsets: the documentation-set benchmark's Sphinx and Jest trees stored; all 64 questions asked, the Typer
  and Hugo ones about tools the store does not hold (32 + 32).
- demo: the bundled demo's 8 paraphrased questions, and 8 a letting agency's client might ask that its
  documents do not answer (below).

For each question one chunk_retriever search (HyDE off) gives the raw signals (`confidence.signals` and the
candidates they come from), cached in results/answerability/. Then, for each set of signals, a logistic
model is fitted on four datasets and checked on the fifth, each dataset in turn; the threshold of "low" is
chosen on those held-out predictions (PRECISION, MAX_FLAGGED, none of the demo's), and each dataset reports
the share of its answerable questions flagged and of its unanswerable ones caught. The model fitted on all
five is the one confidence.py ships.

    python -m benchmarks.answerability            # collect (cached) and report
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from agent_retrieval import ChunkSearchRequest, Context, Retrieval, demo, load_documents
from agent_retrieval.core.text import entity_terms, keyword_terms
from agent_retrieval.evaluation import load_beir
from agent_retrieval.search.confidence import calibrated, is_low, signals
from benchmarks.answers import MUSIQUE, SQUAD, article_document, flat

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
CACHE = RESULTS / "answerability"
SCIFACT = ROOT.parent.parent / "shared" / "datasets" / "scifact"
DOCSETS = ROOT / "docsets"
DATASETS = ("squad", "scifact", "musique", "docsets", "demo")
MODEL = "local/all-MiniLM-L6-v2"  # the default embedder, which the shipped calibration is for
# What a client of the demo's letting agency might ask that none of its documents answers (each checked
# against the corpus: its council tax band and the notice before a visit are stated there).
DEMO_UNANSWERED = [
    "Can I keep a dog in my flat if the landlord agrees?",
    "Can I sublet a room in my flat to a lodger?",
    "How do I get a parking permit for my street?",
    "Which broadband providers serve Wexcombe?",
    "How much stamp duty will I pay on a first home?",
    "Which schools are near Orchard House?",
    "What are the branch's opening hours on Saturdays?",
    "Do you handle commercial property lettings?",
]

Row = dict[str, Any]  # dataset, question, answerable, and the signals


def collect(name: str, retrieval: Retrieval, questions: list[tuple[str, bool]]) -> list[Row]:
    """What one chunk_retriever search says of each question: the signals' raw material."""
    rows = []
    spread = store_spread(Path(retrieval.context.store.db_path))
    for question, answerable in tqdm(questions, desc=name, unit="question"):
        found = retrieval.candidates(ChunkSearchRequest(query=question, top_k=10, hyde="off"), "chunks")
        row = {"dataset": name, "question": question, "answerable": answerable, **raw(found, question)}
        if found.query_embedding is not None and found.query_embedding.vector is not None:
            row["standing"] = standing(row["sims"], np.asarray(found.query_embedding.vector), *spread)
        rows.append(row)
    return rows


def store_spread(db: Path) -> tuple[Any, Any]:
    """The mean and covariance of a store's passage vectors: a query's similarity to a random passage has
    mean q.mu and variance q'Sq, which tell how far its best match stands above the store as a whole."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT embedding FROM chunks WHERE embedding IS NOT NULL").fetchall()
    vectors = np.array([np.frombuffer(blob, dtype=np.float32) for (blob,) in rows])
    return vectors.mean(axis=0), np.cov(vectors, rowvar=False)


def standing(sims: list[float], query: Any, mean: Any, covariance: Any) -> float:
    """The best similarity in standard deviations above the query's mean similarity to the store."""
    best = sims[0] if sims else 0.0
    return float((best - query @ mean) / np.sqrt(max(float(query @ covariance @ query), 1e-9)))


def raw(found: Any, question: str) -> dict[str, Any]:
    vector, keyword = found.vector_hits, found.keyword_hits
    texts = " ".join(f"{h.title} {h.heading_path or ''} {h.content}" for h in [*vector, *keyword]).lower()
    names = entity_terms(question)
    best = keyword[0] if keyword else None
    return {
        "sims": [h.vector_similarity for h in vector[:20]],
        "coverage": best.keyword_coverage if best else 0.0,
        "unknown": best.unknown_terms if best else 0,
        "agreed": next((h.vector_similarity for h in vector if best and h.key == best.key), 0.0),
        "terms": len(keyword_terms(question)),
        "names": len(names),
        "names_missing": sum(name.lower() not in texts for name in names),
        "signals": list(signals(vector, keyword)),
    }


def _store(name: str) -> Retrieval:
    return Retrieval(Context(db_path=str(CACHE / f"{name}.db")))


def squad(chance: random.Random) -> Iterator[tuple[Retrieval, list[tuple[str, bool]]]]:
    data = json.loads(SQUAD.read_text(encoding="utf-8"))["data"]
    with _store("squad") as retrieval:
        stored = [article_document(a) for n, a in enumerate(data) if n % 2 == 0]
        retrieval.ingest_documents(stored, progress=True)
        asked = {True: [], False: []}  # type: dict[bool, list[str]]
        for n, article in enumerate(data):
            for paragraph in article["paragraphs"]:
                asked[n % 2 == 0] += [flat(qa["question"]) for qa in paragraph["qas"]]
        yield retrieval, [(q, kind) for kind in (True, False) for q in chance.sample(asked[kind], 300)]


def _without(name: str, folder: Path, split: str, chance: random.Random) -> Iterator[Any]:
    """A BEIR corpus stored whole once, then copied without the judged documents of half its queries."""
    dataset = load_beir(folder, split)
    whole = CACHE / f"{name}-whole.db"
    with Retrieval(Context(db_path=str(whole))) as retrieval:
        retrieval.ingest_documents(dataset.documents(), progress=True)
    queries = sorted(dataset.qrels)
    gone = set(chance.sample(queries, len(queries) // 2))
    removed = {doc for q in gone for doc in dataset.qrels[q]}
    kept = [q for q in queries if q not in gone and not removed & set(dataset.qrels[q])]
    shutil.copy(whole, CACHE / f"{name}.db")
    with _store(name) as retrieval:
        retrieval.store.delete_documents(sorted(removed))
        yield (
            retrieval,
            [(dataset.queries[q], True) for q in kept] + [(dataset.queries[q], False) for q in sorted(gone)],
        )


def scifact(chance: random.Random) -> Iterator[Any]:
    yield from _without("scifact", SCIFACT, "test", chance)


def musique(chance: random.Random) -> Iterator[Any]:
    yield from _without("musique", MUSIQUE, "test", chance)


def docsets(chance: random.Random) -> Iterator[Any]:
    stored = ("sphinx", "jest")
    with _store("docsets") as retrieval:
        documents = load_documents([DOCSETS / name for name in stored], skipped=[])
        retrieval.ingest_documents(documents, progress=True)
        asked = json.loads((DOCSETS / "questions.json").read_text(encoding="utf-8"))
        yield retrieval, [(q["q"], q["set"] in stored) for q in asked]


def demo_questions(chance: random.Random) -> Iterator[Any]:
    with _store("demo") as retrieval:
        documents = load_documents([demo.corpus_dir()])
        retrieval.ingest_documents(documents, progress=False)
        answered = [(q["question"], True) for q in demo.questions()]
        yield retrieval, answered + [(q, False) for q in DEMO_UNANSWERED]


SOURCES: dict[str, Callable[[random.Random], Iterator[Any]]] = {
    "squad": squad,
    "scifact": scifact,
    "musique": musique,
    "docsets": docsets,
    "demo": demo_questions,
}


def rows(name: str, refresh: bool = False) -> list[Row]:
    cached = CACHE / f"{name}.json"
    if cached.exists() and not refresh:
        return list(json.loads(cached.read_text(encoding="utf-8")))
    CACHE.mkdir(parents=True, exist_ok=True)
    for retrieval, questions in SOURCES[name](random.Random(11)):
        found = collect(name, retrieval, questions)
    cached.write_text(json.dumps(found), encoding="utf-8")
    return found


# Signals measured beside the shipped ones, from the same searches (the ablation in BENCHMARKS).
CANDIDATES: dict[str, Callable[[Row], float]] = {
    "best vector similarity": lambda r: r["sims"][0] if r["sims"] else 0.0,
    "the best keyword hit's similarity": lambda r: r["agreed"],
    "the best keyword hit's coverage": lambda r: r["coverage"] or 0.0,
    "words no stored passage holds": lambda r: float(r["unknown"] or 0),
    "their share of the question's words": lambda r: (r["unknown"] or 0) / max(r["terms"], 1),
    "the question's names no candidate holds": lambda r: float(r["names_missing"]),
    "the best similarity less the mean of the next nine": lambda r: (
        r["sims"][0] - sum(r["sims"][1:10]) / len(r["sims"][1:10]) if len(r["sims"]) > 1 else 0.0
    ),
    "the best similarity's standing in the store": lambda r: r.get("standing", 0.0),
}
SETS = {
    "shipped (confidence.signals)": ["best vector similarity", "the best keyword hit's similarity"],
    "+ coverage": [
        "best vector similarity",
        "the best keyword hit's similarity",
        "the best keyword hit's coverage",
    ],
    "+ coverage + unknown words (shipped before)": [
        "best vector similarity",
        "the best keyword hit's coverage",
        "the best keyword hit's similarity",
        "words no stored passage holds",
    ],
    "+ unknown words' share": [
        "best vector similarity",
        "the best keyword hit's similarity",
        "their share of the question's words",
    ],
    "+ names missing": [
        "best vector similarity",
        "the best keyword hit's similarity",
        "the question's names no candidate holds",
    ],
    "+ the gap to the next nine": [
        "best vector similarity",
        "the best keyword hit's similarity",
        "the best similarity less the mean of the next nine",
    ],
    "+ the best similarity's standing in the store": [
        "best vector similarity",
        "the best keyword hit's similarity",
        "the best similarity's standing in the store",
    ],
    "the standing in place of the best similarity": [
        "the best similarity's standing in the store",
        "the best keyword hit's similarity",
    ],
}
PRECISION = 0.9  # of "low": at least this share of the questions called low has no answer stored
MAX_FLAGGED = 0.1  # of any dataset's answerable questions called low


def fit(features: Any, labels: Any) -> Any:
    """A logistic model of `features`, the two classes weighted alike."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced").fit(features, labels)


def held_out(features: dict[str, Any], labels: dict[str, Any]) -> dict[str, Any]:
    """Each dataset's probabilities from a model fitted on the other four."""
    found = {}
    for name in features:
        others = [n for n in features if n != name]
        model = fit(
            np.concatenate([features[n] for n in others]), np.concatenate([labels[n] for n in others])
        )
        found[name] = model.predict_proba(features[name])[:, 1]
    return found


def threshold(probabilities: dict[str, Any], labels: dict[str, Any]) -> float:
    """The highest threshold at which held-out "low" has PRECISION, flags at most MAX_FLAGGED of any
    dataset's answerable questions, and none of the demo's (0 if none does)."""
    chosen = 0.0
    for candidate in np.arange(0.01, 0.8, 0.01):
        low = {n: probabilities[n] < candidate for n in probabilities}
        caught = sum(int((low[n] & ~labels[n]).sum()) for n in low)
        called = sum(int(low[n].sum()) for n in low)
        flagged = {n: float(low[n][labels[n]].mean()) for n in low}
        if (
            called
            and caught / called >= PRECISION
            and max(flagged.values()) <= MAX_FLAGGED
            and not flagged["demo"]
        ):
            chosen = float(candidate)
    return round(chosen, 2)


def reliability(probabilities: dict[str, Any], labels: dict[str, Any], bins: int = 10) -> dict[str, Any]:
    """Per dataset, the held-out probabilities in `bins` equal bins: each bin's questions and the share of
    them the store answers (a calibrated model's share is near its bin's probability)."""
    out = {}
    for name, found in probabilities.items():
        placed = np.minimum((found * bins).astype(int), bins - 1)
        out[name] = [
            {
                "bin": b / bins,
                "questions": int((placed == b).sum()),
                "answerable": int(labels[name][placed == b].sum()),
            }
            for b in range(bins)
        ]
    return out


def rates(low: Any, labels: Any) -> dict[str, float]:
    return {
        "answerable flagged %": round(100 * float(low[labels].mean()), 1),
        "unanswerable caught %": round(100 * float(low[~labels].mean()), 1),
    }


def report(data: dict[str, list[Row]]) -> dict[str, Any]:
    labels = {n: np.array([r["answerable"] for r in rows]) for n, rows in data.items()}
    out: dict[str, Any] = {
        "questions": {
            n: {"answerable": int(y.sum()), "unanswerable": int((~y).sum())} for n, y in labels.items()
        }
    }
    for title, names in SETS.items():
        features = {
            n: np.array([[CANDIDATES[c](r) for c in names] for r in rows]) for n, rows in data.items()
        }
        probabilities = held_out(features, labels)
        low = threshold(probabilities, labels)
        model = fit(np.concatenate(list(features.values())), np.concatenate(list(labels.values())))
        out[title] = {
            "threshold (held out)": low,
            "reliability (held out)": reliability(probabilities, labels),
            "held out": {n: rates(probabilities[n] < low, labels[n]) for n in data},
            "weights": [round(float(w), 3) for w in model.coef_[0]],
            "intercept": round(float(model.intercept_[0]), 3),
        }
    out["shipped calibration, each dataset"] = {
        n: rates(np.array([is_low(calibrated(r["signals"], MODEL)) for r in rows]), labels[n])
        for n, rows in data.items()
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--refresh", action="store_true", help="search again instead of reading the cache")
    args = parser.parse_args()
    result = report({name: rows(name, args.refresh) for name in DATASETS})
    (RESULTS / "answerability.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
