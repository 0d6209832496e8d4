"""Ingestion: documents -> chunks -> embeddings -> store, embedding only what changed; and re-embedding.

Documents come from files through loaders.py, or from code.

Every chunk is embedded as "heading path + content" (the heading path starts with the title), every
document as "title + lead". A vector already stored for the same text and model is reused, so
re-running on unchanged input embeds nothing. Each batch of documents is written, with all its
chunks, in one transaction: a crash leaves whole documents or none. A batch with many texts to embed (a
large file) is written once its first part is embedded, and its other vectors are committed part by part,
so an interrupted ingest keeps what it embedded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ValidationError

from agent_retrieval.context import Context
from agent_retrieval.core.progress import bar as progress_bar
from agent_retrieval.core.redaction import fingerprint
from agent_retrieval.core.steps import Call, Steps
from agent_retrieval.core.text import counted, has_words
from agent_retrieval.errors import AgentRetrievalError, EmbeddingError, InvalidRequest, StoreError
from agent_retrieval.ingest.chunking import (
    chunk_document,
    chunk_text,
    content_fingerprint,
    digest,
    document_text,
)
from agent_retrieval.ingest.turns import NoTurn, shared_turns
from agent_retrieval.ingest.worker import CALLER_CHUNKING_SECONDS, chunked_apart
from agent_retrieval.models import Chunk, Document, IndexDocumentRequest, Level, explain
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.stores.base import Store, check_rows

log = logging.getLogger(__name__)
T = TypeVar("T")

DOCUMENTS_PER_BATCH = 32
TEXTS_PER_PART = 512  # texts embedded between commits when one batch (a large file) holds more


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
    skipped_files: list[str] = field(default_factory=list)  # could not be loaded, each with its reason
    unsupported_files: list[str] = field(default_factory=list)  # of other types, in the folders given
    wordless_files: list[str] = field(default_factory=list)  # with no words of their own, in the folders
    left_out: list[str] = field(default_factory=list)  # build folders, tool files, .gitignore's entries
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (old id, new id): same file or content
    removed: list[str] = field(default_factory=list)  # ids whose files are gone (ingest_paths with prune)

    def summary(self) -> str:
        chunks = counted(self.chunks, "chunk")
        text = (
            f"{counted(self.documents, 'document')}: {self.written:,} written ({chunks}), "
            f"{self.unchanged:,} unchanged; {counted(self.embedded, 'text')} embedded, "
            f"{counted(self.reused, 'vector')} reused"
        )
        if self.renamed:
            text += f"; {len(self.renamed):,} renamed"
        if self.removed:
            text += f"; {len(self.removed):,} removed"
        if self.unembedded:
            text += (
                f"; {counted(self.unembedded, 'text')} left unembedded (run `agent-retrieval reembed` later)"
            )
        return text


def ingest(
    documents: Iterable[Document],
    store: Store,
    embedder: Embedder,
    context: Context | None = None,
    *,
    progress: bool = True,
    on_batch: Callable[[IngestReport], None] | None = None,
    public: bool = False,
    refresh_indexes: bool = True,
    chunk_seconds: float | None = None,
) -> IngestReport:
    """Write documents and their chunks, embedding only texts whose (text, model) has no stored vector.

    If embedding fails (provider down), rows are stored without vectors, keyword search finds them at
    once, and `reembed` adds the vectors later: nothing is lost. `public` publishes what this call writes
    to every tenant and to anonymous readers (Postgres and Supabase): the operator's explicit act, never a
    document's own metadata. Without it documents are written private, an earlier published version too.
    At the end the store's own indexes are brought up to date (`Store.refresh_indexes`: on a large embedded
    store, minutes the first time); `refresh_indexes=False` leaves that to searches, which do a little.
    With `chunk_seconds`, documents are chunked in a process of their own, stopped after that long
    (ingest.worker): what a server does with a caller's text.
    """
    context = context or Context()
    if mismatch := store.model_mismatch(embedder.model_id):
        raise mismatch
    unique: dict[str, Document] = {}
    for doc in documents:
        if doc.id in unique:
            log.warning("document id %r appears twice; the later one (%s) is kept", doc.id, doc.source)
        unique[doc.id] = doc
    report = IngestReport(documents=len(unique))
    docs = [doc for doc in unique.values() if _storable(doc, [], report)]
    for doc in docs:
        doc.content_hash = content_fingerprint(doc, context)
        doc.public = public
    store.check_public(docs)
    states = store.document_states([d.id for d in docs])
    todo = [
        d
        for d in docs
        if (state := states.get(d.id)) is None
        or (state.content_hash, state.embedded, state.public) != (d.content_hash, True, d.public)
    ]
    report.unchanged = len(docs) - len(todo)
    # Chunked up front, so the bar counts texts (a document and each of its chunks): it moves while one large
    # file is embedded, not only when a batch of documents is stored.
    size, overlap = context.ingest.chunk_size, context.ingest.chunk_overlap
    if chunk_seconds is None:
        chunked = [chunk_document(doc, size, overlap) for doc in todo]
    else:
        chunked = chunked_apart(todo, size, overlap, chunk_seconds)
    planned = [
        (doc, doc_chunks)
        for doc, doc_chunks in zip(todo, chunked, strict=True)
        if _storable(doc, doc_chunks, report)  # its chunk ids are longer than its own
    ]
    bar = progress_bar(sum(1 + len(c) for _, c in planned), unit="text", desc="ingest", enabled=progress)
    with bar:
        for start in range(0, len(planned), DOCUMENTS_PER_BATCH):
            batch = [doc for doc, _ in planned[start : start + DOCUMENTS_PER_BATCH]]
            chunks = [chunk for _, c in planned[start : start + DOCUMENTS_PER_BATCH] for chunk in c]
            try:
                _write(batch, chunks, store, embedder, report, bar.update)
            except StoreError as error:
                # Each batch commits whole, so what was stored is complete and a re-run only adds the rest.
                # The error keeps its class: StoreUnavailable tells a caller that retrying may work.
                raise type(error)(
                    f"{error}. Stopped after storing {report.written} of the {len(todo)} documents this "
                    "ingest had to write: once that is fixed, run the same ingest again to finish "
                    "(stored documents are skipped and their vectors kept)"
                ) from error
            report.written += len(batch)
            report.chunks += len(chunks)
            if on_batch:
                on_batch(report)
    if refresh_indexes:
        store.refresh_indexes(progress=progress)
    return report


# Sources of documents a caller wrote (an agent's index_document, a run of the indexer graph): such a writer
# may replace what callers wrote before, never what the operator ingested or published.
REQUEST_SOURCES = ("index_document", "indexer")
# What one tool call or indexer run may write: enough for a manual, not enough to hold a server's CPU for
# minutes while other users wait.
MAX_CALLER_DOCUMENTS = 100
MAX_CALLER_CHARS = 2_000_000
DOCUMENT_FIELDS = tuple(IndexDocumentRequest.model_fields)


def ingest_for_caller(
    items: Sequence[tuple[str, Any]], store: Store, embedder: Embedder, context: Context, *, source: str
) -> IngestReport:
    """The one way a caller's documents reach the store (index_document, the indexer graph, and whatever a
    thread's state holds when the indexer reads it): untrusted, so checked here, where they are written.

    Each item is (where, value): `where` names it in error lines ("documents[2]") and in its source
    (`source` and `where`, one of REQUEST_SOURCES). A value must be an IndexDocumentRequest's fields (title,
    content, optional metadata and id; no reserved metadata); it is written private, and never in place of
    a document the operator ingested or published. Past MAX_CALLER_DOCUMENTS documents or MAX_CALLER_CHARS
    characters the rest are refused. Callers' writes take turns (turns.Turns) and embed for at most
    `caller_write_seconds`, the rest stored without vectors. Each refused item is one line of the report's
    errors, in order, before the ingest's own; a store or embedder that stops the ingest adds a last line
    ("ingest stopped: ..."), and what was written before it stays counted."""
    if source.split(" ", 1)[0] not in REQUEST_SOURCES:
        raise ValueError(f"a caller's documents are recorded under one of {REQUEST_SOURCES} (got {source!r})")
    named, refused = _caller_documents(items, source)  # their fields, sizes and counts: cheap
    if refusal := store.write_refusal:  # known before a document is chunked
        return IngestReport(documents=len(items), errors=[*refused, f"not written: {refusal}"])
    written = IngestReport()

    def note(report: IngestReport) -> None:
        nonlocal written
        written = report

    seconds = context.ingest.caller_write_seconds
    writer = (context.store.tenant_id, fingerprint(context.store.supabase_user_token.get_secret_value()))
    try:
        with shared_turns().turn(writer, seconds):
            protected = set(protected_ids(store, [d for _, d in named])) if named else set()
            refused += [
                _line(
                    where,
                    f"id {d.id!r} names a document a caller may not replace (the store's operator "
                    "ingested or published it); give another id or title",
                )
                for where, d in named
                if d.id in protected
            ]
            if kept := [d for _, d in named if d.id not in protected]:
                timed = _Timed(embedder, seconds)
                # A caller's write never builds an index: that could hold the server for minutes.
                written = ingest(
                    kept,
                    store,
                    timed,
                    context,
                    progress=False,
                    on_batch=note,
                    refresh_indexes=False,
                    chunk_seconds=CALLER_CHUNKING_SECONDS,
                )
    except NoTurn as refusal:
        written.errors.append(f"not written: {refusal}; try again once it is done")
    except AgentRetrievalError as error:  # the batches written before it are kept, and counted
        written.errors.append(f"ingest stopped: {error}")
    written.documents = len(items)
    written.errors[:0] = refused
    return written


def _caller_documents(
    items: Sequence[tuple[str, Any]], source: str
) -> tuple[list[tuple[str, Document]], list[str]]:
    """The items that are documents a caller may write, as (where, Document), within one run's bounds; and
    a line for each that is not."""
    named: list[tuple[str, Document]] = []
    refused: list[str] = []
    characters = 0
    for where, value in items:
        if len(named) == MAX_CALLER_DOCUMENTS:
            refused.append(
                _line(where, f"not written: one run writes at most {MAX_CALLER_DOCUMENTS} documents")
            )
            continue
        try:
            request = _caller_request(value)
        except InvalidRequest as error:
            refused.append(_line(where, str(error)))
            continue
        if characters + len(request.content) > MAX_CALLER_CHARS:
            refused.append(
                _line(
                    where,
                    f"not written: one run writes at most {MAX_CALLER_CHARS:,} characters of text; index "
                    "the rest in another run",
                )
            )
            continue
        characters += len(request.content)
        named.append((where, request.document(source=" ".join(part for part in (source, where) if part))))
    return named, refused


class _Timed(Embedder):
    """The embedder of one caller's write, which stops embedding once its time is spent (between batches):
    the ingest then stores the rest without vectors, as it does when a provider fails."""

    def __init__(self, embedder: Embedder, seconds: float):
        super().__init__(
            embedder.embeddings, embedder.model_id, batch_size=embedder.batch_size, endpoint=embedder.endpoint
        )
        self.seconds, self.deadline = seconds, time.monotonic() + seconds

    def _provider(self, step: Call[T]) -> Steps[T]:
        if time.monotonic() > self.deadline:
            raise EmbeddingError(
                f"the {self.seconds:g} s one caller's write may embed for are spent (caller_write_seconds)"
            )
        return (yield from super()._provider(step))


def _line(where: str, problem: str) -> str:
    return f"{where}: {problem}" if where else problem


def _caller_request(value: Any) -> IndexDocumentRequest:
    """One document a caller gave, as an IndexDocumentRequest, or InvalidRequest saying what is wrong."""
    if not isinstance(value, dict):
        raise InvalidRequest(f'must be an object with "title" and "content" (got {type(value).__name__})')
    unknown = [str(key)[:60] for key in value if key not in DOCUMENT_FIELDS]
    if unknown:
        raise InvalidRequest(
            f"unknown field(s) {', '.join(unknown)}; a document has {', '.join(DOCUMENT_FIELDS)}"
        )
    try:
        return IndexDocumentRequest.model_validate(value)
    except ValidationError as error:
        raise InvalidRequest(explain(error).removeprefix("Invalid arguments: ")) from None


def protected_ids(store: Store, documents: Sequence[Document]) -> list[str]:
    """The ids among `documents` that a caller may not replace: published documents, and documents the
    operator ingested (from files, or from code)."""
    states = store.document_states([d.id for d in documents])
    return [
        doc_id
        for doc_id, state in states.items()
        if state.public or (state.source or "").split(" ", 1)[0] not in REQUEST_SOURCES
    ]


def _storable(document: Document, chunks: Sequence[Chunk], report: IngestReport) -> bool:
    """Whether the store can hold the document (and these chunks of it); if not, it is skipped with a note
    saying why (a NUL in a text file, an id too long to name), so one bad document never stops an ingest.
    The rule is the store's own (check_rows), and a document with no words is nothing to find."""
    try:
        if not has_words(document.content):
            raise InvalidRequest("empty: no words to index")
        check_rows([document], chunks)
    except InvalidRequest as error:
        message = f"{document.source or document.id!r}: skipped: {error}"
        log.warning(message)
        report.errors.append(message)
        return False
    return True


def embed_rows(
    rows: Sequence[Document | Chunk],
    store: Store,
    embedder: Embedder,
    report: IngestReport,
    on_texts: Callable[[int], None] | None = None,
) -> None:
    """Give each row its `text_hash` and `embedding`: a vector stored for the same text and model is reused,
    and each other text is embedded once. Counts both in `report`; `on_texts` hears how many rows are done as
    they are (reused at once, embedded batch by batch). Raises EmbeddingError when the provider fails,
    leaving the embedding of every row it did not reach None."""
    missing = _reuse_stored(rows, store, embedder, report, on_texts)
    _embed_missing(rows, missing, embedder, report, on_texts)


def _reuse_stored(
    rows: Sequence[Document | Chunk],
    store: Store,
    embedder: Embedder,
    report: IngestReport,
    on_texts: Callable[[int], None] | None = None,
) -> dict[str, str]:
    """Give each row its `text_hash`, and the stored vector of the same text and model if there is one;
    returns the texts still to embed (text hash -> text)."""
    texts = [document_text(r) if isinstance(r, Document) else chunk_text(r) for r in rows]
    for row, text in zip(rows, texts, strict=True):
        row.text_hash = digest(text)
    known = store.vectors_by_hash([r.text_hash for r in rows], embedder.model_id)
    missing: dict[str, str] = {}
    for row, text in zip(rows, texts, strict=True):
        row.embedding = known.get(row.text_hash)
        if row.embedding is None:
            missing.setdefault(row.text_hash, text)
    reused = len(rows) - sum(1 for r in rows if r.embedding is None)
    report.reused += reused
    if on_texts:
        on_texts(reused)
    return missing


def _embed_missing(
    rows: Sequence[Document | Chunk],
    missing: dict[str, str],
    embedder: Embedder,
    report: IngestReport,
    on_texts: Callable[[int], None] | None = None,
) -> None:
    """Embed each missing text once and give it to every row holding it, a batch at a time: when the provider
    fails (EmbeddingError) or a caller's write runs out of time, the batches before keep their vectors."""
    if not missing:
        return
    done = on_texts or (lambda count: None)
    holding: dict[str, list[Document | Chunk]] = {}
    for row in rows:
        if row.embedding is None and row.text_hash in missing:
            holding.setdefault(row.text_hash, []).append(row)
    texts = list(missing.items())
    for start in range(0, len(texts), embedder.batch_size):
        batch = texts[start : start + embedder.batch_size]
        vectors = embedder.embed_documents([text for _, text in batch], on_batch=done)
        report.embedded += len(batch)
        for (text_hash, _), vector in zip(batch, vectors, strict=True):
            for row in holding[text_hash]:
                row.embedding = vector
    # Rows repeating a text embedded here count as reused: embedded + reused counts rows, as the bar does.
    repeats = sum(len(held) for held in holding.values()) - len(missing)
    report.reused += repeats
    done(repeats)


def _write(
    documents: list[Document],
    chunks: list[Chunk],
    store: Store,
    embedder: Embedder,
    report: IngestReport,
    on_texts: Callable[[int], None],
) -> None:
    """Embed and store a batch, whole. A batch of more than TEXTS_PER_PART texts to embed (a large file) is
    stored once its first part is embedded, then embedded part by part, each part's vectors committed: an
    interrupted ingest keeps what it embedded, and running it again embeds only the rest. A provider failure
    leaves the rows it did not reach unembedded, for keyword search now and `reembed` later."""
    rows: list[Document | Chunk] = [*documents, *chunks]
    missing = _reuse_stored(rows, store, embedder, report, on_texts)
    texts = list(missing.items())
    parts = [dict(texts[i : i + TEXTS_PER_PART]) for i in range(0, len(texts), TEXTS_PER_PART)]
    failed = not _embed_part(rows, parts[0] if parts else {}, embedder, report, on_texts)
    store.upsert(documents, chunks, embedder.model_id)  # whole: keyword search finds every row at once
    for part in parts[1:]:
        if failed:
            break
        failed = not _embed_part(rows, part, embedder, report, on_texts)
        if done_documents := [d for d in documents if d.text_hash in part and d.embedding is not None]:
            store.set_embeddings("documents", done_documents, embedder.model_id)
        if done_chunks := [c for c in chunks if c.text_hash in part and c.embedding is not None]:
            store.set_embeddings("chunks", done_chunks, embedder.model_id)
    if failed:
        report.unembedded += len({r.text_hash for r in rows if r.embedding is None})


def _embed_part(
    rows: Sequence[Document | Chunk],
    part: dict[str, str],
    embedder: Embedder,
    report: IngestReport,
    on_texts: Callable[[int], None],
) -> bool:
    """Embed one part's texts; a provider failure is noted in `report` and answered False."""
    try:
        _embed_missing(rows, part, embedder, report, on_texts)
    except EmbeddingError as error:
        message = f"embedding failed ({error}); rows stored without vectors"
        log.warning(message)
        report.errors.append(message)
        return False
    return True


def reembed(
    store: Store, embedder: Embedder, *, batch_size: int = 256, progress: bool = True
) -> IngestReport:
    """Give every row a vector from `embedder`: backfill missing ones, replace another model's.

    Until every row has a new vector, vector search serves only rows still holding the declared
    model's vectors (keyword search serves all); then the store declares the new model.
    """
    report = IngestReport()
    stats = store.stats()
    dimension = None
    levels: list[Level] = ["documents", "chunks"]
    declared = store.embedding_model()
    pending = (
        stats.documents + stats.chunks
        if declared and declared[0] != embedder.model_id  # a new model: every row gets a new vector
        else stats.documents_missing_embeddings + stats.chunks_missing_embeddings
    )
    with progress_bar(pending, unit="text", desc="reembed", enabled=progress) as bar:
        for level in levels:
            while rows := store.pending_embeddings(level, embedder.model_id, batch_size):
                embed_rows(rows, store, embedder, report, bar.update)
                dimension = len(rows[-1].embedding)
                store.set_embeddings(level, rows, embedder.model_id)
    current = store.embedding_model()
    if dimension is not None and current != (embedder.model_id, dimension):
        store.set_embedding_model(embedder.model_id, dimension)
    store.refresh_indexes(progress=progress)
    report.documents = stats.documents
    report.chunks = stats.chunks
    return report
