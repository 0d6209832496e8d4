"""Which approximate vector index the embedded store should use past a size threshold (issue 32): usearch,
hnswlib and faiss, each an HNSW graph over the same vectors, measured in one run against exact search.

Vectors: the chunks of benchmarks/latency.py's stores (SciFact's real all-MiniLM-L6-v2 vectors, jittered
copies past 9K), unit length, inner product. Queries: SciFact's test queries, embedded once. For each
library: the build time on this machine's cores, the index's memory, and at each search depth (ef) the
p50/p95 of a 100-candidate search (the store's `candidates`) and its recall@10 and @100 against the exact
top 100 (a matrix product). The exact search's own time is the floor beside them.

    python -m benchmarks.ann_choice                    # 100K -> results/ann-choice.json
    python -m benchmarks.ann_choice --size 10000
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agent_retrieval.context import Context
from agent_retrieval.evaluation import load_beir
from agent_retrieval.providers.embeddings import make_embedder
from benchmarks.embedded_peers import percentiles, read_rows

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
DATASET = ROOT.parent.parent / "shared" / "datasets" / "scifact"
CANDIDATES = 100
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


def run(store: Path, queries: int | None) -> dict[str, Any]:
    texts = list(load_beir(DATASET, "test", limit=queries).queries.values())
    embedder = make_embedder(Context())
    # Embedding loads onnxruntime, which must come before faiss: the other way round, the process crashes.
    asked = np.stack([embedder.embed_query(text) for text in texts]).astype(np.float32)
    return measure(read_rows(store).vectors, asked)


def measure(vectors: np.ndarray, asked: np.ndarray) -> dict[str, Any]:
    """Exact search, then each library at each depth, over `vectors` for the query vectors `asked`."""

    def exact_search(query: np.ndarray, k: int) -> np.ndarray:
        scores = vectors @ query
        top = np.argpartition(-scores, k - 1)[:k]
        return top[np.argsort(-scores[top], kind="stable")]

    exact, floor = timed(exact_search, asked)
    report: dict[str, Any] = {"size": len(vectors), "queries": len(asked), "exact": floor}
    for name, make in LIBRARIES.items():
        started = time.perf_counter()
        at, memory = make(vectors)
        built = time.perf_counter() - started
        depths = {}
        for ef in DEPTHS:
            found, latency = timed(at(ef), asked)
            depths[ef] = {
                **latency,
                "recall@10": recall(found, exact, 10),
                "recall@100": recall(found, exact, 100),
            }
        report[name] = {"build_s": round(built, 1), "memory_mb": round(memory / 2**20, 1), "by ef": depths}
        print(name, json.dumps(report[name]), flush=True)
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="the scifact-<size>.db store's chunks")
    parser.add_argument("--store", type=Path, help="another store instead")
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    store = args.store or RESULTS / f"scifact-{args.size}.db"
    report = run(store, args.queries)
    out = args.out or RESULTS / f"ann-choice-{report['size']}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
