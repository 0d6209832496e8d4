"""The search path both tools share: validate -> query vector (hyde.py) beside keyword search -> fuse.

Keyword search always runs on the user's original words, concurrently with the query vector (which
may wait on a HyDE call). A path that cannot run degrades the result instead of failing it, and
`RetrievalResult.degraded` says why.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from langchain_core.documents import BaseDocumentCompressor
from langchain_core.language_models import BaseChatModel

from agent_retrieval import hyde
from agent_retrieval.confidence import confidence
from agent_retrieval.context import Context
from agent_retrieval.errors import EmbeddingModelMismatch, InvalidRequest, StoreError
from agent_retrieval.fusion import PROFILES, fuse
from agent_retrieval.models import Hit, Level, RetrievalResult, SearchRequest
from agent_retrieval.process import PROCESS, ProcessState
from agent_retrieval.providers.embeddings import Embedder, make_embedder
from agent_retrieval.search.documents import each_at_best, most_similar
from agent_retrieval.search.passages import widened
from agent_retrieval.search.rerank import make_reranker
from agent_retrieval.search.rerank import rerank as rerank_hits
from agent_retrieval.search.resources import SearchResources, shared_resources
from agent_retrieval.steps import Outcome, Steps, Together, arun, blocking, call, run, single
from agent_retrieval.stores import Store, open_store
from agent_retrieval.text import entity_terms

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
    passed in instead, which is how tests and notebooks share them. `resources` (the sync search
    threads and the HyDE cache) default to the shared instance for the Context's sizes; whoever makes
    SearchResources closes them. `process` owns what is shared between calls (agent_retrieval.process):
    the process's own by default, or a ProcessState of the caller's, released by its `close()`.
    Thread-safe; use `close()` or a `with` block to release the store.
    """

    def __init__(
        self,
        context: Context | None = None,
        *,
        store: Store | None = None,
        embedder: Embedder | None = None,
        llm: BaseChatModel | None = None,
        resources: SearchResources | None = None,
        min_similarity: float | None = None,
        reranker: BaseDocumentCompressor | None = None,
        process: ProcessState = PROCESS,
    ):
        self.context = context or Context.from_env()
        self.process = process  # whose threads, caches, pools and models this uses (agent_retrieval.process)
        # The vector side's similarity floor; None: by query type (fusion.PROFILES). A LangChain vector store
        # promises the k nearest whatever their similarity, so it sets -1.
        self.min_similarity = min_similarity
        self.resources = resources or shared_resources(self.context, process)
        self._store, self._embedder, self._llm, self._reranker = store, embedder, llm, reranker
        self._owns_store = store is None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Retrieval(db_path={self.context.db_path!r})"

    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                self._store = open_store(self.context, process=self.process)
            return self._store

    @property
    def embedder(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                self._embedder = make_embedder(self.context, process=self.process)
            return self._embedder

    @property
    def llm(self) -> BaseChatModel | None:
        with self._lock:
            if self._llm is None:
                self._llm = hyde.hyde_chat_model(self.context)
            return self._llm

    @property
    def reranker(self) -> BaseDocumentCompressor | None:
        """The rerank stage's model: the one passed in, else the operator's `reranker` setting (or None)."""
        with self._lock:
            if self._reranker is None:
                self._reranker = make_reranker(self.context)
            return self._reranker

    def close(self) -> None:
        if self._owns_store and self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> Retrieval:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- searching --------------------------------------------------------------------------------
    def search(self, request: SearchRequest, level: Level, *, rerank: bool = True) -> RetrievalResult:
        """Run one validated request at `level` ("documents" or "chunks"); `rerank=False` skips the rerank
        stage (searches that only gather candidates)."""
        return run(self._search(request, level, rerank))

    async def asearch(self, request: SearchRequest, level: Level, *, rerank: bool = True) -> RetrievalResult:
        """Async `search`: the event loop is never blocked (SQLite runs in worker threads)."""
        return await arun(self._search(request, level, rerank))

    def candidates(self, request: SearchRequest, level: Level) -> Candidates:
        """Each path's ranked list before fusion (`context.candidates` deep): what `search` fuses.

        Evaluation fetches them once per query and ranks them under several fusion settings.
        """
        return run(self._candidates(request, level, self.store))

    # --- the pieces, each written once for both faces (steps.py) -----------------------------------
    def _search(self, request: SearchRequest, level: Level, rerank: bool) -> Steps[RetrievalResult]:
        result = yield from self._ranked(request, level, rerank)
        reach = getattr(request, "neighbors", 0)  # a chunk_retriever argument
        if not reach or request.summarizes:
            return result
        return replace(result, hits=(yield from self._widened(result.hits, reach)))

    def neighbors(self, hits: list[Hit], reach: int) -> list[Hit]:
        """`hits` with the chunks within `reach` places around each chunk hit, as passages (passages.py)."""
        return run(self._widened(hits, reach))

    async def aneighbors(self, hits: list[Hit], reach: int) -> list[Hit]:
        return await arun(self._widened(hits, reach))

    def _widened(self, hits: list[Hit], reach: int) -> Steps[list[Hit]]:
        store = yield blocking(lambda: self.store)
        chunks = [hit for hit in hits if hit.level == "chunks"]
        around = yield call(store.chunk_neighbors, store.achunk_neighbors, chunks, reach)
        return widened(hits, around, reach, self.context.chunk_overlap)

    def _ranked(self, request: SearchRequest, level: Level, rerank: bool) -> Steps[RetrievalResult]:
        store = yield blocking(lambda: self.store)  # opening the store reads files: off the event loop
        scope = _scope(request)
        if scope:
            _check_scope((yield call(store.unknown_documents, store.aunknown_documents, scope)))
        if request.summarizes:
            limit = self.context.summarize_max_chunks
            hits = yield call(store.document_chunks, store.adocument_chunks, scope, limit + 1)
            return _summary(request, hits, limit)
        candidates = yield from self._candidates(request, level, store)
        reranker = (
            (yield blocking(lambda: self.reranker)) if rerank and self.context.rerank_candidates else None
        )
        if reranker is None:
            return self.rank(request, level, candidates)
        depth = max(request.top_k, self.context.rerank_candidates)
        result = self.rank(request, level, candidates, depth=depth)
        if len(result.hits) < 2:
            return result
        hits, failure = yield from rerank_hits(reranker, request.query, result.hits, self.context)
        return replace(
            result,
            hits=hits[: request.top_k],
            rerank="failed" if failure else "used",
            degraded=result.degraded + ([failure] if failure else []),
        )

    def _candidates(self, request: SearchRequest, level: Level, store: Store) -> Steps[Candidates]:
        """Keyword search and the vector side at once, settled at the tool's deadline. Documents are also
        searched by their passages, each at its best (search/documents.py)."""
        keyword = call(
            store.keyword_search,
            store.akeyword_search,
            "chunks",
            request.query,
            self.context.candidates,
            filters=request.filters,
            document_ids=_scope(request),
        )
        keyword_outcome, vector_outcome = yield Together(
            [single(keyword), self._vector_side(request, level)],
            self.context.tool_timeout_seconds,
            self.resources.search_pool,
        )
        candidates = self._settle(keyword_outcome, vector_outcome)
        if level == "chunks":
            return candidates
        return replace(candidates, keyword_hits=each_at_best(candidates.keyword_hits))

    def _vector_side(self, request: SearchRequest, level: Level) -> Steps[_VectorSide]:
        """The query vector (hyde.py) and vector search; a failure degrades to no vector hits."""
        # Building the embedder or chat model reads files: off the event loop.
        degraded, hyde_arguments = yield blocking(
            lambda: (self._model_mismatch(), self._hyde_arguments(request))
        )
        query_embedding = None
        if not degraded:
            query_embedding = yield call(
                hyde.get_query_embedding_for_retrieval,
                hyde.aget_query_embedding_for_retrieval,
                request.query,
                self.context,
                resources=self.resources,
                **hyde_arguments,
            )
        hits: list[Hit] = []
        vector = self._usable_vector(query_embedding, degraded)
        if vector is not None:
            store = self.store
            try:
                arguments = self._vector_arguments(request)
                hits = yield call(store.vector_search, store.avector_search, "chunks", vector, **arguments)
                if level == "documents":
                    documents = yield call(
                        store.vector_search, store.avector_search, level, vector, **arguments
                    )
                    hits = most_similar(documents, hits)
            except EmbeddingModelMismatch as error:
                degraded.append(f"vector search skipped: {error}")
        return query_embedding, hits, degraded

    def _settle(self, keyword: Outcome[list[Hit]], vector: Outcome[_VectorSide]) -> Candidates:
        """Candidates from the two paths at the deadline: a path still running is dropped and the result
        says so; the call fails only when neither path finished."""
        deadline = f"tool_timeout_seconds={self.context.tool_timeout_seconds:g}"
        if not keyword.finished and not vector.finished:
            raise StoreError(
                f"neither keyword nor vector search finished within {deadline}; check that the "
                "store and the embedding provider are reachable, or raise tool_timeout_seconds"
            )
        query_embedding: hyde.QueryEmbedding | None = None
        vector_hits: list[Hit] = []
        degraded: list[str] = []
        if vector.finished:
            query_embedding, vector_hits, degraded = vector.result()
        else:
            degraded.append(
                f"vector search skipped: the query vector or vector search did not finish within "
                f"{deadline}; results are keyword-only"
            )
        if keyword.finished:
            keyword_hits = keyword.result()
        else:
            keyword_hits = []
            degraded.append(
                f"keyword search skipped: it did not finish within {deadline}; results are vector-only"
            )
        return Candidates(vector_hits, keyword_hits, query_embedding, degraded)

    def _hyde_arguments(self, request: SearchRequest) -> dict[str, Any]:
        """How hyde.py should make the vector; the chat model is built only when HyDE may run."""
        wants_llm = hyde.may_call_llm(self.context, request.hyde, request.input_schema, request.output_schema)
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
            "min_similarity": (
                PROFILES[request.query_type].min_similarity
                if self.min_similarity is None
                else self.min_similarity
            ),
        }

    def _model_mismatch(self) -> list[str]:
        """A degradation note if the store's vectors come from another model (then only keywords run)."""
        mismatch = self.store.model_mismatch(self.embedder.model_id)
        return [f"vector search skipped: {mismatch}"] if mismatch else []

    @staticmethod
    def _usable_vector(query_embedding: hyde.QueryEmbedding | None, degraded: list[str]) -> np.ndarray | None:
        """The vector to search with, or None: no vector made, or (noted in `degraded`) embedding failed."""
        if query_embedding is None:
            return None
        if query_embedding.vector is None:
            degraded.append(
                "vector search skipped: the query could not be embedded "
                f"({query_embedding.reason}); results are keyword-only"
            )
        return query_embedding.vector

    def rank(
        self,
        request: SearchRequest,
        level: Level,
        candidates: Candidates,
        *,
        context: Context | None = None,
        depth: int | None = None,
    ) -> RetrievalResult:
        """Fuse candidates into the result, by this Retrieval's fusion settings or another context's; the
        best `depth` hits (default: the request's top_k)."""
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
            limit=depth or request.top_k,
        )
        query_embedding = candidates.query_embedding
        return RetrievalResult(
            query=request.query,
            level=level,
            hits=fused,
            query_type=request.query_type,
            hyde=query_embedding.hyde if query_embedding else "off",
            hyde_cached=bool(query_embedding and query_embedding.cached),
            hyde_reason=query_embedding.reason if query_embedding else "vector search did not run",
            degraded=list(candidates.degraded),
            fusion=context.fusion,
            confidence=(
                confidence(candidates.vector_hits, candidates.keyword_hits, self._embedder.model_id)
                if query_embedding is not None and self._embedder is not None
                else None
            ),
        )


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
