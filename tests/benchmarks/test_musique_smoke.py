"""benchmarks/musique.py end to end on a tiny multi-hop folder: runs split by hop count, and the figure."""

from __future__ import annotations

import json

from tests.benchmarks import load_script


def test_the_musique_harness_splits_by_hop_count_and_draws(tmp_path, monkeypatch):
    musique = load_script("musique")
    folder = tmp_path / "mini"
    (folder / "qrels").mkdir(parents=True)
    corpus = {
        "p1": ("Van Hook Township", "Van Hook Township is a township in Mountrail County, North Dakota."),
        "p2": ("Mountrail County", "Mountrail County's seat is Stanley, a city in North Dakota."),
        "p3": ("Stanley, North Dakota", "Stanley was founded in 1902 beside the Great Northern railway."),
        "p4": ("Lake Sakakawea", "Lake Sakakawea is a reservoir on the Missouri River."),
    }
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, (t, x) in corpus.items())
    )
    queries = {
        "2hop__a": "What is the seat of the county where Van Hook Township is located?",
        "3hop1__b": "When was the seat of the county of Van Hook Township founded?",
    }
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items())
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n2hop__a\tp1\t1\n2hop__a\tp2\t1\n3hop1__b\tp1\t1\n3hop1__b\tp2\t1\n"
        "3hop1__b\tp3\t1\n"
    )
    monkeypatch.setattr(musique, "FIGURES", tmp_path / "figures")
    report = musique.main(folder, tmp_path / "results")
    for path in musique.PATHS.values():
        assert {g: report[path][g]["questions"] for g in report[path]} == {"2": 1, "3": 1, "all": 2}
        # four paragraphs only: every supporting one is in the top 5 of every path
        assert report[path]["all"]["all-gold@5"] == 100.0, (path, report[path])
    answered = report[musique.ANSWERED]["all"]
    assert answered["questions"] == 2 and answered["all-gold"] == 100.0 and answered["passages"] >= 2
    assert musique.plot(report).exists()
