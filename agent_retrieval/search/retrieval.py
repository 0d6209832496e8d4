"""The search path both tools share: validate -> query vector (hyde.py) beside keyword search -> fuse.

Keyword search always runs on the user's original words, concurrently with the query vector (which
may wait on a HyDE call). A path that cannot run degrades the result instead of failing it, and
`RetrievalResult.degraded` says why.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import BaseDocumentCompressor
from langchain_core.language_models import BaseChatModel

from agent_retrieval import hyde
from agent_retrieval.context import Context
from agent_retrieval.core.fusion import PROFILES, fuse
from agent_retrieval.core.process import PROCESS, ProcessState
from agent_retrieval.core.steps import Outcome, Steps, Together, arun, blocking, call, run, single
from agent_retrieval.core.text import entity_terms, keyword_terms
from agent_retrieval.errors import EmbeddingModelMismatch, InvalidRequest, StoreError
from agent_retrieval.ingest import IngestReport, ingest
from agent_retrieval.ingest.sync import sync_paths
from agent_retrieval.models import Document, Hit, Level, RetrievalResult, SearchRequest
from agent_retrieval.providers.embeddings import Embedder, make_embedder
from agent_retrieval.search.confidence import confidence
from agent_retrieval.search.documents import each_at_best, most_similar
from agent_retrieval.search.passages import widened
from agent_retrieval.search.rerank import make_reranker
from agent_retrieval.search.rerank import rerank as rerank_hits
from agent_retrieval.search.resources import SearchResources, shared_resources
from agent_retrieval.stores import Store, open_store

_VectorSide = tuple[hyde.QueryEmbedding | None, list[Hit], list[str]]  # query vector, hits, notes


@dataclass(frozen=True)
class Candidates:
    """Each path's ranked hits for one request, before fusion, and how the query vector was made."""

    vector_hits: list[Hit]
    keyword_hits: list[Hit]
    query_embedding: hyde.QueryEmbedding | None
    degraded: list[str]


class Retrieval:
    """Hybrid retrieval over one store, configured by a Context: the one way in.

    `Retrieval.from_env(**overrides)` takes the operator's settings from the environment (as the CLI, the
    graphs and the MCP server do); `Retrieval(context)` uses exactly the Context given, and `Retrieval()` the
    defaults (the embedded store, the local embedder, no chat model), never the environment. The tools, the
    vector store, the retriever and `ingest` all take a Retrieval.

    The store, embedder and chat model are made on first use (never at construction) and may be
    passed in instead, which is how tests and notebooks share them. `resources` (the sync search
    threads and the HyDE cache) default to the shared instance for the Context's sizes; whoever makes
    SearchResources closes them. `process` owns what is shared between calls (agent_retrieval.core.process):
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
        self.context = context or Context()
        # whose threads, caches, pools and models this uses (agent_retrieval.core.process)
        self.process = process
        # The vector side's similarity floor; None: by query type (fusion.PROFILES). A LangChain vector store
        # promises the k nearest whatever their similarity, so it sets -1.
        self.min_similarity = min_similarity
        self.resources = resources or shared_resources(self.context.resources, process)
        self._store, self._embedder, self._llm, self._reranker = store, embedder, llm, reranker
        self._owns_store = store is None
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, **overrides: Any) -> Retrieval:
        """The operator's configuration: each setting not given here is read from its environment variable
        (`Context.from_env`), which a Retrieval made any other way never reads."""
        return cls(Context.from_env(**overrides))

    def __repr__(self) -> str:
        return f"Retrieval(db_path={self.context.store.db_path!r})"

    def ingest_documents(
        self, documents: Iterable[Document], *, progress: bool = False, public: bool = False
    ) -> IngestReport:
        """Write documents and their chunks into this store, embedding only texts whose vectors it does not
        hold yet (`agent_retrieval.ingest.ingest` with this Retrieval's store, embedder and settings);
        `public` publishes them to every tenant (Postgres and Supabase: the operator's act)."""
        return ingest(documents, self.store, self.embedder, self.context, progress=progress, public=public)

    def ingest(
        self,
        paths: Iterable[str | Path],
        *,
        progress: bool = False,
        public: bool = False,
        prune: bool = False,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        follow_symlinks: bool = False,
        gitignore: bool = True,
        dry_run: bool = False,
    ) -> IngestReport:
        """Load files and folders into this store, as `agent-retrieval ingest` does.

        A file that cannot be loaded is listed in `skipped_files` with its reason, files of other types met in
        a folder in `unsupported_files`, those with no words of their own (templates, redirect stubs, pages
        that only include another file) in `wordless_files` with why, and build folders, tool files and what
        the folder's .gitignore files name (unless not `gitignore`) in `left_out`: the rest are ingested all
        the same. A path that names nothing raises InvalidRequest. With `prune`, documents stored from files
        under the given paths whose files are gone are deleted (`removed`); one whose content reappears under
        another id is reported in `renamed`; a file that exists but could not be loaded is never pruned.
        `public` and what is embedded are as `ingest_documents` has them. `include` and `exclude` select a
        folder's files by pattern (`load_documents`); a file they leave out is never pruned. A folder's files
        that lead out of it through a symlink are skipped by name unless `follow_symlinks`. With `dry_run`
        nothing is written, embedded or deleted: the report says what would be (`written`, `renamed`,
        `removed`).
        """
        return sync_paths(
            paths,
            self,
            progress=progress,
            public=public,
            prune=prune,
            include=include,
            exclude=exclude,
            follow_symlinks=follow_symlinks,
            gitignore=gitignore,
            dry_run=dry_run,
        )

    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                self._store = open_store(self.context.store, process=self.process)
            return self._store

    @property
    def embedder(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                self._embedder = make_embedder(self.context.embeddings, process=self.process)
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
                context = self.context
                self._reranker = make_reranker(context.rerank, timeout=context.rerank_timeout_seconds)
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
        return widened(hits, around, reach, self.context.ingest.chunk_overlap)

    def _ranked(self, request: SearchRequest, level: Level, rerank: bool) -> Steps[RetrievalResult]:
        store = yield blocking(lambda: self.store)  # opening the store reads files: off the event loop
        scope = _scope(request)
        if scope:
            _check_scope((yield call(store.unknown_documents, store.aunknown_documents, scope)))
        if request.summarizes:
            limit = self.context.summarize_max_chunks
            hits = yield call(store.document_chunks, store.adocument_chunks, scope, limit + 1)
            return _summary(request, hits, limit)
        # Passages are fused by their ids and scores alone (but for the entity boost, which reads their
        # text): only the returned ones' rows are read. A document carries the passage it was found by.
        rows = level == "documents" or bool(self.context.entity_boost)
        candidates = yield from self._candidates(request, level, store, rows=rows)
        reranker = (
            (yield blocking(lambda: self.reranker)) if rerank and self.context.rerank_candidates else None
        )
        depth = max(request.top_k, self.context.rerank_candidates) if reranker else request.top_k
        result = self.rank(request, level, candidates, depth=depth)
        if not rows:
            result = replace(result, hits=(yield call(store.with_rows, store.awith_rows, result.hits)))
        if reranker is None or len(result.hits) < 2:
            return result
        hits, failure = yield from rerank_hits(reranker, request.query, result.hits, self.context)
        return replace(
            result,
            hits=hits[: request.top_k],
            rerank="failed" if failure else "used",
            degraded=result.degraded + ([failure] if failure else []),
        )

    def _candidates(
        self, request: SearchRequest, level: Level, store: Store, *, rows: bool = True
    ) -> Steps[Candidates]:
        """Keyword search and the vector side at once, settled at the tool's deadline. Documents are also
        searched by their passages, each at its best (search/documents.py). Without `rows`, the hits may be
        ids and scores only (Store.with_rows)."""
        keyword = call(
            store.keyword_search,
            store.akeyword_search,
            "chunks",
            request.query,
            self.context.candidates,
            filters=request.filters,
            document_ids=_scope(request),
            rows=rows,
        )
        keyword_outcome, vector_outcome = yield Together(
            [single(keyword), self._vector_side(request, level, rows)],
            self.context.tool_timeout_seconds,
            self.resources.search_pool,
        )
        candidates = self._settle(keyword_outcome, vector_outcome)
        if level == "chunks":
            return candidates
        return replace(candidates, keyword_hits=each_at_best(candidates.keyword_hits))

    def _vector_side(self, request: SearchRequest, level: Level, rows: bool) -> Steps[_VectorSide]:
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
                hits = yield call(
                    store.vector_search, store.avector_search, "chunks", vector, rows=rows, **arguments
                )
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
            query_words=len(keyword_terms(request.query)),
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


def as_retrieval(given: object) -> Retrieval:
    """What a tool, retriever or ingest works with: the Retrieval given, else one of the default settings. A
    Context (taken before 0.3.0) is refused with the way to pass it."""
    if given is None:
        return Retrieval()
    if not isinstance(given, Retrieval):
        raise TypeError(f"expected a Retrieval, got {type(given).__name__} (a Context: Retrieval(context))")
    return given


def ingest_paths(
    paths: Iterable[str | Path], retrieval: Retrieval | None = None, **options: Any
) -> IngestReport:
    """`Retrieval.ingest` (its options and report) into `retrieval`'s store; without one, into the default
    settings' store, closed at the end (one given is left open)."""
    owned = retrieval is None
    given = as_retrieval(retrieval)
    try:
        return given.ingest(paths, **options)
    finally:
        if owned:
            given.close()
