"""The rerank stage: Voyage's rerank API through the real voyageai SDK (against tests/fakeapi.py), any
LangChain BaseDocumentCompressor, its deadline and failures (the fused order stands, and says so), and how
many rerank calls a tool call and a rag-graph question cost."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence

import pytest
from langchain_core.documents import BaseDocumentCompressor
from langchain_core.documents import Document as LCDocument

from agent_retrieval.context import Context, RerankSettings
from agent_retrieval.errors import ConfigError
from agent_retrieval.graphs import rag
from agent_retrieval.models import ChunkSearchRequest, SearchRequest, parse_request
from agent_retrieval.planning import READING_ON
from agent_retrieval.search.rerank import make_reranker
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.server.graph_parts import GraphParts
from agent_retrieval.tools import make_retrieval_tools
from tests.fakeapi import FakeAPI
from tests.unit.test_rag_graph import PLAN, QUESTION, CitingChatModel

QUERY = "how long does the landlord have to protect a tenancy deposit"
VOYAGE_KEY = "pa-rerank-secret-456"


def voyage_reranking(retrieval: Retrieval, api: FakeAPI, **settings) -> Retrieval:
    """A Retrieval over the same store whose operator configured Voyage's reranker."""
    context = Context(
        db_path=retrieval.context.store.db_path,
        reranker="voyage",
        voyage_api_key=VOYAGE_KEY,
        voyage_base_url=api.voyage_url,
        max_retries=0,
        **settings,
    )
    return Retrieval(context, store=retrieval.store, embedder=retrieval.embedder)


def request(top_k: int = 5, query: str = QUERY) -> SearchRequest:
    return parse_request(SearchRequest, {"query": query, "top_k": top_k})


def overlap(query: str, text: str) -> float:
    """The fake server's relevance: the share of the query's words the text holds."""
    words = set(re.findall(r"\w+", query.lower()))
    return len(words & set(re.findall(r"\w+", text.lower()))) / len(words)


class Reversing(BaseDocumentCompressor):
    """A stand-in cross-encoder: the candidates in reverse, the last one left out, each with a score."""

    calls: int = 0

    def compress_documents(
        self, documents: Sequence[LCDocument], query: str, callbacks=None
    ) -> Sequence[LCDocument]:
        self.calls += 1
        kept = list(reversed(documents))[:-1]
        return [
            LCDocument(page_content=d.page_content, metadata={**d.metadata, "relevance_score": 1.0 - n / 10})
            for n, d in enumerate(kept)
        ]


class Forgetful(BaseDocumentCompressor):
    """A compressor that returns documents it was not given (their metadata lost)."""

    def compress_documents(self, documents, query, callbacks=None):
        return [LCDocument(page_content=d.page_content) for d in documents]


def test_off_by_default_no_reranker_and_no_call(retrieval, api):
    assert retrieval.reranker is None
    result = retrieval.search(request(), "documents")
    assert result.rerank == "off" and not result.degraded
    context = Context(
        voyage_api_key=VOYAGE_KEY, voyage_base_url=api.voyage_url
    )  # a key alone turns nothing on
    assert make_reranker(context.rerank, timeout=1.0) is None and api.requests_to("rerank") == []


@pytest.mark.parametrize("level", ["documents", "chunks"])
async def test_voyage_reorders_the_fused_candidates_through_the_sdk(retrieval, api, level):
    reranking = voyage_reranking(retrieval, api, rerank_candidates=8)
    model = ChunkSearchRequest if level == "chunks" else SearchRequest
    fused = retrieval.search(parse_request(model, {"query": QUERY, "top_k": 8}), level).hits
    result = await reranking.asearch(parse_request(model, {"query": QUERY, "top_k": 3}), level)

    [sent] = api.requests_to("rerank", api="voyage")
    assert sent.body["query"] == QUERY and sent.body["model"] == "rerank-2.5-lite"
    assert sent.headers["authorization"] == f"Bearer {VOYAGE_KEY}"
    assert len(sent.body["documents"]) == 8  # rerank_candidates deep, not the caller's top_k
    assert all(hit.content in text for hit, text in zip(fused, sent.body["documents"], strict=True))

    scores = [overlap(QUERY, text) for text in sent.body["documents"]]
    best = sorted(range(8), key=lambda i: (-scores[i], i))[:3]
    assert [h.id for h in result.hits] == [fused[i].id for i in best]
    assert [h.score for h in result.hits] == [scores[i] for i in best]
    assert result.rerank == "used" and not result.degraded


def test_a_failing_reranker_keeps_the_fused_order_and_says_so(retrieval, api):
    reranking = voyage_reranking(retrieval, api)
    fused = retrieval.search(request(), "documents")
    api.fail_next(401, endpoint="rerank")
    result = reranking.search(request(), "documents")
    assert [h.id for h in result.hits] == [h.id for h in fused.hits]
    assert result.rerank == "failed"
    [note] = result.degraded
    assert note.startswith("rerank skipped") and "fused order kept" in note and VOYAGE_KEY not in note


async def test_a_late_reranker_is_given_up_at_its_deadline(retrieval, api):
    reranking = voyage_reranking(retrieval, api, rerank_timeout_seconds=0.3)
    fused = retrieval.search(request(), "documents")
    for search in (reranking.search, reranking.asearch):
        api.delay_next(3, endpoint="rerank")
        started = time.monotonic()
        result = search(request(), "documents")
        result = await result if not hasattr(result, "hits") else result
        assert time.monotonic() - started < 2.5  # the deadline, not the server, ended the wait
        assert [h.id for h in result.hits] == [h.id for h in fused.hits] and result.rerank == "failed"
        # at the stage's deadline, or the SDK's own timeout, which is set no longer
        assert re.match(r"rerank skipped: .*(rerank_timeout_seconds=0.3|Timeout)", result.degraded[0])


class Slow(BaseDocumentCompressor):
    """A compressor that answers after `seconds`, in the given order."""

    seconds: float = 3.0

    def compress_documents(self, documents, query, callbacks=None):
        time.sleep(self.seconds)
        return documents


async def test_a_slow_compressor_is_given_up_at_the_stage_deadline(retrieval):
    context = Context(db_path=retrieval.context.store.db_path, rerank_timeout_seconds=0.3)
    reranking = Retrieval(context, store=retrieval.store, embedder=retrieval.embedder, reranker=Slow())
    started = time.monotonic()
    result = await reranking.asearch(request(), "documents")
    assert time.monotonic() - started < 2.5
    assert result.rerank == "failed" and "rerank_timeout_seconds=0.3" in result.degraded[0]


def test_any_document_compressor_reranks_and_nothing_is_lost(retrieval):
    compressor, depth = Reversing(), 6
    context = Context(db_path=retrieval.context.store.db_path, rerank_candidates=depth)
    reranking = Retrieval(context, store=retrieval.store, embedder=retrieval.embedder, reranker=compressor)
    fused = retrieval.search(request(top_k=10), "documents").hits
    assert len(fused) == 10  # so that some candidates are below the reranked ones

    result = reranking.search(request(top_k=10), "documents")
    head = fused[:depth]
    expected = [*reversed(head[1:]), head[0], *fused[depth:]]  # the left-out one follows the reranked
    assert [h.id for h in result.hits] == [h.id for h in expected]
    assert compressor.calls == 1 and result.rerank == "used"


def test_a_compressor_returning_strangers_keeps_the_fused_order(retrieval):
    reranking = Retrieval(
        retrieval.context, store=retrieval.store, embedder=retrieval.embedder, reranker=Forgetful()
    )
    result = reranking.search(request(), "documents")
    assert [h.id for h in result.hits] == [h.id for h in retrieval.search(request(), "documents").hits]
    assert result.rerank == "failed" and "rerank skipped: KeyError" in result.degraded[0]


def test_a_run_may_turn_reranking_off(retrieval):
    compressor = Reversing()
    context = Context(db_path=retrieval.context.store.db_path, rerank_candidates=0)
    reranking = Retrieval(context, store=retrieval.store, embedder=retrieval.embedder, reranker=compressor)
    assert reranking.search(request(), "documents").rerank == "off" and compressor.calls == 0


def test_voyage_without_a_key_is_a_clear_configuration_error(retrieval):
    with pytest.raises(ConfigError, match="reranker is voyage but VOYAGE_API_KEY is not set"):
        make_reranker(RerankSettings(reranker="voyage"), timeout=1.0)
    reranking = Retrieval(
        Context(db_path=retrieval.context.store.db_path, reranker="voyage"), store=retrieval.store
    )
    tool, _ = make_retrieval_tools(retrieval=reranking)
    message = tool.invoke({"query": QUERY})
    assert "VOYAGE_API_KEY is not set" in message and "Traceback" not in message


async def test_rerank_calls_per_question_one_per_tool_call(retrieval, api):
    document_retriever, chunk_retriever = make_retrieval_tools(retrieval=voyage_reranking(retrieval, api))
    for tool in (document_retriever, chunk_retriever):
        assert "(hybrid search, reranked;" in await tool.ainvoke({"query": QUERY})
    assert len(api.requests_to("rerank")) == 2


class Counting(BaseDocumentCompressor):
    """A reranker that keeps the fused order (so that the graph reads on as it would without one)."""

    calls: int = 0

    def compress_documents(self, documents, query, callbacks=None):
        self.calls += 1
        return documents


async def test_rerank_calls_per_question_in_the_rag_graph_one_per_planned_search(retrieval):
    counting = Counting()
    reranking = Retrieval(
        retrieval.context, store=retrieval.store, embedder=retrieval.embedder, reranker=counting
    )
    # a plan whose search leads the graph to read on: the property file names what it is read on to
    plan = json.loads(PLAN)
    plan["queries"] = [{"text": "14 Banda Lane deposit protection", "priority": 1}]
    chat = CitingChatModel(responses=[json.dumps(plan)])
    graph = rag.build(GraphParts(retrieval=reranking, chat_model=chat))
    out = await graph.ainvoke(
        {"messages": [{"role": "user", "content": QUESTION}]}, context=reranking.context
    )
    planned = [s for s in out["searches"] if s["purpose"] != READING_ON and s["status"] == "ran"]
    assert any(s["purpose"] == READING_ON for s in out["searches"])
    assert counting.calls == len(planned) >= 1  # reading on's searches are not reranked
    assert all(s["rerank"] == "used" for s in planned)
