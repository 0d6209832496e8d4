"""Throughput and latency of chunk_retriever under 64 concurrent calls, on each store at 10K chunks.

The embedded store is benchmarks/latency.py's 10K-chunk SciFact store; Postgres (by DSN) and Supabase
(supabase-py through PostgREST and the test gateway) hold the same rows, in the stack benchmarks/postgres.py
keeps in benchmarks/results/postgres-stack/. Each call is a full tool call with the real local embedder
(hybrid search, HyDE off: no LLM is reachable here). 64 callers run at once, as sync threads and as
asyncio tasks; we report calls per second, p50/p95 per call, errors, and the process's peak memory.

    python -m benchmarks.load                       # every store
    python -m benchmarks.load --stores sqlite       # one
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import signal
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from agent_retrieval import ChunkRetrieverTool, Context, PostgresStore, Retrieval, SupabaseStore
from benchmarks.latency import RESULTS, queries
from benchmarks.postgres import copy_store
from tests.stack import start_stack

CONCURRENCY = 64
SCHEMA_10K = "bench_10k"


def summary(times: list[float], seconds: float, errors: int) -> dict[str, float]:
    times = sorted(times)
    return {
        "calls": len(times) + errors,
        "errors": errors,
        "calls_per_second": round(len(times) / seconds, 1),
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[int(0.95 * len(times)) - 1], 1),
    }


def with_threads(tool: ChunkRetrieverTool, texts: list[str]) -> dict[str, float]:
    def one(text: str) -> float | None:
        started = time.perf_counter()
        message = tool.invoke({"type": "tool_call", "id": "1", "name": tool.name, "args": {"query": text}})
        return (time.perf_counter() - started) * 1000 if message.status == "success" else None

    started = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        times = list(pool.map(one, texts))
    ok = [t for t in times if t is not None]
    return summary(ok, time.perf_counter() - started, len(times) - len(ok))


def with_tasks(tool: ChunkRetrieverTool, texts: list[str]) -> dict[str, float]:
    async def run() -> list[float | None]:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(text: str) -> float | None:
            async with gate:
                started = time.perf_counter()
                message = await tool.ainvoke(
                    {"type": "tool_call", "id": "1", "name": tool.name, "args": {"query": text}}
                )
                return (time.perf_counter() - started) * 1000 if message.status == "success" else None

        return await asyncio.gather(*[one(t) for t in texts])

    started = time.perf_counter()
    times = asyncio.run(run())
    ok = [t for t in times if t is not None]
    return summary(ok, time.perf_counter() - started, len(times) - len(ok))


def measure(name: str, retrieval: Retrieval, texts: list[str], warmup: list[str]) -> dict[str, object]:
    tool = ChunkRetrieverTool(retrieval=retrieval)
    with_threads(tool, warmup)  # connections, worker threads and caches as a running service has them
    out = {"threads": with_threads(tool, texts), "asyncio": with_tasks(tool, texts)}
    print(name, json.dumps(out), file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--stores",
        nargs="+",
        default=["sqlite", "postgres", "supabase"],
        choices=["sqlite", "postgres", "supabase"],
    )
    parser.add_argument(
        "--calls", type=int, default=640, help="calls per run (distinct SciFact queries, reused)"
    )
    args = parser.parse_args()
    small_db = RESULTS / "scifact-10000.db"
    if not small_db.exists():
        sys.exit("run benchmarks/latency.py first: it builds the 10K-chunk store this benchmark uses")
    test = queries(300)
    texts = (test * (args.calls // len(test) + 1))[: args.calls]
    warmup = queries(CONCURRENCY * 2, "train")
    base = Retrieval(Context(db_path=str(small_db)))
    output = RESULTS / "load.json"
    results: dict[str, object] = json.loads(output.read_text()) if output.exists() else {}
    if "sqlite" in args.stores:
        results["sqlite_10k"] = measure("sqlite", base, texts, warmup)
    if {"postgres", "supabase"} & set(args.stores):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the stack on the way out
        stack = start_stack(RESULTS / "postgres-stack", [SCHEMA_10K])
        try:
            store = PostgresStore(stack.postgres.dsn, schema=SCHEMA_10K)
            store.init(len(base.embedder.embed_query("dimension")))
            if store.stats().chunks < 10_000:
                copy_store(small_db, store)
                stack.postgres.execute(f"vacuum analyze {SCHEMA_10K}.chunks, {SCHEMA_10K}.chunks_postings")
            stack.postgrest.reload_schema()
            if "postgres" in args.stores:
                results["postgres_10k"] = measure(
                    "postgres", Retrieval(Context(), store=store, embedder=base.embedder), texts, warmup
                )
            if "supabase" in args.stores:
                rpc = SupabaseStore(stack.url, stack.service_key, schema=SCHEMA_10K)
                results["supabase_10k"] = measure(
                    "supabase", Retrieval(Context(), store=rpc, embedder=base.embedder), texts, warmup
                )
                rpc.close()
            store.close()
        finally:
            stack.stop()
    results["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    results["concurrency"] = CONCURRENCY
    print(json.dumps(results, indent=2))
    output.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
