"""SearchResources: the search threads and the HyDE cache, sized by settings, shared by default, closable."""

from __future__ import annotations

import asyncio
import multiprocessing

from agent_retrieval.context import Context, ResourceSettings
from agent_retrieval.models import ChunkSearchRequest, SearchRequest
from agent_retrieval.search.resources import SearchResources, shared_resources
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.tools import make_retrieval_tools

LONG = "do agents have to declare themselves legally when a third party pays them"


def hyde_on(retrieval: Retrieval, **settings) -> Context:
    return Context(db_path=retrieval.context.store.db_path, use_hyde=True, **settings)


# --- SearchResources ----------------------------------------------------------------------------


def test_resources_take_their_sizes_from_the_context():
    with SearchResources(ResourceSettings(search_threads=3, hyde_cache_size=5)) as resources:
        assert resources.search_pool._max_workers == 3
        assert resources.hyde_cache._values.maxsize == 5
    assert shared_resources(ResourceSettings(search_threads=3)) is shared_resources(
        ResourceSettings(search_threads=3)
    )
    assert shared_resources(ResourceSettings(search_threads=3)) is not shared_resources(
        ResourceSettings(search_threads=4)
    )


def _search_threads_answer() -> int:
    """What the process's shared search threads answer (a forked child finds the same object)."""
    return (
        shared_resources(ResourceSettings(search_threads=2)).search_pool.submit(lambda: 7).result(timeout=5)
    )


def test_a_forked_process_starts_search_threads_of_its_own():
    # A worker forked from a process that had searched inherits its pool, but not the threads behind it:
    # sync searches sent there would wait until the tool's deadline, every time.
    assert _search_threads_answer() == 7  # the parent's threads are running
    with multiprocessing.get_context("fork").Pool(1) as worker:
        assert worker.apply(_search_threads_answer) == 7


def test_retrievals_made_per_run_share_the_default_resources_and_one_hyde_call(retrieval, chat):
    """The graphs open a Retrieval per run (per agent turn): document_retriever in one turn and
    chunk_retriever in the next still cost one HyDE call."""
    context = hyde_on(retrieval)
    first = Retrieval(context, store=retrieval.store, embedder=retrieval.embedder, llm=chat)
    second = Retrieval(context, store=retrieval.store, embedder=retrieval.embedder, llm=chat)
    assert first.resources is second.resources is shared_resources(context.resources)
    found = first.search(SearchRequest(query=LONG), "documents")
    again = second.search(ChunkSearchRequest(query=LONG, document_ids=[h.id for h in found.hits]), "chunks")
    assert chat.calls == 1 and (found.hyde_cached, again.hyde_cached) == (False, True)


def test_retrievals_with_resources_of_their_own_share_no_hyde_cache(retrieval, chat):
    context = hyde_on(retrieval)
    with SearchResources(context.resources) as mine, SearchResources(context.resources) as theirs:
        for resources in (mine, theirs, mine):
            Retrieval(
                context, store=retrieval.store, embedder=retrieval.embedder, llm=chat, resources=resources
            ).search(SearchRequest(query=LONG), "documents")
    assert chat.calls == 2  # one per cache: the third search reused the first's vector


def test_closed_resources_stop_their_threads_empty_their_cache_and_start_again_when_used(retrieval, chat):
    context = hyde_on(retrieval)
    resources = SearchResources(context.resources)
    searcher = Retrieval(
        context, store=retrieval.store, embedder=retrieval.embedder, llm=chat, resources=resources
    )
    assert searcher.search(SearchRequest(query=LONG), "documents").hits
    pool = resources.search_pool
    resources.close()
    assert pool._shutdown
    result = searcher.search(SearchRequest(query=LONG), "documents")
    assert result.hits and not result.hyde_cached and chat.calls == 2
    assert resources.search_pool is not pool
    resources.close()


async def test_a_sync_tool_call_inside_a_running_event_loop_starts_no_loop(retrieval, chat, monkeypatch):
    """Jupyter runs cells in a loop, and LangChain calls a tool's sync face from anywhere: the sync path must
    be sync all the way down, HyDE's bounded call included."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("the sync path started an event loop")

    monkeypatch.setattr(asyncio.events, "new_event_loop", refuse)
    retrieval.context = hyde_on(retrieval)
    retrieval._llm = chat
    document_retriever, _ = make_retrieval_tools(retrieval=retrieval)
    message = document_retriever.invoke(
        {"type": "tool_call", "id": "1", "name": "document_retriever", "args": {"query": LONG}}
    )
    assert message.status == "success" and message.artifact["hyde"] == "used" and chat.calls == 1
