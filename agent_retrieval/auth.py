"""Who runs the graphs on a LangGraph server, and what they may set: the `auth` named in langgraph.json.

Every request carries a signed-in user's Supabase access token (`Authorization: Bearer <token>`). It is
verified here (HS256 with SUPABASE_JWT_SECRET, or the project's JWKS for its asymmetric keys) and the run
gets that user's identity, tenant and token: on Supabase each search is made as the user, under row-level
security; on Postgres and the embedded store it reads and writes the user's tenant. Threads, runs and the
assistants users make are private to their owner. No caller may set a deployment setting (an endpoint, key,
store path or tenant) through a run's or an assistant's context.

LangGraph Studio's own requests (a developer on `langgraph dev`, or a LangSmith member on a deployment) run
as the operator, with the server's environment; `"disable_studio_auth": true` in langgraph.json turns that
off. AGENT_RETRIEVAL_AUTH=off trusts every caller as the operator: only for a server nobody else can reach.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from langgraph_sdk import Auth

from agent_retrieval.context import DEPLOYMENT_SETTINGS, RUN_SETTINGS, Context
from agent_retrieval.errors import ConfigError
from agent_retrieval.identity import tenant_of_claims

log = logging.getLogger(__name__)

OPERATOR = "operator"  # the identity of every caller when AGENT_RETRIEVAL_AUTH=off
ALGORITHMS = ("HS256", "RS256", "ES256")  # what Supabase signs access tokens with

auth = Auth()


def _refuse(status: int, detail: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=status, detail=detail)


@auth.authenticate
async def authenticate(authorization: str | None) -> dict[str, Any]:
    """The request's user, from its verified Supabase access token (or the operator, with auth off)."""
    try:
        settings = await asyncio.to_thread(Context)  # the server's environment, read as the operator set it
    except ConfigError as error:
        log.error("the server's settings are invalid: %s", error)
        raise _refuse(
            403, "the server's settings are invalid; its operator must check `agent-retrieval config`"
        ) from None
    if settings.server_auth == "off":
        return {"identity": OPERATOR, "tenant": None, "permissions": []}
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _refuse(
            401,
            "this server needs a signed-in user's Supabase access token: send the header "
            "'Authorization: Bearer <access_token>'",
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


async def _verified_claims(token: str, settings: Context) -> dict[str, Any]:
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
            key: Any = settings.supabase_jwt_secret
        else:
            if not settings.supabase_url:
                raise jwt.InvalidTokenError("the server has no SUPABASE_URL to fetch the project's keys from")
            jwks = _jwks_client(f"{settings.supabase_url.rstrip('/')}/auth/v1/.well-known/jwks.json")
            key = (await asyncio.to_thread(jwks.get_signing_key_from_jwt, token)).key
        claims = jwt.decode(
            token, key, algorithms=[algorithm], audience="authenticated", options={"require": ["exp", "sub"]}
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
    """Studio's developer (or LangSmith member), or any caller when auth is off: the server's own settings."""
    return (
        user is None
        or isinstance(user, Auth.types.StudioUser)
        or (_get(user, "identity") == OPERATOR and _get(user, "tenant") is None)
    )


def deployment_for(user: Any) -> Context:
    """The deployment settings of a server run: the environment's, narrowed to the authenticated user.

    A user this module authenticated searches in their tenant, on Supabase with their own token (so
    row-level security applies); a user of another auth handler must carry a `tenant` the same way.
    """
    settings = Context()
    if is_operator(user):
        return settings
    tenant = _get(user, "tenant")
    if not isinstance(tenant, str) or not tenant:
        raise ConfigError(
            "the run's authenticated user carries no tenant: serve the graphs with "
            "agent_retrieval.auth (langgraph.json `auth`), or give your auth handler's users a "
            "`tenant` (and `supabase_token`)"
        )
    return replace(settings, tenant_id=tenant, supabase_user_token=_get(user, "supabase_token") or "")


def _get(user: Any, key: str) -> Any:
    if isinstance(user, Mapping) or hasattr(user, "get"):
        return user.get(key)
    return getattr(user, key, None)


# --- authorization: private resources, and no deployment setting from a caller ---------------------------


def refused_settings(value: Mapping[str, Any]) -> list[str]:
    """Deployment settings a request tries to set through a context or configurable (either may carry
    settings: the server reads `configurable` as the context when no context is given)."""
    kwargs = value.get("kwargs") or {}
    sources = [
        value.get("context"),
        (value.get("config") or {}).get("configurable"),
        kwargs.get("context"),
        (kwargs.get("config") or {}).get("configurable"),
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
    """Refuse deployment settings from callers; make threads, runs and user-made assistants private."""
    if isinstance(value, Mapping) and (refused := refused_settings(value)):
        raise _refuse(
            403,
            f"{', '.join(refused)}: deployment settings cannot be set by a run or an "
            f"assistant; a run's context may set only {', '.join(RUN_SETTINGS)}",
        )
    if is_operator(ctx.user):
        return None
    if ctx.resource == "assistants" and ctx.action in ("read", "search"):
        return None  # the graphs' assistants are shared; what a user makes is theirs alone (below)
    if ctx.resource == "store":
        _own_namespace(ctx, value)
        return None
    owner = {"owner": ctx.user.identity}
    if ctx.action in ("create", "create_run") and isinstance(value, dict):
        value.setdefault("metadata", {}).update(owner)
    return owner


def _own_namespace(ctx: Auth.types.AuthContext, value: Any) -> None:
    namespace = tuple(value.get("namespace") or ()) if isinstance(value, Mapping) else ()
    if not namespace or namespace[0] != ctx.user.identity:
        raise _refuse(403, "a user may use only the store namespace that starts with their own id")
