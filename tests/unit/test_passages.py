"""chunk_retriever's `neighbors`: each passage with the chunks around it, in reading order, as one text."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace

import pytest

from agent_retrieval.context import Context
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.chunking import chunk_document
from agent_retrieval.models import Document, Hit
from agent_retrieval.search.passages import widened
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.tools import ChunkRetrieverTool

# Paragraphs of about 300 characters, each its own chunk at size 350: the question below matches the third,
# and its answer is the fourth.
PARAGRAPHS = [f"Paragraph {n}: " + " ".join(f"filler{n}word{i}" for i in range(26)) for n in range(1, 7)]
PARAGRAPHS[2] = (
    "Tenants report heating faults in winter through the tenant portal, with a photo of the boiler, its "
    "make and model from the label on the front panel, the pressure shown on the gauge, and the hours when "
    "someone will be at home to let the engineer in."
)
PARAGRAPHS[3] = (
    "An engineer then visits within 48 hours and the landlord pays for the repair, unless the fault was "
    "caused by the tenant; parts that must be ordered are fitted at a second visit, and a fan heater is "
    "lent in the meantime on request."
)
MANUAL = Document("manual", "Boiler manual", "\n\n".join(PARAGRAPHS))
# One long paragraph of distinct words: the chunker splits it at spaces and repeats text at each edge.
RUN_ON = Document("run-on", "Run-on", " ".join(f"word{i}" for i in range(400)))


def chunk_hit(chunk, tenant: str = "") -> Hit:
    return Hit(
        chunk.id,
        "chunks",
        chunk.document_id,
        "Boiler manual",
        chunk.content,
        ordinal=chunk.ordinal,
        heading_path=chunk.heading_path,
        tenant=tenant,
    )


@pytest.fixture
def chunks():
    return [chunk_hit(c) for c in chunk_document(RUN_ON, chunk_size=300, chunk_overlap=100)]


def test_a_passage_with_its_neighbours_is_the_documents_text_in_reading_order_said_once(chunks):
    edges = [a.content[-40:] in b.content for a, b in itertools.pairwise(chunks)]
    assert len(chunks) >= 4 and any(edges)  # the chunker repeats text at some edges
    middle = chunks[2]
    (passage,) = widened([middle], chunks, reach=1, overlap=150)
    assert passage.id == middle.id and passage.heading_path == middle.heading_path
    assert passage.content.startswith(chunks[1].content) and passage.content.endswith(chunks[3].content)
    assert passage.content in RUN_ON.content  # the text as written: each repeated edge said once


def test_no_chunk_is_in_two_passages_and_a_hit_inside_a_better_passage_is_not_listed_again(chunks):
    passages = widened([chunks[2], chunks[3], chunks[0]], chunks, reach=1, overlap=150)
    assert [p.id for p in passages] == [chunks[2].id, chunks[0].id]  # chunks[3] is inside the first
    assert passages[1].content == chunks[0].content  # chunks[1] is already shown: it stops there


def test_a_neighbour_of_another_document_or_tenant_never_joins(chunks):
    other_document = replace(chunks[3], document_id="other", content="OTHER DOCUMENT")
    other_tenant = replace(chunks[1], tenant="globex", content="OTHER TENANT")
    (passage,) = widened([chunks[2]], [other_document, other_tenant, chunks[2]], reach=1, overlap=150)
    assert passage.content == chunks[2].content


def test_a_short_coincidental_match_at_an_edge_is_not_taken_for_overlap():
    first = Hit("d#0", "chunks", "d", "T", "It was made of stone", ordinal=0)
    second = Hit("d#1", "chunks", "d", "T", "one bridge crossed the river.", ordinal=1)
    (passage,) = widened([first], [first, second], reach=1, overlap=150)
    assert passage.content == "It was made of stone\n\none bridge crossed the river."


def test_chunk_retriever_returns_the_answer_across_a_chunks_edge_with_neighbours(tmp_path, embedder):
    context = Context(db_path=str(tmp_path / "n.db"), chunk_size=350, chunk_overlap=50)
    with Retrieval(context, embedder=embedder) as retrieval:
        ingest([MANUAL], retrieval.store, embedder, context, progress=False)
        tool = ChunkRetrieverTool(retrieval=retrieval)
        question = "what happens after tenants report heating faults in winter through the portal"
        alone = tool.invoke({"query": question, "top_k": 1})
        around = tool.invoke({"query": question, "top_k": 1, "neighbors": 1})
        refused = tool.invoke({"query": question, "neighbors": 4})
    assert "through the tenant portal" in alone and "within 48 hours" not in alone
    assert "through the tenant portal" in around and "within 48 hours" in around
    assert refused == "Invalid arguments: neighbors: must be a whole number between 0 and 3 (got 4)"


def test_the_rag_graphs_answer_model_reads_passages_with_their_neighbours_and_the_offline_answer_does_not(
    tmp_path, embedder
):
    from agent_retrieval.graphs import rag
    from agent_retrieval.server.graph_parts import GraphParts
    from tests.conftest import CountingChatModel

    context = Context(db_path=str(tmp_path / "n.db"), chunk_size=350, chunk_overlap=50, answer_chunks=1)
    question = "What happens after tenants report heating faults in winter through the portal?"
    with Retrieval(context, embedder=embedder) as retrieval:
        ingest([MANUAL], retrieval.store, embedder, context, progress=False)

        def passages(chat: CountingChatModel | None, reach: int) -> str:
            graph = rag.build(GraphParts(retrieval=retrieval, chat_model=chat))
            settings = context.replace(answer_neighbors=reach)
            out = asyncio.run(graph.ainvoke({"messages": [("user", question)]}, context=settings))
            return " ".join(hit["content"] for hit in out["hits"])

        def model() -> CountingChatModel:
            return CountingChatModel(responses=["not a plan", "Within 48 hours [manual#2]."])

        assert "within 48 hours" not in passages(model(), 0)
        assert "within 48 hours" in passages(model(), 1)
        assert "within 48 hours" not in passages(None, 1)
