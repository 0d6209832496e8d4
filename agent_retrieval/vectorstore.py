"""A LangChain `VectorStore` over the same stores and the same hybrid search as the tools.

Each LangChain Document is stored as one document: its `page_content` is the content, its `metadata` is kept
as given (and returned as given), a string `metadata["title"]` is also its title, and its id is the one
given (or a new UUID). It is chunked and embedded like any ingested document, embedding only what changed, so
LangChain's indexing API (`index()` with a record manager) and plain `add_documents` both stay cheap.

`similarity_search` is the tools' hybrid search (vector and keyword, fused) at the document level by default
(`level="chunks"` returns passages, with their `document_id` in the metadata), returning the k best whatever
their similarity, as a vector store promises. Relevance scores (for `score_threshold`) are cosine
similarities to the query vector; maximal marginal relevance picks among the hybrid search's best.

The class is an operator's API: code that constructs it decides what is written, as with `ingest()`;
documents are written for the context's tenant (private unless `public=True`, which only the Postgres and
Supabase stores can honour), and their metadata is plain metadata, granting nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document as LCDocument
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from agent_retrieval.errors import InvalidRequest
from agent_retrieval.ingest import ingest
from agent_retrieval.models import ChunkSearchRequest, Document, Hit, Level, SearchRequest, parse_request
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval, as_retrieval
from agent_retrieval.stores.base import MAX_SEARCH_K, check_rows

ANY_SIMILARITY = -1.0  # a vector store returns the k nearest, however far: no similarity floor


class AgentRetrievalVectorStore(VectorStore):
    """Hybrid retrieval as a LangChain vector store (see the module's docstring)."""

    def __init__(
        self,
        retrieval: Retrieval | None = None,
        *,
        embedding: Embeddings | None = None,
        model_id: str | None = None,
        level: Level = "documents",
        public: bool = False,
    ):
        """`retrieval` gives the store, embedder and search settings, and stays the caller's to close
        (default: one of the default settings, `Retrieval()`). `embedding`, any LangChain Embeddings, takes
        the embedder's place over the same settings, recorded in the store as `model_id` (default: its class
        name, and its `model` when it has one)."""
        if level not in ("documents", "chunks"):
            raise InvalidRequest(f"level: must be 'documents' or 'chunks' (got {level!r})")
        # its own Retrieval (closed by close()) unless one is given to use as it is
        self._owns_retrieval = retrieval is None or embedding is not None
        if self._owns_retrieval:
            settings = as_retrieval(retrieval).context if retrieval is not None else None
            embedder = Embedder(embedding, model_id or _model_id(embedding)) if embedding else None
            self.retrieval = Retrieval(settings, embedder=embedder, min_similarity=ANY_SIMILARITY)
        else:
            self.retrieval = as_retrieval(retrieval)
        self.level: Level = level
        self.public = public

    @property
    def embeddings(self) -> Embeddings:
        return self.retrieval.embedder.embeddings

    def close(self) -> None:
        """Release the store's connections (when this vector store made its own)."""
        if self._owns_retrieval:
            self.retrieval.close()

    # --- writing -------------------------------------------------------------------------------------
    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        texts = list(texts)
        metadatas = metadatas or [{} for _ in texts]
        if len(metadatas) != len(texts):
            raise InvalidRequest(f"metadatas: {len(metadatas)} given for {len(texts)} texts")
        documents = [LCDocument(page_content=t, metadata=m) for t, m in zip(texts, metadatas, strict=True)]
        return self.add_documents(documents, ids=ids)

    def add_documents(self, documents: list[LCDocument], **kwargs: Any) -> list[str]:
        """Store the documents (replacing any of the same ids) and return their ids."""
        ids: list[str | None] = list(kwargs.get("ids") or [doc.id for doc in documents])
        if len(ids) != len(documents):
            raise InvalidRequest(f"ids: {len(ids)} given for {len(documents)} documents")
        ours = [_ours(doc, doc_id or str(uuid.uuid4())) for doc, doc_id in zip(documents, ids, strict=True)]
        check_rows(ours, [])  # all or nothing: a bad document is an error, not a silent skip
        retrieval = self.retrieval
        ingest(
            ours, retrieval.store, retrieval.embedder, retrieval.context, progress=False, public=self.public
        )
        return [doc.id for doc in ours]

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete these documents (unknown ids are passed over)."""
        if ids is None:
            raise InvalidRequest("ids: name the documents to delete (deleting everything is not offered)")
        self.retrieval.store.delete_documents(ids)
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        return await asyncio.to_thread(self.delete, ids, **kwargs)

    # --- reading -------------------------------------------------------------------------------------
    def get_by_ids(self, ids: Sequence[str], /) -> list[LCDocument]:
        return [_theirs(doc) for doc in self.retrieval.store.get_documents(list(ids))]

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[LCDocument]:
        return await asyncio.to_thread(self.get_by_ids, ids)

    def similarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[LCDocument]:
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    async def asimilarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[LCDocument]:
        return [doc for doc, _ in await self.asimilarity_search_with_score(query, k, filter, **kwargs)]

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[LCDocument, float]]:
        """The k best (document, fused score) pairs; `filter` is the tools' metadata filter, and keyword
        arguments (`query_type`, `hyde`, ...) are the tools' search arguments."""
        result = self.retrieval.search(self._request(query, k, filter, kwargs), self.level)
        return self._scored(result.hits)

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[LCDocument, float]]:
        result = await self.retrieval.asearch(self._request(query, k, filter, kwargs), self.level)
        return await asyncio.to_thread(self._scored, result.hits)

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[LCDocument]:
        """Vector search alone (there are no words to match), the k nearest."""
        vector = np.asarray(embedding, dtype=np.float32)
        hits = self.retrieval.store.vector_search(
            self.level, vector, k, filters=filter, min_similarity=ANY_SIMILARITY
        )
        return [doc for doc, _ in self._scored(hits)]

    def _similarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[LCDocument, float]]:
        """The hybrid ranking, each document with LangChain's relevance: its cosine similarity to the query
        vector, 0 to 1 (what `score_threshold` and `search_type="similarity_score_threshold"` cut on)."""
        request = self._request(query, k, kwargs.pop("filter", None), kwargs)
        candidates = self.retrieval.candidates(request, self.level)
        hits = self.retrieval.rank(request, self.level, candidates).hits
        query_vector = candidates.query_embedding.vector if candidates.query_embedding else None
        similarity = self._similarities(hits, query_vector)
        return [(doc, max(0.0, similarity.get(str(doc.id), 0.0))) for doc, _ in self._scored(hits)]

    def _similarities(self, hits: list[Hit], query_vector: np.ndarray | None) -> dict[str, float]:
        """Each hit's cosine similarity to the query vector; a hit only keyword search found is looked up by
        a vector search scoped to its document (0 when there is no query vector)."""
        known = {h.id: h.vector_similarity for h in hits}
        missing = {h.id: h.document_id for h in hits if h.vector_similarity is None}
        if missing and query_vector is not None:
            found = self.retrieval.store.vector_search(
                self.level,
                query_vector,
                MAX_SEARCH_K,  # every chunk of a few documents
                document_ids=list(dict.fromkeys(missing.values())),
                min_similarity=ANY_SIMILARITY,
            )
            known |= {h.id: h.vector_similarity for h in found if h.id in missing}
        return {hit_id: value for hit_id, value in known.items() if value is not None}

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[LCDocument]:
        """The hybrid search's `fetch_k` best, of which the k that are relevant yet unlike each other
        (maximal marginal relevance, `lambda_mult` 1 for relevance alone, 0 for diversity alone). Their texts
        are embedded again to compare them: this costs `fetch_k` embeddings a call."""
        found = self.similarity_search(query, fetch_k, filter, **kwargs)
        return self._diverse(self.retrieval.embedder.embed_query(query), found, k, lambda_mult)

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[LCDocument]:
        """As `max_marginal_relevance_search`, from the `fetch_k` nearest to a vector."""
        found = self.similarity_search_by_vector(embedding, fetch_k, filter)
        return self._diverse(np.asarray(embedding, dtype=np.float32), found, k, lambda_mult)

    def _diverse(
        self, query_vector: np.ndarray, found: list[LCDocument], k: int, lambda_mult: float
    ) -> list[LCDocument]:
        if not 0 <= lambda_mult <= 1:
            raise InvalidRequest(f"lambda_mult: must be between 0 and 1 (got {lambda_mult})")
        if not found:
            return []
        vectors = self.retrieval.embedder.embed_documents([doc.page_content for doc in found])
        chosen = maximal_marginal_relevance(query_vector, vectors.tolist(), lambda_mult, k)
        return [found[i] for i in chosen]

    def _request(self, query: str, k: int, filters: dict[str, Any] | None, more: dict[str, Any]) -> Any:
        model = ChunkSearchRequest if self.level == "chunks" else SearchRequest
        return parse_request(model, {**more, "query": query, "top_k": k, "filters": filters})

    def _scored(self, hits: list[Hit]) -> list[tuple[LCDocument, float]]:
        """Hits as LangChain Documents; documents are read whole (a hit carries only their opening)."""
        if self.level == "chunks":
            return [
                (
                    LCDocument(
                        hit.content, metadata={**hit.metadata, "document_id": hit.document_id}, id=hit.id
                    ),
                    hit.score,
                )
                for hit in hits
            ]
        whole = {doc.id: doc for doc in self.retrieval.store.get_documents([hit.id for hit in hits])}
        return [(_theirs(whole[hit.id]), hit.score) for hit in hits if hit.id in whole]

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> AgentRetrievalVectorStore:
        """A store over `kwargs["retrieval"]`'s settings (default: the default settings) embedding with
        `embedding`, with these texts added."""
        store = cls(kwargs.pop("retrieval", None), embedding=embedding, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store


def _model_id(embedding: Embeddings) -> str:
    """What the store records for this LangChain Embeddings' vectors: its class, and its model if named."""
    name = getattr(embedding, "model", None) or getattr(embedding, "model_name", None)
    return f"langchain/{type(embedding).__name__}" + (f"/{name}" if isinstance(name, str) and name else "")


def _ours(doc: LCDocument, doc_id: str) -> Document:
    title = doc.metadata.get("title")
    return Document(
        id=doc_id,
        title=title if isinstance(title, str) else "",
        content=doc.page_content,
        metadata=dict(doc.metadata),
        source="vectorstore",
    )


def _theirs(doc: Document) -> LCDocument:
    return LCDocument(page_content=doc.content, metadata=doc.metadata, id=doc.id)
