"""What a document becomes in the store: chunks split at its headings and then by size, each knowing its
heading path; the texts documents and chunks are embedded as; and the hashes that say when they changed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from langchain_text_splitters import RecursiveCharacterTextSplitter

from agent_retrieval.context import Context
from agent_retrieval.ingest.formats import markdown_sections
from agent_retrieval.ingest.sitemarkup import without_attributes
from agent_retrieval.models import Chunk, Document

DOCUMENT_LEAD_CHARS = 1000  # a document is embedded by its title and opening; chunks carry the rest
MAX_HEADING_CHARS = 300  # of one heading in a chunk's heading path


def chunk_document(document: Document, chunk_size: int = 1000, chunk_overlap: int = 150) -> list[Chunk]:
    """Split a document by its markdown headings, then by size; each chunk knows its heading path."""
    splitter = RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    chunks: list[Chunk] = []
    for found, text in markdown_sections(document.content):
        headings = [_heading_words(heading) for heading in found]
        if headings and headings[0] == document.title:
            headings = headings[1:]
        heading_path = " > ".join(part for part in [document.title, *headings] if part)
        for piece in splitter.split_text(text):
            if piece.strip():
                chunks.append(
                    Chunk(
                        id=f"{document.id}#{len(chunks)}",
                        document_id=document.id,
                        ordinal=len(chunks),
                        content=piece.strip(),
                        heading_path=heading_path,
                        metadata=dict(document.metadata),
                    )
                )
    return chunks


def _heading_words(heading: str) -> str:
    """A heading as its chunks' heading path shows it: its words, one space apart, at most
    MAX_HEADING_CHARS (every chunk of the section carries a copy, so a 200,000-character heading line would
    be stored a thousand times over), without the attribute list or anchor id that ends it."""
    words = " ".join(without_attributes(heading).split())
    return words if len(words) <= MAX_HEADING_CHARS else words[: MAX_HEADING_CHARS - 1] + "…"


def document_text(document: Document) -> str:
    """What a document is embedded as: its title and lead (the lead alone for an untitled text, as LangChain
    vector stores add them)."""
    lead = document.content[:DOCUMENT_LEAD_CHARS]
    return f"{document.title}\n\n{lead}" if document.title else lead


def chunk_text(chunk: Chunk) -> str:
    """What a chunk is embedded as: its heading path (title first) and content."""
    return f"{chunk.heading_path}\n\n{chunk.content}" if chunk.heading_path else chunk.content


def content_fingerprint(document: Document, context: Context) -> str:
    """What a document's `content_hash` records: all that decides its stored rows, except a title taken from
    its file's name, so a renamed file is found by its content (sync)."""
    title = "" if document.title_from_name else document.title
    sizes = context.ingest
    return digest(title, document.content, document.metadata, sizes.chunk_size, sizes.chunk_overlap)


def digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
