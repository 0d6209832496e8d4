"""Files and folders into a store, kept in step with them: stable ids, renames, and pruning what is gone.

A file's id is its path without suffix relative to the outermost folder it was ingested from ("policies/fees"
for policies/fees.md ingested from docs/). The store remembers that folder through the file's source (its
absolute path) and id, so ingesting a folder inside it later keeps the ids ("docs/policies" still gives
"policies/fees"), and ingesting a folder around it renames its files to ids relative to the new folder,
removing the old ids. Renaming embeds nothing: vectors are reused by text. A front matter `id:` names a page
within its folder and moves with the folder the same way; ids given whole (an `id:` holding "/", JSONL
records) are never changed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePath
from typing import Protocol

from agent_retrieval.context import Context
from agent_retrieval.ingest import IngestReport, content_fingerprint, ingest
from agent_retrieval.models import Document
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.stores.base import DocumentState, Store


class Target(Protocol):
    """Where files go (a Retrieval is one): its settings, its store, and the embedder, asked for only when
    something is to be written."""

    @property
    def context(self) -> Context: ...
    @property
    def store(self) -> Store: ...
    @property
    def embedder(self) -> Embedder: ...


def sync_paths(
    paths: Iterable[str | Path],
    target: Target,
    *,
    progress: bool = False,
    public: bool = False,
    prune: bool = False,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    follow_symlinks: bool = False,
    gitignore: bool = True,
    dry_run: bool = False,
) -> IngestReport:
    """Load files and folders into the target's store, kept in step with them (see the module's docstring):
    `Retrieval.ingest`, where the options are described."""
    from agent_retrieval.ingest.loaders import load_documents

    context, store = target.context, target.store

    skipped: list[str] = []
    unsupported: list[Path] = []
    wordless: list[str] = []  # a folder's templates, redirect stubs and include-only pages, with why
    # build folders, tool files (Sphinx's conf.py) and what .gitignore names: listed by a dry run
    left_out: list[Path] = []
    documents: list[Document] = []
    stored: dict[str, DocumentState] = {}  # what the store held under the paths given, before this ingest
    for raw in paths:
        given = Path(os.path.abspath(Path(raw).expanduser()))
        states = store.document_states(
            store.documents_from(str(given) + os.sep if given.is_dir() else str(given))
        )
        stored.update(states)
        loaded = list(
            load_documents(
                [raw],
                skipped=skipped,
                unsupported=unsupported,
                left_out=left_out,
                wordless=wordless,
                include=include,
                exclude=exclude,
                follow_symlinks=follow_symlinks,
                gitignore=gitignore,
                progress=progress,
            )
        )
        _name_by_root(loaded, given, states)
        documents += loaded
    if dry_run:
        report = _preview(store, documents, context)
    else:
        report = ingest(documents, store, target.embedder, context, progress=progress, public=public)
    _settle(store, documents, stored, report, prune=prune, delete=not dry_run)
    report.skipped_files = skipped
    report.unsupported_files = [str(path) for path in unsupported]
    report.wordless_files = wordless
    report.left_out = [str(path) for path in left_out]
    return report


def _preview(store: Store, documents: list[Document], context: Context) -> IngestReport:
    """What `ingest` would write of these documents, writing nothing."""
    unique = {doc.id: doc for doc in documents}
    for doc in unique.values():
        doc.content_hash = content_fingerprint(doc, context)
    states = store.document_states(list(unique))
    unchanged = sum(
        1
        for doc in unique.values()
        if (state := states.get(doc.id)) and state.content_hash == doc.content_hash
    )
    return IngestReport(documents=len(unique), written=len(unique) - unchanged, unchanged=unchanged)


def _name_by_root(loaded: list[Document], given: Path, stored: dict[str, DocumentState]) -> None:
    """Give each file loaded from `given` an absolute source and, if its id names its folder, the id
    relative to the outermost folder it was ingested from (see the module's docstring)."""
    folder = given if given.is_dir() else given.parent
    roots = [root for doc_id, state in stored.items() if (root := _root_of(doc_id, state.source))]
    outer = min((r for r in roots if folder.is_relative_to(r)), key=lambda r: len(r.parts), default=folder)
    for doc in loaded:
        if doc.source is None or _is_record(doc.source):
            continue
        doc.source = os.path.abspath(doc.source)
        file, name = PurePath(doc.source), PurePath(doc.id)
        if name.parent == file.relative_to(folder).parent:  # named within its folder, by its path or itself
            doc.id = (file.relative_to(outer).parent / name.name).as_posix()


def _root_of(doc_id: str, source: str | None) -> PurePath | None:
    """The folder a stored file was named from: its folder less its id's ("/d/policies/fees.md",
    "policies/fees" -> /d); None for a document whose id does not name its folder (an id written whole, a
    JSONL record)."""
    if not source or _is_record(source):
        return None
    folder, parts = PurePath(source).parent.parts, PurePath(doc_id).parent.parts
    if folder[len(folder) - len(parts) :] != parts:
        return None
    return PurePath(*folder[: len(folder) - len(parts)])


def _is_record(source: str) -> bool:
    """A JSONL record's source is its file and line ("/d/records.jsonl:3")."""
    return PurePath(source.rsplit(":", 1)[0]).suffix.lower() == ".jsonl" and ":" in source


def _settle(
    store: Store,
    documents: list[Document],
    stored: dict[str, DocumentState],
    report: IngestReport,
    *,
    prune: bool,
    delete: bool = True,
) -> None:
    """Delete the old ids of files now stored under new ones and, with `prune`, the documents whose files
    are gone; report each as renamed when its file or content lives on under another id. `stored` is what the
    store held before the ingest: the ingest wrote only the live ids, so the others' states are unchanged."""
    live = {doc.id for doc in documents}
    by_source = {doc.source: doc.id for doc in documents if doc.source}
    by_content = {doc.content_hash: doc.id for doc in documents if doc.content_hash}
    loaded_files = {_file_of(source) for source in by_source}
    gone: list[str] = []
    for doc_id, state in stored.items():
        if doc_id in live:
            continue
        source = state.source or ""
        if source in by_source:  # the same file, named anew (a folder around it was ingested)
            report.renamed.append((doc_id, by_source[source]))
        elif prune and (_file_of(source) in loaded_files or not os.path.exists(_file_of(source))):
            # its file is gone, or was read without it (a JSONL record no longer in its file); a file that
            # exists but failed to load keeps its documents
            if state.content_hash in by_content:  # the same text under another file name
                report.renamed.append((doc_id, by_content[state.content_hash]))
            else:
                report.removed.append(doc_id)
        else:
            continue
        gone.append(doc_id)
    if delete:
        store.delete_documents(gone)


def _file_of(source: str) -> str:
    """The file a document came from: its source, less the line of a JSONL record."""
    return source.rsplit(":", 1)[0] if _is_record(source) else source
