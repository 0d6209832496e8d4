"""Filtered search on Postgres at 100K chunks: filters keeping 50%, 5% and 0.5% of the rows, through the
SQL functions a Supabase caller and every filtered DSN search run (`match_chunks`, `keyword_search_chunks`).

Copies benchmarks/latency.py's embedded store of 100,000 SciFact chunks (`python benchmarks/latency.py
--sizes 100000` builds it) into a fresh Postgres, gives every chunk a `bucket` (its row number mod 200), and
for each filter over SciFact test queries measures:

- the vector side as the tools ask it (`candidates`, 100 rows): recall@10 of its first 10 against the exact
  top 10 of the rows the filter keeps, and its p50/p95;
- the keyword side: whether its top 10 scores equal BM25 over every row the filter keeps, and its p50/p95;
- `chunk_retriever`'s hybrid search with the filter, as the tools run it (`Retrieval.search`, the query
  vectors given, so the model's time is left out): p50/p95, and the filter's first call, timed before any
  other search with it (a selective filter's rows are listed then, and kept for the calls after it).

    python -m benchmarks.filtered [--queries 50] [--folder DIR]   # DIR keeps the load between runs
    python -m benchmarks.filtered --supabase   # searched through PostgREST by a user of the rows' tenant
    python -m benchmarks.filtered --kept 1000000 --supabase   # bench-scale's kept load of 1M chunks

A kept load (`python -m benchmarks.scale --sizes N --keep [--supabase]`) is filtered by each chunk's `copy`
(the replicated store's copy number, one of about 112 at 1M): 56, 6 and 1 copies keep 50%, 5% and 0.9%.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_retrieval import (
    Context,
    Embedder,
    EmbeddingSettings,
    PostgresStore,
    Retrieval,
    RunSettings,
    Store,
    SupabaseStore,
    make_embedder,
)
from agent_retrieval.evaluation import load_beir
from agent_retrieval.models import ChunkSearchRequest, parse_request
from benchmarks.embedded_peers import percentiles
from benchmarks.latency import DATASET, RESULTS
from benchmarks.postgres import GROWTH_STACK, growth_schema, start_postgres_for_loads, timed
from benchmarks.scale import SUPABASE_TENANT, KnownVectors, Supabase, load

SCHEMA = "filtered_100k"
BUCKETS = ("bucket", {"50%": list(range(100)), "5%": list(range(10)), "0.5%": [0]})  # kept, of 200
CANDIDATES = RunSettings().candidates  # the rows each side of a tool's search asks for
COPIES = ("copy", {"50%": list(range(56)), "5%": list(range(6)), "0.9%": [0]})  # kept, of about 112 at 1M


def measure(
    postgres: Any,
    schema: str,
    store: Store,
    texts: list[str],
    vectors: list[Any],
    model_id: str,
    filtering: tuple[str, dict[str, list[int]]] = BUCKETS,
) -> dict[str, Any]:
    """Each filter's recall and times of `store`'s searches, against exact search over `schema`'s rows."""
    report: dict[str, Any] = {}
    key, kinds = filtering
    embedder = Embedder(KnownVectors(dict(zip(texts, vectors, strict=True))), model_id)
    retrieval = Retrieval(Context(), store=store, embedder=embedder)
    for name, values in kinds.items():
        filters = {key: values if len(values) > 1 else values[0]}
        kept = f"(metadata->>'{key}')::int = any(array{values})"
        asked = [
            parse_request(ChunkSearchRequest, {"query": text, "top_k": 10, "hyde": "off", "filters": filters})
            for text in texts
        ]
        started = time.perf_counter()  # the filter's first search: a selective one lists its rows
        retrieval.search(asked[0], "chunks")
        first_call = 1000 * (time.perf_counter() - started)
        recalls, vector_times = [], []
        for vector in vectors:
            literal = "[" + ",".join(f"{x:.7f}" for x in vector) + "]"
            exact = postgres.execute(
                f"select id from {schema}.chunks where {kept} "
                f"order by (embedding <=> '{literal}'::vector) + 0 limit 10"  # "+ 0": no index
            )
            started = time.perf_counter()
            hits = store.vector_search("chunks", vector, CANDIDATES, filters=filters)
            found = {h.id for h in hits[:10]}
            vector_times.append(1000 * (time.perf_counter() - started))
            recalls.append(len({row for (row,) in exact} & found) / len(exact))
        equal, keyword_times = 0, []
        for text in texts:
            started = time.perf_counter()
            found_scores = [
                h.keyword_score for h in store.keyword_search("chunks", text, 10, filters=filters)
            ]
            keyword_times.append(1000 * (time.perf_counter() - started))
            every_row = postgres.execute(
                f"""with w as (select * from {schema}.keyword_terms_chunks(%s, null))
                    select p.score from w, {schema}.parts_in_chunks(
                      (select array_agg(rowid) from {schema}.chunks where {kept}), w.terms, w.idfs,
                      (select sum(x) from unnest(w.counts) x), w.average_length, null) p
                    order by p.score desc, p.row_id limit 10""",
                (text,),
            )
            equal += [round(s, 6) for s in found_scores] == [round(s, 6) for (s,) in every_row]
        hybrid = timed(lambda request: retrieval.search(request, "chunks"), asked)
        report[name] = {
            "vector": {"recall_at_10": round(statistics.fmean(recalls), 4), **percentiles(vector_times)},
            "keyword": {"equal_to_every_row": f"{equal}/{len(texts)}", **percentiles(keyword_times)},
            "hybrid_tool": hybrid | {"first_call_ms": first_call},
        }
        print(name, json.dumps(report[name]), flush=True)
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--folder", type=Path, help="the Postgres folder; one that holds the load keeps it")
    parser.add_argument(
        "--kept", type=int, help="search bench-scale's kept load of this many chunks (filtered by copy)"
    )
    parser.add_argument(
        "--supabase",
        action="store_true",
        help="search through PostgREST as a signed-in user (the rows loaded in that user's tenant)",
    )
    args = parser.parse_args(argv)
    schema, tenant = (f"{SCHEMA}_{SUPABASE_TENANT}", SUPABASE_TENANT) if args.supabase else (SCHEMA, None)
    filtering = BUCKETS
    if args.kept:
        schema, filtering, args.folder = growth_schema(args.kept), COPIES, GROWTH_STACK
    texts = list(load_beir(DATASET, "test", limit=args.queries).queries.values())
    embedder = make_embedder(EmbeddingSettings())
    vectors = [embedder.embed_query(text) for text in texts]
    folder = args.folder or Path(tempfile.mkdtemp(prefix="bench-filtered-"))
    postgres = start_postgres_for_loads(folder)
    supabase = None
    try:
        loaded = postgres.execute(f"select 1 from information_schema.schemata where schema_name = '{schema}'")
        store = PostgresStore(postgres.dsn, schema=schema, tenant=tenant)
        store.init(384)  # a kept load's functions brought up to date
        if args.kept and not loaded:
            raise SystemExit(
                f"no kept load in {schema}: python -m benchmarks.scale --sizes {args.kept} --keep"
            )
        if not loaded:
            load(postgres, store, RESULTS / "scifact-100000.db")
            postgres.execute(
                f"update {schema}.chunks set metadata = metadata || jsonb_build_object('bucket', rowid % 200)"
            )
            postgres.execute(f"analyze {schema}.chunks")
        searcher: Store = store
        if args.supabase:
            supabase = Supabase(postgres, [schema])
            supabase.postgrest.reload_schema()
            searcher = SupabaseStore(
                supabase.gateway.url, supabase.anon_key, schema=schema, user_token=supabase.token
            )
        report = measure(postgres, schema, searcher, texts, vectors, embedder.model_id, filtering)
        searcher.close()
        store.close()
    finally:
        if supabase:
            supabase.stop()
        postgres.stop()
    name = f"filtered{f'-{args.kept}' if args.kept else ''}{'-supabase' if args.supabase else ''}.json"
    (RESULTS / name).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
