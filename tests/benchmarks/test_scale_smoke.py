"""benchmarks/scale.py end to end on a tiny store: loaded into a fresh Postgres by `initial_load`, sized
against the embedded file, searched, its HNSW recall and keyword rankings checked."""

from __future__ import annotations

import json
import re

from agent_retrieval.context import Context
from agent_retrieval.evaluation import load_beir
from agent_retrieval.ingest import ingest
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.stores.rpc import render_sql
from benchmarks import filtered, scale, sql_ab
from tests.beir import write_beir
from tests.stack import start_postgres

CORPUS = {
    "d1": ("Tenancy deposits", "A landlord must protect a tenancy deposit within 30 days of receiving it."),
    "d2": ("Volcanic ash", "The 2010 eruption's ash cloud grounded flights across Europe for six days."),
    "d3": ("Apple orchards", "Bramley apples grow well on heavy clay and are picked in late September."),
}
QUERIES = {"q1": ("How soon must a deposit be protected?", "d1"), "q2": ("Why were flights grounded?", "d2")}


def test_a_store_is_loaded_sized_searched_and_checked(tmp_path, monkeypatch):
    folder = write_beir(
        tmp_path / "beir",
        [{"_id": i, "title": t, "text": x} for i, (t, x) in CORPUS.items()],
        [{"_id": q, "text": text} for q, (text, _) in QUERIES.items()],
        [f"{q}\t{d}\t1" for q, (_, d) in QUERIES.items()],
    )
    store = tmp_path / "scifact-6.db"  # --keep names the kept schema by the store's size
    context = Context(db_path=str(store))
    with Retrieval(context) as retrieval:
        ingest(load_beir(folder).documents(), retrieval.store, retrieval.embedder, context, progress=False)

    monkeypatch.setattr(scale, "GROWTH_STACK", tmp_path / "kept-stack")
    arguments = ["--store", str(store), "--dataset", str(folder), "--keep"]
    output = tmp_path / "scale.json"
    report = scale.main([*arguments, "--output", str(output)])
    row = report["scifact-6.db"]
    assert row["load"]["rows"] == 6 and row["load"]["rows_per_second"] > 0  # three documents, one chunk each
    assert row["size_mb"]["chunks_postings"] > 0 and row["size_ratio"] > 0
    assert row["hnsw_recall_at_10"] == 1.0
    assert row["keyword_rankings"] == {"queries": 2, "same_top_10_scores": 2, "same_scored_by_the_store": 2}
    for search in ("hybrid_dsn", "keyword_sql", "keyword_dsn", "hybrid_tool_dsn"):
        assert row[search]["p95_ms"] >= row[search]["p50_ms"] > 0
    assert json.loads(output.read_text()) == report

    # the kept load, searched again without loading: the same rows found, nothing loaded
    again = scale.main([*arguments, "--searches-only", "--output", str(tmp_path / "again.json")])
    row_again = again["scifact-6.db"]
    assert "load" not in row_again and row_again["size_mb"].keys() == row["size_mb"].keys()
    assert row_again["keyword_rankings"] == row["keyword_rankings"] and row_again["hnsw_recall_at_10"] == 1.0

    # a Supabase user searching the rows of their tenant through PostgREST, beside the DSN path
    through = scale.main([*arguments, "--supabase", "--output", str(tmp_path / "supabase.json")])
    supabase = through["scifact-6.db"]["supabase"]
    for search in ("hybrid_sql", "keyword_sql", "hybrid_tool", "scoped_tool", "keyword_tool_kept"):
        assert supabase[search]["p95_ms"] >= supabase[search]["p50_ms"] > 0
    assert through["scifact-6.db"]["scoped_tool_dsn"]["p50_ms"] > 0

    # the kept load filtered as bench-filtered filters it, by the copy of a replicated store each row is (here
    # all copy 0): each filter is listed on its first call and both sides read its kept rows
    copies = """update bench_0k.chunks set metadata = metadata || '{"copy": 0}'"""
    start_postgres(tmp_path / "kept-stack").execute(copies)
    monkeypatch.setattr(filtered, "GROWTH_STACK", tmp_path / "kept-stack")
    monkeypatch.setattr(filtered, "DATASET", folder)
    monkeypatch.setattr(filtered, "RESULTS", tmp_path)
    for row in filtered.main(["--kept", "6", "--queries", "2"]).values():
        assert row["vector"]["recall_at_10"] == 1.0 and row["keyword"]["equal_to_every_row"] == "2/2"
        tool = row["hybrid_tool"]
        assert tool["first_call_ms"] > 0 and tool["p95_ms"] >= tool["p50_ms"] > 0

    # and the search SQL of a revision against this checkout's on it, alternately: here the same SQL
    stack = str(tmp_path / "kept-stack")
    ab_arguments = ["--against", "HEAD", "--sizes", "6", "--stack", stack, "--dataset", str(folder)]
    ab = sql_ab.main([*ab_arguments, "--output", str(tmp_path / "ab.json")])
    assert ab["bench_0k"]["same_keyword_scores"] == "4 of 4"  # two queries, twice
    assert ab["bench_0k"]["hybrid before"]["p50_ms"] > 0 and ab["bench_0k"]["keyword after"]["p50_ms"] > 0
    before = "select count(*) from pg_proc where proname like '%\\_\\_before'"
    assert start_postgres(tmp_path / "kept-stack").execute(before) == [(0,)]  # the load keeps only ours


def test_a_revisions_search_functions_are_renamed_to_run_beside_these():
    renamed = sql_ab.search_functions(render_sql("s", 384), "s")
    defined = set(re.findall(r"create or replace function s\.(\w+)\(", renamed))
    assert {"keyword_search_chunks__before", "hybrid_search_chunks__before", "bm25_chunks__before"} <= defined
    assert all(name.endswith("_chunks__before") for name in defined)  # the chunks level only
    assert "index_chunks__before" not in defined  # writers (triggers) stay this checkout's
    # each calls the others by their new names, never this checkout's
    assert "s.bm25_chunks(" not in renamed and "s.bm25_chunks__before(" in renamed
