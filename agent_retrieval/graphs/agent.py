"""A tool-calling agent with document_retriever and chunk_retriever: the pattern to copy into your own app.

The model finds documents first, then reads passages scoped to them (or `summarize`s them), and answers
citing chunk ids. With no chat model configured the same loop runs with a fixed policy (documents, then
their passages, then an extractive answer), so the graph still works offline and says so.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolCall, ToolMessage
from langgraph.graph import START, StateGraph, add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.managed import RemainingSteps
from langgraph.runtime import Runtime

from agent_retrieval.context import RunSettings
from agent_retrieval.core.prompts import load_prompt
from agent_retrieval.core.quoting import quote_id
from agent_retrieval.models import Hit
from agent_retrieval.planning import check_request
from agent_retrieval.planning.answer import NOTHING_FOUND, extractive_answer
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.server.graph_parts import GraphParts, add_nodes, last_question, run_context
from agent_retrieval.tools import make_retrieval_tools

OFFLINE_NOTE = "(No chat model is configured: searched with a fixed policy and answered extractively.)"
MAX_TOOL_CALLS = 8  # run in one step; a caller may write a message asking for any number
MAX_CONVERSATION_CHARS = 400_000  # sent to the model in one call: about 100K tokens


@dataclass(kw_only=True)
class InputState:
    """What a run starts from."""

    messages: Annotated[list[AnyMessage], add_messages] = field(default_factory=list)
    """The conversation: the user's question, then the model's tool calls, the tool results and answers."""


@dataclass(kw_only=True)
class State(InputState):
    """The agent's state."""

    remaining_steps: RemainingSteps = 25
    """Steps left before LangGraph's recursion limit; the agent answers before it is reached."""


async def call_model(state: State, runtime: Runtime[RunSettings], *, parts: GraphParts) -> dict[str, Any]:
    """Ask the model for tool calls or the answer (offline: the fixed policy's next step)."""
    question = last_question(state.messages)
    try:
        check_request(question)
    except ValueError as error:
        return {"messages": [AIMessage(str(error))]}
    if (size := sum(len(str(m.content)) for m in state.messages)) > MAX_CONVERSATION_CHARS:
        return {
            "messages": [
                AIMessage(
                    f"This conversation has grown to {size:,} characters, past the "
                    f"{MAX_CONVERSATION_CHARS:,} sent to the model at once: ask in a new thread."
                )
            ]
        }
    context = run_context(runtime)
    model = await parts.chat(context)
    if model is None:
        return {"messages": [_offline_step(question, state.messages)]}
    tools = make_retrieval_tools(Retrieval(context))  # for their schemas only: nothing is opened
    messages = [SystemMessage(load_prompt("agent")), *state.messages]
    try:
        reply = await asyncio.wait_for(
            model.bind_tools(tools).ainvoke(messages), context.chat_timeout_seconds
        )
    except Exception as error:
        return {
            "messages": [
                AIMessage(
                    f"The model failed ({type(error).__name__}); no answer was written. "
                    "Try again, or check the model's configuration."
                )
            ]
        }
    if reply.tool_calls and state.remaining_steps < 2:
        reply = AIMessage(
            "I could not finish searching within the allowed steps; here is no answer "
            "rather than a guess. Ask a narrower question.",
            id=reply.id,
        )
    return {"messages": [reply]}


async def run_tools(state: State, runtime: Runtime[RunSettings], *, parts: GraphParts) -> dict[str, Any]:
    """Run the last message's tool calls concurrently on one Retrieval."""
    last = state.messages[-1]
    calls = last.tool_calls if isinstance(last, AIMessage) else []
    async with parts.open_retrieval(run_context(runtime)) as retrieval:
        tools = {tool.name: tool for tool in make_retrieval_tools(retrieval=retrieval)}
        results = await asyncio.gather(*(_call(tools, call) for call in calls[:MAX_TOOL_CALLS]))
    refused = [
        ToolMessage(
            f"Not run: one step runs at most {MAX_TOOL_CALLS} tool calls; ask again for the rest.",
            tool_call_id=call["id"],
            name=call["name"],
            status="error",
        )
        for call in calls[MAX_TOOL_CALLS:]
    ]
    return {"messages": [*results, *refused]}


def route_model_output(state: State) -> Literal["run_tools", "__end__"]:
    last = state.messages[-1]
    return "run_tools" if isinstance(last, AIMessage) and last.tool_calls else "__end__"


def build(parts: GraphParts = GraphParts()) -> CompiledStateGraph[State, RunSettings, InputState, State]:
    """The agent, using `parts` (shared by tests and notebooks) or parts made from each run's Context."""

    builder = StateGraph(State, input_schema=InputState, context_schema=RunSettings)
    add_nodes(builder, call_model, run_tools, parts=parts)
    builder.add_edge(START, "call_model")
    builder.add_conditional_edges("call_model", route_model_output)
    builder.add_edge("run_tools", "call_model")
    compiled = builder.compile()
    compiled.name = "agent"
    return compiled


async def _call(tools: dict[str, Any], call: ToolCall) -> ToolMessage:
    tool = tools.get(call["name"])
    if tool is None:
        return ToolMessage(
            f"Unknown tool {call['name']!r}; the tools are {', '.join(tools)}.",
            tool_call_id=call["id"],
            name=call["name"],
            status="error",
        )
    message: ToolMessage = await tool.ainvoke({**call, "type": "tool_call"})  # a tool call gives one
    return message


def _offline_step(question: str, messages: list[AnyMessage]) -> AIMessage:
    """The fixed policy: document_retriever, then chunk_retriever inside what it found, then the answer."""
    since_question = messages[max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage)) :]
    results = [m for m in since_question if isinstance(m, ToolMessage)]
    if not results:
        return _tool_call("document_retriever", {"query": question})
    last = results[-1]
    hits = [Hit.from_dict(h) for h in (last.artifact or {}).get("hits", [])]
    if last.name == "document_retriever" and hits:
        # The ids as the tool showed them, as a model would copy them: the tool reads them back exactly.
        shown = [quote_id(h.id) for h in hits]
        return _tool_call("chunk_retriever", {"query": question, "document_ids": shown})
    if not hits:
        return AIMessage(f"{NOTHING_FOUND}\n\n{OFFLINE_NOTE}")
    return AIMessage(f"{extractive_answer(question, hits, '').text}\n\n{OFFLINE_NOTE}")


def _tool_call(name: str, args: dict[str, Any]) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"offline-{uuid.uuid4().hex[:12]}"}])


graph = build()
