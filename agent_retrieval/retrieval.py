"""The search path both tools share: validate -> query vector (hyde.py) beside keyword search -> fuse -> result.

Keyword search always runs on the user's original words, concurrently with the query vector (which
may wait on a HyDE call). A path that cannot run degrades the result instead of failing it, and
`RetrievalResult.degraded` says why.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel

from agent_retrieval import hyde
from agent_retrieval.context import Context
from agent_retrieval.embeddings import Embedder, make_embedder
from agent_retrieval.errors import EmbeddingModelMismatch, InvalidRequest, StoreError
from agent_retrieval.fusion import PROFILES, fuse
from agent_retrieval.models import Hit, Level, RetrievalResult, SearchRequest
from agent_retrieval.stores import Store, open_store
from agent_retrieval.text import entity_terms

# Both paths of a sync search run here, so the caller can stop waiting at the tool's deadline.
_search_pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="agent-retrieval-search")
_VectorSide = tuple[hyde.QueryEmbedding | None, list[Hit], list[str]]  # query vector, hits, notes


@dataclass(frozen=True)
class Candidates:
    """Each path's ranked hits for one request, before fusion, and how the query vector was made."""

    vector_hits: list[Hit]
    keyword_hits: list[Hit]
    query_embedding: hyde.QueryEmbedding | None
    degraded: list[str]


class Retrieval:
    """Hybrid retrieval over one store, configured by a Context.

    The store, embedder and chat model are made on first use (never at construction) and may be
    passed in instead, which is how tests and notebooks share them. Thread-safe; use `close()` or
    a `with` block to release the store.
    """

    def __init__(
        self,
        context: Context | None = None,
        *,
        store: Store | None = None,
        embedder: Embedder | None = None,
        llm: BaseChatModel | None = None,
    ):
        self.context = context or Context()
        self._store, self._embedder, self._llm = store, embedder, llm
        self._owns_store = store is None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Retrieval(db_path={self.context.db_path!r})"

    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                self._store = open_store(self.context)
            return self._store

    @property
    def embedder(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                self._embedder = make_embedder(self.context)
            return self._embedder

    @property
    def llm(self) -> BaseChatModel | None:
        with self._lock:
            if self._llm is None:
                self._llm = hyde.hyde_chat_model(self.context)
            return self._llm

    def close(self) -> None:
        if self._owns_store and self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> Retrieval:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- searching --------------------------------------------------------------------------------
    def search(self, request: SearchRequest, level: Level) -> RetrievalResult:
        """Run one validated request at `level` ("documents" or "chunks")."""
        store, scope = self.store, _scope(request)
        _check_scope(store.unknown_documents(scope) if scope else [])
        if request.query_type == "summarize":
            return _summary(
                request,
                store.document_chunks(scope, self.context.summarize_max_chunks + 1),
                self.context.summarize_max_chunks,
            )
        return self.rank(request, level, self.candidates(request, level))

    def candidates(self, request: SearchRequest, level: Level) -> Candidates:
        """Each path's ranked list before fusion (`context.candidates` deep): what `search` fuses.

        Evaluation fetches them once per query and ranks them under several fusion settings.
        """
        keyword = _submit(
            self.store.keyword_search,
            level,
            request.query,
            self.context.candidates,
            filters=request.filters,
            document_ids=_scope(request),
        )
        vector = _submit(self._vector_side, request, level)
        futures.wait([keyword, vector], timeout=self.context.tool_timeout_seconds)
        return self._settle(keyword, vector)

    async def asearch(self, request: SearchRequest, level: Level) -> RetrievalResult:
        """Async `search`: the event loop is never blocked (SQLite runs in worker threads)."""
        store = await asyncio.to_thread(lambda: self.store)  # opening the store reads files: off the loop
        scope = _scope(request)
        _check_scope(await store.aunknown_documents(scope) if scope else [])
        if request.query_type == "summarize":
            hits = await store.adocument_chunks(scope, self.context.summarize_max_chunks + 1)
            return _summary(request, hits, self.context.summarize_max_chunks)
        keyword = asyncio.ensure_future(
            store.akeyword_search(
                level, request.query, self.context.candidates, filters=request.filters, document_ids=scope
            )
        )
        vector = asyncio.ensure_future(self._avector_side(request, level))
        try:
            await asyncio.wait([keyword, vector], timeout=self.context.tool_timeout_seconds)
            candidates = self._settle(keyword, vector)
        finally:
            keyword.cancel()
            vector.cancel()
        return self.rank(request, level, candidates)

    # --- the pieces -------------------------------------------------------------------------------
    def _vector_side(self, request: SearchRequest, level: Level) -> _VectorSide:
        """The query vector (hyde.py) and vector search; a failure degrades to no vector hits."""
        degraded = self._model_mismatch()
        query_embedding = (
            None
            if degraded
            else hyde.get_query_embedding_for_retrieval(
                request.query, self.context, **self._hyde_arguments(request)
            )
        )
        hits: list[Hit] = []
        if self._vector_ready(query_embedding, degraded):
            try:
                hits = self.store.vector_search(
                    level, query_embedding.vector, **self._vector_arguments(request)
                )
            except EmbeddingModelMismatch as error:
                degraded.append(f"vector search skipped: {error}")
        return query_embedding, hits, degraded

    async def _avector_side(self, request: SearchRequest, level: Level) -> _VectorSide:
        # Building the embedder or chat model reads files: off the event loop.
        degraded, hyde_arguments = await asyncio.to_thread(
            lambda: (self._model_mismatch(), self._hyde_arguments(request))
        )
        query_embedding = (
            None
            if degraded
            else await hyde.aget_query_embedding_for_retrieval(request.query, self.context, **hyde_arguments)
        )
        hits: list[Hit] = []
        if self._vector_ready(query_embedding, degraded):
            try:
                hits = await self.store.avector_search(
                    level, query_embedding.vector, **self._vector_arguments(request)
                )
            except EmbeddingModelMismatch as error:
                degraded.append(f"vector search skipped: {error}")
        return query_embedding, hits, degraded

    def _settle(self, keyword: Any, vector: Any) -> Candidates:
        """Candidates from the two paths (futures or tasks) at the deadline: a path still running is
        dropped and the result says so; the call fails only when neither path finished."""
        deadline = f"tool_timeout_seconds={self.context.tool_timeout_seconds:g}"
        if not keyword.done() and not vector.done():
            raise StoreError(
                f"neither keyword nor vector search finished within {deadline}; check that the "
                "store and the embedding provider are reachable, or raise tool_timeout_seconds"
            )
        query_embedding, vector_hits, degraded = None, [], []
        if vector.done():
            query_embedding, vector_hits, degraded = vector.result()
        else:
            degraded.append(
                f"vector search skipped: the query vector or vector search did not finish within "
                f"{deadline}; results are keyword-only"
            )
        if keyword.done():
            keyword_hits = keyword.result()
        else:
            keyword_hits = []
            degraded.append(
                f"keyword search skipped: it did not finish within {deadline}; results are vector-only"
            )
        return Candidates(vector_hits, keyword_hits, query_embedding, degraded)

    def _hyde_arguments(self, request: SearchRequest) -> dict[str, Any]:
        """How hyde.py should make the vector; the chat model is built only when HyDE may run."""
        schemas = request.input_schema or request.output_schema
        wants_llm = (
            request.hyde in ("passages", "schema")
            or schemas
            or (request.hyde == "auto" and self.context.use_hyde)
        )
        return {
            "embedder": self.embedder,
            "llm": self.llm if wants_llm else None,
            "mode": request.hyde,
            "input_schema": request.input_schema,
            "output_schema": request.output_schema,
        }

    def _vector_arguments(self, request: SearchRequest) -> dict[str, Any]:
        return {
            "k": self.context.candidates,
            "filters": request.filters,
            "document_ids": _scope(request),
            "min_similarity": PROFILES[request.query_type].min_similarity,
        }

    def _model_mismatch(self) -> list[str]:
        """A degradation note if the store's vectors come from another model (then only keywords run)."""
        mismatch = self.store.model_mismatch(self.embedder.model_id)
        return [f"vector search skipped: {mismatch}"] if mismatch else []

    @staticmethod
    def _vector_ready(query_embedding: hyde.QueryEmbedding | None, degraded: list[str]) -> bool:
        if query_embedding is not None and query_embedding.vector is None:
            degraded.append(
                "vector search skipped: the query could not be embedded "
                f"({query_embedding.reason}); results are keyword-only"
            )
        return query_embedding is not None and query_embedding.vector is not None

    def rank(
        self, request: SearchRequest, level: Level, candidates: Candidates, *, context: Context | None = None
    ) -> RetrievalResult:
        """Fuse candidates into the result, by this Retrieval's fusion settings or another context's."""
        context = context or self.context
        profile = PROFILES[request.query_type]
        fused = fuse(
            candidates.vector_hits,
            candidates.keyword_hits,
            mode=context.fusion,
            vector_weight=context.vector_weight * profile.vector_weight,
            keyword_weight=context.keyword_weight * profile.keyword_weight,
            k=context.rrf_k,
            entities=entity_terms(request.query),
            boost=context.entity_boost,
        )
        query_embedding = candidates.query_embedding
        return RetrievalResult(
            query=request.query,
            level=level,
            hits=fused[: request.top_k],
            query_type=request.query_type,
            hyde=query_embedding.hyde if query_embedding else "off",
            hyde_cached=bool(query_embedding and query_embedding.cached),
            hyde_reason=query_embedding.reason if query_embedding else "vector search did not run",
            degraded=list(candidates.degraded),
            fusion=context.fusion,
        )


def _submit(function: Any, *args: Any, **kwargs: Any) -> futures.Future:
    """Run in the search pool with the caller's context variables (LangChain callbacks, tracing)."""
    return _search_pool.submit(contextvars.copy_context().run, function, *args, **kwargs)


def _check_scope(unknown: list[str]) -> None:
    if unknown:
        shown = ", ".join(repr(i) for i in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise InvalidRequest(
            f"document_ids: {len(unknown)} unknown id(s): {shown}; use ids returned by document_retriever"
        )


def _scope(request: SearchRequest) -> list[str] | None:
    return getattr(request, "document_ids", None)


def _summary(request: SearchRequest, hits: list[Hit], limit: int) -> RetrievalResult:
    return RetrievalResult(
        query=request.query,
        level="chunks",
        hits=hits[:limit],
        query_type="summarize",
        hyde="off",
        hyde_reason="summarize returns chunks in order and embeds nothing",
        truncated=len(hits) > limit,
    )
