"""The optional rerank stage: a cross-encoder reorders the fused top candidates of a search.

Any LangChain `BaseDocumentCompressor` reranks (pass one to `Retrieval(reranker=...)`, a cross-encoder
from a local model folder for example); `reranker=voyage` in the operator's configuration makes
`VoyageReranker`, Voyage's rerank API through the voyageai SDK. The stage has its own deadline and never
fails a search: a reranker that errs or is late leaves the fused order, and the result says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor
from langchain_core.documents import Document as LCDocument
from pydantic import ConfigDict, PrivateAttr, SecretStr

from agent_retrieval.context import RerankSettings, RunSettings
from agent_retrieval.core.redaction import check_secret, protect, redact
from agent_retrieval.core.steps import Steps, bounded, call
from agent_retrieval.errors import ConfigError
from agent_retrieval.models import Hit

RERANK_ID = "agent_retrieval_candidate"  # the metadata key that carries a candidate's place through
RERANK_SCORE = "relevance_score"  # where rerankers put their score (Voyage, Cohere, cross-encoders)


class VoyageReranker(BaseDocumentCompressor):
    """Voyage AI's rerank API through its SDK: the documents in the model's order of relevance, each with
    its `relevance_score` in metadata."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    model: str
    api_key: SecretStr
    base_url: str | None = None
    timeout: float = 30.0
    max_retries: int = 3
    _clients: dict[str, Any] = PrivateAttr(default_factory=dict)

    def model_post_init(self, __context: Any) -> None:
        key = check_secret("VOYAGE_API_KEY", self.api_key.get_secret_value())
        protect(key)  # the SDK logs a refused key verbatim
        self.api_key = SecretStr(key)

    def _client(self, kind: str) -> Any:
        if kind not in self._clients:
            from voyageai.client import Client
            from voyageai.client_async import AsyncClient

            make = AsyncClient if kind == "async" else Client
            self._clients[kind] = make(
                api_key=self.api_key.get_secret_value(),
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=self.max_retries + 1,  # the SDK counts attempts, not retries
            )
        return self._clients[kind]

    def compress_documents(
        self, documents: Sequence[LCDocument], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[LCDocument]:
        if not documents:
            return []
        texts = [d.page_content for d in documents]
        return _ordered(documents, self._client("sync").rerank(query, texts, model=self.model))

    async def acompress_documents(
        self, documents: Sequence[LCDocument], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[LCDocument]:
        if not documents:
            return []
        texts = [d.page_content for d in documents]
        return _ordered(documents, await self._client("async").rerank(query, texts, model=self.model))


def _ordered(documents: Sequence[LCDocument], ranking: Any) -> list[LCDocument]:
    return [
        LCDocument(
            page_content=documents[r.index].page_content,
            metadata={**documents[r.index].metadata, RERANK_SCORE: r.relevance_score},
        )
        for r in ranking.results
    ]


def make_reranker(settings: RerankSettings, *, timeout: float) -> BaseDocumentCompressor | None:
    """The operator's configured reranker, or None when the stage is off; `timeout` is a run's
    rerank_timeout_seconds (one request never outlasts the search's rerank deadline)."""
    if settings.reranker == "off":
        return None
    if not settings.voyage_api_key:
        raise ConfigError("reranker is voyage but VOYAGE_API_KEY is not set")
    return VoyageReranker(
        model=settings.voyage_rerank_model,
        api_key=settings.voyage_api_key,
        base_url=settings.voyage_base_url or None,
        timeout=min(settings.request_timeout_seconds, timeout),
        max_retries=settings.max_retries,
    )


def rerank(
    reranker: BaseDocumentCompressor, query: str, hits: list[Hit], context: RunSettings
) -> Steps[tuple[list[Hit], str | None]]:
    """`hits` with their first `rerank_candidates` in the reranker's order, each scored by it, the rest
    after them as fused; and a note when the reranker failed or was late (then the order is unchanged).
    Candidates the reranker leaves out go after those it ranked, in fused order: nothing is lost."""
    head, tail = hits[: context.rerank_candidates], hits[context.rerank_candidates :]
    documents = [LCDocument(page_content=_text(hit), metadata={RERANK_ID: n}) for n, hit in enumerate(head)]
    try:
        ranked = yield bounded(
            call(reranker.compress_documents, reranker.acompress_documents, documents, query),
            context.rerank_timeout_seconds,
        )
        order = [(int(d.metadata[RERANK_ID]), float(d.metadata.get(RERANK_SCORE, 0.0))) for d in ranked]
        reranked = {n: replace(head[n], score=score) for n, score in order}  # a repeat counts once
    except TimeoutError:
        seconds = context.rerank_timeout_seconds
        return hits, f"rerank skipped: no answer within rerank_timeout_seconds={seconds:g}; fused order kept"
    except Exception as error:  # a provider's error, or a reranker that returned what it was not given
        return hits, f"rerank skipped: {type(error).__name__}: {redact(str(error))[:300]}; fused order kept"
    return [*reranked.values(), *(hit for n, hit in enumerate(head) if n not in reranked), *tail], None


def _text(hit: Hit) -> str:
    """What the reranker reads: the title and heading, then the passage."""
    return "\n".join(part for part in (hit.title, hit.heading_path, hit.content) if part)
