"""Keys never leak: every failure a key can cause is provoked, and everything a person or a model could
read afterwards (log records at DEBUG, stdout and stderr, tool output and artifacts, graph state, error
messages) is searched for the key.

The local API server answers a refused key as providers do, naming the key it refused, so an error
passed on verbatim would leak it. The stores are failed through the real PostgREST and Postgres: a token
no HTTP header can carry (httpx's error quotes the header whole), a refused key or token, PostgREST down,
nothing listening, a wrong database password and a closed port.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
import urllib.parse
from typing import Any

import pytest

from agent_retrieval import cli
from agent_retrieval.context import Context
from agent_retrieval.errors import AgentRetrievalError, ConfigError, StoreUnavailable
from agent_retrieval.graphs import rag
from agent_retrieval.ingest import ingest
from agent_retrieval.models import Document
from agent_retrieval.providers.embeddings import Embedder, VoyageEmbeddings
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.server.graph_parts import GraphParts
from agent_retrieval.stores.base import Failure
from agent_retrieval.stores.postgres import PostgresStore
from agent_retrieval.stores.rpc import CallError, RPCStore
from agent_retrieval.stores.supabase import SupabaseStore
from agent_retrieval.tools import make_retrieval_tools
from tests.conftest import WordHashEmbeddings
from tests.fakeapi import FakeAPI
from tests.stack import _free_port, mint_jwt, start_gateway

OPENAI_KEY = "sk-LEAKCHECK-openai-7f3a9e"
VOYAGE_KEY = "pa-LEAKCHECK-voyage-91c2d4"
QUESTION = "Which fees must an estate agent disclose to the client in writing?"
DOCS = [
    Document("fees", "Referral fees", "Estate agents must disclose referral fees paid by third parties."),
    Document("deposits", "Deposits", "A landlord must protect a tenancy deposit within thirty days."),
]


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


def keyed_context(api: FakeAPI, tmp_path, provider: str) -> Context:
    return Context(
        db_path=str(tmp_path / "store.db"),
        embedding_provider=provider,
        use_hyde=True,
        openai_api_key=OPENAI_KEY,
        openai_base_url=api.openai_url,
        voyage_api_key=VOYAGE_KEY,
        voyage_base_url=api.voyage_url,
        max_retries=0,
    )


@pytest.mark.parametrize("provider", ["openai", "voyage"])
async def test_refused_keys_leave_no_trace_in_tools_graph_state_logs_or_output(api, tmp_path, seen, provider):
    context = keyed_context(api, tmp_path, provider)
    with Retrieval(context) as retrieval:
        ingest(DOCS, retrieval.store, retrieval.embedder, context, progress=False)
        api.fail_next(401, times=None)  # from now on every key is refused, the error naming it
        document_retriever, chunk_retriever = make_retrieval_tools(retrieval=retrieval)
        sync = document_retriever.invoke(
            {"type": "tool_call", "id": "1", "name": "document_retriever", "args": {"query": QUESTION}}
        )
        asynchronous = await chunk_retriever.ainvoke(
            {"type": "tool_call", "id": "2", "name": "chunk_retriever", "args": {"query": QUESTION}}
        )
    for message in (sync, asynchronous):  # degraded to keyword search, and saying so
        assert message.status == "success" and message.artifact["hits"]
        assert message.artifact["hyde"] == "failed" and message.artifact["degraded"]
    state = await rag.build(GraphParts()).ainvoke(
        {"messages": [{"role": "user", "content": QUESTION}]}, context=context
    )
    assert state["messages"][-1].content  # planner and answer fell back, and the run still answered
    assert api.requests_to("embeddings") and api.requests_to("chat/completions")
    assert_no_secret(
        seen(sync.content, sync.artifact, asynchronous.content, asynchronous.artifact, state),
        OPENAI_KEY,
        VOYAGE_KEY,
    )


def test_the_cli_never_prints_a_refused_key(api, tmp_path, seen, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", api.openai_url)
    monkeypatch.setenv("AGENT_RETRIEVAL_EMBEDDING_PROVIDER", "openai")
    monkeypatch.setenv("AGENT_RETRIEVAL_MAX_RETRIES", "0")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "fees.md").write_text("# Referral fees\n\nEstate agents must disclose referral fees.\n")
    api.fail_next(401, times=None)
    db = str(tmp_path / "store.db")
    codes = [
        cli.main(["ingest", "--db", db, str(folder)]),
        cli.main(["query", "--db", db, QUESTION]),
        cli.main(["config"]),
    ]
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
    monkeypatch.setenv(
        "AGENT_RETRIEVAL_DSN", supabase_stack.postgres.authenticator_dsn.replace("/postgres?", "/nodb?")
    )
    assert cli.main(["stats"]) != 0
    text = seen(errors)
    for secret in (supabase_stack.service_key, password):
        assert secret not in text


# --- keys and tokens as configured ---------------------------------------------------------------------


def test_a_key_or_token_is_stripped_or_refused_by_setting_name_never_by_value(supabase_stack):
    token = supabase_stack.user_token("leak-user", tenant="t-leak")
    # A trailing line break (a value read from a file) is stripped, and the call goes through for real.
    with (
        SupabaseStore(
            supabase_stack.url,
            supabase_stack.anon_key + "\n",
            user_token=token + "\r\n",
            schema="not_exposed",
        ) as store,
        pytest.raises(AgentRetrievalError, match="exposed schemas"),  # PostgREST's answer: it was sent
    ):
        store.stats()
    with (
        PostgresStore(supabase_stack.postgres.dsn + "\n", schema="not_there") as store,
        pytest.raises(AgentRetrievalError, match="db init"),  # connected: the schema is what is missing
    ):
        store.stats()
    head, _, tail = token.rpartition(".")
    password = "pg-LEAKCHECK-ctl-" + "x" * 8
    refused = {
        "SUPABASE_KEY": lambda: SupabaseStore(supabase_stack.url, f"{head}\n.{tail}"),
        "AGENT_RETRIEVAL_SUPABASE_USER_TOKEN": lambda: SupabaseStore(
            supabase_stack.url, supabase_stack.anon_key, user_token=f"{head}.\x00{tail}"
        ),
        "AGENT_RETRIEVAL_DSN": lambda: PostgresStore(
            f"postgresql://u:{urllib.parse.quote(password[:9] + chr(10) + password[9:])}@127.0.0.1:1/db"
        ),
        "VOYAGE_API_KEY": lambda: VoyageEmbeddings(
            model="voyage-3.5", api_key=f"{VOYAGE_KEY[:8]}\t{VOYAGE_KEY}"
        ),
    }
    for setting, make in refused.items():
        with pytest.raises(ConfigError) as error:
            make()
        message = str(error.value)
        assert setting in message and "line breaks" in message
        for part in (head, tail, password[9:], "LEAKCHECK"):
            assert part not in message


# --- store errors ------------------------------------------------------------------------------------


def secret_parts(*secrets: str) -> list[str]:
    """Each secret, and for a JWT each of its payload and signature: a token cut in two by a line break
    leaks its halves even where the whole is masked."""
    return [part for secret in secrets for part in (secret, *secret.split(".")[1:]) if len(part) >= 8]


def rendered(error: BaseException) -> str:
    return f"{error}\n{error!r}\n" + "".join(traceback.format_exception(error))


async def every_reader(store: RPCStore, tmp_path) -> tuple[list[Any], list[BaseException]]:
    """Fail the store every way a person or a model can read the failure: the store itself (sync and
    async), both tools (content and artifact, sync and async), and the rag graph's state."""
    errors: list[BaseException] = []
    for call in (store.stats, lambda: store.keyword_search("chunks", QUESTION, 3)):
        with pytest.raises(AgentRetrievalError) as caught:
            call()
        errors.append(caught.value)
    with pytest.raises(AgentRetrievalError) as caught:
        await store.akeyword_search("chunks", QUESTION, 3)
    errors.append(caught.value)
    context = Context(db_path=str(tmp_path / "unused.db"))
    retrieval = Retrieval(context, store=store, embedder=Embedder(WordHashEmbeddings(), "test/word-hash"))
    document_retriever, chunk_retriever = make_retrieval_tools(retrieval=retrieval)
    sync = document_retriever.invoke(
        {"type": "tool_call", "id": "1", "name": "document_retriever", "args": {"query": QUESTION}}
    )
    asynchronous = await chunk_retriever.ainvoke(
        {"type": "tool_call", "id": "2", "name": "chunk_retriever", "args": {"query": QUESTION}}
    )
    state = await rag.build(GraphParts(retrieval=retrieval)).ainvoke(
        {"messages": [{"role": "user", "content": QUESTION}]}, context=context
    )
    for message in (sync, asynchronous):
        assert message.status == "error", message.content  # the failure reached the model, as text
    assert any(s["status"] == "failed" for s in state["searches"])  # and the graph's state
    return [sync.content, sync.artifact, asynchronous.content, asynchronous.artifact, state], errors


def retries(caplog) -> int:
    return sum("transient failure" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("cut", ["trailing line break", "line break inside"])
async def test_a_token_no_header_can_carry_is_not_retried_and_leaves_no_trace(
    supabase_stack, seen, caplog, tmp_path, cut
):
    token = supabase_stack.user_token("leak-user", tenant="t-leak")
    store = SupabaseStore(supabase_stack.url, supabase_stack.anon_key, user_token=token, max_retries=3)
    # Changed after the store checked it, as a token refreshed in place might be: httpx then refuses the
    # header and quotes it, whole, in its error.
    store._user_token = token + "\n" if cut == "trailing line break" else token.replace(".", ".\n", 1)
    started = time.monotonic()
    readers, errors = await every_reader(store, tmp_path)
    assert time.monotonic() - started < 10 and retries(caplog) == 0  # the same header would fail again
    for error in errors:
        assert "AGENT_RETRIEVAL_SUPABASE_USER_TOKEN" in str(error) and "header" in str(error)
    assert "AGENT_RETRIEVAL_SUPABASE_USER_TOKEN" in readers[0]  # the model is told what to check
    text = seen(*readers, *(rendered(e) for e in errors))
    for part in secret_parts(token, supabase_stack.anon_key):
        assert part not in text


def test_a_driver_message_quoting_a_secret_is_masked_on_its_way_out(supabase_stack):
    """Drivers and servers may quote what they were given; whatever they say, every store error that
    reaches a user or a model has the configured secrets masked."""
    password = "pg-LEAKCHECK-quoted-5b7d"
    stores = {
        password: PostgresStore(f"postgresql://u:{password}@127.0.0.1:1/db"),
        supabase_stack.service_key: SupabaseStore(supabase_stack.url, supabase_stack.service_key),
    }
    for secret, store in stores.items():
        for error in (
            CallError("XX000", f"failed near '{secret}'"),
            CallError("08006", f"connection to {secret} lost", failure=Failure.UNREACHABLE),
            CallError("AR002", "wrong dimension", hint=f"connect with {secret}"),
        ):
            message = str(store._readable(error))
            assert secret not in message and "[redacted]" in message, message


def test_a_header_error_from_the_transport_is_final_and_does_not_quote_the_header():
    import httpx

    from agent_retrieval.stores.supabase import _call_error

    error = _call_error(httpx.LocalProtocolError("Illegal header value b'Bearer eyJ.LEAKCHECK-token\\n'"))
    assert error.code == "header" and not error.transient
    assert "LEAKCHECK" not in error.message and "AGENT_RETRIEVAL_SUPABASE_USER_TOKEN" in error.message


@pytest.mark.parametrize("refused", ["key", "token"])
async def test_a_refused_key_or_token_leaves_no_trace(supabase_stack, seen, tmp_path, refused):
    forged = mint_jwt("another-secret-of-at-least-32-characters", "service_role")
    if refused == "key":  # the gateway refuses the API key
        store, secrets = SupabaseStore(supabase_stack.url, forged, max_retries=1), [forged]
    else:  # the key passes, and PostgREST refuses the user's token (PGRST301)
        token = mint_jwt("another-secret-of-at-least-32-characters", "authenticated", sub="leak-user")
        store = SupabaseStore(supabase_stack.url, supabase_stack.anon_key, user_token=token, max_retries=1)
        secrets = [token, supabase_stack.anon_key]
    readers, errors = await every_reader(store, tmp_path)
    assert all("rejected" in str(e) or "Invalid API key" in str(e) for e in errors), [str(e) for e in errors]
    text = seen(*readers, *(rendered(e) for e in errors))
    for part in secret_parts(*secrets):
        assert part not in text


@pytest.mark.parametrize("down", ["PostgREST down", "nothing listening"])
async def test_an_api_that_cannot_be_reached_leaves_no_trace(supabase_stack, seen, tmp_path, down):
    gateway = None
    if down == "PostgREST down":  # a gateway whose PostgREST is gone answers 502
        gateway = start_gateway(
            f"http://127.0.0.1:{_free_port()}",
            anon_key=supabase_stack.anon_key,
            service_key=supabase_stack.service_key,
        )
    url = gateway.url if gateway else f"http://127.0.0.1:{_free_port()}"
    token = supabase_stack.user_token("leak-user", tenant="t-leak")
    try:
        store = SupabaseStore(url, supabase_stack.anon_key, user_token=token, max_retries=1)
        readers, errors = await every_reader(store, tmp_path)
    finally:
        if gateway:
            gateway.stop()
    assert all(isinstance(e, StoreUnavailable) for e in errors)
    text = seen(*readers, *(rendered(e) for e in errors))
    for part in secret_parts(token, supabase_stack.anon_key):
        assert part not in text


@pytest.mark.parametrize("fault", ["wrong password", "closed port"])
async def test_database_errors_leave_no_trace_of_the_dsn_or_its_password(
    supabase_stack, seen, caplog, tmp_path, fault
):
    right = supabase_stack.postgres.authenticator_password
    wrong = "pg-LEAKCHECK-" + right[::-1]
    if fault == "wrong password":
        dsn = supabase_stack.postgres.authenticator_dsn.replace(f":{right}@", f":{wrong}@")
    else:
        dsn = f"postgresql://authenticator:{wrong}@127.0.0.1:{_free_port()}/postgres"
    store = PostgresStore(dsn, max_retries=1)
    try:
        readers, errors = await every_reader(store, tmp_path)
    finally:
        store.close()
    if fault == "wrong password":
        assert all(
            "password authentication failed" in str(e) and "AGENT_RETRIEVAL_DSN" in str(e) for e in errors
        ), [str(e) for e in errors]
        assert retries(caplog) == 0  # a wrong password is not an outage
    text = seen(*readers, *(rendered(e) for e in errors))
    for secret in (right, wrong, dsn):
        assert secret not in text
    assert "LEAKCHECK" not in text
