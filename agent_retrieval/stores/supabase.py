"""The Supabase store: the SQL functions of stores/sql/ called by RPC through supabase-py and PostgREST.

With the service role key it reads and writes everything (ingestion); with the anon key and a user's
access token it reads what row-level security lets that user see.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import jwt
import numpy as np

from agent_retrieval.context import STORE_CACHE_MB
from agent_retrieval.core.process import PROCESS, ProcessState
from agent_retrieval.core.redaction import check_secret, protect
from agent_retrieval.errors import ConfigError
from agent_retrieval.stores.base import Failure
from agent_retrieval.stores.rpc import DEFAULT_SCHEMA, CallError, Json, RPCStore, sqlstate_failure

_GATEWAY_STATUSES = {502, 503, 504}  # a gateway's word for the service behind it being down or restarting
# PostgREST's codes for "cannot reach the database", and those statuses where an error carries one as its code
_UNREACHABLE_CODES = {"PGRST000", "PGRST001", "PGRST002", "PGRST003", *map(str, _GATEWAY_STATUSES)}


def _failure(code: str) -> Failure | None:
    """A PostgREST error code, or the SQLSTATE it passes on from the database, in the stores' vocabulary."""
    return Failure.UNREACHABLE if code in _UNREACHABLE_CODES else sqlstate_failure(code)


class _GatewayError(Exception):
    """The API gateway answered for the service behind it (PostgREST down, restarting or overloaded).
    Its body carries no PostgREST error code, so postgrest-py's APIError would lose the status saying so."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _gateway_error(response: Any) -> _GatewayError | None:
    if response.status_code not in _GATEWAY_STATUSES:
        return None
    try:
        body = response.json()
    except ValueError:
        body = None
    body = body if isinstance(body, dict) else {}
    if body.get("code"):
        return None  # PostgREST's own answer (PGRST001: no database ...): APIError keeps its code
    return _GatewayError(response.status_code, str(body.get("message") or response.reason_phrase))


class _UnsendableHeader(Exception):
    """A request header holds a character no HTTP header may carry (a key or token changed after it was
    checked). Raised before the request is handed to the transport, whose error and DEBUG log would quote
    the header, secret and all; so it carries the header's name only."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def _check_request(request: Any) -> None:
    """httpx request hook (both clients): refuse a header the transport would refuse, naming it only."""
    for name, value in request.headers.raw:
        if any((byte < 0x20 and byte != 0x09) or byte == 0x7F for byte in value):
            raise _UnsendableHeader(name.decode("ascii", "replace"))


async def _acheck_request(request: Any) -> None:
    _check_request(request)


def _check_response(response: Any) -> None:
    """httpx response hook of the sync client."""
    response.read()
    if error := _gateway_error(response):
        raise error


async def _acheck_response(response: Any) -> None:
    """httpx response hook of the async client."""
    await response.aread()
    if error := _gateway_error(response):
        raise error


class SupabaseStore(RPCStore):
    """Documents and chunks in a Supabase project, searched by RPC.

    Run the SQL of `agent-retrieval db init --print` once in the SQL editor (or `db init` with the
    database DSN) and add the schema to the exposed schemas (Settings > API). Clients are made on
    first use: one sync client, and one async client per event loop.
    """

    backend = "supabase"
    unreachable_advice = (
        "Check that the project is running (a paused project is restored from the Supabase "
        "dashboard) and that SUPABASE_URL is right"
    )

    def __init__(
        self,
        url: str,
        key: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        tenant: str | None = None,
        user_token: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        cache_mb: int = STORE_CACHE_MB,
        process: ProcessState = PROCESS,
    ):
        super().__init__(
            schema=schema,
            tenant=tenant,
            max_retries=max_retries,
            timeout=timeout,
            cache_mb=cache_mb,
            process=process,
        )
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"the Supabase URL must start with https:// (got {url[:40]!r})")
        # Both travel in HTTP headers: one that cannot be sent would fail every call, with an error
        # that quotes the header (and so the secret) in full.
        key = check_secret("SUPABASE_KEY", key)
        user_token = check_secret("AGENT_RETRIEVAL_SUPABASE_USER_TOKEN", user_token) if user_token else None
        if not key:
            raise ConfigError(
                "the Supabase key is empty: set SUPABASE_KEY to the project's anon or service role key"
            )
        self.url, self._key, self._user_token = url.rstrip("/"), key, user_token
        protect(key)  # keys never reach a log, the SDKs' included
        protect(user_token or "", user_token=True)
        self._client: Any = None
        self._client_pid = 0  # the process that made the sync client
        self._async_clients: dict[asyncio.AbstractEventLoop, Any] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SupabaseStore({self.location!r})"

    @property
    def write_refusal(self) -> str | None:
        # A signed-in user's requests run as `authenticated`, and a publishable or anon key's as `anon`:
        # neither may write. The key's role claim is read unverified: the database still decides.
        if self._user_token or _key_role(self._key) in ("anon", "authenticated"):
            return self._writes_refused
        return None

    @property
    def location(self) -> str:
        return f"{self.url}#{self.schema}"

    # --- clients -------------------------------------------------------------------------------------
    def _options(self, options_type: Any, http_client: Any) -> Any:
        # A user's token makes requests run as that user (row-level security); without one, as the key's role.
        headers = {"Authorization": f"Bearer {self._user_token}"} if self._user_token else {}
        return options_type(schema=self.schema, headers=headers, httpx_client=http_client)

    def _sync_client(self) -> Any:
        with self._lock:
            if self._client is not None and self._client_pid != os.getpid():
                # A forked child's: the parent's connections are the parent's (shared, they garble replies)
                self.process.keep(self._client)
                self._client = None
            if self._client is None:
                import httpx
                from supabase import create_client
                from supabase.lib.client_options import SyncClientOptions

                http = httpx.Client(
                    timeout=self.timeout,
                    limits=httpx.Limits(max_connections=32),
                    event_hooks={"request": [_check_request], "response": [_check_response]},
                )
                self._client = create_client(self.url, self._key, self._options(SyncClientOptions, http))
                self._client_pid = os.getpid()
            return self._client

    async def _async_client(self) -> Any:
        loop = asyncio.get_running_loop()
        client = self._async_clients.get(loop)
        if client is None:
            import httpx
            from supabase import acreate_client
            from supabase.lib.client_options import AsyncClientOptions

            http = httpx.AsyncClient(
                timeout=self.timeout,
                event_hooks={"request": [_acheck_request], "response": [_acheck_response]},
            )
            client = await acreate_client(self.url, self._key, self._options(AsyncClientOptions, http))
            # Clients of loops that have ended cannot be used again; keep only live ones.
            self._async_clients = {lp: c for lp, c in self._async_clients.items() if not lp.is_closed()}
            self._async_clients[loop] = client
        return client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.postgrest.session.close()
                self._client = None
        self._async_clients.clear()

    def _statement_timeout(self) -> str:
        return "the database role's statement_timeout, set in the Supabase project"

    # --- calls ---------------------------------------------------------------------------------------
    def _send(self, function: str, params: dict[str, Any]) -> Any:
        try:
            return self._sync_client().rpc(function, _payload(params)).execute().data
        except Exception as error:
            raise _call_error(error) from None

    async def _asend(self, function: str, params: dict[str, Any]) -> Any:
        try:
            client = await self._async_client()
            return (await client.rpc(function, _payload(params)).execute()).data
        except Exception as error:
            raise _call_error(error) from None


def _payload(params: dict[str, Any]) -> dict[str, Any]:
    """Arguments as PostgREST takes them: JSON, with vectors in pgvector's text form."""
    out = {}
    for name, value in params.items():
        if isinstance(value, Json):
            value = value.value
        elif isinstance(value, np.ndarray):
            value = "[" + ",".join(f"{x:.7g}" for x in value.tolist()) + "]"
        out[name] = value
    return out


def _call_error(error: Exception) -> CallError:
    import httpx
    from postgrest import APIError

    if isinstance(error, APIError):
        code = str(error.code or "unknown")
        detail = (
            error.details if isinstance(error.details, str) or error.details is None else str(error.details)
        )
        message = error.message or "request failed"
        if code == "PGRST106":
            message = (
                f"{message}. Add the schema to the exposed schemas of the Supabase project "
                "(Settings > API > Exposed schemas)"
            )
        elif code in ("PGRST301", "PGRST302", "PGRST303", "401"):
            message = f"the Supabase key or user token was rejected ({message})"
        elif code in ("PGRST000", "PGRST001", "PGRST002", "PGRST003"):
            message = f"the API is up but cannot reach its database ({message})"
        return CallError(code, message, detail, error.hint, failure=_failure(code))
    if isinstance(error, _GatewayError):
        return CallError(
            "gateway",
            f"its gateway answered HTTP {error.status} ({error.message}): the REST "
            "service behind /rest/v1 (PostgREST) is down or restarting",
            failure=Failure.UNREACHABLE,
        )
    if isinstance(error, _UnsendableHeader | httpx.LocalProtocolError):
        # The request never left, and the same request would fail again: not retried. httpx's message
        # quotes the offending header, secret and all, so only the header's name is passed on.
        name = f"its {error.name} header" if isinstance(error, _UnsendableHeader) else "a header"
        return CallError(
            "header",
            f"the request could not be sent: {name} holds a character no HTTP header "
            "may carry (a line break, say); check SUPABASE_KEY and the user token "
            "(AGENT_RETRIEVAL_SUPABASE_USER_TOKEN)",
        )
    if isinstance(error, httpx.ReadTimeout | httpx.WriteTimeout):
        # Not retried: the request reached the API and is slow or blocked; asking again only adds waiting.
        return CallError("timeout", f"{type(error).__name__}")
    if isinstance(error, httpx.TransportError):
        return CallError("connection", f"{type(error).__name__}: {error}", failure=Failure.UNREACHABLE)
    return CallError("unknown", f"{type(error).__name__}: {error}")


def _key_role(key: str) -> str | None:
    """The role a Supabase API key acts as, where its form says: a publishable key, or a legacy JWT key's
    role claim (read, not verified); None for a secret key or one of unknown form."""
    if key.startswith("sb_publishable_"):
        return "anon"
    try:
        role = jwt.decode(key, options={"verify_signature": False}).get("role")
    except jwt.PyJWTError:
        return None
    return role if isinstance(role, str) else None
