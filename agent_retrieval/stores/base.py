"""The Store contract every backend (embedded SQLite, Postgres, Supabase) fulfils, and what they share."""

from __future__ import annotations

import asyncio
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from numbers import Real
from typing import Any, NamedTuple, Self, TypeVar, cast, final

import numpy as np

from agent_retrieval.core.validation import ID, KEYWORD_QUERY, Count, Text, check_ids
from agent_retrieval.errors import EmbeddingModelMismatch, InvalidRequest
from agent_retrieval.models import (
    MAX_LISTED,
    MAX_NEIGHBORS,
    MAX_TOP_K,
    Chunk,
    Document,
    Hit,
    Level,
    validate_filters,
)

DOCUMENT_PREVIEW_CHARS = 1500  # document hits carry the opening of the text, not all of it


# --- store arguments ------------------------------------------------------------------------------
# Stores are public too: `Store` checks every argument before a backend sees it, so a bad one is an
# InvalidRequest naming it, the same on every backend, never a database error (or a search wider than asked
# for). The rules are validation.py's, shared with the request models.

MAX_SEARCH_K = 1000  # as Context.candidates and the SQL functions' match_count
MAX_CHUNK_ROWS = 100_000
MAX_SCOPE_IDS = 10_000
MAX_DIMENSION = 16_000  # pgvector's limit for a vector column
SEARCH_K = Count(MAX_SEARCH_K)
CHUNK_ROWS = Count(MAX_CHUNK_ROWS)
LISTED = Count(MAX_LISTED)
DIMENSION = Count(MAX_DIMENSION)
STORED_TEXT = Text()  # a row's text: no length bound here (the loaders and request models set those)
REACH = Count(MAX_NEIGHBORS)
MAX_WINDOWS = 2 * MAX_TOP_K  # passages whose neighbours one call reads
ChunkWindow = tuple[str, str, int]  # a chunk hit's tenant, document id and ordinal: where its window is


T = TypeVar("T")


def batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """`items` in runs of `size`: what one statement or call may bind (itertools.batched from 3.12)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _windows(hits: Sequence[Hit], reach: Any) -> tuple[list[ChunkWindow], int]:
    """Where the chunk hits lie (each once), and the reach, checked: only chunk hits with an ordinal, at most
    MAX_WINDOWS of them."""
    reach = REACH.check("reach", reach)
    if len(hits) > MAX_WINDOWS:
        raise InvalidRequest(f"hits: at most {MAX_WINDOWS} passages at a time (got {len(hits)})")
    windows: dict[ChunkWindow, None] = {}
    for hit in hits:
        if not isinstance(hit, Hit) or hit.level != "chunks" or not isinstance(hit.ordinal, int):
            raise InvalidRequest("hits: only chunk hits have neighbours (each with its ordinal)")
        windows[(hit.tenant, ID.check("document_id", hit.document_id), hit.ordinal)] = None
    return list(windows), reach


def check_level(level: Any) -> Level:
    if level not in ("documents", "chunks"):
        raise InvalidRequest(f"level: must be 'documents' or 'chunks' (got {repr(level)[:40]})")
    return cast(Level, level)


def check_filters(filters: Any) -> dict[str, Any] | None:
    """A store's filter: the tools' rules, but any text is a key (stores are searched by keys metadata
    already holds, whatever they are)."""
    try:
        return validate_filters(filters, any_key=True)
    except ValueError as error:
        raise InvalidRequest(f"filters: {error}") from None


def check_scope(document_ids: Any) -> list[str] | None:
    return None if document_ids is None else check_ids(document_ids, max_ids=MAX_SCOPE_IDS)


def check_vector(vector: Any) -> np.ndarray | None:
    """A query vector: one row of finite numbers (its dimension is the store's to check), returned scaled to
    unit length, or None when it is all zeros: it has no direction, so nothing is similar to it."""
    try:
        array = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise InvalidRequest("vector: must be a list of numbers (the query embedding)") from None
    if array.ndim != 1 or not array.size or not np.isfinite(array).all():
        raise InvalidRequest("vector: must be a non-empty list of finite numbers (the query embedding)")
    # Cosine is scale-free, but float sums are not: a vector of huge or tiny numbers would overflow or
    # underflow them (pgvector then answers NaN similarities, which pass every threshold).
    largest = float(np.abs(array).max())
    if largest == 0:
        return None
    array = array / largest
    return (array / np.linalg.norm(array)).astype(np.float32)


def check_similarity(min_similarity: Any) -> float:
    if isinstance(min_similarity, bool) or not isinstance(min_similarity, Real) or math.isnan(min_similarity):
        raise InvalidRequest(f"min_similarity: must be a number (got {repr(min_similarity)[:40]})")
    return float(min_similarity)


def check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequest(f"{name}: must be True or False (got {repr(value)[:40]})")
    return value


def check_found(hits: Sequence[Hit]) -> list[Hit]:
    """Hits of a search, each with an id a store can look up, at most MAX_WINDOWS (what one call returns)."""
    if len(hits) > MAX_WINDOWS:
        raise InvalidRequest(f"hits: at most {MAX_WINDOWS} at a time (got {len(hits)})")
    for hit in hits:
        if not isinstance(hit, Hit):
            raise InvalidRequest(f"hits: must be the hits of a search (got {type(hit).__name__})")
        ID.check("id", hit.id)
    return list(hits)


def check_rows(documents: Sequence[Document], chunks: Sequence[Chunk]) -> None:
    """What an upsert writes: ids every other call can name and text every backend can hold, each chunk
    with its document in the batch (an upsert carries each document with its complete chunk list)."""
    for doc in documents:
        ID.check("document id", doc.id)
        for name in ("title", "content"):
            STORED_TEXT.check(f"document {doc.id!r}: {name}", getattr(doc, name))
        if doc.source is not None:
            STORED_TEXT.check(f"document {doc.id!r}: source", doc.source)
    for chunk in chunks:
        ID.check("chunk id", chunk.id)
        ID.check(f"chunk {chunk.id!r}: document_id", chunk.document_id)
        for name in ("heading_path", "content"):
            STORED_TEXT.check(f"chunk {chunk.id!r}: {name}", getattr(chunk, name))
    strays = {c.document_id for c in chunks} - {d.id for d in documents}
    if strays:
        raise InvalidRequest(f"chunks refer to documents not in this batch: {sorted(strays)[:5]}")


class VectorSearch(NamedTuple):
    """A vector search's arguments, checked: what a backend's `_vector_search` is given."""

    level: Level
    vector: np.ndarray  # unit length, float32
    k: int
    filters: dict[str, Any] | None
    document_ids: list[str] | None
    min_similarity: float
    rows: bool = True  # False: the hits' rows may be left unread (Store.with_rows reads them)


class KeywordSearch(NamedTuple):
    """A keyword search's arguments, checked: what a backend's `_keyword_search` is given."""

    level: Level
    query: str
    k: int
    filters: dict[str, Any] | None
    document_ids: list[str] | None
    rows: bool = True


def checked_vector_search(
    level: Any, vector: Any, k: Any, filters: Any, document_ids: Any, min_similarity: Any, rows: Any = True
) -> VectorSearch | None:
    """The search checked, or None when nothing can match (a vector without direction, an empty scope)."""
    checked = (
        check_level(level),
        check_vector(vector),
        SEARCH_K.check("k", k),
        check_filters(filters),
        check_scope(document_ids),
        check_similarity(min_similarity),
    )
    level, unit_vector, k, filters, document_ids, min_similarity = checked
    if unit_vector is None or document_ids == []:
        return None
    return VectorSearch(
        level, unit_vector, k, filters, document_ids, min_similarity, check_flag("rows", rows)
    )


def checked_keyword_search(
    level: Any, query: Any, k: Any, filters: Any, document_ids: Any, rows: Any = True
) -> KeywordSearch | None:
    """The search checked, or None when nothing can match (a blank query, an empty scope)."""
    search = KeywordSearch(
        check_level(level),
        KEYWORD_QUERY.check("query", query),
        SEARCH_K.check("k", k),
        check_filters(filters),
        check_scope(document_ids),
        check_flag("rows", rows),
    )
    return None if not search.query.strip() or search.document_ids == [] else search


def filter_values(value: Any) -> list[Any]:
    """The stored values a filter value matches: a number also matches its text form and vice versa,
    so {"year": "2021"} finds year 2021 whichever way it was ingested."""
    values = value if isinstance(value, list) else [value]
    out: list[Any] = []
    for v in values:
        if isinstance(v, bool):
            out.append(v)
        elif isinstance(v, int | float):
            out += [v, str(v)]
        else:
            out.append(v)
            if re.fullmatch(r"-?\d{1,15}", v):
                out.append(int(v))
            elif re.fullmatch(r"-?\d{0,15}\.\d{1,15}", v):
                out.append(float(v))
    return list(dict.fromkeys(out))


class Failure(StrEnum):
    """Why a store call failed, in the words every backend maps its own errors to (SQLSTATEs, PostgREST
    codes, HTTP statuses, driver exceptions, SQLite result codes)."""

    UNREACHABLE = (
        "unreachable"  # no connection, or it dropped: the server is down, restarting or out of reach
    )
    CONFLICT = "conflict"  # the call gave way to a concurrent writer: a deadlock, a serialization failure


# The failures the same call may get past when it is made again (every store call is safe to repeat): the one
# list of what is transient.
TRANSIENT = frozenset({Failure.UNREACHABLE, Failure.CONFLICT})


# What `pending_embeddings` returns of a row: enough to make its embedding text and write its vector back.
PENDING_COLUMNS: dict[Level, tuple[str, ...]] = {
    "documents": ("id", "title", "content", "metadata", "source", "content_hash"),
    "chunks": ("id", "document_id", "ordinal", "content", "heading_path", "metadata"),
}


def pending_rows(level: Level, rows: Iterable[Mapping[str, Any]]) -> list[Document] | list[Chunk]:
    """Rows holding PENDING_COLUMNS[level] (metadata decoded), as the records `pending_embeddings` returns."""
    columns = PENDING_COLUMNS[level]
    if level == "documents":
        return [Document(**{c: row[c] for c in columns}) for row in rows]
    return [Chunk(**{c: row[c] for c in columns}) for row in rows]


class DocumentState(NamedTuple):
    """What a store holds for one document id (of the tenant it writes): enough for ingestion to skip what is
    unchanged, and for a writer to tell whose document it would replace."""

    content_hash: str
    embedded: bool  # the document and all its chunks hold vectors of the store's model
    source: str | None  # where it was loaded from (a file, "file:line"), as the writer gave it
    public: bool  # published to every tenant and anonymous readers


class DocumentListing(NamedTuple):
    """One stored document as `agent-retrieval list` shows it."""

    id: str
    title: str
    source: str | None
    chunks: int
    updated: str  # when it was last written, ISO 8601 (UTC)
    public: bool


@dataclass
class StoreStats:
    """What `agent-retrieval stats` shows."""

    backend: str
    location: str
    documents: int
    chunks: int
    embedding_model: str | None
    dimension: int | None
    documents_missing_embeddings: int
    chunks_missing_embeddings: int
    schema_version: int


MetadataValue = str | int | float | bool
FACET_KEYS = 20
FACET_VALUES = 20
FACET_VALUE_CHARS = 100
MetadataCount = tuple[str, MetadataValue, int, int]  # key, value, documents with it, documents with the key


def _facets(counts: Iterable[MetadataCount]) -> dict[str, list[MetadataValue]]:
    """{key: values}, the most used keys first, each with its values, most common first, from rows of
    (key, value, documents with that value, documents with the key) for each key's most common values."""
    by_key: dict[str, list[tuple[int, MetadataValue]]] = {}
    documents: dict[str, int] = {}
    for key, value, n, key_n in counts:
        by_key.setdefault(key, []).append((n, value))
        documents[key] = key_n
    keys = sorted(by_key, key=lambda k: (-documents[k], k))[:FACET_KEYS]
    return {
        key: [value for _, value in sorted(by_key[key], key=lambda nv: (-nv[0], str(nv[1])))] for key in keys
    }


class Store(ABC):
    """Documents and their chunks, with vector and keyword search over either level.

    Filters and document-id scopes are applied inside each search, before the limit, so a filtered
    search still fills `k`. Vectors are unit length; similarity is cosine. A store records the
    embedding model and dimension of its vectors and refuses to mix in another's.
    """

    backend: str = "store"
    publishes: bool = False  # whether it holds public rows, read by every tenant (stores tenants share)

    @property
    def write_refusal(self) -> str | None:
        """Why every write would be refused, where that is known without asking the store (a server checks
        it before reading a caller's documents); None when writes may go ahead."""
        return None

    # Each public method checks its arguments with the shared rules, once for every backend, then calls the
    # backend's protected method (`upsert` -> `_upsert`), which may trust what it is given. The public ones
    # are @final, so a backend cannot skip the checks by overriding one.

    # --- what the vectors are ------------------------------------------------------------------
    @abstractmethod
    def embedding_model(self) -> tuple[str, int] | None:
        """(model id, dimension) of the stored vectors, or None while the store has none."""

    @final
    def set_embedding_model(self, model_id: str, dimension: int) -> None:
        """Declare the model searches use (after every row was re-embedded with it)."""
        self._set_embedding_model(ID.check("model_id", model_id), DIMENSION.check("dimension", dimension))

    # --- writing -------------------------------------------------------------------------------
    @final
    def upsert(self, documents: Sequence[Document], chunks: Sequence[Chunk], model_id: str) -> None:
        """Write documents with their complete chunk lists in one transaction, replacing earlier
        versions; rows with `embedding=None` are stored unembedded (for `reembed` to backfill)."""
        model_id = ID.check("model_id", model_id)
        check_rows(documents, chunks)
        self.check_public(documents)
        self._upsert(documents, chunks, model_id)

    @final
    def check_public(self, documents: Sequence[Document]) -> None:
        """Refuse to publish where no row is shared by tenants (each tenant has its own store file)."""
        published = [d.id for d in documents if d.public]
        if published and not self.publishes:
            raise InvalidRequest(
                f"public: the {self.backend} store cannot publish documents "
                f"({published[:3]}): each tenant has a store of its own, so nothing is "
                "shared by every tenant. Publishing needs the Postgres or Supabase store; "
                "here, leave public off"
            )

    @final
    def delete_documents(self, ids: Sequence[str]) -> int:
        """Delete documents and their chunks; returns how many documents were deleted."""
        ids = check_ids(ids, "ids", max_ids=None)
        return self._delete_documents(ids) if ids else 0

    @final
    def document_states(self, ids: Sequence[str]) -> dict[str, DocumentState]:
        """The state of each of these ids that the store holds for the tenant it writes."""
        ids = check_ids(ids, "ids", max_ids=None)
        return self._document_states(ids) if ids else {}

    @final
    def documents_from(self, source: str) -> list[str]:
        """The ids of the documents the writing tenant holds whose source starts with `source` (a file, or a
        folder ended by its separator): what files under a folder were stored as, for sync and prune."""
        source = STORED_TEXT.check("source", source)
        return self._documents_from(source) if source else []

    @final
    def list_documents(self, prefix: str = "", limit: int = MAX_LISTED) -> list[DocumentListing]:
        """The documents the writing tenant holds whose id starts with `prefix`, by id, at most `limit`."""
        return self._list_documents(STORED_TEXT.check("prefix", prefix), LISTED.check("limit", limit))

    @final
    def get_documents(self, ids: Sequence[str]) -> list[Document]:
        """The whole documents (title, content, metadata, source) of these ids that a search could return,
        in the order asked, each once (the tenant's own before a public one of the same id)."""
        ids = check_ids(ids, "ids", max_ids=None)
        found: dict[str, Document] = {}
        for doc in self._get_documents(ids) if ids else []:
            found.setdefault(doc.id, doc)
        return [found[doc_id] for doc_id in dict.fromkeys(ids) if doc_id in found]

    @final
    def vectors_by_hash(self, text_hashes: Sequence[str], model_id: str) -> dict[str, np.ndarray]:
        """Stored vectors of `model_id` for these embedding-text hashes, so unchanged text is not embedded
        again."""
        text_hashes = check_ids(text_hashes, "text_hashes", max_ids=None)
        model_id = ID.check("model_id", model_id)
        return self._vectors_by_hash(text_hashes, model_id) if text_hashes else {}

    @final
    def pending_embeddings(self, level: Level, model_id: str, limit: int) -> list[Document] | list[Chunk]:
        """Rows with no vector or another model's vector, for backfill and re-embedding."""
        return self._pending_embeddings(
            check_level(level), ID.check("model_id", model_id), CHUNK_ROWS.check("limit", limit)
        )

    @final
    def set_embeddings(self, level: Level, rows: Sequence[Document] | Sequence[Chunk], model_id: str) -> None:
        """Store the `embedding` and `text_hash` of already stored rows, in one transaction."""
        level, model_id = check_level(level), ID.check("model_id", model_id)
        check_ids([row.id for row in rows], "rows", max_ids=None)
        if rows:
            self._set_embeddings(level, rows, model_id)

    @final
    def model_mismatch(self, model_id: str) -> EmbeddingModelMismatch | None:
        """The error vectors of `model_id` meet here (they cannot be mixed with the stored model's, nor
        compared with them), or None when the store holds that model's vectors or none yet."""
        model_id = ID.check("model_id", model_id)
        stored = self.embedding_model()
        if stored and stored[0] != model_id:
            return EmbeddingModelMismatch(stored[0], stored[1], model_id, None)
        return None

    # --- reading -------------------------------------------------------------------------------
    @final
    def vector_search(
        self,
        level: Level,
        vector: np.ndarray,
        k: int,
        *,
        filters: dict[str, Any] | None = None,
        document_ids: Sequence[str] | None = None,
        min_similarity: float = -1.0,
        rows: bool = True,
    ) -> list[Hit]:
        """The k rows most similar to `vector` (cosine), best first, with `vector_similarity` set. With
        `rows=False` a store may leave each hit's title, text, heading path and metadata empty (its id,
        document, ordinal and scores are always there): for a caller that ranks many candidates and reads the
        rows of a few (`with_rows`)."""
        search = checked_vector_search(level, vector, k, filters, document_ids, min_similarity, rows)
        return self._vector_search(search) if search else []

    @final
    def keyword_search(
        self,
        level: Level,
        query: str,
        k: int,
        *,
        filters: dict[str, Any] | None = None,
        document_ids: Sequence[str] | None = None,
        rows: bool = True,
    ) -> list[Hit]:
        """The k best BM25 matches of the query's words, best first, with `keyword_score` set (higher is
        better) and, on the best match at least, `keyword_coverage` (fusion weighs the keyword side by it).
        The query is plain text: any search-syntax characters in it are treated as ordinary text. `rows` as
        for `vector_search`."""
        search = checked_keyword_search(level, query, k, filters, document_ids, rows)
        return self._keyword_search(search) if search else []

    @final
    def with_rows(self, hits: Sequence[Hit]) -> list[Hit]:
        """`hits` (of a search with `rows=False`) with their stored title, text, heading path and metadata,
        in order, each keeping its scores and ranks; a hit whose row is gone since it was found, or of
        another tenant, is left out. A store whose searches always read their rows returns them as given."""
        hits = check_found(hits)
        return self._with_rows(hits) if hits else []

    @final
    def document_chunks(self, document_ids: Sequence[str], limit: int) -> list[Hit]:
        """Chunks of these documents in reading order (documents in the order given)."""
        document_ids = check_ids(document_ids, max_ids=MAX_SCOPE_IDS)
        limit = CHUNK_ROWS.check("limit", limit)
        return self._document_chunks(document_ids, limit) if document_ids else []

    @final
    def chunk_neighbors(self, hits: Sequence[Hit], reach: int) -> list[Hit]:
        """The chunks within `reach` places of each chunk hit in its document's reading order (the hits
        themselves too), of the hit's own tenant and document, and only those the caller may read."""
        return self._chunk_neighbors(*_windows(hits, reach)) if hits else []

    @final
    async def achunk_neighbors(self, hits: Sequence[Hit], reach: int) -> list[Hit]:
        return await self._achunk_neighbors(*_windows(hits, reach)) if hits else []

    @final
    def unknown_documents(self, ids: Sequence[str]) -> list[str]:
        """Those of `ids` that are not stored."""
        ids = check_ids(ids, "ids", max_ids=MAX_SCOPE_IDS)
        return self._unknown_documents(ids) if ids else []

    @final
    def metadata_values(self) -> dict[str, list[MetadataValue]]:
        """What the caller's documents are tagged with, for a planner to choose filters from: the metadata
        keys, most used first (at most FACET_KEYS), each with its most common values (at most FACET_VALUES;
        strings up to FACET_VALUE_CHARS characters, numbers, booleans). A key with more values than that
        lists the most common only."""
        return _facets(self._metadata_counts(FACET_VALUES))

    @final
    async def ametadata_values(self) -> dict[str, list[MetadataValue]]:
        return _facets(await self._ametadata_counts(FACET_VALUES))

    @abstractmethod
    def stats(self) -> StoreStats:
        """Counts, the embedding model and what still lacks a vector."""

    @abstractmethod
    def close(self) -> None:
        """Release connections; the store may not be used afterwards."""

    def refresh_indexes(self, *, progress: bool = False) -> None:  # noqa: B027 - most stores need none
        """Bring what the store's own indexes do not keep current up to date with what was written (the end
        of an ingest calls it): the embedded store's approximate vector index. Postgres keeps its own."""

    # --- async: the same checks, then the backend's async call ------------------------------------
    # Each twin repeats its sync method's signature on purpose: it is the public API, typed for callers.
    # What they share beyond it (the checks) is one function each: checked_vector_search, ...
    @final
    async def avector_search(
        self,
        level: Level,
        vector: np.ndarray,
        k: int,
        *,
        filters: dict[str, Any] | None = None,
        document_ids: Sequence[str] | None = None,
        min_similarity: float = -1.0,
        rows: bool = True,
    ) -> list[Hit]:
        search = checked_vector_search(level, vector, k, filters, document_ids, min_similarity, rows)
        return await self._avector_search(search) if search else []

    @final
    async def akeyword_search(
        self,
        level: Level,
        query: str,
        k: int,
        *,
        filters: dict[str, Any] | None = None,
        document_ids: Sequence[str] | None = None,
        rows: bool = True,
    ) -> list[Hit]:
        search = checked_keyword_search(level, query, k, filters, document_ids, rows)
        return await self._akeyword_search(search) if search else []

    @final
    async def awith_rows(self, hits: Sequence[Hit]) -> list[Hit]:
        hits = check_found(hits)
        return await self._awith_rows(hits) if hits else []

    @final
    async def adocument_chunks(self, document_ids: Sequence[str], limit: int) -> list[Hit]:
        document_ids = check_ids(document_ids, max_ids=MAX_SCOPE_IDS)
        limit = CHUNK_ROWS.check("limit", limit)
        return await self._adocument_chunks(document_ids, limit) if document_ids else []

    @final
    async def aunknown_documents(self, ids: Sequence[str]) -> list[str]:
        ids = check_ids(ids, "ids", max_ids=MAX_SCOPE_IDS)
        return await self._aunknown_documents(ids) if ids else []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what a backend implements, given checked arguments ----------------------------------------
    @abstractmethod
    def _set_embedding_model(self, model_id: str, dimension: int) -> None: ...

    @abstractmethod
    def _upsert(self, documents: Sequence[Document], chunks: Sequence[Chunk], model_id: str) -> None: ...

    @abstractmethod
    def _delete_documents(self, ids: list[str]) -> int: ...

    @abstractmethod
    def _document_states(self, ids: list[str]) -> dict[str, DocumentState]: ...

    @abstractmethod
    def _documents_from(self, source: str) -> list[str]: ...

    @abstractmethod
    def _list_documents(self, prefix: str, limit: int) -> list[DocumentListing]: ...

    @abstractmethod
    def _get_documents(self, ids: list[str]) -> list[Document]:
        """The documents of these ids, the tenant's own first where a public one shares an id."""

    @abstractmethod
    def _vectors_by_hash(self, text_hashes: list[str], model_id: str) -> dict[str, np.ndarray]: ...

    @abstractmethod
    def _pending_embeddings(
        self, level: Level, model_id: str, limit: int
    ) -> list[Document] | list[Chunk]: ...

    @abstractmethod
    def _set_embeddings(
        self, level: Level, rows: Sequence[Document] | Sequence[Chunk], model_id: str
    ) -> None: ...

    @abstractmethod
    def _vector_search(self, search: VectorSearch) -> list[Hit]:
        """The search's vector is unit length; its document_ids, when given, hold at least one id."""

    @abstractmethod
    def _keyword_search(self, search: KeywordSearch) -> list[Hit]:
        """The search's query is not blank; its document_ids, when given, hold at least one id."""

    @abstractmethod
    def _document_chunks(self, document_ids: list[str], limit: int) -> list[Hit]: ...

    @abstractmethod
    def _unknown_documents(self, ids: list[str]) -> list[str]: ...

    @abstractmethod
    def _chunk_neighbors(self, windows: list[ChunkWindow], reach: int) -> list[Hit]: ...

    async def _achunk_neighbors(self, windows: list[ChunkWindow], reach: int) -> list[Hit]:
        return await asyncio.to_thread(self._chunk_neighbors, windows, reach)

    # Stores without native async run the sync call in a worker thread.
    async def _avector_search(self, search: VectorSearch) -> list[Hit]:
        return await asyncio.to_thread(self._vector_search, search)

    async def _akeyword_search(self, search: KeywordSearch) -> list[Hit]:
        return await asyncio.to_thread(self._keyword_search, search)

    def _with_rows(self, hits: list[Hit]) -> list[Hit]:
        """A store whose searches always read their rows has them already."""
        return hits

    async def _awith_rows(self, hits: list[Hit]) -> list[Hit]:
        return hits

    async def _adocument_chunks(self, document_ids: list[str], limit: int) -> list[Hit]:
        return await asyncio.to_thread(self._document_chunks, document_ids, limit)

    async def _aunknown_documents(self, ids: list[str]) -> list[str]:
        return await asyncio.to_thread(self._unknown_documents, ids)

    @abstractmethod
    def _metadata_counts(self, max_values: int) -> list[MetadataCount]:
        """(key, value, documents with it, documents with the key) for the `max_values` most common scalar
        values of each key of the documents the caller may read: strings of at most FACET_VALUE_CHARS
        characters, numbers and booleans. Counted in the store, so a key with a value per document (a
        source, a URL) sends 20 rows, not one per document."""

    async def _ametadata_counts(self, max_values: int) -> list[MetadataCount]:
        return await asyncio.to_thread(self._metadata_counts, max_values)
