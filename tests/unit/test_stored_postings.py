"""Common words' postings stored in the embedded store's file (stores/sqlite/stored_postings.py): searches
read them instead of asking FTS5, and rank exactly as FTS5's bm25 over every row, through writes of every
kind until the next refresh writes them again."""

from __future__ import annotations

import random
import sqlite3

import pytest

from agent_retrieval.models import Chunk, Document
from agent_retrieval.stores import SQLiteStore
from agent_retrieval.stores.sqlite import stored_postings
from agent_retrieval.stores.sqlite.schema import MIGRATIONS
from tests.unit.test_sqlite_store import assert_ranked_as_every_row

# Words FTS5's tokenizer changes (stems, folds), and one it splits in two
SPECIAL = ["running", "runs", "Café", "CAFES", "naïve", "snake_case", "snake"]


def corpus(rows: int, seed: int, version: str = "") -> tuple[list[Document], list[Chunk]]:
    """Zipf-like words in titles (headings) and texts, so the title's weight and common words both count."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}x" for i in range(300)] + SPECIAL
    weights = [1 / (i + 1) for i in range(300)] + [0.05] * len(SPECIAL)
    docs, chunks = [], []
    for n in range(rows):
        title = " ".join(rng.choices(vocabulary, weights, k=rng.randint(1, 4)))
        text = " ".join(rng.choices(vocabulary, weights, k=rng.randint(5, 50)))
        docs.append(Document(f"d{n}", title, text, content_hash=f"{n}{version}"))
        chunks.append(Chunk(f"d{n}#0", f"d{n}", 0, text, title, text_hash=f"{n}{version}"))
    return docs, chunks


@pytest.fixture
def reads(monkeypatch):
    """The tokens whose stored lists searches read (STORED_ROWS lowered so the small corpus has some)."""
    tokens: list[str] = []
    original = stored_postings.StoredLevel.read

    def counted(self, conn, level, word, token):
        tokens.append(token)
        return original(self, conn, level, word, token)

    monkeypatch.setattr(stored_postings.StoredLevel, "read", counted)
    monkeypatch.setattr(stored_postings, "STORED_ROWS", 20)
    return tokens


def queries(seed: int, count: int = 25) -> list[str]:
    rng = random.Random(seed)
    pool = [f"w{i}x" for i in range(300)] + SPECIAL
    return [
        " ".join(
            rng.choice([*pool[:6], rng.choice(pool), rng.choice(SPECIAL)]) for _ in range(rng.randint(1, 6))
        )
        for _ in range(count)
    ]


def search_all(store: SQLiteStore, seed: int) -> None:
    for query in queries(seed):
        for level in ("chunks", "documents"):
            for k in (1, 10):
                assert_ranked_as_every_row(store.keyword_search(level, query, k), store.path, level, query, k)


def test_searches_read_the_stored_lists_and_rank_as_every_row(tmp_path, reads):
    store = SQLiteStore(tmp_path / "stored.db")
    store.upsert(*corpus(400, 1), "test/none")
    store.refresh_indexes()
    conn = store._db.connection()
    stored = {t for (t,) in conn.execute("SELECT term FROM keyword_postings WHERE level = 'chunks'")}
    assert {"w0x", "run", "cafe"} <= stored  # by token: "running" and "runs" are one list
    assert conn.execute("SELECT count(*) FROM keyword_changed").fetchone()[0] == 0
    search_all(store, 2)
    assert {"w0x", "run", "cafe"} <= set(reads)


def test_rows_written_after_the_lists_are_asked_of_fts5_until_the_next_refresh(tmp_path, reads):
    store = SQLiteStore(tmp_path / "written.db")
    store.upsert(*corpus(400, 1), "test/none")
    store.refresh_indexes()
    # new documents (appended rows), documents written again (in place at the documents level; their
    # chunks deleted and appended), and documents deleted: each kind moves words in and out of the lists
    new_docs, new_chunks = corpus(430, 3, version="v2")
    store.upsert(new_docs[395:], new_chunks[395:], "test/none")
    store.upsert(new_docs[396:397], new_chunks[396:397], "test/none")  # its rows already in the log
    store.delete_documents([f"d{n}" for n in range(0, 400, 50)])
    changed = store._db.connection().execute("SELECT count(*) FROM keyword_changed").fetchone()[0]
    assert changed > 0
    search_all(store, 4)
    assert "w0x" in reads
    # the next refresh writes the lists again (over a tenth of the rows written) and empties the log
    store.refresh_indexes()
    assert store._db.connection().execute("SELECT count(*) FROM keyword_changed").fetchone()[0] == 0
    search_all(store, 5)


def test_scattered_writes_make_the_next_refresh_write_the_lists_again(tmp_path, monkeypatch, reads):
    store = SQLiteStore(tmp_path / "scattered.db")
    store.upsert(*corpus(400, 1), "test/none")
    store.refresh_indexes()
    monkeypatch.setattr(stored_postings, "MAX_CHANGED_RUNS", 6)
    docs, chunks = corpus(400, 1, version="v2")
    for n in (10, 40, 70, 100):  # in place: four runs of one row each at the documents level
        store.upsert([docs[n]], [chunks[n]], "test/none")
    reads.clear()
    search_all(store, 7)  # four runs: the lists still read, the written rows asked of FTS5 by run
    assert reads
    with store._db.read() as conn:
        assert stored_postings.needs_writing(conn, "documents")  # past half the runs a search accepts
        assert not stored_postings.needs_writing(conn, "chunks")  # appended: one run, under a tenth
    for n in (130, 160, 190):  # seven runs: more than a search asks FTS5 for, so FTS5 is asked for all
        store.upsert([docs[n]], [chunks[n]], "test/none")
    reads.clear()
    for query in queries(8):
        assert_ranked_as_every_row(
            store.keyword_search("documents", query, 10), store.path, "documents", query, 10
        )
    assert not reads
    store.refresh_indexes()
    with store._db.read() as conn:
        assert (
            conn.execute("SELECT count(*) FROM keyword_changed WHERE level = 'documents'").fetchone()[0] == 0
        )
        assert conn.execute("SELECT count(*) FROM keyword_changed WHERE level = 'chunks'").fetchone()[0] > 0


def test_a_level_with_many_rows_written_since_is_asked_of_fts5(tmp_path, monkeypatch, reads):
    store = SQLiteStore(tmp_path / "many.db")
    store.upsert(*corpus(400, 1), "test/none")
    store.refresh_indexes()
    monkeypatch.setattr(stored_postings, "MAX_CHANGED_ROWS", 30)
    docs, chunks = corpus(440, 9)
    store.upsert(docs[400:], chunks[400:], "test/none")  # one run of 40 new rows at each level
    for query in queries(10):
        assert_ranked_as_every_row(store.keyword_search("chunks", query, 10), store.path, "chunks", query, 10)
    assert not reads


def test_a_version_3_store_gains_the_lists_and_the_log(tmp_path):
    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path)
    for statements in MIGRATIONS[:3]:
        for statement in statements:
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    store.upsert(*corpus(5, 1), "test/none")
    logged = store._db.connection().execute("SELECT level, count(*) FROM keyword_changed GROUP BY level")
    assert dict(logged.fetchall()) == {"chunks": 5, "documents": 5}


def test_lists_written_from_another_word_count_are_written_again_by_the_next_refresh(
    tmp_path, monkeypatch, reads
):
    """A store's lists from before STORED_ROWS changed (an older version's file: 2,000) are read as they
    are, and the next refresh writes them from the new count."""
    path = tmp_path / "older.db"
    store = SQLiteStore(path)
    store.upsert(*corpus(400, 1), "test/none")
    monkeypatch.setattr(stored_postings, "STORED_ROWS", 60)
    store.refresh_indexes()
    with store._db.read() as conn:
        before = conn.execute("SELECT count(*) FROM keyword_postings WHERE level = 'chunks'").fetchone()[0]
    store.close()
    monkeypatch.setattr(stored_postings, "STORED_ROWS", 20)  # this version's count
    store = SQLiteStore(path)
    with store._db.read() as conn:
        assert stored_postings.needs_writing(conn, "chunks")
    for query in queries(11):  # the older lists, read until then
        assert_ranked_as_every_row(store.keyword_search("chunks", query, 10), store.path, "chunks", query, 10)
    assert reads
    store.refresh_indexes()
    with store._db.read() as conn:
        assert not stored_postings.needs_writing(conn, "chunks")
        after = conn.execute("SELECT count(*) FROM keyword_postings WHERE level = 'chunks'").fetchone()[0]
        assert stored_postings._written_from(conn, "chunks") == 20
    assert after > before
    for query in queries(12):
        assert_ranked_as_every_row(store.keyword_search("chunks", query, 10), store.path, "chunks", query, 10)


def test_lists_an_older_version_wrote_are_taken_as_written_from_2000_rows(tmp_path, monkeypatch, reads):
    """Older versions wrote no note of the count (and must still be able to write lists into the file, so
    the note is not a column of keyword_lengths): their lists count as written from 2,000 rows."""
    store = SQLiteStore(tmp_path / "older.db")
    store.upsert(*corpus(400, 1), "test/none")
    store.refresh_indexes()
    with store._db.write() as conn:
        conn.execute("DELETE FROM store_info WHERE key = 'chunks lists from'")  # as an older version left it
    with store._db.read() as conn:
        assert stored_postings._written_from(conn, "chunks") == 2_000
        assert stored_postings.needs_writing(conn, "chunks")
        assert not stored_postings.needs_writing(conn, "documents")
        columns = [row[1] for row in conn.execute("PRAGMA table_info(keyword_lengths)")]
    assert columns == ["level", "title_weight", "rowids", "lengths"]


def test_the_tokenizer_tokenizes_as_the_store_does():
    tokens = stored_postings.Tokenizer()
    assert tokens.tokens("running") == ("run",)
    assert tokens.tokens("Café") == ("cafe",)
    assert tokens.tokens("snake_case") == ("snake", "case")
    assert tokens.tokens("___") == ()
    tokens.close()
