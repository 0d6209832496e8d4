"""Answerability: each search's calibrated confidence that the store answers the query, and what the tools,
the rag graph's answer and `ask` say when it is low.

The shipped calibration is for the local embedder (measured in benchmarks/answerability.py); these tests
give the word-hash test embedder a calibration of its own, so the plumbing is checked offline.
"""

from __future__ import annotations

import asyncio

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agent_retrieval.context import Context
from agent_retrieval.graphs import rag
from agent_retrieval.models import ChunkSearchRequest, Hit
from agent_retrieval.planning.answer import (
    PROBABLY_NOT_COVERED,
    answer_sentences,
    extractive_answer,
    write_answer,
)
from agent_retrieval.search import confidence as confidence_module
from agent_retrieval.search.confidence import Calibration, confidence, is_low, signals
from agent_retrieval.server.graph_parts import GraphParts
from agent_retrieval.tools import LOW_CONFIDENCE, ChunkRetrieverTool
from tests.conftest import CountingChatModel

ON_TOPIC = "How long does the landlord have to protect the deposit?"
OFF_TOPIC = "Which volcano erupted on Iceland in 2010 and grounded flights?"


def hit(
    id_: str, similarity: float | None = None, coverage: float | None = None, unknown: int | None = None
) -> Hit:
    return Hit(
        id_,
        "chunks",
        id_,
        "T",
        "text",
        vector_similarity=similarity,
        keyword_coverage=coverage,
        unknown_terms=unknown,
    )


@pytest.fixture
def calibrated(monkeypatch):
    """A calibration for the test embedder: mostly the best similarity, as the shipped one."""
    monkeypatch.setitem(
        confidence_module.CALIBRATIONS,
        "test/word-hash",
        Calibration(weights=(12.0, 2.0), intercept=-6.0),
    )


def test_the_signals_are_the_best_similarity_and_that_of_the_best_keyword_hit():
    vector = [hit("a", 0.61), hit("b", 0.52)]
    keyword = [hit("b", coverage=0.8, unknown=2), hit("c", coverage=0.3)]
    assert signals(vector, keyword) == (0.61, 0.52)
    assert signals([], keyword) == (0.0, 0.0)  # nothing similar enough
    assert signals(vector, []) == (0.61, 0.0)
    assert signals(vector, [hit("c", coverage=0.9)]) == (0.61, 0.0)  # the paths do not agree


def test_words_the_store_has_never_seen_do_not_lower_the_confidence():
    """A paraphrased question asks for words no passage holds and is answered all the same (the demo's); they
    caught SQuAD's unanswerable questions and flagged the demo's answerable ones (answerability)."""
    found = [hit("a", 0.55)], [hit("a", coverage=0.9, unknown=0)]
    new_words = [hit("a", 0.55)], [hit("a", coverage=0.4, unknown=5)]
    model = "local/all-MiniLM-L6-v2"
    assert confidence(*found, model) == confidence(*new_words, model)


def test_an_uncalibrated_embedder_gives_no_confidence_and_unknown_is_never_low():
    assert confidence([hit("a", 0.9)], [], "openai/text-embedding-3-small") is None
    assert not is_low(None)
    shipped = confidence([hit("a", 0.7)], [hit("a", coverage=0.9)], "local/all-MiniLM-L6-v2")
    assert shipped is not None and not is_low(shipped)
    assert is_low(confidence([hit("a", 0.2)], [hit("b", coverage=0.1)], "local/all-MiniLM-L6-v2"))


def test_a_search_the_store_cannot_answer_says_so_and_still_lists_what_it_found(retrieval, calibrated):
    tool = ChunkRetrieverTool(retrieval=retrieval)
    off = retrieval.search(ChunkSearchRequest(query=OFF_TOPIC), "chunks")
    on = retrieval.search(ChunkSearchRequest(query=ON_TOPIC), "chunks")
    assert off.confidence is not None and on.confidence is not None and off.confidence < on.confidence
    assert is_low(off.confidence) and not is_low(on.confidence)
    text = tool.invoke({"query": OFF_TOPIC})
    assert f"Note: {LOW_CONFIDENCE} (" in text and "<passage" in text
    assert "answer from one only if it does" in text and "do not cover it." not in text
    assert LOW_CONFIDENCE not in tool.invoke({"query": ON_TOPIC})


def test_the_offline_answer_says_nothing_answers_and_lists_the_closest_passages(retrieval, calibrated):
    graph = rag.build(GraphParts(retrieval=retrieval))
    off = asyncio.run(graph.ainvoke({"messages": [("user", OFF_TOPIC)]}, context=retrieval.context))
    on = asyncio.run(graph.ainvoke({"messages": [("user", ON_TOPIC)]}, context=retrieval.context))
    assert is_low(off["confidence"]) and off["answer"].startswith(PROBABLY_NOT_COVERED) and off["citations"]
    assert not is_low(on["confidence"]) and not on["answer"].startswith(PROBABLY_NOT_COVERED)


@pytest.mark.parametrize(
    ("told", "said"),
    [
        (0.1, "the documents probably do not answer"),
        (0.3, "confidence that the documents answer the question: 0.30"),
    ],
)
def test_the_answer_model_is_told_how_likely_the_documents_answer(told, said):
    model = CountingChatModel(responses=["Within 30 days [a#0]."])
    passages = [Hit("a#0", "chunks", "a", "A", "Deposits are protected within 30 days.", ordinal=0)]
    written = asyncio.run(write_answer("When?", passages, model, Context(), confidence=told))
    prompt = model.messages[0][-1].content  # the user's message: the question, the note, the passages
    assert written.mode == "llm" and f"<retrieval>\n{said}" in prompt
    asyncio.run(write_answer("When?", passages, model, Context(), confidence=None))
    assert "<retrieval>" not in model.messages[1][-1].content


@pytest.mark.parametrize("value", [-0.5, 1.5, "high"])
def test_a_confidence_written_into_the_threads_state_is_checked_where_it_is_read(retrieval, value):
    graph = rag.build(GraphParts(retrieval=retrieval)).copy(update={"checkpointer": InMemorySaver()})
    config = {"configurable": {"thread_id": "t"}}
    asyncio.run(graph.ainvoke({"messages": [("user", ON_TOPIC)]}, config, context=retrieval.context))
    graph.update_state(config, {"confidence": value}, as_node="retrieve")
    out = asyncio.run(graph.ainvoke(None, config, context=retrieval.context))
    assert out["answer"].startswith("the thread's state holds an invalid confidence")


# --- the offline answer's sentences -----------------------------------------------------------------


def passage_hits(*texts: str) -> list[Hit]:
    return [Hit(f"d{n}#0", "chunks", f"d{n}", f"D{n}", text, ordinal=0) for n, text in enumerate(texts)]


def test_a_sentence_holding_the_questions_rare_words_beats_one_holding_its_common_ones():
    hits = passage_hits(
        "The service will start each year in spring. Each year the service will start daily. Every year "
        "the service will start at six. The Orkney ferry began in 1962."
    )
    (best,) = answer_sentences("Which year did the Orkney ferry service start?", hits, count=1)
    assert best == (0, "The Orkney ferry began in 1962.")


def test_after_the_best_sentence_the_names_it_holds_lead_to_the_next():
    hits = passage_hits(
        "The Blue Widget was made by its creator Anna Berg. The Blue Widget is sold in shops.",
        "Anna Berg married Tom Lind in 1995.",
        "Sales of the Blue Widget rose in 2001.",
    )
    chosen = answer_sentences("Who is the spouse of the creator of the Blue Widget?", hits, count=2)
    assert chosen == [
        (0, "The Blue Widget was made by its creator Anna Berg."),
        (1, "Anna Berg married Tom Lind in 1995."),
    ]
    text = extractive_answer("Who is the spouse of the creator of the Blue Widget?", hits, "offline").text
    assert "Anna Berg married Tom Lind in 1995. [d1#0]" in text and text.index("[d0#0]") < text.index(
        "[d1#0]"
    )
