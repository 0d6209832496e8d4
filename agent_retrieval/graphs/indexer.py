"""The indexer graph: documents pasted in, or files and folders named, chunked, embedded and stored.

In LangGraph Studio, give `documents` ({"title", "content", optional "id" and "metadata"} each) and/or
`paths` (files or folders on the server). Bad items are reported in `errors`, one line each, and the
rest are still ingested.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from pydantic import ValidationError

from agent_retrieval.context import Context, RunSettings
from agent_retrieval.errors import AgentRetrievalError, InvalidRequest
from agent_retrieval.graph_parts import GraphParts, run_context
from agent_retrieval.ingest import IngestReport, ingest, protected_ids
from agent_retrieval.loaders import SUPPORTED_SUFFIXES, load_documents
from agent_retrieval.models import Document, IndexDocumentRequest, explain
from agent_retrieval.retrieval import Retrieval

DOCUMENT_FIELDS = tuple(IndexDocumentRequest.model_fields)


@dataclass(kw_only=True)
class InputState:
    """What a run is given: documents to paste in, paths to load, or both."""

    documents: list[dict[str, Any]] = field(default_factory=list)
    """Documents as objects: {"title": ..., "content": ...}, optionally "id" (default: made from the title,
    so the same title replaces its earlier version) and "metadata" (flat {"key": value} facts)."""

    paths: list[str] = field(default_factory=list)
    """Files or folders on the server (folders are searched recursively) in the supported formats:
    .md, .markdown, .txt, .html, .htm, .jsonl, .pdf; a server run may name only what lies inside the
    operator's AGENT_RETRIEVAL_INGEST_ROOT."""


@dataclass(kw_only=True)
class OutputState:
    """What a run answers."""

    report: dict[str, Any] = field(default_factory=dict)
    """What the ingest did: documents, written, unchanged, chunks, embedded, reused, unembedded."""

    errors: list[str] = field(default_factory=list)
    """One line per item that was not ingested (which item, which field, what is allowed), and any
    store or embedding problem."""


@dataclass(kw_only=True)
class State(InputState, OutputState):
    """The indexer's working state."""

    pending: list[dict[str, Any]] = field(default_factory=list)
    """The valid documents, waiting to be ingested (plain dicts, so any checkpointer can store them)."""


async def collect_documents(state: State, runtime: Runtime[RunSettings]) -> dict[str, Any]:
    """Validate the pasted documents and load the paths; every bad item becomes one line in `errors`."""
    errors: list[str] = []
    items, paths = _listed("documents", state.documents, errors), _listed("paths", state.paths, errors)
    documents = _pasted_documents(items, errors)
    root = _file_root(runtime) if paths else None
    for number, raw in enumerate(paths):
        try:
            # Reading files (and parsing PDFs) blocks: a worker thread keeps the event loop free.
            found, skipped = await asyncio.to_thread(_load_path, raw, root)
        except AgentRetrievalError as error:
            errors.append(f"paths[{number}]: {error}")
            continue
        documents += found
        errors += [f"paths[{number}]: {problem}" for problem in skipped]
    if not items and not paths:
        errors.append(
            'Nothing to index: give "documents" (a list of {"title", "content"} objects) and/or '
            '"paths" (a list of files or folders to load).'
        )
    # The inputs are consumed, so a later run on the same thread starts from its own input only.
    return {"pending": [asdict(d) for d in documents], "errors": errors, "documents": [], "paths": []}


def _listed(name: str, value: Any, errors: list[str]) -> list[Any]:
    """The input list; anything else (Studio may send null or a single string) is an error line."""
    if isinstance(value, list) or value is None:
        return value or []
    errors.append(f"{name}: must be a list (got {type(value).__name__})")
    return []


def _pasted_documents(items: list[Any], errors: list[str]) -> list[Document]:
    documents: list[Document] = []
    for number, item in enumerate(items):
        where = f"documents[{number}]"
        if not isinstance(item, dict):
            errors.append(
                f'{where}: must be an object with "title" and "content" (got {type(item).__name__})'
            )
            continue
        unknown = [str(key) for key in item if key not in DOCUMENT_FIELDS]
        if unknown:
            errors.append(
                f"{where}: unknown field(s) {', '.join(unknown)}; a document has {', '.join(DOCUMENT_FIELDS)}"
            )
            continue
        try:
            documents.append(IndexDocumentRequest.model_validate(item).document(source=f"indexer {where}"))
        except ValidationError as error:
            errors.append(f"{where}: {explain(error).removeprefix('Invalid arguments: ')}")
    return documents


def _file_root(runtime: Runtime[RunSettings]) -> Path | Literal[False] | None:
    """Where a run may load files from: anywhere for code that passed its own Context, else only inside
    the operator's ingest_root (False: nowhere), since a server run's caller names the paths."""
    if isinstance(runtime.context, Context):
        return None
    root = run_context(runtime).ingest_root
    return Path(root) if root else False


def _load_path(raw: Any, root: Path | Literal[False] | None) -> tuple[list[Document], list[str]]:
    """The documents of one path, and a line for each file under it that could not be loaded."""
    if not isinstance(raw, str) or not raw.strip():
        # An empty path would mean the server's working directory: never load that by accident.
        raise InvalidRequest(f"must be a file or folder path (got {raw!r})")
    if root is False:
        raise InvalidRequest(
            "this server loads no files for its callers: its operator may allow a folder with "
            "AGENT_RETRIEVAL_INGEST_ROOT; paste the documents into `documents` instead"
        )
    skipped: list[str] = []
    documents = list(load_documents([raw.strip()], root=root, skipped=skipped))
    if not documents and not skipped:
        raise InvalidRequest(f"{raw}: no documents found (supported: {', '.join(SUPPORTED_SUFFIXES)})")
    return documents, skipped


def _ingest(documents: list[Document], retrieval: Retrieval) -> tuple[IngestReport, list[str]]:
    """Ingest; if a batch fails, the counts of the batches already written are kept."""
    written = IngestReport(documents=len(documents))

    def note(report: IngestReport) -> None:
        nonlocal written
        written = report

    try:
        # Pasted documents are the caller's: they may not replace what the operator ingested or published.
        pasted = [d for d in documents if d.source and d.source.startswith("indexer")]
        protected = set(protected_ids(retrieval.store, pasted)) if pasted else set()
        refused = [
            f"{(d.source or '').removeprefix('indexer ')}: id {d.id!r} names a document the store's operator "
            "ingested or published; give another id or title"
            for d in pasted
            if d.id in protected
        ]
        kept = [d for d in documents if not (d.id in protected and d in pasted)]
        report = ingest(
            kept, retrieval.store, retrieval.embedder, retrieval.context, progress=False, on_batch=note
        )
    except AgentRetrievalError as error:
        return written, [f"ingest stopped: {error}"]
    return report, [*refused, *report.errors]


def _counts(report: IngestReport) -> dict[str, Any]:
    return {key: value for key, value in asdict(report).items() if isinstance(value, int)}  # lists apart


def build(
    parts: GraphParts = GraphParts(),
) -> CompiledStateGraph[State, RunSettings, InputState, OutputState]:
    """The indexer graph; `parts` may hold a shared Retrieval (tests, notebooks), else each run opens one."""

    async def ingest_documents(state: State, runtime: Runtime[RunSettings]) -> dict[str, Any]:
        """Chunk, embed and store the collected documents; a store or embedding failure is an error line."""
        if not state.pending:
            return {"report": _counts(IngestReport())}
        documents = [Document(**d) for d in state.pending]
        async with parts.open_retrieval(run_context(runtime)) as retrieval:
            # Chunking, embedding and writing all block: a worker thread keeps the event loop free.
            report, problems = await asyncio.to_thread(_ingest, documents, retrieval)
        return {"report": _counts(report), "errors": [*state.errors, *problems], "pending": []}

    builder = StateGraph(
        State, context_schema=RunSettings, input_schema=InputState, output_schema=OutputState
    )
    builder.add_node(collect_documents)
    builder.add_node(ingest_documents)
    builder.add_edge(START, "collect_documents")
    builder.add_edge("collect_documents", "ingest_documents")
    builder.add_edge("ingest_documents", END)
    compiled = builder.compile()
    compiled.name = "indexer"
    return compiled


graph = build()
