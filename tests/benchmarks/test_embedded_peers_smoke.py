"""benchmarks/embedded_peers.py end to end on a tiny corpus: every peer (LanceDB, Chroma, sqlite-vec beside
FTS5) is built from our store's own chunks and vectors, searched in its own process, and scored."""

from __future__ import annotations

import json

from agent_retrieval.context import Context
from agent_retrieval.evaluation import load_beir
from agent_retrieval.ingest import ingest
from agent_retrieval.search.retrieval import Retrieval
from benchmarks import embedded_peers
from tests.beir import write_beir

CORPUS = {
    "d1": ("Tenancy deposits", "A landlord must protect a tenancy deposit within 30 days of receiving it."),
    "d2": ("Volcanic ash", "The 2010 eruption's ash cloud grounded flights across Europe for six days."),
    "d3": ("Apple orchards", "Bramley apples grow well on heavy clay and are picked in late September."),
    "d4": ("Harbour walls", "The harbour wall was rebuilt in granite after the storm of 1888."),
}
QUERIES = {"q1": ("How soon must a deposit be protected?", "d1"), "q2": ("Why were flights grounded?", "d2")}


def test_every_peer_is_built_from_our_chunks_and_measured(tmp_path):
    folder = write_beir(
        tmp_path / "beir",
        [{"_id": i, "title": t, "text": x} for i, (t, x) in CORPUS.items()],
        [{"_id": q, "text": text} for q, (text, _) in QUERIES.items()],
        [f"{q}\t{d}\t1" for q, (_, d) in QUERIES.items()],
    )
    store = tmp_path / "ours.db"
    context = Context(db_path=str(store))
    with Retrieval(context) as retrieval:
        ingest(load_beir(folder).documents(), retrieval.store, retrieval.embedder, context, progress=False)

    report = embedded_peers.main(
        [
            *("--sizes", "4", "--dataset", str(folder), "--quality-store", str(store), "--store", str(store)),
            *("--work", str(tmp_path / "work"), "--out", str(tmp_path / "peers.json")),
        ]
    )
    assert list(report["quality"]) == list(embedded_peers.SYSTEMS)
    for system, scores in report["quality"].items():
        assert scores["recall@100"] == 100.0, system  # four chunks: every system finds both documents
    for system, row in report["4 chunks"].items():
        assert row["p50_ms"] > 0 and row["p95_ms"] >= row["p50_ms"] and row["disk_mb"] > 0, (system, row)
    assert json.loads((tmp_path / "peers.json").read_text()) == report
