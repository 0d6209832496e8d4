"""Shared test parts: an isolated environment, langchain-core fakes that count their calls, a demo store,
and the real services (Postgres, and a Supabase-like stack) started once per session when a test asks."""

from __future__ import annotations

import os
import re
import threading
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake_chat_models import FakeListChatModel, GenericFakeChatModel
from pydantic import Field

from agent_retrieval import hyde
from agent_retrieval.context import SETTINGS, Context, env_names
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.loaders import load_documents
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from tests.stack import Postgres, SupabaseStack, start_postgres, start_stack

# Schemas PostgREST serves: `agent_retrieval` (the default, for tests with real embedders), `ar_contract`
# (the store contract suite), `ar_load` (tests/integration/test_load.py), `ar_process`
# (tests/integration/test_process_state.py), `ar_ranking` (keyword rankings under row-level security:
# tests/integration/test_supabase_store.py), `ar_server` (a `langgraph dev` and an MCP server
# in front of the stack: tests/integration/test_langgraph_auth.py), `stack_test`
# (tests/integration/test_stack.py), and `public`. They need not
# exist when PostgREST starts: the store's SQL creates them and reloads its schema cache.
SUPABASE_SCHEMAS = [
    "agent_retrieval",
    "ar_contract",
    "ar_load",
    "ar_process",
    "ar_ranking",
    "ar_server",
    "ar_vectorstore",
    "public",
    "stack_test",
]

_lock = threading.Lock()


class ToolCallingFake(GenericFakeChatModel):
    """langchain-core's GenericFakeChatModel, accepting tools (it replays its messages whatever it gets)."""

    bound: list[Any] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFake:
        self.bound.append([tool.name for tool in tools])
        return self


class CountingChatModel(FakeListChatModel):
    """langchain-core's FakeListChatModel, counting calls and keeping the messages it was sent."""

    calls: int = 0
    messages: list[Any] = Field(default_factory=list)
    fail: bool = False
    model_name: str = "fake-chat"

    def _call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        with _lock:
            self.calls += 1
            self.messages.append(messages)
        if self.fail:
            raise ConnectionError("provider down")
        return super()._call(messages, *args, **kwargs)


class WordHashEmbeddings(Embeddings):
    """A deterministic bag-of-words embedding (texts sharing words are similar), counting its calls."""

    def __init__(self, size: int = 256, fail: bool = False):
        self.size = size
        self.fail = fail
        self.query_calls = 0
        self.document_calls = 0
        self.documents_embedded = 0

    def vector(self, text: str) -> list[float]:
        out = np.zeros(self.size)
        out[0] = 0.01  # never all-zero
        for word in re.findall(r"\w+", text.lower()):
            if len(word) > 2:
                out[zlib.crc32(word.encode()) % self.size] += 1.0
        return out.tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        with _lock:
            self.document_calls += 1
            self.documents_embedded += len(texts)
        if self.fail:
            raise ConnectionError("embedding provider down")
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        with _lock:
            self.query_calls += 1
        if self.fail:
            raise ConnectionError("embedding provider down")
        return self.vector(text)


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """No setting leaks in from the machine's environment, and every test starts with an empty HyDE cache."""
    for setting in SETTINGS:
        for name in env_names(setting):
            monkeypatch.delenv(name, raising=False)
    hyde.clear_cache()


@pytest.fixture
def api() -> Iterator[Any]:
    """A local server speaking OpenAI's and Voyage's APIs (tests/fakeapi.py); modules that need another
    script or scope define their own."""
    from tests.fakeapi import FakeAPI

    with FakeAPI() as server:
        yield server


@pytest.fixture
def embeddings() -> WordHashEmbeddings:
    return WordHashEmbeddings()


@pytest.fixture
def embedder(embeddings: WordHashEmbeddings) -> Embedder:
    return Embedder(embeddings, "test/word-hash")


@pytest.fixture
def chat() -> CountingChatModel:
    return CountingChatModel(
        responses=[
            "Negotiators must give written disclosure of any commission or referral fee received.\n\n"
            "A referral fee from a third party is remuneration that must be disclosed "
            "to the vendor in writing."
        ]
    )


@pytest.fixture
def context(tmp_path: Any) -> Context:
    return Context(db_path=str(tmp_path / "store.db"))


@pytest.fixture
def retrieval(context: Context, embedder: Embedder) -> Any:
    """A Retrieval over the demo corpus, ingested with the word-hash embedder."""
    from agent_retrieval import demo

    with Retrieval(context, embedder=embedder) as retrieval:
        ingest(load_documents([demo.corpus_dir()]), retrieval.store, embedder, context, progress=False)
        yield retrieval


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Postgres]:
    """A private Postgres 16 + pgvector with Supabase's roles; `.dsn` is the superuser's."""
    pg = start_postgres(tmp_path_factory.mktemp("postgres"))
    yield pg
    pg.stop()


@pytest.fixture(scope="session")
def supabase_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SupabaseStack]:
    """Its own Postgres, PostgREST and the gateway; `.url`, `.anon_key`, `.service_key`, `.user_token()`."""
    stack = start_stack(tmp_path_factory.mktemp("supabase"), SUPABASE_SCHEMAS)
    yield stack
    stack.stop()


def chat_text(messages: Any) -> str:
    return "\n".join(str(m.content) for m in messages)


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
