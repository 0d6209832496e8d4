"""The argument rules of validation.py on every entry point a caller or a model reaches: each tool (sync and
async), AgentRetriever, and every place a question comes in. Each case names its entry point, so one that
skips a rule fails here by name. (The stores' own arguments are held to the same rules, on every backend,
in tests/conformance/test_store_contract.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent_retrieval.context import Context
from agent_retrieval.errors import InvalidRequest
from agent_retrieval.graphs import codegen
from agent_retrieval.planning import check_request
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.server.graph_parts import GraphParts
from agent_retrieval.tools import TOOLS, AgentRetriever, make_retrieval_tools
from tests.conftest import WordHashEmbeddings


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    context = Context(db_path=str(tmp_path_factory.mktemp("rules") / "store.db"))
    with Retrieval(context, embedder=Embedder(WordHashEmbeddings(), "test/word-hash")) as retrieval:
        yield dict(zip(TOOLS, make_retrieval_tools(retrieval=retrieval, names=list(TOOLS)), strict=True))


def tool_error(tool: Any, args: dict[str, Any], *, use_async: bool) -> str:
    """The tool's answer to a call that must be refused: its error text."""
    call = {"type": "tool_call", "id": "call-1", "name": tool.name, "args": args}
    answer = asyncio.run(tool.ainvoke(call)) if use_async else tool.invoke(call)
    assert answer.status == "error", answer.content
    return answer.content.removeprefix("Invalid arguments: ")


# --- text ------------------------------------------------------------------------------------------------

# Every text field of every tool: (tool, arguments around the value, the name the error gives it, its most
# characters, whether blank is refused).
TEXT_FIELDS: dict[str, tuple[str, Callable[[Any], dict[str, Any]], str, int, bool]] = {
    "document_retriever query": ("document_retriever", lambda v: {"query": v}, "query", 4000, True),
    "chunk_retriever query": ("chunk_retriever", lambda v: {"query": v}, "query", 4000, True),
    "similarity_search query": ("similarity_search", lambda v: {"query": v}, "query", 4000, True),
    "chunk_retriever document_ids": (
        "chunk_retriever",
        lambda v: {"query": "deposit", "document_ids": ["fees", v]},
        "document_ids[1]",
        512,
        True,
    ),
    "document_retriever filters value": (
        "document_retriever",
        lambda v: {"query": "deposit", "filters": {"category": v}},
        "filters: 'category'",
        1000,
        False,
    ),
    "chunk_retriever filters value": (
        "chunk_retriever",
        lambda v: {"query": "deposit", "filters": {"category": ["policy", v]}},
        "filters: 'category'",
        1000,
        False,
    ),
    "similarity_search filters value": (
        "similarity_search",
        lambda v: {"query": "deposit", "filters": {"category": v}},
        "filters: 'category'",
        1000,
        False,
    ),
    "index_document title": ("index_document", lambda v: {"title": v, "content": "text"}, "title", 500, True),
    "index_document content": (
        "index_document",
        lambda v: {"title": "T", "content": v},
        "content",
        1_000_000,
        True,
    ),
    "index_document id": (
        "index_document",
        lambda v: {"title": "T", "content": "text", "id": v},
        "id",
        512,
        True,
    ),
    "index_document metadata value": (
        "index_document",
        lambda v: {"title": "T", "content": "text", "metadata": {"owner": v}},
        "metadata: 'owner'",
        1000,
        False,
    ),
}
BAD_TEXT: dict[str, tuple[Callable[[int], Any], str]] = {
    "NUL": (lambda most: "de\x00posit", "must not contain NUL characters (one at position 2)"),
    "lone surrogate": (
        lambda most: "de\udc80posit",
        "must be valid Unicode text: it holds a lone surrogate ('\\udc80' at position 2)",
    ),
    "too long": (lambda most: "x" * (most + 1), "must be at most"),
    "blank": (lambda most: " \n\t ", "must not be empty"),
    "not text": (lambda most: ["deposit"], "must be text (got list)"),
}


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("bad", sorted(BAD_TEXT))
@pytest.mark.parametrize("field", sorted(TEXT_FIELDS))
def test_every_text_field_of_every_tool_is_held_to_the_text_rule(tools, field, bad, use_async):
    name, arguments, label, most, blank_refused = TEXT_FIELDS[field]
    make_value, message = BAD_TEXT[bad]
    if bad == "blank" and not blank_refused:
        pytest.skip("an empty string is a value like any other here")
    if bad == "not text" and "value" in field:
        pytest.skip("numbers, booleans and lists are filter and metadata values too")
    error = tool_error(tools[name], arguments(make_value(most)), use_async=use_async)
    assert error.startswith(f"{label}: {message}"), error


# --- counts ----------------------------------------------------------------------------------------------

# What a count is never, on any entry point (the stores' cases import it): pydantic's lax int took them all.
NOT_WHOLE_NUMBERS: dict[str, Any] = {"True": True, "False": False, "2.0": 2.0, "'2'": "2", "None": None}
BAD_COUNTS = {**NOT_WHOLE_NUMBERS, "0": 0, "51": 51}
COUNT_MESSAGE = "top_k: must be a whole number between 1 and 50 (got {!r})"


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("bad", sorted(BAD_COUNTS))
@pytest.mark.parametrize("name", ["document_retriever", "chunk_retriever", "similarity_search"])
def test_top_k_of_every_search_tool_is_a_whole_number_never_a_bool(tools, name, bad, use_async):
    value = BAD_COUNTS[bad]
    error = tool_error(tools[name], {"query": "deposit", "top_k": value}, use_async=use_async)
    assert error == COUNT_MESSAGE.format(value)


@pytest.mark.parametrize("bad", sorted(BAD_COUNTS))
def test_the_retriever_s_k_is_held_to_the_same_rule_when_made_and_when_overridden(tools, bad):
    value = BAD_COUNTS[bad]
    retrieval = tools["chunk_retriever"].retrieval
    with pytest.raises(ValueError, match=r"k\n  Value error, must be a whole number between 1 and 50"):
        AgentRetriever(retrieval=retrieval, k=value)
    with pytest.raises(InvalidRequest) as refused:
        AgentRetriever(retrieval=retrieval).invoke("deposit", k=value)
    assert str(refused.value) == "Invalid arguments: " + COUNT_MESSAGE.format(value)


# --- questions -------------------------------------------------------------------------------------------


def codegen_error(request: Any) -> str:
    out = asyncio.run(codegen.build(GraphParts()).ainvoke({"request": request}))
    assert len(out["errors"]) == 1, out["errors"]
    return out["errors"][0]


def planner_error(question: Any) -> str:
    with pytest.raises(InvalidRequest) as refused:
        check_request(question)
    return str(refused.value)


# Where a question comes in, and the name its errors give it: the tools' query (above), the question of the
# rag and agent graphs (planning.check_request), and the code request of the codegen graph.
QUESTION_ENTRY_POINTS: dict[str, tuple[Callable[[Any], str], str]] = {
    "rag and agent graphs": (planner_error, "question"),
    "codegen graph": (codegen_error, "request"),
}


@pytest.mark.parametrize("bad", sorted(BAD_TEXT))
@pytest.mark.parametrize("entry", sorted(QUESTION_ENTRY_POINTS))
def test_every_question_is_held_to_the_one_question_rule(entry, bad):
    error_of, label = QUESTION_ENTRY_POINTS[entry]
    make_value, message = BAD_TEXT[bad]
    error = error_of(make_value(4000))
    assert error.startswith(f"{label}: {message}"), error
