"""What the graphs' nodes work with: a Retrieval and a chat model, given once or made per run.

A graph module builds its graph with `GraphParts()` at import, so nothing is created until a run starts;
tests, notebooks and apps that already hold a store, embedder or model pass them in instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.runtime import Runtime

from agent_retrieval.context import Context, RunSettings
from agent_retrieval.llm import make_chat_model
from agent_retrieval.retrieval import Retrieval


def run_context(runtime: Runtime[RunSettings]) -> Context:
    """The settings a run works with.

    A Context that code passed in (`graph.ainvoke(input, context=Context(...))`) is the operator's own and
    is used as it is. Otherwise the run's context holds run settings only (a server's caller can set no
    more), and the deployment settings come from the environment, narrowed to the authenticated user.
    """
    if isinstance(runtime.context, Context):
        return runtime.context
    from agent_retrieval.auth import deployment_for

    user = runtime.server_info.user if runtime.server_info is not None else None
    return deployment_for(user).with_run(runtime.context)


def last_question(messages: list[AnyMessage]) -> str:
    """The text of the conversation's last human message ("" if there is none)."""
    return next((m.text for m in reversed(messages) if isinstance(m, HumanMessage)), "")


@dataclass(frozen=True)
class GraphParts:
    """A shared Retrieval and chat model, or None to make them from each run's Context."""

    retrieval: Retrieval | None = None
    chat_model: BaseChatModel | None = None

    @contextlib.asynccontextmanager
    async def open_retrieval(self, context: Context) -> AsyncIterator[Retrieval]:
        """The shared Retrieval, or one for this run, opened off the event loop and closed afterwards."""
        if self.retrieval is not None:
            yield self.retrieval
            return
        retrieval = Retrieval(context)
        try:
            # Opening the store and loading a local model do file and network I/O: not on the event loop.
            await asyncio.to_thread(lambda: (retrieval.store, retrieval.embedder))
            yield retrieval
        finally:
            await asyncio.to_thread(retrieval.close)

    async def chat(self, context: Context) -> BaseChatModel | None:
        """The chat model for planning, answers and code, or None offline (the graphs then degrade)."""
        if self.chat_model is not None or not context.has_chat_model:
            return self.chat_model
        # Building a client imports lazily and loads certificates: file reads, so not on the event loop.
        return await asyncio.to_thread(make_chat_model, context, timeout=context.chat_timeout_seconds)
