"""benchmarks/ann_choice.py on a small store: each library builds over our stored vectors and is scored
against exact search at every depth.

The measurement runs in its own interpreter: once faiss is loaded, importing onnxruntime (the local
embedder, which later tests load) crashes the process, so faiss must never load in the suite's."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from agent_retrieval.models import Chunk, Document
from agent_retrieval.stores import SQLiteStore
from benchmarks import ann_choice

MEASURE = """
import json, sys
import numpy as np
from benchmarks import ann_choice, embedded_peers
vectors = embedded_peers.read_rows(sys.argv[1]).vectors
queries = vectors[:5] + 0.01
queries /= np.linalg.norm(queries, axis=1)[:, None]
json.dump(ann_choice.measure(vectors, queries), open(sys.argv[2], "w"))
"""


def test_every_library_is_measured_against_exact_search(tmp_path):
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(300, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    store = tmp_path / "store.db"
    with SQLiteStore(store) as db:
        document = Document("d", "Doc", "text", embedding=vectors[0])
        chunks = [Chunk(f"d#{n}", "d", n, f"chunk {n}", "Doc", embedding=v) for n, v in enumerate(vectors)]
        db.upsert([document], chunks, "test/random")
    out = tmp_path / "report.json"
    subprocess.run(
        [sys.executable, "-c", MEASURE, str(store), str(out)], check=True, cwd=ann_choice.ROOT.parent
    )
    report = json.loads(out.read_text())
    assert report["size"] == 300 and report["exact"]["p50_ms"] > 0
    for name in ann_choice.LIBRARIES:
        deepest = report[name]["by ef"][str(max(ann_choice.DEPTHS))]
        assert deepest["recall@10"] >= 0.9, (name, deepest)  # 300 vectors: a deep search is all but exact
        assert report[name]["memory_mb"] > 0


def test_the_stores_own_graph_is_measured_over_mixed_vectors():
    """--mixed: distinct unit vectors mixed from real ones, and the store's graph scored against exact
    search at every depth, its own among them."""
    rng = np.random.default_rng(5)
    base = rng.normal(size=(50, 16)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    vectors = ann_choice.mixed(base, 2_000)
    assert vectors.shape == (2_000, 16) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert len(np.unique(vectors.round(4), axis=0)) == 2_000  # no copies
    report = ann_choice.store_graph(vectors, vectors[:5])
    graph = report["store graph"]
    assert str(graph["search depth in use"]) in {str(ef) for ef in graph["by ef"]}
    assert graph["by ef"][max(graph["by ef"])]["recall@10"] >= 0.9  # 2,000 vectors: all but exact


def test_pgvectors_index_is_measured_over_the_same_mixed_vectors():
    """--mixed N --postgres: pgvector's HNSW index, as the Postgres store defines it, in a real Postgres,
    scored against exact search at each hnsw.ef_search, the store's 400 among them."""
    rng = np.random.default_rng(5)
    base = rng.normal(size=(50, 16)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    vectors = ann_choice.mixed(base, 2_000)
    report = ann_choice.postgres_graph(vectors, vectors[:5], build_depth=100)  # --build-depth
    index = report["pgvector hnsw"]
    assert index["build depth"] == 100
    assert index["build_s"] > 0 and index["index_mb"] > 0
    assert str(index["search depth in use"]) in {str(ef) for ef in index["by ef"]}
    assert index["by ef"][max(index["by ef"])]["recall@10"] >= 0.9  # 2,000 vectors: all but exact
