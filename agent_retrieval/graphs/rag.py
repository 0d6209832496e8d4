"""Planner -> retrieval -> answer: the question is planned into searches, they run (HyDE + hybrid, fused
across queries, multi-hop when the plan needs it), and the answer is written from the passages, citing them.

Offline it still runs end to end: a heuristic plan and an extractive answer, each saying so in `notes`.
The state shows the plan, each search's hits and HyDE status, never the HyDE text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from pydantic import Field

from agent_retrieval.context import RunSettings
from agent_retrieval.errors import AgentRetrievalError, InvalidRequest
from agent_retrieval.models import MAX_TOP_K, ChunkSearchRequest, Hit, parse_request
from agent_retrieval.planning import QueryPlan, check_request, make_plan, run_plan
from agent_retrieval.planning.answer import write_answer
from agent_retrieval.server.graph_parts import GraphParts, add_nodes, last_question, read_state, run_context

# The most passages an answer is written from: answer_chunks, and what reading on adds beside them.
MAX_ANSWER_PASSAGES = 2 * MAX_TOP_K
AnswerPassages = Annotated[list[Hit], Field(max_length=MAX_ANSWER_PASSAGES)]
Confidence = Annotated[float | None, Field(ge=0.0, le=1.0)]


@dataclass(kw_only=True)
class InputState:
    """What a run starts from."""

    messages: Annotated[list[AnyMessage], add_messages] = field(default_factory=list)
    """The conversation; its last human message is the question."""


@dataclass(kw_only=True)
class State(InputState):
    """Everything the run worked out, shown in Studio."""

    question: str = ""
    """The question being answered."""

    plan: dict[str, Any] = field(default_factory=dict)
    """The query plan: intent, queries (text, target, priority, ...), filters and search strategy."""

    planner: str = ""
    """Who made the plan: llm, heuristic (no chat model), or fallback (the LLM's plan failed)."""

    searches: list[dict[str, Any]] = field(default_factory=list)
    """Each search as it ran: its text, hop, status, hit ids, HyDE status and degradations."""

    hits: list[dict[str, Any]] = field(default_factory=list)
    """The passages the answer is written from, fused across searches, best first."""

    confidence: float | None = None
    """That the documents answer the question, 0 to 1 (the most confident search; None if unknown)."""

    answer: str = ""
    """The answer, citing passages by id in [brackets]."""

    citations: list[str] = field(default_factory=list)
    """The passage ids the answer cites (each one among `hits`)."""

    notes: list[str] = field(default_factory=list)
    """Everything that did not run as configured, and why."""


async def plan_searches(state: State, runtime: Runtime[RunSettings], *, parts: GraphParts) -> dict[str, Any]:
    """Check the question and plan its searches (LLM structured output, or heuristics offline)."""
    question = last_question(state.messages)
    try:
        question = check_request(question)
    except InvalidRequest as error:
        # nothing of a thread's earlier run stays to be routed on or answered from
        cleared: dict[str, Any] = {
            "plan": {},
            "searches": [],
            "hits": [],
            "citations": [],
            "confidence": None,
        }
        return {"question": question[:200], "answer": str(error), "notes": [str(error)], **cleared}
    context = run_context(runtime)
    notes: list[str] = []
    try:  # what the caller's documents are tagged with: the filters a plan may use
        async with parts.open_retrieval(context) as retrieval:
            facets = await retrieval.store.ametadata_values()
    except AgentRetrievalError as error:
        facets, notes = None, [f"could not list the documents' metadata ({error}): filters not checked"]
    planned = await make_plan(question, context, await parts.chat(context), facets=facets)
    return {
        "question": question,
        "plan": planned.plan.model_dump(),
        "planner": planned.planner,
        "notes": notes + planned.notes,
        "answer": "",
    }


async def retrieve(state: State, runtime: Runtime[RunSettings], *, parts: GraphParts) -> dict[str, Any]:
    """Run the plan; if it found documents but no passages, read passages inside those documents."""
    try:  # the thread's state, which a server's caller may have written: checked like input
        plan = read_state("plan", state.plan, QueryPlan)
        question = check_request(state.question)
    except InvalidRequest as error:
        return {"searches": [], "hits": [], "confidence": None, "notes": [*state.notes, str(error)]}
    context = run_context(runtime)
    async with parts.open_retrieval(context) as retrieval:
        chat = await parts.chat(context)
        run = await run_plan(plan, retrieval, top_k=context.answer_chunks, llm=chat)
        chunks, notes = run.chunks, list(run.notes)
        if not chunks and run.documents:
            request = parse_request(
                ChunkSearchRequest,
                {
                    "query": question,
                    "top_k": context.answer_chunks,
                    "document_ids": [hit.id for hit in run.documents],
                },
            )
            chunks = (await retrieval.asearch(request, "chunks")).hits
            notes.append("the plan found documents only: read the best passages inside them")
        # A model reads whole passages; the offline answer quotes sentences, and text around them only
        # dilutes its choice (benchmarks/answers.py: 92.0% of answers contained without, 86.3% with).
        if chat is not None and context.answer_neighbors and chunks:
            chunks = await retrieval.aneighbors(chunks, context.answer_neighbors)
    return {
        "searches": [s.to_dict() for s in run.searches],
        "hits": [h.to_dict() for h in chunks],
        "confidence": run.confidence,
        "notes": state.notes + notes,
    }


async def answer(state: State, runtime: Runtime[RunSettings], *, parts: GraphParts) -> dict[str, Any]:
    """Write the answer from the passages (or extract it offline), citing them."""
    try:  # the thread's state, which a server's caller may have written: checked like input
        question = check_request(state.question)
        hits = read_state("hits", state.hits, AnswerPassages)
        confidence = read_state("confidence", state.confidence, Confidence)
    except InvalidRequest as error:
        return {"answer": str(error), "citations": [], "messages": [AIMessage(str(error))]}
    context = run_context(runtime)
    written = await write_answer(question, hits, await parts.chat(context), context, confidence=confidence)
    return {
        "answer": written.text,
        "citations": written.citations,
        "notes": state.notes + written.notes,
        "messages": [AIMessage(written.text)],
    }


async def refuse(state: State) -> dict[str, Any]:
    """Say what is wrong with the question (empty, too long) instead of searching."""
    return {"messages": [AIMessage(state.answer)]}


def route_question(state: State) -> Literal["retrieve", "refuse"]:
    return "retrieve" if state.plan else "refuse"


def build(parts: GraphParts = GraphParts()) -> CompiledStateGraph[State, RunSettings, InputState, State]:
    """The graph, using `parts` (shared by tests and notebooks) or parts made from each run's Context."""

    builder = StateGraph(State, input_schema=InputState, context_schema=RunSettings)
    add_nodes(builder, plan_searches, retrieve, answer, refuse, parts=parts)
    builder.add_edge(START, "plan_searches")
    builder.add_conditional_edges("plan_searches", route_question)
    builder.add_edge("retrieve", "answer")
    builder.add_edge("answer", END)
    builder.add_edge("refuse", END)
    compiled = builder.compile()
    compiled.name = "rag"
    return compiled


graph = build()
