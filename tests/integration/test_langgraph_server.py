"""The graphs served by a real `langgraph dev` (from langgraph.json), driven through langgraph-sdk.

The server is configured only by its environment, as a user's would be: the embedded SQLite store
(pre-filled with the demo corpus and schemas in tenant "demo"), OpenAI embeddings and chat pointed at
tests.fakeapi playing `agent_script`, HyDE on, and access tokens verified with the project's JWT secret.
Requests carry the token of a user of tenant "demo"; other tests here try to get past that boundary.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from agent_retrieval import demo
from agent_retrieval.context import RUN_SETTINGS, Context
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.loaders import load_documents
from agent_retrieval.planning import READING_ON
from agent_retrieval.providers.embeddings import make_embedder
from agent_retrieval.search.retrieval import Retrieval
from tests.fakeapi import FakeAPI, agent_script
from tests.langgraph_server import REPO, Server, serve

QUESTION = "Do estate agents have to tell the seller about referral fees from third parties?"
BLOCKING = re.compile(r"BlockingError|Blocking call to|identified a synchronous blocking call")
SERVER_KEY = "sk-fake-server-key"
SERVER_ANSWER_CHUNKS = 3  # the operator's choice, not the default (6)
TENANT = "demo"


def fill_store(api: FakeAPI, db_path: Path) -> None:
    """The demo corpus and schemas in tenant "demo", embedded by the model config the server will use."""
    context = Context(
        db_path=str(db_path),
        tenant_id=TENANT,
        embedding_provider="openai",
        openai_base_url=api.openai_url,
        openai_api_key=SERVER_KEY,
        use_hyde=False,
    )
    embedder = make_embedder(context.embeddings)
    with Retrieval(context, embedder=embedder) as retrieval:
        report = ingest(
            load_documents([demo.corpus_dir(), demo.schemas_dir()]),
            retrieval.store,
            embedder,
            context,
            progress=False,
        )
    assert report.written == report.documents > 0 and report.unembedded == 0


@pytest.fixture(scope="module")
def api() -> Iterator[FakeAPI]:
    with FakeAPI(chat=agent_script) as server_api:
        yield server_api


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, api: FakeAPI) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("langgraph-server")
    fill_store(api, folder / "store.db")
    api.clear()
    settings = {
        "AGENT_RETRIEVAL_DB": str(folder / "store.db"),
        "AGENT_RETRIEVAL_EMBEDDING_PROVIDER": "openai",
        "OPENAI_BASE_URL": api.openai_url,
        "OPENAI_API_KEY": SERVER_KEY,
        "AGENT_RETRIEVAL_USE_HYDE": "true",
        "AGENT_RETRIEVAL_ANSWER_CHUNKS": str(SERVER_ANSWER_CHUNKS),
        "SUPABASE_JWT_SECRET": secrets.token_urlsafe(32),
    }
    with serve(folder, settings) as running:
        print(f"\nlanggraph dev served in {running.started_in:.1f} s")
        yield running


@pytest.fixture
def client(server: Server, api: FakeAPI) -> Iterator[SyncLangGraphClient]:
    """A client signed in as a user of tenant "demo"."""
    api.clear()
    with server.signed_in("user-demo", TENANT) as sdk:
        yield sdk
    assert api.script_errors == []


def cited(text: str) -> list[str]:
    return re.findall(r"\[([^\[\]]+#\d+)\]", text)


def test_assistants_are_the_graphs_of_langgraph_json(client):
    graphs = json.loads((REPO / "langgraph.json").read_text())["graphs"]
    assistants = client.assistants.search(limit=100)
    assert {a["graph_id"] for a in assistants} == set(graphs)
    for graph_id in graphs:
        assert client.assistants.get_graph(graph_id)["nodes"], graph_id


def test_studio_is_shown_the_run_settings_alone_as_each_graphs_context_form(client):
    """Studio's configuration panel is the served context_schema: RunSettings' knobs with their descriptions
    and bounds, and no deployment setting."""
    for assistant in client.assistants.search(limit=100):
        schema = client.assistants.get_schemas(assistant["assistant_id"])["context_schema"]
        assert set(schema["properties"]) == set(RUN_SETTINGS), assistant["graph_id"]
        assert schema["properties"]["answer_chunks"]["maximum"] == 50
        assert schema["additionalProperties"] is False


def test_rag_answers_on_a_thread_citing_a_hit(client, api):
    thread = client.threads.create()
    out = client.runs.wait(
        thread["thread_id"], "rag", input={"messages": [{"role": "user", "content": QUESTION}]}
    )

    assert [(q["text"], q["purpose"]) for q in out["plan"]["queries"]] == [(QUESTION, "direct")]
    [search] = [s for s in out["searches"] if s["purpose"] != READING_ON]  # reading on may follow it
    assert search["status"] == "ran" and search["hyde"] == "used" and search["degraded"] == []
    hit_ids = [h["id"] for h in out["hits"]]
    assert hit_ids and out["citations"] == [hit_ids[0]]
    assert cited(out["answer"]) == [hit_ids[0]]
    assert out["messages"][-1]["type"] == "ai" and out["messages"][-1]["content"] == out["answer"]
    assert all("read on" in note for note in out["notes"])  # no failure or fallback note

    sent = api.requests_to("chat/completions")
    assert any(
        (r.body.get("response_format") or {}).get("json_schema", {}).get("name") == "QueryPlan" for r in sent
    )
    assert all(r.headers["authorization"] == f"Bearer {SERVER_KEY}" for r in sent)
    state = client.threads.get_state(thread["thread_id"])
    assert state["values"]["answer"] == out["answer"]


def test_rag_streams_its_answer_as_studio_does_with_the_run_context(client, api):
    """Studio streams messages, so ChatOpenAI streams too; the run's context overrides the environment."""
    answer_tokens, values = [], {}
    for part in client.runs.stream(
        None,
        "rag",
        input={"messages": [{"role": "user", "content": QUESTION}]},
        context={"answer_chunks": 2},
        stream_mode=["messages-tuple", "values"],
    ):
        if part.event == "messages":
            chunk, metadata = part.data
            if metadata.get("langgraph_node") == "answer" and chunk["type"] == "AIMessageChunk":
                answer_tokens.append(chunk["content"])  # streamed by the model, not the node's final message
        elif part.event == "values":
            values = part.data
        assert part.event != "error", part.data
    assert len([h for h in values["hits"] if h["queries"] != [READING_ON]]) == 2  # reading on adds others
    assert "".join(answer_tokens) == values["answer"] and cited(values["answer"]) == [values["hits"][0]["id"]]
    assert any(r.body.get("stream") for r in api.requests_to("chat/completions"))


def test_a_run_that_sets_a_knob_to_its_default_gets_the_default_not_the_servers_value(client):
    """The environment once filled every field equal to its default, so no run could choose a default the
    operator had changed."""

    def passages(**run: object) -> int:
        out = client.runs.wait(
            None, "rag", input={"messages": [{"role": "user", "content": QUESTION}]}, **run
        )
        return len([h for h in out["hits"] if h["queries"] != [READING_ON]])

    # no neighbours: a passage inside a better one's neighbours is not listed twice
    assert passages(context={"answer_neighbors": 0}) == SERVER_ANSWER_CHUNKS
    assert passages(context={"answer_chunks": 6, "answer_neighbors": 0}) == 6 == Context().answer_chunks


def test_agent_calls_both_tools_then_cites_a_chunk(client):
    out = client.runs.wait(None, "agent", input={"messages": [{"role": "user", "content": QUESTION}]})

    messages = out["messages"]
    calls = [c for m in messages if m["type"] == "ai" for c in m.get("tool_calls") or []]
    tools = [m for m in messages if m["type"] == "tool"]
    assert [c["name"] for c in calls] == ["document_retriever", "chunk_retriever"]
    assert [t["name"] for t in tools] == ["document_retriever", "chunk_retriever"]
    assert all(t["status"] == "success" for t in tools)
    assert calls[1]["args"]["document_ids"]
    chunk_ids = re.findall(r'<passage id="([^"]+#\d+)"', tools[1]["content"])
    final = messages[-1]
    assert final["type"] == "ai" and not final.get("tool_calls")
    assert cited(final["content"]) == [chunk_ids[0]]


def test_codegen_writes_valid_sql(client):
    out = client.runs.wait(
        None, "codegen", input={"request": "total value of one-off orders per customer", "language": "sql"}
    )
    assert out["errors"] == [] and out["valid"] is True, out
    assert out["code"].startswith("SELECT ") and out["attempts"] == 1
    assert out["context_ids"]


def test_indexer_stores_a_new_document(client, api):
    document = {
        "id": "zanzibar-memo",
        "title": "Zanzibar office memo",
        "content": "The Zanzibar branch closes at noon on Fridays for staff training.",
    }
    out = client.runs.wait(None, "indexer", input={"documents": [document]})
    assert out["errors"] == []
    assert out["report"]["documents"] == 1 and out["report"]["written"] == 1 and out["report"]["chunks"] >= 1
    embedded = [text for r in api.requests_to("embeddings") for text in r.body["input"]]
    assert any("Zanzibar branch" in text for text in embedded)


# --- the boundary: who may run, what a caller may set, what a user may see ----------------------------------


def refusal(call) -> tuple[int, str]:
    """The HTTP status and body of a request the server must refuse."""
    with pytest.raises(httpx.HTTPStatusError) as error:
        call()
    return error.value.response.status_code, error.value.response.text


def test_a_run_without_a_valid_signed_in_users_token_is_refused(server, api):
    api.clear()
    forged = Server(server.url, server.log, "another-secret-" + "x" * 32, 0)
    for headers in [
        {},
        {"Authorization": "Bearer not-a-jwt"},
        {"Authorization": f"Bearer {forged.token('user-demo', TENANT)}"},  # signed with another key
        {"Authorization": f"Bearer {server.token('user-demo', TENANT, expires_in=-60)}"},
        {"Authorization": f"Bearer {server.token('anon-caller', role='anon')}"},
        {"Authorization": f"Bearer {server.token('service', role='service_role')}"},
    ]:
        with get_sync_client(url=server.url, headers=headers) as sdk:
            status, body = refusal(
                lambda: sdk.runs.wait(
                    None, "rag", input={"messages": [{"role": "user", "content": QUESTION}]}
                )
            )
            assert status == 401, (headers, body)
    assert api.requests_to("chat/completions") == [] and api.requests_to("embeddings") == []


def test_a_runs_context_cannot_send_the_servers_key_elsewhere_or_pick_a_store_or_tenant(client, server, api):
    with FakeAPI() as attacker:
        attempts = [
            {"context": {"openai_base_url": attacker.openai_url}},
            {"context": {"db_path": str(REPO / "pyproject.toml"), "answer_chunks": 2}},
            {"context": {"tenant_id": "globex"}},
            {"context": {"voyage_base_url": attacker.voyage_url, "embedding_provider": "voyage"}},
            {"config": {"configurable": {"openai_base_url": attacker.openai_url}}},
        ]
        for attempt in attempts:
            status, body = refusal(
                lambda attempt=attempt: client.runs.wait(
                    None, "rag", input={"messages": [{"role": "user", "content": QUESTION}]}, **attempt
                )
            )
            named = next(iter(attempt.get("context") or attempt["config"]["configurable"]))
            assert status == 403 and f"{named}" in body and "deployment settings" in body, (attempt, body)
        status, body = refusal(
            lambda: client.assistants.create("rag", context={"openai_base_url": attacker.openai_url})
        )
        assert status == 403 and "openai_base_url" in body
        assert attacker.requests_to("chat/completions") == [] and attacker.requests_to("embeddings") == []


def test_a_user_sees_only_their_tenant_and_only_their_own_threads(client, server):
    thread = client.threads.create()
    mine = client.runs.wait(
        thread["thread_id"], "rag", input={"messages": [{"role": "user", "content": QUESTION}]}
    )
    assert mine["hits"]
    for sub, tenant in [("user-globex", "globex"), ("demo", None)]:  # another tenant; a user named like one
        with server.signed_in(sub, tenant) as other:
            theirs = other.runs.wait(None, "rag", input={"messages": [{"role": "user", "content": QUESTION}]})
            assert theirs["hits"] == [] and "found nothing" in theirs["answer"], (sub, theirs)
            status, _ = refusal(lambda: other.threads.get_state(thread["thread_id"]))
            assert status == 404
            assert thread["thread_id"] not in {t["thread_id"] for t in other.threads.search(limit=100)}


def test_a_server_run_cannot_make_the_indexer_read_the_servers_files(client):
    out = client.runs.wait(None, "indexer", input={"paths": [str(REPO)]})
    assert out["report"]["documents"] == 0
    assert len(out["errors"]) == 1 and "AGENT_RETRIEVAL_INGEST_ROOT" in out["errors"][0]


def test_server_log_shows_no_blocking_call(server):
    """Runs above would fail on a blocking call; this also catches ones that a node caught and logged."""
    text = server.log_text()
    assert not BLOCKING.search(text), text[-5000:]
    assert "Traceback" not in text, text[-5000:]
