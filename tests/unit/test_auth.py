"""The server's auth handler on its own: which tokens it accepts (HS256 by secret, ES256 by the project's
JWKS served over real HTTP), what identity it gives, and what it lets a user touch."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from langgraph_sdk import Auth

from agent_retrieval.errors import ConfigError
from agent_retrieval.server.auth import (
    STUDIO_ORIGINS,
    Operator,
    authenticate,
    deployment_for,
    is_operator,
    private_to_owner,
)

SECRET = "a-test-jwt-secret-of-at-least-32-characters"
ISSUER = "https://project.supabase.co/auth/v1"


def token(key=SECRET, algorithm="HS256", *, headers=None, **claims) -> str:
    now = int(time.time())
    body = {
        "sub": "u1",
        "role": "authenticated",
        "aud": "authenticated",
        "iat": now,
        "exp": now + 86_400,  # a day: tokens made when tests are collected outlive the slowest suite
        "app_metadata": {"tenant_id": "acme"},
        "iss": ISSUER,
        **claims,
    }
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode(body, key, algorithm=algorithm, headers=headers)


@pytest.fixture
def verifying(monkeypatch):
    monkeypatch.setenv("SUPABASE_JWT_SECRET", SECRET)
    monkeypatch.setenv("AGENT_RETRIEVAL_SUPABASE_JWT_ISSUER", ISSUER)


async def refused(authorization: str | None) -> Auth.exceptions.HTTPException:
    with pytest.raises(Auth.exceptions.HTTPException) as error:
        await authenticate(authorization)
    return error.value


async def test_a_signed_in_users_token_gives_their_identity_tenant_and_token(verifying):
    signed = token()
    user = await authenticate(f"Bearer {signed}\n")
    assert (user["identity"], user["tenant"], user["supabase_token"]) == ("u1", "acme", signed)
    user = await authenticate(f"Bearer {token(app_metadata=None)}")
    assert user["tenant"] == "user:u1"  # no tenant claim: the user's own namespace


@pytest.mark.parametrize(
    ("authorization", "reason"),
    [
        (None, "needs a signed-in user's Supabase access token"),
        ("Basic dXNlcjpwdw==", "needs a signed-in user's Supabase access token"),
        (f"Bearer {token(key='another-secret-of-at-least-32-characters!')}", "Signature verification failed"),
        (f"Bearer {token(exp=int(time.time()) - 60)}", "expired"),
        (f"Bearer {token(aud='somebody-else')}", "Audience"),
        (f"Bearer {token(role='anon', sub='anon')}", "not a signed-in user's token"),
        (f"Bearer {token(role='service_role')}", "not a signed-in user's token"),
        (f"Bearer {token(sub=None)}", "sub"),
        # another project's token, signed with the same secret: its issuer gives it away
        (f"Bearer {token(iss='https://elsewhere.supabase.co/auth/v1')}", "Invalid issuer"),
        (f"Bearer {token(iss=None)}", "iss"),
        (f"Bearer {jwt.encode({'sub': 'u1'}, None, algorithm='none')}", "are not accepted"),
    ],
)
async def test_anything_but_a_valid_users_token_is_refused_with_401(verifying, authorization, reason):
    error = await refused(authorization)
    assert error.status_code == 401 and reason in error.detail
    if authorization is None:  # a first call with no token says how a server only you can reach runs
        assert "AGENT_RETRIEVAL_AUTH=off" in error.detail


async def test_a_tenant_claim_in_the_user_namespace_is_refused(verifying):
    error = await refused(f"Bearer {token(app_metadata={'tenant_id': 'user:u2'})}")
    assert error.status_code == 403 and "not a tenant name" in error.detail


async def test_without_a_secret_an_hs256_token_cannot_be_verified_and_is_refused(monkeypatch):
    assert "no SUPABASE_JWT_SECRET" in (await refused(f"Bearer {token()}")).detail


async def test_auth_off_trusts_every_caller_as_the_operator(monkeypatch):
    monkeypatch.setenv("AGENT_RETRIEVAL_AUTH", "off")
    assert isinstance(await authenticate(None), Operator)
    assert deployment_for({"identity": "anyone"}).store.tenant_id == ""  # the server's own settings


async def test_without_an_issuer_to_check_no_token_is_accepted(monkeypatch):
    monkeypatch.setenv("SUPABASE_JWT_SECRET", SECRET)
    error = await refused(f"Bearer {token()}")
    assert error.status_code == 401 and "AGENT_RETRIEVAL_SUPABASE_JWT_ISSUER" in error.detail


async def test_the_issuer_is_the_supabase_projects_auth_unless_configured(monkeypatch, verifying):
    monkeypatch.delenv("AGENT_RETRIEVAL_SUPABASE_JWT_ISSUER")
    monkeypatch.setenv("SUPABASE_URL", "https://project.supabase.co/")
    monkeypatch.setenv("SUPABASE_KEY", "anon-key-for-the-test")
    assert (await authenticate(f"Bearer {token()}"))["identity"] == "u1"
    monkeypatch.setenv("AGENT_RETRIEVAL_SUPABASE_JWT_ISSUER", "https://auth.example.com")
    assert "Invalid issuer" in (await refused(f"Bearer {token()}")).detail


# --- the operator: a type, never a name ---------------------------------------------------------------------


def studio(client: str = "127.0.0.1", **headers: str) -> dict:
    sent = {
        b"x-auth-scheme": b"langsmith",
        **{k.replace("_", "-").encode(): v.encode() for k, v in headers.items()},
    }
    return {"authorization": None, "headers": sent, "scope": {"client": (client, 50000)}}


@pytest.mark.parametrize(
    "request_",
    [
        studio(),
        studio("::1"),
        studio(origin="http://localhost:5173"),
        studio(origin=sorted(STUDIO_ORIGINS)[0]),
    ],
    ids=["no origin", "ipv6 loopback", "a local page", "studio's page"],
)
async def test_studios_header_is_the_operator_only_from_this_machine(verifying, request_):
    assert isinstance(await authenticate(**request_), Operator)


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (studio("203.0.113.7"), "from the server's own machine"),
        (studio(x_forwarded_for="203.0.113.7"), "from the server's own machine"),  # a proxy on this machine
        (studio(origin="https://attacker.example"), "web page at https://attacker.example"),
        (studio(origin="http://localhost.attacker.example"), "web page"),
        (studio(origin="null"), "web page"),
    ],
)
async def test_studios_header_from_elsewhere_or_another_page_is_refused(verifying, request_, reason):
    with pytest.raises(Auth.exceptions.HTTPException) as error:
        await authenticate(**request_)
    assert error.value.status_code == 403 and reason in error.value.detail


def test_langgraph_json_lets_only_studio_and_this_machine_read_answers_and_leaves_studio_to_this_module():
    config = json.loads((Path(__file__).parents[2] / "langgraph.json").read_text())
    assert config["auth"]["disable_studio_auth"] is True
    cors = config["http"]["cors"]
    assert set(cors["allow_origins"]) == STUDIO_ORIGINS and "*" not in cors["allow_origins"]
    local = re.compile(cors["allow_origin_regex"])
    assert local.match("http://localhost:3000") and local.match("http://127.0.0.1")
    assert not local.match("http://localhost.attacker.example") and not local.match(
        "https://attacker.example"
    )


def test_no_identity_string_makes_a_user_the_operator(monkeypatch):
    from starlette.authentication import SimpleUser

    monkeypatch.setenv("AGENT_RETRIEVAL_TENANT", "")
    for user in ({"identity": "operator", "tenant": None}, SimpleUser("operator"), None):
        assert not is_operator(user)
        with pytest.raises(ConfigError, match="carries no tenant"):
            deployment_for(user)  # a cron's run carries only its creator's id: refused, never the operator


async def test_a_request_body_past_the_limit_or_of_unstated_length_is_refused(verifying):
    for headers, reason in [
        ({b"content-length": str(17 * 1024 * 1024).encode()}, "over the"),
        ({b"transfer-encoding": b"chunked"}, "Content-Length"),
        ({b"content-length": b"-1"}, "over the"),
    ]:
        with pytest.raises(Auth.exceptions.HTTPException) as error:
            await authenticate(f"Bearer {token()}", headers)
        assert error.value.status_code == 403 and reason in error.value.detail


# --- asymmetric keys, verified by the project's JWKS -------------------------------------------------------


@pytest.fixture
def jwks_server(monkeypatch) -> Iterator[ec.EllipticCurvePrivateKey]:
    """A project whose Auth signs with ES256 and publishes its key at /auth/v1/.well-known/jwks.json."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**public, "kid": "k1", "alg": "ES256", "use": "sig"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = 200 if self.path == "/auth/v1/.well-known/jwks.json" else 404
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body if status == 200 else b"{}")

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("SUPABASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("SUPABASE_KEY", "anon-key-for-the-test")
    yield key
    server.shutdown()


async def test_tokens_signed_with_the_projects_asymmetric_key_are_verified_by_its_jwks(jwks_server):
    issued = {"iss": f"{os.environ['SUPABASE_URL']}/auth/v1"}
    user = await authenticate(f"Bearer {token(jwks_server, 'ES256', headers={'kid': 'k1'}, **issued)}")
    assert (user["identity"], user["tenant"]) == ("u1", "acme")
    stranger = ec.generate_private_key(ec.SECP256R1())
    error = await refused(f"Bearer {token(stranger, 'ES256', headers={'kid': 'k1'}, **issued)}")
    assert error.status_code == 401


# --- authorization ----------------------------------------------------------------------------------------


def context(resource: str, action: str, identity: str = "u1") -> Auth.types.AuthContext:
    user = type(
        "User",
        (),
        {
            "identity": identity,
            "get": lambda self, key, default=None: {"identity": identity, "tenant": "acme"}.get(key, default),
        },
    )()
    return Auth.types.AuthContext(resource=resource, action=action, user=user, permissions=[])


async def test_threads_and_runs_are_private_to_their_owner():
    value = {"metadata": {}}
    assert await private_to_owner(context("threads", "create"), value) == {"owner": "u1"}
    assert value["metadata"] == {"owner": "u1"}
    assert await private_to_owner(context("threads", "read"), {}) == {"owner": "u1"}
    assert await private_to_owner(context("assistants", "search"), {}) is None  # the graphs are shared
    with pytest.raises(Auth.exceptions.HTTPException):
        await private_to_owner(context("store", "put"), {"namespace": ("u2", "notes")})


async def test_no_request_sets_or_changes_an_owner():
    for resource, action, value, where in [
        ("threads", "update", {"metadata": {"owner": "u2"}}, "metadata"),  # PATCH /threads/{id}
        ("threads", "create", {"metadata": {"owner": "u2"}}, "metadata"),
        ("threads", "create_run", {"metadata": {"owner": "u2"}}, "metadata"),
        ("crons", "create", {"metadata": {}, "payload": {"metadata": {"owner": "u2"}}}, "payload.metadata"),
        ("crons", "update", {"metadata": {"owner": "u2"}}, "metadata"),
        ("assistants", "update", {"metadata": {"owner": "u2"}}, "metadata"),
    ]:
        with pytest.raises(Auth.exceptions.HTTPException) as error:
            await private_to_owner(context(resource, action), value)
        assert error.value.status_code == 403 and error.value.detail.startswith(f"{where}.owner"), resource
    own = {"metadata": {"owner": "u1", "topic": "fees"}}
    assert await private_to_owner(context("threads", "update"), own) == {"owner": "u1"}


async def test_a_crons_payload_is_checked_when_it_is_made():
    value = {"payload": {"assistant_id": "rag", "context": {"openai_api_key": "sk-mine"}}, "metadata": {}}
    with pytest.raises(Auth.exceptions.HTTPException) as error:
        await private_to_owner(context("crons", "create"), value)
    assert error.value.status_code == 403 and error.value.detail.startswith("openai_api_key:")


async def test_a_deployment_setting_in_any_context_is_refused_naming_it():
    value = {"kwargs": {"context": {"answer_chunks": 2, "openai_base_url": "http://attacker/v1"}}}
    with pytest.raises(Auth.exceptions.HTTPException) as error:
        await private_to_owner(context("threads", "create_run"), value)
    assert error.value.status_code == 403
    assert error.value.detail.startswith("openai_base_url: deployment settings")
