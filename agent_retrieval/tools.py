"""The LangChain tools (document_retriever, chunk_retriever, similarity_search, index_document) and a
BaseRetriever over the same search path.

Tools are thin: validate the arguments, run `Retrieval` (or ingest), and answer with text for the model
plus the full result (hits, HyDE status, degradations; or the ingest report) as the artifact. Bad
arguments and store failures come back as a ToolException message the model can act on, never a traceback.
The text lists hits as <passage> blocks, every field quoted as in the answer prompt (quoting.py); ids
the model copies from them into document_ids are read back as the ids they show.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, ClassVar, Literal, cast

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document as LCDocument
from langchain_core.messages import ToolMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import BaseTool, ToolException
from pydantic import ConfigDict, Field, ValidationError

from agent_retrieval.core.quoting import passage, passages, quote_attribute, unquote_id
from agent_retrieval.core.text import counted, shorten
from agent_retrieval.errors import AgentRetrievalError
from agent_retrieval.ingest import IngestReport, ingest_for_caller
from agent_retrieval.models import (
    MAX_NESTING,
    ChunkSearchRequest,
    Hit,
    IndexDocumentRequest,
    Level,
    Request,
    RetrievalResult,
    SearchRequest,
    SimilaritySearchRequest,
    TopK,
    explain,
    nesting_depth,
    parse_request,
)
from agent_retrieval.search.confidence import is_low
from agent_retrieval.search.retrieval import Retrieval, as_retrieval

_MARKDOWN_HEADING = re.compile(r"(?m)^#{1,6}\s+")
SNIPPET_CHARS = {"documents": 400, "chunks": 1200}  # what the model reads per hit; the artifact has it all


def _explain_validation(error: ValidationError) -> str:
    return explain(error)


class _StoreTool(BaseTool):
    """What every tool here shares: one Retrieval, text plus artifact, errors as messages for the model."""

    # An unknown argument (a misspelt `contxt=`) is refused: ignoring it meant searching the default store.
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    retrieval: Retrieval = Field(default_factory=Retrieval, exclude=True)
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    handle_tool_error: bool = True
    handle_validation_error: Any = _explain_validation

    def __init__(self, retrieval: Retrieval | None = None, **kwargs: Any):
        super().__init__(retrieval=as_retrieval(retrieval), **kwargs)

    # LangChain writes the arguments out with str() before it validates them, and JSON nested a thousand
    # deep makes that raise RecursionError: such a call is answered with a tool error before it gets there.
    def run(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        refusal = self._refuse_deep(tool_input, kwargs.get("tool_call_id"))
        return refusal if refusal is not None else super().run(tool_input, *args, **kwargs)

    async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        refusal = self._refuse_deep(tool_input, kwargs.get("tool_call_id"))
        return refusal if refusal is not None else await super().arun(tool_input, *args, **kwargs)

    def _refuse_deep(self, tool_input: Any, tool_call_id: str | None) -> Any:
        if not isinstance(tool_input, dict):
            return None
        deep = [name for name, value in tool_input.items() if nesting_depth(value) > MAX_NESTING]
        if not deep:
            return None
        name = deep[0] if isinstance(deep[0], str) else "an argument"
        message = (
            f"Invalid arguments: {name[:40]}: nested more than {MAX_NESTING} levels deep; filters are "
            'flat ({"key": value} or {"key": [values]}) and schemas are plain JSON'
        )
        if tool_call_id is None:
            return message
        return ToolMessage(content=message, tool_call_id=tool_call_id, name=self.name, status="error")

    def _parse(self, model: type[Request], arguments: dict[str, Any]) -> Request:
        try:
            return parse_request(model, arguments)
        except AgentRetrievalError as error:
            raise ToolException(str(error)) from None


class _RetrieverTool(_StoreTool):
    """Shared machinery of the retrieval tools."""

    level: ClassVar[Level]

    def _run(self, run_manager: Any = None, **arguments: Any) -> tuple[str, dict[str, Any]]:
        request = self._request(_shown_ids_read_back(arguments))
        try:
            result = self.retrieval.search(request, self.level)
        except AgentRetrievalError as error:
            raise ToolException(str(error)) from None
        return format_result(result), result.to_dict()

    async def _arun(self, run_manager: Any = None, **arguments: Any) -> tuple[str, dict[str, Any]]:
        request = self._request(_shown_ids_read_back(arguments))
        try:
            result = await self.retrieval.asearch(request, self.level)
        except AgentRetrievalError as error:
            raise ToolException(str(error)) from None
        return format_result(result), result.to_dict()

    def _request(self, arguments: dict[str, Any]) -> SearchRequest:
        # Each tool class below sets args_schema to its request model; BaseTool types it more loosely.
        return self._parse(cast(type[SearchRequest], self.args_schema), arguments)


def _shown_ids_read_back(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments with each document id the model copied from a <passage> (where '<' reads '&lt;')
    turned back into the stored id; validation of what remains is the request's."""
    ids = arguments.get("document_ids")
    if not isinstance(ids, list):
        return arguments
    return {**arguments, "document_ids": [unquote_id(i) if isinstance(i, str) else i for i in ids]}


# What a result below confidence.LOW says: never that nothing answers (a paraphrase of a stored answer can
# score that low: BENCHMARKS, "On documentation nobody here chose"), but to read the passages first.
LOW_CONFIDENCE = "low confidence"
# What every search result's header says of its confidence (confidence.py), in the tools' descriptions.
CONFIDENCE_NOTE = (
    " The result's header gives the search's confidence (0 to 1) that the documents answer the query; a "
    "question worded unlike the documents can score low when they do, so judge by the passages."
)


# The tools below are declarations in LangChain's shape (name, the description the model reads, argument
# schema, level): they look alike by design, and what they do is written once, in _RetrieverTool.
class DocumentRetrieverTool(_RetrieverTool):
    """Find whole documents; `document_retriever` in an agent's tool list."""

    name: str = "document_retriever"
    description: str = (
        "Search the document collection and return the most relevant whole documents (id, title, metadata, "
        "and the passage each was found by, or its opening). Use it first to find which documents answer a "
        "question; then pass their ids to chunk_retriever for the exact passages. Hybrid search: meaning "
        "(vector) and exact words (keyword)." + CONFIDENCE_NOTE
    )
    args_schema: type[SearchRequest] = SearchRequest
    level: ClassVar[Level] = "documents"


class ChunkRetrieverTool(_RetrieverTool):
    """Find passages; `chunk_retriever` in an agent's tool list."""

    name: str = "chunk_retriever"
    description: str = (
        "Search for the most relevant passages (chunks) of documents, with their heading path. Pass "
        "document_ids from document_retriever to search only inside those documents, or use "
        "query_type='summarize' with document_ids to read those documents' chunks in order." + CONFIDENCE_NOTE
    )
    args_schema: type[SearchRequest] = ChunkSearchRequest
    level: ClassVar[Level] = "chunks"


class SimilaritySearchTool(_RetrieverTool):
    """The minimal search tool: a query, top_k and filters; `similarity_search` in an agent's tool list."""

    name: str = "similarity_search"
    description: str = (
        "Search the document collection for the passages most relevant to a query, best first, each with "
        "its score, document id and heading path. Hybrid search: meaning (vector) and exact words (keyword)."
    )
    args_schema: type[SimilaritySearchRequest] = SimilaritySearchRequest
    level: ClassVar[Level] = "chunks"

    def _request(self, arguments: dict[str, Any]) -> SearchRequest:
        # The search chunk_retriever runs, with its defaults for every argument not offered here.
        return self._parse(ChunkSearchRequest, arguments)


class IndexDocumentTool(_StoreTool):
    """Add or replace a document at run time; `index_document` in an agent's tool list."""

    name: str = "index_document"
    description: str = (
        "Store a document (title and full text) so that later searches find it. Indexing the same title "
        "again, or the same id, replaces the earlier version. Answers with the document's id."
    )
    args_schema: type[IndexDocumentRequest] = IndexDocumentRequest

    def _run(self, run_manager: Any = None, **arguments: Any) -> tuple[str, dict[str, Any]]:
        request = self._parse(IndexDocumentRequest, arguments)
        retrieval = self.retrieval
        # LangChain validated the arguments already; the write checks them again, as every caller's write is.
        given = request.model_dump(exclude_none=True)
        try:
            report = ingest_for_caller(
                [("", given)], retrieval.store, retrieval.embedder, retrieval.context, source=self.name
            )
        except AgentRetrievalError as error:  # the store could not be opened
            raise ToolException(str(error)) from None
        if not (report.written or report.unchanged):
            raise ToolException("; ".join(report.errors) or "nothing was written")
        doc_id = request.document(source=self.name).id
        return _describe_indexing(doc_id, request.title, report), {"id": doc_id, **asdict(report)}

    async def _arun(self, run_manager: Any = None, **arguments: Any) -> tuple[str, dict[str, Any]]:
        # Opening the store, embedding and writing all block: a worker thread keeps the event loop free.
        return await asyncio.to_thread(self._run, **arguments)


def _describe_indexing(doc_id: str, title: str, report: IngestReport) -> str:
    if report.unchanged:
        done = f"Document id={doc_id} ({title!r}) is already indexed with this content; nothing changed."
    else:
        done = (
            f"Indexed document id={doc_id} ({title!r}): {report.chunks} chunks, embedded {report.embedded} "
            f"texts ({report.reused} stored vectors reused)."
        )
    return "\n".join([done, *(f"Note: {note}" for note in report.errors)])


TOOLS: dict[str, type[_StoreTool]] = {
    tool.model_fields["name"].default: tool
    for tool in (DocumentRetrieverTool, ChunkRetrieverTool, SimilaritySearchTool, IndexDocumentTool)
}


def make_retrieval_tools(
    retrieval: Retrieval | None = None,
    *,
    names: Sequence[str] = ("document_retriever", "chunk_retriever"),
) -> list[BaseTool]:
    """The named tools (default: document_retriever and chunk_retriever), sharing one Retrieval: its store,
    embedder and HyDE cache (default: `Retrieval()`, the default settings; the operator's are
    `Retrieval.from_env()`). `names` may also hold "similarity_search" and "index_document"."""
    if isinstance(names, str) or any(name not in TOOLS for name in names):
        raise ValueError(f"names must be a list of tool names from {', '.join(TOOLS)} (got {names!r})")
    retrieval = as_retrieval(retrieval)
    return [TOOLS[name](retrieval=retrieval) for name in dict.fromkeys(names)]


def format_result(result: RetrievalResult) -> str:
    """The text the calling model reads: a header and honest notes, then one <passage> per hit with the ids
    it can pass on, all retrieved fields quoted."""
    noun = "document" if result.level == "documents" else "chunk"
    if result.query_type == "summarize":
        header = f"{len(result.hits)} chunks in reading order" + (" (truncated)" if result.truncated else "")
    else:
        hyde = {
            "used": "HyDE used",
            "failed": "HyDE failed, raw query used",
            "skipped": "HyDE skipped",
            "off": "HyDE off",
        }[result.hyde]
        search = "hybrid search, reranked" if result.rerank == "used" else "hybrid search"
        sure = "" if result.confidence is None else f"; confidence {result.confidence:.2f}"
        found = f'{counted(len(result.hits), noun)} for "{quote_attribute(result.query)}"'
        header = f"{found} ({search}; {hyde}{sure})"
    lines = [header]
    lines += [f"Note: {note}" for note in result.degraded]
    if is_low(result.confidence):
        lines.append(
            f"Note: {LOW_CONFIDENCE} ({result.confidence:.2f}) that the documents answer this: these are the "
            "closest matches; answer from one only if it does, else try other words or tell the user the "
            "documents do not seem to cover it."
        )
    if not result.hits:
        lines.append("No matches. Try other words, fewer filters, or a different query_type.")
    else:
        lines.append(passages(_format_hit(hit, SNIPPET_CHARS[result.level]) for hit in result.hits))
    return "\n".join(lines)


def _format_hit(hit: Hit, limit: int) -> str:
    text = shorten(" ".join(_MARKDOWN_HEADING.sub(" ", hit.content).split()), limit)
    details = {"score": f"{hit.score:.4f}", "found_by": " + ".join(hit.found_by)} if hit.found_by else {}
    return passage(
        text,
        id=hit.id,
        document=hit.document_id if hit.level == "chunks" else None,
        source=hit.heading_path or hit.title,
        metadata=hit.metadata,
        **details,
    )


class AgentRetriever(BaseRetriever):
    """The same hybrid search as a LangChain retriever, for chains that expect one.

    Each LangChain Document's metadata holds the hit's id, document_id, score, found_by and the
    stored metadata.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    retrieval: Retrieval = Field(default_factory=Retrieval, exclude=True)
    level: Level = "chunks"
    k: TopK = 5
    query_type: str = "general"
    filters: dict[str, Any] | None = None

    def __init__(self, retrieval: Retrieval | None = None, **kwargs: Any):
        # The plugin types BaseRetriever's own fields only; `retrieval` is this subclass's.
        super().__init__(retrieval=as_retrieval(retrieval), **kwargs)  # type: ignore[call-arg]

    def _request(self, query: str, overrides: dict[str, Any]) -> SearchRequest:
        data = {"query": query, "top_k": self.k, "query_type": self.query_type, "filters": self.filters}
        data.update({("top_k" if key == "k" else key): value for key, value in overrides.items()})
        model = ChunkSearchRequest if self.level == "chunks" else SearchRequest
        return parse_request(model, data)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[LCDocument]:
        return _to_documents(self.retrieval.search(self._request(query, kwargs), self.level))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[LCDocument]:
        return _to_documents(await self.retrieval.asearch(self._request(query, kwargs), self.level))


def _to_documents(result: RetrievalResult) -> list[LCDocument]:
    return [
        LCDocument(
            page_content=hit.content,
            id=hit.id,
            metadata={
                **hit.metadata,
                "id": hit.id,
                "document_id": hit.document_id,
                "title": hit.title,
                "heading_path": hit.heading_path,
                "score": hit.score,
                "found_by": hit.found_by,
            },
        )
        for hit in result.hits
    ]
