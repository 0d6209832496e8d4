"""similarity_search and index_document end to end on a temp store: index, find, replace, refuse bad input."""

from __future__ import annotations

import json

import pytest
from blockbuster import blockbuster_ctx

from agent_retrieval.context import Context
from agent_retrieval.models import ChunkSearchRequest, title_document_id
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.tools import IndexDocumentTool, SimilaritySearchTool, make_retrieval_tools
from tests.conftest import WordHashEmbeddings
from tests.unit.test_tools import acall, call, fingerprint

ALL = ("document_retriever", "chunk_retriever", "similarity_search", "index_document")
QUOKKA = (
    "# Quokka sanctuary\n\nThe Zephyrine quokka sanctuary opens on Rottnest Island every spring.\n\n"
    "## Visiting\n\nVisitors must book the marsupial walk and keep two metres from each quokka."
)


@pytest.fixture
def tools(retrieval):
    return dict(zip(ALL, make_retrieval_tools(retrieval=retrieval, names=ALL), strict=False))


def documents(retrieval) -> int:
    return retrieval.store.stats().documents


# --- make_retrieval_tools ----------------------------------------------------------------------------


def test_names_choose_the_tools_in_order_and_they_share_one_retrieval(retrieval):
    chosen = make_retrieval_tools(retrieval=retrieval, names=["index_document", "similarity_search"])
    assert [t.name for t in chosen] == ["index_document", "similarity_search"]
    assert isinstance(chosen[0], IndexDocumentTool) and isinstance(chosen[1], SimilaritySearchTool)
    assert chosen[0].retrieval is chosen[1].retrieval is retrieval
    assert [t.name for t in make_retrieval_tools(retrieval=retrieval)] == [
        "document_retriever",
        "chunk_retriever",
    ]
    assert len(make_retrieval_tools(retrieval=retrieval, names=["chunk_retriever", "chunk_retriever"])) == 1


@pytest.mark.parametrize("names", [["similarity_search", "web_search"], "similarity_search", [None]])
def test_unknown_tool_names_are_refused_listing_the_allowed_ones(tmp_path, names):
    with pytest.raises(
        ValueError, match="document_retriever, chunk_retriever, similarity_search, index_document"
    ):
        make_retrieval_tools(Retrieval(Context(db_path=str(tmp_path / "x.db"))), names=names)
    assert not (tmp_path / "x.db").exists()


def test_the_new_tools_build_nothing_until_called(tmp_path):
    path = tmp_path / "lazy.db"
    for tool in (
        IndexDocumentTool(Retrieval(Context(db_path=str(path)))),
        SimilaritySearchTool(Retrieval(Context(db_path=str(path)))),
    ):
        assert tool.retrieval._store is None and tool.retrieval._embedder is None
    assert not path.exists()


def test_every_argument_is_described_for_the_model(tools):
    assert set(tools["similarity_search"].args) == {"query", "top_k", "filters"}
    assert set(tools["index_document"].args) == {"title", "content", "metadata", "id"}
    for name in ("similarity_search", "index_document"):
        assert all(spec.get("description") for spec in tools[name].args.values())


# --- similarity_search -----------------------------------------------------------------------------


def test_similarity_search_runs_chunk_retrievers_search_and_lists_scores(tools):
    result = call(tools["similarity_search"], query="tenancy deposit protection", top_k=4)
    assert result.status == "success"
    hits = result.artifact["hits"]
    assert 0 < len(hits) <= 4 and all(h["level"] == "chunks" for h in hits)
    assert result.content.count("score=") == len(hits)
    same = call(tools["chunk_retriever"], query="tenancy deposit protection", top_k=4).artifact["hits"]
    assert [(h["id"], h["score"]) for h in hits] == [(h["id"], h["score"]) for h in same]
    assert json.loads(json.dumps(result.artifact))["query"] == "tenancy deposit protection"


def test_similarity_search_filters_restrict_every_hit(tools):
    hits = call(
        tools["similarity_search"], query="policy for staff", filters={"category": "policy"}, top_k=10
    ).artifact["hits"]
    assert hits and all(h["metadata"]["category"] == "policy" for h in hits)


SEARCH_BAD = [
    ({"query": ""}, "query: must not be empty"),
    ({"query": "  \n "}, "query: must not be empty"),
    ({"query": "x" * 4001}, "query: must be at most 4,000 characters"),
    ({"query": "a\x00b"}, "query: must not contain NUL"),
    ({"query": "deposit", "top_k": 0}, "top_k: must be a whole number between 1 and 50"),
    ({"query": "deposit", "top_k": 51}, "top_k: must be a whole number between 1 and 50"),
    ({"query": "deposit", "filters": {"bad key": 1}}, "filters: key 'bad key' is not allowed"),
    ({"query": "deposit", "filters": {"year": {"$gt": 1}}}, "values must be strings, numbers or booleans"),
    ({"query": "deposit", "document_ids": ["x"]}, "document_ids: is not an argument of this tool"),
    ({"query": "deposit", "query_type": "exact"}, "query_type: is not an argument of this tool"),
    ({"top_k": 3}, "query: Field required"),
]


@pytest.mark.parametrize(("args", "message"), SEARCH_BAD, ids=[m for _, m in SEARCH_BAD])
def test_similarity_search_bad_input_is_a_clear_tool_error(tools, args, message):
    result = call(tools["similarity_search"], **args)
    assert result.status == "error" and message in result.content
    assert "Traceback" not in result.content


# --- index_document --------------------------------------------------------------------------------


def test_an_indexed_document_is_found_by_every_search_tool(tools, retrieval):
    before = documents(retrieval)
    indexed = call(
        tools["index_document"],
        title="Quokka sanctuary",
        content=QUOKKA,
        metadata={"category": "wildlife", "year": 2025},
    )
    assert indexed.status == "success", indexed.content
    doc_id = indexed.artifact["id"]
    assert doc_id == title_document_id("Quokka sanctuary")
    assert indexed.artifact["written"] == 1 and indexed.artifact["chunks"] >= 2
    assert indexed.artifact["embedded"] > 0 and indexed.artifact["unembedded"] == 0
    assert indexed.content.startswith(
        f"Indexed document id={doc_id} ('Quokka sanctuary'): {indexed.artifact['chunks']} chunks, embedded"
    )
    assert documents(retrieval) == before + 1

    found = call(tools["similarity_search"], query="Zephyrine quokka sanctuary", top_k=3).artifact["hits"]
    assert found[0]["document_id"] == doc_id and set(found[0]["found_by"]) == {"vector", "keyword"}
    scoped = call(tools["chunk_retriever"], query="marsupial walk booking", filters={"category": "wildlife"})
    assert scoped.artifact["hits"] and {h["document_id"] for h in scoped.artifact["hits"]} == {doc_id}
    assert any(h["heading_path"] == "Quokka sanctuary > Visiting" for h in scoped.artifact["hits"])
    whole = call(tools["document_retriever"], query="quokka sanctuary", filters={"year": 2025}).artifact[
        "hits"
    ]
    assert whole[0]["id"] == doc_id and {h["metadata"]["year"] for h in whole} == {2025}


def test_indexing_the_same_title_again_replaces_the_document(tools, retrieval, embeddings):
    index = tools["index_document"]
    first = call(index, title="Office hours", content="The office opens at eight on weekdays.").artifact
    count = retrieval.store.stats()
    second = call(index, title="Office hours", content="The office now opens at nine, Saturdays included.")
    assert second.artifact["id"] == first["id"] and second.artifact["written"] == 1
    stats = retrieval.store.stats()
    assert (stats.documents, stats.chunks) == (count.documents, count.chunks)
    hits = call(tools["similarity_search"], query="office opens Saturdays", top_k=1).artifact["hits"]
    assert hits[0]["document_id"] == first["id"] and "nine" in hits[0]["content"]
    stale = call(tools["chunk_retriever"], query="eight", query_type="exact", document_ids=[first["id"]])
    assert stale.artifact["hits"] == []

    embedded = embeddings.documents_embedded
    again = call(index, title="Office hours", content="The office now opens at nine, Saturdays included.")
    assert again.artifact["unchanged"] == 1 and again.artifact["written"] == 0
    assert "already indexed with this content; nothing changed" in again.content
    assert embeddings.documents_embedded == embedded


def test_an_explicit_id_names_the_document_and_replaces_by_id(tools, retrieval):
    index = tools["index_document"]
    before = documents(retrieval)
    assert (
        call(index, title="Draft", content="first draft text", id="notes/plan").artifact["id"] == "notes/plan"
    )
    assert (
        call(index, title="Final plan", content="final plan text", id="notes/plan").artifact["id"]
        == "notes/plan"
    )
    assert documents(retrieval) == before + 1
    chunks = call(tools["chunk_retriever"], query="", query_type="summarize", document_ids=["notes/plan"])
    assert [h["title"] for h in chunks.artifact["hits"]] == ["Final plan"]


def test_ids_made_from_titles_are_readable_stable_and_distinct():
    assert title_document_id("Fees & Charges 2024").startswith("fees-charges-2024-")
    assert title_document_id("Fees & Charges 2024") == title_document_id("Fees & Charges 2024")
    assert title_document_id("Fees & Charges 2024") != title_document_id("Fees & charges 2024")
    assert title_document_id("Crème brûlée").startswith("creme-brulee-")
    assert title_document_id("東京").startswith("document-")
    assert len(title_document_id("word " * 200)) <= 69


def test_a_title_is_one_line_so_whitespace_variants_are_the_same_document(tools):
    a = call(tools["index_document"], title="Office  hours\n", content="text").artifact["id"]
    assert a == call(tools["index_document"], title=" Office hours", content="text").artifact["id"]


INDEX_BAD = [
    ({"content": "text"}, "title: Field required"),
    ({"title": "T"}, "content: Field required"),
    ({"title": "", "content": "text"}, "title: must not be empty"),
    ({"title": " \n ", "content": "text"}, "title: must not be empty"),
    ({"title": "t" * 501, "content": "text"}, "title: must be at most 500 characters (got 501)"),
    ({"title": "a\x00b", "content": "text"}, "title: must not contain NUL characters (one at position 1)"),
    ({"title": "T", "content": ""}, "content: must not be empty"),
    ({"title": "T", "content": " \n\t "}, "content: must not be empty"),
    (
        {"title": "T", "content": "c" * 1_000_001},
        ("content: must be at most 1,000,000 characters (got 1,000,001); split a longer text"),
    ),
    ({"title": "T", "content": "a\x00b"}, "content: must not contain NUL characters (one at position 1)"),
    ({"title": "T", "content": "text", "metadata": "category=policy"}, "metadata"),
    ({"title": "T", "content": "text", "metadata": {"bad key": 1}}, "metadata: key 'bad key' is not allowed"),
    (
        {"title": "T", "content": "text", "metadata": {"owner": {"name": "x"}}},
        "metadata: 'owner': values must be strings, numbers or booleans",
    ),
    ({"title": "T", "content": "text", "id": ""}, "id: must not be empty"),
    ({"title": "T", "content": "text", "id": "   "}, "id: must not be empty"),
    ({"title": "T", "content": "text", "id": "i" * 513}, "id: must be at most 512 characters (got 513)"),
    (
        {"title": "T", "content": "text", "id": "a\x00b"},
        "id: must not contain NUL characters (one at position 1)",
    ),
    ({"title": "T", "content": "text", "source": "web"}, "source: is not an argument of this tool"),
    # a lone surrogate is no text any database or JSON carries: named, never a UnicodeEncodeError
    (
        {"title": "half \ud800 pair", "content": "text"},
        "title: must be valid Unicode text: it holds a lone surrogate ('\\ud800' at position 5)",
    ),
    ({"title": "T", "content": "text \udfff"}, "content: must be valid Unicode text: it holds a lone"),
    ({"title": "T", "content": "text", "id": "id-\udc80"}, "id: must be valid Unicode text: it holds a lone"),
]


@pytest.mark.parametrize(("args", "message"), INDEX_BAD, ids=[m[:60] for _, m in INDEX_BAD])
def test_index_document_bad_input_is_a_clear_tool_error_and_writes_nothing(tools, retrieval, args, message):
    before = fingerprint(retrieval.context.store.db_path)
    result = call(tools["index_document"], **args)
    assert result.status == "error"
    assert message in result.content
    assert "Traceback" not in result.content
    assert fingerprint(retrieval.context.store.db_path) == before


def test_a_store_of_another_model_refuses_the_write_naming_reembed(tools, retrieval):
    retrieval._embedder = Embedder(WordHashEmbeddings(size=32), "test/another-model")
    before = fingerprint(retrieval.context.store.db_path)
    result = call(tools["index_document"], title="T", content="text")
    assert result.status == "error" and "agent-retrieval reembed" in result.content
    assert fingerprint(retrieval.context.store.db_path) == before


def test_an_unreadable_store_is_a_readable_tool_error(tmp_path):
    (tmp_path / "not-a-db.db").write_text("this is not sqlite" * 100)
    tool = IndexDocumentTool(Retrieval(Context(db_path=str(tmp_path / "not-a-db.db"))))
    result = call(tool, title="T", content="text")
    assert result.status == "error" and "not a valid agent-retrieval store" in result.content


def test_an_embedding_outage_stores_the_document_for_keyword_search_and_says_so(tools, retrieval):
    retrieval._embedder = Embedder(WordHashEmbeddings(fail=True), retrieval.embedder.model_id)
    result = call(tools["index_document"], title="Quokka sanctuary", content=QUOKKA)
    assert result.status == "success"
    assert result.artifact["unembedded"] > 0 and result.artifact["embedded"] == 0
    assert "Note: embedding failed" in result.content
    hits = call(tools["similarity_search"], query="Zephyrine quokka").artifact["hits"]
    assert hits[0]["document_id"] == result.artifact["id"] and hits[0]["found_by"] == ["keyword"]


# --- async ---------------------------------------------------------------------------------------


async def test_async_index_then_search_never_blocks_the_event_loop(tools, retrieval):
    before = documents(retrieval)
    with blockbuster_ctx():  # raises on any blocking call (file, socket, SQLite) made on the event loop
        indexed = await acall(tools["index_document"], title="Quokka sanctuary", content=QUOKKA)
        found = await acall(tools["similarity_search"], query="Zephyrine quokka sanctuary", top_k=2)
        bad = await acall(tools["index_document"], title="T", content="")
    assert indexed.status == "success" and indexed.artifact["written"] == 1
    assert found.artifact["hits"][0]["document_id"] == indexed.artifact["id"]
    assert bad.status == "error" and "content: must not be empty" in bad.content
    assert documents(retrieval) == before + 1


# --- an agent cannot widen visibility or write what the store owns ------------------------------------------


@pytest.mark.parametrize("key", ["public", "tenant_id", "tenant", "id", "source"])
def test_index_document_refuses_reserved_metadata_with_a_tool_error(tools, retrieval, key):
    before = documents(retrieval)
    message = call(
        tools["index_document"],
        title="Press release",
        content="Everyone may read this.",
        metadata={key: True, "category": "news"},
    )
    assert message.status == "error" and f"metadata: {key} cannot be set" in message.content
    assert documents(retrieval) == before


def test_index_document_cannot_replace_what_the_operator_ingested(tools, retrieval):
    operator_id = retrieval.store.document_states(
        [h.document_id for h in retrieval.search(ChunkSearchRequest(query="referral fee"), "chunks").hits]
    )
    target = next(iter(operator_id))  # a demo file, ingested by the operator
    before = retrieval.store.document_states([target])[target]
    message = call(tools["index_document"], title="Fees", content="All fees are waived.", id=target)
    assert message.status == "error" and "may not replace" in message.content
    assert retrieval.store.document_states([target])[target] == before
    first = call(tools["index_document"], title="Agent notes", content="First version.", id="agent-notes")
    again = call(tools["index_document"], title="Agent notes", content="Second version.", id="agent-notes")
    assert first.status == again.status == "success"  # what a caller wrote, a caller may replace
