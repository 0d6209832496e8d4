"""A peer in the same run: LangChain's usual hybrid recipe against our search, on BEIR SciFact test.

Theirs: langchain-classic's EnsembleRetriever (weighted RRF, c=60) over langchain-community's
BM25Retriever (rank_bm25's BM25Okapi on `str.split()` tokens) and langchain-core's InMemoryVectorStore,
weights [0.5, 0.5]; one LangChain Document per abstract (title + " " + text, as BEIR joins them).
Ours: `Retrieval.search` as the tools run it, at "documents" level and at "chunks" level (each document
counted at its best chunk), library defaults, HyDE off.

Fair by construction: the same all-MiniLM-L6-v2 object embeds for both (ours through the Embedder; theirs
through the same LocalEmbeddings, answering lists of floats as LangChain embeddings do); the same queries;
both warmed with train queries; each test query then runs once per system, sequentially, the systems'
order rotating per query so load from other jobs falls on all of them alike; our query-vector cache is
cleared before every call. Both rank 100 deep: the peer's retrievers each return k=100 (their default is 4),
and ours fetches 100 candidates per side and returns 100 hits (the tools cap top_k at 50; evaluation.py
deepens the same way).

Our store is benchmarks/results/scifact-base.db (made by benchmarks/latency.py), copied to a temp folder
(trimmed to the subset for a smaller corpus) and checked by an ingest pass that embeds nothing when it is
current; without it, ours is ingested fresh. The peer's corpus vectors are cached in <out>/peer-vectors.npz.
`--ingest-sample` times a fresh build of both on the first N documents.

    python benchmarks/peer.py            # 5183 abstracts, 300 test queries -> benchmarks/results/peer.json
    python benchmarks/peer.py --smoke    # 200 documents, 20 queries, about a minute -> peer-smoke.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
from langchain_classic.retrievers import EnsembleRetriever
from langchain_community.retrievers import BM25Retriever
from langchain_core.documents import Document as LCDocument
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from agent_retrieval import (
    Context,
    Embedder,
    EmbeddingSettings,
    Retrieval,
    hyde,
    load_documents,
    make_embedder,
)
from agent_retrieval.evaluation import RANKING_SETTINGS, Dataset, DatasetError, load_beir, score_run
from agent_retrieval.ingest import ingest
from agent_retrieval.models import SearchRequest, parse_request

ROOT = Path(__file__).resolve().parent
DATASET = ROOT.parent.parent / "shared" / "datasets" / "scifact"
RESULTS = ROOT / "results"
CACHED_STORE = RESULTS / "scifact-base.db"
DEPTH = 100
THEIRS = "langchain-ensemble"
SYSTEMS = (THEIRS, "ours-documents", "ours-chunks")
OUR_SETTINGS = (*RANKING_SETTINGS, "chunk_size", "chunk_overlap")
PACKAGES = (
    "langchain-core",
    "langchain-classic",
    "langchain-community",
    "rank-bm25",
    "sentence-transformers",
    "torch",
    "agent-retrieval",
)


# --- theirs -------------------------------------------------------------------------------------


class PeerEmbeddings(Embeddings):
    """Our LocalEmbeddings answering lists of floats, as HuggingFaceEmbeddings does; known texts looked up."""

    def __init__(self, model: Embeddings, known: dict[str, np.ndarray] | None = None):
        self.model, self.known = model, known if known is not None else {}

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.known]
        if missing:
            self.known.update(zip(missing, self.model.embed_documents(missing), strict=False))
        return [np.asarray(self.known[t], dtype=np.float64).tolist() for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return np.asarray(self.model.embed_query(text), dtype=np.float64).tolist()


def peer_documents(dataset: Dataset) -> list[LCDocument]:
    """One LangChain Document per abstract: title and text joined as BEIR joins them."""
    return [
        LCDocument(page_content=f"{d.title} {d.content}".strip(), id=d.id, metadata={"title": d.title})
        for d in dataset.documents()
    ]


def build_peer(
    documents: list[LCDocument], embeddings: Embeddings
) -> tuple[EnsembleRetriever, dict[str, float]]:
    """The recipe as a user writes it, k=100 on both retrievers; seconds spent on each index."""
    started = time.perf_counter()
    bm25 = BM25Retriever.from_documents(documents, k=DEPTH)
    built = time.perf_counter()
    store = InMemoryVectorStore(embedding=embeddings)
    store.add_documents(documents)
    ensemble = EnsembleRetriever(
        retrievers=[bm25, store.as_retriever(search_kwargs={"k": DEPTH})], weights=[0.5, 0.5]
    )
    done = time.perf_counter()
    return ensemble, {
        "bm25_seconds": built - started,
        "vector_store_seconds": done - built,
        "index_seconds": done - started,
    }


def cached_vectors(
    texts: Sequence[str], model: Embeddings, model_id: str, path: Path
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Vectors of `texts`, embedding only those not in the cache file (which records the embedding time)."""
    hashes = {t: hashlib.sha256(t.encode()).hexdigest() for t in texts}
    stored: dict[str, np.ndarray] = {}
    seconds = 0.0
    if path.exists():
        with np.load(path) as cache:
            if str(cache["model"]) == model_id:
                stored = dict(zip(cache["hashes"].tolist(), cache["vectors"], strict=False))
                seconds = float(cache["seconds"])
    recorded_rate = seconds / len(stored) if stored else 0.0
    missing = [t for t in dict.fromkeys(texts) if hashes[t] not in stored]
    reused = len(set(texts)) - len(missing)
    started = time.perf_counter()
    if missing:
        print(f"embedding {len(missing)} texts for the peer (cached in {path})", file=sys.stderr)
        vectors = np.asarray(model.embed_documents(missing), np.float32)
        stored.update(zip((hashes[t] for t in missing), vectors, strict=False))
    now = time.perf_counter() - started
    if missing:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.npz")
        np.savez(
            partial,
            model=model_id,
            hashes=np.array(list(stored)),
            vectors=np.stack(list(stored.values())),
            seconds=seconds + now,
        )
        partial.replace(path)
    info = {
        "embedded_now": len(missing),
        "embed_seconds_now": now,
        "reused_from_cache": reused,
        "corpus_embedding_seconds": now + reused * recorded_rate,
        "note": "reused vectors are timed at the rate recorded when the cache was made" if reused else "",
    }
    return {t: stored[hashes[t]] for t in texts}, info


# --- ours ---------------------------------------------------------------------------------------


def open_ours(
    dataset: Dataset, folder: Path, embedder: Embedder, cached: Path | None
) -> tuple[Retrieval, dict[str, Any]]:
    """Our store for the dataset: a copy of the cached store (trimmed to a subset) checked by an ingest pass
    that embeds only what changed, or, with no cached store, a fresh ingest."""
    path = folder / "ours.db"
    from_cache = cached is not None and cached.is_file()
    if from_cache:
        for suffix in ("", "-wal"):
            if Path(f"{cached}{suffix}").exists():
                shutil.copyfile(f"{cached}{suffix}", f"{path}{suffix}")
    context = Context(db_path=str(path), candidates=DEPTH)
    retrieval = Retrieval(context, embedder=embedder)
    started = time.perf_counter()
    if from_cache and dataset.subset is not None:
        others = [d.id for d in load_documents([dataset.corpus]) if d.id not in dataset.subset]
        retrieval.store.delete_documents(others)
    report = ingest(dataset.documents(), retrieval.store, embedder, context, progress=False)
    seconds = time.perf_counter() - started
    stored = retrieval.store.stats()
    if stored.documents != dataset.corpus_size:
        raise SystemExit(
            f"{cached if from_cache else path} holds {stored.documents} documents, the dataset "
            f"{dataset.corpus_size}: delete the cached store so it is rebuilt"
        )
    note = "fresh ingest: chunk, embed documents and chunks, write"
    if from_cache:
        trimmed = " trimmed to the subset" if dataset.subset else ""
        note = f"a copy of the cached store{trimmed}; the time is an ingest pass that checks it"
    return retrieval, {
        "from_cache": from_cache,
        "index_seconds": seconds,
        "documents": stored.documents,
        "chunks": stored.chunks,
        "texts_embedded": report.embedded,
        "note": note,
    }


def request(query: str) -> SearchRequest:
    """A tool's request, HyDE off, 100 deep (past the tools' cap of 50, as evaluation.py does)."""
    checked = parse_request(SearchRequest, {"query": query, "hyde": "off"})
    return checked.model_copy(update={"top_k": DEPTH})


def document_ids(hits: Sequence[Any]) -> list[str]:
    """Ranked document ids; a chunk ranking counts each document at its best chunk."""
    return list(dict.fromkeys(h.document_id for h in hits))


# --- the run ------------------------------------------------------------------------------------


def run(systems: dict[str, Callable[[str], list[str]]], queries: dict[str, str]) -> tuple[dict, dict]:
    """Each query once per system, timed; the systems' order rotates per query."""
    runs: dict[str, dict[str, list[str]]] = {name: {} for name in systems}
    times: dict[str, list[float]] = {name: [] for name in systems}
    names = list(systems)
    for i, (qid, text) in enumerate(queries.items()):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            hyde.clear_cache()  # no query vector is reused from another system's call
            started = time.perf_counter()
            ranked = systems[name](text)
            times[name].append((time.perf_counter() - started) * 1000)
            runs[name][qid] = ranked[:DEPTH]
    return runs, times


def latency(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "p50_ms": statistics.median(ordered),
        "p95_ms": ordered[math.ceil(0.95 * len(ordered)) - 1],
        "mean_ms": statistics.fmean(ordered),
    }


def components(ensemble: EnsembleRetriever, retrieval: Retrieval, queries: dict[str, str]) -> dict[str, dict]:
    """Each side alone (untimed), to see where the hybrids differ: their BM25 and vector, our keyword and
    vector (documents level)."""
    bm25, vector = ensemble.retrievers
    runs: dict[str, dict[str, list[str]]] = {
        "theirs-bm25": {},
        "theirs-vector": {},
        "ours-keyword": {},
        "ours-vector": {},
    }
    for qid, text in queries.items():
        runs["theirs-bm25"][qid] = [d.id for d in bm25.invoke(text)]
        runs["theirs-vector"][qid] = [d.id for d in vector.invoke(text)]
        found = retrieval.candidates(request(text), "documents")
        runs["ours-keyword"][qid] = document_ids(found.keyword_hits)
        runs["ours-vector"][qid] = document_ids(found.vector_hits)
    return runs


def fresh_builds(dataset: Dataset, size: int, embedder: Embedder, folder: Path) -> dict[str, Any]:
    """Both indexes built from nothing on the corpus's first `size` documents (nothing cached)."""
    first = {d.id for d, _ in zip(dataset.documents(), range(size), strict=False)}
    sample = Dataset(dataset.folder, dataset.split, {}, {}, len(first), subset=first)
    started = time.perf_counter()
    with Retrieval(Context(db_path=str(folder / "sample.db")), embedder=embedder) as retrieval:
        report = ingest(sample.documents(), retrieval.store, embedder, retrieval.context, progress=False)
    ours = time.perf_counter() - started
    _, theirs = build_peer(peer_documents(sample), PeerEmbeddings(embedder.embeddings))
    return {
        "documents": len(first),
        "ours_seconds": ours,
        "ours_texts_embedded": report.embedded,
        "theirs_seconds": theirs["index_seconds"],
        "theirs_texts_embedded": len(first),
    }


def warm_queries(folder: Path, count: int, fallback: dict[str, str]) -> list[str]:
    """Train queries warm the systems, so no measured query finds anything of its own cached."""
    try:
        return list(load_beir(folder, "train", limit=count).queries.values())
    except DatasetError:
        return list(fallback.values())[:count]


def table(result: dict[str, Any]) -> str:
    machine = result["machine"]
    head = (
        f"BEIR {result['dataset']} {result['split']}: {result['queries']} queries, {result['documents']} "
        f"documents, {DEPTH} deep; load {machine['load_before'][0]:.2f} -> "
        f"{machine['load_after'][0]:.2f} on {machine['cpus']} cpus"
    )
    lines = [head, "", f"{'system':<20}{'nDCG@10':>9}{'R@100':>9}{'p50 ms':>9}{'p95 ms':>9}{'mean ms':>9}"]
    for name in SYSTEMS:
        row = result["systems"][name]
        lines.append(
            f"{name:<20}{100 * row['ndcg@10']:>9.2f}{100 * row['recall@100']:>9.2f}"
            f"{row['p50_ms']:>9.1f}{row['p95_ms']:>9.1f}{row['mean_ms']:>9.1f}"
        )
    lines += ["", f"{'ours / theirs':<20}{'nDCG@10':>9}{'R@100':>9}{'p50':>9}{'p95':>9}"]
    for name, ratio in result["ratios"].items():
        figures = (ratio[k] for k in ("ndcg@10", "recall@100", "p50", "p95"))
        lines.append(f"{name:<20}" + "".join(f"{value:>9.2f}" for value in figures))
    lines += ["", "each side alone (documents level, untimed):"]
    for name, scores in result["components"].items():
        lines.append(f"{name:<20}{100 * scores['ndcg@10']:>9.2f}{100 * scores['recall@100']:>9.2f}")
    build = result["build"]
    theirs, ours = build["theirs"], build["ours"]
    lines += [
        "",
        (
            f"theirs build: corpus embedding {theirs['corpus_embedding_seconds']:.1f} s "
            f"({theirs['embedded_now']} texts embedded now, {theirs['reused_from_cache']} from "
            f"cache), then BM25 {theirs['bm25_seconds']:.1f} s + vector store "
            f"{theirs['vector_store_seconds']:.1f} s"
        ),
        (
            f"ours build: {ours['index_seconds']:.1f} s, {ours['note']} ({ours['texts_embedded']} texts "
            f"embedded; {ours['documents']} documents, {ours['chunks']} chunks)"
        ),
    ]
    if build.get("fresh_sample"):
        sample = build["fresh_sample"]
        lines.append(
            f"fresh build of {sample['documents']} documents: ours {sample['ours_seconds']:.1f} s "
            f"({sample['ours_texts_embedded']} texts embedded), theirs "
            f"{sample['theirs_seconds']:.1f} s ({sample['theirs_texts_embedded']} texts embedded)"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", type=Path, default=DATASET, help="BEIR SciFact folder")
    parser.add_argument("--out", type=Path, default=RESULTS, help="for the JSON and the peer's vector cache")
    parser.add_argument("--store", type=Path, default=CACHED_STORE, help="our cached SciFact store (copied)")
    parser.add_argument("--queries", type=int, default=None, help="keep the first N judged test queries")
    parser.add_argument("--documents", type=int, default=None, help="a smaller corpus (judged ones first)")
    parser.add_argument("--warmup", type=int, default=20, help="train queries run untimed first")
    parser.add_argument(
        "--ingest-sample",
        type=int,
        default=300,
        help="time fresh builds of both on the first N documents (0: off)",
    )
    parser.add_argument("--smoke", action="store_true", help="200 documents, 20 queries, 5 warm-up queries")
    args = parser.parse_args(argv)
    if args.smoke:
        args.documents, args.queries, args.warmup, args.ingest_sample = 200, 20, 5, 0
    args.out.mkdir(parents=True, exist_ok=True)
    library = _library_state()  # before the run: others may edit the library while it goes
    dataset = load_beir(args.dataset, "test", limit=args.queries, max_documents=args.documents)
    embedder = make_embedder(EmbeddingSettings())
    with tempfile.TemporaryDirectory(prefix="peer-bench-") as scratch:
        folder = Path(scratch)
        retrieval, ours_build = open_ours(dataset, folder, embedder, args.store)
        documents = peer_documents(dataset)
        known, embedding_info = cached_vectors(
            [d.page_content for d in documents],
            embedder.embeddings,
            embedder.model_id,
            args.out / "peer-vectors.npz",
        )
        ensemble, theirs_build = build_peer(documents, PeerEmbeddings(embedder.embeddings, known))
        systems: dict[str, Callable[[str], list[str]]] = {
            THEIRS: lambda q: [d.id for d in ensemble.invoke(q)],
            "ours-documents": lambda q: document_ids(retrieval.search(request(q), "documents").hits),
            "ours-chunks": lambda q: document_ids(retrieval.search(request(q), "chunks").hits),
        }
        warm = warm_queries(args.dataset, max(1, args.warmup), dataset.queries)
        embedder.embed_query("load the model")  # once, so no system's first call pays for loading it
        first_ms = {name: _timed(fn, warm[0]) for name, fn in systems.items()}  # first call after the build
        run(systems, {f"warm{i}": q for i, q in enumerate(warm)})
        load_before = os.getloadavg()
        runs, times = run(systems, dataset.queries)
        load_after = os.getloadavg()
        alone = {
            name: score_run(ranked, dataset.qrels)
            for name, ranked in components(ensemble, retrieval, dataset.queries).items()
        }
        sample = fresh_builds(dataset, args.ingest_sample, embedder, folder) if args.ingest_sample else None
        retrieval.close()
    rows = {
        name: {
            **score_run(runs[name], dataset.qrels),
            **latency(times[name]),
            "first_query_ms": first_ms[name],
        }
        for name in SYSTEMS
    }
    theirs = rows[THEIRS]
    ratios = {
        name: {
            "ndcg@10": rows[name]["ndcg@10"] / theirs["ndcg@10"],
            "recall@100": rows[name]["recall@100"] / theirs["recall@100"],
            "p50": rows[name]["p50_ms"] / theirs["p50_ms"],
            "p95": rows[name]["p95_ms"] / theirs["p95_ms"],
        }
        for name in SYSTEMS
        if name != THEIRS
    }
    context = retrieval.context
    result = {
        "dataset": dataset.folder.name,
        "split": dataset.split,
        "queries": len(dataset.queries),
        "documents": dataset.corpus_size,
        "depth": DEPTH,
        "warmup_queries": len(warm),
        "systems": rows,
        "ratios": ratios,
        "components": alone,
        "build": {"theirs": {**theirs_build, **embedding_info}, "ours": ours_build, "fresh_sample": sample},
        "settings": {
            "ours": {k: context.get(k) for k in OUR_SETTINGS}
            | {"hyde": "off", "top_k": DEPTH, "embedding": embedder.model_id},
            "theirs": {
                "weights": ensemble.weights,
                "c": ensemble.c,
                "id_key": ensemble.id_key,
                "k": DEPTH,
                "bm25": "rank_bm25 BM25Okapi defaults (k1=1.5, b=0.75, epsilon=0.25) on str.split()",
                "embedding": f"{embedder.model_id} through our LocalEmbeddings, as lists of floats",
                "document": "title + ' ' + text",
            },
        },
        "machine": {
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": load_after,
            "python": platform.python_version(),
            "packages": {p: _version(p) for p in PACKAGES},
        },
        "library": library,
    }
    print(table(result))
    name = "peer-smoke.json" if args.smoke else "peer.json"
    (args.out / name).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out / name}", file=sys.stderr)
    return result


def _timed(search: Callable[[str], list[str]], query: str) -> float:
    started = time.perf_counter()
    search(query)
    return (time.perf_counter() - started) * 1000


def _library_state() -> dict[str, Any]:
    """The commit, and library files changed since it: what "ours" was when these figures were taken."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", "-C", str(ROOT.parent), *args],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout.strip()
        except OSError:
            return ""

    changed = git("status", "--porcelain", "--", "agent_retrieval").splitlines()
    return {"commit": git("rev-parse", "--short", "HEAD"), "modified": [line[3:] for line in changed]}


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


if __name__ == "__main__":
    main()
