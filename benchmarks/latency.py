"""Latency of chunk_retriever (hybrid, HyDE off, local embedder) on the embedded store at 10K, 100K and 300K
chunks, and the process's peak memory at each size.

SciFact's corpus is ingested once with the real all-MiniLM-L6-v2 (about 9K chunks; cached in
benchmarks/results/, so a rerun embeds nothing). Larger stores replicate those chunks, each copy's
vector jittered and re-normalised, so the vector and keyword indexes hold N distinct rows of real
text. Queries are SciFact test queries, each a full tool call: query embedding, keyword and vector
search, fusion, formatting; then each search alone.

    python benchmarks/latency.py                 # 10K, 100K and 300K
    python benchmarks/latency.py --sizes 10000   # one size
    python benchmarks/latency.py --sizes 1000000 --keyword-floor   # and keyword search, every word kept
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from agent_retrieval import Retrieval, SQLiteStore, load_documents
from agent_retrieval.context import VECTOR_INDEX_ROWS, Context
from agent_retrieval.core.process import ProcessState
from agent_retrieval.ingest import ingest
from agent_retrieval.models import Chunk, ChunkSearchRequest, Document, parse_request
from agent_retrieval.stores.sqlite import release_file_caches
from agent_retrieval.tools import ChunkRetrieverTool, format_result
from benchmarks.embedded_peers import percentiles

ROOT = Path(__file__).resolve().parent
DATASET = ROOT.parent.parent / "shared" / "datasets" / "scifact"
RESULTS = ROOT / "results"


def base_store() -> Retrieval:
    """SciFact ingested with the local embedder (cached between runs)."""
    context = Context(db_path=str(RESULTS / "scifact-base.db"))
    retrieval = Retrieval(context)
    report = ingest(load_documents([DATASET / "corpus.jsonl"]), retrieval.store, retrieval.embedder, context)
    print(report.summary(), file=sys.stderr)
    return retrieval


def replicated_store(base: Retrieval, size: int) -> Path:
    """A store of `size` chunks made of jittered copies of the base store's rows (built once)."""
    path = RESULTS / f"scifact-{size}.db"
    if path.exists():
        with SQLiteStore(path) as store:
            if store.stats().chunks >= size:
                store.refresh_indexes(progress=True)  # as an ingest leaves it (made once, then saved)
                return path
        path.unlink()
    source = base.store
    model, _ = source.embedding_model()
    conn = source._db.connection()
    docs = {r[0]: r for r in conn.execute("SELECT id, title, content, metadata, embedding FROM documents")}
    chunks = conn.execute(
        "SELECT id, document_id, ordinal, heading_path, content, embedding FROM chunks "
        "ORDER BY document_id, ordinal"
    ).fetchall()
    rng = np.random.default_rng(7)
    copies = math.ceil(size / len(chunks))
    with SQLiteStore(path) as store, tqdm(total=size, unit="chunk", desc=f"build {size}") as bar:
        written = 0
        for copy in range(copies):
            by_doc: dict[str, list[Chunk]] = {}
            for chunk_id, doc_id, ordinal, heading, content, blob in chunks:
                if written >= size:
                    break
                by_doc.setdefault(f"{doc_id}~{copy}", []).append(
                    Chunk(
                        f"{chunk_id}~{copy}",
                        f"{doc_id}~{copy}",
                        ordinal,
                        content,
                        heading,
                        {"copy": copy},
                        f"{chunk_id}~{copy}",
                        _jitter(blob, rng, copy),
                    )
                )
                written += 1
            batch_docs = [
                Document(
                    d,
                    docs[source][1],
                    docs[source][2],
                    {"copy": copy},
                    content_hash=d,
                    text_hash=d,
                    embedding=_jitter(docs[source][4], rng, copy),
                )
                for d in by_doc
                for source in [d.rsplit("~", 1)[0]]
            ]
            for start in range(0, len(batch_docs), 500):
                part = batch_docs[start : start + 500]
                store.upsert(part, [c for d in part for c in by_doc[d.id]], model)
                bar.update(sum(len(by_doc[d.id]) for d in part))
    with SQLiteStore(path) as store:
        store.refresh_indexes(progress=True)
    return path


def _jitter(blob: bytes, rng: np.random.Generator, copy: int) -> np.ndarray:
    vector = np.frombuffer(blob, dtype=np.float32)
    if copy == 0:
        return vector
    noisy = vector + rng.normal(0, 0.02, vector.shape).astype(np.float32)
    return noisy / np.linalg.norm(noisy)


def queries(limit: int, split: str = "test") -> list[str]:
    wanted = {
        line.split("\t")[0] for line in (DATASET / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]
    }
    rows = [json.loads(line) for line in (DATASET / "queries.jsonl").read_text().splitlines()]
    return [r["text"] for r in rows if r["_id"] in wanted][:limit]


def measure(path: Path, base: Retrieval, texts: list[str]) -> dict[str, float]:
    retrieval = Retrieval(Context(db_path=str(path)), embedder=base.embedder)
    tool = ChunkRetrieverTool(retrieval=retrieval)
    # Warm up as a running service would be: the model and vector matrix loaded, the document frequencies
    # of common words cached. Train queries do it, so no measured query finds its own vector cached.
    for text in queries(200, "train"):
        tool.invoke({"query": text, "top_k": 10})
    times = []
    for text in texts:
        started = time.perf_counter()
        tool.invoke({"query": text, "top_k": 10})
        times.append((time.perf_counter() - started) * 1000)
    after = after_the_searches(retrieval, texts)
    keyword = keyword_side(retrieval, texts)
    retrieval.close()
    p50, p95 = p50_p95(times)
    return {
        "queries": len(times),
        "p50_ms": p50,
        "p95_ms": p95,
        "mean_ms": round(statistics.fmean(times), 2),
        "after_searches_p50_ms": round(statistics.median(after), 2),
        # a store opened for each call, as each run of a LangGraph server opens one
        "per_run_p50_ms": per_run(path, base, texts[:PER_RUN_CALLS], store_cache_mb=1024),
        "per_run_no_cache_p50_ms": per_run(path, base, texts[:PER_RUN_CALLS], store_cache_mb=0),
        "rag_run_p50_ms": rag_runs(path, texts[:RAG_RUNS], store_cache_mb=1024),
        "rag_run_no_cache_p50_ms": rag_runs(path, texts[:RAG_RUNS], store_cache_mb=0),
        "keyword_search": keyword,
        "vector_search": vector_side(path, base, texts),
    }


PER_RUN_CALLS, RAG_RUNS = 30, 10


def p50_p95(times: list[float]) -> tuple[float, float]:
    """The median and the nearest-rank 95th percentile (the benches' one rule, `percentiles`), in ms to two
    places."""
    found = percentiles(times)
    return round(found["p50_ms"], 2), round(found["p95_ms"], 2)


def vector_side(path: Path, base: Retrieval, texts: list[str]) -> dict[str, float]:
    """The chunks' vector search alone, 100 candidates as chunk_retriever asks: through the store's graph
    (past vector_index_rows; below it, the same scan) and by reading every vector, the graph's recall@10
    against the exact top 10, and the graph's memory."""
    asked = [np.asarray(base.embedder.embed_query(text), dtype=np.float32) for text in texts]
    report: dict[str, float] = {}
    tops: dict[str, list[set[str]]] = {}
    for name, index_rows in (("graph", VECTOR_INDEX_ROWS), ("exact", 0)):
        with SQLiteStore(path, index_rows=index_rows, process=ProcessState()) as store:
            store.vector_search("chunks", asked[0], 100)  # the vectors (and graph) read, as in a service
            times, tops[name] = [], []
            for query in asked:
                started = time.perf_counter()
                hits = store.vector_search("chunks", query, 100)
                times.append((time.perf_counter() - started) * 1000)
                tops[name].append({hit.id for hit in hits[:10]})
            report[f"{name}_p50_ms"], report[f"{name}_p95_ms"] = p50_p95(times)
            if index := store._cache.indexes.get("chunks"):
                report["graph_mb"] = round(index.graph.memory_usage / 2**20, 1)
    recall = [len(g & e) / len(e) for g, e in zip(tops["graph"], tops["exact"], strict=True) if e]
    report["graph_recall@10"] = round(statistics.fmean(recall), 4)
    return report


def keyword_side(retrieval: Retrieval, texts: list[str]) -> dict[str, float]:
    """The chunks' keyword search alone, as many candidates as chunk_retriever asks, over queries the tool
    has answered (their words read, as a running service keeps them), and the memory of the words' postings
    kept (sqlite/keywords.py), both levels."""
    store = retrieval.store
    times = []
    for text in texts:
        started = time.perf_counter()
        store.keyword_search("chunks", text, retrieval.context.candidates)
        times.append((time.perf_counter() - started) * 1000)
    p50, p95 = p50_p95(times)
    kept = store._cache.postings.values()
    return {"p50_ms": p50, "p95_ms": p95, "postings_mb": round(sum(p.nbytes for p in kept) / 2**20, 1)}


def keyword_floor(path: Path, texts: list[str]) -> dict[str, float]:
    """What keyword search would cost with every query word's postings in memory, however common: each word
    read once in full (sqlite/keywords.py's reading, through FTS5's bm25), then the kept-postings MaxScore
    alone, p50/p95 over the queries, 100 candidates; and the time and memory of the reading."""
    from agent_retrieval.core.text import keyword_terms
    from agent_retrieval.stores.postings import Postings, best_of_postings
    from agent_retrieval.stores.sqlite.keywords import _read_postings

    with SQLiteStore(path) as store, store._db.read() as conn:
        kept: dict[str, Postings] = {}
        started = time.perf_counter()
        for term in {t for text in texts for t in keyword_terms(text)}:
            kept[term] = _read_postings(conn, "chunks", term)
        reading = time.perf_counter() - started
    lists = [[kept[t] for t in keyword_terms(text)] for text in texts]
    times = []
    for words in lists:
        started = time.perf_counter()
        best_of_postings(words, 100)
        times.append((time.perf_counter() - started) * 1000)
    p50, p95 = p50_p95(times)
    megabytes = sum(p.nbytes for p in kept.values()) / 2**20
    return {"p50_ms": p50, "p95_ms": p95, "reading_s": round(reading, 1), "postings_mb": round(megabytes)}


def per_run(path: Path, base: Retrieval, texts: list[str], *, store_cache_mb: int) -> float:
    """Median time of a tool call whose Retrieval, and so store, is made for it and closed after it.
    `store_cache_mb` 0 keeps nothing between stores: each call reads the file's vectors again."""
    times = []
    for text in texts:
        started = time.perf_counter()
        with Retrieval(
            Context(db_path=str(path), store_cache_mb=store_cache_mb), embedder=base.embedder
        ) as r:
            ChunkRetrieverTool(retrieval=r).invoke({"query": text, "top_k": 10})
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


def after_the_searches(retrieval: Retrieval, texts: list[str]) -> list[float]:
    """The Python time of a call once both searches have answered: fusion, the result, the tool's text and
    its artifact. It runs after the slower search on every call, so it adds to the latency in full."""
    requests = [parse_request(ChunkSearchRequest, {"query": text, "top_k": 10}) for text in texts]
    found = [retrieval.candidates(request, "chunks") for request in requests]
    times = []
    for request, candidates in zip(requests, found, strict=True):
        started = time.perf_counter()
        result = retrieval.rank(request, "chunks", candidates)
        format_result(result), result.to_dict()
        times.append((time.perf_counter() - started) * 1000)
    return times


def rag_runs(path: Path, texts: list[str], *, store_cache_mb: int) -> float:
    """Median time of a whole rag graph run offline (heuristic plan, searches, reading on, extractive
    answer), its Retrieval made by the graph for the run, as on a server; the first run warms up."""
    from agent_retrieval.graphs.rag import graph

    context = Context(db_path=str(path), store_cache_mb=store_cache_mb)
    times = []
    for text in texts:
        started = time.perf_counter()
        asyncio.run(graph.ainvoke({"messages": [("user", text)]}, context=context))
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times[1:]), 1)


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 300_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument(
        "--keyword-floor",
        action="store_true",
        help="also time keyword search with every query word's postings kept, however common",
    )
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    base = base_store()
    texts = queries(args.queries)
    output = RESULTS / "latency.json"
    results = json.loads(output.read_text()) if output.exists() else {}  # sizes not run now are kept
    for size in sorted(args.sizes):
        path = replicated_store(base, size)
        with SQLiteStore(path) as store:
            chunks = store.stats().chunks
        row = measure(path, base, texts)
        if args.keyword_floor:
            row["keyword_floor"] = keyword_floor(path, texts)
        release_file_caches()  # the next size's peak memory holds no vectors of this one
        # peak memory of the process so far: sizes run smallest first, so each row is that size's peak
        row["chunks"], row["peak_rss_mb"] = (
            chunks,
            round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        )
        results[str(size)] = row
        print(
            f"{chunks:>7} chunks: p50 {row['p50_ms']:.1f} ms, p95 {row['p95_ms']:.1f} ms, "
            f"mean {row['mean_ms']:.1f} ms over {row['queries']} queries; "
            f"after the searches p50 {row['after_searches_p50_ms']:.2f} ms; a store per call p50 "
            f"{row['per_run_p50_ms']:.1f} ms ({row['per_run_no_cache_p50_ms']:.1f} ms, store_cache_mb 0); "
            f"a rag graph run p50 {row['rag_run_p50_ms']:.0f} ms ({row['rag_run_no_cache_p50_ms']:.0f} ms); "
            f"keyword search {json.dumps(row['keyword_search'])}; "
            f"vector search {json.dumps(row['vector_search'])}"
        )
    output.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
