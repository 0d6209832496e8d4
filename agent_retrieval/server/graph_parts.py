"""What the graphs' nodes work with: a Retrieval and a chat model, given once or made per run; and the
graphs' edge, where everything a node writes passes the redactor.

A graph module builds its graph with `GraphParts()` at import, so nothing is created until a run starts;
tests, notebooks and apps that already hold a store, embedder or model pass them in instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.errors import GraphBubbleUp
from langgraph.graph import StateGraph
from langgraph.runtime import Runtime
from pydantic import TypeAdapter, ValidationError

from agent_retrieval.context import Context, RunSettings
from agent_retrieval.core.redaction import redact, redact_value
from agent_retrieval.errors import AgentRetrievalError, InvalidRequest, StoreError
from agent_retrieval.models import explain
from agent_retrieval.providers.llm import make_chat_model
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.stores import missing_store


def run_context(runtime: Runtime[RunSettings]) -> Context:
    """The settings a run works with.

    A Context that code passed in (`graph.ainvoke(input, context=Context(...))`) is the operator's own and
    is used as it is. Otherwise the run's context holds run settings only (a server's caller can set no
    more), and the deployment settings come from the environment, narrowed to the authenticated user.
    """
    if isinstance(runtime.context, Context):
        return runtime.context
    if runtime.server_info is None:  # code running the graph with run settings of its own
        return Context.from_env().with_run(runtime.context)
    from agent_retrieval.server.auth import deployment_for

    return deployment_for(runtime.server_info.user).with_run(runtime.context)


def read_state(name: str, value: Any, kind: Any) -> Any:
    """A field of a thread's state as `kind` (a type pydantic validates), checked where a node uses it: on
    a server a caller can write any field before any node. InvalidRequest names the field and the fault."""
    try:
        return _adapter(kind).validate_python(value)
    except ValidationError as error:
        problem = explain(error).removeprefix("Invalid arguments: ")
        raise InvalidRequest(f"the thread's state holds an invalid {name}: {problem}"[:1000]) from None


@functools.cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def last_question(messages: list[AnyMessage]) -> str:
    """The text of the conversation's last human message ("" if there is none)."""
    return next((m.text for m in reversed(messages) if isinstance(m, HumanMessage)), "")


@dataclass(frozen=True)
class GraphParts:
    """A shared Retrieval and chat model, or None to make them from each run's Context."""

    retrieval: Retrieval | None = None
    chat_model: BaseChatModel | None = None

    @contextlib.asynccontextmanager
    async def open_retrieval(self, context: Context, *, writes: bool = False) -> AsyncIterator[Retrieval]:
        """The shared Retrieval, or one for this run, opened off the event loop and closed afterwards. A run
        that only reads refuses an embedded store that was never made (a tenant's may not be yet: it has
        no documents), saying how to make it."""
        if self.retrieval is not None:
            yield self.retrieval
            return
        if not writes and not context.store.tenant_id:
            problem = await asyncio.to_thread(missing_store, context.store)
            if problem:
                raise StoreError(problem)
        retrieval = Retrieval(context)
        try:
            # Opening the store and loading a local model do file and network I/O: not on the event loop.
            await asyncio.to_thread(lambda: (retrieval.store, retrieval.embedder))
            yield retrieval
        finally:
            await asyncio.to_thread(retrieval.close)

    async def chat(self, context: Context) -> BaseChatModel | None:
        """The chat model for planning, answers and code, or None offline (the graphs then degrade)."""
        if self.chat_model is not None or not context.chat.configured:
            return self.chat_model
        # Building a client imports lazily and loads certificates: file reads, so not on the event loop.
        return await asyncio.to_thread(make_chat_model, context.chat, timeout=context.chat_timeout_seconds)


Node = Callable[..., Awaitable[dict[str, Any]]]


class NodeFailed(AgentRetrievalError):
    """A node's error whose message held a secret, re-raised with the secret masked."""


def add_nodes(builder: StateGraph[Any, Any, Any, Any], *nodes: Node, parts: GraphParts) -> None:
    """Add each node under its function's name, given `parts` if it takes them, with what it writes and the
    errors it raises passing the redactor: a graph's one edge to state and output, whatever a provider's
    error message quoted."""
    for node in nodes:
        builder.add_node(node.__name__, _redacted(node, parts))


def _redacted(node: Node, parts: GraphParts) -> Node:
    given = {"parts": parts} if "parts" in inspect.signature(node).parameters else {}

    # LangGraph reads the node's signature (state type, runtime) through the wrapper; it passes no `parts`
    @functools.wraps(node)
    async def run(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            update = await node(*args, **kwargs, **given)
        except GraphBubbleUp:  # LangGraph's own control flow (interrupts, commands), not an error
            raise
        except Exception as error:
            message = redact(str(error))
            if message == str(error):
                raise
            raise NodeFailed(f"{type(error).__name__}: {message}") from None
        redacted: dict[str, Any] = redact_value(update)
        return redacted

    return run
