"""The retrieval tools over the Model Context Protocol: `agent-retrieval mcp`, for Claude Desktop, IDEs and
any MCP client (or `langchain-mcp-adapters`).

The tools are the LangChain tools themselves (tools.py): the same names, descriptions, argument schemas,
bounds and error messages, so there is one definition of each. A call answers with the text the model reads
and the full result as structured content; a bad argument, a store failure or a provider error comes back
as a tool error, never a traceback, and every word of it passes the redactor, as a graph's output does.
`index_document` is offered only when the operator enables it.

Over stdio the caller is the person who started the server: the operator, with the operator's settings.
Over streamable HTTP the trust boundary is the LangGraph server's (server/auth.py): each request carries a
signed-in user's Supabase access token, and the call runs in that user's tenant (on Supabase as that user,
under row-level security); a request without a valid token is refused before it reaches a tool. Callers set
nothing but the tools' own arguments. AGENT_RETRIEVAL_AUTH=off trusts every caller as the operator, and is
accepted only on a loopback address, where the SDK's DNS-rebinding checks also hold.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from langchain_core.messages import ToolMessage
from langgraph_sdk import Auth
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from agent_retrieval.context import Context, ServerSettings
from agent_retrieval.core.redaction import redact, redact_value
from agent_retrieval.errors import AgentRetrievalError, ConfigError
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.server.auth import MAX_REQUEST_BYTES, Operator, is_loopback, narrowed, signed_in_user
from agent_retrieval.server.graph_parts import GraphParts
from agent_retrieval.tools import TOOLS

log = logging.getLogger(__name__)

READ_TOOLS = ("document_retriever", "chunk_retriever", "similarity_search")
WRITE_TOOL = "index_document"
USER_KEY = "agent_retrieval.user"  # where an HTTP request's verified user waits for the tool call
LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")


def served_tools(writes: bool) -> tuple[str, ...]:
    """The tools a server offers: the read tools, and index_document when the operator enables writes."""
    return (*READ_TOOLS, WRITE_TOOL) if writes else READ_TOOLS


def build_server(
    context: Context, *, writes: bool = False, retrieval: Retrieval | None = None
) -> Server[Any, Any]:
    """An MCP server (the SDK's low-level `Server`) offering the read tools, and `index_document` when
    `writes`. A call made by the operator uses `retrieval` (one for the process when not given); a signed-in
    user's call, one opened for the user's tenant and closed after it."""
    names = served_tools(writes)
    server: Server[Any, Any] = Server("agent-retrieval")
    shared = GraphParts(retrieval or Retrieval(context))

    @server.list_tools()  # type: ignore[no-untyped-call, untyped-decorator]
    async def list_tools() -> list[types.Tool]:
        return [_declared(name) for name in names]

    # The tools validate their arguments themselves, with the messages the LangChain tools give.
    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        if name not in names:
            return _error(f"there is no tool {name[:80]!r} here: the tools are {', '.join(names)}")
        try:
            request = server.request_context.request
            # Over stdio (no request) the caller started the server; over HTTP, the signed-in user.
            if request is None or context.server.server_auth == "off":
                user: Any = Operator()
            else:
                user = request.scope.get(USER_KEY)
            if user is None:
                return _error("this call carries no signed-in user: the server refuses it")
            caller = narrowed(context, user)
            parts = shared if caller is context else GraphParts()
            async with parts.open_retrieval(caller, writes=name == WRITE_TOOL) as opened:
                message = await TOOLS[name](retrieval=opened).arun(arguments, tool_call_id=name)
        except AgentRetrievalError as error:
            return _error(str(error))
        except Exception as error:  # a tool's own errors are messages already: this is anything else
            log.error("the %s call failed: %s", name, redact(f"{type(error).__name__}: {error}"))
            return _error(f"the {name} call failed ({type(error).__name__}); the server's log says more")
        return _result(message)

    return server


def _declared(name: str) -> types.Tool:
    """A tool as MCP lists it, from the LangChain tool's own declaration."""
    fields = TOOLS[name].model_fields
    schema = fields["args_schema"].default.model_json_schema()
    read_only = name != WRITE_TOOL
    return types.Tool(
        name=name,
        description=fields["description"].default,
        inputSchema=schema,
        annotations=types.ToolAnnotations(readOnlyHint=read_only, openWorldHint=False),
    )


def _result(message: ToolMessage) -> types.CallToolResult:
    text = redact(message.text)
    artifact = redact_value(message.artifact) if isinstance(message.artifact, dict) else None
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structuredContent=artifact,
        isError=message.status == "error",
    )


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=redact(message))], isError=True)


async def serve_stdio(context: Context, *, writes: bool = False) -> None:
    """Serve over stdin/stdout until the client closes them: the operator's own server."""
    with Retrieval(context) as retrieval:
        server = build_server(context, writes=writes, retrieval=retrieval)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


def http_app(
    context: Context, *, host: str, writes: bool = False, retrieval: Retrieval | None = None
) -> Starlette:
    """The streamable HTTP endpoint at /mcp, as an ASGI app, behind the access-token check (unless the
    operator turned auth off, which only a loopback `host` accepts)."""
    loopback = host == "localhost" or is_loopback(host.strip("[]"))
    settings = context.server
    if settings.server_auth == "off" and not loopback:
        raise ConfigError(
            f"AGENT_RETRIEVAL_AUTH=off trusts every caller as the operator: serve on a loopback address "
            f"(127.0.0.1), not {host!r}, or keep auth on"
        )
    if settings.server_auth != "off" and not (
        settings.token_issuer and (settings.supabase_jwt_secret or settings.supabase_url)
    ):
        raise ConfigError(
            "serving signed-in users needs their tokens' issuer and key: set SUPABASE_URL (and "
            "SUPABASE_JWT_SECRET for HS256 tokens), or AGENT_RETRIEVAL_AUTH=off on a loopback address"
        )
    manager = StreamableHTTPSessionManager(
        app=build_server(context, writes=writes, retrieval=retrieval),
        stateless=True,  # each request is its own session: the user is the request's, never a session's
        json_response=True,
        max_request_body_size=MAX_REQUEST_BYTES,
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=loopback,
            allowed_hosts=list(LOOPBACK_HOSTS),
            allowed_origins=[f"http://{h}" for h in LOOPBACK_HOSTS],
        ),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        async with manager.run():
            yield

    endpoint = _SignedIn(manager.handle_request, context.server)
    return Starlette(routes=[Mount("/mcp", app=endpoint)], lifespan=lifespan)


class _SignedIn:
    """ASGI: a request goes on with its verified user (kept in its scope for the tool call), or is refused
    with 401/403 and the reason; the operator's own callers when auth is off. A GET is refused (405)."""

    def __init__(self, app: ASGIApp, settings: ServerSettings):
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            # A GET opens an event stream for messages a server sends unasked; a stateless server sends none,
            # and each stream held open is a connection and a file descriptor nothing would bound.
            refusal = JSONResponse(
                {"error": "this MCP server is stateless and offers no event stream: POST each request"},
                status_code=405,
                headers={"Allow": "POST"},
            )
            await refusal(scope, receive, send)
            return
        if scope["type"] == "http" and self.settings.server_auth != "off":
            headers = dict(scope.get("headers") or [])
            authorization = headers.get(b"authorization", b"").decode("latin-1")
            try:
                scope[USER_KEY] = await signed_in_user(authorization, self.settings)
            except Auth.exceptions.HTTPException as refused:
                challenge = {"WWW-Authenticate": 'Bearer realm="agent-retrieval"'}
                response = JSONResponse(
                    {"error": refused.detail},
                    status_code=refused.status_code,
                    headers=challenge if refused.status_code == 401 else None,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def serve_http(context: Context, *, host: str = "127.0.0.1", port: int = 8765, writes: bool = False) -> None:
    """Serve the streamable HTTP endpoint at http://host:port/mcp until interrupted."""
    with Retrieval(context) as retrieval:
        app = http_app(context, host=host, writes=writes, retrieval=retrieval)
        uvicorn.run(app, host=host, port=port, log_level="warning")
