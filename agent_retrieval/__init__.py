"""agent-retrieval: hybrid retrieval with HyDE for LangGraph agents.

The names below are imported on first use, so `import agent_retrieval` stays light and builds nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Context": "agent_retrieval.context",
    "Retrieval": "agent_retrieval.retrieval",
    "SearchResources": "agent_retrieval.resources",
    "make_retrieval_tools": "agent_retrieval.tools",
    "DocumentRetrieverTool": "agent_retrieval.tools",
    "ChunkRetrieverTool": "agent_retrieval.tools",
    "SimilaritySearchTool": "agent_retrieval.tools",
    "IndexDocumentTool": "agent_retrieval.tools",
    "AgentRetriever": "agent_retrieval.tools",
    "AgentRetrievalVectorStore": "agent_retrieval.vectorstore",
    "get_query_embedding_for_retrieval": "agent_retrieval.hyde",
    "aget_query_embedding_for_retrieval": "agent_retrieval.hyde",
    "generate_hypothetical_documents": "agent_retrieval.hyde",
    "format_query_for_embedding": "agent_retrieval.hyde",
    "make_embedder": "agent_retrieval.embeddings",
    "open_store": "agent_retrieval.stores",
    "SQLiteStore": "agent_retrieval.stores",
    "load_documents": "agent_retrieval.loaders",
    "reembed": "agent_retrieval.ingest",
    "ingest_paths": "agent_retrieval.sync",
    "IngestReport": "agent_retrieval.ingest",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'agent_retrieval' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
