"""Identity from authentication, through a real `langgraph dev` in front of the Supabase stack.

The server holds only the anon key; each request carries a user's access token, signed with the stack's
JWT secret as Supabase Auth signs it. Two tenants each keep a secret codename and a third tenant has
published a document. Through every graph, each user must find their own tenant's rows and the public
one, and never the other tenant's, whatever they ask or set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from langgraph_sdk import get_sync_client

from tests.fakeapi import FakeAPI, agent_script
from tests.langgraph_server import Server, serve
from tests.tenants import DIM, SCHEMA, SECRETS, seed_tenants, server_settings

SERVER_KEY = "sk-fake-server-key"
QUESTION = "What is the codename of the acquisition plan, and when is closing planned?"


@pytest.fixture(scope="module")
def api() -> Iterator[FakeAPI]:
    with FakeAPI(dim=DIM, chat=agent_script) as server_api:
        yield server_api


@pytest.fixture(scope="module")
def server(supabase_stack, api, tmp_path_factory) -> Iterator[Server]:
    stack = supabase_stack
    seed_tenants(stack, api, SERVER_KEY)
    settings = server_settings(stack, api, SERVER_KEY)
    with serve(tmp_path_factory.mktemp("langgraph-auth"), settings) as running:
        yield running


def everything(out: dict) -> str:
    return json.dumps(out)


@pytest.mark.parametrize(
    ("sub", "tenant", "own"),
    [("u-acme", "acme", "acme"), ("u-globex", "globex", "globex"), ("acme", None, None)],
)  # a user named like a tenant, with no tenant claim
def test_each_user_reads_only_their_tenant_and_public_rows_through_every_graph(server, api, sub, tenant, own):
    allowed = {"press", own} - {None}
    with server.signed_in(sub, tenant) as client:
        rag = client.runs.wait(None, "rag", input={"messages": [{"role": "user", "content": QUESTION}]})
        agent = client.runs.wait(None, "agent", input={"messages": [{"role": "user", "content": QUESTION}]})
        codegen = client.runs.wait(None, "codegen", input={"request": QUESTION, "language": "sql"})
    assert {h["document_id"].removesuffix("-plan") for h in rag["hits"]} == allowed
    tool_text = " ".join(m["content"] for m in agent["messages"] if m["type"] == "tool")
    assert all(f"{t}-plan" in tool_text for t in allowed)
    for out in (rag, agent, codegen):
        text = everything(out)
        for other, secret in SECRETS.items():
            if other not in allowed:
                assert secret not in text and f"{other}-plan" not in text, (sub, other)
    assert api.script_errors == []


def test_the_server_key_goes_only_to_its_endpoint_and_no_key_or_token_reaches_the_log_or_state(server, api):
    api.clear()
    user_token = server.token("u-acme", "acme")
    with get_sync_client(url=server.url, headers={"Authorization": f"Bearer {user_token}"}) as client:
        thread = client.threads.create()
        client.runs.wait(
            thread["thread_id"], "rag", input={"messages": [{"role": "user", "content": QUESTION}]}
        )
        state = json.dumps(client.threads.get_state(thread["thread_id"]))
    assert api.requests_to("embeddings")
    assert all(r.headers["authorization"] == f"Bearer {SERVER_KEY}" for r in api.requests_to("embeddings"))
    for secret in (SERVER_KEY, user_token, server.jwt_secret):
        assert secret not in server.log_text() and secret not in state


def test_a_users_indexer_run_writes_nothing_into_another_tenant(server):
    with server.signed_in("u-globex", "globex") as client:
        out = client.runs.wait(
            None,
            "indexer",
            input={
                "documents": [
                    {
                        "title": "acme acquisition plan",
                        "id": "acme-plan",
                        "content": "Overwritten by globex.",
                        "metadata": {"tenant_id": "acme"},
                    }
                ]
            },
        )
    assert out["report"]["written"] == 0 and "tenant_id cannot be set" in " ".join(out["errors"])


def test_state_a_user_writes_cannot_replace_another_tenants_document_or_widen_visibility(
    server, supabase_stack
):
    """The indexer attack through state (update_state before the writing node), on Supabase: the write is
    checked where it happens, and row-level security would refuse the rest anyway."""
    before = supabase_stack.postgres.execute(
        f"select tenant_id, content, is_public, source from {SCHEMA}.documents where id = 'acme-plan'"
    )
    with server.signed_in("u-globex", "globex") as client:
        thread = client.threads.create()["thread_id"]
        client.runs.wait(thread, "indexer", input={"documents": [{"title": "Notes", "content": "Ours."}]})
        hostile = {
            "id": "acme-plan",
            "title": "acme acquisition plan",
            "content": "Cancelled.",
            "metadata": {"public": True},
        }
        client.threads.update_state(thread, {"documents": [hostile]}, as_node="__start__")
        out = client.runs.wait(thread, "indexer", input=None)
    assert out["report"]["written"] == 0 and "public cannot be set" in out["errors"][0]
    after = supabase_stack.postgres.execute(
        f"select tenant_id, content, is_public, source from {SCHEMA}.documents where id = 'acme-plan'"
    )
    assert after == before
