"""How cost grows with the corpus: `chunk_retriever` latency (p50/p95) and memory at 10K, 100K, 300K and
1M chunks, on the embedded store and on Postgres by DSN, so a reader can see where to move from one to
the other.

The embedded figures are `benchmarks/latency.py`'s (run it first: it builds the stores and measures them,
with the process's peak memory). Here each of those stores is copied into Postgres by `initial_load`
(schema bench_<size>, kept between runs; `bench-scale --keep` leaves its loads there), and the same tool
call is timed on it with the same queries; the Postgres memory figure is the size of the schema's tables
and indexes, which the server must keep in its cache to answer at this speed.

    python -m benchmarks.growth [--sizes 10000 100000 300000 1000000]   # JSON in results/growth.json
"""

from __future__ import annotations

import argparse
import json
import sys

from agent_retrieval import (
    ChunkRetrieverTool,
    Context,
    EmbeddingSettings,
    PostgresStore,
    Retrieval,
    make_embedder,
)
from benchmarks.latency import RESULTS, queries
from benchmarks.postgres import GROWTH_STACK, copy_store, growth_schema, start_postgres_for_loads, timed


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 300_000])
    args = parser.parse_args(argv)
    embedded = json.loads((RESULTS / "latency.json").read_text())
    missing = [size for size in args.sizes if str(size) not in embedded]
    if missing:
        sys.exit(f"run benchmarks/latency.py --sizes {' '.join(map(str, missing))} first")
    texts = queries(300)
    embedder = make_embedder(EmbeddingSettings())
    report: dict = {}
    postgres = start_postgres_for_loads(GROWTH_STACK)
    try:
        for size in sorted(args.sizes):
            schema = growth_schema(size)
            store = PostgresStore(postgres.dsn, schema=schema)
            store.init(384)
            if store.stats().chunks < size:
                postgres.execute(f"drop schema {schema} cascade")
                store.init(384)
                with store.initial_load():
                    copy_store(RESULTS / f"scifact-{size}.db", store)
            tool = ChunkRetrieverTool(retrieval=Retrieval(Context(), store=store, embedder=embedder))
            for text in queries(50, "train"):  # warm up as the embedded run does (its caches, the server's)
                tool.invoke({"query": text, "top_k": 10})
            row = timed(lambda text, tool=tool: tool.invoke({"query": text, "top_k": 10}), texts)
            (size_bytes,) = postgres.execute(
                "select sum(pg_total_relation_size(c.oid)) from pg_class c "
                "where c.relnamespace = %s::regnamespace and c.relkind = 'r'",
                (schema,),
            )[0]
            store.close()
            report[size] = {
                "embedded": {
                    "p50_ms": embedded[str(size)]["p50_ms"],
                    "p95_ms": embedded[str(size)]["p95_ms"],
                    "peak_rss_mb": embedded[str(size)].get("peak_rss_mb"),
                    "file_mb": round((RESULTS / f"scifact-{size}.db").stat().st_size / 2**20, 1),
                },
                "postgres": {**row, "database_mb": round(int(size_bytes) / 2**20, 1)},
            }
            print(size, json.dumps(report[size]), flush=True)
    finally:
        postgres.stop()
    (RESULTS / "growth.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
