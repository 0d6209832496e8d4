"""The server's auth handler on its own: which tokens it accepts (HS256 by secret, ES256 by the project's
JWKS served over real HTTP), what identity it gives, and what it lets a user touch."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from langgraph_sdk import Auth

from agent_retrieval.auth import authenticate, private_to_owner

SECRET = "a-test-jwt-secret-of-at-least-32-characters"


def token(key=SECRET, algorithm="HS256", *, headers=None, **claims) -> str:
    now = int(time.time())
    body = {
        "sub": "u1",
        "role": "authenticated",
        "aud": "authenticated",
        "iat": now,
        "exp": now + 600,
        "app_metadata": {"tenant_id": "acme"},
        **claims,
    }
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode(body, key, algorithm=algorithm, headers=headers)


@pytest.fixture
def verifying(monkeypatch):
    monkeypatch.setenv("SUPABASE_JWT_SECRET", SECRET)


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
        (f"Bearer {jwt.encode({'sub': 'u1'}, None, algorithm='none')}", "are not accepted"),
    ],
)
async def test_anything_but_a_valid_users_token_is_refused_with_401(verifying, authorization, reason):
    error = await refused(authorization)
    assert error.status_code == 401 and reason in error.detail


async def test_a_tenant_claim_in_the_user_namespace_is_refused(verifying):
    error = await refused(f"Bearer {token(app_metadata={'tenant_id': 'user:u2'})}")
    assert error.status_code == 403 and "not a tenant name" in error.detail


async def test_without_a_secret_an_hs256_token_cannot_be_verified_and_is_refused(monkeypatch):
    assert "no SUPABASE_JWT_SECRET" in (await refused(f"Bearer {token()}")).detail


async def test_auth_off_trusts_every_caller_as_the_operator(monkeypatch):
    monkeypatch.setenv("AGENT_RETRIEVAL_AUTH", "off")
    assert await authenticate(None) == {"identity": "operator", "tenant": None, "permissions": []}


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
    user = await authenticate(f"Bearer {token(jwks_server, 'ES256', headers={'kid': 'k1'})}")
    assert (user["identity"], user["tenant"]) == ("u1", "acme")
    stranger = ec.generate_private_key(ec.SECP256R1())
    error = await refused(f"Bearer {token(stranger, 'ES256', headers={'kid': 'k1'})}")
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


async def test_a_deployment_setting_in_any_context_is_refused_naming_it():
    value = {"kwargs": {"context": {"answer_chunks": 2, "openai_base_url": "http://attacker/v1"}}}
    with pytest.raises(Auth.exceptions.HTTPException) as error:
        await private_to_owner(context("threads", "create_run"), value)
    assert error.value.status_code == 403
    assert error.value.detail.startswith("openai_base_url: deployment settings")
