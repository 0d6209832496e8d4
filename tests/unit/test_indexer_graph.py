"""The indexer graph end to end on a temp store: pasted documents, paths, bad items, empty input, failures."""

from __future__ import annotations

from pathlib import Path

import pytest
from blockbuster import blockbuster_ctx
from langgraph.checkpoint.memory import InMemorySaver

from agent_retrieval.graphs.indexer import build
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.loaders import SUPPORTED_SUFFIXES, load_documents
from agent_retrieval.models import ChunkSearchRequest, title_document_id
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.server.graph_parts import GraphParts
from tests.conftest import WordHashEmbeddings
from tests.unit.test_cli_files import deep_pdf

FEES = {
    "title": "Letting fees",
    "content": "# Letting fees\n\nThe Zephyrine agency charges a 6% letting fee.",
    "metadata": {"category": "fees"},
}


@pytest.fixture
def store(context, embedder):
    """An empty store with the word-hash embedder."""
    with Retrieval(context, embedder=embedder) as retrieval:
        yield retrieval


@pytest.fixture
def graph(store):
    return build(GraphParts(retrieval=store))


@pytest.fixture
def files(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "guides").mkdir(parents=True)
    (folder / "guides" / "deposits.md").write_text(
        "---\ncategory: guide\n---\n# Deposits\n\nQuokkadex holds "
        "every tenancy deposit in a protected scheme.\n"
    )
    (folder / "notice.txt").write_text("Rent reviews happen once a year, in March.\n")
    (folder / "ignored.rtf").write_text("{\\rtf1 a}\n")
    single = tmp_path / "repairs.md"
    single.write_text("# Repairs\n\nReport boiler faults within 24 hours.\n")
    return tmp_path


def search(store: Retrieval, query: str) -> list[str]:
    return [h.document_id for h in store.search(ChunkSearchRequest(query=query, top_k=3), "chunks").hits]


async def test_pasted_documents_are_ingested_and_found(graph, store, context):
    out = await graph.ainvoke(
        {"documents": [FEES, {"title": "Opening hours", "content": "Open from nine."}]}, context=context
    )
    assert out["errors"] == []
    # "Opening hours" is one chunk whose text equals the document's: embedded once, reused for the other row
    assert out["report"] == {
        "documents": 2,
        "unchanged": 0,
        "written": 2,
        "chunks": 2,
        "embedded": 3,
        "reused": 1,
        "unembedded": 0,
    }
    assert set(out) == {"report", "errors"}  # the working state stays inside the graph
    fees_id = title_document_id("Letting fees")
    assert search(store, "Zephyrine letting fee")[0] == fees_id
    hit = store.search(ChunkSearchRequest(query="letting fee", filters={"category": "fees"}), "chunks").hits[
        0
    ]
    assert hit.document_id == fees_id and hit.heading_path == "Letting fees"


async def test_files_and_folders_are_loaded_and_ingested(graph, store, context, files):
    out = await graph.ainvoke({"paths": [str(files / "docs"), str(files / "repairs.md")]}, context=context)
    assert out["errors"] == []
    assert out["report"]["documents"] == out["report"]["written"] == 3
    assert store.store.stats().documents == 3
    assert search(store, "Quokkadex tenancy deposit")[0] == "guides/deposits"
    assert search(store, "boiler faults")[0] == "repairs"
    hit = store.search(ChunkSearchRequest(query="deposit", filters={"category": "guide"}), "chunks").hits
    assert [h.document_id for h in hit] == ["guides/deposits"]


async def test_running_again_changes_nothing_and_duplicates_nothing(graph, store, context, files):
    given = {"documents": [FEES], "paths": [str(files / "repairs.md")]}
    await graph.ainvoke(given, context=context)
    again = await graph.ainvoke(given, context=context)
    assert (
        again["report"]["unchanged"] == 2 and again["report"]["written"] == again["report"]["embedded"] == 0
    )
    assert store.store.stats().documents == 2


async def test_bad_items_are_reported_one_line_each_and_good_ones_still_ingested(
    graph, store, context, files
):
    out = await graph.ainvoke(
        {
            "documents": [
                FEES,
                "just text",
                {"title": "No body", "content": "  "},
                {"content": "orphan"},
                {"title": "T", "content": "c", "metadata": {"bad key": 1}},
                {"title": "T", "body": "c"},
                {"title": "Valid", "content": "A second valid document.", "id": "notes/valid"},
            ],
            "paths": [
                str(files / "missing.md"),
                str(files / "docs" / "ignored.rtf"),
                "",
                str(files / "repairs.md"),
            ],
        },
        context=context,
    )
    assert out["errors"] == [  # what could not be loaded, then what could not be written
        f"paths[0]: {files / 'missing.md'}: no such file or folder",
        (
            f"paths[1]: {files / 'docs' / 'ignored.rtf'}: unsupported file type .rtf; "
            f"supported: {', '.join(SUPPORTED_SUFFIXES)}"
        ),
        "paths[2]: must be a file or folder path (got '')",
        'documents[1]: must be an object with "title" and "content" (got str)',
        "documents[2]: content: must not be empty: give the document's full text",
        "documents[3]: title: Field required",
        (
            "documents[4]: metadata: key 'bad key' is not allowed: keys are letters, digits, '_' or '-', "
            "starting with a letter or '_', at most 64 characters"
        ),
        "documents[5]: unknown field(s) body; a document has title, content, metadata, id",
    ]
    assert out["report"]["written"] == 3
    stored = [title_document_id("Letting fees"), "notes/valid", "repairs"]
    assert store.store.unknown_documents(stored) == [] and store.store.stats().documents == 3


async def test_text_that_is_not_unicode_is_an_error_line_and_the_rest_is_ingested(graph, store, context):
    """A lone surrogate (what a JSON "\\ud800" escape decodes to) in a pasted title, text or id is named per
    document; it was a UnicodeEncodeError that stopped the whole run."""
    out = await graph.ainvoke(
        {
            "documents": [
                {"title": "Fees \ud800", "content": "text"},
                {"title": "T", "content": "text \udfff"},
                {"title": "T", "content": "text", "id": "x\udc80"},
                FEES,
            ]
        },
        context=context,
    )
    lone = "must be valid Unicode text: it holds a lone surrogate"
    assert out["errors"] == [
        f"documents[0]: title: {lone} ('\\ud800' at position 5)",
        f"documents[1]: content: {lone} ('\\udfff' at position 5)",
        f"documents[2]: id: {lone} ('\\udc80' at position 1)",
    ]
    assert out["report"]["written"] == 1 and search(store, "Zephyrine letting fee")[0] == title_document_id(
        "Letting fees"
    )


async def test_files_a_folder_cannot_load_are_error_lines_and_the_rest_is_ingested(
    graph, store, context, files
):
    folder = files / "docs"
    (folder / "laughs.md").write_text("---\na: &a [x, x]\nb: [*a, *a]\n---\nBody.\n")
    deep = "[" * 5000 + "]" * 5000
    (folder / "deep.jsonl").write_text('{"id": "deep", "text": "t", "metadata": ' + deep + "}\n")
    (folder / "gone.md").symlink_to(folder / "nowhere.md")
    out = await graph.ainvoke({"paths": [str(folder)]}, context=context)
    assert out["errors"] == [
        f"paths[0]: {folder / 'deep.jsonl'}:1: nested more than 32 levels deep; flatten the record",
        (
            f"paths[0]: {folder / 'gone.md'}: does not exist (deleted or moved while loading, "
            "or a symlink to nothing); nothing of it was loaded"
        ),
        (
            f"paths[0]: {folder / 'laughs.md'}:2: front matter uses a YAML anchor or alias (&name or *name); "
            "write each value out in full (aliases can expand a few bytes into gigabytes)"
        ),
    ]
    assert out["report"]["written"] == 2
    assert search(store, "Quokkadex tenancy deposit")[0] == "guides/deposits"


async def test_a_folder_without_supported_files_is_an_error_not_silence(graph, context, tmp_path):
    (tmp_path / "only.rtf").write_text("{\\rtf1 a}\n")
    out = await graph.ainvoke({"paths": [str(tmp_path)]}, context=context)
    assert out["errors"] == [
        (f"paths[0]: {tmp_path}: no documents found (supported: {', '.join(SUPPORTED_SUFFIXES)})")
    ]
    assert out["report"]["documents"] == 0


@pytest.mark.parametrize("given", [{}, {"documents": [], "paths": []}, {"documents": None, "paths": None}])
async def test_empty_input_is_a_readable_error(graph, store, context, given):
    out = await graph.ainvoke(given, context=context)
    assert out["errors"] == [
        (
            'Nothing to index: give "documents" (a list of {"title", "content"} objects) '
            'and/or "paths" (a list of files or folders to load).'
        )
    ]
    assert out["report"]["documents"] == out["report"]["written"] == 0
    assert store._store is None  # nothing to write, so the store was not even opened


async def test_inputs_of_the_wrong_shape_are_errors(graph, context, files):
    out = await graph.ainvoke(
        {"documents": {"title": "T", "content": "c"}, "paths": str(files / "repairs.md")}, context=context
    )
    assert out["errors"][:2] == ["documents: must be a list (got dict)", "paths: must be a list (got str)"]


async def test_a_later_run_on_the_same_thread_indexes_only_its_own_input(store, context, files):
    graph = build(GraphParts(retrieval=store)).copy(update={"checkpointer": InMemorySaver()})
    thread = {"configurable": {"thread_id": "studio-thread"}}
    first = await graph.ainvoke(
        {"documents": [{"title": "T", "content": "c", "id": "x"}]}, thread, context=context
    )
    second = await graph.ainvoke({"paths": [str(files / "repairs.md")]}, thread, context=context)
    assert first["report"]["written"] == 1 and first["errors"] == []
    assert second["report"]["documents"] == 1 and second["errors"] == []


async def test_a_store_of_another_model_stops_the_ingest_with_a_readable_error(store, context):
    store._embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    await build(GraphParts(retrieval=store)).ainvoke({"documents": [FEES]}, context=context)
    store._embedder = Embedder(WordHashEmbeddings(size=32), "test/another-model")
    out = await build(GraphParts(retrieval=store)).ainvoke(
        {"documents": [{"title": "New", "content": "new text"}]}, context=context
    )
    assert len(out["errors"]) == 1
    assert out["errors"][0].startswith("ingest stopped: the store's vectors come from test/word-hash")
    assert "agent-retrieval reembed" in out["errors"][0]
    assert out["report"]["written"] == 0 and store.store.stats().documents == 1


async def test_a_store_that_cannot_be_opened_is_an_error_line_naming_nothing_of_the_operators(
    tmp_path, monkeypatch, caplog
):
    """It ended the run as a LangGraph error, which a server shows as "An internal error occurred"."""
    monkeypatch.setenv("AGENT_RETRIEVAL_DB", str(tmp_path))  # a folder: no SQLite file can be opened there
    out = await build().ainvoke({"documents": [FEES]}, context={})
    assert out["report"]["written"] == 0
    assert out["errors"] == [
        "nothing was written: the store failed (StoreError); the server's log says why, and the same run "
        "may be sent again"
    ]
    assert f"cannot open the store {tmp_path}" in caplog.text  # the operator's log has the cause


async def test_an_embedding_outage_still_stores_the_documents_and_says_so(store, context):
    store._embedder = Embedder(WordHashEmbeddings(fail=True), "test/word-hash")
    out = await build(GraphParts(retrieval=store)).ainvoke({"documents": [FEES]}, context=context)
    assert out["report"]["written"] == 1 and out["report"]["unembedded"] > 0
    assert len(out["errors"]) == 1 and out["errors"][0].startswith("embedding failed")
    assert store.store.stats().documents_missing_embeddings == 1


async def test_the_graph_never_blocks_the_event_loop(graph, store, context, files):
    with blockbuster_ctx():  # raises on any blocking call (file, socket, SQLite) made on the event loop
        out = await graph.ainvoke(
            {"documents": [FEES], "paths": [str(files / "docs"), str(files / "nope")]}, context=context
        )
    assert out["report"]["written"] == 3 and len(out["errors"]) == 1


# --- a run's caller names the paths: on a server only the operator's ingest root may be read ----------------


async def test_a_run_without_its_own_context_loads_files_only_inside_the_ingest_root(
    graph, files, monkeypatch
):
    docs, outside = files / "docs", files / "repairs.md"
    out = await graph.ainvoke({"paths": [str(docs)]}, context={})  # a server run: run settings only
    assert out["report"]["documents"] == 0 and "AGENT_RETRIEVAL_INGEST_ROOT" in out["errors"][0]
    monkeypatch.setenv("AGENT_RETRIEVAL_INGEST_ROOT", str(docs))
    out = await graph.ainvoke(
        {"paths": [str(docs / "guides"), str(outside), str(docs / ".." / "repairs.md")]}, context={}
    )
    assert out["report"]["documents"] == 1
    assert [e.split(":")[0] for e in out["errors"]] == ["paths[1]", "paths[2]"]
    assert all("leads outside the ingest root" in e for e in out["errors"]), out["errors"]
    assert str(docs) not in " ".join(out["errors"])  # where the root lies is the operator's to know


async def test_pasted_documents_cannot_replace_what_the_operator_ingested(graph, store, files, context):
    # the operator's file, ingested as the CLI does
    ingest(load_documents([files / "repairs.md"]), store.store, store.embedder, context, progress=False)
    (target,) = store.store.document_states(
        [
            h.document_id
            for h in store.search(ChunkSearchRequest(query="boiler faults", top_k=1), "chunks").hits
        ]
    )
    out = await graph.ainvoke(
        {"documents": [{"id": target, "title": "Repairs", "content": "Nothing is fixed."}, FEES]},
        context=context,
    )
    assert out["report"]["written"] == 1 and len(out["errors"]) == 1
    assert out["errors"][0].startswith("documents[0]: id") and "operator" in out["errors"][0]
    assert search(store, "boiler faults")[0] == target


async def test_a_pdf_past_pypdfs_limits_is_an_error_line_and_the_rest_is_ingested(
    graph, store, context, files
):
    (files / "docs" / "deep.pdf").write_bytes(deep_pdf(150))  # pypdf refuses page trees over 100 deep
    out = await graph.ainvoke({"paths": [str(files / "docs")]}, context=context)
    assert out["report"]["written"] == 2
    assert out["errors"] == [
        f"paths[0]: {files / 'docs' / 'deep.pdf'}: could not be read (LimitReachedError: Maximum page tree "
        "depth reached: 101 > 100.); nothing of it was loaded"
    ]
