"""What a user would pick instead for a local store, in one run: LanceDB, Chroma and sqlite-vec beside FTS5
(seed 003's design), against our embedded store, all with the same all-MiniLM-L6-v2 vectors and texts.

Each peer is loaded with the chunks of one of our stores (id, document, heading path + text, and the very
vector we stored), so only the search differs:
- lancedb: its full-text index and vector search fused by its hybrid query, with its RRF reranker (the
  default) and with its linear-combination reranker (vector weight 0.7, its default);
- chroma: a persistent collection, HNSW with cosine distance: vector only, as Chroma runs locally (its
  sparse/BM25 index and hybrid Search are Chroma Cloud's: "Sparse vector indexing is not enabled in local");
- sqlite-vec: a vec0 table (exact KNN) beside FTS5 (BM25), as seed 003 has it: vector search first, FTS5
  when the best similarity is under 0.5; and the two fused by reciprocal rank (k=60), sqlite-vec's own
  hybrid recipe;
- ours: `Retrieval.search` at chunk level as chunk_retriever runs it (HyDE off).

Quality: SciFact test (300 queries) over SciFact's chunks, 100 chunks deep, each document ranked at its best
chunk: nDCG@10. Speed: a chunk_retriever-equivalent call (embed the query, search, 5 results) on 10K and
100K chunks (benchmarks/latency.py's stores: SciFact's chunks, jittered copies past 9K), p50/p95 over the
same queries; each system runs in its own process, one after another, so its peak memory (above the
process holding the embedder) and the size of its files on disk are its own.

    python -m benchmarks.embedded_peers                 # SciFact, 10K, 100K -> results/embedded-peers.json
    python -m benchmarks.embedded_peers --sizes 10000   # one size
    python -m benchmarks.embedded_peers --sizes 100000 --systems ours chroma --no-quality   # two, speed only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent_retrieval import Context, Embedder, EmbeddingSettings, Retrieval, hyde, make_embedder
from agent_retrieval.evaluation import load_beir, score_run
from agent_retrieval.models import ChunkSearchRequest, parse_request

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
DATASET = ROOT.parent.parent / "shared" / "datasets" / "scifact"
QUALITY_STORE = RESULTS / "scifact-base.db"  # benchmarks/latency.py makes these
SIZED_STORE = RESULTS / "scifact-{size}.db"
SYSTEMS = ("ours", "lancedb-rrf", "lancedb-linear", "chroma", "sqlite-vec-fallback", "sqlite-vec-rrf")
DEPTH = 100  # chunks fetched for the quality run
TOP_K = 5  # chunk_retriever's default
RRF_K = 60
FALLBACK_SIMILARITY = 0.5  # seed 003: below it, FTS answers


@dataclass(frozen=True)
class Rows:
    """Chunks as each peer loads them: what our store holds, vectors included."""

    ids: list[str]
    documents: list[str]
    texts: list[str]
    vectors: np.ndarray


def read_rows(store: Path) -> Rows:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT id, document_id, heading_path, content, embedding FROM chunks ORDER BY rowid"
        ).fetchall()
    vectors = np.frombuffer(b"".join(r[4] for r in rows), dtype=np.float32).reshape(len(rows), -1)
    return Rows([r[0] for r in rows], [r[1] for r in rows], [f"{r[2]}\n{r[3]}" for r in rows], vectors.copy())


# --- the peers: each builds from Rows in a folder, and answers (query text, query vector, k) -> chunk ids


Search = Callable[[str, np.ndarray, int], list[str]]


def lancedb_peer(rows: Rows, folder: Path, reranker: str) -> Search:
    import lancedb
    import pyarrow as pa
    from lancedb.index import FTS
    from lancedb.rerankers import LinearCombinationReranker, RRFReranker

    db = lancedb.connect(folder)
    if "chunks" not in db.list_tables().tables:
        dim = rows.vectors.shape[1]
        table = db.create_table(
            "chunks",
            pa.table(
                {
                    "id": rows.ids,
                    "text": rows.texts,
                    "vector": pa.FixedSizeListArray.from_arrays(pa.array(rows.vectors.ravel()), dim),
                }
            ),
        )
        table.create_index("text", config=FTS())
    table = db.open_table("chunks")
    fuse = RRFReranker(K=RRF_K) if reranker == "rrf" else LinearCombinationReranker(weight=0.7)

    def search(query: str, vector: np.ndarray, k: int) -> list[str]:
        found = (
            table.search(query_type="hybrid", vector_column_name="vector")
            .vector(vector)
            .text(query)
            .distance_type("cosine")
            .rerank(fuse)
            .limit(k)
            .select(["id"])
            .to_list()
        )
        return [row["id"] for row in found]

    return search


def chroma_peer(rows: Rows, folder: Path) -> Search:
    import chromadb

    client = chromadb.PersistentClient(path=str(folder))
    collection = client.get_or_create_collection(
        "chunks", embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
    )
    if collection.count() < len(rows.ids):
        batch = client.get_max_batch_size()
        for start in range(0, len(rows.ids), batch):
            end = start + batch
            collection.add(
                ids=rows.ids[start:end], embeddings=rows.vectors[start:end], documents=rows.texts[start:end]
            )

    def search(query: str, vector: np.ndarray, k: int) -> list[str]:
        return collection.query(query_embeddings=[vector], n_results=k, include=[])["ids"][0]

    return search


def sqlite_vec_peer(rows: Rows, folder: Path, mode: str) -> Search:
    import apsw  # the standard library's sqlite3 here cannot load extensions
    import sqlite_vec

    path = folder / "peer.db"
    fresh = not path.exists()
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    dim = rows.vectors.shape[1]
    if fresh:
        with conn:
            conn.execute(
                f"CREATE VIRTUAL TABLE vec USING vec0(embedding float[{dim}] distance_metric=cosine)"
            )
            conn.execute("CREATE VIRTUAL TABLE fts USING fts5(text)")
            conn.executemany(
                "INSERT INTO vec(rowid, embedding) VALUES (?, ?)",
                ((n + 1, rows.vectors[n].tobytes()) for n in range(len(rows.ids))),
            )
            conn.executemany(
                "INSERT INTO fts(rowid, text) VALUES (?, ?)", ((n + 1, t) for n, t in enumerate(rows.texts))
            )
    ids = rows.ids

    def vector_side(vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        sql = "SELECT rowid, distance FROM vec WHERE embedding MATCH ? AND k = ? ORDER BY distance"
        return [(r, 1 - d) for r, d in conn.execute(sql, (vector.astype(np.float32).tobytes(), k))]

    def keyword_side(query: str, k: int) -> list[int]:
        words = " OR ".join('"' + w.replace('"', '""') + '"' for w in query.split())
        if not words:
            return []
        sql = "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?"
        return [r for (r,) in conn.execute(sql, (words, k))]

    def search(query: str, vector: np.ndarray, k: int) -> list[str]:
        near = vector_side(vector, k)
        if mode == "fallback":
            if near and near[0][1] >= FALLBACK_SIMILARITY:
                return [ids[r - 1] for r, _ in near]
            return [ids[r - 1] for r in keyword_side(query, k)]
        scores: dict[int, float] = {}
        for ranked in ([r for r, _ in near], keyword_side(query, k)):
            for place, row in enumerate(ranked, start=1):
                scores[row] = scores.get(row, 0.0) + 1 / (RRF_K + place)
        return [ids[r - 1] for r in sorted(scores, key=lambda r: -scores[r])[:k]]

    return search


def ours(store: Path, folder: Path, embedder: Embedder) -> Callable[[str, int], list[str]]:
    copy = folder / "ours.db"
    if not copy.exists():
        shutil.copyfile(store, copy)
    retrieval = Retrieval(Context(db_path=str(copy), candidates=DEPTH), embedder=embedder)
    retrieval.store.refresh_indexes()  # what an ingest leaves: the vector index, past its threshold

    def search(query: str, k: int) -> list[str]:
        checked = parse_request(ChunkSearchRequest, {"query": query, "hyde": "off"})
        return [hit.id for hit in retrieval.search(checked.model_copy(update={"top_k": k}), "chunks").hits]

    return search


def build(
    system: str, store: Path, folder: Path, embedder: Embedder, peer_queries: str = "same"
) -> Callable[[str, int], list[str]]:
    """The system over the store's chunks, as (query, k) -> chunk ids. Peers embed the query as ours does
    (`peer_queries` "same"), or on the float model ("float"), as Chroma's default embedding function runs
    the same all-MiniLM-L6-v2: ours embeds a query on its 8-bit copy (providers/onnx_model.py)."""
    if system == "ours":
        return ours(store, folder, embedder)
    rows = read_rows(store)
    peer: Search
    if system.startswith("lancedb"):
        peer = lancedb_peer(rows, folder, system.split("-")[1])
    elif system == "chroma":
        peer = chroma_peer(rows, folder)
    else:
        peer = sqlite_vec_peer(rows, folder, system.rsplit("-", 1)[1])
    if peer_queries == "float":
        model = embedder.embeddings._onnx()  # type: ignore[attr-defined]  # the local model's ONNX file
        return lambda query, k: peer(query, model.encode([query])[0], k)
    return lambda query, k: peer(query, embedder.embed_query(query), k)


# --- one system in one process -------------------------------------------------------------------


def measure(
    system: str, store: Path, folder: Path, queries: dict[str, str], k: int, peer_queries: str = "same"
) -> dict[str, Any]:
    """Build (or reopen) the system in `folder`, run every query once timed; memory and disk are its own."""
    embedder = make_embedder(EmbeddingSettings())
    embedder.embed_query("load the model")
    before = _peak_rss_mb()
    started = time.perf_counter()
    search = build(system, store, folder, embedder, peer_queries)
    built = time.perf_counter() - started
    for query in list(queries.values())[:10]:  # warm: first calls open files and fill caches
        search(query, k)
    times, ranked = [], {}
    for qid, query in queries.items():
        hyde.clear_cache()
        began = time.perf_counter()
        ranked[qid] = search(query, k)
        times.append((time.perf_counter() - began) * 1000)
    return {
        "ranked": ranked,
        **percentiles(times),
        "open_or_build_s": built,
        "peak_memory_mb": _peak_rss_mb() - before,
        "disk_mb": sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20,
    }


def percentiles(times: list[float]) -> dict[str, float]:
    """p50 and p95 (nearest rank, as benchmarks/peer.py reports them) of times in milliseconds."""
    ordered = sorted(times)
    return {"p50_ms": statistics.median(ordered), "p95_ms": ordered[math.ceil(0.95 * len(ordered)) - 1]}


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def in_process(
    system: str, store: Path, folder: Path, queries: dict[str, str], k: int, peer_queries: str = "same"
) -> dict[str, Any]:
    """`measure` in a fresh interpreter, so no system's memory or caches count for another."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as spec:
        job = {"system": system, "store": str(store), "folder": str(folder), "queries": queries, "k": k}
        json.dump(job | {"peer_queries": peer_queries}, spec)
    asked, answer = Path(spec.name), Path(spec.name).with_suffix(".out.json")
    command = [sys.executable, "-m", "benchmarks.embedded_peers", "--one", str(asked)]
    quiet = os.environ | {"LANCE_LOG": "error", "RUST_LOG": "error"}  # LanceDB warns of a coming change
    try:
        subprocess.run(command, check=True, cwd=ROOT.parent, env=quiet)
        return json.loads(answer.read_text())
    finally:
        asked.unlink()
        answer.unlink(missing_ok=True)


# --- the run -------------------------------------------------------------------------------------


def documents_of(ranked: dict[str, list[str]], document_of: dict[str, str]) -> dict[str, list[str]]:
    """Each query's documents, each at its best chunk."""
    return {qid: list(dict.fromkeys(document_of[c] for c in chunks)) for qid, chunks in ranked.items()}


def quality(
    store: Path, dataset: Path, work: Path, queries: int | None, systems: Sequence[str]
) -> dict[str, Any]:
    data = load_beir(dataset, "test", limit=queries)
    rows = read_rows(store)
    document_of = dict(zip(rows.ids, rows.documents, strict=True))
    report = {}
    for system in systems:
        found = in_process(system, store, work / f"quality-{system}", data.queries, DEPTH)
        scores = score_run(documents_of(found.pop("ranked"), document_of), data.qrels)
        report[system] = {
            "ndcg@10": round(100 * scores["ndcg@10"], 2),
            "recall@100": round(100 * scores["recall@100"], 2),
        }
        print(system, report[system], file=sys.stderr)
    return report


def speed(
    size: int, store: Path, queries: dict[str, str], work: Path, systems: Sequence[str], peer_queries: str
) -> dict[str, Any]:
    report = {}
    for system in systems:
        found = in_process(system, store, work / f"{size}-{system}", queries, TOP_K, peer_queries)
        found.pop("ranked")
        report[system] = {key: round(value, 2) for key, value in found.items()}
        print(size, system, report[system], file=sys.stderr)
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument("--quality-store", type=Path, default=QUALITY_STORE)
    parser.add_argument("--store", default=str(SIZED_STORE), help="the store of each size ({size} in it)")
    parser.add_argument("--queries", type=int, default=None, help="the first N judged test queries")
    parser.add_argument("--work", type=Path, default=RESULTS / "embedded-peers", help="peers' files, kept")
    parser.add_argument("--out", type=Path, default=RESULTS / "embedded-peers.json")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=SYSTEMS, help="some, in one run")
    parser.add_argument("--no-quality", action="store_true", help="speed only (quality needs no rerun)")
    parser.add_argument(
        "--peer-queries",
        choices=["same", "float"],
        default="same",
        help="peers' query vectors: ours (same), or the float model's, as Chroma's default runs it",
    )
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # a child: one system, one store
    args = parser.parse_args(argv)
    if args.one:
        spec = json.loads(args.one.read_text())
        folder = Path(spec["folder"])
        folder.mkdir(parents=True, exist_ok=True)
        result = measure(
            spec["system"], Path(spec["store"]), folder, spec["queries"], spec["k"], spec["peer_queries"]
        )
        args.one.with_suffix(".out.json").write_text(json.dumps(result))
        return result
    missing = [
        p
        for p in [args.quality_store, *(Path(args.store.format(size=s)) for s in args.sizes)]
        if not p.exists()
    ]
    if missing:
        sys.exit(f"missing {', '.join(map(str, missing))}: run benchmarks/latency.py first")
    report: dict[str, Any] = {}
    if not args.no_quality:
        report["quality"] = quality(args.quality_store, args.dataset, args.work, args.queries, args.systems)
    timed = load_beir(args.dataset, "test", limit=args.queries).queries
    for size in args.sizes:
        store = Path(args.store.format(size=size))
        report[f"{size} chunks"] = speed(size, store, timed, args.work, args.systems, args.peer_queries)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
