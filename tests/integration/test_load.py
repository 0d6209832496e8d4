"""64 concurrent tool calls on each store (embedded SQLite, Postgres by DSN, Supabase through PostgREST),
from threads and from asyncio tasks, with HyDE on.

Each call must succeed and return exactly what the same call returns alone: concurrent HyDE computations
must not hand one question's vector to another. Each distinct question costs one HyDE call however many
callers ask it at once, and repeated rounds must not grow memory. Throughput and p95 under this load are
measured by benchmarks/load.py, not here.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agent_retrieval import demo, hyde
from agent_retrieval.context import Context
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.loaders import load_documents
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.stores.postgres import PostgresStore
from agent_retrieval.stores.supabase import SupabaseStore
from agent_retrieval.tools import make_retrieval_tools
from tests.conftest import CountingChatModel, WordHashEmbeddings

CALLS = 64
SCHEMA = "ar_load"  # served by the session's PostgREST (tests/conftest.py SUPABASE_SCHEMAS)
DIM = 256  # the word-hash test embedder's
MODEL = "test/word-hash"


class EchoChatModel(CountingChatModel):
    """Writes 'hypothetical passages' that restate the question: each question gets its own HyDE vector,
    so a vector handed to the wrong caller changes that caller's results."""

    def _call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        super()._call(messages, *args, **kwargs)  # counts the call
        time.sleep(0.02)  # long enough for concurrent callers of one question to overlap
        question = str(messages[-1].content)
        return f"{question}\n\nIn short, {question.lower()}"


def questions() -> list[str]:
    """32 distinct long questions (HyDE runs for each), each asked twice: 64 calls."""
    base = [q["question"] for q in json.loads((demo.corpus_dir().parent / "questions.json").read_text())]
    topics = sorted(
        {
            m.lower()
            for p in demo.corpus_dir().glob("*.md")
            for m in re.findall(r"^#+\s+(.+)$", p.read_text(encoding="utf-8"), re.M)
        }
    )
    distinct = [q for q in base if len(q.split()) > Context().hyde_skip_max_words]
    distinct += [f"what does the firm's guidance say about {t} for our clients" for t in topics]
    assert len(distinct) >= CALLS // 2, "the demo corpus has too few headings for 32 questions"
    return distinct[: CALLS // 2] * 2


QUESTIONS = questions()


@pytest.fixture(scope="module", params=["sqlite", "postgres", "supabase"])
def store(request, tmp_path_factory):
    """The demo corpus, ingested with the word-hash embedder into each kind of store."""
    embedder = Embedder(WordHashEmbeddings(), MODEL)
    if request.param == "sqlite":
        from agent_retrieval.stores import SQLiteStore

        store = SQLiteStore(tmp_path_factory.mktemp("load") / "store.db")
    else:
        stack = request.getfixturevalue("supabase_stack")
        stack.postgres.execute(f"drop schema if exists {SCHEMA} cascade")
        PostgresStore(stack.postgres.dsn, schema=SCHEMA).init(DIM)
        stack.postgrest.reload_schema()
        store = (
            PostgresStore(stack.postgres.dsn, schema=SCHEMA)
            if request.param == "postgres"
            else SupabaseStore(stack.url, stack.service_key, schema=SCHEMA)
        )
    ingest(load_documents([demo.corpus_dir()]), store, embedder, Context(), progress=False)
    yield store
    store.close()


def tools_on(store) -> tuple[Any, CountingChatModel]:
    chat = EchoChatModel(responses=["unused"])
    retrieval = Retrieval(
        Context(use_hyde=True), store=store, embedder=Embedder(WordHashEmbeddings(), MODEL), llm=chat
    )
    document_retriever, _ = make_retrieval_tools(retrieval=retrieval)
    return document_retriever, chat


def call(n: int, question: str) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "id": f"call-{n}",
        "name": "document_retriever",
        "args": {"query": question, "top_k": 5},
    }


def outcome(message: Any) -> tuple[str, list[tuple[str, float]], str]:
    artifact = message.artifact or {}
    return (
        message.status,
        [(h["id"], round(h["score"], 6)) for h in artifact.get("hits", [])],
        artifact.get("hyde"),
    )


@pytest.fixture(scope="module")
def alone(store) -> dict[str, tuple]:
    """Each question's result when it is the only call running."""
    tool, _ = tools_on(store)
    hyde.clear_cache()
    results = {q: outcome(tool.invoke(call(0, q))) for q in dict.fromkeys(QUESTIONS)}
    assert all(status == "success" and hits and mode == "used" for status, hits, mode in results.values())
    assert len({tuple(hits) for _, hits, _ in results.values()}) > 1, "every question gives the same result"
    return results


def run_threads(tool: Any) -> list[tuple]:
    with ThreadPoolExecutor(CALLS) as pool:
        return list(pool.map(lambda nq: outcome(tool.invoke(call(*nq))), enumerate(QUESTIONS)))


async def run_tasks(tool: Any) -> list[tuple]:
    messages = await asyncio.gather(*[tool.ainvoke(call(n, q)) for n, q in enumerate(QUESTIONS)])
    return [outcome(m) for m in messages]


def test_64_concurrent_threads_each_get_their_own_result_and_one_hyde_call_per_question(store, alone):
    tool, chat = tools_on(store)
    hyde.clear_cache()
    results = run_threads(tool)
    assert results == [alone[q] for q in QUESTIONS]
    assert chat.calls == len(alone)


async def test_64_concurrent_asyncio_tasks_each_get_their_own_result_and_one_hyde_call_per_question(
    store, alone
):
    tool, chat = tools_on(store)
    hyde.clear_cache()
    results = await run_tasks(tool)
    assert results == [alone[q] for q in QUESTIONS]
    assert chat.calls == len(alone)


def test_memory_does_not_grow_with_rounds_of_concurrent_calls(store, alone):
    tool, _ = tools_on(store)
    rounds = []
    tracemalloc.start()
    try:
        for _ in range(4):
            hyde.clear_cache()
            assert run_threads(tool) == [alone[q] for q in QUESTIONS]
            gc.collect()
            rounds.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    # the first round warms up connections and worker threads; after it, 64 calls a round must not leave
    # anything behind (a leak of even 10 KB per call would add 1.9 MB over the last three rounds)
    assert rounds[-1] - rounds[0] < 1_000_000, f"traced memory after each round: {rounds}"
