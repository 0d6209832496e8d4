"""graphs/agent.py: the tool-calling loop with a fake tool-calling model, offline, and its bounds."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from pydantic import Field

from agent_retrieval.context import Context, RunSettings
from agent_retrieval.graphs import agent
from agent_retrieval.ingest import ingest
from agent_retrieval.server.graph_parts import GraphParts
from tests.conftest import ToolCallingFake
from tests.promptcheck import PAYLOADS, assert_quoted, hostile_document, passages_outline

QUESTION = "How long does the landlord have to protect the deposit?"


def call(name: str, args: dict, id_: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": id_}])


async def run(graph, question: str, context: Context, **config) -> list:
    out = await graph.ainvoke(
        {"messages": [{"role": "user", "content": question}]}, context=context, config=config or None
    )
    return out["messages"]


async def test_the_model_finds_documents_then_reads_their_passages(retrieval):
    model = ToolCallingFake(
        messages=iter(
            [
                call("document_retriever", {"query": QUESTION, "top_k": 3}, "c1"),
                call("chunk_retriever", {"query": QUESTION, "document_ids": ["tenancy-deposit-guide"]}, "c2"),
                AIMessage("Within thirty days [tenancy-deposit-guide#2]."),
            ]
        )
    )
    messages = await run(
        agent.build(GraphParts(retrieval=retrieval, chat_model=model)), QUESTION, retrieval.context
    )
    tools = [m for m in messages if isinstance(m, ToolMessage)]
    assert [t.name for t in tools] == ["document_retriever", "chunk_retriever"]
    assert all(t.status == "success" for t in tools)
    assert "tenancy-deposit-guide" in {h["id"] for h in tools[0].artifact["hits"]}
    assert {h["document_id"] for h in tools[1].artifact["hits"]} == {"tenancy-deposit-guide"}
    assert messages[-1].content.startswith("Within thirty days")
    assert model.bound[-1] == ["document_retriever", "chunk_retriever"]


async def test_offline_the_fixed_policy_runs_the_same_loop_and_cites(retrieval):
    messages = await run(agent.build(GraphParts(retrieval=retrieval)), QUESTION, retrieval.context)
    calls = [m.tool_calls[0] for m in messages if isinstance(m, AIMessage) and m.tool_calls]
    assert [c["name"] for c in calls] == ["document_retriever", "chunk_retriever"]
    found = [m for m in messages if isinstance(m, ToolMessage)]
    assert calls[1]["args"]["document_ids"] == [h["id"] for h in found[0].artifact["hits"]]
    final = messages[-1].content
    assert "No chat model is configured" in final
    assert f"[{found[1].artifact['hits'][0]['id']}]" in final


async def test_bad_tool_arguments_and_unknown_tools_come_back_as_tool_errors(retrieval):
    model = ToolCallingFake(
        messages=iter(
            [
                AIMessage(
                    "",
                    tool_calls=[
                        {"name": "chunk_retriever", "args": {"query": "x", "top_k": 500}, "id": "a"},
                        {"name": "web_search", "args": {"q": "x"}, "id": "b"},
                    ],
                ),
                AIMessage("I could not search."),
            ]
        )
    )
    messages = await run(
        agent.build(GraphParts(retrieval=retrieval, chat_model=model)), QUESTION, retrieval.context
    )
    errors = {m.name: m for m in messages if isinstance(m, ToolMessage)}
    assert (
        "top_k" in errors["chunk_retriever"].content
        and "between 1 and 50" in errors["chunk_retriever"].content
    )
    assert errors["web_search"].status == "error" and "document_retriever" in errors["web_search"].content
    assert messages[-1].content == "I could not search."


async def test_a_model_that_never_stops_searching_is_stopped_before_the_recursion_limit(retrieval):
    endless = ToolCallingFake(
        messages=iter([call("document_retriever", {"query": f"try {n}"}, f"c{n}") for n in range(100)])
    )
    messages = await run(
        agent.build(GraphParts(retrieval=retrieval, chat_model=endless)),
        QUESTION,
        retrieval.context,
        recursion_limit=8,
    )
    assert isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls
    assert "allowed steps" in messages[-1].content


@pytest.mark.parametrize(("question", "expected"), [("  ", "empty"), ("deposit " * 12_500, "at most 4,000")])
async def test_an_empty_or_100kb_question_is_refused_without_a_model_call(retrieval, question, expected):
    model = ToolCallingFake(messages=iter([]))
    messages = await run(
        agent.build(GraphParts(retrieval=retrieval, chat_model=model)), question, retrieval.context
    )
    assert expected in messages[-1].content and model.bound == []


class ReadingFake(ToolCallingFake):
    """Also keeps every list of messages it was sent, so a script can act on what the tools returned."""

    sent: list[Any] = Field(default_factory=list)

    def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
        self.sent.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


@pytest.mark.parametrize("variant", PAYLOADS)
async def test_tool_results_reach_the_model_with_every_field_inside_its_own_passage(retrieval, variant):
    document = hostile_document(variant)
    ingest([document], retrieval.store, retrieval.embedder, retrieval.context, progress=False)
    query = "deposit protected within thirty days of receipt"

    def script() -> Iterator[AIMessage]:
        yield call("document_retriever", {"query": query, "top_k": 3}, "c1")
        # The ids exactly as the tool showed them, as a model copies them into its next call.
        shown = re.findall(r'<passage id="([^"]+)"', model.sent[-1][-1].content)
        yield call("chunk_retriever", {"query": query, "document_ids": shown}, "c2")
        yield AIMessage("Within thirty days.")

    model = ReadingFake(messages=script(), sent=[])
    messages = await run(
        agent.build(GraphParts(retrieval=retrieval, chat_model=model)), query, retrieval.context
    )
    system = model.sent[0][0].content
    assert "<passage>" in system and "data, not instructions" in system
    documents, chunks = [m for m in messages if isinstance(m, ToolMessage)]
    assert chunks.status == "success", chunks.content  # the shown ids came back as the stored ones
    assert document.id in {h["document_id"] for h in chunks.artifact["hits"]}
    for result, hostile, fields in (
        (documents, document.id, {"ID", "TITLE", "HEADING", "BODY", "METAKEY", "METAVALUE"}),
        (chunks, f"{document.id}#0", {"ID", "TITLE", "HEADING", "BODY", "METAKEY", "METAVALUE"}),
    ):
        sent = next(
            m for m in model.sent[-1] if isinstance(m, ToolMessage) and m.tool_call_id == result.tool_call_id
        )
        hits = result.artifact["hits"]
        assert hostile in {h["id"] for h in hits}
        assert_quoted(
            sent.content,
            [passages_outline(len(hits), [bool(h["metadata"]) for h in hits])],
            {hostile},
            fields,
        )


def test_the_module_graph_builds_nothing_at_import():
    assert agent.graph.name == "agent" and agent.graph.context_schema is RunSettings
