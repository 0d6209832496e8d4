"""benchmarks/scale.py end to end on a tiny store: loaded into a fresh Postgres by `initial_load`, sized
against the embedded file, searched, its HNSW recall and keyword rankings checked."""

from __future__ import annotations

import json

from agent_retrieval.context import Context
from agent_retrieval.evaluation import load_beir
from agent_retrieval.ingest import ingest
from agent_retrieval.search.retrieval import Retrieval
from benchmarks import scale
from tests.beir import write_beir

CORPUS = {
    "d1": ("Tenancy deposits", "A landlord must protect a tenancy deposit within 30 days of receiving it."),
    "d2": ("Volcanic ash", "The 2010 eruption's ash cloud grounded flights across Europe for six days."),
    "d3": ("Apple orchards", "Bramley apples grow well on heavy clay and are picked in late September."),
}
QUERIES = {"q1": ("How soon must a deposit be protected?", "d1"), "q2": ("Why were flights grounded?", "d2")}


def test_a_store_is_loaded_sized_searched_and_checked(tmp_path):
    folder = write_beir(
        tmp_path / "beir",
        [{"_id": i, "title": t, "text": x} for i, (t, x) in CORPUS.items()],
        [{"_id": q, "text": text} for q, (text, _) in QUERIES.items()],
        [f"{q}\t{d}\t1" for q, (_, d) in QUERIES.items()],
    )
    store = tmp_path / "tiny.db"
    context = Context(db_path=str(store))
    with Retrieval(context) as retrieval:
        ingest(load_beir(folder).documents(), retrieval.store, retrieval.embedder, context, progress=False)

    output = tmp_path / "scale.json"
    report = scale.main(["--store", str(store), "--dataset", str(folder), "--output", str(output)])
    row = report["tiny.db"]
    assert row["load"]["rows"] == 6 and row["load"]["rows_per_second"] > 0  # three documents, one chunk each
    assert row["size_mb"]["chunks_postings"] > 0 and row["size_ratio"] > 0
    assert row["hnsw_recall_at_10"] == 1.0
    assert row["keyword_rankings"] == {"queries": 2, "same_top_10_scores": 2}
    assert row["hybrid_dsn"]["p95_ms"] >= row["hybrid_dsn"]["p50_ms"] > 0
    assert json.loads(output.read_text()) == report
