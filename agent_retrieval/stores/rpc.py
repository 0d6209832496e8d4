"""Stores whose logic lives in the SQL functions of stores/sql/: Postgres by DSN and Supabase by RPC.

Both call the same functions with the same arguments; they differ only in how a call travels
(psycopg, or supabase-py through PostgREST). The SQL is rendered for one schema and one embedding
dimension, and can be printed for the Supabase SQL editor.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import re
import threading
import time
from abc import abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from cachetools import LRUCache

from agent_retrieval.context import STORE_CACHE_MB, VECTOR_INDEX_BUILD_DEPTHS, RunSettings
from agent_retrieval.core.fusion import FULL_KEYWORD_COVERAGE, MANY_WORDS, STANDOUT
from agent_retrieval.core.process import PROCESS, ProcessState
from agent_retrieval.core.redaction import redact
from agent_retrieval.core.steps import Steps, arun, blocking, call, run
from agent_retrieval.core.validation import Count
from agent_retrieval.errors import (
    DimensionMismatch,
    EmbeddingModelMismatch,
    InvalidRequest,
    StoreError,
    StoreUnavailable,
)
from agent_retrieval.models import Chunk, Document, Hit, Level
from agent_retrieval.stores.base import (
    DIMENSION,
    DOCUMENT_PREVIEW_CHARS,
    FACET_VALUE_CHARS,
    TRANSIENT,
    ChunkWindow,
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
from agent_retrieval.stores.postings import (
    KeptPostings,
    Postings,
    PostingsCache,
    best_of_postings,
    best_of_rows,
)

log = logging.getLogger(__name__)

SQL_DIR = Path(__file__).parent / "sql"
DEFAULT_SCHEMA = "agent_retrieval"
SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
MODEL_CACHE_SECONDS = 5.0
_SqlCall = tuple[str, dict[str, Any]]  # one call to make: a SQL function and its named arguments
SCHEMA_VERSION = 21  # of the SQL in stores/sql/; `db init` brings a store made by an earlier version up to it
# PostgREST cuts a function's rows at its db-max-rows (1000 on hosted Supabase) without a word, and the cap is
# the server's to choose. So no answer that may grow is sent as rows: each is one jsonb value, kept small by
# asking for a page of chunks at a time, or for the states and vectors of a batch of ids at a time.
PAGE_ROWS = 500
IDS_PER_CALL = 1000
HASHES_PER_CALL = 200  # a vector is kilobytes of text: fewer per answer

# The text keyword search indexes of a row `r` of each level (of a very long document, 500K characters).
INDEXED_TEXT = {
    "documents": "r.title || ' ' || left(r.content, 500000)",
    "chunks": "r.heading_path || ' ' || r.content",
}

# What differs between the two levels in the per-level SQL: the hit columns, their source, the document id,
# the indexed text.
_LEVEL_SQL = {
    "documents": {
        "columns": f"d.id, d.id, d.title, left(d.content, {DOCUMENT_PREVIEW_CHARS}), d.metadata, "
        "null::int, null::text, d.tenant_id",
        "from": "{{schema}}.documents d",
        "document_id": "d.id",
        "indexed_text": INDEXED_TEXT["documents"],
    },
    "chunks": {
        "columns": "d.id, d.document_id, p.title, d.content, d.metadata, d.ordinal, d.heading_path, "
        "d.tenant_id",
        "from": "({{schema}}.chunks d join {{schema}}.documents p "
        "on p.tenant_id = d.tenant_id and p.id = d.document_id)",
        "document_id": "d.document_id",
        "indexed_text": INDEXED_TEXT["chunks"],
    },
}


BUILD_DEPTH = Count(maximum=VECTOR_INDEX_BUILD_DEPTHS[1], minimum=VECTOR_INDEX_BUILD_DEPTHS[0])


def check_schema_name(schema: str) -> str:
    """Schema names go into SQL text, so only plain lower-case identifiers are allowed."""
    if not SCHEMA_NAME.match(schema):
        raise InvalidRequest(
            f"schema {schema!r} is not allowed: use lower-case letters, digits and '_', "
            "starting with a letter or '_', at most 63 characters"
        )
    return schema


def render_sql(schema: str = DEFAULT_SCHEMA, dimension: int = 384, build_depth: int | None = None) -> str:
    """All of the store's SQL for one schema and embedding dimension: run it with psql, or paste it into
    the Supabase SQL editor. Running it again changes nothing. Its HNSW indexes are built `build_depth`
    deep (ef_construction), an index of another depth again; None keeps an index's depth."""
    check_schema_name(schema)
    dimension = DIMENSION.check("dimension", dimension)
    if build_depth is not None:
        build_depth = BUILD_DEPTH.check("vector_index_build_depth", build_depth)
    parts = []
    for path in sorted(SQL_DIR.glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        if path.name.endswith(".per-level.sql"):
            parts += [
                _fill(text, _LEVEL_SQL[level] | {"level": level, "keyword_trust": _keyword_trust_sql(level)})
                for level in ("documents", "chunks")
            ]
        else:
            parts.append(text)
    values = {
        "schema": schema,
        "dimension": str(dimension),
        "schema_version": str(SCHEMA_VERSION),
        "build_depth": "null" if build_depth is None else str(build_depth),
    }
    values |= _fusion_defaults() | {
        "first_pass_rows": str(FIRST_PASS_ROWS),
        "scope_rows": str(MAX_SCOPE_ROWS),
        "filtered_head": str(MAX_FILTERED_HEAD),
        "first_pass_scored": str(FIRST_PASS_SCORED),
        "block": str(POSTINGS_BLOCK),
    }
    return "\n\n".join(_fill(part, values) for part in parts)


def _fusion_defaults() -> dict[str, str]:
    """The tools' fusion defaults, written into the SQL hybrid functions: an RPC caller who passes no
    fusion arguments ranks exactly as the tools do."""
    return {
        f"default_{name}": str(RunSettings.model_fields[name].default)
        for name in ("fusion", "rrf_k", "vector_weight", "keyword_weight", "candidates")
    }


def _keyword_trust_sql(level: Level) -> str:
    """fusion.keyword_trust in SQL, over the keyword rows `k` of hybrid_search (the query's words counted as
    keyword_terms_* counts them)."""
    full = FULL_KEYWORD_COVERAGE[level]
    if full is None:
        return "1"
    best = "(select k.keyword_coverage from k where k.rank = 1)"
    words = f"(select t.asked from {{{{schema}}}}.keyword_terms_{level}(query_text, tenant) t)"
    stands_out = (
        "(select count(*) >= 5 and stddev_pop(k.keyword_score) > 0 and max(k.keyword_score) - "
        f"avg(k.keyword_score) >= {STANDOUT} * stddev_pop(k.keyword_score) from k)"
    )
    return (  # the words are counted (keyword_terms_* again) only when the list stands out
        f"case when {stands_out} and {words} >= {MANY_WORDS} then 1 "
        f"else pg_catalog.power(least(1, coalesce({best}, {full}) / {full}), 2) end"
    )


def _fill(text: str, values: dict[str, str]) -> str:
    """Replace {{name}} placeholders; unknown names are left for a later pass."""
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values.get(m.group(1), m.group(0)), text)


# Keyword search's first pass (keyword_search_* in 002_search.per-level.sql) scores the rows of the rarest
# terms up to this many postings per result asked for. Measured at 100K chunks in postings blocks (keyword
# search, 40 rows, p50 / p95): 10 gave 69 / 195 ms, 40 71 / 193, 150 56 / 180, 500 81 / 242: a higher
# k-th score from the first pass leaves the second fewer rows.
FIRST_PASS_ROWS = 150
# Of those rows, it scores this many per result asked for over every term (the second pass scores the rest
# that can still reach its k-th score): probing the other terms for a few thousand rows was most of the
# first pass at 1M chunks.
FIRST_PASS_SCORED = 2

# Rows per block of the keyword postings (`*_postings`): 512 places of 8 bytes fit a page uncompressed, and
# at 10K chunks the postings took 26 MB against 32 MB in blocks of 256 and 114 MB as one row per posting.
POSTINGS_BLOCK = 512
# The most rows of a document list a client scores from the postings it keeps (a few hundred documents'
# chunks); a longer list's keyword search runs in SQL.
MAX_SCOPE_ROWS = 20_000
# The longest head of its unfiltered ranking a client has filtered (filter_rows_*): a filter keeping few
# rows of a long ranking runs in SQL, which reads the filter's own rows.
MAX_FILTERED_HEAD = 16_000
# Filters whose last share of a ranking's head a process keeps (a caller may send a new filter every call),
# and selective filters whose rows it keeps (each at most MAX_SCOPE_ROWS rowids, 160 KB).
FILTER_SHARES, FILTER_SCOPES = 1024, 16

# searches and keyword search's parts: at most 1000 rows (match_count), or a row a query word (32)
_SET_RETURNING = ("match_", "keyword_", "hybrid_search_")


def returns_rows(function: str) -> bool:
    """Whether a SQL function returns rows (a list of dicts) rather than one value."""
    return function.startswith(_SET_RETURNING)


@dataclass(frozen=True)
class Json:
    """An argument the SQL function takes as jsonb."""

    value: Any


def sqlstate_failure(code: str) -> Failure | None:
    """What a Postgres SQLSTATE says in the stores' vocabulary; both transports meet them (PostgREST passes
    the database's on)."""
    # Connection exceptions (class 08), and the server shutting down or starting up (57P01-03).
    if code.startswith("08") or code in ("57P01", "57P02", "57P03"):
        return Failure.UNREACHABLE
    if code in ("40001", "40P01"):  # serialization failure, deadlock detected
        return Failure.CONFLICT
    return None


@dataclass
class CallError(Exception):
    """A failed call, reduced to what both transports report: SQLSTATE (or the transport's own code),
    messages, and what failed in the stores' vocabulary (`failure`, None when it is none of those).

    `waited`: the transport already waited the failure out (a pool reconnecting all along), so a retry
    would only multiply the caller's wait."""

    code: str
    message: str
    detail: str | None = None
    hint: str | None = None
    failure: Failure | None = None
    waited: bool = False

    @property
    def transient(self) -> bool:
        return self.failure in TRANSIENT and not self.waited


class RPCStore(Store):
    """The Store contract over the SQL functions; subclasses say how a call reaches the database.

    `tenant` scopes every call (None: the caller's own scope, which on Supabase is the JWT's tenant
    and on a plain DSN is the whole store).
    """

    # What to do when the store cannot be reached; each backend says where to look.
    unreachable_advice = "check that it is running and reachable"
    publishes = True

    def __init__(
        self,
        *,
        schema: str = DEFAULT_SCHEMA,
        tenant: str | None = None,
        max_retries: int = 3,
        timeout: float = 30.0,
        cache_mb: int = STORE_CACHE_MB,
        process: ProcessState = PROCESS,
    ):
        self.schema = check_schema_name(schema)
        self._cache_bytes = cache_mb * 2**20  # the keyword postings the process keeps, all stores together
        self.process = process  # whose pools and clients this store uses (agent_retrieval.core.process)
        self.tenant = tenant or None
        self.max_retries = max_retries
        self.timeout = timeout
        self._model_cache: tuple[float, tuple[str, int] | None] | None = None
        self._stamps: dict[Level, str] = {}  # the corpus stamp this store's last keyword search read

    # --- transport ----------------------------------------------------------------------------------
    @abstractmethod
    def _send(self, function: str, params: dict[str, Any]) -> Any:
        """Call schema.function with named arguments: rows as dicts, or the scalar it returns.
        Raises CallError."""

    async def _asend(self, function: str, params: dict[str, Any]) -> Any:
        return await asyncio.to_thread(self._send, function, params)

    def _call(self, function: str, **params: Any) -> Any:
        return run(self._calling(function, params))

    async def _acall(self, function: str, **params: Any) -> Any:
        return await arun(self._calling(function, params))

    def _calling(self, function: str, params: dict[str, Any]) -> Steps[Any]:
        """One call, retried with backoff while the failure is transient, errors made readable."""
        attempt = 0
        while True:
            try:
                return (yield call(self._send, self._asend, function, params))
            except CallError as error:
                yield call(time.sleep, asyncio.sleep, self._retry_delay(function, error, attempt))
            attempt += 1

    def _retry_delay(self, function: str, error: CallError, attempt: int) -> float:
        """How long to wait before retrying a failed call; raises our error when it should not be retried.
        Every function is safe to repeat: reads change nothing and each write replaces what it wrote."""
        if not error.transient or attempt >= self.max_retries:
            raise self._readable(error, attempts=attempt + 1) from None
        delay = min(4.0, 0.2 * 2.0**attempt) * (0.5 + random.random() / 2)  # jitter spreads retrying clients
        log.info(
            "%s: transient failure (%s), retry %d of %d in %.2f s",
            function,
            error.code,
            attempt + 1,
            self.max_retries,
            delay,
        )
        return delay

    def _readable(self, error: CallError, attempts: int = 1) -> Exception:
        """Our error for a failed call: it says what happened and what to do, never the SQL or a secret."""
        # Drivers and servers may quote what they were given (a DSN, a header): every configured secret
        # is masked here, the one way out of both stores to users and models.
        error = replace(
            error,
            message=redact(error.message),
            detail=error.detail and redact(error.detail),
            hint=error.hint and redact(error.hint),
        )
        if error.failure is Failure.UNREACHABLE:
            tries = f" (tried {attempts} times)" if attempts > 1 else ""
            return StoreUnavailable(
                f"cannot reach the {self.backend} store at {self.location}: {error.message}"
                f"{tries}. {self.unreachable_advice}, then try again: the call is safe "
                "to repeat"
            )
        if error.failure is Failure.CONFLICT:
            return StoreError(
                f"the {self.backend} store gave up the call on a conflict with a concurrent write "
                f"({error.message}); try again: the call is safe to repeat"
            )
        if error.code == "timeout":
            return StoreError(
                f"the {self.backend} store did not answer within {self.timeout:g} s "
                "(request_timeout_seconds): the query is slow or waiting on a lock another session "
                "holds; narrow the search (filters, fewer candidates) or raise "
                "AGENT_RETRIEVAL_REQUEST_TIMEOUT_SECONDS"
            )
        if error.code == "AR001":
            info = json.loads(error.detail or "{}")
            return EmbeddingModelMismatch(
                info.get("stored") or "another model",
                info.get("dimension", 0),
                info.get("current") or "the configured embedder",
                info.get("got"),
            )
        if error.code == "AR002":
            return DimensionMismatch(f"{error.message}. {error.hint or ''}".strip())
        if error.code == "22023":
            return InvalidRequest(error.message)
        if error.code == "57014":
            return StoreError(
                f"the {self.backend} store cancelled the query at its statement timeout "
                f"({self._statement_timeout()}): the query is slow or waiting on a lock another "
                "session holds; narrow the search (filters, fewer candidates) or raise the timeout"
            )
        if error.code in ("42883", "3F000", "42P01", "PGRST202", "PGRST205"):
            return StoreError(
                f"the agent-retrieval SQL is not installed in schema {self.schema!r} (or is older "
                "than this version): run `agent-retrieval db init`"
            )
        if error.code == "42501":
            return StoreError(self._writes_refused)
        return StoreError(f"the {self.backend} store failed: {error.message} ({error.code})")

    @property
    def _writes_refused(self) -> str:
        return (
            f"permission denied by the {self.backend} store: writing needs the service role "
            "(or the table owner's DSN); users and anon may only search"
        )

    def _statement_timeout(self) -> str:
        """Where the statement timeout comes from, for the error that reports it."""
        return f"{self.timeout:g} s, request_timeout_seconds"

    # --- what the vectors are ------------------------------------------------------------------------
    def embedding_model(self) -> tuple[str, int] | None:
        # Every search asks (to skip vector search on a mismatch): a remote round trip each time would
        # cost more than the search, so the answer is reused for a few seconds.
        cached = self._model_cache
        if cached is None or time.monotonic() - cached[0] > MODEL_CACHE_SECONDS:
            info = self._call("get_store_info")
            model = (info["embedding_model"], int(info["dimension"])) if info.get("embedding_model") else None
            self._model_cache = cached = (time.monotonic(), model)
        return cached[1]

    def _set_embedding_model(self, model_id: str, dimension: int) -> None:
        self._model_cache = None
        self._call("set_embedding_model", model=model_id, dimension=dimension)

    # --- writing -------------------------------------------------------------------------------------
    def _upsert(self, documents: Sequence[Document], chunks: Sequence[Chunk], model_id: str) -> None:
        self._model_cache = None  # the first write records the model
        self._call(
            "upsert_documents",
            model=model_id,
            tenant=self.tenant,
            documents=Json([_row_json(d) for d in documents]),
            chunks=Json([_row_json(c) for c in chunks]),
        )

    def _delete_documents(self, ids: list[str]) -> int:
        return int(self._call("delete_documents", ids=ids, tenant=self.tenant) or 0)

    def _document_states(self, ids: list[str]) -> dict[str, DocumentState]:
        states: dict[str, DocumentState] = {}
        for batch in batches(ids, IDS_PER_CALL):
            for r in self._call("document_states", ids=batch, tenant=self.tenant):
                states[r["id"]] = DocumentState(r["content_hash"], r["embedded"], r["source"], r["public"])
        return states

    def _documents_from(self, source: str) -> list[str]:
        return list(self._call("documents_from", prefix=source, tenant=self.tenant))

    def _list_documents(self, prefix: str, limit: int) -> list[DocumentListing]:
        rows = self._call("list_documents", prefix=prefix, max_rows=limit, tenant=self.tenant)
        return [
            DocumentListing(r["id"], r["title"], r["source"], r["chunks"], r["updated"], r["public"])
            for r in rows
        ]

    def _get_documents(self, ids: list[str]) -> list[Document]:
        found: list[Document] = []
        for batch in batches(ids, IDS_PER_CALL):
            rows = self._call("get_documents", ids=batch, tenant=self.tenant)
            found += [Document(r["id"], r["title"], r["content"], r["metadata"], r["source"]) for r in rows]
        return found

    def _vectors_by_hash(self, text_hashes: list[str], model_id: str) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        for batch in batches(text_hashes, HASHES_PER_CALL):
            vectors = self._call("vectors_by_hash", hashes=batch, model=model_id, tenant=self.tenant)
            found.update({text_hash: _vector(vector) for text_hash, vector in vectors.items()})
        return found

    def _pending_embeddings(self, level: Level, model_id: str, limit: int) -> list[Any]:
        return pending_rows(
            level,
            self._call("pending_embeddings", level=level, model=model_id, max_rows=limit, tenant=self.tenant),
        )

    def _set_embeddings(self, level: Level, rows: Sequence[Any], model_id: str) -> None:
        payload = [
            {"id": r.id, "text_hash": r.text_hash, "embedding": _vector_json(r.embedding)} for r in rows
        ]
        self._call("set_embeddings", level=level, rows=Json(payload), model=model_id, tenant=self.tenant)

    # --- reading -------------------------------------------------------------------------------------
    # A search is worked out once as a _SqlCall (the function and its arguments) and sent by either path.
    def _scope(self, filters: dict[str, Any] | None, document_ids: list[str] | None) -> dict[str, Any]:
        # Numbers and their text forms match each other, as on every backend (the SQL does so too).
        expanded = {key: filter_values(value) for key, value in (filters or {}).items()}
        return {"filter": Json(expanded), "document_ids": document_ids, "tenant": self.tenant}

    def _vector_call(self, search: VectorSearch) -> _SqlCall:
        params = {
            "query_embedding": search.vector,
            "match_count": search.k,
            "min_similarity": search.min_similarity,
            **self._scope(search.filters, search.document_ids),
        }
        # A filter whose rows the keyword side listed: match_* scans them by their keys while the stamp
        # they were listed at is current (else it reads the filter), under row-level security too.
        stamp = self._stamps.get(search.level)
        if search.filters and stamp is not None:
            rows = self._filter_scopes.get(self._filter_key(search.level, stamp, search.filters))
            if isinstance(rows, np.ndarray):
                params |= {"filter_rows": rows.tolist(), "rows_stamp": stamp}
        return f"match_{search.level}", params

    def _keyword_call(self, search: KeywordSearch) -> _SqlCall:
        return f"keyword_search_{search.level}", {
            "query_text": search.query,
            "match_count": search.k,
            **self._scope(search.filters, search.document_ids),
        }

    def _vector_search(self, search: VectorSearch) -> list[Hit]:
        function, params = self._vector_call(search)
        return [_hit(search.level, r) for r in self._call(function, **params)]

    async def _avector_search(self, search: VectorSearch) -> list[Hit]:
        function, params = self._vector_call(search)
        return [_hit(search.level, r) for r in await self._acall(function, **params)]

    # --- keyword search, scored here ---------------------------------------------------------------
    def _keyword_search(self, search: KeywordSearch) -> list[Hit]:
        return run(self._scored_keyword_search(search))

    async def _akeyword_search(self, search: KeywordSearch) -> list[Hit]:
        return await arun(self._scored_keyword_search(search))

    def _scored_keyword_search(self, search: KeywordSearch) -> Steps[list[Hit]]:
        """BM25 scored here as the embedded store scores it (MaxScore over the words' postings in numpy):
        the process keeps each word's postings until a write the caller can read changes the corpus totals'
        stamp, where the SQL function reads a common word's postings again at every search. The same
        rankings; a document list too long to score here, or a filter keeping too few rows of the ranking's
        head, runs in SQL."""
        if self._scores_here(search):
            hits = yield from self._scored_here(search)
            if hits is not None:
                return hits
        # Also when a write came between the calls above, each of which reads its own snapshot: the SQL
        # function reads one.
        rows = yield from self._calling(*self._keyword_call(search))
        return [_hit(search.level, r) for r in rows]

    def _scores_here(self, search: KeywordSearch) -> bool:
        """Whether the store may score this search itself (PostgresStore: not inside an initial load)."""
        return True

    def _postings_scope(self, level: Level, stamp: str) -> Hashable:
        """Whose postings a search reads: the store, level and the rows the caller may read. The stamp
        names those (each scope's tenant is in it): row-level security decides them by the caller's token,
        so two callers share what they read only when they may read the same rows."""
        return (self.location, level, stamp)

    def _scored_here(self, search: KeywordSearch) -> Steps[list[Hit] | None]:
        """The keyword search from the words' postings (the whole level, a document list's rows, a filter's
        rows, or a filter's rows of the ranking's head), or None: a write changed what the caller can read
        between its calls, or the list or filter is for the SQL function."""
        level, tenant = search.level, self.tenant
        (words,) = yield from self._calling(
            f"keyword_terms_{level}", {"query_text": search.query, "tenant": tenant}
        )
        terms: list[str] = words["terms"] or []
        if not terms:
            return []
        stamp = self._stamps[level] = words["stamp"]
        kept = self._kept.of(self._postings_scope(level, stamp), stamp, self._cache_bytes)
        lists = {term: found for term in terms if (found := kept.get(term)) is not None}
        read = []
        if missing := [term for term in terms if term not in lists]:
            read = yield from self._calling(f"keyword_postings_{level}", {"terms": missing, "tenant": tenant})
        if any(row["stamp"] != stamp for row in read):
            return None
        within = None
        if search.document_ids is not None:  # the list's rows, scored from the same postings
            rows = yield from self._calling(
                f"scope_rows_{level}", {"document_ids": search.document_ids, "tenant": tenant}
            )
            if len(rows) > MAX_SCOPE_ROWS:
                return None
            within = np.asarray(rows, dtype=np.int64)
        # With a filter: the ranking's first `wanted` rows, filtered, are exact once k of them pass or the
        # ranking ends before `wanted` (every row below them scores lower); else a longer head, as long as
        # the share passing so far says k needs. Each row is asked about once. The share the same filter
        # passed last time sets the first head. A filter keeping fewer rows than that head (by its share) is
        # listed instead, and its rows kept until a write: its searches score them as a document list's.
        wanted = search.k
        filtering = {"filter": self._scope(search.filters, None)["filter"], "stamp": stamp, "tenant": tenant}
        shares, scopes = self._filter_shares, self._filter_scopes
        shared: Hashable = None  # the filter's key among the shares and scopes
        if search.filters:
            shared = self._filter_key(level, stamp, search.filters)
            last = shares.get(shared)
            wanted = _head(search.k, *last, at_least=4 * search.k) if last else 4 * search.k
        listed = False  # whether `within` holds the filter's own rows
        verdicts: dict[int, bool] = {}  # the rows filtered so far: whether each passed
        while True:
            if shared is not None and within is None:
                listing = scopes.get(shared)
                if listing is None and _worth_listing(words["rows"], shares.get(shared), wanted):
                    listing = yield from self._calling(f"filter_scope_rows_{level}", filtering)
                    if listing is None:  # a write since the ranking
                        return None
                    too_many = len(listing) > MAX_SCOPE_ROWS
                    listing = False if too_many else np.asarray(listing, dtype=np.int64)
                    scopes.put(shared, listing)
                if isinstance(listing, np.ndarray):
                    within, wanted, listed = listing, search.k, True
            if wanted > MAX_FILTERED_HEAD:  # too few pass for any head a client filters: the SQL function
                return None
            # numpy's work, off the event loop when async
            ids, scores, coverages = yield blocking(_ranked, words, kept, lists, read, wanted, within)
            read = []  # its postings are in `lists` now
            if not search.filters or listed:
                break
            unasked = [rowid for rowid in ids if rowid not in verdicts]
            passed = yield from self._calling(f"filter_rows_{level}", {"ids": unasked} | filtering)
            if passed is None:  # a write since the ranking
                return None
            verdicts |= dict.fromkeys(unasked, False) | dict.fromkeys(passed, True)
            passing = [rowid for rowid in ids if verdicts[rowid]]
            shares.put(shared, (len(passing), len(ids)))
            if len(passing) >= search.k or len(ids) < wanted:
                kept_rows = set(passing[: search.k])
                places = [n for n, rowid in enumerate(ids) if rowid in kept_rows]
                ids, scores, coverages = ([values[n] for n in places] for values in (ids, scores, coverages))
                break
            if wanted >= MAX_FILTERED_HEAD:
                return None
            wanted = min(_head(search.k, len(passing), len(ids), at_least=2 * wanted), MAX_FILTERED_HEAD)
        self._kept.trim(self._cache_bytes)
        unknown = words["asked"] - len(terms)
        rows = yield from self._calling(
            f"keyword_rows_{level}",
            {"ids": ids, "scores": scores, "coverages": coverages, "unknown": unknown}
            | {"stamp": stamp, "tenant": tenant},  # no rows if a write changed the stamp since
        )
        return [_hit(level, r) for r in rows] if len(rows) == len(ids) else None

    def _filter_key(self, level: Level, stamp: str, filters: dict[str, Any]) -> Hashable:
        """A filter among those the process remembers: whose rows, at which stamp (a DSN store's postings
        scope names none: it checks the stamp of the postings it keeps), and its values."""
        return (self._postings_scope(level, stamp), stamp, json.dumps(filters, sort_keys=True, default=str))

    @property
    def _filter_shares(self) -> Recent:
        """The last (passed, asked) of each filter over a ranking's head, per scope: a filter an agent repeats
        across its calls starts at the head it needs, one round to the database instead of two. A hint only
        (too few passing still goes deeper), forgotten at a write (its key names the stamp)."""
        return self.process.part("filter shares", lambda: Recent(FILTER_SHARES))

    @property
    def _filter_scopes(self) -> Recent:
        """The rows of each selective filter listed, per scope (False: too many to keep), until a write."""
        return self.process.part("filter scopes", lambda: Recent(FILTER_SCOPES))

    @property
    def _kept(self) -> KeptPostings:
        """The keyword postings the process keeps for its Postgres and Supabase stores (store_cache_mb)."""
        return self.process.part("postgres postings", KeptPostings)

    def _document_chunks(self, document_ids: list[str], limit: int) -> list[Hit]:
        return run(self._chunk_pages(document_ids, limit))

    async def _adocument_chunks(self, document_ids: list[str], limit: int) -> list[Hit]:
        return await arun(self._chunk_pages(document_ids, limit))

    def _chunk_pages(self, document_ids: list[str], limit: int) -> Steps[list[Hit]]:
        """`limit` chunks (or all there are), read a page at a time."""
        hits: list[Hit] = []
        after = None
        while len(hits) < limit:
            page = yield from self._calling(
                "document_chunks",
                {
                    "ids": document_ids,
                    "tenant": self.tenant,
                    "max_rows": min(PAGE_ROWS, limit - len(hits)),
                    "after": Json(after) if after else None,
                },
            )
            hits += [_hit("chunks", r) for r in page["rows"]]
            if (after := page["next"]) is None:
                break
        return hits

    def _neighbors_call(self, windows: list[ChunkWindow], reach: int) -> _SqlCall:
        rows = [{"tenant_id": tenant, "document_id": doc, "ordinal": n} for tenant, doc, n in windows]
        return "chunk_neighbors", {"windows": Json(rows), "reach": reach, "tenant": self.tenant}

    def _chunk_neighbors(self, windows: list[ChunkWindow], reach: int) -> list[Hit]:
        function, params = self._neighbors_call(windows, reach)
        return [_hit("chunks", r) for r in self._call(function, **params)]

    async def _achunk_neighbors(self, windows: list[ChunkWindow], reach: int) -> list[Hit]:
        function, params = self._neighbors_call(windows, reach)
        return [_hit("chunks", r) for r in await self._acall(function, **params)]

    def _unknown_documents(self, ids: list[str]) -> list[str]:
        return [str(i) for i in self._call("unknown_documents", ids=ids, tenant=self.tenant)]

    async def _aunknown_documents(self, ids: list[str]) -> list[str]:
        return [str(i) for i in await self._acall("unknown_documents", ids=ids, tenant=self.tenant)]

    def _metadata_counts(self, max_values: int) -> list[MetadataCount]:
        rows = self._call(
            "metadata_counts", max_chars=FACET_VALUE_CHARS, max_values=max_values, tenant=self.tenant
        )
        return [(key, value, n, key_n) for key, value, n, key_n in rows]

    async def _ametadata_counts(self, max_values: int) -> list[MetadataCount]:
        rows = await self._acall(
            "metadata_counts", max_chars=FACET_VALUE_CHARS, max_values=max_values, tenant=self.tenant
        )
        return [(key, value, n, key_n) for key, value, n, key_n in rows]

    def stats(self) -> StoreStats:
        data = self._call("store_stats", tenant=self.tenant)
        return StoreStats(backend=self.backend, location=self.location, **data)

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the store is, for `stats` (never with a password)."""


def _vector(value: Any) -> np.ndarray:
    """A vector as either transport returns it: the pgvector adapter's Vector, or PostgREST's "[...]" text."""
    if isinstance(value, str):
        value = json.loads(value)
    elif hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)


def _vector_json(vector: Any) -> list[float] | None:
    # Seven decimals keep float32 precision for unit vectors at half the text of a full repr.
    return None if vector is None else np.round(np.asarray(vector, dtype=np.float64), 7).tolist()


def _row_json(row: Document | Chunk) -> dict[str, Any]:
    """A document or chunk as upsert_documents takes it: every field, the vector as a list of numbers."""
    return {f.name: getattr(row, f.name) for f in fields(row)} | {"embedding": _vector_json(row.embedding)}


def _hit(level: Level, row: dict[str, Any]) -> Hit:
    return Hit(
        id=row["id"],
        level=level,
        document_id=row["document_id"],
        title=row["title"],
        content=row["content"],
        metadata=row["metadata"] or {},
        ordinal=row.get("ordinal"),
        heading_path=row.get("heading_path"),
        vector_similarity=row.get("vector_similarity"),
        keyword_score=row.get("keyword_score"),
        keyword_coverage=row.get("keyword_coverage"),
        unknown_terms=row.get("unknown_terms"),
        tenant=row.get("tenant_id") or "",
    )


# The elements of an array's binary form (array_send): each value after its length in 4 bytes, big-endian.
_SMALLINTS = np.dtype([("size", ">i4"), ("value", ">i2")])
_INTEGERS = np.dtype([("size", ">i4"), ("value", ">i4")])


def _ranked(
    words: dict[str, Any],
    kept: PostingsCache,
    lists: dict[str, Postings],
    read: list[dict[str, Any]],
    k: int,
    within: np.ndarray | None = None,
) -> tuple[list[int], list[float], list[float]]:
    """The k best rows for the query's `words` (a keyword_terms_* row) from their postings (`lists`, as
    kept, and those `read` by keyword_postings_*, kept now), of the whole level or of the rows `within`:
    their rowids, scores and coverage of the query's idf, best first (ties to the older row)."""
    idfs = dict(zip(words["terms"], words["idfs"], strict=True))
    for row in read:
        lists[row["term"]] = found = _postings(row, idfs[row["term"]], words["average_length"])
        kept.put(row["term"], found)
    if within is None:
        best = best_of_postings(list(lists.values()), k)
    else:  # every row of a document list or of a listed filter, scored
        best = best_of_rows(list(lists.values()), within, k)
    ids = np.array([rowid for rowid, _ in best], dtype=np.int64)
    held = np.zeros(len(ids))
    for term, postings in lists.items():  # every part is above zero
        held += np.where(postings.parts_of(ids) > 0, idfs[term], 0.0)
    return ids.tolist(), [score for _, score in best], (held / sum(idfs.values())).tolist()


def _head(k: int, passed: int, asked: int, *, at_least: int) -> int:
    """How much of a ranking to filter for k rows to pass at the share seen (`passed` of `asked`), with room
    for chance (a quarter more and ten rows: a small k's count varies most), and at least `at_least`."""
    return max(at_least, math.ceil((1.25 * k + 10) * asked / max(passed, 1)))


def _worth_listing(rows: float, share: tuple[int, int] | None, wanted: int) -> bool:
    """Whether a filter that passed `share` (passed, asked) of a ranking's head keeps fewer of the level's
    `rows` than the `wanted` head it would filter, and few enough for a client to keep."""
    if share is None:
        return False
    passed, asked = share
    return rows * passed / max(asked, 1) <= min(wanted, MAX_SCOPE_ROWS)


class Recent:
    """The values of the last `maxsize` keys used, safe across threads: what a process remembers of the
    filters callers send, who may send a new one every call."""

    def __init__(self, maxsize: int) -> None:
        self._lock = threading.Lock()
        self._values: LRUCache[Hashable, Any] = LRUCache(maxsize=maxsize)

    def get(self, key: Hashable) -> Any:
        with self._lock:
            return self._values.get(key)

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._values[key] = value


def _postings(row: dict[str, Any], idf: float, average_length: float) -> Postings:
    """A word's postings from a keyword_postings_* row: its rowids, ascending, and its part of each row's
    score by bm25_part's float64 operations, in the same order."""
    places = np.frombuffer(_bytes(row["places"]), dtype=_SMALLINTS)["value"]
    rowids = np.repeat(np.asarray(row["blocks"], dtype=np.int64) * POSTINGS_BLOCK, row["sizes"]) + places
    tf = np.frombuffer(_bytes(row["tfs"]), dtype=_SMALLINTS)["value"].astype(np.float64)
    length = np.frombuffer(_bytes(row["lengths"]), dtype=_INTEGERS)["value"].astype(np.float64)
    scores = idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / max(average_length, 1.0)))
    if len(rowids) > 1 and bool(np.any(rowids[1:] < rowids[:-1])):  # places in writing order, or scopes apart
        order = np.argsort(rowids, kind="stable")
        rowids, scores = rowids[order], scores[order]
    return Postings(rowids, scores)


def _bytes(value: bytes | str) -> bytes:
    """A bytea as psycopg gives it in binary, or as PostgREST's JSON writes it (hex text after "\\x")."""
    return value if isinstance(value, bytes) else bytes.fromhex(value[2:])
