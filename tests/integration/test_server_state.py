"""A server that trusts nothing it reads, through a real `langgraph dev` on Postgres driven by langgraph-sdk.

A signed-in user may write any field of their own thread's state before any node (`update_state` with
`as_node`, then a run with no input): every node of every graph is driven that way with hostile state, and
must check what it reads where it uses it. Beside that: who may be the operator (Studio's header, CORS),
whose threads and crons are whose, what a request may weigh, and that a provider's error naming the server's
key reaches no output, state or log of any graph.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from agent_retrieval.context import Context
from agent_retrieval.graphs.agent import MAX_TOOL_CALLS
from agent_retrieval.graphs.codegen import COMPUTES_DATA
from agent_retrieval.ingest import MAX_CALLER_CHARS, ingest
from agent_retrieval.models import Document
from agent_retrieval.planning import READING_ON
from agent_retrieval.providers.embeddings import make_embedder
from agent_retrieval.server.auth import MAX_REQUEST_BYTES
from agent_retrieval.stores.postgres import PostgresStore
from tests.fakeapi import FakeAPI, agent_script
from tests.hostile_text import worst_document
from tests.langgraph_server import Server, serve
from tests.stack import mint_jwt

SCHEMA = "ar_state"
DIM = 64
TENANT = "demo"
SERVER_KEY = "sk-STATECHECK-server-5b1e7c"
QUESTION = "How many days of annual leave do staff take?"
HANDBOOK = Document(
    "handbook",
    "Staff handbook",
    "# Annual leave\n\nStaff take 25 days of annual leave a year, booked in the rota.\n\n"
    "# Orders\n\nCREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, total_pence INTEGER);",
)
HUNGRY = "CREATE TABLE hungry AS SELECT length(printf('%.*c', 900000000, 'x')) AS n;"


def operator_context(postgres, api: FakeAPI) -> Context:
    return Context(
        postgres_dsn=postgres.dsn,
        db_schema=SCHEMA,
        tenant_id=TENANT,
        embedding_provider="openai",
        openai_base_url=api.openai_url,
        openai_api_key=SERVER_KEY,
    )


@pytest.fixture(scope="module")
def api() -> Iterator[FakeAPI]:
    with FakeAPI(dim=DIM, chat=agent_script) as server_api:
        yield server_api


@pytest.fixture(scope="module")
def server(postgres, api, tmp_path_factory) -> Iterator[Server]:
    postgres.execute(f"drop schema if exists {SCHEMA} cascade")
    PostgresStore(postgres.dsn, schema=SCHEMA).init(DIM)
    context = operator_context(postgres, api)
    with PostgresStore(postgres.dsn, schema=SCHEMA, tenant=TENANT) as store:
        assert (
            ingest([HANDBOOK], store, make_embedder(context.embeddings), context, progress=False).written == 1
        )
    settings = {
        "AGENT_RETRIEVAL_DSN": postgres.dsn,
        "AGENT_RETRIEVAL_SCHEMA": SCHEMA,
        "AGENT_RETRIEVAL_EMBEDDING_PROVIDER": "openai",
        "OPENAI_BASE_URL": api.openai_url,
        "OPENAI_API_KEY": SERVER_KEY,
        "SUPABASE_JWT_SECRET": secrets.token_urlsafe(32),
    }
    with serve(tmp_path_factory.mktemp("langgraph-state"), settings, jobs=6) as running:
        yield running


@pytest.fixture
def client(server: Server, api: FakeAPI) -> Iterator[SyncLangGraphClient]:
    """A client signed in as a user of the operator's tenant."""
    api.clear()
    with server.signed_in("user-demo", TENANT) as sdk:
        yield sdk


def handbook_as_stored(postgres) -> tuple[Any, ...]:
    rows = postgres.execute(
        f"select title, content, source, is_public, metadata from {SCHEMA}.documents where id = 'handbook'"
    )
    return tuple(rows)


# --- every node, with state a caller wrote ------------------------------------------------------------------

FIRST_INPUT = {
    "rag": {"messages": [{"role": "user", "content": QUESTION}]},
    "agent": {"messages": [{"role": "user", "content": QUESTION}]},
    "codegen": {"request": "list every order's customer and total", "language": "sql"},
    "indexer": {"documents": [{"title": "User notes", "content": "A note of the user's own."}]},
}
HIT = {"id": "x#0", "level": "chunks", "document_id": "x", "title": "t", "content": "c"}
TOOL_CALLS = [
    {"name": "index_document" if n % 2 else "chunk_retriever", "args": {"query": f"q{n}"}, "id": f"c{n}"}
    for n in range(40)
]


def answered(out: dict[str, Any], call_id: str) -> str:
    """How the agent answered one tool call: success, error, or not run (past the calls one step runs)."""
    (message,) = [m for m in out["messages"] if m["type"] == "tool" and m["tool_call_id"] == call_id]
    return "not run" if message["content"].startswith("Not run") else message["status"]


# (graph, the node driven, the node the state is written as, the state, what the run must show)
HOSTILE = [
    (
        "indexer",
        "index_documents",
        "__start__",
        {
            "documents": [
                {
                    "id": "handbook",
                    "title": "Staff handbook",
                    "content": "Staff take no leave.",
                    "metadata": {"tenant_id": "globex", "public": True},
                },
                {"id": "handbook", "title": "Staff handbook", "content": "No leave.", "source": "/etc/x"},
                {"id": "handbook", "title": "Staff handbook", "content": "No leave at all."},
            ]
        },
        lambda out: (
            out["report"]["written"] == 0
            and "metadata: public, tenant_id cannot be set" in out["errors"][0]
            and "unknown field(s) source" in out["errors"][1]
            and "may not replace" in out["errors"][2]
        ),
    ),
    (
        "rag",
        "plan_searches",
        "__start__",
        {"messages": [{"role": "user", "content": "x" * 100_000}]},
        lambda out: "at most 4,000 characters" in out["answer"],
    ),
    (
        "rag",
        "retrieve",
        "plan_searches",
        {"plan": {"intent": "i", "queries": [{"text": f"leave {n}"} for n in range(300)]}},
        lambda out: (
            len([s for s in out["searches"] if s["purpose"] != READING_ON]) == 5
            and "the plan had 300 queries; ran the 5 most important" in out["notes"]
        ),
    ),
    (
        "rag",
        "retrieve",
        "plan_searches",
        {"plan": {"intent": "i", "queries": "everything", "filters": {"a b": 1}}},
        lambda out: out["hits"] == [] and any("invalid plan" in note for note in out["notes"]),
    ),
    (
        "rag",
        "answer",
        "retrieve",
        {"hits": [{**HIT, "id": f"x#{n}", "content": "y" * 10_000} for n in range(500)]},
        lambda out: "invalid hits" in out["answer"] and "at most 100 items" in out["answer"],
    ),
    (
        "rag",
        "answer",
        "retrieve",
        {"hits": [{"id": 1, "level": "everything"}], "question": "z" * 5000},
        lambda out: "the question" in out["answer"] or "invalid hits" in out["answer"],
    ),
    (
        "rag",
        "refuse",
        "plan_searches",
        {"plan": {}, "answer": "Nothing here."},
        lambda out: out["messages"][-1]["content"] == "Nothing here.",
    ),
    (
        "codegen",
        "check_request",
        "__start__",
        {"request": "r" * 10_000, "language": "bash"},
        lambda out: "at most 4,000 characters" in out["errors"][0] and "language" in out["errors"][1],
    ),
    (
        "codegen",
        "retrieve_context",
        "check_request",
        {"request": "r" * 10_000, "errors": []},
        lambda out: out["errors"][0].startswith("retrieval failed: Invalid arguments: query"),
    ),
    (
        "codegen",
        "generate_code",
        "retrieve_context",
        {"attempts": -1000, "errors": []},
        lambda out: "invalid state: attempts" in out["errors"][0] and out["attempts"] == -1000,
    ),
    (
        "codegen",
        "generate_code",
        "retrieve_context",
        {
            "language": "bash",
            "errors": [],
            "passages": [{"id": "p", "heading_path": "h", "content": "c"}] * 60,
        },
        lambda out: "invalid state" in out["errors"][0],
    ),
    (
        "codegen",
        "validate_code",
        "generate_code",
        {
            "attempts": 1,
            "errors": [],
            "code": "SELECT customer FROM orders",
            "passages": [{"id": "p#0", "heading_path": "h", "content": HUNGRY}],
        },
        lambda out: any(COMPUTES_DATA in note for note in out["notes"]),
    ),
    (
        "agent",
        "call_model",
        "__start__",
        {
            "messages": [
                *[{"role": "assistant", "content": "w" * 50_000}] * 9,
                {"role": "user", "content": QUESTION},
            ]
        },
        lambda out: "past the 400,000 sent to the model" in out["messages"][-1]["content"],
    ),
    (
        "agent",
        "run_tools",
        "call_model",
        {"messages": [{"role": "assistant", "content": "", "tool_calls": TOOL_CALLS}]},
        lambda out: (
            [answered(out, f"c{n}") for n in range(len(TOOL_CALLS))]
            == ["success", "error"] * (MAX_TOOL_CALLS // 2) + ["not run"] * (len(TOOL_CALLS) - MAX_TOOL_CALLS)
        ),
    ),
]


@pytest.mark.parametrize(
    ("graph", "node", "as_node", "values", "shows"),
    HOSTILE,
    ids=[f"{graph}.{node}-{n}" for n, (graph, node, *_) in enumerate(HOSTILE)],
)
def test_every_node_checks_the_state_a_caller_wrote_where_it_uses_it(
    client, server, postgres, api, graph, node, as_node, values, shows
):
    before = handbook_as_stored(postgres)
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, graph, input=FIRST_INPUT[graph])
    client.threads.update_state(thread, values, as_node=as_node)
    assert client.threads.get_state(thread)["next"] == [node]
    api.clear()
    out = client.runs.wait(thread, graph, input=None)
    assert shows(out), json.dumps(
        {k: v for k, v in out.items() if k != "messages"} | {"last": out.get("messages", [{}])[-1:]}
    )[-3000:]
    assert handbook_as_stored(postgres) == before
    assert len(api.requests_to("chat/completions")) <= 2 * MAX_TOOL_CALLS  # no call per hostile item
    assert "Traceback" not in server.log_text()


def test_the_indexers_old_waiting_room_is_gone(client):
    """The attack as reported: documents parked in state between two nodes, written unchecked."""
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "indexer", input=FIRST_INPUT["indexer"])
    document = {"id": "handbook", "title": "Staff handbook", "content": "x", "source": "operator"}
    with pytest.raises(httpx.HTTPStatusError) as error:
        client.threads.update_state(thread, {"pending": [document]}, as_node="collect_documents")
    assert error.value.response.status_code in (400, 404, 409, 422)


# --- a provider's error naming the server's key ---------------------------------------------------------


def test_a_key_a_provider_echoes_reaches_no_graphs_output_state_or_log(client, server, api):
    """Every graph's error paths, with every model and embedding call refused by a provider that names the
    key it refused in its error (as OpenAI's 401 does)."""
    api.fail_next(401, times=None)
    try:
        seen = []
        for graph, given in FIRST_INPUT.items():
            thread = client.threads.create()["thread_id"]
            seen.append(client.runs.wait(thread, graph, input=given))
            seen.append(client.threads.get_state(thread))
            seen.append(list(client.runs.list(thread)))
        refused = [len(api.requests_to(endpoint)) for endpoint in ("chat/completions", "embeddings")]
    finally:
        api.heal()
    text = json.dumps(seen) + server.log_text()
    assert all(refused), refused
    assert "Incorrect API key provided: ['[redacted]']" in text  # codegen says what went wrong ...
    assert SERVER_KEY not in text and "STATECHECK" not in text  # ... and never with the key


# --- who is the operator: Studio's header, from this machine and Studio's page only -------------------------


def raw(server: Server, method: str, path: str, **headers: str) -> httpx.Response:
    body = {} if method == "POST" else None
    return httpx.request(method, f"{server.url}{path}", headers=headers, timeout=30, json=body)


def test_studios_header_from_another_web_page_is_refused_and_cors_serves_no_other_page(server):
    studio = {"x-auth-scheme": "langsmith"}
    assert raw(server, "POST", "/threads/search", **studio).status_code == 200  # Studio on this machine
    page = raw(server, "POST", "/threads/search", **studio, origin="https://attacker.example")
    assert page.status_code == 403 and "attacker.example" in page.text
    forwarded = raw(server, "POST", "/threads/search", **studio, **{"x-forwarded-for": "203.0.113.9"})
    assert forwarded.status_code == 403
    preflight = {"access-control-request-method": "POST", "access-control-request-headers": "x-auth-scheme"}
    foreign = raw(server, "OPTIONS", "/threads/search", origin="https://attacker.example", **preflight)
    assert "access-control-allow-origin" not in foreign.headers
    own = raw(server, "OPTIONS", "/threads/search", origin="https://smith.langchain.com", **preflight)
    assert own.headers["access-control-allow-origin"] == "https://smith.langchain.com"


def test_studio_on_this_machine_is_the_operator_and_reads_the_operators_store(server):
    with get_sync_client(url=server.url, headers={"x-auth-scheme": "langsmith"}) as studio:
        out = studio.runs.wait(None, "rag", input={"messages": [{"role": "user", "content": QUESTION}]})
    assert [h["document_id"] for h in out["hits"]][:1] == ["handbook"]


# --- tokens, owners, crons and sizes ----------------------------------------------------------------------


def test_a_token_of_another_issuer_is_refused_though_its_signature_checks_out(server):
    forged = mint_jwt(
        server.jwt_secret,
        "authenticated",
        sub="user-demo",
        app_metadata={"tenant_id": TENANT},
        issuer="elsewhere",
    )
    with (
        get_sync_client(url=server.url, headers={"Authorization": f"Bearer {forged}"}) as sdk,
        pytest.raises(httpx.HTTPStatusError) as error,
    ):
        sdk.threads.search()
    assert error.value.response.status_code == 401 and "Invalid issuer" in error.value.response.text


def test_no_caller_can_plant_a_thread_in_another_users_list(server, client):
    with server.signed_in("mallory", TENANT) as mallory:
        thread = mallory.threads.create()["thread_id"]
        for change in (
            lambda: mallory.threads.update(thread, metadata={"owner": "user-demo"}),
            lambda: mallory.threads.create(metadata={"owner": "user-demo"}),
        ):
            with pytest.raises(httpx.HTTPStatusError) as error:
                change()
            assert error.value.response.status_code == 403 and "owner" in error.value.response.text
    assert thread not in {t["thread_id"] for t in client.threads.search(limit=100)}


def test_a_cron_that_sets_a_deployment_setting_is_refused_when_it_is_made(client):
    with pytest.raises(httpx.HTTPStatusError) as error:
        client.crons.create(
            "rag",
            schedule="0 0 1 1 *",
            input={"messages": [{"role": "user", "content": QUESTION}]},
            context={"openai_base_url": "http://attacker.example/v1"},
        )
    assert error.value.response.status_code == 403 and "openai_base_url" in error.value.response.text
    assert client.crons.search() == []


def test_a_request_body_past_the_limit_is_refused_before_it_is_read(server):
    big = b'{"metadata": {"pad": "' + b"x" * (MAX_REQUEST_BYTES + 1) + b'"}}'
    sent = httpx.post(
        f"{server.url}/threads", content=big, headers=server.headers("user-demo", TENANT), timeout=60
    )
    assert sent.status_code == 403 and "over the" in sent.text


def test_one_indexer_run_writes_at_most_its_share_of_text(client):
    documents = [
        {"title": f"Part {n}", "content": "word " * 150_000} for n in range(4)
    ]  # 750K characters each
    out = client.runs.wait(None, "indexer", input={"documents": documents})
    assert out["report"]["written"] == MAX_CALLER_CHARS // 750_000
    assert (
        sum("one run writes at most 2,000,000 characters" in e for e in out["errors"])
        == 4 - out["report"]["written"]
    )


@pytest.mark.serial  # its bound is on the wait added to an idle server's
def test_a_users_question_waits_under_a_second_more_while_another_indexes_the_worst_documents(server, api):
    """Who sets it: a signed-in user running the indexer (2,000,000 characters a run, 1,000,000 a document).
    What bounds it: linear parsing, chunking in a process of its own (ingest.worker), caller writes taking
    turns: another user's rag run (planner, searches, answer) takes at most a second longer than it does
    on an idle server. The two share two cores with Postgres and the fake model API, so the bound is on
    the wait added, not on the whole run."""
    documents = [{"id": f"worst-{n}", "title": f"Worst {n}", "content": worst_document()} for n in range(2)]
    question = {"messages": [{"role": "user", "content": QUESTION}]}

    def asked(reader: SyncLangGraphClient) -> float:
        start = time.monotonic()
        out = reader.runs.wait(None, "rag", input=question, context={"use_hyde": False})
        assert out["hits"], out
        return time.monotonic() - start

    with server.signed_in("writer", "acme") as writer, server.signed_in("user-demo", TENANT) as reader:
        idle = min(asked(reader) for _ in range(3))
        thread = writer.threads.create()["thread_id"]
        run = writer.runs.create(thread, "indexer", input={"documents": documents})
        waits: list[float] = []
        while writer.runs.get(thread, run["run_id"])["status"] in ("pending", "running") or not waits:
            waits.append(asked(reader))
        written = writer.runs.join(thread, run["run_id"])
    assert written["report"]["written"] == 2, written["errors"]
    assert len(waits) > 3 and max(waits) < idle + 1.0, (idle, waits)


def test_one_callers_writes_cannot_hold_the_server_from_the_others(server, api):
    """Callers' writes embed one at a time (the others' searches keep the rest of the machine); a caller's
    second write while the first runs is refused at once, so no caller holds the server's run slots; and
    another caller's write and search go ahead."""
    api.heal()
    api.clear()
    api.delay_next(0.5, times=None, endpoint="embeddings", batches_only=True)  # a write's, not a search's
    lines = " ".join(f"Line {n} of the budget was agreed." for n in range(12_000))  # 400K characters
    minutes = {"documents": [{"title": "Minutes", "content": lines}]}
    note = {"documents": [{"title": "Note", "content": "Hi."}]}
    question = {"messages": [{"role": "user", "content": QUESTION}]}
    try:
        with (
            server.signed_in("mallory", "acme") as mallory,
            server.signed_in("bob", "globex") as bob,
        ):
            thread = mallory.threads.create()["thread_id"]
            first = mallory.runs.create(thread, "indexer", input=minutes)
            while not api.requests_to("embeddings"):  # the first write is embedding
                time.sleep(0.05)
            second = mallory.runs.wait(mallory.threads.create()["thread_id"], "indexer", input=minutes)
            asked = bob.runs.wait(None, "rag", input=question)
            during = mallory.runs.get(thread, first["run_id"])["status"]
            written = bob.runs.wait(None, "indexer", input=note)  # waits for its turn
            first_status = mallory.runs.join(thread, first["run_id"])
    finally:
        api.heal()
    assert second["errors"] == [
        "not written: an earlier write of the same caller is still running; try again once it is done"
    ]
    assert asked["answer"] and during == "running"  # bob's search ran while mallory's write did
    assert written["report"]["written"] == first_status["report"]["written"] == 1
    assert api.peak["embeddings batches"] == 1  # never two writes embedding at once


def test_a_user_named_operator_reads_nothing_of_the_operators_in_a_cron_run(server):
    """A cron's run carries only its creator's id; an id equal to "operator" once made it the operator,
    reading every tenant. The run must fail for want of a tenant, or find nothing of the handbook."""
    question = {"messages": [{"role": "user", "content": QUESTION}]}
    with server.signed_in("operator", None) as user:
        thread = user.threads.create()["thread_id"]
        cron = user.crons.create_for_thread(
            thread, "rag", schedule="* * * * * */2", input=question, context={"answer_chunks": 2}
        )
        try:
            deadline = time.monotonic() + 120  # waits for the scheduler: not a speed measurement
            while not (runs := user.runs.list(thread)) or runs[0]["status"] in ("pending", "running"):
                assert time.monotonic() < deadline, "the cron never ran"
                time.sleep(0.5)
        finally:
            user.crons.delete(cron["cron_id"])
        state = user.threads.get_state(thread)["values"]
    assert runs[0]["status"] == "error" or state.get("hits") == []
    assert "handbook" not in json.dumps(state)
