"""Checks of a store's rows after a crash or a fault, shared by the crash-safety and SQLite fault tests.

A test corpus of small markdown files; what an ingest of it must store (the library's own loader and
chunker, so the expectation follows the code); the rows as stored, read past the store's API (from the
SQLite file, or the Postgres schema); the invariants every interrupted ingest must keep; and a digest
of everything an ingest decides (ids, text, metadata, hashes, vectors) to compare two stores.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent_retrieval.context import Context
from agent_retrieval.ingest import chunk_document, chunk_text, document_text
from agent_retrieval.ingest.loaders import load_documents
from agent_retrieval.models import Chunk, Document
from agent_retrieval.stores import SQLiteStore
from agent_retrieval.stores.base import DocumentState

WORDS = [
    "tenancy",
    "deposit",
    "landlord",
    "repair",
    "boiler",
    "survey",
    "valuation",
    "commission",
    "referral",
    "vendor",
    "buyer",
    "inventory",
    "notice",
    "rent",
    "arrears",
    "keys",
    "safety",
    "certificate",
    "gas",
    "electrical",
    "leak",
    "damp",
    "mould",
    "garden",
    "parking",
    "council",
    "licence",
    "offer",
    "exchange",
    "completion",
    "mortgage",
    "lender",
    "solicitor",
    "fee",
    "invoice",
]


def write_corpus(folder: Path, documents: int, *, seed: int = 7, copies: int = 5) -> Path:
    """`documents` markdown files of two or three sections each; the last `copies` repeat earlier files
    word for word under other names, so some embedding texts are shared and must be embedded once."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    texts: list[str] = []
    for n in range(documents - copies):
        sections = [
            f"## Section {s}\n\n" + " ".join(rng.choices(WORDS, k=rng.randint(25, 70))) + "."
            for s in range(rng.randint(2, 3))
        ]
        texts.append(f"---\ncategory: c{n % 4}\n---\n# Note {n}\n\n" + "\n\n".join(sections) + "\n")
    texts += [texts[rng.randrange(len(texts))] for _ in range(copies)]
    for n, text in enumerate(texts):
        (folder / f"note-{n:04d}.md").write_text(text, encoding="utf-8")
    return folder


@dataclass
class Expected:
    """What a complete ingest of a corpus stores."""

    documents: dict[str, Document]
    chunks: dict[str, list[Chunk]]

    @property
    def texts(self) -> set[str]:
        """Every distinct embedding text (a shared text is embedded once)."""
        return {document_text(d) for d in self.documents.values()} | {
            chunk_text(c) for chunks in self.chunks.values() for c in chunks
        }


def expected(folder: Path, context: Context) -> Expected:
    docs = {d.id: d for d in load_documents([folder])}
    size, overlap = context.ingest.chunk_size, context.ingest.chunk_overlap
    return Expected(docs, {i: chunk_document(d, size, overlap) for i, d in docs.items()})


@dataclass
class Snapshot:
    """A store's rows as stored: per document (title, content, vector, model), per chunk list
    (ordinal, heading path, content, vector, model) in reading order; vectors as float32 arrays."""

    model: str | None
    documents: dict[str, tuple[str, str, np.ndarray | None, str | None]]
    chunks: dict[str, list[tuple[int, str, str, np.ndarray | None, str | None]]]

    def embedded_texts(self) -> set[str]:
        """The embedding texts of rows stored with a vector, rebuilt from the rows themselves."""
        return {
            document_text(Document("", t, c)) for t, c, v, _ in self.documents.values() if v is not None
        } | {
            chunk_text(Chunk("", "", 0, c, h))
            for rows in self.chunks.values()
            for _, h, c, v, _ in rows
            if v is not None
        }


def sqlite_snapshot(path: Path) -> Snapshot:
    """The rows of an embedded store, after checking what only the file can show: it is intact, FTS is
    in step with its tables, no chunk lacks its document, and no id is stored twice."""
    with _connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        for table in ("documents_fts", "chunks_fts"):  # raises if the index and its table disagree
            conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
        assert (
            conn.execute(
                "SELECT count(*) FROM chunks c LEFT JOIN documents d ON d.id = c.document_id "
                "WHERE d.id IS NULL"
            ).fetchone()[0]
            == 0
        ), "a chunk without its document"
        for table in ("documents", "chunks"):
            total, distinct = conn.execute(f"SELECT count(*), count(DISTINCT id) FROM {table}").fetchone()
            assert total == distinct, f"duplicate {table}"
        model = dict(conn.execute("SELECT key, value FROM store_info").fetchall()).get("embedding_model")
        docs = {
            i: (t, c, _array(v), m)
            for i, t, c, v, m in conn.execute(
                "SELECT id, title, content, embedding, embedding_model FROM documents"
            )
        }
        chunks: dict[str, list[Any]] = {}
        for doc_id, o, h, c, v, m in conn.execute(
            "SELECT document_id, ordinal, heading_path, content, embedding, "
            "embedding_model FROM chunks ORDER BY document_id, ordinal"
        ):
            chunks.setdefault(doc_id, []).append((o, h, c, _array(v), m))
    return Snapshot(model, docs, chunks)


def check_snapshot(
    snapshot: Snapshot,
    want: Expected,
    states: dict[str, DocumentState],
    vector_of: Callable[[str], np.ndarray] | None = None,
) -> set[str]:
    """Assert what must hold after any crash or fault; return the ids of the documents stored.

    Every stored document holds its complete, current chunk list (whole documents or none); a row has
    a vector exactly when it names the vector's model (and, when `vector_of` says what it should be, the
    right vector); and the store's `document_states` calls a document done only when it and every one
    of its chunks carry a vector of the store's model.
    """
    docs, chunks = snapshot.documents, snapshot.chunks
    assert set(chunks) <= set(docs), "a chunk without its document"
    for doc_id, (title, content, vector, model) in docs.items():
        doc, want_chunks = want.documents[doc_id], want.chunks[doc_id]
        assert (title, content) == (doc.title, doc.content), f"{doc_id}: not the ingested text"
        got = chunks.get(doc_id, [])
        stored_list = [(o, h, c) for o, h, c, _, _ in got]
        assert stored_list == [(c.ordinal, c.heading_path, c.content) for c in want_chunks], (
            f"{doc_id}: its chunk list is incomplete or stale"
        )
        rows = [(document_text(doc), vector, model)] + [
            (chunk_text(c), v, m) for c, (_, _, _, v, m) in zip(want_chunks, got, strict=False)
        ]
        for text, row_vector, row_model in rows:
            assert (row_vector is None) == (row_model is None), (
                f"{doc_id}: a vector without its model, or back"
            )
            if row_vector is not None and vector_of is not None:
                assert np.allclose(row_vector, vector_of(text), atol=1e-5), f"{doc_id}: another text's vector"
    assert set(states) == set(docs)
    for doc_id, done in ((doc_id, state.embedded) for doc_id, state in states.items()):
        embedded = docs[doc_id][3] == snapshot.model and all(
            m == snapshot.model for *_, m in chunks.get(doc_id, [])
        )
        assert done == (snapshot.model is not None and embedded), (
            f"{doc_id}: done={done} but embedded={embedded}"
        )
    return set(docs)


def check_sqlite_store(
    path: Path, want: Expected, vector_of: Callable[[str], np.ndarray] | None = None
) -> set[str]:
    """`check_snapshot` on an embedded store's file; the ids of the documents it holds."""
    snapshot = sqlite_snapshot(path)
    with SQLiteStore(path) as store:  # the store's own view of what is done
        states = store.document_states(list(snapshot.documents))
    return check_snapshot(snapshot, want, states, vector_of)


def embedded_texts(path: Path) -> set[str]:
    return sqlite_snapshot(path).embedded_texts()


def sqlite_digest(path: Path) -> tuple[int, int, str]:
    """(documents, chunks, sha256 of every row's ids, text, metadata, hashes and vector, and the model)."""
    digest = hashlib.sha256()
    with _connect(path) as conn:
        counts = [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("documents", "chunks")]
        queries = [
            # the write count and the file's own random id say nothing of what it holds
            "SELECT key, value FROM store_info WHERE key NOT IN ('generation', 'store_id') ORDER BY key",
            (
                "SELECT id, title, content, metadata, source, content_hash, text_hash, embedding, "
                "embedding_model FROM documents ORDER BY id"
            ),
            (
                "SELECT id, document_id, ordinal, heading_path, content, metadata, text_hash, embedding, "
                "embedding_model FROM chunks ORDER BY id"
            ),
        ]
        for query in queries:
            for row in conn.execute(query):
                digest.update(repr(row).encode())
    return counts[0], counts[1], digest.hexdigest()


def _array(blob: bytes | None) -> np.ndarray | None:
    return None if blob is None else np.frombuffer(blob, dtype=np.float32)


@contextlib.contextmanager
def _connect(path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()  # a connection left open would keep a test's mount busy


# --- the same for a Postgres store (reached by DSN, in its own schema) ---------------------------------


def pg_snapshot(dsn: str, schema: str) -> Snapshot:
    """The rows of a Postgres store's schema, after checking that no chunk lacks its document and no id
    is stored twice."""
    with _pg(dsn) as conn:
        assert (
            _pg_rows(
                conn,
                schema,
                "SELECT count(*) FROM {s}.chunks c LEFT JOIN {s}.documents d "
                "ON d.tenant_id = c.tenant_id AND d.id = c.document_id "
                "WHERE d.id IS NULL",
            )[0][0]
            == 0
        ), "a chunk without its document"
        for table in ("documents", "chunks"):
            ((total, distinct),) = _pg_rows(
                conn, schema, f"SELECT count(*), count(DISTINCT (tenant_id, id)) FROM {{s}}.{table}"
            )
            assert total == distinct, f"duplicate {table}"
        model = dict(_pg_rows(conn, schema, "SELECT key, value FROM {s}.store_info")).get("embedding_model")
        docs = {
            i: (t, c, _pg_vector(v), m)
            for i, t, c, v, m in _pg_rows(
                conn, schema, "SELECT id, title, content, embedding::text, embedding_model FROM {s}.documents"
            )
        }
        chunks: dict[str, list[Any]] = {}
        for doc_id, o, h, c, v, m in _pg_rows(
            conn,
            schema,
            "SELECT document_id, ordinal, heading_path, content, "
            "embedding::text, embedding_model FROM {s}.chunks "
            "ORDER BY document_id, ordinal",
        ):
            chunks.setdefault(doc_id, []).append((o, h, c, _pg_vector(v), m))
    return Snapshot(model, docs, chunks)


def pg_digest(dsn: str, schema: str) -> tuple[int, int, str]:
    """As `sqlite_digest`, for a Postgres store's schema."""
    digest = hashlib.sha256()
    with _pg(dsn) as conn:
        counts = [
            _pg_rows(conn, schema, f"SELECT count(*) FROM {{s}}.{t}")[0][0] for t in ("documents", "chunks")
        ]
        queries = [
            (
                "SELECT key, value FROM {s}.store_info WHERE key IN ('embedding_model', 'dimension') "
                "ORDER BY key"
            ),
            (
                "SELECT id, title, content, metadata::text, source, content_hash, text_hash, "
                "embedding::text, embedding_model FROM {s}.documents ORDER BY id"
            ),
            (
                "SELECT id, document_id, ordinal, heading_path, content, metadata::text, text_hash, "
                "embedding::text, embedding_model FROM {s}.chunks ORDER BY id"
            ),
        ]
        for query in queries:
            for row in _pg_rows(conn, schema, query):
                digest.update(repr(row).encode())
    return counts[0], counts[1], digest.hexdigest()


def _pg(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


def _pg_rows(conn: Any, schema: str, query: str) -> list[tuple]:
    from psycopg import sql

    return conn.execute(sql.SQL(query).format(s=sql.Identifier(schema))).fetchall()


def _pg_vector(text: str | None) -> np.ndarray | None:
    return None if text is None else np.asarray(json.loads(text), dtype=np.float32)
