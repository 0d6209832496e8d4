"""The indexer graph: documents pasted in, or files and folders named, chunked, embedded and stored.

In LangGraph Studio, give `documents` ({"title", "content", optional "id" and "metadata"} each) and/or
`paths` (files or folders on the server). Bad items are reported in `errors`, one line each, and the
rest are still ingested.

Everything it writes is a caller's document, checked where it is written (ingest.ingest_for_caller): on a
server a caller can write a thread's state at any node, so the one node reads its input and writes it in
one step, with nothing waiting in state between. The operator ingests with the CLI or `ingest()`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from agent_retrieval.context import Context, RunSettings
from agent_retrieval.errors import AgentRetrievalError, InvalidRequest, StoreError
from agent_retrieval.ingest import MAX_CALLER_DOCUMENTS, IngestReport, ingest_for_caller
from agent_retrieval.ingest.loaders import SUPPORTED_SUFFIXES, load_documents
from agent_retrieval.models import Document
from agent_retrieval.server.graph_parts import GraphParts, add_nodes, run_context

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class InputState:
    """What a run is given: documents to paste in, paths to load, or both."""

    documents: list[dict[str, Any]] = field(default_factory=list)
    """Documents as objects: {"title": ..., "content": ...}, optionally "id" (default: made from the title,
    so the same title replaces its earlier version) and "metadata" (flat {"key": value} facts)."""

    paths: list[str] = field(default_factory=list)
    """Files or folders on the server (folders are searched recursively) in the supported formats:
    markdown (.md, .mdx, .qmd), .rst, .adoc, .txt, .html, .jsonl, .pdf and more (`agent-retrieval ingest
    --help`); a server run may name only what lies inside the operator's AGENT_RETRIEVAL_INGEST_ROOT, relative
    to it."""


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
    """The indexer's state: its input (consumed by the run) and what it answers."""


NOTHING_TO_INDEX = (
    'Nothing to index: give "documents" (a list of {"title", "content"} objects) and/or '
    '"paths" (a list of files or folders to load).'
)


async def index_documents(
    state: State, runtime: Runtime[RunSettings], *, parts: GraphParts
) -> dict[str, Any]:
    """Check the pasted documents, load the paths, and write what passes; each bad item is one line in
    `errors`. The input is consumed, so a later run on the thread starts from its own input only."""
    errors: list[str] = []
    items = _listed("documents", state.documents, errors)
    paths = _listed("paths", state.paths, errors)
    given = [(f"documents[{number}]", item) for number, item in enumerate(items)]
    root = _file_root(runtime) if paths else None
    for number, raw in enumerate(paths[:MAX_CALLER_DOCUMENTS]):
        where = f"paths[{number}]"
        try:
            # Reading files (and parsing PDFs) blocks: a worker thread keeps the event loop free.
            found, skipped = await asyncio.to_thread(_load_path, raw, root)
        except AgentRetrievalError as error:
            errors.append(f"{where}: {_shown(str(error), root)}")
            continue
        given += [(f"{where}: {doc.id}", _as_request(doc)) for doc in found]
        errors += [f"{where}: {_shown(problem, root)}" for problem in skipped]
    if len(paths) > MAX_CALLER_DOCUMENTS:
        errors.append(f"paths: one run loads at most {MAX_CALLER_DOCUMENTS} paths; the rest were not read")
    consumed: dict[str, list[Any]] = {"documents": [], "paths": []}
    if not items and not paths:
        errors.append(NOTHING_TO_INDEX)
    if not given:
        return {"report": _counts(IngestReport()), "errors": errors, **consumed}
    try:
        async with parts.open_retrieval(run_context(runtime), writes=True) as retrieval:
            # Chunking, embedding and writing all block: a worker thread keeps the event loop free.
            report = await asyncio.to_thread(
                lambda: ingest_for_caller(
                    given, retrieval.store, retrieval.embedder, retrieval.context, source="indexer"
                )
            )
    except StoreError as error:
        # The cause names the operator's store (a path, a host): the log gets it, the caller a line.
        logger.warning("an indexer run wrote nothing: %s", error)
        failed = (
            f"nothing was written: the store failed ({type(error).__name__}); the server's log says why, "
            "and the same run may be sent again"
        )
        return {"report": _counts(IngestReport()), "errors": [*errors, failed], **consumed}
    return {"report": _counts(report), "errors": [*errors, *report.errors], **consumed}


def build(
    parts: GraphParts = GraphParts(),
) -> CompiledStateGraph[State, RunSettings, InputState, OutputState]:
    """The indexer graph; `parts` may hold a shared Retrieval (tests, notebooks), else each run opens one."""

    builder = StateGraph(
        State, context_schema=RunSettings, input_schema=InputState, output_schema=OutputState
    )
    add_nodes(builder, index_documents, parts=parts)
    builder.add_edge(START, "index_documents")
    builder.add_edge("index_documents", END)
    compiled = builder.compile()
    compiled.name = "indexer"
    return compiled


def _listed(name: str, value: Any, errors: list[str]) -> list[Any]:
    """The input list; anything else (Studio may send null or a single string) is an error line."""
    if isinstance(value, list) or value is None:
        return value or []
    errors.append(f"{name}: must be a list (got {type(value).__name__})")
    return []


def _file_root(runtime: Runtime[RunSettings]) -> Path | Literal[False] | None:
    """Where a run may load files from: anywhere for code that passed its own Context, else only inside
    the operator's ingest_root (False: nowhere), since a server run's caller names the paths."""
    if isinstance(runtime.context, Context):
        return None
    root = run_context(runtime).ingest.ingest_root
    return Path(root).expanduser().resolve() if root else False


def _load_path(raw: Any, root: Path | Literal[False] | None) -> tuple[list[Document], list[str]]:
    """The documents of one path, and a line for each file under it that could not be loaded. A server
    run's path is read relative to the ingest root."""
    if not isinstance(raw, str) or not raw.strip():
        # An empty path would mean the server's working directory: never load that by accident.
        raise InvalidRequest(f"must be a file or folder path (got {raw!r:.80})")
    if root is False:
        raise InvalidRequest(
            "this server loads no files for its callers: its operator may allow a folder with "
            "AGENT_RETRIEVAL_INGEST_ROOT; paste the documents into `documents` instead"
        )
    path = root / raw.strip() if root is not None else Path(raw.strip())
    skipped: list[str] = []
    documents = list(load_documents([path], root=root, skipped=skipped))
    if not documents and not skipped:
        raise InvalidRequest(f"{path}: no documents found (supported: {', '.join(SUPPORTED_SUFFIXES)})")
    return documents, skipped


def _shown(message: str, root: Path | Literal[False] | None) -> str:
    """A loader's message as a server run's caller may read it: paths relative to the ingest root, whose
    place on the server is the operator's to know."""
    if not isinstance(root, Path):
        return message
    return message.replace(f"{root}/", "").replace(str(root), "the ingest root")


def _as_request(document: Document) -> dict[str, Any]:
    """A loaded file as the fields a caller's document has: the write checks it like a pasted one."""
    request = {"id": document.id, "title": document.title, "content": document.content}
    return request | ({"metadata": document.metadata} if document.metadata else {})


def _counts(report: IngestReport) -> dict[str, Any]:
    return {key: value for key, value in asdict(report).items() if isinstance(value, int)}  # lists apart


graph = build()
