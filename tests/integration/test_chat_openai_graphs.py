"""The graphs in-process with the real ChatOpenAI (made from the run's Context) against tests.fakeapi.

The fake answers as `agent_script` does: a QueryPlan by structured output, document_retriever then
chunk_retriever tool calls, answers citing the first passage, SQL over a table the prompt defines. The
store is the embedded SQLite file with the demo corpus, embedded by the word-hash test embedder.
"""

from __future__ import annotations

import re

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from agent_retrieval import demo
from agent_retrieval.context import Context
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.loaders import load_documents
from agent_retrieval.models import ChunkSearchRequest, parse_request
from agent_retrieval.planning import READING_ON
from agent_retrieval.server.graph_parts import GraphParts
from tests.fakeapi import FakeAPI, agent_script

QUESTION = "Do estate agents have to tell the seller about referral fees from third parties?"


@pytest.fixture
def api():
    with FakeAPI(chat=agent_script) as server:
        yield server


@pytest.fixture
def run_context(api: FakeAPI, context: Context) -> Context:
    """The run's Context: the chat model is ChatOpenAI against the fake (the Retrieval is shared)."""
    return Context(
        db_path=context.store.db_path, openai_base_url=api.openai_url, openai_api_key="test", max_retries=0
    )


def chats(api: FakeAPI) -> list[dict]:
    """The chat request bodies, in order, after checking the script never failed."""
    assert api.script_errors == []
    return [r.body for r in api.requests_to("chat/completions", api="openai")]


def asks_for_query_plan(body: dict) -> bool:
    """Structured output for QueryPlan: a json_schema response_format, or a forced QueryPlan tool."""
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        return response_format["json_schema"]["name"] == "QueryPlan"
    return any(t["function"]["name"] == "QueryPlan" for t in body.get("tools") or [])


def cited(text: str) -> list[str]:
    return re.findall(r"\[([^\[\]]+#\d+)\]", text)


async def test_rag_plans_by_structured_output_and_cites_a_hit(api, retrieval, run_context):
    from agent_retrieval.graphs import rag

    graph = rag.build(GraphParts(retrieval=retrieval))
    out = await graph.ainvoke({"messages": [{"role": "user", "content": QUESTION}]}, context=run_context)

    planner, answerer = chats(api)
    assert asks_for_query_plan(planner)
    assert planner["model"] == "gpt-4o-mini"
    assert api.requests_to("chat/completions")[0].headers["authorization"] == "Bearer test"
    # the plan is the script's (the heuristic planner's purposes are worded differently)
    assert [(q["text"], q["purpose"]) for q in out["plan"]["queries"]] == [(QUESTION, "direct")]
    assert out["plan"]["search_strategy"] == "simple"

    [search] = [s for s in out["searches"] if s["purpose"] != READING_ON]  # reading on may follow it
    assert search["status"] == "ran" and search["query"] == QUESTION and search["target"] == "chunks"
    assert search["hyde"] == "off" and search["degraded"] == []
    hit_ids = [h["id"] for h in out["hits"]]
    assert hit_ids and set(hit_ids) <= {i for s in out["searches"] for i in s["hit_ids"]}

    # the answer is the model's (not the extractive fallback), written from the passages it was shown
    shown = "\n".join(m["content"] for m in answerer["messages"] if m["role"] == "user")
    assert all(f'id="{i}"' in shown for i in hit_ids)
    assert out["answer"] == f"The documents answer this in the passage cited here [{hit_ids[0]}]."
    assert out["citations"] == [hit_ids[0]]
    assert isinstance(out["messages"][-1], AIMessage) and out["messages"][-1].content == out["answer"]
    assert all("read on" in note for note in out["notes"])  # no failure or fallback note


async def test_agent_calls_document_then_chunk_retriever_and_cites_a_chunk(api, retrieval, run_context):
    from agent_retrieval.graphs import agent

    graph = agent.build(GraphParts(retrieval=retrieval))
    out = await graph.ainvoke({"messages": [{"role": "user", "content": QUESTION}]}, context=run_context)

    messages = out["messages"]
    calls = [call for m in messages if isinstance(m, AIMessage) for call in m.tool_calls]
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert [c["name"] for c in calls] == ["document_retriever", "chunk_retriever"]
    assert [r.name for r in results] == ["document_retriever", "chunk_retriever"]
    assert all(r.status == "success" for r in results)

    found_documents = [h["id"] for h in results[0].artifact["hits"]]
    assert found_documents and calls[1]["args"]["document_ids"] == found_documents
    chunk_hits = results[1].artifact["hits"]
    assert chunk_hits and {h["document_id"] for h in chunk_hits} <= set(found_documents)

    final = messages[-1]
    assert isinstance(final, AIMessage) and not final.tool_calls
    assert cited(final.content) == [chunk_hits[0]["id"]]

    bodies = chats(api)
    assert len(bodies) == 3
    for body in bodies:
        assert {t["function"]["name"] for t in body["tools"]} == {"document_retriever", "chunk_retriever"}
    assert [m["role"] for m in bodies[2]["messages"]].count("tool") == 2


async def test_codegen_writes_sql_that_compiles_against_the_retrieved_schemas(
    api, retrieval, embedder, run_context
):
    from agent_retrieval.graphs import codegen

    ingest(load_documents([demo.schemas_dir()]), retrieval.store, embedder, retrieval.context, progress=False)
    graph = codegen.build(GraphParts(retrieval=retrieval))
    out = await graph.ainvoke(
        {"request": "total value of one-off orders per customer", "language": "sql"}, context=run_context
    )

    assert out["errors"] == [] and out["valid"] is True
    assert out["attempts"] == 1
    assert out["context_ids"]
    table = re.fullmatch(r"SELECT \* FROM (\w+) LIMIT 10;", out["code"]).group(1)
    (body,) = chats(api)
    prompt = "\n".join(m["content"] for m in body["messages"])
    assert re.search(rf"CREATE TABLE {table}\b", prompt)  # a table the retrieved context defines


async def test_indexer_stores_a_pasted_document_that_search_then_finds(api, retrieval, run_context):
    from agent_retrieval.graphs import indexer

    graph = indexer.build(GraphParts(retrieval=retrieval))
    document = {
        "id": "zanzibar-memo",
        "title": "Zanzibar office memo",
        "content": "The Zanzibar branch closes at noon on Fridays for staff training.",
    }
    out = await graph.ainvoke({"documents": [document]}, context=run_context)

    assert out["errors"] == []
    assert out["report"]["documents"] == 1 and out["report"]["written"] == 1
    assert out["report"]["chunks"] >= 1
    request = parse_request(ChunkSearchRequest, {"query": "Zanzibar branch Fridays"})
    hits = (await retrieval.asearch(request, "chunks")).hits
    assert hits[0].document_id == "zanzibar-memo"
    assert api.requests == []  # indexing needs no chat model, and the embedder is the test's
