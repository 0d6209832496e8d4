"""The two LangChain tools, document_retriever and chunk_retriever, and a BaseRetriever over the same path.

Tools are thin: validate the arguments, run `Retrieval`, and answer with text for the model plus
the full result (hits, HyDE status, degradations) as the artifact. Bad arguments and store failures
come back as a ToolException message the model can act on, never a traceback.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document as LCDocument
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import BaseTool, ToolException
from pydantic import ConfigDict, Field, ValidationError

from agent_retrieval.context import Context
from agent_retrieval.errors import AgentRetrievalError
from agent_retrieval.models import ChunkSearchRequest, Hit, Level, RetrievalResult, SearchRequest, explain, parse_request
from agent_retrieval.retrieval import Retrieval

_MARKDOWN_HEADING = re.compile(r"(?m)^#{1,6}\s+")
SNIPPET_CHARS = {"documents": 400, "chunks": 1200}  # what the model reads per hit; the artifact has it all


def _explain_validation(error: ValidationError) -> str:
    return explain(error)


class _RetrieverTool(BaseTool):
    """Shared machinery of the two retrieval tools."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    level: ClassVar[Level]
    retrieval: Retrieval = Field(default_factory=Retrieval, exclude=True)
    response_format: str = "content_and_artifact"
    handle_tool_error: bool = True
    handle_validation_error: Any = _explain_validation

    def __init__(self, context: Context | None = None, *, retrieval: Retrieval | None = None, **kwargs: Any):
        super().__init__(retrieval=retrieval or Retrieval(context), **kwargs)

    def _run(self, run_manager: Any = None, **arguments: Any) -> tuple[str, dict[str, Any]]:
        request = self._request(arguments)
        try:
            result = self.retrieval.search(request, self.level)
        except AgentRetrievalError as error:
            raise ToolException(str(error)) from None
        return format_result(result), result.to_dict()

    async def _arun(self, run_manager: Any = None, **arguments: Any) -> tuple[str, dict[str, Any]]:
        request = self._request(arguments)
        try:
            result = await self.retrieval.asearch(request, self.level)
        except AgentRetrievalError as error:
            raise ToolException(str(error)) from None
        return format_result(result), result.to_dict()

    def _request(self, arguments: dict[str, Any]) -> SearchRequest:
        try:
            return parse_request(self.args_schema, arguments)
        except AgentRetrievalError as error:
            raise ToolException(str(error)) from None


class DocumentRetrieverTool(_RetrieverTool):
    """Find whole documents; `document_retriever` in an agent's tool list."""

    name: str = "document_retriever"
    description: str = (
        "Search the document collection and return the most relevant whole documents (id, title, metadata, "
        "opening text). Use it first to find which documents answer a question; then pass their ids to "
        "chunk_retriever for the exact passages. Hybrid search: meaning (vector) and exact words (keyword).")
    args_schema: type[SearchRequest] = SearchRequest
    level: ClassVar[Level] = "documents"


class ChunkRetrieverTool(_RetrieverTool):
    """Find passages; `chunk_retriever` in an agent's tool list."""

    name: str = "chunk_retriever"
    description: str = (
        "Search for the most relevant passages (chunks) of documents, with their heading path. Pass "
        "document_ids from document_retriever to search only inside those documents, or use "
        "query_type='summarize' with document_ids to read those documents' chunks in order.")
    args_schema: type[SearchRequest] = ChunkSearchRequest
    level: ClassVar[Level] = "chunks"


def make_retrieval_tools(context: Context | None = None, *, retrieval: Retrieval | None = None) -> list[BaseTool]:
    """[document_retriever, chunk_retriever], sharing one store, embedder and HyDE cache."""
    retrieval = retrieval or Retrieval(context)
    return [DocumentRetrieverTool(retrieval=retrieval), ChunkRetrieverTool(retrieval=retrieval)]


def format_result(result: RetrievalResult) -> str:
    """The text the calling model reads: one numbered block per hit, ids it can pass on, and honest notes."""
    noun = "document" if result.level == "documents" else "chunk"
    if result.query_type == "summarize":
        header = f"{len(result.hits)} chunks in reading order" + (" (truncated)" if result.truncated else "")
    else:
        hyde = {"used": "HyDE used", "failed": "HyDE failed, raw query used", "skipped": "HyDE skipped",
                "off": "HyDE off"}[result.hyde]
        header = f"{len(result.hits)} {noun}s for {result.query!r} (hybrid search; {hyde})"
    lines = [header]
    lines += [f"Note: {note}" for note in result.degraded]
    if not result.hits:
        lines.append("No matches. Try other words, fewer filters, or a different query_type.")
    for number, hit in enumerate(result.hits, start=1):
        lines.append("")
        lines.append(_format_hit(number, hit, SNIPPET_CHARS[result.level]))
    return "\n".join(lines)


def _format_hit(number: int, hit: Hit, limit: int) -> str:
    where = f"id={hit.id}" if hit.level == "documents" else f"id={hit.id} document_id={hit.document_id}"
    head = f"[{number}] {where} | {hit.heading_path or hit.title}"
    details = []
    if hit.found_by:
        details.append(f"score={hit.score:.4f} found by {' + '.join(hit.found_by)}")
    if hit.metadata:
        details.append("metadata: " + ", ".join(f"{k}={v}" for k, v in sorted(hit.metadata.items())))
    text = " ".join(_MARKDOWN_HEADING.sub(" ", hit.content).split())
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " ..."
    return "\n".join([head, *(f"    {d}" for d in details), f"    {text}"])


class AgentRetriever(BaseRetriever):
    """The same hybrid search as a LangChain retriever, for chains that expect one.

    Each LangChain Document's metadata holds the hit's id, document_id, score, found_by and the
    stored metadata.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retrieval: Retrieval = Field(default_factory=Retrieval, exclude=True)
    level: Level = "chunks"
    k: int = 5
    query_type: str = "general"
    filters: dict[str, Any] | None = None

    def _request(self, query: str, overrides: dict[str, Any]) -> SearchRequest:
        data = {"query": query, "top_k": self.k, "query_type": self.query_type, "filters": self.filters}
        data.update({("top_k" if key == "k" else key): value for key, value in overrides.items()})
        model = ChunkSearchRequest if self.level == "chunks" else SearchRequest
        return parse_request(model, data)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **kwargs: Any) -> list[LCDocument]:
        return _to_documents(self.retrieval.search(self._request(query, kwargs), self.level))

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **kwargs: Any) -> list[LCDocument]:
        return _to_documents(await self.retrieval.asearch(self._request(query, kwargs), self.level))


def _to_documents(result: RetrievalResult) -> list[LCDocument]:
    return [LCDocument(page_content=hit.content, id=hit.id,
                       metadata={**hit.metadata, "id": hit.id, "document_id": hit.document_id, "title": hit.title,
                                 "heading_path": hit.heading_path, "score": hit.score, "found_by": hit.found_by})
            for hit in result.hits]
