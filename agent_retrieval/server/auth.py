"""Who runs the graphs on a LangGraph server, and what they may set: the `auth` named in langgraph.json.

Every request carries a signed-in user's Supabase access token (`Authorization: Bearer <token>`). It is
verified here (HS256 with SUPABASE_JWT_SECRET, or the project's JWKS for its asymmetric keys) and the run
gets that user's identity, tenant and token: on Supabase each search is made as the user, under row-level
security; on Postgres and the embedded store it reads and writes the user's tenant. Threads, runs and the
assistants users make are private to their owner. No caller may set a deployment setting (an endpoint, key,
store path or tenant) through a run's or an assistant's context.

LangGraph Studio's own requests run as the operator, with the server's environment, only when they come from
this machine and from no other web page: langgraph.json hands Studio's requests to this handler
(`"disable_studio_auth": true`) and closes CORS to other origins, since any page a browser opens could
otherwise send Studio's header. AGENT_RETRIEVAL_AUTH=off trusts every caller as the operator: only for a
server nobody else can reach. The operator is a type (`Operator`), never an identity string a token could
name. Callers may not set or change the `owner` of threads, runs, assistants or crons.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import os
import urllib.parse
from collections.abc import Mapping
from typing import Any

from langgraph_sdk import Auth

from agent_retrieval.context import DEPLOYMENT_SETTINGS, RUN_SETTINGS, Context, ServerSettings
from agent_retrieval.core.redaction import protect
from agent_retrieval.errors import ConfigError
from agent_retrieval.server.identity import tenant_of_claims

log = logging.getLogger(__name__)

ALGORITHMS = ("HS256", "RS256", "ES256")  # what Supabase signs access tokens with
# Where LangGraph Studio's page is served from: the only web origins besides this machine's own.
STUDIO_ORIGINS = frozenset({"https://smith.langchain.com", "https://eu.smith.langchain.com"})
MAX_REQUEST_BYTES = 16 * 1024 * 1024  # of one request's body: a run's input, a state update, a store item

auth = Auth()


class Operator:
    """The operator: every caller when auth is off, or LangGraph Studio on this machine. A type, so no
    token can name it: a user whose id is "operator" is a user like any other."""

    identity = "operator"
    display_name = "operator"
    is_authenticated = True
    permissions: tuple[str, ...] = ()
    tenant = None

    def dict(self) -> dict[str, Any]:
        return {"identity": self.identity, "kind": "operator"}


def _refuse(status: int, detail: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=status, detail=detail)


@auth.authenticate
async def authenticate(
    authorization: str | None,
    headers: Mapping[bytes, bytes] | None = None,
    scope: Mapping[str, Any] | None = None,
) -> Any:
    """The request's user, from its verified Supabase access token: a dict with identity and tenant; or the
    Operator (auth off, or Studio on this machine)."""
    headers = headers or {}
    try:
        # the server's environment, read as the operator set it
        settings = (await asyncio.to_thread(Context.from_env)).server
    except ConfigError as error:
        log.error("the server's settings are invalid: %s", error)
        raise _refuse(
            403, "the server's settings are invalid; its operator must check `agent-retrieval config`"
        ) from None
    _check_size(headers)
    if settings.server_auth == "off":
        return Operator()
    if headers.get(b"x-auth-scheme") == b"langsmith":
        return _studio_on_this_machine(headers, scope or {})
    return await signed_in_user(authorization, settings)


async def signed_in_user(authorization: str | None, settings: ServerSettings) -> dict[str, Any]:
    """The user an `Authorization: Bearer <Supabase access token>` header names, once the token is verified:
    identity, tenant and the token (for row-level security). Refused (an HTTPException of 401 or 403, whose
    detail says why and never holds the token) without one, or with a token that fails any check."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _refuse(
            401,
            "this server needs a signed-in user's Supabase access token: send the header "
            "'Authorization: Bearer <access_token>' (a server only its operator can reach may run with "
            "AGENT_RETRIEVAL_AUTH=off instead)",
        )
    claims = await _verified_claims(token.strip(), settings)
    tenant = tenant_of_claims(claims)
    if tenant is None:
        raise _refuse(
            403,
            "the token's app_metadata.tenant_id is not a tenant name (empty, or in the 'user:' "
            "namespace kept for users without a tenant)",
        )
    return {
        "identity": claims["sub"],
        "display_name": str(claims.get("email") or claims["sub"]),
        "tenant": tenant,
        "supabase_token": token.strip(),
        "permissions": ["authenticated"],
    }


def _check_size(headers: Mapping[bytes, bytes]) -> None:
    """Refuse a body past MAX_REQUEST_BYTES before the server reads it (or one of unstated length)."""
    length = headers.get(b"content-length")
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked" and length is None:
        raise _refuse(403, "send the request with a Content-Length (chunked bodies are not accepted)")
    if length is not None and (not length.isdigit() or int(length) > MAX_REQUEST_BYTES):
        raise _refuse(
            403,
            f"the request's body is {length.decode(errors='replace')[:20]} bytes, over the "
            f"{MAX_REQUEST_BYTES:,} allowed; send less at once (several runs, or files by path)",
        )


def _studio_on_this_machine(headers: Mapping[bytes, bytes], scope: Mapping[str, Any]) -> Operator:
    """Studio's header makes a request the operator's only from this machine, not forwarded by a proxy,
    and from no web page but Studio's own (a browser sends the page's Origin, which a page cannot set)."""
    client = scope.get("client") or ("", 0)
    loopback = is_loopback(str(client[0]))
    forwarded = any(name in headers for name in (b"forwarded", b"x-forwarded-for", b"x-real-ip"))
    if not loopback or forwarded:
        raise _refuse(
            403,
            "LangGraph Studio's operator access is for requests from the server's own machine; "
            "others sign in with an access token",
        )
    origin = headers.get(b"origin", b"").decode(errors="replace")
    if origin and origin not in STUDIO_ORIGINS and not _loopback_origin(origin):
        raise _refuse(403, f"requests from the web page at {origin[:100]} may not act as the operator")
    return Operator()


def _loopback_origin(origin: str) -> bool:
    """A page served from this machine (http://localhost:5173, http://127.0.0.1:8000)."""
    try:
        host = urllib.parse.urlsplit(origin).hostname or ""
    except ValueError:
        return False
    return host == "localhost" or is_loopback(host)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _verified_claims(token: str, settings: ServerSettings) -> dict[str, Any]:
    """The token's claims once its signature, expiry, audience and role are checked; 401 otherwise."""
    import jwt

    try:
        algorithm = jwt.get_unverified_header(token).get("alg")
        if algorithm not in ALGORITHMS:
            raise jwt.InvalidTokenError(f"tokens signed with {algorithm} are not accepted")
        if algorithm == "HS256":
            if not settings.supabase_jwt_secret:
                raise jwt.InvalidTokenError(
                    "the server has no SUPABASE_JWT_SECRET to check HS256 tokens with"
                )
            key: Any = settings.supabase_jwt_secret.get_secret_value()
        else:
            if not settings.supabase_url:
                raise jwt.InvalidTokenError("the server has no SUPABASE_URL to fetch the project's keys from")
            jwks = _jwks_client(f"{settings.supabase_url.rstrip('/')}/auth/v1/.well-known/jwks.json")
            key = (await asyncio.to_thread(jwks.get_signing_key_from_jwt, token)).key
        if not settings.token_issuer:
            raise jwt.InvalidTokenError(
                "the server knows no issuer to check tokens against: its operator sets SUPABASE_URL or "
                "AGENT_RETRIEVAL_SUPABASE_JWT_ISSUER"
            )
        claims = jwt.decode(
            token,
            key,
            algorithms=[algorithm],
            audience="authenticated",
            issuer=settings.token_issuer,
            options={"require": ["exp", "sub", "iss"]},
        )
    except (jwt.PyJWTError, ValueError) as error:
        # The reason is PyJWT's own (expired, bad signature, wrong audience): never the token.
        raise _refuse(401, f"the access token was refused: {error}") from None
    if claims.get("role") != "authenticated" or not isinstance(claims["sub"], str) or not claims["sub"]:
        raise _refuse(
            401,
            "the access token was refused: it is not a signed-in user's token (role "
            "'authenticated' with a user id)",
        )
    return claims


@functools.lru_cache(maxsize=8)
def _jwks_client(url: str) -> Any:
    """One key set client per project, so its keys are fetched once and reused (they rotate rarely)."""
    import jwt

    return jwt.PyJWKClient(url, cache_keys=True, lifespan=600, timeout=10)


def is_operator(user: Any) -> bool:
    """The operator's own request: an Operator this module made (LangGraph hands it to a run wrapped in a
    proxy), or Studio's user where LangSmith authenticated it (a deployment; on `langgraph dev` anyone can
    send Studio's header, which is why langgraph.json hands those requests to this module)."""
    if isinstance(user, Operator) or isinstance(getattr(user, "_user", None), Operator):
        return True
    studio = isinstance(user, Auth.types.StudioUser)
    return studio and os.environ.get("LANGSMITH_LANGGRAPH_API_VARIANT") != "local_dev"


def deployment_for(user: Any) -> Context:
    """The deployment settings of a server run: the environment's, narrowed to the authenticated user.

    A user this module authenticated searches in their tenant, on Supabase with their own token (so
    row-level security applies); a user of another auth handler must carry a `tenant` the same way.
    """
    return narrowed(Context.from_env(), user)


def narrowed(settings: Context, user: Any) -> Context:
    """The operator's `settings` as `user` may use them: unchanged for the operator (or with auth off);
    otherwise in the user's tenant, with their token. The operator's secrets are masked from then on in
    whatever the server writes, a provider's error or a passage quoting one included."""
    protect(*settings.secrets())
    if settings.server.server_auth == "off" or is_operator(user):
        return settings
    tenant = _get(user, "tenant")
    if not isinstance(tenant, str) or not tenant:
        raise ConfigError(
            "the run's authenticated user carries no tenant: serve the graphs with "
            "agent_retrieval.server.auth (langgraph.json `auth`), or give your auth handler's users a "
            "`tenant` (and `supabase_token`)"
        )
    return settings.replace(tenant_id=tenant, supabase_user_token=_get(user, "supabase_token") or "")


def _get(user: Any, key: str) -> Any:
    if isinstance(user, Mapping) or hasattr(user, "get"):
        return user.get(key)
    return getattr(user, key, None)


# --- authorization: private resources, and no deployment setting from a caller ---------------------------


def refused_settings(value: Mapping[str, Any]) -> list[str]:
    """Deployment settings a request tries to set through a context or configurable (either may carry
    settings: the server reads `configurable` as the context when no context is given), in a run, an
    assistant, or a cron's payload (checked when the cron is made, not each time it fires)."""
    holders = [value, value.get("kwargs"), value.get("payload")]
    sources = [
        source
        for holder in holders
        if isinstance(holder, Mapping)
        for source in (holder.get("context"), (holder.get("config") or {}).get("configurable"))
    ]
    return sorted(
        {
            key
            for source in sources
            if isinstance(source, Mapping)
            for key in source
            if key in DEPLOYMENT_SETTINGS
        }
    )


@auth.on
async def private_to_owner(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType | None:
    """Refuse deployment settings from callers; make threads, runs, crons and user-made assistants private,
    their `owner` set here and never by a caller."""
    if isinstance(value, Mapping) and (refused := refused_settings(value)):
        raise _refuse(
            403,
            f"{', '.join(refused)}: deployment settings cannot be set by a run, an assistant or a "
            f"cron; a run's context may set only {', '.join(RUN_SETTINGS)}",
        )
    if is_operator(ctx.user):
        return None
    if ctx.resource == "assistants" and ctx.action in ("read", "search"):
        return None  # the graphs' assistants are shared; what a user makes is theirs alone (below)
    if ctx.resource == "store":
        _own_namespace(ctx, value)
        return None
    owner = {"owner": ctx.user.identity}
    if isinstance(value, dict):
        for where, metadata in _metadata_of(value):
            if metadata.get("owner", ctx.user.identity) != ctx.user.identity:
                raise _refuse(403, f"{where}.owner: the owner is set by the server, never by a request")
        if ctx.action in ("create", "create_run"):
            value.setdefault("metadata", {}).update(owner)
    return owner


def _metadata_of(value: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The metadata a request writes: its own, and a cron's runs' (in its payload)."""
    payload = value.get("payload")
    found = [("metadata", value.get("metadata"))]
    if isinstance(payload, Mapping):
        found.append(("payload.metadata", payload.get("metadata")))
    return [(where, metadata) for where, metadata in found if isinstance(metadata, Mapping)]


def _own_namespace(ctx: Auth.types.AuthContext, value: Any) -> None:
    namespace = tuple(value.get("namespace") or ()) if isinstance(value, Mapping) else ()
    if not namespace or namespace[0] != ctx.user.identity:
        raise _refuse(403, "a user may use only the store namespace that starts with their own id")
