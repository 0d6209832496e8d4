"""`agent-retrieval mcp`: the tools over the Model Context Protocol, through the SDK's own client.

The server is the real CLI in a subprocess. Over stdio it is the operator's, on an embedded store; over
streamable HTTP it stands in front of the Supabase stack (real PostgREST, row-level security), where two
tenants each keep a secret and a third has published a document, and every request is signed in as a user.
Embeddings come from the local OpenAI-speaking FakeAPI, through the real SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from agent_retrieval.context import Context
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.chunking import chunk_document
from agent_retrieval.models import Document, IndexDocumentRequest
from agent_retrieval.providers.embeddings import make_embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.stores import open_store
from agent_retrieval.stores.postgres import PostgresStore
from agent_retrieval.tools import TOOLS
from tests.conftest import ToolCallingFake
from tests.fakeapi import FakeAPI
from tests.hostile_text import worst_document
from tests.langgraph_server import REPO, server_environment, stop, wait_until_serving
from tests.stack import _free_port, mint_jwt
from tests.tenants import DIM, SCHEMA, SECRETS, seed_tenants, server_settings

SERVER_KEY = "sk-fake-mcp-server-key"
QUESTION = "What is the codename of the acquisition plan?"
DEPOSIT = Document(
    "deposit", "Tenancy deposits", "# Deposits\n\nThe landlord must protect the deposit within 30 days."
)


@pytest.fixture(scope="module")
def api() -> Iterator[FakeAPI]:
    with FakeAPI(dim=DIM) as fake:
        yield fake


def provider(api: FakeAPI) -> dict[str, str]:
    """The server's embedder settings, as environment variables and as Context fields."""
    return {
        "AGENT_RETRIEVAL_EMBEDDING_PROVIDER": "openai",
        "OPENAI_BASE_URL": api.openai_url,
        "OPENAI_API_KEY": SERVER_KEY,
    }


def provider_context(api: FakeAPI, **settings: Any) -> Context:
    return Context(
        embedding_provider="openai", openai_base_url=api.openai_url, openai_api_key=SERVER_KEY, **settings
    )


@pytest.fixture(scope="module")
def embedded(api, tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("mcp") / "store.db"
    context = provider_context(api, db_path=str(db))
    with open_store(context.store) as store:
        assert (
            ingest([DEPOSIT], store, make_embedder(context.embeddings), context, progress=False).written == 1
        )
    return db


@contextlib.asynccontextmanager
async def stdio_session(
    api: FakeAPI, db: Path, *options: str, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    env = server_environment({**provider(api), "AGENT_RETRIEVAL_DB": str(db), **(env or {})})
    command = [sys.executable, "-m", "agent_retrieval.cli", "mcp", *options]
    params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=REPO)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content)


# --- stdio: the operator's server ----------------------------------------------------------------------


async def test_the_tools_are_the_langchain_tools_with_their_own_names_descriptions_and_schemas(api, embedded):
    async with stdio_session(api, embedded) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert list(listed) == ["document_retriever", "chunk_retriever", "similarity_search"]
    for name, tool in listed.items():
        declared = TOOLS[name].model_fields
        assert tool.description == declared["description"].default
        assert tool.inputSchema == declared["args_schema"].default.model_json_schema()
        assert tool.annotations is not None and tool.annotations.readOnlyHint


async def test_a_search_answers_with_the_tools_text_and_the_whole_result_as_structured_content(api, embedded):
    async with stdio_session(api, embedded) as session:
        result = await session.call_tool("chunk_retriever", {"query": "how long to protect the deposit"})
    assert not result.isError
    assert 'document="deposit"' in text_of(result) and "within 30 days" in text_of(result)
    hits = result.structuredContent["hits"]
    assert [hit["document_id"] for hit in hits] == ["deposit"] and hits[0][
        "heading_path"
    ] == "Tenancy deposits > Deposits"


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("chunk_retriever", {"query": "deposit", "top_k": 0}),
        ("document_retriever", {"query": "deposit", "contxt": "x"}),
        ("similarity_search", {"query": ""}),
        (
            "document_retriever",
            {"query": "deposit", "filters": {"a": [[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]}},
        ),
    ],
)
async def test_bad_arguments_get_the_langchain_tools_own_message(api, embedded, name, arguments):
    with Retrieval(provider_context(api, db_path=str(embedded))) as retrieval:
        langchain = await TOOLS[name](retrieval=retrieval).arun(arguments, tool_call_id="1")
    async with stdio_session(api, embedded) as session:
        result = await session.call_tool(name, arguments)
    assert result.isError and langchain.status == "error"
    assert text_of(result) == langchain.text and "Traceback" not in text_of(result)


async def test_index_document_is_offered_only_when_the_operator_enables_it(api, embedded, tmp_path):
    async with stdio_session(api, embedded) as session:
        assert "index_document" not in {t.name for t in (await session.list_tools()).tools}
        refused = await session.call_tool("index_document", {"title": "Notes", "content": "Pets allowed."})
    assert refused.isError and "there is no tool 'index_document'" in text_of(refused)

    db = tmp_path / "writable.db"
    async with stdio_session(api, db, "--index-tool") as session:
        assert "index_document" in {t.name for t in (await session.list_tools()).tools}
        written = await session.call_tool("index_document", {"title": "Pets", "content": "Cats are allowed."})
        found = await session.call_tool("document_retriever", {"query": "are cats allowed"})
    assert not written.isError and written.structuredContent["written"] == 1
    assert [hit["title"] for hit in found.structuredContent["hits"]] == ["Pets"]


async def test_the_servers_secrets_reach_no_client_from_a_provider_error_or_a_passage(api, tmp_path):
    db = tmp_path / "store.db"
    context = provider_context(api, db_path=str(db))
    jwt_secret = "a-jwt-secret-the-server-holds-" + "x" * 8
    leaked = Document(
        "pasted", "Setup notes", f"Our embeddings key is {SERVER_KEY} and {jwt_secret}, do not share it."
    )
    with open_store(context.store) as store:
        assert (
            ingest([leaked], store, make_embedder(context.embeddings), context, progress=False).written == 1
        )
    async with stdio_session(api, db, env={"SUPABASE_JWT_SECRET": jwt_secret}) as session:
        passage = await session.call_tool("chunk_retriever", {"query": "embeddings key setup notes"})
        api.fail_next(401, times=None, endpoint="embeddings")  # the refusal names the key, as providers do
        try:
            degraded = await session.call_tool("document_retriever", {"query": "setup notes"})
        finally:
            api.heal()
    assert "do not share it" in text_of(passage) and "vector search" in str(degraded.structuredContent)
    for result in (passage, degraded):
        for secret in (SERVER_KEY, jwt_secret):
            assert secret not in text_of(result) + str(result.structuredContent)


async def test_an_agent_uses_the_tools_through_langchain_mcp_adapters(api, embedded):
    from langchain_mcp_adapters.client import MultiServerMCPClient

    env = server_environment({**provider(api), "AGENT_RETRIEVAL_DB": str(embedded)})
    client = MultiServerMCPClient(
        {
            "retrieval": {
                "transport": "stdio",
                "command": sys.executable,
                "args": ["-m", "agent_retrieval.cli", "mcp"],
                "env": env,
                "cwd": str(REPO),
            }
        }
    )
    tools = await client.get_tools()
    model = ToolCallingFake(
        messages=iter(
            [
                AIMessage(
                    "",
                    tool_calls=[
                        {"name": "chunk_retriever", "args": {"query": "deposit deadline"}, "id": "c1"}
                    ],
                ),
                AIMessage("Within 30 days [deposit]."),
            ]
        )
    )
    out = await tool_loop(model, tools).ainvoke({"messages": [("user", "When is the deposit due?")]})
    (answer,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert sorted(t.name for t in tools) == ["chunk_retriever", "document_retriever", "similarity_search"]
    assert "within 30 days" in str(answer.content) and answer.status == "success"


def tool_loop(model: ToolCallingFake, tools: list[Any]) -> Any:
    """The usual LangGraph agent: the model, then the tools it calls, until it answers."""
    bound = model.bind_tools(tools)

    async def think(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState).add_node("model", think).add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model").add_conditional_edges("model", tools_condition).add_edge(
        "tools", "model"
    )
    return builder.compile()


# --- streamable HTTP: signed-in users of two tenants ---------------------------------------------------


@contextlib.contextmanager
def mcp_over_http(settings: dict[str, str], folder: Path) -> Iterator[str]:
    """`agent-retrieval mcp` over HTTP with index_document on, until the block ends."""
    port = _free_port()
    log = folder / "server.log"
    command = [sys.executable, "-m", "agent_retrieval.cli", "mcp", "--transport", "http", "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--index-tool"],
            cwd=REPO,
            env=server_environment(settings),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}/mcp/"
    try:
        wait_until_serving(url, process, log, name="agent-retrieval mcp", status=405)
        yield url
    finally:
        stop(process)
    assert SERVER_KEY not in log.read_text(errors="replace")


@pytest.fixture(scope="module")
def http_server(supabase_stack, api, tmp_path_factory) -> Iterator[str]:
    seed_tenants(supabase_stack, api, SERVER_KEY)
    settings = server_settings(supabase_stack, api, SERVER_KEY)
    with mcp_over_http(settings, tmp_path_factory.mktemp("mcp-http")) as url:
        yield url


def signed_in(stack: Any, sub: str, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.user_token(sub, tenant)}"}


@contextlib.asynccontextmanager
async def http_session(url: str, headers: dict[str, str]) -> AsyncIterator[ClientSession]:
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@pytest.mark.parametrize(("sub", "tenant"), [("u-acme", "acme"), ("u-globex", "globex")])
async def test_each_signed_in_user_finds_only_their_tenants_and_public_documents(
    http_server, supabase_stack, sub, tenant
):
    async with http_session(http_server, signed_in(supabase_stack, sub, tenant)) as session:
        results = [
            await session.call_tool(name, {"query": QUESTION, "top_k": 10})
            for name in ("document_retriever", "chunk_retriever", "similarity_search")
        ]
    for result in results:
        assert not result.isError, text_of(result)
        assert {hit["document_id"] for hit in result.structuredContent["hits"]} == {
            f"{tenant}-plan",
            "press-plan",
        }
        for other, secret in SECRETS.items():
            if other not in (tenant, "press"):
                assert secret not in text_of(result) + str(result.structuredContent)


@pytest.mark.parametrize(
    ("who", "reason"),
    [
        ("nobody", "needs a signed-in user's Supabase access token"),
        ("a forger", "the access token was refused: Signature verification failed"),
        ("the anon key", "the access token was refused"),  # a token, but no user's
        ("an expired user", "the access token was refused: Signature has expired"),
    ],
)
def test_a_request_without_a_valid_users_token_is_refused_before_any_tool(
    http_server, supabase_stack, who, reason
):
    token = {
        "nobody": None,
        "a forger": mint_jwt("x" * 32, "authenticated", sub="u-acme", app_metadata={"tenant_id": "acme"}),
        "the anon key": supabase_stack.anon_key,
        "an expired user": supabase_stack.user_token("u-acme", "acme", expires_in=-60),
    }[who]
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = httpx.post(http_server, json=body, headers=headers, timeout=10)
    assert response.status_code == 401 and reason in response.json()["error"]
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "document_retriever" not in response.text


@pytest.mark.parametrize("who", ["a signed-in user", "nobody"])
def test_a_get_opens_no_event_stream_and_holds_nothing_open(http_server, supabase_stack, who):
    """Who sets it: any HTTP client. What bounds it: a stateless server refuses GET (405) at once, so no
    client can hold event streams open, however many it asks for."""
    headers = {"Accept": "text/event-stream"}
    if who == "a signed-in user":
        headers |= signed_in(supabase_stack, "u-acme", "acme")
    with httpx.Client(headers=headers, timeout=10) as client:
        answers = [client.get(http_server) for _ in range(20)]
    for response in answers:
        assert response.status_code == 405 and response.headers["allow"] == "POST"
        assert "stateless" in response.json()["error"]


async def test_a_user_may_not_write_through_index_document_on_supabase(http_server, supabase_stack):
    # users search under row-level security; writing is the operator's (the service role)
    async with http_session(http_server, signed_in(supabase_stack, "u-acme", "acme")) as session:
        refused = await session.call_tool(
            "index_document", {"id": "parking", "title": "Parking", "content": "Park on level MAGENTA-4."}
        )
    assert refused.isError and "writing needs the service role" in text_of(refused)
    with PostgresStore(supabase_stack.postgres.dsn, schema=SCHEMA) as store:
        assert store.unknown_documents(["parking"]) == ["parking"]


@pytest.fixture(scope="module")
def writable_server(api, tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """The operator's own HTTP server on loopback (auth off), over an embedded store, index_document on."""
    folder = tmp_path_factory.mktemp("mcp-writes")
    settings = {
        **provider(api),
        "AGENT_RETRIEVAL_DB": str(folder / "store.db"),
        "AGENT_RETRIEVAL_AUTH": "off",
    }
    with mcp_over_http(settings, folder) as url:
        yield url, folder / "store.db"


async def test_a_client_gone_mid_index_document_leaves_the_document_whole_or_absent(writable_server, api):
    # A manual long enough for several embedding batches, each held for a second: the client goes away
    # while the first is held.
    content = "\n\n".join(
        f"# Section {n}\n\n" + " ".join(f"Step {n}.{m} turns valve {n * 100 + m} slowly." for m in range(40))
        for n in range(60)
    )
    arguments = {"id": "manual", "title": "Plant manual", "content": content}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "index_document", "arguments": arguments},
    }
    url, db = writable_server
    headers = {"Accept": "application/json, text/event-stream"}
    api.clear()
    api.delay_next(1.0, times=None, endpoint="embeddings", batches_only=True)
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            call = asyncio.create_task(client.post(url, json=body, headers=headers))
            await until(lambda: bool(api.requests_to("embeddings")))  # the first batch, held
            call.cancel()  # the client closes its connection mid-call
            with contextlib.suppress(asyncio.CancelledError):
                await call
        # the server finishes or abandons the call: embedding requests stop
        seen = -1
        while seen != len(api.requests_to("embeddings")):
            seen = len(api.requests_to("embeddings"))
            await asyncio.sleep(2.5)
    finally:
        api.heal()
    context = Context(db_path=str(db))
    with open_store(context.store) as store:
        after_disconnect = len(store.document_chunks(["manual"], 1000))
    async with http_session(url, {}) as session:
        again = await session.call_tool("index_document", arguments)
    assert not again.isError, text_of(again)
    with open_store(context.store) as store:
        whole = len(store.document_chunks(["manual"], 1000))
    document = IndexDocumentRequest.model_validate(arguments).document(source="index_document")
    expected = len(chunk_document(document, context.ingest.chunk_size, context.ingest.chunk_overlap))
    assert whole == expected > 64  # more than one embedding batch
    assert after_disconnect in (0, expected)


async def until(condition: Any, seconds: float = 30) -> None:
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {seconds} s")


async def test_a_search_is_answered_within_a_second_while_another_call_indexes_the_worst_document(
    writable_server, api
):
    """Who sets it: a caller of index_document (its content, up to 1,000,000 characters). What bounds it:
    linear parsing, chunking in a process of its own (ingest.worker), and caller writes taking turns; the
    server answers everyone else meanwhile."""
    url, _ = writable_server
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "index_document",
            "arguments": {"id": "worst", "title": "Worst", "content": worst_document()},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    api.clear()
    async with httpx.AsyncClient(timeout=300) as writer, http_session(url, {}) as reader:
        await reader.call_tool("chunk_retriever", {"query": "valve pressure"})  # the reader's path is warm
        writing = asyncio.create_task(writer.post(url, json=body, headers=headers))
        waits: list[float] = []
        while not writing.done() or not waits:
            start = asyncio.get_running_loop().time()
            found = await reader.call_tool("chunk_retriever", {"query": "valve pressure"})
            waits.append(asyncio.get_running_loop().time() - start)
            assert not found.isError, text_of(found)
        written = (await writing).json()["result"]
    assert not written["isError"], written
    assert len(waits) > 3 and max(waits) < 1.0, waits
    assert api.requests_to("embeddings")  # the document was embedded: it went all the way through
