"""The embedded default store: one SQLite file, FTS5 with bm25 for keywords, numpy or HNSW for vectors.

Vectors are stored as float32 blobs. Searches read them into one matrix per level, kept in memory
and reloaded only when a write bumps the store's generation; a matrix-vector product over 50K
MiniLM vectors takes a few milliseconds and needs no SQLite extension, so it works on any CPython.
Past `index_rows` rows a level is searched through an approximate graph kept beside the file
(vector_index.py), which reads a few hundred vectors a query instead of every one.
The matrices (and the keyword statistics and metadata counts) are shared by every store of the process
open on the same file, so a server that opens a store per run reads them once, not every run.
WAL mode lets several readers work beside one writer; each thread has its own connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sqlite3
import typing
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from agent_retrieval.context import STORE_CACHE_MB, VECTOR_INDEX_ROWS
from agent_retrieval.core.process import PROCESS, ProcessState
from agent_retrieval.core.text import keyword_terms
from agent_retrieval.errors import EmbeddingModelMismatch, InvalidRequest, StoreError
from agent_retrieval.models import FILTER_KEY, Chunk, Document, Hit, Level
from agent_retrieval.stores.base import (
    DOCUMENT_PREVIEW_CHARS,
    FACET_VALUE_CHARS,
    PENDING_COLUMNS,
    ChunkWindow,
    DocumentListing,
    DocumentState,
    KeywordSearch,
    MetadataCount,
    Store,
    StoreStats,
    VectorSearch,
    batches,
    filter_values,
    pending_rows,
)
from agent_retrieval.stores.sqlite import stored_postings
from agent_retrieval.stores.sqlite.cache import FileCache, Matrix, ScopeRows, file_caches
from agent_retrieval.stores.sqlite.connection import Connections
from agent_retrieval.stores.sqlite.keywords import best_rows, coverage
from agent_retrieval.stores.sqlite.schema import NOW, TABLE
from agent_retrieval.stores.sqlite.vector_index import VectorIndex, refreshed, sidecar

log = logging.getLogger(__name__)

_COLUMNS = {
    "documents": f"d.rowid, d.id, d.id, d.title, substr(d.content, 1, {DOCUMENT_PREVIEW_CHARS}), d.metadata, "
    "NULL, NULL",
    "chunks": "d.rowid, d.id, d.document_id, p.title, d.content, d.metadata, d.ordinal, d.heading_path",
}
_FROM = {"documents": "documents d", "chunks": "chunks d JOIN documents p ON p.id = d.document_id"}
# What a search without rows reads of each, in _COLUMNS' places: rowid, id, document id, ordinal.
_KEYS = {
    "documents": "d.rowid, d.id, d.id, '', '', NULL, NULL, NULL",
    "chunks": "d.rowid, d.id, d.document_id, '', '', NULL, d.ordinal, NULL",
}
# A filtered search past index_rows reads the graph's nearest twice as deep as its share of the rows asks, up
# to MAX_SCOPED_DEPTH rows (k = 100: filters keeping a fifth or more); a smaller share is scanned exactly.
SCOPE_OVERREAD, MAX_SCOPED_DEPTH = 2, 1000


class SQLiteStore(Store):
    """The embedded store in one SQLite file (created, and migrated, on open).

    A file holds one tenant's rows (`tenant` names it in every hit; open_store gives each tenant a file of
    its own), so it has no public rows: publishing needs a store tenants share. `cache_mb` bounds what the
    process keeps, between stores, of the files it searched (`store_cache_mb`); past `index_rows` rows a
    level's vectors are searched through an approximate index (`vector_index_rows`; 0: never).
    """

    backend = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        tenant: str = "",
        timeout: float = 10.0,
        cache_mb: int = STORE_CACHE_MB,
        index_rows: int = VECTOR_INDEX_ROWS,
        process: ProcessState = PROCESS,
    ):
        if str(path) in ("", ":memory:") or str(path).startswith("file:"):
            raise InvalidRequest("the SQLite store needs a file path (each thread opens its own connection)")
        self.path = Path(path).expanduser()
        self.tenant = tenant
        self.process = process  # whose file caches this store shares (agent_retrieval.core.process)
        self._db = Connections(self.path, timeout, process)
        self._cache_bytes = int(cache_mb * 2**20)
        self._index_rows = index_rows
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"cannot create the folder of {self.path}: {error.strerror}") from None
        self._db.migrate()
        with self._db.read() as conn:
            self._cache = file_caches(process).of(
                self.path, self._info(conn).get("store_id"), self._cache_bytes
            )

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    def close(self) -> None:
        self._db.close()
        self._cache = FileCache()  # what the file's other stores share stays theirs

    # --- what the vectors are --------------------------------------------------------------------
    def _info(self, conn: sqlite3.Connection) -> dict[str, str]:
        return dict(conn.execute("SELECT key, value FROM store_info").fetchall())

    def embedding_model(self) -> tuple[str, int] | None:
        with self._db.errors():
            info = self._info(self._db.connection())
        return (info["embedding_model"], int(info["dimension"])) if "embedding_model" in info else None

    def _set_embedding_model(self, model_id: str, dimension: int) -> None:
        with self._db.write() as conn:
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
        with self._db.write() as conn:
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
        with self._db.write() as conn:
            deleted = 0
            for doc_id in ids:
                conn.execute("DELETE FROM chunks WHERE document_id = ?", (doc_id,))
                deleted += conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,)).rowcount
            return deleted

    def _document_states(self, ids: list[str]) -> dict[str, DocumentState]:
        states: dict[str, DocumentState] = {}
        with self._db.read() as conn:
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
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT id FROM documents WHERE substr(source, 1, length(?1)) = ?1 ORDER BY id", (source,)
            )
            return [doc_id for (doc_id,) in rows]

    def _list_documents(self, prefix: str, limit: int) -> list[DocumentListing]:
        with self._db.read() as conn:
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
        with self._db.read() as conn:
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
        with self._db.read() as conn:
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
        with self._db.read() as conn:
            rows = conn.execute(
                f"""SELECT {", ".join(columns)} FROM {TABLE[level]}
                WHERE embedding_model IS NOT ? ORDER BY rowid LIMIT ?""",
                (model_id, limit),
            )
            records = [dict(zip(columns, row, strict=True)) for row in rows]
        return pending_rows(level, [r | {"metadata": json.loads(r["metadata"])} for r in records])

    def _set_embeddings(self, level: Level, rows: Sequence[Any], model_id: str) -> None:
        with self._db.write() as conn:
            conn.executemany(
                f"UPDATE {TABLE[level]} SET text_hash = ?, embedding = ?, embedding_model = ? WHERE id = ?",
                [(r.text_hash, *_blob(r.embedding, model_id), r.id) for r in rows],
            )

    # --- reading ---------------------------------------------------------------------------------
    def _matrix(self, conn: sqlite3.Connection, level: Level) -> Matrix | None:
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
                f"SELECT rowid, embedding FROM {TABLE[level]} WHERE embedding_model = ? ORDER BY rowid",
                (model,),
            ).fetchall()
            dim = int(info["dimension"])
            rowids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), dim)
            current = cache.matrices[level] = Matrix(generation, model, rowids, vectors)
        file_caches(self.process).trim(self._cache_bytes)
        return current

    def _vector_index(
        self, level: Level, matrix: Matrix, *, searching: bool, progress: bool = False
    ) -> VectorIndex | None:
        """The level's approximate index, brought up to date with `matrix`; None below `index_rows` rows,
        or when a search would have to add more than SEARCH_ADDS rows (the next ingest does)."""
        if not 0 < self._index_rows <= len(matrix.rowids):
            return None
        cache, path = self._cache, sidecar(self.path, level)
        current = cache.indexes.get(level)
        if current is not None and current.matrix.generation == matrix.generation:
            return current
        with cache.lock:
            saved = (matrix.generation, path.stat().st_mtime_ns if path.exists() else 0)
            if searching and cache.behind.get(level) == saved:
                return None
            index = refreshed(cache.indexes.get(level), matrix, path, searching=searching, progress=progress)
            if index is None:
                cache.behind[level] = saved
                return None
            cache.indexes[level] = index
        file_caches(self.process).trim(self._cache_bytes)
        return index

    def refresh_indexes(self, *, progress: bool = False) -> None:
        """Bring each level's approximate vector index up to date with what was written (and save it beside
        the file), and write its common words' postings again when they are missing or far behind: the end
        of an ingest does, so searches after it need not."""
        with self._db.read() as conn:
            for level in typing.get_args(Level):
                # Rows never outnumber the largest rowid: a level below the threshold by it is never read.
                largest = conn.execute(f"SELECT max(rowid) FROM {TABLE[level]}").fetchone()[0] or 0
                if 0 < self._index_rows <= largest and (matrix := self._matrix(conn, level)) is not None:
                    self._vector_index(level, matrix, searching=False, progress=progress)
        for level in typing.get_args(Level):
            with self._db.read() as conn:
                stale = stored_postings.needs_writing(conn, level)
            try:
                if stale:
                    with self._db.write() as conn:
                        stored_postings.write(conn, level, progress=progress)
            except StoreError as error:  # read-only, locked or full: searches ask FTS5 until the next refresh
                log.warning("the %s level's keyword lists were not written: %s", level, error)

    def _vector_search(self, search: VectorSearch) -> list[Hit]:
        level, query, k, filters, document_ids, min_similarity, rows = search
        with self._db.read() as conn:
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
            rowids = matrix.rowids
            # the rows a filter or document list leaves, over the matrix's rows: the scope is applied before
            # ranking, so k results still come back
            keep = None
            if where:
                scope = self._scope_rows(conn, level, where, params, matrix.generation)
                if scope.in_matrix is None:
                    scope.in_matrix = np.isin(rowids, scope.rowids)
                keep = scope.in_matrix
            permitted = len(rowids) if keep is None else int(np.count_nonzero(keep))
            if permitted == 0:
                return []
            top = self._graph_candidates(level, matrix, query, min(k, permitted), keep, permitted)
            if top is not None:  # the graph's candidates, scored as the scan scores them
                scores = np.einsum("ij,j->i", matrix.vectors[top], query)
            else:
                inside = None if keep is None else np.flatnonzero(keep)
                vectors = matrix.vectors if inside is None else matrix.vectors[inside]
                # einsum's own loop, not BLAS: one thread, as fast as single-threaded BLAS for a matrix-vector
                # product (memory-bound), and BLAS's threads, spinning on both cores, would stall the keyword
                # search beside it; limiting them instead would switch a setting of the process per call.
                every = np.einsum("ij,j->i", vectors, query)
                best = np.argpartition(-every, k - 1)[:k] if len(every) > k else np.arange(len(every))
                top, scores = (best if inside is None else inside[best]), every[best]
            order = np.lexsort((top, -scores))  # best first; a tie goes to the older row, on either path
            # compared in float64: a floor below float32's precision (1e-300) would otherwise round to 0.0
            order = order[scores[order] >= np.float64(min_similarity)]
            return self._hits(
                conn,
                level,
                {int(rowids[top[i]]): float(scores[i]) for i in order},
                "vector_similarity",
                rows=rows,
            )

    def _scope_rows(
        self, conn: sqlite3.Connection, level: Level, where: str, params: list[Any], generation: int
    ) -> ScopeRows:
        """The rows a scope leaves, kept until the next write for the scopes searched last."""
        key = (level, where, tuple(params))
        scope = self._cache.scope(key, generation)
        if scope is None:
            # the level's table alone, so its metadata index answers (joined, every row was read)
            rows = conn.execute(f"SELECT d.rowid FROM {level} d WHERE {where}", params)
            scope = ScopeRows(generation, np.sort(np.fromiter((r[0] for r in rows), dtype=np.int64)))
            self._cache.keep_scope(key, scope)
        return scope

    def _graph_candidates(
        self, level: Level, matrix: Matrix, query: np.ndarray, k: int, keep: np.ndarray | None, permitted: int
    ) -> np.ndarray | None:
        """The matrix positions of the k nearest permitted rows by the level's graph, or None where the exact
        scan answers: below `index_rows`, or a scope keeping too small a share of the rows for the graph's
        nearest to hold k of them (a document list, a selective filter: the scan reads only its rows)."""
        index = self._vector_index(level, matrix, searching=True)
        if index is None:
            return None
        if keep is None:
            return index.search(query, k)
        depth = math.ceil(SCOPE_OVERREAD * k * len(matrix.rowids) / permitted)  # twice what the share asks
        if depth > MAX_SCOPED_DEPTH:
            return None
        found = index.search(query, depth)
        found = found[keep[found]][:k]
        return found if len(found) == k else None

    def _keyword_search(self, search: KeywordSearch) -> list[Hit]:
        level, query, k, filters, document_ids, read_rows = search
        terms = keyword_terms(query)
        if not terms:
            return []
        where, params = _where(level, filters, document_ids)
        with self._db.read() as conn:
            generation = int(self._info(conn)["generation"])
            within = self._scope_rows(conn, level, where, params, generation).rowids if where else None
            rows, weights = best_rows(
                conn,
                self._cache,
                generation,
                level,
                terms,
                k,
                (where, params, within),
                stored_postings.tokenizer(self.process),
            )
            file_caches(self.process).trim(self._cache_bytes)  # the postings it read count in the budget
            hits = self._hits(conn, level, dict(rows), "keyword_score", rows=read_rows)
            if hits:
                best = coverage(conn, level, rows[0][0], weights)
                unknown = sum(1 for weight in weights.values() if not weight)
                hits[0] = replace(hits[0], keyword_coverage=best, unknown_terms=unknown)
            return hits

    def _hits(
        self,
        conn: sqlite3.Connection,
        level: Level,
        scores: dict[int, float],
        score_field: str,
        *,
        rows: bool = True,
    ) -> list[Hit]:
        """The rows of `scores` (rowid -> score) as hits in that order, the score in `score_field`; without
        `rows`, only their ids, documents and ordinals: a search's 100 candidates' rows, their texts and
        metadata made into hits, were a third of its time, and fusion keeps a few of them."""
        if not scores:
            return []
        marks = ",".join("?" * len(scores))
        columns, tables = (_COLUMNS[level], _FROM[level]) if rows else (_KEYS[level], f"{level} d")
        found = conn.execute(f"SELECT {columns} FROM {tables} WHERE d.rowid IN ({marks})", list(scores))
        by_rowid = {r[0]: r for r in found}
        return [
            _hit(level, by_rowid[i], self.tenant, **{score_field: score})
            for i, score in scores.items()
            if i in by_rowid
        ]

    def _with_rows(self, hits: list[Hit]) -> list[Hit]:
        stored: dict[tuple[Level, str], Hit] = {}
        with self._db.read() as conn:
            for level in {hit.level for hit in hits if hit.tenant == self.tenant}:
                ids = [hit.id for hit in hits if hit.level == level and hit.tenant == self.tenant]
                for batch in batches(ids, 500):
                    marks = ",".join("?" * len(batch))
                    found = conn.execute(
                        f"SELECT {_COLUMNS[level]} FROM {_FROM[level]} WHERE d.id IN ({marks})", batch
                    )
                    stored.update({(level, r[1]): _hit(level, r, self.tenant) for r in found})
        return [
            replace(
                hit,
                title=row.title,
                content=row.content,
                metadata=row.metadata,
                heading_path=row.heading_path,
            )
            for hit in hits
            if (row := stored.get((hit.level, hit.id))) is not None and hit.tenant == self.tenant
        ]

    async def _awith_rows(self, hits: list[Hit]) -> list[Hit]:
        return await asyncio.to_thread(self._with_rows, hits)

    def _document_chunks(self, document_ids: list[str], limit: int) -> list[Hit]:
        rows: list[Any] = []
        with self._db.read() as conn:
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

    def _chunk_neighbors(self, windows: list[ChunkWindow], reach: int) -> list[Hit]:
        rows: list[Any] = []
        with self._db.read() as conn:
            for tenant, doc_id, ordinal in windows:
                if tenant == self.tenant:  # the file's own rows: a hit of another tenant has none here
                    rows += conn.execute(
                        f"""SELECT {_COLUMNS["chunks"]} FROM {_FROM["chunks"]}
                        WHERE d.document_id = ? AND d.ordinal BETWEEN ? AND ? ORDER BY d.ordinal""",
                        (doc_id, ordinal - reach, ordinal + reach),
                    )
        return [_hit("chunks", r, self.tenant) for r in rows]

    def _unknown_documents(self, ids: list[str]) -> list[str]:
        known: set[str] = set()
        with self._db.read() as conn:
            for batch in batches(ids, 500):
                marks = ",".join("?" * len(batch))
                known.update(
                    r[0] for r in conn.execute(f"SELECT id FROM documents WHERE id IN ({marks})", batch)
                )
        return [i for i in ids if i not in known]

    def _metadata_counts(self, max_values: int) -> list[MetadataCount]:
        """Counted once per write: a planner asks every run, and counting 100K documents takes a second."""
        with self._db.read() as conn:
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
        with self._db.read() as conn:
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


def _hit(
    level: Level,
    row: Any,
    tenant: str,
    *,
    vector_similarity: float | None = None,
    keyword_score: float | None = None,
) -> Hit:
    """A hit from a row selected with _COLUMNS (or _KEYS: no title, text or metadata until `with_rows`), of
    the store's tenant."""
    return Hit(
        id=row[1],
        level=level,
        document_id=row[2],
        title=row[3],
        content=row[4],
        metadata={} if row[5] is None else json.loads(row[5]),
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
