"""Ingestion: files -> documents -> chunks -> embeddings -> store, embedding only what changed; and re-embedding.

Every chunk is embedded as "heading path + content" (the heading path starts with the title), every
document as "title + lead". A vector already stored for the same text and model is reused, so
re-running on unchanged input embeds nothing. Each batch of documents is written, with all its
chunks, in one transaction: a crash leaves whole documents or none.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import yaml
from langchain_text_splitters import MarkdownHeaderTextSplitter, RecursiveCharacterTextSplitter
from tqdm import tqdm  # text bars: tqdm.auto warns in notebooks without ipywidgets

from agent_retrieval.context import Context
from agent_retrieval.embeddings import Embedder
from agent_retrieval.errors import EmbeddingError, EmbeddingModelMismatch, InvalidRequest, StoreError
from agent_retrieval.models import Chunk, Document, Level
from agent_retrieval.stores.base import Store

log = logging.getLogger(__name__)

SUPPORTED_SUFFIXES = (".md", ".markdown", ".txt", ".html", ".htm", ".jsonl", ".pdf")
DOCUMENT_LEAD_CHARS = 1000  # a document is embedded by its title and opening; chunks carry the rest
DOCUMENTS_PER_BATCH = 32
_HEADINGS = [("#", "h1"), ("##", "h2"), ("###", "h3")]


# --- loading ------------------------------------------------------------------------------------

def load_documents(paths: Iterable[str | Path]) -> Iterator[Document]:
    """Documents from files and folders (searched recursively for the supported suffixes).

    Ids are the path relative to the folder given, without suffix ("policies/fees"); a file given
    directly is named by its stem; JSONL records carry their own ids.
    """
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUPPORTED_SUFFIXES)
            for file in files:
                yield from load_file(file, file.relative_to(path).with_suffix("").as_posix())
        elif path.is_file():
            if path.suffix.lower() not in SUPPORTED_SUFFIXES:
                raise InvalidRequest(f"{path}: unsupported file type {path.suffix or '(none)'}; "
                                     f"supported: {', '.join(SUPPORTED_SUFFIXES)}")
            yield from load_file(path, path.stem)
        else:
            raise InvalidRequest(f"{path}: no such file or folder")


def load_file(path: Path, doc_id: str) -> list[Document]:
    """The documents in one file."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return list(_load_jsonl(path))
    if suffix == ".pdf":
        return [_load_pdf(path, doc_id)]
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest(f"{path}: not UTF-8 text") from None
    metadata: dict[str, Any] = {}
    if suffix in (".md", ".markdown"):
        metadata, text = _front_matter(path, text)
    elif suffix in (".html", ".htm"):
        title, text = _html_to_markdown(text)
        metadata = {"title": title} if title else {}
    title = str(metadata.pop("title", "") or _first_heading(text) or _name_as_title(path))
    doc_id = str(metadata.pop("id", doc_id))
    return [Document(id=doc_id, title=title, content=text.strip(), metadata=metadata, source=str(path))]


def _front_matter(path: Path, text: str) -> tuple[dict[str, Any], str]:
    match = re.match(r"^---\s*\n(.*?)\n---\s*(?:\n|$)", text, re.DOTALL)
    if not match:
        return {}, text
    try:
        data = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as error:
        raise InvalidRequest(f"{path}: front matter is not valid YAML ({error.problem})") from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"{path}: front matter must be a mapping of keys to values")
    return {str(k): _plain(v) for k, v in data.items()}, text[match.end():]


def _plain(value: Any) -> Any:
    """Metadata values as JSON types (YAML dates become ISO strings)."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _name_as_title(path: Path) -> str:
    """The title of a file that names none: its name, words apart."""
    return path.stem.replace("-", " ").replace("_", " ")


def _first_heading(text: str) -> str | None:
    match = re.search(r"^#\s+(.+?)\s*#*\s*$", text, re.MULTILINE)
    return match.group(1) if match else None


def jsonl_records(path: Path, error: type[InvalidRequest] = InvalidRequest) -> Iterator[tuple[str, Any]]:
    """Each non-blank line's JSON value with its place ("file:line"); `error` names the line that is not JSON."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as problem:
                raise error(f"{path}:{number}: not valid JSON ({problem.msg})") from None
            yield f"{path}:{number}", record


def _load_jsonl(path: Path) -> Iterator[Document]:
    for where, record in jsonl_records(path):
        if not isinstance(record, dict):
            raise InvalidRequest(f"{where}: each line must be a JSON object with id and text")
        doc_id, text = record.get("id", record.get("_id")), record.get("text")
        if doc_id in (None, "") or not isinstance(text, str):
            raise InvalidRequest(f"{where}: needs a non-empty 'id' and a string 'text' "
                                 "(optional: 'title', 'metadata')")
        metadata = record.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise InvalidRequest(f"{where}: 'metadata' must be an object")
        yield Document(id=str(doc_id), title=str(record.get("title") or doc_id), content=text.strip(),
                       metadata=_plain(metadata), source=where)


def _load_pdf(path: Path, doc_id: str) -> Document:
    """A PDF's text layer, page after page (scanned pages without text yield nothing: no OCR here)."""
    try:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError
    except ImportError:
        raise InvalidRequest(f"{path}: reading PDF needs the 'pdf' extra: pip install 'agent-retrieval[pdf]'") \
            from None
    try:
        reader = PdfReader(path)
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
        title = str((reader.metadata or {}).get("/Title") or "").strip()
    except (PdfReadError, ValueError, OSError) as error:
        raise InvalidRequest(f"{path}: not a readable PDF ({type(error).__name__})") from None
    text = "\n\n".join(p for p in pages if p)
    if not text:
        raise InvalidRequest(f"{path}: the PDF has no text layer (scanned pages need OCR first)")
    return Document(id=doc_id, title=title or _name_as_title(path), content=text,
                    metadata={"pages": len(pages)}, source=str(path))


class _HTMLText(HTMLParser):
    """Visible text of an HTML page, with h1-h3 turned into markdown headings for the chunker."""

    _SKIP = {"script", "style", "noscript", "template", "head"}
    _BLOCK = {"p", "div", "section", "article", "li", "tr", "br", "table", "ul", "ol", "pre", "blockquote",
              "h4", "h5", "h6"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skipping = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        if tag == "title":
            self._in_title = True
        elif tag in ("h1", "h2", "h3"):
            self.parts.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in self._BLOCK:
            self.parts.append("\n\n" if tag != "br" else "\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skipping = max(0, self._skipping - 1)
        if tag == "title":
            self._in_title = False
        elif tag in ("h1", "h2", "h3") or tag in self._BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skipping:
            self.parts.append(re.sub(r"\s+", " ", data))


def _html_to_markdown(html: str) -> tuple[str, str]:
    parser = _HTMLText()
    parser.feed(html)
    parser.close()
    text = re.sub(r"[ \t]*\n[ \t]*", "\n", "".join(parser.parts))
    return " ".join(parser.title.split()), re.sub(r"\n{3,}", "\n\n", text).strip()


# --- chunking and embedding text ------------------------------------------------------------------

def chunk_document(document: Document, chunk_size: int = 1000, chunk_overlap: int = 150) -> list[Chunk]:
    """Split a document by its markdown headings, then by size; each chunk knows its heading path."""
    sections = MarkdownHeaderTextSplitter(_HEADINGS, strip_headers=True).split_text(document.content)
    splitter = RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    chunks: list[Chunk] = []
    for section in sections:
        headings = [section.metadata[key] for _, key in _HEADINGS if section.metadata.get(key)]
        if headings and headings[0] == document.title:
            headings = headings[1:]
        heading_path = " > ".join([document.title, *headings])
        for piece in splitter.split_text(section.page_content):
            if piece.strip():
                chunks.append(Chunk(id=f"{document.id}#{len(chunks)}", document_id=document.id,
                                    ordinal=len(chunks), content=piece.strip(), heading_path=heading_path,
                                    metadata=dict(document.metadata)))
    return chunks


def document_text(document: Document) -> str:
    """What a document is embedded as: its title and lead."""
    return f"{document.title}\n\n{document.content[:DOCUMENT_LEAD_CHARS]}"


def chunk_text(chunk: Chunk) -> str:
    """What a chunk is embedded as: its heading path (title first) and content."""
    return f"{chunk.heading_path}\n\n{chunk.content}"


def _hash(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


# --- ingesting ------------------------------------------------------------------------------------

@dataclass
class IngestReport:
    """What an ingest or re-embed did."""

    documents: int = 0
    unchanged: int = 0
    written: int = 0
    chunks: int = 0
    embedded: int = 0
    reused: int = 0
    unembedded: int = 0
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = (f"{self.documents} documents: {self.written} written ({self.chunks} chunks), "
                f"{self.unchanged} unchanged; {self.embedded} texts embedded, {self.reused} vectors reused")
        if self.unembedded:
            text += f"; {self.unembedded} texts left unembedded (run `agent-retrieval reembed` later)"
        return text


def ingest(documents: Iterable[Document], store: Store, embedder: Embedder, context: Context | None = None, *,
           progress: bool = True, on_batch: Callable[[IngestReport], None] | None = None,
           public: bool = False) -> IngestReport:
    """Write documents and their chunks, embedding only texts whose (text, model) has no stored vector.

    If embedding fails (provider down), rows are stored without vectors, keyword search finds them at
    once, and `reembed` adds the vectors later: nothing is lost. `public` publishes what this call writes
    to every tenant and to anonymous readers (Postgres and Supabase): the operator's explicit act, never a
    document's own metadata. Without it documents are written private, an earlier published version too.
    """
    context = context or Context()
    _check_model(store, embedder)
    unique: dict[str, Document] = {}
    for doc in documents:
        if doc.id in unique:
            log.warning("document id %r appears twice; the later one (%s) is kept", doc.id, doc.source)
        unique[doc.id] = doc
    report = IngestReport(documents=len(unique))
    docs = list(unique.values())
    for doc in docs:
        doc.content_hash = _hash(doc.title, doc.content, doc.metadata, context.chunk_size, context.chunk_overlap)
        doc.public = public
    store.check_public(docs)
    states = store.document_states([d.id for d in docs])
    todo = [d for d in docs if (state := states.get(d.id)) is None
            or (state.content_hash, state.embedded, state.public) != (d.content_hash, True, d.public)]
    report.unchanged = len(docs) - len(todo)
    bar = tqdm(total=len(todo), unit="doc", desc="ingest", disable=not progress or len(todo) < 2)
    for start in range(0, len(todo), DOCUMENTS_PER_BATCH):
        batch = todo[start:start + DOCUMENTS_PER_BATCH]
        chunks = [c for d in batch for c in chunk_document(d, context.chunk_size, context.chunk_overlap)]
        _embed_rows(batch, chunks, store, embedder, report)
        try:
            store.upsert(batch, chunks, embedder.model_id)
        except StoreError as error:
            bar.close()
            # Each batch commits whole, so what was stored is complete and a re-run only adds the rest.
            # The error keeps its class: StoreUnavailable tells a caller that retrying may work.
            raise type(error)(f"{error}. Stopped after storing {report.written} of the {len(todo)} documents this "
                             "ingest had to write: once that is fixed, run the same ingest again to finish "
                             "(stored documents are skipped and their vectors kept)") from error
        report.written += len(batch)
        report.chunks += len(chunks)
        bar.update(len(batch))
        if on_batch:
            on_batch(report)
    bar.close()
    return report


def _check_model(store: Store, embedder: Embedder) -> None:
    stored = store.embedding_model()
    if stored and stored[0] != embedder.model_id:
        raise EmbeddingModelMismatch(stored[0], stored[1], embedder.model_id, None)


def _embed_rows(documents: Sequence[Document], chunks: Sequence[Chunk], store: Store, embedder: Embedder,
                report: IngestReport) -> None:
    """Set text_hash and embedding on each row, reusing stored vectors; leave None if the provider fails."""
    rows: list[Document | Chunk] = [*documents, *chunks]
    texts = [document_text(d) for d in documents] + [chunk_text(c) for c in chunks]
    for row, text in zip(rows, texts):
        row.text_hash = _hash(text)
    known = store.vectors_by_hash([r.text_hash for r in rows], embedder.model_id)
    missing: dict[str, str] = {}
    for row, text in zip(rows, texts):
        row.embedding = known.get(row.text_hash)
        if row.embedding is None:
            missing.setdefault(row.text_hash, text)
    report.reused += len(rows) - sum(1 for r in rows if r.embedding is None)
    if not missing:
        return
    try:
        vectors = dict(zip(missing, embedder.embed_documents(list(missing.values()))))
    except EmbeddingError as error:
        message = f"embedding failed ({error}); rows stored without vectors"
        log.warning(message)
        report.errors.append(message)
        report.unembedded += len(missing)
        return
    report.embedded += len(missing)
    for row in rows:
        if row.embedding is None:
            row.embedding = vectors[row.text_hash]


def reembed(store: Store, embedder: Embedder, *, batch_size: int = 256, progress: bool = True) -> IngestReport:
    """Give every row a vector from `embedder`: backfill missing ones, replace another model's.

    Until every row has a new vector, vector search serves only rows still holding the declared
    model's vectors (keyword search serves all); then the store declares the new model.
    """
    report = IngestReport()
    stats = store.stats()
    total = stats.documents + stats.chunks
    bar = tqdm(total=total, unit="row", desc="reembed", disable=not progress or total < 2)
    dimension = None
    levels: list[tuple[Level, Callable[[Any], str]]] = [("documents", document_text), ("chunks", chunk_text)]
    for level, text_of in levels:
        while rows := store.pending_embeddings(level, embedder.model_id, batch_size):
            texts = [text_of(r) for r in rows]
            for row, text in zip(rows, texts):
                row.text_hash = _hash(text)
            known = store.vectors_by_hash([r.text_hash for r in rows], embedder.model_id)
            missing = list(dict.fromkeys(r.text_hash for r in rows if r.text_hash not in known))
            if missing:
                by_hash = {r.text_hash: t for r, t in zip(rows, texts)}
                known.update(zip(missing, embedder.embed_documents([by_hash[h] for h in missing])))
            for row in rows:
                row.embedding = known[row.text_hash]
                dimension = len(row.embedding)
            report.embedded += len(missing)
            report.reused += len(rows) - len(missing)
            store.set_embeddings(level, rows, embedder.model_id)
            bar.update(len(rows))
    bar.close()
    current = store.embedding_model()
    if dimension is not None and current != (embedder.model_id, dimension):
        store.set_embedding_model(embedder.model_id, dimension)
    report.documents = stats.documents
    report.chunks = stats.chunks
    return report
