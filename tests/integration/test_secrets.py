"""Keys never leak: every failure a key can cause is provoked, and everything a person or a model could
read afterwards (log records at DEBUG, stdout and stderr, tool output and artifacts, graph state, error
messages) is searched for the key.

The local API server answers a refused key as providers do, naming the key it refused, so an error
passed on verbatim would leak it.
"""

from __future__ import annotations

import json
import logging

import pytest

from agent_retrieval import cli
from agent_retrieval.context import Context
from agent_retrieval.errors import AgentRetrievalError
from agent_retrieval.graph_parts import GraphParts
from agent_retrieval.ingest import ingest
from agent_retrieval.models import Document
from agent_retrieval.retrieval import Retrieval
from agent_retrieval.stores.supabase import SupabaseStore
from agent_retrieval.tools import make_retrieval_tools
from graphs import rag
from tests.fakeapi import FakeAPI

OPENAI_KEY = "sk-LEAKCHECK-openai-7f3a9e"
VOYAGE_KEY = "pa-LEAKCHECK-voyage-91c2d4"
QUESTION = "Which fees must an estate agent disclose to the client in writing?"
DOCS = [Document("fees", "Referral fees", "Estate agents must disclose referral fees paid by third parties."),
        Document("deposits", "Deposits", "A landlord must protect a tenancy deposit within thirty days.")]


@pytest.fixture
def seen(caplog, capfd):
    """Everything readable so far, as one text; tests add what they hold (results, state, errors)."""
    caplog.set_level(logging.DEBUG)
    held: list[str] = []

    def text(*more: object) -> str:
        held.extend(json.dumps(m, default=repr) if not isinstance(m, str) else m for m in more)
        out, err = capfd.readouterr()
        held.extend([out, err])
        return "\n".join([caplog.text, *held])

    return text


def assert_no_secret(text: str, *secrets: str) -> None:
    for secret in secrets:
        # the whole key, and its distinctive middle: a key masked as 'sk-LEAK****' still leaks
        assert secret not in text, f"the key {secret[:6]}... appears in what was captured"
    assert "LEAKCHECK" not in text, "part of a key appears in what was captured"


@pytest.fixture
def api():
    with FakeAPI() as server:
        yield server


def keyed_context(api: FakeAPI, tmp_path, provider: str) -> Context:
    return Context(db_path=str(tmp_path / "store.db"), embedding_provider=provider, use_hyde=True,
                   openai_api_key=OPENAI_KEY, openai_base_url=api.openai_url,
                   voyage_api_key=VOYAGE_KEY, voyage_base_url=api.voyage_url, max_retries=0)


@pytest.mark.parametrize("provider", ["openai", "voyage"])
async def test_refused_keys_leave_no_trace_in_tools_graph_state_logs_or_output(api, tmp_path, seen, provider):
    context = keyed_context(api, tmp_path, provider)
    with Retrieval(context) as retrieval:
        ingest(DOCS, retrieval.store, retrieval.embedder, context, progress=False)
        api.fail_next(401, times=None)  # from now on every key is refused, the error naming it
        document_retriever, chunk_retriever = make_retrieval_tools(retrieval=retrieval)
        sync = document_retriever.invoke({"type": "tool_call", "id": "1", "name": "document_retriever",
                                          "args": {"query": QUESTION}})
        asynchronous = await chunk_retriever.ainvoke({"type": "tool_call", "id": "2", "name": "chunk_retriever",
                                                      "args": {"query": QUESTION}})
    for message in (sync, asynchronous):  # degraded to keyword search, and saying so
        assert message.status == "success" and message.artifact["hits"]
        assert message.artifact["hyde"] == "failed" and message.artifact["degraded"]
    state = await rag.build(GraphParts()).ainvoke({"messages": [{"role": "user", "content": QUESTION}]},
                                                  context=context)
    assert state["messages"][-1].content  # planner and answer fell back, and the run still answered
    assert api.requests_to("embeddings") and api.requests_to("chat/completions")
    assert_no_secret(seen(sync.content, sync.artifact, asynchronous.content, asynchronous.artifact, state),
                     OPENAI_KEY, VOYAGE_KEY)


def test_the_cli_never_prints_a_refused_key(api, tmp_path, seen, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", api.openai_url)
    monkeypatch.setenv("EMBEDDING_PROVIDER", "openai")
    monkeypatch.setenv("MAX_RETRIES", "0")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "fees.md").write_text("# Referral fees\n\nEstate agents must disclose referral fees.\n")
    api.fail_next(401, times=None)
    db = str(tmp_path / "store.db")
    codes = [cli.main(["ingest", "--db", db, str(folder)]), cli.main(["query", "--db", db, QUESTION]),
             cli.main(["config"])]
    assert codes[0] != 0, "an ingest whose every embedding is refused must not report success"
    assert_no_secret(seen(), OPENAI_KEY)


def test_store_errors_never_carry_the_service_key_or_the_database_password(supabase_stack, seen, monkeypatch):
    errors: list[str] = []
    for key in (supabase_stack.service_key, "wrong-" + supabase_stack.service_key):
        with SupabaseStore(supabase_stack.url, key, schema="not_exposed") as store:
            with pytest.raises(AgentRetrievalError) as error:
                store.stats()
            errors.append(repr(error.value) + str(error.value))
    password = supabase_stack.postgres.authenticator_password
    monkeypatch.setenv("AGENT_RETRIEVAL_DSN", supabase_stack.postgres.authenticator_dsn.replace("/postgres?", "/nodb?"))
    assert cli.main(["stats"]) != 0
    text = seen(errors)
    for secret in (supabase_stack.service_key, password):
        assert secret not in text
