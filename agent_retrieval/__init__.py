"""agent-retrieval: hybrid retrieval with HyDE for LangGraph agents.

The names below are imported on first use, so `import agent_retrieval` stays light and builds nothing; a
type checker reads them from the TYPE_CHECKING imports, which tests/unit/test_packaging.py keeps equal to
_EXPORTS.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

if TYPE_CHECKING:  # what a type checker sees: the real classes and functions, not __getattr__'s Any
    from agent_retrieval.context import ChatSettings as ChatSettings
    from agent_retrieval.context import Context as Context
    from agent_retrieval.context import EmbeddingSettings as EmbeddingSettings
    from agent_retrieval.context import IngestSettings as IngestSettings
    from agent_retrieval.context import RerankSettings as RerankSettings
    from agent_retrieval.context import ResourceSettings as ResourceSettings
    from agent_retrieval.context import RunSettings as RunSettings
    from agent_retrieval.context import ServerSettings as ServerSettings
    from agent_retrieval.context import StoreSettings as StoreSettings
    from agent_retrieval.errors import AgentRetrievalError as AgentRetrievalError
    from agent_retrieval.errors import ConfigError as ConfigError
    from agent_retrieval.errors import DimensionMismatch as DimensionMismatch
    from agent_retrieval.errors import EmbeddingError as EmbeddingError
    from agent_retrieval.errors import EmbeddingModelMismatch as EmbeddingModelMismatch
    from agent_retrieval.errors import InvalidRequest as InvalidRequest
    from agent_retrieval.errors import StoreError as StoreError
    from agent_retrieval.errors import StoreUnavailable as StoreUnavailable
    from agent_retrieval.hyde import QueryEmbedding as QueryEmbedding
    from agent_retrieval.hyde import aget_query_embedding_for_retrieval as aget_query_embedding_for_retrieval
    from agent_retrieval.hyde import format_query_for_embedding as format_query_for_embedding
    from agent_retrieval.hyde import generate_hypothetical_documents as generate_hypothetical_documents
    from agent_retrieval.hyde import get_query_embedding_for_retrieval as get_query_embedding_for_retrieval
    from agent_retrieval.ingest import IngestReport as IngestReport
    from agent_retrieval.ingest import reembed as reembed
    from agent_retrieval.ingest.loaders import load_documents as load_documents
    from agent_retrieval.models import Chunk as Chunk
    from agent_retrieval.models import ChunkSearchRequest as ChunkSearchRequest
    from agent_retrieval.models import Document as Document
    from agent_retrieval.models import Hit as Hit
    from agent_retrieval.models import RetrievalResult as RetrievalResult
    from agent_retrieval.models import SearchRequest as SearchRequest
    from agent_retrieval.models import SimilaritySearchRequest as SimilaritySearchRequest
    from agent_retrieval.providers.embeddings import Embedder as Embedder
    from agent_retrieval.providers.embeddings import make_embedder as make_embedder
    from agent_retrieval.search.resources import SearchResources as SearchResources
    from agent_retrieval.search.retrieval import Retrieval as Retrieval
    from agent_retrieval.search.retrieval import ingest_paths as ingest_paths
    from agent_retrieval.stores import SQLiteStore as SQLiteStore
    from agent_retrieval.stores import open_store as open_store
    from agent_retrieval.stores.base import Store as Store
    from agent_retrieval.stores.postgres import PostgresStore as PostgresStore
    from agent_retrieval.stores.supabase import SupabaseStore as SupabaseStore
    from agent_retrieval.tools import AgentRetriever as AgentRetriever
    from agent_retrieval.tools import ChunkRetrieverTool as ChunkRetrieverTool
    from agent_retrieval.tools import DocumentRetrieverTool as DocumentRetrieverTool
    from agent_retrieval.tools import IndexDocumentTool as IndexDocumentTool
    from agent_retrieval.tools import SimilaritySearchTool as SimilaritySearchTool
    from agent_retrieval.tools import make_retrieval_tools as make_retrieval_tools
    from agent_retrieval.vectorstore import AgentRetrievalVectorStore as AgentRetrievalVectorStore

_EXPORTS = {
    "Context": "agent_retrieval.context",
    # its sections: what each part is given (open_store a StoreSettings, make_embedder EmbeddingSettings)
    "ChatSettings": "agent_retrieval.context",
    "EmbeddingSettings": "agent_retrieval.context",
    "IngestSettings": "agent_retrieval.context",
    "RerankSettings": "agent_retrieval.context",
    "ResourceSettings": "agent_retrieval.context",
    "RunSettings": "agent_retrieval.context",
    "ServerSettings": "agent_retrieval.context",
    "StoreSettings": "agent_retrieval.context",
    "Retrieval": "agent_retrieval.search.retrieval",
    "SearchResources": "agent_retrieval.search.resources",
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
    "make_embedder": "agent_retrieval.providers.embeddings",
    "open_store": "agent_retrieval.stores",
    "SQLiteStore": "agent_retrieval.stores",
    "load_documents": "agent_retrieval.ingest.loaders",
    "reembed": "agent_retrieval.ingest",
    "ingest_paths": "agent_retrieval.search.retrieval",
    "IngestReport": "agent_retrieval.ingest",
    # the types public signatures use, and every error
    "SearchRequest": "agent_retrieval.models",
    "ChunkSearchRequest": "agent_retrieval.models",
    "SimilaritySearchRequest": "agent_retrieval.models",
    "RetrievalResult": "agent_retrieval.models",
    "Hit": "agent_retrieval.models",
    "Document": "agent_retrieval.models",
    "Chunk": "agent_retrieval.models",
    "QueryEmbedding": "agent_retrieval.hyde",
    "Embedder": "agent_retrieval.providers.embeddings",
    "Store": "agent_retrieval.stores.base",
    "PostgresStore": "agent_retrieval.stores.postgres",
    "SupabaseStore": "agent_retrieval.stores.supabase",
    "AgentRetrievalError": "agent_retrieval.errors",
    "ConfigError": "agent_retrieval.errors",
    "InvalidRequest": "agent_retrieval.errors",
    "EmbeddingError": "agent_retrieval.errors",
    "EmbeddingModelMismatch": "agent_retrieval.errors",
    "DimensionMismatch": "agent_retrieval.errors",
    "StoreError": "agent_retrieval.errors",
    "StoreUnavailable": "agent_retrieval.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'agent_retrieval' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
