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
