"""benchmarks/answers.py and benchmarks/answerability.py end to end on a tiny SQuAD file and MuSiQue folder
(real rag graph, embedded store, local embedder), so that `make bench-answers` cannot rot."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import answerability, answers
from tests.beir import write_beir

TOPICS = {
    "Volcano": (
        "The Eyjafjallajokull volcano erupted in 2010.",
        "Its ash cloud grounded flights for six days.",
    ),
    "Deposit": (
        "A landlord must protect a deposit within 30 days.",
        "The deposit scheme returns it at the end.",
    ),
    "Orchard": ("The orchard grows Bramley apples on clay.", "Harvest begins in late September each year."),
    "Harbour": (
        "The harbour wall was rebuilt in granite in 1888.",
        "Fishing boats land crab and lobster there.",
    ),
}
QUESTIONS = {
    "Volcano": [
        ("Which volcano erupted in 2010?", "Eyjafjallajokull"),
        ("How long were flights grounded?", "six days"),
    ],
    "Deposit": [
        ("How soon must a landlord protect a deposit?", "30 days"),
        ("What returns the deposit?", "deposit scheme"),
    ],
    "Orchard": [
        ("Which apples does the orchard grow?", "Bramley"),
        ("When does the harvest begin?", "late September"),
    ],
    "Harbour": [
        ("What was the harbour wall rebuilt in?", "granite"),
        ("What do fishing boats land?", "crab"),
    ],
}


def squad_file(folder: Path) -> Path:
    data = []
    for title, paragraphs in TOPICS.items():
        rows = []
        for n, text in enumerate(paragraphs):
            question, answer = QUESTIONS[title][n]
            start = text.index(answer)
            qa = {
                "id": f"{title}-{n}",
                "question": question,
                "answers": [{"text": answer, "answer_start": start}],
            }
            rows.append({"context": text, "qas": [qa]})
        data.append({"title": title, "paragraphs": rows})
    path = folder / "squad.json"
    path.write_text(json.dumps({"data": data}), encoding="utf-8")
    return path


def musique_folder(folder: Path) -> Path:
    corpus = {
        "p1": ("Van Hook Township", "Van Hook Township is a township in Mountrail County, North Dakota."),
        "p2": ("Mountrail County", "Mountrail County's seat is Stanley, a city in North Dakota."),
    }
    question = "What is the seat of the county where Van Hook Township is located?"
    write_beir(
        folder,
        [{"_id": i, "title": t, "text": x} for i, (t, x) in corpus.items()],
        [{"_id": "2hop__a", "text": question}],
        ["2hop__a\tp1\t1", "2hop__a\tp2\t1"],
    )
    (folder / "answers.jsonl").write_text(json.dumps({"_id": "2hop__a", "answers": ["Stanley"]}) + "\n")
    return folder


def test_the_answers_bench_measures_passages_neighbours_and_offline_answers(tmp_path):
    report = answers.run(6, squad=squad_file(tmp_path), results=tmp_path)
    assert report["documents"] == 4 and report["questions"] == 6
    assert report["answer in the passages"] == 100.0  # four short articles: every answer is found
    assert 0 < report["answer in the offline answer"] <= 100
    for found in report["neighbors"].values():
        assert found["answer sentence in the first 1"] <= found["answer sentence in the first 6"] == 100.0
    assert answers.musique(musique_folder(tmp_path / "musique"), results=tmp_path) == {
        "questions": 1,
        "answer in the offline answer": 100.0,
    }


def test_the_answerability_bench_holds_each_dataset_out(tmp_path, monkeypatch):
    """The demo's questions, searched for real, stand in for all five datasets: each is held out in turn."""
    monkeypatch.setattr(answerability, "CACHE", tmp_path)
    found = answerability.rows("demo")
    assert (tmp_path / "demo.json").exists() and len(found) == 16
    data = {name: [dict(row, dataset=name) for row in found] for name in answerability.DATASETS}
    report = answerability.report(data)
    assert report["questions"]["demo"] == {"answerable": 8, "unanswerable": 8}
    shipped = report["shipped (confidence.signals)"]
    assert len(shipped["weights"]) == 2 and 0 <= shipped["threshold (held out)"] < 1
    for rates in [*shipped["held out"].values(), *report["shipped calibration, each dataset"].values()]:
        assert set(rates) == {"answerable flagged %", "unanswerable caught %"}
        assert all(0 <= share <= 100 for share in rates.values())
    bins = shipped["reliability (held out)"]["demo"]
    assert sum(b["questions"] for b in bins) == 16 and sum(b["answerable"] for b in bins) == 8
