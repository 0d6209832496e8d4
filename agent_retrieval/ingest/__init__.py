"""Ingestion: files to documents (loaders, each format as markdown in formats), documents to chunks
(chunking), chunks embedded and written, only what changed (pipeline), and a folder kept in step (sync).

The pipeline's names are exported here; loaders and sync are imported where they are used, so a caller
that only ingests documents from code loads no file readers.
"""

from agent_retrieval.ingest.chunking import (
    DOCUMENT_LEAD_CHARS,
    chunk_document,
    chunk_text,
    content_fingerprint,
    document_text,
)
from agent_retrieval.ingest.pipeline import (
    DOCUMENTS_PER_BATCH,
    MAX_CALLER_CHARS,
    MAX_CALLER_DOCUMENTS,
    REQUEST_SOURCES,
    TEXTS_PER_PART,
    IngestReport,
    embed_rows,
    ingest,
    ingest_for_caller,
    protected_ids,
    reembed,
)

__all__ = [
    "DOCUMENTS_PER_BATCH",
    "DOCUMENT_LEAD_CHARS",
    "MAX_CALLER_CHARS",
    "MAX_CALLER_DOCUMENTS",
    "REQUEST_SOURCES",
    "TEXTS_PER_PART",
    "IngestReport",
    "chunk_document",
    "chunk_text",
    "content_fingerprint",
    "document_text",
    "embed_rows",
    "ingest",
    "ingest_for_caller",
    "protected_ids",
    "reembed",
]
