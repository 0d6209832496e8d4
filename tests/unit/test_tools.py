"""The two tools end to end on a temp store: results, artifacts, degradation, and bad input."""

from __future__ import annotations

import hashlib
import html
import json
import re
import sqlite3

import pytest
from langchain_core.messages import ToolMessage
from pydantic import ValidationError

from agent_retrieval.context import Context
from agent_retrieval.ingest import ingest
from agent_retrieval.models import Document, Hit, RetrievalResult
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.tools import (
    AgentRetriever,
    ChunkRetrieverTool,
    DocumentRetrieverTool,
    format_result,
    make_retrieval_tools,
)
from tests.conftest import WordHashEmbeddings
from tests.promptcheck import PAYLOADS, assert_quoted, hostile_hit, passages_outline


def call(tool, **args) -> ToolMessage:
    return tool.invoke({"type": "tool_call", "id": "call-1", "name": tool.name, "args": args})


async def acall(tool, **args) -> ToolMessage:
    return await tool.ainvoke({"type": "tool_call", "id": "call-1", "name": tool.name, "args": args})


@pytest.fixture
def tools(retrieval):
    return make_retrieval_tools(retrieval=retrieval)


def test_make_retrieval_tools_names_both_tools_and_shares_one_retrieval(tools):
    document_retriever, chunk_retriever = tools
    assert (document_retriever.name, chunk_retriever.name) == ("document_retriever", "chunk_retriever")
    assert document_retriever.retrieval is chunk_retriever.retrieval
    assert "document_ids" in chunk_retriever.args and "document_ids" not in document_retriever.args
    for tool in tools:
        assert all(spec.get("description") for spec in tool.args.values())


def test_document_then_chunk_retrieval_finds_the_answer(tools):
    document_retriever, chunk_retriever = tools
    documents = call(document_retriever, query="Banda Lane deposit", top_k=3)
    assert documents.status == "success"
    hits = documents.artifact["hits"]
    assert hits and all(h["level"] == "documents" for h in hits)
    assert any("banda" in h["id"] for h in hits)
    assert 'id="' in documents.content and "found_by=" in documents.content
    ids = [h["id"] for h in hits]
    chunks = call(chunk_retriever, query="Banda Lane deposit", document_ids=ids, top_k=4)
    assert chunks.artifact["hits"] and {h["document_id"] for h in chunks.artifact["hits"]} <= set(ids)
    best = chunks.artifact["hits"][0]
    assert best["found_by"] and best["heading_path"].startswith(best["title"])
    assert chunks.artifact["hyde"] == "off" and chunks.artifact["degraded"] == []


def test_each_hit_says_which_paths_found_it(tools):
    _, chunk_retriever = tools
    hits = call(chunk_retriever, query="deposit protection scheme", top_k=10).artifact["hits"]
    assert {p for h in hits for p in h["found_by"]} == {"vector", "keyword"}
    for h in hits:
        assert ("vector" in h["found_by"]) == (h["vector_rank"] is not None)
        assert ("keyword" in h["found_by"]) == (h["keyword_rank"] is not None)


def test_filters_restrict_every_hit(tools):
    document_retriever, _ = tools
    hits = call(
        document_retriever, query="policy for staff", filters={"category": "policy"}, top_k=10
    ).artifact["hits"]
    assert hits and all(h["metadata"]["category"] == "policy" for h in hits)


def test_summarize_returns_the_documents_chunks_in_order_without_embedding(tools, retrieval, embeddings):
    document_retriever, chunk_retriever = tools
    doc_id = call(document_retriever, query="Banda Lane deposit").artifact["hits"][0]["id"]
    before = (embeddings.query_calls, embeddings.document_calls)
    result = call(chunk_retriever, query="", query_type="summarize", document_ids=[doc_id]).artifact
    assert (embeddings.query_calls, embeddings.document_calls) == before
    assert [h["ordinal"] for h in result["hits"]] == list(range(len(result["hits"])))
    assert {h["document_id"] for h in result["hits"]} == {doc_id}
    assert result["hyde"] == "off" and not result["truncated"]


def test_a_result_names_the_fusion_that_ranked_it_and_claims_none_where_nothing_was_fused(tools, retrieval):
    document_retriever, chunk_retriever = tools
    searched = call(document_retriever, query="Banda Lane deposit").artifact
    assert searched["fusion"] == retrieval.context.fusion == "convex"  # the default
    doc_id = searched["hits"][0]["id"]
    summary = call(chunk_retriever, query="", query_type="summarize", document_ids=[doc_id]).artifact
    assert summary["fusion"] is None  # chunks in reading order: no fusion ranked them
    assert RetrievalResult(query="q", level="chunks", hits=[]).fusion is None


def test_exact_and_conceptual_query_types_lean_on_their_paths(tools):
    _, chunk_retriever = tools
    query = "client money protection scheme insolvency"  # the two paths disagree on the best passage
    exact = call(chunk_retriever, query=query, query_type="exact", top_k=1).artifact
    conceptual = call(chunk_retriever, query=query, query_type="conceptual", top_k=1).artifact
    assert exact["query_type"] == "exact" and conceptual["query_type"] == "conceptual"
    assert exact["hits"][0]["keyword_rank"] == 1 and exact["hits"][0]["vector_rank"] != 1
    assert conceptual["hits"][0]["vector_rank"] == 1 and conceptual["hits"][0]["keyword_rank"] != 1


async def test_async_tools_match_the_sync_ones(tools):
    _document_retriever, chunk_retriever = tools
    sync = call(chunk_retriever, query="tenancy deposit protection", top_k=5).artifact
    asynchronous = (await acall(chunk_retriever, query="tenancy deposit protection", top_k=5)).artifact
    assert [h["id"] for h in sync["hits"]] == [h["id"] for h in asynchronous["hits"]]
    summary = (
        await acall(
            chunk_retriever, query="", query_type="summarize", document_ids=[sync["hits"][0]["document_id"]]
        )
    ).artifact
    assert summary["hits"]


def test_a_failing_embedder_degrades_to_keyword_only_and_says_so(retrieval):
    broken = WordHashEmbeddings(fail=True)
    retrieval._embedder = Embedder(broken, retrieval.embedder.model_id)
    _, chunk_retriever = make_retrieval_tools(retrieval=retrieval)
    result = call(chunk_retriever, query="tenancy deposit protection").artifact
    assert result["hits"] and all(h["found_by"] == ["keyword"] for h in result["hits"])
    assert any("keyword-only" in note for note in result["degraded"])


def test_a_store_of_another_model_degrades_to_keyword_only_naming_reembed(retrieval):
    retrieval._embedder = Embedder(WordHashEmbeddings(size=32), "test/another-model")
    document_retriever, _ = make_retrieval_tools(retrieval=retrieval)
    message = call(document_retriever, query="tenancy deposit protection")
    assert message.artifact["hits"]
    assert "agent-retrieval reembed" in message.content
    assert any("reembed" in note for note in message.artifact["degraded"])


def fingerprint(path: str) -> str:
    with sqlite3.connect(path) as conn:
        rows = [conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in ("documents", "chunks")]
    return hashlib.sha256(repr(rows).encode()).hexdigest()


BAD = [
    ({"query": ""}, "query: must not be empty"),
    ({"query": "   "}, "query: must not be empty"),
    ({"query": "x" * 5000}, "query: must be at most 4,000 characters (got 5,000)"),
    ({"query": "a\x00b"}, "query: must not contain NUL"),
    ({"query": "deposit", "top_k": 0}, "top_k: must be a whole number between 1 and 50"),
    ({"query": "deposit", "top_k": 51}, "top_k: must be a whole number between 1 and 50"),
    ({"query": "deposit", "top_k": "many"}, "top_k"),
    (
        {"query": "deposit", "query_type": "fuzzy"},
        "query_type: Input should be 'general', 'exact', 'conceptual'",
    ),
    ({"query": "deposit", "filters": "category=policy"}, "filters"),
    ({"query": "deposit", "filters": {"bad key;": "x"}}, "filters: key 'bad key;' is not allowed"),
    (
        {"query": "deposit", "filters": {"category": {"$ne": "x"}}},
        "values must be strings, numbers or booleans",
    ),
    ({"query": "deposit", "filters": {"year": []}}, "a one-of list holds 1 to 100 values"),
    (
        {"query": "deposit", "document_ids": ["no-such-document"]},
        "document_ids: 1 unknown id(s): 'no-such-document'",
    ),
    ({"query": "deposit", "document_ids": []}, "document_ids: must hold at least one id"),
    ({"query": "", "query_type": "summarize"}, "document_ids is required when query_type is 'summarize'"),
    ({"query": "deposit", "unexpected": 1}, "unexpected: is not an argument of this tool"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_input_is_a_clear_tool_error_and_changes_nothing(tools, retrieval, args, message):
    _, chunk_retriever = tools
    before = fingerprint(retrieval.context.store.db_path)
    result = call(chunk_retriever, **args)
    assert result.status == "error"
    assert message in result.content
    assert "Traceback" not in result.content and "sqlite" not in result.content.lower()
    assert fingerprint(retrieval.context.store.db_path) == before


SYNTAX = [
    '"unbalanced quote',
    "NEAR(deposit lane)",
    "deposit AND OR NOT",
    "((deposit",
    "dep*",
    "*",
    "'; drop table chunks; --",
    "title:deposit",
    "deposit -lane",
    "{deposit}",
    "💥 ünïcödé dépôt",
]


@pytest.mark.parametrize("query", SYNTAX)
def test_search_syntax_in_the_query_is_just_text(tools, retrieval, query):
    _document_retriever, _chunk_retriever = tools
    before = fingerprint(retrieval.context.store.db_path)
    for tool in tools:
        result = call(tool, query=query)
        assert result.status == "success", result.content
    assert fingerprint(retrieval.context.store.db_path) == before


def test_tool_errors_from_the_store_are_readable(tmp_path):
    (tmp_path / "not-a-db.db").write_text("this is not sqlite" * 100)
    tool = DocumentRetrieverTool(Retrieval(Context(db_path=str(tmp_path / "not-a-db.db"))))
    result = call(tool, query="deposit")
    assert result.status == "error" and "not a valid agent-retrieval store" in result.content


def test_tools_build_nothing_until_called(tmp_path):
    path = tmp_path / "lazy.db"
    tool = ChunkRetrieverTool(Retrieval(Context(db_path=str(path))))
    assert not path.exists() and tool.retrieval._embedder is None


def test_retriever_adapter_returns_langchain_documents(retrieval):
    retriever = AgentRetriever(retrieval=retrieval, k=3)
    docs = retriever.invoke("tenancy deposit protection")
    assert 0 < len(docs) <= 3
    assert {"id", "document_id", "score", "found_by", "heading_path"} <= set(docs[0].metadata)
    assert len(retriever.invoke("tenancy deposit protection", k=1)) == 1
    as_documents = AgentRetriever(retrieval=retrieval, level="documents", k=2).invoke("deposit")
    assert all(d.metadata["id"] == d.metadata["document_id"] for d in as_documents)


def test_artifact_is_json_serialisable(tools):
    document_retriever, _ = tools
    artifact = call(document_retriever, query="commission disclosure").artifact
    assert json.loads(json.dumps(artifact))["query"] == "commission disclosure"


def test_retrieval_closes_the_store_it_opened(tmp_path, embedder):
    with Retrieval(Context(db_path=str(tmp_path / "x.db")), embedder=embedder) as retrieval:
        store = retrieval.store
    assert retrieval._store is None and store._db._closed


@pytest.mark.parametrize("variant", PAYLOADS)
@pytest.mark.parametrize("level", ["documents", "chunks"])
def test_what_the_model_reads_keeps_every_field_of_a_hit_inside_its_own_passage(variant, level):
    hostile = hostile_hit(variant, level)
    plain = Hit(id="fees", level=level, document_id="fees", title="Fees", content="Fees are due.")
    result = RetrievalResult(
        query=f"deposit{PAYLOADS[variant]}",
        level=level,
        hits=[hostile, plain],
        degraded=["vector search failed: keyword search only"],
    )
    text = format_result(result)
    fields = {"ID", "TITLE", "BODY", "METAKEY", "METAVALUE"} | ({"HEADING"} if level == "chunks" else set())
    assert_quoted(text, [passages_outline(2, [True, False])], {hostile.id}, fields)


ODD_IDS = ["Q&A.md", "a<b>", 'say "x"', "list[1]", "\uff46\uff55\uff4c\uff4c", "zero\u200bwidth", "&lt;x"]


def test_ids_as_one_tool_shows_them_scope_the_next_call_exactly(tools, retrieval):
    ingest(
        [Document(id, f"Odd {n}", f"Quokka sanctuary rules, part {n}.") for n, id in enumerate(ODD_IDS)],
        retrieval.store,
        retrieval.embedder,
        retrieval.context,
        progress=False,
    )
    document_retriever, chunk_retriever = tools
    found = call(document_retriever, query="quokka sanctuary rules", top_k=10)
    assert set(ODD_IDS) <= {h["id"] for h in found.artifact["hits"]}
    shown = [i for i in re.findall(r'<passage id="([^"]+)"', found.content) if html.unescape(i) in ODD_IDS]
    assert len(shown) == len(ODD_IDS) and set(shown) != set(ODD_IDS)  # some were shown escaped
    scoped = call(chunk_retriever, query="quokka", document_ids=shown, top_k=10)
    assert scoped.status == "success", scoped.content
    assert {h["document_id"] for h in scoped.artifact["hits"]} == set(ODD_IDS)
    plain = [i for i in ODD_IDS if i != "&lt;x"]  # an id as stored works too, unless it reads as a shown one
    assert call(chunk_retriever, query="quokka", document_ids=plain, top_k=10).status == "success"


def test_agent_retriever_searches_the_store_its_retrieval_names(tmp_path, retrieval, monkeypatch):
    monkeypatch.setattr(
        "agent_retrieval.search.retrieval.make_embedder", lambda context, **_: retrieval.embedder
    )
    named = AgentRetriever(Retrieval(retrieval.context), k=2)
    assert named.retrieval.store.path == retrieval.store.path
    assert [d.metadata["document_id"] for d in named.invoke("referral fee disclosure")]


@pytest.mark.parametrize("make", [lambda: AgentRetriever(contxt=1), lambda: DocumentRetrieverTool(bogus=1)])
def test_an_unknown_constructor_argument_is_refused_by_name(make):
    with pytest.raises(ValidationError, match=r"(contxt|bogus)\n  Extra inputs are not permitted"):
        make()
