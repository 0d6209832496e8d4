"""What only the embedded store does: exact MaxScore pruning of keyword search, migrations, any dimension."""

from __future__ import annotations

import multiprocessing
import random
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from agent_retrieval.core.process import ProcessState
from agent_retrieval.core.text import keyword_terms
from agent_retrieval.errors import InvalidRequest
from agent_retrieval.models import Chunk, ChunkSearchRequest, Document, parse_request
from agent_retrieval.stores import SQLiteStore, postings
from agent_retrieval.stores.base import DocumentState
from agent_retrieval.stores.sqlite import keywords
from agent_retrieval.stores.sqlite.cache import SCOPES, file_caches
from agent_retrieval.stores.sqlite.schema import MIGRATIONS, bm25_score


def zipf_corpus(rows: int, seed: int = 3) -> tuple[list[Document], list[Chunk]]:
    """Chunks of words drawn with Zipf-like frequencies, so queries mix rare and very common terms."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}x" for i in range(400)]
    weights = [1 / (i + 1) for i in range(len(vocabulary))]
    docs, chunks = [], []
    for n in range(rows):
        words = rng.choices(vocabulary, weights, k=rng.randint(5, 60))
        docs.append(Document(f"d{n}", f"doc {n}", " ".join(words), content_hash=str(n)))
        chunks.append(Chunk(f"d{n}#0", f"d{n}", 0, " ".join(words), f"doc {n}", text_hash=str(n)))
    return docs, chunks


def full_bm25(path: str | Path, level: str, query: str, k: int) -> list[tuple[str, float]]:
    """The reference: FTS5's bm25, the title weighted as the store weighs it, over every row holding any
    query term, no pruning."""
    match = " OR ".join(f'"{t}"' for t in keyword_terms(query))
    table = "chunks" if level == "chunks" else "documents"
    with sqlite3.connect(path) as conn:
        return conn.execute(
            f"""SELECT d.id, {bm25_score(level)} AS s FROM {level}_fts
            JOIN {table} d ON d.rowid = {level}_fts.rowid WHERE {level}_fts MATCH ?
            ORDER BY s DESC, d.id LIMIT ?""",
            (match, k),
        ).fetchall()


@pytest.mark.parametrize("dense_rowids", [2**25, 1], ids=["summed by rowid", "sorted"])
def test_keyword_search_prunes_without_changing_the_ranking(tmp_path, monkeypatch, dense_rowids):
    """Every path: the whole level and a scope (every document named, so the same rows) from the words'
    cached postings (their parts summed in an array by rowid, or, past DENSE_ROWIDS, by sorting the rows),
    and both through FTS5, as when a common word's postings are not read; each prunes, and each ranks as
    scoring every row does."""
    monkeypatch.setattr(postings, "DENSE_ROWIDS", dense_rowids)
    path = str(tmp_path / "zipf.db")
    store = SQLiteStore(path)
    docs, chunks = zipf_corpus(600)
    store.upsert(docs, chunks, "test/none")
    everyone = [d.id for d in docs]
    rng = random.Random(11)
    passes: list[str] = []
    original = store._db.connection
    monkeypatch.setattr(store._db, "connection", lambda: _Recorder(original(), passes))
    scored: list[tuple[int, int]] = []  # per call from postings: rows scored, rows holding any of the words
    pruned = False  # some search scored fewer rows than hold its words
    rows_scored = postings._scored

    def counting(essential, lists):
        rows, scores = rows_scored(essential, lists)
        scored.append((len(rows), len(np.unique(np.concatenate([p.rowids for p in lists])))))
        return rows, scores

    monkeypatch.setattr(postings, "_scored", counting)
    read_postings = keywords.postings
    for n in range(40):
        # the last ten searches find no postings read: FTS5 scores them
        monkeypatch.setattr(keywords, "postings", read_postings if n < 30 else lambda *_: None)
        query = " ".join(
            f"w{rng.choice([0, 1, 2, 3, rng.randint(4, 399), rng.randint(50, 399)])}x"
            for _ in range(rng.randint(3, 8))
        )
        for level in ("chunks", "documents"):
            for k in (1, 5, 20):
                for scope in (None, everyone):
                    scored.clear()
                    found = store.keyword_search(level, query, k, document_ids=scope)
                    pruned |= bool(scored) and all(rows < holding for rows, holding in scored)
                    assert_ranked_as_every_row(found, path, level, query, k)
    # pruning really happened on both paths: some searches scored only rows holding a rarer term
    assert any(" AND (" in match for match in passes)
    assert pruned


def test_a_words_postings_are_read_once_until_the_next_write(tmp_path, monkeypatch):
    path = str(tmp_path / "once.db")
    store = SQLiteStore(path)
    docs, chunks = zipf_corpus(300)
    store.upsert(docs, chunks, "test/none")
    passes: list[str] = []
    original = store._db.connection
    monkeypatch.setattr(store._db, "connection", lambda: _Recorder(original(), passes))
    query = "w0x w1x w57x"
    first = [h.id for h in store.keyword_search("chunks", query, 5)]
    read = len(passes)
    assert [h.id for h in store.keyword_search("chunks", query, 5)] == first
    assert len(passes) == read  # the second search read no postings
    # counted in the file's cache, which store_cache_mb bounds (no vectors here: the postings are all of it)
    assert store._cache.nbytes == store._cache.postings["chunks"].nbytes > 0

    # A word no row held, cached as such, then written: both paths see it (scores, row counts, idf).
    assert store.keyword_search("chunks", "w0x w1x qqqx", 1)[0].unknown_terms == 1
    new = Document("new", "new", "qqqx qqqx w1x", content_hash="new")
    store.upsert([new], [Chunk("new#0", "new", 0, "qqqx qqqx w1x", "new", text_hash="new")], "test/none")
    for scope in ([d.id for d in docs] + ["new"], None):  # the scope first: it reads no postings
        best = store.keyword_search("chunks", "w0x w1x qqqx", 1, document_ids=scope)[0]
        assert (best.id, best.unknown_terms) == ("new#0", 0), scope
        assert best.keyword_score == pytest.approx(
            full_bm25(path, "chunks", "w0x w1x qqqx", 1)[0][1], rel=1e-9
        )


def test_the_postings_kept_stay_within_their_bound(tmp_path, monkeypatch):
    """Searches past the bound still rank as scoring every row does; a word larger than the bound is used
    but not kept, and does not push out the words that fit."""
    monkeypatch.setattr(postings, "POSTINGS_CACHE_BYTES", 3_000)
    path = str(tmp_path / "bound.db")
    store = SQLiteStore(path)
    store.upsert(*zipf_corpus(300), "test/none")
    rng = random.Random(2)
    for _ in range(30):
        query = " ".join(f"w{rng.randint(20, 399)}x" for _ in range(4))
        assert_ranked_as_every_row(store.keyword_search("documents", query, 5), path, "documents", query, 5)
        assert store._cache.postings["documents"].nbytes <= 3_000
    kept = store._cache.postings["documents"]
    before = set(kept._terms)
    store.keyword_search("documents", "w0x", 5)  # in most rows: 16 bytes a row, past the bound
    assert "w0x" not in kept._terms and set(kept._terms) == before


def test_the_postings_count_in_the_budget_of_what_the_process_keeps(tmp_path):
    process = ProcessState()
    store = SQLiteStore(tmp_path / "budget.db", cache_mb=1, process=process)
    store.upsert(*zipf_corpus(3000), "test/none")
    kept = []
    for first in range(0, 400, 8):  # every word: about 1.2 MB of postings
        store.keyword_search("documents", " ".join(f"w{i}x" for i in range(first, first + 8)), 5)
        kept.append(bool(file_caches(process)._kept))
    # kept while within the 1 MB budget, then dropped: the next store on the file reads it again
    assert kept[0] and not kept[-1]


def test_a_query_holding_a_word_commoner_than_postings_are_kept_for_is_scored_by_fts5(tmp_path, monkeypatch):
    monkeypatch.setattr(keywords, "POSTINGS_ROWS", 100)
    path = str(tmp_path / "common.db")
    store = SQLiteStore(path)
    store.upsert(*zipf_corpus(300), "test/none")
    for query in ("w0x w150x w230x", "w150x w230x"):  # w0x is in most rows; the others in few
        assert_ranked_as_every_row(store.keyword_search("chunks", query, 5), path, "chunks", query, 5)
    assert set(store._cache.postings["chunks"]._terms) == {"w150x", "w230x"}  # read by the second query only


def assert_ranked_as_every_row(hits, path: str | Path, level: str, query: str, k: int) -> None:
    """The hits are the rows, with the scores, that FTS5's bm25 over every row gives: tied rows in any order,
    and a row tied with the last one kept on either side of the cut."""
    got = [(h.id, h.keyword_score) for h in hits]
    want = full_bm25(path, level, query, k)
    assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9), query
    cut = want[-1][1] * (1 + 1e-9) if len(want) == k else 0.0
    assert {i for i, s in got if s > cut} == {i for i, s in want if s > cut}, query


class _Recorder:
    """Wraps a connection to record the FTS5 expressions keyword search sends."""

    def __init__(self, conn: sqlite3.Connection, matches: list[str]):
        self._conn, self._matches = conn, matches

    def execute(self, sql: str, params=()):
        if "bm25(" in sql and params:
            self._matches.append(params[0])
        return self._conn.execute(sql, params)

    def __getattr__(self, name: str):
        return getattr(self._conn, name)


def test_a_version_1_store_is_migrated_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for statement in MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO documents (id, title, content, content_hash) VALUES ('a', 'Fees', 'commission', 'h')"
    )
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    assert store.stats().schema_version == len(MIGRATIONS)
    assert [h.id for h in store.keyword_search("documents", "commission", 5)] == ["a"]


def test_the_embedded_store_switches_to_a_model_of_another_dimension_after_reembed(tmp_path):
    store = SQLiteStore(tmp_path / "dims.db")
    doc = Document("a", "A", "text", content_hash="h", embedding=np.ones(4, dtype=np.float32) / 2)
    store.upsert([doc], [], "old/model")
    pending = store.pending_embeddings("documents", "new/model", 10)
    pending[0].embedding = np.ones(2, dtype=np.float32) / np.sqrt(2)
    store.set_embeddings("documents", pending, "new/model")
    store.set_embedding_model("new/model", 2)
    assert store.embedding_model() == ("new/model", 2)
    assert [h.id for h in store.vector_search("documents", np.ones(2, dtype=np.float32) / np.sqrt(2), 5)] == [
        "a"
    ]


def test_concurrent_keyword_searches_survive_the_idf_cache_being_emptied(tmp_path, monkeypatch):
    """A long-lived server's cache passes its limit and is emptied while other threads still read it; a tiny
    limit makes that happen every few calls instead of once per 50,000 words."""
    monkeypatch.setattr(keywords, "IDF_CACHE_TERMS", 4)
    store = SQLiteStore(tmp_path / "idf.db")
    store.upsert(*zipf_corpus(300), "test/none")
    rng = random.Random(5)
    queries = [" ".join(f"w{rng.randint(0, 399)}x" for _ in range(6)) for _ in range(150)]
    want = {q: [h.id for h in store.keyword_search("chunks", q, 5)] for q in queries}
    got: dict[int, list[list[str]]] = {}
    failures: list[BaseException] = []

    def search(worker: int) -> None:
        try:
            got[worker] = [[h.id for h in store.keyword_search("chunks", q, 5)] for q in queries]
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=search, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert all(results == [want[q] for q in queries] for results in got.values())


def test_summarize_reads_only_the_chunks_it_returns(tmp_path):
    """Counted in SQLite's virtual-machine steps (a progress handler called on each): returning the first 11
    chunks of a 5,000-chunk document takes no more steps than returning all 11 of an 11-chunk one."""
    store = SQLiteStore(tmp_path / "long.db")
    docs = [Document(name, name.title(), "text", content_hash=name) for name in ("long", "short")]
    chunks = [
        Chunk(f"{doc}#{i}", doc, i, f"part {i} of {doc}", doc.title(), text_hash=f"{doc}{i}")
        for doc, count in (("long", 5000), ("short", 11))
        for i in range(count)
    ]
    store.upsert(docs, chunks, "test/none")

    def summarize(ids: list[str], limit: int) -> tuple[list[str], int]:
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0  # go on

        conn = store._db.connection()
        conn.set_progress_handler(count, 1)
        try:
            return [h.id for h in store.document_chunks(ids, limit)], steps
        finally:
            conn.set_progress_handler(None, 1)

    long_ids, long_steps = summarize(["long"], 11)
    short_ids, short_steps = summarize(["short"], 11)
    assert long_ids == [f"long#{i}" for i in range(11)] and short_ids == [f"short#{i}" for i in range(11)]
    assert long_steps <= 2 * short_steps
    both, _ = summarize(["short", "ghost", "long"], 14)  # the caller's order, then reading order, 14 rows
    assert both == [f"short#{i}" for i in range(11)] + ["long#0", "long#1", "long#2"]


def test_publishing_is_refused_the_embedded_store_has_no_rows_shared_by_tenants(tmp_path):
    store = SQLiteStore(tmp_path / "store.db", tenant="acme")
    doc = Document("notice", "Notice", "Opening hours", content_hash="h", source="notice.md")
    with pytest.raises(InvalidRequest, match=r"public: .*Postgres or Supabase"):
        store.upsert([Document("x", "X", "x", content_hash="h", public=True), doc], [], "test/none")
    assert store.stats().documents == 0  # refused whole, before any write
    store.upsert([doc], [], "test/none")
    assert store.document_states(["notice"]) == {"notice": DocumentState("h", False, "notice.md", False)}
    found = store.keyword_search("documents", "opening hours", 5)
    assert [(h.tenant, h.id) for h in found] == [("acme", "notice")]


def test_open_store_names_the_tenant_in_every_hit(tmp_path):
    from agent_retrieval.context import Context
    from agent_retrieval.stores import open_store

    for tenant in ("acme", ""):
        with open_store(Context(db_path=str(tmp_path / "store.db"), tenant_id=tenant).store) as store:
            store.upsert(
                [Document("d", "Doc", "hours", content_hash="h")],
                [Chunk("d#0", "d", 0, "hours", "Doc")],
                "test/none",
            )
            assert {h.tenant for h in store.keyword_search("chunks", "hours", 5)} == {tenant}
            assert {h.tenant for h in store.document_chunks(["d"], 5)} == {tenant}


def test_ingest_public_on_the_embedded_store_is_refused_before_embedding_anything(
    tmp_path, embeddings, embedder
):
    from agent_retrieval.ingest import ingest

    with SQLiteStore(tmp_path / "store.db") as store:
        with pytest.raises(InvalidRequest, match="Postgres or Supabase"):
            ingest(
                [Document("notice", "Notice", "Opening hours")], store, embedder, progress=False, public=True
            )
        assert embeddings.document_calls == 0 and store.stats().documents == 0


def axis(n: int) -> np.ndarray:
    return np.eye(4, dtype=np.float32)[n]


def write(store: SQLiteStore, doc_id: str, vector: np.ndarray) -> None:
    doc = Document(doc_id, doc_id, f"{doc_id} text", content_hash=doc_id)
    store.upsert([doc], [Chunk(f"{doc_id}#0", doc_id, 0, doc.content, "", {}, embedding=vector)], "test/axes")


def test_stores_open_on_one_file_share_what_searches_read_until_the_next_write(tmp_path):
    """A server opens a store per run: the second one reuses the vectors the first read."""
    first = SQLiteStore(tmp_path / "shared.db")
    write(first, "a", axis(0))
    assert [h.id for h in first.vector_search("chunks", axis(0), 1)] == ["a#0"]
    matrix = first._cache.matrices["chunks"]

    second = SQLiteStore(tmp_path / "shared.db")
    assert [h.id for h in second.vector_search("chunks", axis(0), 1)] == ["a#0"]
    assert second._cache.matrices["chunks"] is matrix  # not read again

    write(second, "b", axis(1))  # a write through either is seen by both
    assert [h.id for h in first.vector_search("chunks", axis(1), 1)] == ["b#0"]
    assert second._cache.matrices["chunks"] is not matrix
    first.close()  # and closing one leaves the other searching
    assert [h.id for h in second.vector_search("chunks", axis(1), 1)] == ["b#0"]


def test_a_file_made_again_at_the_same_path_never_reads_the_old_ones_cache(tmp_path):
    path = tmp_path / "again.db"
    old = SQLiteStore(path)
    write(old, "a", axis(0))
    old.vector_search("chunks", axis(0), 1)  # cached at the generation this write left
    old.close()
    for leftover in tmp_path.glob("again.db*"):
        leftover.unlink()

    new = SQLiteStore(path)
    write(new, "a", axis(1))  # same id, same rowid, same number of writes: only the vector differs
    [hit] = new.vector_search("chunks", axis(1), 1)
    assert hit.vector_similarity == pytest.approx(1.0)  # the old matrix would score it 0


def test_a_store_with_no_cache_budget_neither_keeps_nor_takes_what_others_read(tmp_path):
    first = SQLiteStore(tmp_path / "budget.db", cache_mb=0)
    write(first, "a", axis(0))
    assert [h.id for h in first.vector_search("chunks", axis(0), 1)] == ["a#0"]
    second = SQLiteStore(tmp_path / "budget.db", cache_mb=0)
    assert second._cache is not first._cache and not second._cache.matrices
    assert [h.id for h in second.vector_search("chunks", axis(0), 1)] == ["a#0"]
    warm = SQLiteStore(tmp_path / "budget.db")  # a store with a budget keeps the file's vectors
    warm.vector_search("chunks", axis(0), 1)
    assert SQLiteStore(tmp_path / "budget.db", cache_mb=0)._cache is not warm._cache


def test_what_is_kept_between_stores_fits_the_budget(tmp_path):
    big = SQLiteStore(tmp_path / "big.db", cache_mb=1)
    vectors = np.random.default_rng(0).standard_normal((300, 1024)).astype(np.float32)  # 1.2 MB
    docs = [Document(f"d{n}", "", f"text {n}", content_hash=str(n)) for n in range(300)]
    chunks = [Chunk(f"d{n}#0", f"d{n}", 0, f"text {n}", "", {}, embedding=vectors[n]) for n in range(300)]
    big.upsert(docs, chunks, "test/random")
    assert len(big.vector_search("chunks", vectors[7], 5)) == 5
    assert SQLiteStore(tmp_path / "big.db", cache_mb=1)._cache is not big._cache  # over the budget: dropped

    small = SQLiteStore(tmp_path / "small.db", cache_mb=1)
    write(small, "a", axis(0))
    small.vector_search("chunks", axis(0), 1)
    assert SQLiteStore(tmp_path / "small.db", cache_mb=1)._cache is small._cache  # within it: kept


_FORKED: list[SQLiteStore] = []  # the store a forked child finds, as it was in its parent


def _child_reads_through_its_own_connection() -> tuple[bool, list[str]]:
    store = _FORKED[0]
    inherited = store._db._local.conn
    return store._db.connection() is not inherited, [
        hit.id for hit in store.keyword_search("chunks", "deposit", 3)
    ]


def test_a_forked_process_opens_its_own_connection_to_the_store(tmp_path):
    # SQLite's locks belong to a process: a child writing or reading through its parent's connection could
    # see half a write. A server that searched before forking its workers hands each a store to reuse.
    store = SQLiteStore(tmp_path / "fork.db")
    store.upsert(
        [Document("lease", "Lease", "the deposit is protected", content_hash="h")],
        [Chunk("lease#0", "lease", 0, "the deposit is protected", "Lease", text_hash="h")],
        "test/none",
    )
    _FORKED[:] = [store]
    with multiprocessing.get_context("fork").Pool(1) as worker:
        assert worker.apply(_child_reads_through_its_own_connection) == (True, ["lease#0"])
    assert [hit.id for hit in store.keyword_search("chunks", "deposit", 3)] == ["lease#0"]
    store.close()


def test_a_filters_rows_are_listed_from_the_metadata_index_not_the_tables_rows(tmp_path):
    """A filtered vector search lists the rows the filter keeps before ranking them; read from the table,
    that read every row's text and vector (110 ms at 100K chunks, whatever the filter kept), from the narrow
    metadata index 6 ms. The statement the store runs, as SQLite plans it, never scans the table: a filter
    alone scans that index, one with a list of documents looks up theirs, at both levels."""
    store = SQLiteStore(tmp_path / "filtered.db")
    rng = np.random.default_rng(4)
    vectors = rng.normal(size=(40, 8)).astype(np.float32)
    docs = [
        Document(f"d{n}", "", f"text {n}", {"bucket": n % 4}, content_hash=str(n), embedding=v)
        for n, v in enumerate(vectors)
    ]
    chunks = [
        Chunk(f"d{n}#0", f"d{n}", 0, f"text {n}", "", {"bucket": n % 4}, str(n), v)
        for n, v in enumerate(vectors)
    ]
    store.upsert(docs, chunks, "m")
    conn = store._db.connection()
    for level in ("documents", "chunks"):
        for scope in (None, ["d1", "d5"]):
            statements: list[str] = []
            conn.set_trace_callback(statements.append)
            try:
                hits = store.vector_search(level, vectors[1], 3, filters={"bucket": 1}, document_ids=scope)
            finally:
                conn.set_trace_callback(None)
            assert hits and all(h.document_id in {f"d{n}" for n in range(1, 40, 4)} for h in hits)
            (listing,) = [s for s in statements if s.startswith("SELECT d.rowid FROM")]
            plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {listing}"))
            # a filter alone scans the narrow index; with documents listed, their rows are looked up
            assert plan.startswith(
                f"SCAN d USING COVERING INDEX {level}_metadata" if scope is None else "SEARCH d"
            )


def test_a_repeated_filters_rows_are_listed_once_until_the_next_write(tmp_path):
    """An agent repeats its filter across calls: listing the filter's rows reads every row's metadata (30 ms
    at 100K chunks keeping half), so the rows a scope leaves are kept until a write changes them."""
    store = SQLiteStore(tmp_path / "scoped.db")
    vectors = np.random.default_rng(4).normal(size=(41, 8)).astype(np.float32)
    chunks = [
        Chunk(f"d{n}#0", f"d{n}", 0, f"text {n}", "", {"bucket": n % 4}, str(n), v)
        for n, v in enumerate(vectors)
    ]
    docs = [Document(f"d{n}", "", f"text {n}", content_hash=str(n)) for n in range(41)]
    store.upsert(docs[:40], chunks[:40], "m")
    conn = store._db.connection()

    def listed(bucket: int) -> tuple[int, set[str]]:
        """How many times the search listed the filter's rows, and the documents it found."""
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        try:
            hits = store.vector_search("chunks", vectors[40], 20, filters={"bucket": bucket})
        finally:
            conn.set_trace_callback(None)
        return sum(s.startswith("SELECT d.rowid FROM") for s in statements), {h.document_id for h in hits}

    bucket_0 = {f"d{n}" for n in range(0, 41, 4)}
    times, found = listed(0)
    assert times == 1 and found and found <= bucket_0 - {"d40"}
    assert listed(0)[0] == 0 and listed(1)[0] == 1 and listed(0)[0] == 0
    store.upsert(docs[40:], chunks[40:], "m")  # d40, in bucket 0, is the query's own vector
    times, found = listed(0)
    assert times == 1 and "d40" in found and found <= bucket_0


@pytest.mark.parametrize(
    "scored_scope_rows", [20_000, 10], ids=["scored row by row", "the level's head filtered"]
)
def test_a_filtered_keyword_search_from_postings_ranks_as_fts5_within_the_filter(
    tmp_path, monkeypatch, scored_scope_rows
):
    """A filter's rows are ranked from the words' kept postings (a small scope scored row by row, a large one
    by filtering the whole level's ranking, deeper until k pass), as FTS5 ranks the filter's rows: the same
    rows and scores, at filters keeping half, a tenth and one row in a hundred."""
    monkeypatch.setattr(keywords, "SCORED_SCOPE_ROWS", scored_scope_rows)
    store = SQLiteStore(tmp_path / "filtered.db")
    docs, chunks = zipf_corpus(600)
    for n, chunk in enumerate(chunks):
        chunk.metadata = {"bucket": n % 100}
    store.upsert(docs, chunks, "test/none")
    heads: list[int] = []
    ranked = keywords.best_of_postings
    monkeypatch.setattr(keywords, "best_of_postings", lambda found, k: heads.append(k) or ranked(found, k))
    read_postings = keywords.postings
    rng = random.Random(5)
    for _ in range(30):
        query = " ".join(f"w{rng.choice([0, 1, 2, rng.randint(3, 399)])}x" for _ in range(rng.randint(2, 6)))
        for kept in (list(range(50)), list(range(10)), [7]):
            k = rng.choice([1, 5, 20])
            found = store.keyword_search("chunks", query, k, filters={"bucket": kept})
            monkeypatch.setattr(keywords, "postings", lambda *_: None)  # FTS5 over the filter's rows
            by_fts = store.keyword_search("chunks", query, k, filters={"bucket": kept})
            monkeypatch.setattr(keywords, "postings", read_postings)
            assert [h.id for h in found] == [h.id for h in by_fts], (query, kept)
            assert [h.keyword_score for h in found] == pytest.approx(
                [h.keyword_score for h in by_fts], rel=1e-9
            )
    if scored_scope_rows == 10:  # the level's ranking was read, deeper where too few passed
        assert len(set(heads)) > 1
    else:
        assert heads == []


def test_the_kept_scopes_are_bounded(tmp_path):
    """A caller may send a new filter every call: the file keeps the rows of the last SCOPES scopes only."""
    store = SQLiteStore(tmp_path / "bounded.db")
    vectors = np.random.default_rng(2).normal(size=(40, 8)).astype(np.float32)
    chunks = [
        Chunk(f"d{n}#0", f"d{n}", 0, f"text {n}", "", {"n": n}, str(n), v) for n, v in enumerate(vectors)
    ]
    store.upsert([Document(f"d{n}", "", f"text {n}", content_hash=str(n)) for n in range(40)], chunks, "m")
    for n in range(SCOPES + 5):
        store.vector_search("chunks", vectors[0], 3, filters={"n": n})
        store.keyword_search("chunks", "text", 3, filters={"n": n})
    assert len(store._cache.scopes) == SCOPES


def test_a_passage_search_reads_the_rows_of_the_passages_it_returns_only(retrieval, monkeypatch):
    """Fusion ranks each side's candidates (100 a side) by id and score, and reading each one's text and
    metadata was a third of a search's time at 100K chunks: a passage search reads the rows of the passages
    it returns, and returns what ranking fully read candidates returns (texts, scores, ranks)."""
    store = retrieval.store
    request = parse_request(ChunkSearchRequest, {"query": "when is the deposit paid back", "top_k": 3})
    expected = retrieval.rank(request, "chunks", retrieval.candidates(request, "chunks")).hits
    read_whole, given_rows = [], []
    hits, with_rows = store._hits, store._with_rows

    def reading(conn, level, scores, score_field, *, rows=True):
        read_whole.extend(scores if rows else [])
        return hits(conn, level, scores, score_field, rows=rows)

    def giving(found):
        given_rows.extend(hit.id for hit in found)
        return with_rows(found)

    monkeypatch.setattr(store, "_hits", reading)
    monkeypatch.setattr(store, "_with_rows", giving)
    found = retrieval.search(request, "chunks").hits
    assert found == expected and all(hit.content and hit.title for hit in found)
    assert read_whole == [] and given_rows == [hit.id for hit in expected]


async def test_a_search_without_rows_gives_ids_and_scores_and_with_rows_the_rest(retrieval):
    store = retrieval.store
    vector = np.asarray(retrieval.embedder.embed_query("tenancy deposit protection"), dtype=np.float32)
    full = store.vector_search("chunks", vector, 6)
    bare = await store.avector_search("chunks", vector, 6, rows=False)
    assert [(h.id, h.vector_similarity) for h in bare] == [(h.id, h.vector_similarity) for h in full]
    assert not any(h.content or h.title or h.metadata for h in bare)
    assert await store.awith_rows(bare) == full
    gone = full[1].document_id
    store.delete_documents([gone])
    # a row deleted since the search is left out
    assert store.with_rows(bare) == [h for h in full if h.document_id != gone]
