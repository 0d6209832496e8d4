"""benchmarks/multihop.py end to end on a tiny folder: Recall@2/@5 by the folder's question types, and the
figure."""

from __future__ import annotations

import json

from agent_retrieval.evaluation import load_beir
from tests.benchmarks import load_script

CORPUS = {
    "p1": ("Dawn (film)", "Dawn is a 1931 drama film directed by Ann Roe."),
    "p2": ("Ann Roe", "Ann Roe was a film director, born in 1901 in Leeds."),
    "p3": ("Dusk (film)", "Dusk is a 1950 film directed by Bo Lin."),
    "p4": ("Bo Lin", "Bo Lin was a film director, born in 1920 in Porto."),
}
QUERIES = {
    "q1": ("When was the director of film Dawn born?", "compositional", ["p1", "p2"]),
    "q2": ("Which film came out first, Dawn or Dusk?", "comparison", ["p1", "p3"]),
}


def test_the_multihop_harness_reports_recall_by_question_type_and_draws(tmp_path, monkeypatch):
    multihop = load_script("multihop")
    folder = tmp_path / "mini"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, (t, x) in CORPUS.items())
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, (t, _, _) in QUERIES.items())
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q}\t{doc}\t1\n" for q, (_, _, docs) in QUERIES.items() for doc in docs)
    )
    (folder / "query_types.tsv").write_text("".join(f"{q}\t{kind}\n" for q, (_, kind, _) in QUERIES.items()))
    monkeypatch.setattr(multihop, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(multihop, "FIGURES", tmp_path / "figures")
    reports = multihop.main(["--datasets", str(folder)])
    report = reports["mini"]
    assert report["types"] == {"comparison": 1, "compositional": 1}
    for path in multihop.PATHS.values():
        groups = report["paths"][path]
        assert set(groups) == {"all", "comparison", "compositional"}
        assert set(groups["all"]) == set(multihop.MEASURES)
        assert groups["all"]["recall@5"] == 100.0  # four paragraphs: every supporting one in the top 5
    # the compared films first in the rag graph's retrieval
    assert report["paths"]["the rag graph's retrieval (plan)"]["comparison"]["recall@2"] == 100.0
    # which hop of each chain failed first: none here, and each paragraph's hop read off the texts
    assert report["failed_hop"] == {path: {"none": 2} for path in multihop.PATHS.values()}
    per_query = json.loads((tmp_path / "results" / "eval" / "mini-chunks" / "per_query.json").read_text())
    assert {doc: row["hop"] for doc, row in per_query["q1"]["modes"]["plan"].items()} == {"p1": 1, "p2": 2}
    per_query["q1"]["modes"]["plan"]["p2"]["rank"] = None  # had the director's paragraph been missed
    path = tmp_path / "per_query.json"
    path.write_text(json.dumps(per_query))
    texts = multihop.supporting_texts(load_beir(folder))
    assert multihop.hops_failed(path, texts)["plan"] == {"2": 1, "none": 1}
    assert (tmp_path / "figures" / "multihop_types.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "results" / "multihop.json").read_text())["mini"] == report
