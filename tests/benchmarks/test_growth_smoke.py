"""benchmarks/latency.py and benchmarks/growth.py end to end on a tiny corpus: the embedded stores built by
copying its chunks, the tool timed on each with its memory, then each copied into Postgres by
`initial_load` and the same tool call timed there (`make bench`, then `make bench-growth`)."""

from __future__ import annotations

import json

from benchmarks import growth, latency
from tests.beir import write_beir

CORPUS = {
    "d1": ("Tenancy deposits", "A landlord must protect a tenancy deposit within 30 days of receiving it."),
    "d2": ("Volcanic ash", "The 2010 eruption's ash cloud grounded flights across Europe for six days."),
    "d3": ("Apple orchards", "Bramley apples grow well on heavy clay and are picked in late September."),
}
QUERIES = {"q1": ("How soon must a deposit be protected?", "d1"), "q2": ("Why were flights grounded?", "d2")}


def test_the_curve_is_measured_on_both_stores(tmp_path, monkeypatch):
    dataset = write_beir(
        tmp_path / "beir",
        [{"_id": i, "title": t, "text": x} for i, (t, x) in CORPUS.items()],
        [{"_id": q, "text": text} for q, (text, _) in QUERIES.items()],
        [f"{q}\t{d}\t1" for q, (_, d) in QUERIES.items()],
    )
    (dataset / "qrels" / "train.tsv").write_text((dataset / "qrels" / "test.tsv").read_text())  # warm-up
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(latency, "DATASET", dataset)
    monkeypatch.setattr(latency, "RESULTS", results)
    monkeypatch.setattr(growth, "RESULTS", results)
    monkeypatch.setattr(growth, "GROWTH_STACK", tmp_path / "postgres")

    embedded = latency.main(["--sizes", "3", "6", "--keyword-floor"])
    assert [embedded[size]["chunks"] for size in ("3", "6")] == [3, 6]  # the base, then two copies of it
    for row in embedded.values():
        assert row["p95_ms"] >= row["p50_ms"] > 0 and row["peak_rss_mb"] > 0
        assert row["vector_search"]["graph_recall@10"] == 1.0  # below the threshold: the same exact scan
        assert row["keyword_floor"]["p95_ms"] >= row["keyword_floor"]["p50_ms"] > 0

    report = growth.main(["--sizes", "3", "6"])
    for size, row in report.items():
        assert row["embedded"]["p50_ms"] == embedded[str(size)]["p50_ms"]
        assert row["postgres"]["p95_ms"] >= row["postgres"]["p50_ms"] > 0
        assert row["postgres"]["database_mb"] > 0 and row["embedded"]["file_mb"] > 0
    assert json.loads((results / "growth.json").read_text()) == json.loads(json.dumps(report))
