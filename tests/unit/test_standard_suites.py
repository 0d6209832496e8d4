"""langchain-tests' standard suites for the four tools and the retriever adapter, on ingested temp stores."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

from langchain_tests.integration_tests import RetrieversIntegrationTests, ToolsIntegrationTests
from langchain_tests.unit_tests import ToolsUnitTests

from agent_retrieval import demo
from agent_retrieval.context import Context
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.loaders import load_documents
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.tools import (
    AgentRetriever,
    ChunkRetrieverTool,
    DocumentRetrieverTool,
    IndexDocumentTool,
    SimilaritySearchTool,
)
from tests.conftest import WordHashEmbeddings


@functools.cache
def demo_retrieval(name: str = "suite") -> Retrieval:
    """One demo store per name for the whole module (the suites build many tools)."""
    folder = Path(tempfile.mkdtemp(prefix="agent-retrieval-suite-"))
    embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    retrieval = Retrieval(Context(db_path=str(folder / f"{name}.db")), embedder=embedder)
    ingest(load_documents([demo.corpus_dir()]), retrieval.store, embedder, progress=False)
    return retrieval


class _DocumentTool:
    @property
    def tool_constructor(self) -> type[DocumentRetrieverTool]:
        return DocumentRetrieverTool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"retrieval": demo_retrieval()}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"query": "Banda Lane deposit", "query_type": "general", "top_k": 3, "filters": None}


class _ChunkTool(_DocumentTool):
    @property
    def tool_constructor(self) -> type[ChunkRetrieverTool]:
        return ChunkRetrieverTool

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {
            "query": "who holds the tenancy deposit",
            "query_type": "conceptual",
            "top_k": 2,
            "document_ids": None,
        }


class _SimilarityTool(_DocumentTool):
    @property
    def tool_constructor(self) -> type[SimilaritySearchTool]:
        return SimilaritySearchTool

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"query": "tenancy deposit protection", "top_k": 3, "filters": None}


class _IndexTool(_DocumentTool):
    @property
    def tool_constructor(self) -> type[IndexDocumentTool]:
        return IndexDocumentTool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"retrieval": demo_retrieval("index")}  # its own store: the other suites' results stay fixed

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {
            "title": "Suite note",
            "content": "# Suite note\n\nWritten by the standard suite.",
            "metadata": {"category": "test"},
            "id": None,
        }


class TestDocumentRetrieverUnit(_DocumentTool, ToolsUnitTests):
    pass


class TestDocumentRetrieverIntegration(_DocumentTool, ToolsIntegrationTests):
    pass


class TestChunkRetrieverUnit(_ChunkTool, ToolsUnitTests):
    pass


class TestChunkRetrieverIntegration(_ChunkTool, ToolsIntegrationTests):
    pass


class TestSimilaritySearchUnit(_SimilarityTool, ToolsUnitTests):
    pass


class TestSimilaritySearchIntegration(_SimilarityTool, ToolsIntegrationTests):
    pass


class TestIndexDocumentUnit(_IndexTool, ToolsUnitTests):
    pass


class TestIndexDocumentIntegration(_IndexTool, ToolsIntegrationTests):
    pass


class TestAgentRetriever(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[AgentRetriever]:
        return AgentRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"retrieval": demo_retrieval()}

    @property
    def retriever_query_example(self) -> str:
        return "deposit"
