"""The test stack is the real thing, and each of its safeguards matters.

The unmodified supabase client talks through the gateway to the real PostgREST, which checks JWTs with the
stack's secret and runs requests as anon / authenticated / service_role in Postgres, where row-level
security applies. Objects live in the throwaway schema `stack_test`, which (like `agent_retrieval`) does
not exist when PostgREST starts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
from postgrest.exceptions import APIError
from supabase import Client, ClientOptions, acreate_client, create_client

from tests.stack import Postgres, SupabaseStack, mint_jwt, start_postgres

# supabase-py passes its own deprecated arguments to postgrest-py: nothing for these tests to fix
pytestmark = pytest.mark.filterwarnings(
    "ignore:The '(timeout|verify)' parameter is deprecated:DeprecationWarning"
)

SCHEMA_SQL = """
create schema stack_test;
grant usage on schema stack_test to anon, authenticated, service_role;

create function stack_test.whoami() returns jsonb language sql stable as $$
  select jsonb_build_object('role', current_user,
                            'claims', current_setting('request.jwt.claims', true)::jsonb)
$$;
create function stack_test.slow_echo(n int) returns jsonb language sql volatile as $$
  select jsonb_build_object('n', n, 'role', current_user) from pg_sleep(0.2)
$$;
grant execute on function stack_test.whoami(), stack_test.slow_echo(int) to anon, authenticated, service_role;

create table stack_test.notes (id int primary key, owner text not null, body text not null);
alter table stack_test.notes enable row level security;
create policy own_notes on stack_test.notes for select
  using (owner = (current_setting('request.jwt.claims', true)::jsonb ->> 'sub'));
grant select on stack_test.notes to anon, authenticated, service_role;
insert into stack_test.notes values (1, 'alice', 'a1'), (2, 'alice', 'a2'), (3, 'bob', 'b1');

create table stack_test.many (id int primary key);
grant select on stack_test.many to anon, authenticated, service_role;
insert into stack_test.many select generate_series(1, 1500);
"""


@dataclass
class Api:
    stack: SupabaseStack
    before_reload: httpx.Response  # whoami, called after the schema was created but before the reload

    def rpc(self, fn: str, *, apikey: str, token: str | None = None, **kwargs: object) -> httpx.Response:
        return raw_rpc(self.stack, fn, apikey=apikey, token=token, **kwargs)


def raw_rpc(
    stack: SupabaseStack, fn: str, *, apikey: str, token: str | None = None, **kwargs: object
) -> httpx.Response:
    """A call through the gateway without the supabase client, to see what it would hide."""
    headers = {"apikey": apikey, "Content-Profile": "stack_test"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(f"{stack.url}/rest/v1/rpc/{fn}", headers=headers, json=kwargs)


@pytest.fixture(scope="module")
def api(supabase_stack: SupabaseStack) -> Iterator[Api]:
    stack = supabase_stack
    stack.postgres.execute("drop schema if exists stack_test cascade")
    stack.postgres.execute(SCHEMA_SQL)
    before = raw_rpc(stack, "whoami", apikey=stack.anon_key)
    stack.postgrest.reload_schema()
    yield Api(stack, before)
    stack.postgres.execute("drop schema stack_test cascade")
    stack.postgrest.reload_schema()


def client(api: Api, key: str, token: str | None = None, schema: str = "stack_test") -> Client:
    """The unmodified supabase client, on the gateway; `token` replaces the key as the bearer."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return create_client(api.stack.url, key, ClientOptions(schema=schema, headers=headers))


# --- the real client through the gateway ---------------------------------------------------------------


def test_a_schema_created_after_start_is_served_once_the_cache_reloads(api: Api) -> None:
    # PostgREST started with stack_test (and agent_retrieval) listed but absent; it only sees the new
    # function after NOTIFY pgrst, 'reload schema'
    assert api.before_reload.status_code == 404
    assert api.before_reload.json()["code"] == "PGRST202"
    assert api.rpc("whoami", apikey=api.stack.anon_key).status_code == 200


def test_supabase_client_calls_rpc_as_anon_user_and_service_role(api: Api) -> None:
    stack = api.stack
    anon = client(api, stack.anon_key).rpc("whoami").execute().data
    assert anon["role"] == "anon"
    assert anon["claims"]["role"] == "anon" and "sub" not in anon["claims"]

    # ClientOptions(schema=...) above, client.schema(...) here: both send the schema as Content-Profile
    user = create_client(
        stack.url,
        stack.anon_key,
        ClientOptions(headers={"Authorization": f"Bearer {stack.user_token('alice', tenant='t1')}"}),
    )
    mine = user.schema("stack_test").rpc("whoami", {}).execute().data  # (this rpc() has no default params)
    assert mine["role"] == "authenticated"
    assert mine["claims"]["sub"] == "alice"
    assert mine["claims"]["aud"] == "authenticated"
    assert mine["claims"]["app_metadata"] == {"tenant_id": "t1"}

    service = client(api, stack.service_key).rpc("whoami").execute().data
    assert service["role"] == "service_role"


def test_a_schema_not_served_is_refused(api: Api) -> None:
    with pytest.raises(APIError) as caught:
        client(api, api.stack.anon_key, schema="pg_catalog").rpc("whoami").execute()
    assert caught.value.code == "PGRST106"


# --- the gateway -------------------------------------------------------------------------------------


def test_the_gateway_refuses_a_wrong_or_missing_apikey(api: Api) -> None:
    stack = api.stack
    wrong = mint_jwt("another-secret-of-at-least-32-characters", "anon")
    response = api.rpc("whoami", apikey=wrong)
    assert response.status_code == 401
    assert response.json() == {"message": "Invalid API key"}

    response = httpx.post(f"{stack.url}/rest/v1/rpc/whoami", headers={"Content-Profile": "stack_test"})
    assert response.status_code == 401

    with pytest.raises(APIError) as caught:
        client(api, wrong).rpc("whoami").execute()
    assert caught.value.message == "Invalid API key"


def test_the_gateway_serves_only_rest_v1(api: Api) -> None:
    response = httpx.get(f"{api.stack.url}/auth/v1/user", headers={"apikey": api.stack.anon_key})
    assert response.status_code == 404


def test_the_gateway_uses_the_apikey_as_bearer_when_no_token_is_sent(api: Api) -> None:
    # without it, a service-key request would run as anon (PostgREST's role for requests without a JWT)
    response = api.rpc("whoami", apikey=api.stack.service_key)
    assert response.status_code == 200
    assert response.json()["role"] == "service_role"


def test_the_gateway_passes_method_query_and_repeated_headers(api: Api) -> None:
    response = httpx.get(
        f"{api.stack.url}/rest/v1/many",
        params={"select": "id", "id": "in.(2,3,5)", "order": "id.desc"},
        headers=[
            ("apikey", api.stack.anon_key),
            ("Accept-Profile", "stack_test"),
            ("Prefer", "count=exact"),
            ("Prefer", "missing=default"),
        ],
    )
    assert response.status_code == 200
    assert response.json() == [{"id": 5}, {"id": 3}, {"id": 2}]
    assert response.headers["content-range"] == "0-2/3"  # count=exact got through beside the other Prefer


# --- PostgREST's checks --------------------------------------------------------------------------------


def test_postgrest_rejects_a_token_signed_with_another_secret(api: Api) -> None:
    forged = mint_jwt("another-secret-of-at-least-32-characters", "service_role", sub="mallory")
    response = api.rpc("whoami", apikey=api.stack.anon_key, token=forged)
    assert response.status_code == 401
    assert response.json()["code"] == "PGRST301"
    assert "JWSError" in response.json()["message"]

    with pytest.raises(APIError) as caught:
        client(api, api.stack.anon_key, token=forged).rpc("whoami").execute()
    assert caught.value.code == "PGRST301"


def test_postgrest_rejects_an_expired_token(api: Api) -> None:
    expired = mint_jwt(api.stack.jwt_secret, "authenticated", sub="alice", expires_in=-120)
    response = api.rpc("whoami", apikey=api.stack.anon_key, token=expired)
    assert response.status_code == 401
    assert response.json()["code"] == "PGRST301"


def test_row_level_security_shows_each_user_their_own_rows(api: Api) -> None:
    stack = api.stack

    def notes(key: str, token: str | None = None) -> list[str]:
        rows = client(api, key, token).table("notes").select("body").order("id").execute().data
        return [row["body"] for row in rows]

    assert notes(stack.anon_key, stack.user_token("alice")) == ["a1", "a2"]
    assert notes(stack.anon_key, stack.user_token("bob")) == ["b1"]
    assert notes(stack.anon_key) == []
    assert notes(stack.service_key) == ["a1", "a2", "b1"]  # service_role has BYPASSRLS


def test_postgrest_caps_rows_at_1000_as_hosted_supabase_does(api: Api) -> None:
    rows = client(api, api.stack.service_key).table("many").select("id").execute().data
    assert len(rows) == 1000


# --- concurrency ---------------------------------------------------------------------------------------


def test_32_concurrent_rpc_calls_through_the_gateway(api: Api) -> None:
    rpc_client = client(api, api.stack.service_key)

    def call(n: int) -> dict:
        return rpc_client.rpc("slow_echo", {"n": n}).execute().data

    started = time.monotonic()
    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(call, range(32)))
    elapsed = time.monotonic() - started
    assert results == [{"n": n, "role": "service_role"} for n in range(32)]
    # each call sleeps 0.2 s in Postgres: one at a time would take 6.4 s; PostgREST's pool of 10 needs ~0.8 s
    assert elapsed < 4.0, elapsed


async def test_the_async_client_works_through_the_gateway(api: Api) -> None:
    stack = api.stack
    async_client = await acreate_client(
        stack.url,
        stack.anon_key,
        ClientOptions(headers={"Authorization": f"Bearer {stack.user_token('bob')}"}),
    )
    rpc = async_client.schema("stack_test")
    results = await asyncio.gather(*(rpc.rpc("slow_echo", {"n": n}).execute() for n in range(32)))
    assert [r.data for r in results] == [{"n": n, "role": "authenticated"} for n in range(32)]
    rows = await rpc.table("notes").select("body").execute()
    assert [row["body"] for row in rows.data] == ["b1"]


# --- Postgres on its own -------------------------------------------------------------------------------


def test_postgres_has_pgvector_and_supabases_roles(postgres: Postgres) -> None:
    assert postgres.execute("select '[1,2,3]'::vector <-> '[1,2,5]'::vector") == [(2.0,)]
    roles = {
        name: (login, inherit, bypass)
        for name, login, inherit, bypass in postgres.execute(
            "select rolname, rolcanlogin, rolinherit, rolbypassrls from pg_roles"
            " where rolname in ('anon', 'authenticated', 'service_role', 'authenticator')"
        )
    }
    assert roles == {
        "anon": (False, True, False),
        "authenticated": (False, True, False),
        "service_role": (False, True, True),
        "authenticator": (True, False, False),
    }
    granted = postgres.execute(
        "select r.rolname from pg_auth_members m join pg_roles r on r.oid = m.roleid"
        " join pg_roles u on u.oid = m.member where u.rolname = 'authenticator' order by 1"
    )
    assert granted == [("anon",), ("authenticated",), ("service_role",)]


def test_the_authenticator_must_give_its_password(postgres: Postgres) -> None:
    with psycopg.connect(postgres.authenticator_dsn) as conn:
        assert conn.execute("select current_user").fetchone() == ("authenticator",)
    wrong = postgres.authenticator_dsn.replace(postgres.authenticator_password, "wrong")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong)


def test_start_postgres_is_idempotent_on_a_reused_folder(tmp_path: Path) -> None:
    first = start_postgres(tmp_path)
    first.execute("create table kept (x int); insert into kept values (1)")
    first.stop()
    second = start_postgres(tmp_path)
    try:
        assert second.execute("select x from kept") == [(1,)]
        kept = second.authenticator_password == first.authenticator_password
        assert kept, "the authenticator's password changed"  # (not shown: it is a secret)
        with psycopg.connect(second.authenticator_dsn) as conn:
            assert conn.execute("select current_user").fetchone() == ("authenticator",)
    finally:
        second.stop()
