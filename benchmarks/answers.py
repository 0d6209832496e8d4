"""What the rag graph answers from, on SQuAD v1.1 dev as real documents: each article one document (its
paragraphs as written), chunked as any document is (1,000 characters, 150 shared at an edge), so an answer
may sit at a chunk's edge or in the paragraph before the best match.

For seeded questions, the rag graph runs offline (heuristic planner, extractive answer, the local
all-MiniLM-L6-v2 embedder). Reported: the share of questions whose gold answer is in its passages and in
its offline (extractive) answer; then, with the passages read as a chat model reads them, with 0 to 2
neighbouring chunks on each side (`answer_neighbors`), the share of questions whose answer sentence (the
sentence of the question's paragraph holding the answer) is inside one of the first 1, 3 and 6 passages,
and the passages' mean length. Last, the offline answer's containment on MuSiQue dev.

    python -m benchmarks.answers                    # 300 questions
    python -m benchmarks.answers --questions 60     # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from tqdm import tqdm

from agent_retrieval import Context, Document, Hit, Retrieval
from agent_retrieval.graphs import rag
from agent_retrieval.ingest import ingest
from agent_retrieval.server.graph_parts import GraphParts

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
SQUAD = ROOT.parent.parent / "shared" / "datasets" / "squad" / "dev-v1.1.json"
MUSIQUE = ROOT.parent.parent / "shared" / "datasets" / "musique"
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
NEIGHBORS = (0, 1, 2)
PASSAGES = TypeAdapter(list[Hit])
TOP = (1, 3, 6)  # passages read: the first, the first three, all of answer_chunks (6)


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    answers: tuple[str, ...]
    sentence: str  # the sentence of the paragraph that holds the first answer


def flat(text: str) -> str:
    return " ".join(text.split())


def article_document(article: dict[str, Any]) -> Document:
    """A SQuAD article as a document: its title with spaces, its paragraphs as written."""
    text = "\n\n".join(flat(p["context"]) for p in article["paragraphs"])
    return Document(article["title"], article["title"].replace("_", " "), text)


def load(path: Path) -> tuple[list[Document], list[Question]]:
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    documents, questions = [], []
    for article in data:
        documents.append(article_document(article))
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                start = qa["answers"][0]["answer_start"]
                ends = [0, *(m.end() for m in SENTENCE_END.finditer(context)), len(context) + 1]
                begin = max(e for e in ends if e <= start)
                end = min(e for e in ends if e > start)
                questions.append(
                    Question(
                        qa["id"],
                        flat(qa["question"]),
                        tuple(a["text"] for a in qa["answers"]),
                        flat(context[begin:end]),
                    )
                )
    return documents, questions


def run(questions: int, seed: int = 7, squad: Path = SQUAD, results: Path = RESULTS) -> dict[str, Any]:
    documents, pool = load(squad)
    asked = random.Random(seed).sample(pool, questions)
    context = Context(db_path=str(results / "squad-articles.db"))
    sentence = {reach: dict.fromkeys(TOP, 0) for reach in NEIGHBORS}
    chars = dict.fromkeys(NEIGHBORS, 0.0)
    answer = contained = 0
    with Retrieval(context) as retrieval:
        ingest(documents, retrieval.store, retrieval.embedder, context, progress=True)
        graph = rag.build(GraphParts(retrieval=retrieval))
        for question in tqdm(asked, desc="squad", unit="question"):
            out = asyncio.run(graph.ainvoke({"messages": [("user", question.text)]}, context=context))
            contained += any(a in flat(out["answer"]) for a in question.answers)
            hits = PASSAGES.validate_python(out["hits"])
            answer += any(a in flat(hit.content) for a in question.answers for hit in hits)
            for reach in NEIGHBORS:  # the passages a chat model would read, with `reach` neighbours
                texts = [flat(hit.content) for hit in (retrieval.neighbors(hits, reach) if reach else hits)]
                for k in TOP:
                    sentence[reach][k] += any(question.sentence in text for text in texts[:k])
                chars[reach] += sum(map(len, texts)) / max(1, len(texts))
    return {
        "questions": questions,
        "documents": len(documents),
        "answer in the passages": round(100 * answer / questions, 1),
        "answer in the offline answer": round(100 * contained / questions, 1),
        "neighbors": {
            reach: {
                **{
                    f"answer sentence in the first {k}": round(100 * n / questions, 1)
                    for k, n in found.items()
                },
                "mean passage characters": round(chars[reach] / questions),
            }
            for reach, found in sentence.items()
        },
    }


def musique(folder: Path = MUSIQUE, results: Path = RESULTS) -> dict[str, Any]:
    """The offline answer on MuSiQue dev (its closed corpus of candidate paragraphs): the share of questions
    whose gold answer (or one of its aliases) the answer holds."""
    from agent_retrieval.evaluation import load_beir

    dataset = load_beir(folder)
    gold = {}
    for line in (folder / "answers.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        gold[row["_id"]] = row["answers"]
    context = Context(db_path=str(results / "musique.db"))
    contained = 0
    with Retrieval(context) as retrieval:
        ingest(dataset.documents(), retrieval.store, retrieval.embedder, context, progress=False)
        graph = rag.build(GraphParts(retrieval=retrieval))
        for qid, text in tqdm(dataset.queries.items(), desc="musique", unit="question"):
            out = asyncio.run(graph.ainvoke({"messages": [("user", text)]}, context=context))
            contained += any(flat(a) in flat(out["answer"]) for a in gold.get(qid, []))
    return {
        "questions": len(dataset.queries),
        "answer in the offline answer": round(100 * contained / len(dataset.queries), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=300)
    args = parser.parse_args()
    report = run(args.questions)
    report["musique"] = musique()
    out = RESULTS / ("answers.json" if args.questions == 300 else f"answers-{args.questions}.json")
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
