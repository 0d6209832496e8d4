"""The embedded default store: one SQLite file, FTS5 with bm25 for keywords, exact numpy search for vectors.

Vectors are stored as float32 blobs. Searches read them into one matrix per level, kept in memory
and reloaded only when a write bumps the store's generation; a matrix-vector product over 100K
MiniLM vectors takes a few milliseconds and needs no SQLite extension, so it works on any CPython.
The matrices (and the keyword statistics and metadata counts) are shared by every store of the process
open on the same file, so a server that opens a store per run reads them once, not every run.
WAL mode lets several readers work beside one writer; each thread has its own connection.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from agent_retrieval.context import STORE_CACHE_MB
from agent_retrieval.errors import EmbeddingModelMismatch, InvalidRequest, StoreError
from agent_retrieval.models import FILTER_KEY, Chunk, Document, Hit, Level
from agent_retrieval.process import PROCESS
from agent_retrieval.stores.base import (
    DOCUMENT_PREVIEW_CHARS,
    FACET_VALUE_CHARS,
    PENDING_COLUMNS,
    DocumentListing,
    DocumentState,
    Failure,
    KeywordSearch,
    MetadataCount,
    Store,
    StoreStats,
    VectorSearch,
    batches,
    filter_values,
    pending_rows,
)
from agent_retrieval.stores.sqlite_schema import EVERY_ROW, NOW, SCHEMA_VERSION, migrate, schema_version
from agent_retrieval.text import keyword_terms

_BM25_K1_PLUS_1 = 2.2  # FTS5's bm25 uses k1 = 1.2: one term adds less than 2.2 times its idf to a score
TITLE_WEIGHT = (
    3.0  # a word of the title (a chunk's heading path) counts 3 times one of the text: tuned on SciFact train
)
IDF_CACHE_TERMS = 50_000  # words whose document frequency is kept per level until the next write

_TABLE = {"documents": "documents", "chunks": "chunks"}
_COLUMNS = {
    "documents": f"d.rowid, d.id, d.id, d.title, substr(d.content, 1, {DOCUMENT_PREVIEW_CHARS}), d.metadata, "
    "NULL, NULL",
    "chunks": "d.rowid, d.id, d.document_id, p.title, d.content, d.metadata, d.ordinal, d.heading_path",
}
_FROM = {"documents": "documents d", "chunks": "chunks d JOIN documents p ON p.id = d.document_id"}


@dataclass
class _Matrix:
    """The stored vectors of one level, rows in rowid order."""

    generation: int
    model: str
    rowids: np.ndarray
    vectors: np.ndarray


@dataclass
class _FileCache:
    """What searches keep of one store file until its next write, each entry with the generation it was
    read at: the vectors, the words' row counts (keyword idf) and the metadata counts."""

    lock: threading.Lock = field(default_factory=threading.Lock)  # one thread reloads; the rest reuse it
    matrices: dict[Level, _Matrix] = field(default_factory=dict)
    # generation, rows, each word's row count
    frequencies: dict[Level, tuple[int, int, dict[str, int]]] = field(default_factory=dict)
    metadata: tuple[int, int, list[MetadataCount]] | None = None  # generation, max_values, counts

    @property
    def nbytes(self) -> int:
        return sum(m.vectors.nbytes + m.rowids.nbytes for m in tuple(self.matrices.values()))


class _FileCaches:
    """The caches of the store files this process has searched, shared by all its stores on a file (a
    server opens one per run: reading 100K vectors again would cost it half a second a run), the least
    recently opened dropped beyond a budget in bytes. A file is known by its path and the random id in its
    store_info, so a file made again at the same path, or a copy at another, never reads another's cache."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: OrderedDict[tuple[str, str], _FileCache] = OrderedDict()

    def of(self, path: Path, store_id: str | None, budget: int) -> _FileCache:
        """The file's shared cache; a cache of its own for a store with no budget, or for a file no
        migration could give an id (read-only)."""
        if store_id is None or budget <= 0:
            return _FileCache()
        key = (str(path.resolve()), store_id)
        with self._lock:
            cache = self._files.setdefault(key, _FileCache())
            self._files.move_to_end(key)
            return cache

    def trim(self, budget: int) -> None:
        """Drop the least recently opened files' caches until the rest fit in `budget` bytes (a store
        keeps using the cache it holds: only later stores on that file read it again)."""
        with self._lock:
            total = sum(cache.nbytes for cache in self._files.values())
            while self._files and total > budget:
                total -= self._files.popitem(last=False)[1].nbytes


def _file_caches() -> _FileCaches:
    return PROCESS.part("sqlite file caches", _FileCaches)


def release_file_caches() -> None:
    """Drop what the process keeps between stores of the files it searched (stores open now keep theirs):
    for measuring one store's memory alone."""
    _file_caches().trim(0)


class SQLiteStore(Store):
    """The embedded store in one SQLite file (created, and migrated, on open).

    A file holds one tenant's rows (`tenant` names it in every hit; open_store gives each tenant a file of
    its own), so it has no public rows: publishing needs a store tenants share. `cache_mb` bounds what the
    process keeps, between stores, of the files it searched (`store_cache_mb`).
    """

    backend = "sqlite"

    def __init__(
        self, path: str | Path, *, tenant: str = "", timeout: float = 10.0, cache_mb: int = STORE_CACHE_MB
    ):
        if str(path) in ("", ":memory:") or str(path).startswith("file:"):
            raise InvalidRequest("the SQLite store needs a file path (each thread opens its own connection)")
        self.path = Path(path).expanduser()
        self.tenant = tenant
        self.timeout = timeout
        self._local = threading.local()
        self._connections: list[tuple[int, sqlite3.Connection]] = []  # each with the process that opened it
        self._guard_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._cache_bytes = int(cache_mb * 2**20)
        self._closed = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"cannot create the folder of {self.path}: {error.strerror}") from None
        self._migrate()
        with self._read() as conn:
            self._cache = _file_caches().of(self.path, self._info(conn).get("store_id"), self._cache_bytes)

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # --- connections and transactions ------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        # A forked child must not use its parent's connection: SQLite's locks are per process.
        if conn is None or self._local.pid != os.getpid():
            if self._closed:
                raise StoreError("the store is closed")
            with self._errors():
                conn = self._open()
            self._local.conn, self._local.pid = conn, os.getpid()
            with self._guard_lock:
                self._connections.append((os.getpid(), conn))
        return conn

    def _open(self) -> sqlite3.Connection:
        """A new connection in WAL mode; on a read-only filesystem, a read-only one."""
        try:
            return _set_up(
                sqlite3.connect(
                    self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
                ),
                "PRAGMA journal_mode=WAL",
                "PRAGMA synchronous=NORMAL",
                "PRAGMA foreign_keys=ON",
            )
        except sqlite3.OperationalError:
            if not _on_read_only_filesystem(self.path):
                raise
        # There SQLite cannot create the WAL's shared-memory file, so the plain open fails even for reading.
        if not self.path.exists():
            raise StoreError(
                f"cannot create the store {self.path}: it is on a read-only filesystem; point "
                "AGENT_RETRIEVAL_DB (or --db) at a writable place"
            ) from None
        wal = Path(f"{self.path}-wal")
        # immutable=1 reads without the shared-memory file, but would ignore commits still in the WAL: use it
        # only when the WAL is empty. (A store that something keeps writing through another, writable mount
        # must not be read through a read-only one: SQLite could not see those writes coming.)
        immutable = not wal.exists() or wal.stat().st_size == 0
        uri = f"{self.path.resolve().as_uri()}?mode=ro" + ("&immutable=1" if immutable else "")
        try:
            return _set_up(
                sqlite3.connect(
                    uri, uri=True, timeout=self.timeout, isolation_level=None, check_same_thread=False
                ),
                "PRAGMA query_only=ON",
                "SELECT count(*) FROM sqlite_schema",
            )
        except sqlite3.OperationalError:
            raise StoreError(
                f"cannot open the store {self.path}: it is on a read-only filesystem and its last "
                f"writes are still in {wal.name} without their index file; open it once where it "
                "is writable (any agent-retrieval command) so SQLite folds them into the store"
            ) from None

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Turn SQLite errors into StoreErrors that say what happened and what to do, never the SQL."""
        try:
            yield
        except sqlite3.Error as error:
            raise StoreError(self._explain(error)) from error

    def _explain(self, error: sqlite3.Error) -> str:
        """What happened to which file, and what to do about it."""
        code = getattr(error, "sqlite_errorcode", 0) & 0xFF  # the primary result code
        text = str(error).lower()
        if _failure(code, text) is Failure.CONFLICT:
            return (
                f"the store {self.path} is locked by another writer (waited {self.timeout:g} s): another "
                "process is writing to it, such as an ingest or reembed. Wait for it to finish, then run "
                "this again"
            )
        if code == sqlite3.SQLITE_READONLY or "readonly" in text:
            return (
                f"cannot write the store {self.path}: it is read-only (the file's permissions or a read-only "
                "filesystem); searches still work. To write, make the file and its folder writable, or copy "
                "the store to a writable place and point AGENT_RETRIEVAL_DB (or --db) at it"
            )
        if code == sqlite3.SQLITE_FULL or "full" in text:
            return (
                f"cannot write the store {self.path}: the disk is full. The unfinished write was undone; "
                "free some space, then run this again"
            )
        if code == sqlite3.SQLITE_IOERR or "disk i/o" in text:
            return (
                f"cannot read or write the store {self.path}: the disk failed "
                f"({getattr(error, 'sqlite_errorname', 'I/O error')}). Check the disk, then run this again"
            )
        if (
            code in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT)
            or "not a database" in text
            or "malformed" in text
        ):
            return f"{self.path} is not a valid agent-retrieval store (or is damaged)"
        if code == sqlite3.SQLITE_CANTOPEN:
            return (
                f"cannot open the store {self.path}: check that its folder exists and may be read and written"
            )
        return f"the store {self.path} failed: {type(error).__name__}"

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: one writer per process at a time; BEGIN IMMEDIATE waits out others."""
        conn = self._conn()
        with self._write_lock, self._errors():
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute(
                    "UPDATE store_info SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'"
                )
                conn.execute("COMMIT")
            except BaseException:
                _end(conn, "ROLLBACK")
                raise

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every statement in it sees one snapshot, even while a writer commits."""
        conn = self._conn()
        with self._errors():
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                _end(conn, "COMMIT")

    def _migrate(self) -> None:
        """Bring the file's schema up to date (sqlite_schema.py) in one transaction. Not `_write()`: that
        counts the write in store_info, a table the first migration creates."""
        conn = self._conn()
        with self._write_lock, self._errors():
            if schema_version(conn) >= SCHEMA_VERSION:
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                migrate(conn)
                conn.execute("COMMIT")
            except BaseException:
                _end(conn, "ROLLBACK")
                raise

    def close(self) -> None:
        self._closed = True
        with self._guard_lock:
            for pid, conn in self._connections:
                if pid == os.getpid():
                    conn.close()
                else:  # a parent's, in a forked child: closing it here could act on the parent's locks
                    PROCESS.keep(conn)
            self._connections.clear()
        self._cache = _FileCache()  # what the file's other stores share stays theirs

    # --- what the vectors are --------------------------------------------------------------------
    def _info(self, conn: sqlite3.Connection) -> dict[str, str]:
        return dict(conn.execute("SELECT key, value FROM store_info").fetchall())

    def embedding_model(self) -> tuple[str, int] | None:
        with self._errors():
            info = self._info(self._conn())
        return (info["embedding_model"], int(info["dimension"])) if "embedding_model" in info else None

    def _set_embedding_model(self, model_id: str, dimension: int) -> None:
        with self._write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO store_info VALUES (?, ?)",
                [("embedding_model", model_id), ("dimension", str(dimension))],
            )

    def _claim_model(self, conn: sqlite3.Connection, model_id: str, vectors: list[Any]) -> None:
        """Record the model on first write; refuse vectors of another model or dimension."""
        dims = {len(v) for v in vectors}
        if len(dims) > 1:
            raise EmbeddingModelMismatch(model_id, min(dims), model_id, max(dims))
        info = self._info(conn)
        if "embedding_model" not in info:
            if dims:
                conn.executemany(
                    "INSERT INTO store_info VALUES (?, ?)",
                    [("embedding_model", model_id), ("dimension", str(dims.pop()))],
                )
            return
        stored, stored_dim = info["embedding_model"], int(info["dimension"])
        if stored != model_id or (dims and dims != {stored_dim}):
            raise EmbeddingModelMismatch(stored, stored_dim, model_id, next(iter(dims), None))

    # --- writing ---------------------------------------------------------------------------------
    def _upsert(self, documents: Sequence[Document], chunks: Sequence[Chunk], model_id: str) -> None:
        rows: list[Document | Chunk] = [*documents, *chunks]
        vectors = [r.embedding for r in rows if r.embedding is not None]
        with self._write() as conn:
            self._claim_model(conn, model_id, vectors)
            for doc in documents:
                conn.execute("DELETE FROM chunks WHERE document_id = ?", (doc.id,))
                conn.execute(
                    f"""INSERT INTO documents (id, title, content, metadata, source, content_hash, text_hash,
                                               embedding, embedding_model)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                        ON CONFLICT (id) DO UPDATE SET title = excluded.title, content = excluded.content,
                          metadata = excluded.metadata, source = excluded.source,
                          content_hash = excluded.content_hash, text_hash = excluded.text_hash,
                          embedding = excluded.embedding, embedding_model = excluded.embedding_model,
                          updated_at = {NOW}""",
                    (
                        doc.id,
                        doc.title,
                        doc.content,
                        _json(doc.metadata),
                        doc.source,
                        doc.content_hash,
                        doc.text_hash,
                        *_blob(doc.embedding, model_id),
                    ),
                )
            conn.executemany(
                """INSERT INTO chunks (id, document_id, ordinal, heading_path, content, metadata, text_hash,
                                       embedding, embedding_model) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                [
                    (
                        c.id,
                        c.document_id,
                        c.ordinal,
                        c.heading_path,
                        c.content,
                        _json(c.metadata),
                        c.text_hash,
                        *_blob(c.embedding, model_id),
                    )
                    for c in chunks
                ],
            )

    def _delete_documents(self, ids: list[str]) -> int:
        with self._write() as conn:
            deleted = 0
            for doc_id in ids:
                conn.execute("DELETE FROM chunks WHERE document_id = ?", (doc_id,))
                deleted += conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,)).rowcount
            return deleted

    def _document_states(self, ids: list[str]) -> dict[str, DocumentState]:
        states: dict[str, DocumentState] = {}
        with self._read() as conn:
            model = self._info(conn).get("embedding_model", "")
            for batch in batches(ids, 500):
                marks = ",".join("?" * len(batch))
                rows = conn.execute(
                    f"""SELECT d.id, d.content_hash,
                          d.embedding_model IS ? AND NOT EXISTS (
                            SELECT 1 FROM chunks c WHERE c.document_id = d.id AND c.embedding_model IS NOT ?),
                          d.source
                        FROM documents d WHERE d.id IN ({marks})""",
                    (model, model, *batch),
                )
                states.update(
                    {
                        doc_id: DocumentState(content_hash, bool(done), source, False)
                        for doc_id, content_hash, done, source in rows
                    }
                )
        return states

    def _documents_from(self, source: str) -> list[str]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id FROM documents WHERE substr(source, 1, length(?1)) = ?1 ORDER BY id", (source,)
            )
            return [doc_id for (doc_id,) in rows]

    def _list_documents(self, prefix: str, limit: int) -> list[DocumentListing]:
        with self._read() as conn:
            rows = conn.execute(
                """SELECT d.id, d.title, d.source, (SELECT count(*) FROM chunks c WHERE c.document_id = d.id),
                          strftime('%Y-%m-%dT%H:%M:%SZ', d.updated_at)
                   FROM documents d WHERE substr(d.id, 1, length(?1)) = ?1 ORDER BY d.id LIMIT ?2""",
                (prefix, limit),
            )
            return [
                DocumentListing(doc_id, title, source, chunks, updated, public=False)
                for doc_id, title, source, chunks, updated in rows
            ]

    def _get_documents(self, ids: list[str]) -> list[Document]:
        with self._read() as conn:
            rows: list[Any] = []
            for batch in batches(ids, 500):
                marks = ",".join("?" * len(batch))
                rows += conn.execute(
                    f"SELECT id, title, content, metadata, source FROM documents WHERE id IN ({marks})", batch
                )
        return [
            Document(i, title, content, json.loads(meta), source) for i, title, content, meta, source in rows
        ]

    def _vectors_by_hash(self, text_hashes: list[str], model_id: str) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self._read() as conn:
            for batch in batches(text_hashes, 500):
                marks = ",".join("?" * len(batch))
                for table in ("chunks", "documents"):
                    rows = conn.execute(
                        f"""SELECT text_hash, embedding FROM {table}
                        WHERE text_hash IN ({marks}) AND embedding_model = ? GROUP BY text_hash""",
                        (*batch, model_id),
                    )
                    found.update({h: np.frombuffer(blob, dtype=np.float32) for h, blob in rows})
        return found

    def _pending_embeddings(self, level: Level, model_id: str, limit: int) -> list[Any]:
        columns = PENDING_COLUMNS[level]
        with self._read() as conn:
            rows = conn.execute(
                f"""SELECT {", ".join(columns)} FROM {_TABLE[level]}
                WHERE embedding_model IS NOT ? ORDER BY rowid LIMIT ?""",
                (model_id, limit),
            )
            records = [dict(zip(columns, row, strict=True)) for row in rows]
        return pending_rows(level, [r | {"metadata": json.loads(r["metadata"])} for r in records])

    def _set_embeddings(self, level: Level, rows: Sequence[Any], model_id: str) -> None:
        with self._write() as conn:
            conn.executemany(
                f"UPDATE {_TABLE[level]} SET text_hash = ?, embedding = ?, embedding_model = ? WHERE id = ?",
                [(r.text_hash, *_blob(r.embedding, model_id), r.id) for r in rows],
            )

    # --- reading ---------------------------------------------------------------------------------
    def _matrix(self, conn: sqlite3.Connection, level: Level) -> _Matrix | None:
        """The level's vectors of the store's model, reloaded only after a write."""
        info = self._info(conn)
        generation, model = int(info["generation"]), info.get("embedding_model")
        if model is None:
            return None
        cache = self._cache
        current = cache.matrices.get(level)
        if current is not None and current.generation == generation:
            return current
        with cache.lock:  # one thread reloads; the rest reuse its result
            current = cache.matrices.get(level)
            if current is not None and current.generation == generation:
                return current
            rows = conn.execute(
                f"SELECT rowid, embedding FROM {_TABLE[level]} WHERE embedding_model = ? ORDER BY rowid",
                (model,),
            ).fetchall()
            dim = int(info["dimension"])
            rowids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), dim)
            current = cache.matrices[level] = _Matrix(generation, model, rowids, vectors)
        _file_caches().trim(self._cache_bytes)
        return current

    def _vector_search(self, search: VectorSearch) -> list[Hit]:
        level, query, k, filters, document_ids, min_similarity = search
        with self._read() as conn:
            matrix = self._matrix(conn, level)
            if matrix is None or len(matrix.rowids) == 0:
                return []
            if query.shape != (matrix.vectors.shape[1],):
                raise EmbeddingModelMismatch(
                    matrix.model,
                    matrix.vectors.shape[1],
                    "the query embedder",
                    query.shape[-1] if query.ndim else None,
                )
            where, params = _where(level, filters, document_ids)
            vectors, rowids = matrix.vectors, matrix.rowids
            if where:  # the scope is applied before ranking, so k results still come back
                allowed = [
                    r[0] for r in conn.execute(f"SELECT d.rowid FROM {_FROM[level]} WHERE {where}", params)
                ]
                keep = np.isin(rowids, np.asarray(allowed, dtype=np.int64))
                vectors, rowids = vectors[keep], rowids[keep]
            if len(rowids) == 0:
                return []
            # einsum's own loop, not BLAS: one thread, as fast as single-threaded BLAS for a matrix-vector
            # product (memory-bound), and BLAS's threads, spinning on both cores, would stall the keyword
            # search beside it; limiting them instead would switch a setting of the whole process per call.
            scores = np.einsum("ij,j->i", vectors, query)
            top = np.argpartition(-scores, k - 1)[:k] if len(scores) > k else np.arange(len(scores))
            top = top[np.argsort(-scores[top], kind="stable")]
            # compared in float64: a floor below float32's precision (1e-300) would otherwise round to 0.0
            top = top[scores[top] >= np.float64(min_similarity)]
            return self._hits(
                conn, level, {int(rowids[i]): float(scores[i]) for i in top}, "vector_similarity"
            )

    def _keyword_search(self, search: KeywordSearch) -> list[Hit]:
        """BM25 over the query's words (FTS5), computed exactly but, for long queries, only over the rows
        that can reach the top k (MaxScore): a row holding none of the rarer terms scores at most the sum
        of the common terms' upper bounds, so once k rows beat that sum, rows with only common terms are
        never scored. On 100K chunks this halves the time of a SciFact query."""
        level, query, k, filters, document_ids = search
        terms = keyword_terms(query)
        if not terms:
            return []
        fts = f"{level}_fts"
        where, params = _where(level, filters, document_ids)
        # Unscoped, the FTS index answers alone: joining the table for every match would double the time.
        score = f"-bm25({fts}, {TITLE_WEIGHT}, 1.0, 0.0)"  # the every-row column weighs nothing
        sql = (
            f"SELECT rowid, {score} AS score FROM {fts} WHERE {fts} MATCH ? ORDER BY score DESC LIMIT ?"
            if not where
            else f"""SELECT d.rowid, f.score
                   FROM (SELECT rowid, {score} AS score FROM {fts} WHERE {fts} MATCH ?) f
                   JOIN {_TABLE[level]} d ON d.rowid = f.rowid WHERE {where} ORDER BY f.score DESC LIMIT ?"""
        )
        with self._read() as conn:

            def ranked(essential: list[str]) -> list[tuple[int, float]]:
                rest = [t for t in terms if t not in essential]
                match = f"({_fts_any(essential)})" + (
                    f" AND ({_fts_any(rest)} OR {EVERY_ROW})" if rest else ""
                )
                return conn.execute(sql, (match, *params, k)).fetchall()

            weights = self._idf(conn, level, terms)
            if len(terms) < 3:
                rows = ranked(terms)
            else:
                by_rarity = sorted((t for t in terms if weights[t] > 0), key=lambda t: -weights[t])
                if not by_rarity:
                    return []
                first = by_rarity[: (len(by_rarity) + 1) // 2]
                rows = ranked(first)
                threshold = rows[-1][1] if len(rows) == k else 0.0
                bound, essential = 0.0, list(by_rarity)
                while essential and bound + _BM25_K1_PLUS_1 * weights[essential[-1]] < threshold:
                    bound += _BM25_K1_PLUS_1 * weights[essential.pop()]
                if not set(essential) <= set(first):
                    rows = ranked(essential)
            hits = self._hits(conn, level, dict(rows), "keyword_score")
            if hits:
                hits[0] = replace(hits[0], keyword_coverage=_coverage(conn, level, rows[0][0], weights))
            return hits

    def _idf(self, conn: sqlite3.Connection, level: Level, terms: list[str]) -> dict[str, float]:
        """FTS5's bm25 idf of each term (0 for a term in no row); frequencies are cached per write."""
        generation = int(self._info(conn)["generation"])
        cache = self._cache.frequencies.get(level)
        if cache is None or cache[0] != generation:
            rows = conn.execute(f"SELECT count(*) FROM {_TABLE[level]}").fetchone()[0]
            cache = self._cache.frequencies[level] = (generation, rows, {})
        _, rows, frequencies = cache
        if len(frequencies) > IDF_CACHE_TERMS:
            frequencies.clear()
        # Other threads share the cache and may empty it at any moment: this call's counts are kept in its
        # own dict, and the shared one is only ever asked with get() and added to.
        counts: dict[str, int] = {}
        for term in terms:
            count = frequencies.get(term)
            if count is None:
                sql = f"SELECT count(*) FROM {level}_fts WHERE {level}_fts MATCH ?"
                count = frequencies[term] = conn.execute(sql, (_fts_any([term]),)).fetchone()[0]
            counts[term] = count
        # As FTS5: idf = ln((N - n + 0.5) / (n + 0.5)), at least 1e-6, for a term in n of N rows.
        return {t: max(1e-6, math.log((rows - n + 0.5) / (n + 0.5))) if n else 0.0 for t, n in counts.items()}

    def _hits(
        self, conn: sqlite3.Connection, level: Level, scores: dict[int, float], score_field: str
    ) -> list[Hit]:
        """The rows of `scores` (rowid -> score) as hits in that order, the score in `score_field`."""
        if not scores:
            return []
        marks = ",".join("?" * len(scores))
        rows = conn.execute(
            f"SELECT {_COLUMNS[level]} FROM {_FROM[level]} WHERE d.rowid IN ({marks})", list(scores)
        )
        by_rowid = {r[0]: r for r in rows}
        return [
            _hit(level, by_rowid[i], self.tenant, **{score_field: score})
            for i, score in scores.items()
            if i in by_rowid
        ]

    def _document_chunks(self, document_ids: list[str], limit: int) -> list[Hit]:
        rows: list[Any] = []
        with self._read() as conn:
            # One document at a time, in the caller's order, each read along the (document_id, ordinal) index
            # and stopped at what is still wanted: a 100K-chunk document costs no more than `limit` rows.
            for doc_id in document_ids:
                if len(rows) == limit:
                    break
                rows += conn.execute(
                    f"""SELECT {_COLUMNS["chunks"]} FROM {_FROM["chunks"]}
                    WHERE d.document_id = ? ORDER BY d.ordinal LIMIT ?""",
                    (doc_id, limit - len(rows)),
                )
        return [_hit("chunks", r, self.tenant) for r in rows]

    def _unknown_documents(self, ids: list[str]) -> list[str]:
        known: set[str] = set()
        with self._read() as conn:
            for batch in batches(ids, 500):
                marks = ",".join("?" * len(batch))
                known.update(
                    r[0] for r in conn.execute(f"SELECT id FROM documents WHERE id IN ({marks})", batch)
                )
        return [i for i in ids if i not in known]

    def _metadata_counts(self, max_values: int) -> list[MetadataCount]:
        """Counted once per write: a planner asks every run, and counting 100K documents takes a second."""
        with self._read() as conn:
            generation = int(self._info(conn)["generation"])
            cached = self._cache.metadata
            if cached is not None and cached[:2] == (generation, max_values):
                return cached[2]
            rows = conn.execute(
                """SELECT key, type, atom, n, key_n FROM (
                    SELECT key, type, atom, n, sum(n) OVER (PARTITION BY key) AS key_n,
                           row_number() OVER (PARTITION BY key ORDER BY n DESC, CAST(atom AS TEXT)) AS place
                    FROM (SELECT m.key, m.type, m.atom, count(*) AS n
                          FROM documents d, json_each(d.metadata) m
                          WHERE m.type IN ('integer', 'real', 'true', 'false')
                             OR (m.type = 'text' AND length(m.atom) <= ?)
                          GROUP BY m.key, m.type, m.atom))
                WHERE place <= ?""",
                (FACET_VALUE_CHARS, max_values),
            ).fetchall()
        counts = [
            (key, bool(atom) if kind in ("true", "false") else atom, n, key_n)
            for key, kind, atom, n, key_n in rows
        ]
        self._cache.metadata = (generation, max_values, counts)
        return counts

    def stats(self) -> StoreStats:
        with self._read() as conn:
            info = self._info(conn)
            model = info.get("embedding_model")

            def count(sql: str, *params: Any) -> int:
                return int(conn.execute(sql, params).fetchone()[0])

            return StoreStats(
                backend=self.backend,
                location=str(self.path.resolve()),
                documents=count("SELECT count(*) FROM documents"),
                chunks=count("SELECT count(*) FROM chunks"),
                embedding_model=model,
                dimension=int(info["dimension"]) if model else None,
                documents_missing_embeddings=count(
                    "SELECT count(*) FROM documents WHERE embedding IS NULL OR embedding_model IS NOT ?",
                    model,
                ),
                chunks_missing_embeddings=count(
                    "SELECT count(*) FROM chunks WHERE embedding IS NULL OR embedding_model IS NOT ?", model
                ),
                schema_version=count("PRAGMA user_version"),
            )


def _failure(code: int, text: str) -> Failure | None:
    """A SQLite result code in the stores' vocabulary. Another writer's lock, held past the busy timeout, is a
    conflict (transient: once it commits the call succeeds); a local file is never unreachable."""
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in text:
        return Failure.CONFLICT
    return None


def _set_up(conn: sqlite3.Connection, *statements: str) -> sqlite3.Connection:
    """Run the statements that prepare a new connection; closed again if one fails, so no file stays open."""
    try:
        for statement in statements:
            conn.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


def _end(conn: sqlite3.Connection, statement: str) -> None:
    """End a transaction after its work, unless SQLite already ended it: on a full disk or an I/O error it
    rolls back by itself, and a second ROLLBACK would fail and hide that error behind its own."""
    if conn.in_transaction:
        conn.execute(statement)


def _on_read_only_filesystem(path: Path) -> bool:
    folder = path.resolve().parent
    while not folder.exists():
        folder = folder.parent
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _coverage(conn: sqlite3.Connection, level: Level, rowid: int, idf: dict[str, float]) -> float:
    """The share of the query's idf that one row's words hold (a lookup per term in that row alone: cheap,
    so it is measured for the best keyword hit only)."""
    total = sum(idf.values())
    sql = f"SELECT 1 FROM {level}_fts WHERE {level}_fts MATCH ? AND rowid = ?"
    held = sum(w for t, w in idf.items() if w and conn.execute(sql, (_fts_any([t]), rowid)).fetchone())
    return held / total if total else 0.0


def _fts_any(terms: Sequence[str]) -> str:
    """An FTS5 expression matching any of the terms, each quoted so nothing in them is syntax, in the text
    columns only: the every-row column holds EVERY_ROW, which a query naming it (or a word stemming to it)
    would otherwise match in every row."""
    return "- {every_row} : (" + " OR ".join('"' + term.replace('"', '""') + '"' for term in terms) + ")"


def _hit(
    level: Level,
    row: Any,
    tenant: str,
    *,
    vector_similarity: float | None = None,
    keyword_score: float | None = None,
) -> Hit:
    """A hit from a row selected with _COLUMNS, of the store's tenant."""
    return Hit(
        id=row[1],
        level=level,
        document_id=row[2],
        title=row[3],
        content=row[4],
        metadata=json.loads(row[5]),
        ordinal=row[6],
        heading_path=row[7],
        tenant=tenant,
        vector_similarity=vector_similarity,
        keyword_score=keyword_score,
    )


def _json(metadata: dict[str, Any]) -> str:
    return json.dumps(metadata, ensure_ascii=False, default=str, sort_keys=True)


def _blob(vector: Any, model_id: str) -> tuple[bytes | None, str | None]:
    if vector is None:
        return None, None
    return np.asarray(vector, dtype=np.float32).tobytes(), model_id


def _where(
    level: Level, filters: dict[str, Any] | None, document_ids: Sequence[str] | None
) -> tuple[str, list[Any]]:
    """SQL conditions on alias d for metadata filters and a document scope; values bound, never inlined."""
    clauses: list[str] = []
    params: list[Any] = []
    for key, value in (filters or {}).items():
        values = filter_values(value)
        marks = ",".join("?" * len(values))
        if FILTER_KEY.match(key):  # an identifier: json_extract's quoted path finds it exactly (and fast)
            clauses.append(f"json_extract(d.metadata, ?) IN ({marks})")
            params += [f'$."{key}"', *values]
        else:  # '"', '.', escapes or non-ASCII would break or mislead a path: compare the decoded key itself
            clauses.append(f"(SELECT f.value FROM json_each(d.metadata) f WHERE f.key = ?) IN ({marks})")
            params += [key, *values]
    if document_ids is not None:
        column = "d.id" if level == "documents" else "d.document_id"
        clauses.append(f"{column} IN ({','.join('?' * len(document_ids))})")
        params += list(document_ids)
    return " AND ".join(clauses), params
