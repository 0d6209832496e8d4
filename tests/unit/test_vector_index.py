"""The embedded store's approximate vector index: past `index_rows` a level is searched through an HNSW graph
kept beside the file, which must find what the exact scan finds, follow every write, and never make a
search wait for a build."""

from __future__ import annotations

import logging
import subprocess
import sys

import numpy as np
import pytest

from agent_retrieval.context import Context
from agent_retrieval.core.process import ProcessState
from agent_retrieval.ingest import ingest, ingest_for_caller
from agent_retrieval.models import Document
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.stores import SQLiteStore
from agent_retrieval.stores.sqlite import vector_index
from agent_retrieval.stores.sqlite.cache import Matrix
from agent_retrieval.stores.sqlite.vector_index import VectorIndex, sidecar
from tests.conftest import WordHashEmbeddings

DIM, ROWS = 24, 1500


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)


def documents(vectors: np.ndarray, start: int = 0, group: str = "a") -> list[Document]:
    return [
        Document(
            f"d{i}",
            f"title {i}",
            f"text {i}",
            {"group": group},
            content_hash=str(i),
            text_hash=str(i),
            embedding=v,
        )
        for i, v in enumerate(vectors, start)
    ]


@pytest.fixture
def vectors() -> np.ndarray:
    return unit(np.random.default_rng(5).normal(size=(ROWS, DIM)))


@pytest.fixture
def graph_searches(monkeypatch) -> list[int]:
    """How many searches the graph answered."""
    calls: list[int] = []
    search = VectorIndex.search

    def counted(self, query, k):
        calls.append(k)
        return search(self, query, k)

    monkeypatch.setattr(VectorIndex, "search", counted)
    return calls


def ids(store: SQLiteStore, query: np.ndarray, k: int = 10, **scope) -> list[str]:
    return [hit.id for hit in store.vector_search("documents", query, k, **scope)]


def test_past_the_threshold_the_graph_finds_what_reading_every_vector_finds(
    tmp_path, vectors, graph_searches
):
    queries = unit(vectors[:60] + np.random.default_rng(6).normal(0, 0.3, (60, DIM)))
    with (
        SQLiteStore(tmp_path / "graph.db", index_rows=1000) as graph,
        SQLiteStore(tmp_path / "exact.db", index_rows=0) as exact,
    ):
        for store in (graph, exact):
            store.upsert(documents(vectors), [], "m")
        graph.refresh_indexes()
        found = [len(set(ids(graph, q)) & set(ids(exact, q))) / 10 for q in queries]
        assert len(graph_searches) == len(queries)  # every search went through the graph
        assert np.mean(found) >= 0.98
        # the same scores as the scan gives the same rows, in the same order
        pairs = [(h.id, h.vector_similarity) for h in graph.vector_search("documents", queries[0], 5)]
        assert pairs == [(h.id, h.vector_similarity) for h in exact.vector_search("documents", queries[0], 5)]


def test_the_graphs_candidates_come_best_first_by_the_rows_own_vectors(tmp_path, vectors):
    """The graph holds 8-bit copies, whose order is not the vectors' own: the k best of what it finds by
    the rows' vectors come back in their order (how many of the exact k it finds is bench-ann's measure)."""
    matrix = Matrix(0, "m", np.arange(ROWS, dtype=np.int64), vectors)
    index = vector_index.refreshed(None, matrix, tmp_path / "graph.usearch", searching=False)
    exact = vectors @ vectors[:30].T
    for query, column in zip(vectors[:30], exact.T, strict=True):
        found = index.search(query, 50)
        assert len(found) == 50 and np.all(np.diff(column[found]) <= 0)
        assert len(np.intersect1d(found, np.argsort(-column)[:50])) >= 45


def test_below_the_threshold_and_inside_a_narrow_scope_the_scan_stays_exact(
    tmp_path, vectors, graph_searches
):
    with SQLiteStore(tmp_path / "s.db", index_rows=ROWS + 1) as store:
        store.upsert(documents(vectors[:1000]) + documents(vectors[1000:], 1000, "b"), [], "m")
        ids(store, vectors[0])
        assert graph_searches == [] and not sidecar(store.path, "documents").exists()
    with SQLiteStore(tmp_path / "s.db", index_rows=1000) as store:
        store.refresh_indexes()
        assert ids(store, vectors[1200], 3, document_ids=["d1200", "d7"]) == ["d1200", "d7"]
        assert graph_searches == []  # two rows of 1,500: each scored, not looked for in the graph
        assert ids(store, vectors[3], 1) == ["d3"] and graph_searches == [1]


def test_a_filter_keeping_a_large_share_reads_deeper_into_the_graph(tmp_path, vectors, graph_searches):
    """A third of the rows: the graph's nearest 2 x k x 3 hold k of them, as the exact scan of that third
    finds them; a filter keeping a tenth of a percent (k more than 1,000 rows deep) is scanned exactly."""
    with (
        SQLiteStore(tmp_path / "graph.db", index_rows=1000) as graph,
        SQLiteStore(tmp_path / "exact.db", index_rows=0) as exact,
    ):
        for store in (graph, exact):
            store.upsert(documents(vectors[:1000]) + documents(vectors[1000:], 1000, "b"), [], "m")
        graph.refresh_indexes()
        queries = unit(vectors[:40] + np.random.default_rng(9).normal(0, 0.3, (40, DIM)))
        found = [
            len(
                set(ids(graph, q, 10, filters={"group": "b"}))
                & set(ids(exact, q, 10, filters={"group": "b"}))
            )
            for q in queries
        ]
        assert graph_searches == [60] * len(queries)  # 2 x 10 x 1,500 / 500 rows
        assert np.mean(found) >= 9.8
        graph.upsert(documents(vectors[:1], ROWS, "c"), [], "m")
        assert ids(graph, vectors[0], 3, filters={"group": "c"}) == [f"d{ROWS}"]
        assert len(graph_searches) == len(queries)  # one row of 1,501 passes: the scan


def test_the_graph_follows_every_write(tmp_path, vectors, graph_searches):
    moved = unit(np.random.default_rng(8).normal(size=DIM))
    with SQLiteStore(tmp_path / "s.db", index_rows=1000) as store:
        store.upsert(documents(vectors), [], "m")
        store.refresh_indexes()
        assert ids(store, vectors[10], 1) == ["d10"]
        searched = store._cache.indexes["documents"]  # what a search running now would hold
        store.delete_documents(["d10"])
        assert "d10" not in ids(store, vectors[10], 50)
        assert len(searched.graph) == ROWS  # changed on a copy, never under that search
        replaced = documents(moved[None, :], 20)[0]
        replaced.text_hash = replaced.content_hash = "new"
        store.upsert([replaced], [], "m")  # the same row, a new vector
        assert ids(store, moved, 1) == ["d20"]
        assert "d20" not in ids(store, vectors[20], 50)
        store.upsert(documents(unit(-vectors[:5]), ROWS), [], "m")  # new rows
        assert ids(store, unit(-vectors[2]), 1) == [f"d{ROWS + 2}"]
        assert len(graph_searches) == 5


def test_a_new_process_loads_the_saved_graph_and_adds_only_what_changed(tmp_path, vectors, monkeypatch):
    path = tmp_path / "s.db"
    with SQLiteStore(path, index_rows=1000) as store:
        store.upsert(documents(vectors), [], "m")
        store.refresh_indexes()
        assert sidecar(path, "documents").is_file()
        store.upsert(documents(unit(-vectors[:3]), ROWS), [], "m")  # after the save, too few rows to save
    added: list[int] = []
    from usearch.index import Index

    add = Index.add
    monkeypatch.setattr(
        Index, "add", lambda self, keys, *a, **kw: added.append(len(keys)) or add(self, keys, *a, **kw)
    )
    with SQLiteStore(path, index_rows=1000, process=ProcessState()) as fresh:
        assert ids(fresh, unit(-vectors[1]), 1) == [f"d{ROWS + 1}"]
        assert ids(fresh, vectors[7], 1) == ["d7"]
    assert added == [3]
    with SQLiteStore(path, index_rows=1000) as store:
        store.refresh_indexes()  # an ingest's end saves whatever changed
    with SQLiteStore(path, index_rows=1000, process=ProcessState()) as fresh:
        assert ids(fresh, unit(-vectors[1]), 1) == [f"d{ROWS + 1}"]
    assert added == [3, 3]  # the writer's own 3, then none in the new process


def test_a_search_never_waits_for_a_build_the_ingest_makes_it(tmp_path, vectors, graph_searches, monkeypatch):
    monkeypatch.setattr(vector_index, "SEARCH_ADDS", 100)
    loads: list[int] = []
    load = vector_index._load
    monkeypatch.setattr(vector_index, "_load", lambda *a: loads.append(1) or load(*a))
    path = tmp_path / "s.db"
    with SQLiteStore(path, index_rows=1000) as store:
        store.upsert(documents(vectors[:1100]), [], "m")
        store.refresh_indexes()
        store.upsert(documents(vectors[1100:], 1100), [], "m")  # 400 rows behind the saved graph
    loads.clear()
    with SQLiteStore(path, index_rows=1000, process=ProcessState()) as store:
        assert ids(store, vectors[1200], 1) == ["d1200"]  # answered by the scan
        assert ids(store, vectors[4], 1) == ["d4"]
        assert graph_searches == [] and loads == [1]  # found behind once, not read again for each search

    class Embedder:
        model_id = "m"

    with SQLiteStore(path, index_rows=1000) as store:
        ingest([], store, Embedder(), progress=False)  # type: ignore[arg-type]
    with SQLiteStore(path, index_rows=1000, process=ProcessState()) as store:
        assert ids(store, vectors[1200], 1) == ["d1200"] and graph_searches == [1]


def test_an_unreadable_saved_graph_is_built_again(tmp_path, vectors, graph_searches, caplog):
    path = tmp_path / "s.db"
    with SQLiteStore(path, index_rows=1000) as store:
        store.upsert(documents(vectors), [], "m")
    sidecar(path, "documents").write_bytes(b"not a graph" * 100)
    with caplog.at_level(logging.WARNING), SQLiteStore(path, index_rows=1000) as store:
        store.refresh_indexes()
        assert ids(store, vectors[9], 1) == ["d9"] and graph_searches == [1]
    assert "cannot be read" in caplog.text
    assert sidecar(path, "documents").stat().st_size > 100 * ROWS


def test_a_graph_mostly_replaced_is_built_anew_not_patched(tmp_path, vectors, monkeypatch):
    from usearch.index import Index

    removed: list[int] = []
    remove = Index.remove
    monkeypatch.setattr(
        Index, "remove", lambda self, keys, **kw: removed.append(len(keys)) or remove(self, keys, **kw)
    )
    with SQLiteStore(tmp_path / "s.db", index_rows=1000) as store:
        store.upsert(documents(vectors), [], "m")
        store.refresh_indexes()
        store.delete_documents([f"d{i}" for i in range(10)])
        store.refresh_indexes()
        assert removed == [10]  # a few rows gone: taken out of the graph
        renewed = documents(unit(-vectors))  # every vector new, as a new model's would be
        for doc in renewed:
            doc.text_hash = doc.content_hash = "again"
        store.upsert(renewed, [], "m")
        store.refresh_indexes()
        assert removed == [10] and len(store._cache.indexes["documents"].graph) == ROWS
        assert ids(store, unit(-vectors[3]), 1) == ["d3"]


def test_a_callers_write_never_builds_the_graph(tmp_path, vectors, graph_searches):
    path = tmp_path / "s.db"
    embedder = Embedder(WordHashEmbeddings(size=DIM), "m", batch_size=8)
    with SQLiteStore(path, index_rows=1000) as store:
        store.upsert(documents(vectors), [], "m")
        report = ingest_for_caller(
            [("documents[0]", {"title": "Quokkas", "content": "A sanctuary of quokkas."})],
            store,
            embedder,
            Context(db_path=str(path)),
            source="index_document",
        )
        assert report.written == 1 and not report.errors
        assert not sidecar(path, "documents").exists()  # left to searches (and to the next ingest)


def test_the_local_embedder_loads_after_the_graph(tmp_path, vectors):
    """usearch's module, loaded before onnxruntime's, crashed the process (a segmentation fault)."""
    pytest.importorskip("onnxruntime")
    with SQLiteStore(tmp_path / "s.db", index_rows=0) as store:
        store.upsert(documents(vectors), [], "m")
    script = f"""
from agent_retrieval.stores import SQLiteStore
with SQLiteStore({str(tmp_path / "s.db")!r}, index_rows=1000) as store:
    store.refresh_indexes()
import onnxruntime
print("loaded", onnxruntime.get_device())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "loaded" in done.stdout, done.stderr[-2000:]


def test_the_graphs_memory_is_measured_once_per_row_count(tmp_path, vectors, monkeypatch):
    """Every keyword search weighs the caches against their budget; usearch measures a graph's memory in
    half a millisecond at 100K rows, so it is measured again only when the graph's rows change."""
    with SQLiteStore(tmp_path / "s.db", index_rows=1000) as store:
        store.upsert(documents(vectors), [], "m")
        store.refresh_indexes()
        graph = store._cache.indexes["documents"].graph
        measured: list[int] = []
        usage = type(graph).memory_usage
        monkeypatch.setattr(
            type(graph), "memory_usage", property(lambda g: measured.append(1) or usage.fget(g))
        )
        for _ in range(3):
            store.keyword_search("documents", "text title", 5)
        assert store._cache.nbytes > 0 and len(measured) <= 1
        store.upsert(documents(unit(-vectors[:5]), ROWS), [], "m")
        store.refresh_indexes()
        store.keyword_search("documents", "text title", 5)
        assert store._cache.indexes["documents"].nbytes >= 0 and len(measured) <= 3
