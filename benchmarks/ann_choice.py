"""Which approximate vector index the embedded store should use past a size threshold (issue 32): usearch,
hnswlib and faiss, each an HNSW graph over the same vectors, measured in one run against exact search.

Vectors: the chunks of benchmarks/latency.py's stores (SciFact's real all-MiniLM-L6-v2 vectors, jittered
copies past 9K), unit length, inner product. Queries: SciFact's test queries, embedded once. For each
library: the build time on this machine's cores, the index's memory, and at each search depth (ef) the
p50/p95 of a 100-candidate search (the store's `candidates`) and its recall@10 and @100 against the exact
top 100 (a matrix product). The exact search's own time is the floor beside them.

    python -m benchmarks.ann_choice                    # 100K -> results/ann-choice.json
    python -m benchmarks.ann_choice --size 10000
    python -m benchmarks.ann_choice --mixed 1000000    # the store's own graph over 1M mixed vectors
    python -m benchmarks.ann_choice --mixed 1000000 --postgres   # pgvector's HNSW index over the same

Jittered copies put each real vector's copies so close together that at 1M the exact top 10 is mostly
copies of one or two chunks ranked by their noise. `--mixed N` measures instead the embedded store's own
graph (vector_index.py: its links, build depth and half-precision vectors) over N synthetic vectors, each a
random convex mix of three real chunk vectors: distinct points where real vectors lie. With `--postgres`,
the Postgres store's index instead: pgvector's HNSW (the store's definition, vector_cosine_ops at pgvector's
default links and build depth) over the same vectors in the tests' Postgres, set for a first load as
bench-scale sets it, searched at several hnsw.ef_search values (match_* uses 400); then filtered (each
vector a `bucket`, its row number mod 200; filters keeping 50%, 5% and 0.5%): the index's first 10 rows the
filter keeps, or every kept row when fewer pass, recall@10 against the exact filtered top 10, with pgvector's
iterative index scans off, relaxed and strict.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from agent_retrieval import EmbeddingSettings, make_embedder
from agent_retrieval.evaluation import load_beir
from benchmarks.embedded_peers import percentiles, read_rows

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
DATASET = ROOT.parent.parent / "shared" / "datasets" / "scifact"
CANDIDATES = 100
FILTERS = {"50%": 100, "5%": 10, "0.5%": 1}  # each keeps the rows whose bucket (of 200) is below it
M, EF_CONSTRUCTION = 16, 200  # the graph's links per node and build depth: each library's usual choice
DEPTHS = (50, 100, 200, 400)  # search depth (ef); at least CANDIDATES is needed to return 100


Search = Callable[[np.ndarray, int], np.ndarray]


def usearch_index(vectors: np.ndarray) -> tuple[Callable[[int], Search], int]:
    from usearch.index import Index

    index = Index(ndim=vectors.shape[1], metric="ip", connectivity=M, expansion_add=EF_CONSTRUCTION)
    index.add(np.arange(len(vectors)), vectors, threads=os.cpu_count() or 1)

    def at(ef: int) -> Search:
        index.expansion_search = ef
        return lambda query, k: index.search(query, k).keys

    return at, index.memory_usage


def hnswlib_index(vectors: np.ndarray) -> tuple[Callable[[int], Search], int]:
    import hnswlib

    index = hnswlib.Index(space="ip", dim=vectors.shape[1])
    index.init_index(max_elements=len(vectors), M=M, ef_construction=EF_CONSTRUCTION)
    index.add_items(vectors, np.arange(len(vectors)), num_threads=os.cpu_count() or 1)
    index.set_num_threads(1)

    def at(ef: int) -> Search:
        index.set_ef(ef)
        return lambda query, k: index.knn_query(query, k)[0][0]

    # the graph's links (level 0: 2M per node) and the vectors; hnswlib reports no size of its own
    return at, len(vectors) * (vectors.shape[1] * 4 + 2 * M * 4 + 8)


def faiss_index(vectors: np.ndarray) -> tuple[Callable[[int], Search], int]:
    import faiss

    faiss.omp_set_num_threads(os.cpu_count() or 1)
    index = faiss.IndexHNSWFlat(vectors.shape[1], M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = EF_CONSTRUCTION
    index.add(vectors)
    faiss.omp_set_num_threads(1)

    def at(ef: int) -> Search:
        index.hnsw.efSearch = ef
        return lambda query, k: index.search(query[None, :], k)[1][0]

    return at, len(faiss.serialize_index(index))


LIBRARIES = {"usearch": usearch_index, "hnswlib": hnswlib_index, "faiss": faiss_index}


def exact_search(vectors: np.ndarray) -> Search:
    """Search by reading every vector: the reference and the floor."""

    def search(query: np.ndarray, k: int) -> np.ndarray:
        scores = vectors @ query
        top = np.argpartition(-scores, k - 1)[:k]
        return top[np.argsort(-scores[top], kind="stable")]

    return search


def timed(search: Search, queries: np.ndarray) -> tuple[list[np.ndarray], dict[str, float]]:
    found, times = [], []
    for query in queries:
        started = time.perf_counter()
        found.append(np.asarray(search(query, CANDIDATES)))
        times.append((time.perf_counter() - started) * 1000)
    return found, {name: round(value, 3) for name, value in percentiles(times).items()}


def recall(found: list[np.ndarray], exact: list[np.ndarray], k: int) -> float:
    return round(
        float(np.mean([len(set(f[:k]) & set(e[:k])) / k for f, e in zip(found, exact, strict=True)])), 4
    )


def at_depth(search: Search, asked: np.ndarray, exact: list[np.ndarray]) -> dict[str, float]:
    """p50/p95 of a 100-candidate `search` over `asked`, and its recall@10 and @100 against `exact`."""
    found, latency = timed(search, asked)
    return {**latency, "recall@10": recall(found, exact, 10), "recall@100": recall(found, exact, 100)}


def run(store: Path, queries: int | None) -> dict[str, Any]:
    # Embedding loads onnxruntime, which must come before faiss: the other way round, the process crashes.
    asked = asked_vectors(queries)
    return measure(read_rows(store).vectors, asked)


def asked_vectors(queries: int | None) -> np.ndarray:
    """SciFact's test queries, embedded by the local embedder."""
    texts = list(load_beir(DATASET, "test", limit=queries).queries.values())
    embedder = make_embedder(EmbeddingSettings())
    return np.stack([embedder.embed_query(text) for text in texts]).astype(np.float32)


def mixed(base: np.ndarray, size: int, seed: int = 7) -> np.ndarray:
    """`size` unit vectors, each a random convex mix (Dirichlet weights) of three of `base`'s."""
    rng = np.random.default_rng(seed)
    out = np.empty((size, base.shape[1]), dtype=np.float32)
    for start in range(0, size, 100_000):
        count = min(100_000, size - start)
        weights = rng.dirichlet(np.ones(3), size=count).astype(np.float32)
        mix = np.einsum("nk,nkd->nd", weights, base[rng.integers(0, len(base), size=(count, 3))])
        out[start : start + count] = mix / np.linalg.norm(mix, axis=1, keepdims=True)
    return out


def store_graph(vectors: np.ndarray, asked: np.ndarray) -> dict[str, Any]:
    """The embedded store's own graph over `vectors`: its build time and memory, and at each search depth
    (the store's SEARCH_DEPTH among them) the p50/p95 of a 100-candidate search and its recall@10 and
    @100 against the exact top 100."""
    from agent_retrieval.stores.sqlite import vector_index
    from agent_retrieval.stores.sqlite.cache import Matrix

    exact, floor = timed(exact_search(vectors), asked)
    matrix = Matrix(0, "mixed", np.arange(len(vectors), dtype=np.int64), vectors)
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        index = vector_index.refreshed(None, matrix, Path(folder) / "graph", searching=False, progress=True)
        built = time.perf_counter() - started
    assert index is not None  # a build, not a search, never gives up
    report: dict[str, Any] = {"size": len(vectors), "queries": len(asked), "exact": floor}
    depths, default = {}, vector_index.SEARCH_DEPTH
    try:
        for ef in sorted({*DEPTHS, default, 800, 1600}):
            vector_index.SEARCH_DEPTH = ef  # read by VectorIndex.search at each call
            depths[ef] = at_depth(index.search, asked, exact)
            print(ef, json.dumps(depths[ef]), flush=True)
    finally:
        vector_index.SEARCH_DEPTH = default
    report["store graph"] = {
        "build_s": round(built, 1),
        "memory_mb": round(index.graph.memory_usage / 2**20, 1),
        "search depth in use": default,
        "by ef": depths,
    }
    return report


def postgres_graph(vectors: np.ndarray, asked: np.ndarray, build_depth: int | None = None) -> dict[str, Any]:
    """pgvector's HNSW index over `vectors`, as the Postgres store defines it (or built `build_depth` deep,
    its ef_construction): its build time and size, and at each hnsw.ef_search the p50/p95 of a
    100-candidate search and its recall@10 and @100 against the exact top 100."""
    from pgvector.psycopg import register_vector

    from benchmarks.postgres import start_postgres_for_loads

    exact, floor = timed(exact_search(vectors), asked)
    report: dict[str, Any] = {"size": len(vectors), "queries": len(asked), "exact": floor}
    with tempfile.TemporaryDirectory(prefix="bench-ann-") as folder:
        postgres = start_postgres_for_loads(Path(folder))
        try:
            with postgres.connect() as conn:
                conn.autocommit = True
                register_vector(conn)
                dimensions = vectors.shape[1]
                conn.execute(
                    f"create table mixed (id int primary key, bucket int, embedding vector({dimensions}))"
                )
                with conn.cursor().copy(
                    "copy mixed (id, bucket, embedding) from stdin (format binary)"
                ) as copy:
                    copy.set_types(["int4", "int4", "vector"])
                    for row, vector in enumerate(tqdm(vectors, desc="copy vectors", mininterval=5)):
                        copy.write_row((row, row % 200, vector))
                started = time.perf_counter()
                options = f" with (ef_construction = {int(build_depth)})" if build_depth else ""
                conn.execute(
                    f"create index mixed_embedding on mixed using hnsw (embedding vector_cosine_ops){options}"
                )
                built = time.perf_counter() - started
                conn.execute("vacuum analyze mixed")
                size = conn.execute("select pg_relation_size('mixed_embedding')").fetchone()[0]
                depths = {}
                for ef in (100, 200, 400, 800):
                    conn.execute(f"set hnsw.ef_search = {ef}")

                    def search(query: np.ndarray, k: int) -> np.ndarray:
                        statement = "select id from mixed order by embedding <=> %s limit %s"
                        return np.array([row for (row,) in conn.execute(statement, (query, k))])

                    depths[ef] = at_depth(search, asked, exact)
                    print(ef, json.dumps(depths[ef]), flush=True)
                conn.execute("set hnsw.ef_search = 400")
                filtered = filtered_searches(conn, vectors, asked)
        finally:
            postgres.stop()
    report["pgvector hnsw"] = {
        "build_s": round(built, 1),
        "index_mb": round(size / 2**20, 1),
        "build depth": build_depth or "pgvector's default (64)",
        "search depth in use": 400,
        "by ef": depths,
        "filtered at ef 400": filtered,
    }
    return report


def filtered_searches(conn: Any, vectors: np.ndarray, asked: np.ndarray) -> dict[str, Any]:
    """For each of FILTERS and each pgvector iterative scan mode: recall@10 and p50/p95 of a filtered search
    (the index's first 10 rows the filter keeps; every kept row, exactly, when fewer pass)."""
    buckets = np.arange(len(vectors)) % 200
    report: dict[str, Any] = {}
    for name, below in FILTERS.items():
        condition, kept = f"bucket < {below}", np.flatnonzero(buckets < below)
        exact = [kept[exact_search(vectors[kept])(query, 10)] for query in asked]
        for mode in ("off", "relaxed_order", "strict_order"):
            conn.execute(f"set hnsw.iterative_scan = {mode}")

            def search(query: np.ndarray, k: int, condition: str = condition) -> np.ndarray:
                rows = conn.execute(
                    f"select id from mixed where {condition} order by embedding <=> %s limit 10", (query,)
                ).fetchall()
                if len(rows) < 10:  # "+ 0": an expression the index cannot serve
                    rows = conn.execute(
                        f"select id from mixed where {condition} order by (embedding <=> %s) + 0 limit 10",
                        (query,),
                    ).fetchall()
                return np.array([row for (row,) in rows])

            found, latency = timed(search, asked)
            report[f"{name} {mode}"] = {**latency, "recall@10": recall(found, exact, 10)}
            print(name, mode, json.dumps(report[f"{name} {mode}"]), flush=True)
    return report


def measure(vectors: np.ndarray, asked: np.ndarray) -> dict[str, Any]:
    """Exact search, then each library at each depth, over `vectors` for the query vectors `asked`."""
    exact, floor = timed(exact_search(vectors), asked)
    report: dict[str, Any] = {"size": len(vectors), "queries": len(asked), "exact": floor}
    for name, make in LIBRARIES.items():
        started = time.perf_counter()
        at, memory = make(vectors)
        built = time.perf_counter() - started
        depths = {}
        for ef in DEPTHS:
            depths[ef] = at_depth(at(ef), asked, exact)
        report[name] = {"build_s": round(built, 1), "memory_mb": round(memory / 2**20, 1), "by ef": depths}
        print(name, json.dumps(report[name]), flush=True)
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="the scifact-<size>.db store's chunks")
    parser.add_argument("--store", type=Path, help="another store instead")
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--mixed", type=int, help="the store's graph over this many mixed vectors instead")
    parser.add_argument("--postgres", action="store_true", help="with --mixed: pgvector's HNSW index instead")
    parser.add_argument("--build-depth", type=int, help="with --postgres: the index's ef_construction")
    args = parser.parse_args(argv)
    if args.postgres and not args.mixed:
        parser.error("--postgres measures pgvector over --mixed N vectors: pass both")
    store = args.store or RESULTS / f"scifact-{args.size}.db"
    if args.mixed:
        vectors, asked = mixed(read_rows(store).vectors, args.mixed), asked_vectors(args.queries)
        if args.postgres:
            report = postgres_graph(vectors, asked, args.build_depth)
        else:
            report = store_graph(vectors, asked)
        name = f"ann-mixed-{args.mixed}" + ("-postgres" if args.postgres else "")
        name += f"-depth-{args.build_depth}" if args.build_depth else ""
        out = args.out or RESULTS / f"{name}.json"
        out.write_text(json.dumps(report, indent=2) + "\n")
        return report
    report = run(store, args.queries)
    out = args.out or RESULTS / f"ann-choice-{report['size']}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
