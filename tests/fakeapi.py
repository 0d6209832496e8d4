"""A local HTTP server speaking the OpenAI (embeddings, chat completions) and Voyage (embeddings, rerank) API
shapes.

The real SDKs (openai through langchain-openai, voyageai) talk to it over real HTTP, so tests exercise
their request building, retries, timeouts and response parsing without network access:

    with FakeAPI() as api:
        Context(openai_base_url=api.openai_url, ...)   # http://127.0.0.1:PORT/openai/v1
        Context(voyage_base_url=api.voyage_url, ...)   # http://127.0.0.1:PORT/voyage/v1
        api.fail_next(status=429, times=1, retry_after=0)
        ...
        api.requests_to("embeddings")                  # [Recorded(path, body, headers), ...]

Chat replies are the fixed `chat_reply` unless a script decides them from each request's parsed body:
`FakeAPI(chat=agent_script)` or `api.script_chat(fn)`, where `fn(body)` returns a string (the content),
{"content": "..."}, or {"tool_calls": [{"name": ..., "arguments": {...}}]}. `agent_script` plays a
plausible agent for the graphs: query plans, document_retriever then chunk_retriever, cited answers, SQL.
Requests with "stream": true are answered as server-sent events, as OpenAI does.

Vectors are deterministic in the text (`FakeAPI.vector`), so tests can compare directions. Faults are
queued per endpoint and consumed in order by the matching requests; every request, failed or not, is
recorded before any fault applies.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import numpy as np

DIM = 8
DEFAULT_CHAT_REPLY = (
    "Estate agents must disclose in writing any referral fee or commission paid to them by a third party.\n\n"
    "A payment from a third party is a personal interest that must be declared to the client promptly."
)


ChatScript = Callable[[dict[str, Any]], "str | dict[str, Any]"]


class Recorded(NamedTuple):
    path: str
    body: Any  # the parsed JSON body, or None when it was not JSON
    headers: dict[str, str]  # lower-case names


@dataclass
class _Fault:
    endpoint: str | None  # "embeddings", "chat/completions", "rerank", or None for any
    api: str | None  # "openai", "voyage", or None for either
    times: int | None  # None: every matching request from now on
    status: int | None = None
    retry_after: float | None = None
    retry_after_ms: float | None = None
    kind: str | None = None  # "malformed_json", "wrong_dimension", "empty_data"
    delay: float = 0.0
    batches_only: bool = False  # only requests embedding more than one text (an ingest's, not a query's)

    def matches(self, api: str, endpoint: str, texts: int) -> bool:
        return (
            (self.times is None or self.times > 0)
            and self.endpoint in (None, endpoint)
            and self.api in (None, api)
            and (texts > 1 or not self.batches_only)
        )


class FakeAPI:
    """The server; use as a context manager (or call start/stop). Thread-safe."""

    def __init__(self, dim: int = DIM, chat_reply: str = DEFAULT_CHAT_REPLY, chat: ChatScript | None = None):
        self.dim = dim
        self.chat_reply = chat_reply
        self.chat_script = chat
        self.script_errors: list[str] = []  # a script that raised answers HTTP 400; why is kept here
        # "auto": base64 when the body asks for it (both SDKs do by default); "float": always float lists,
        # like compatible servers (Ollama, vLLM) that ignore encoding_format
        self.encoding = "auto"
        self.requests: list[Recorded] = []
        # the most requests to an endpoint answered at the same time ("embeddings batches": of several texts)
        self.peak: dict[str, int] = {}
        self._active: dict[str, int] = {}
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> FakeAPI:
        handler = type("Handler", (_Handler,), {"api": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False  # a handler sleeping in a delay must not hold up teardown
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fakeapi", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in a delay
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeAPI:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "the server is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_url(self) -> str:
        return f"{self.url}/openai/v1"

    @property
    def voyage_url(self) -> str:
        return f"{self.url}/voyage/v1"

    # --- programming faults --------------------------------------------------------------------

    def fail_next(
        self,
        status: int = 500,
        *,
        times: int | None = 1,
        retry_after: float | None = None,
        retry_after_ms: float | None = None,
        endpoint: str | None = None,
        api: str | None = None,
        delay: float = 0.0,
    ) -> None:
        """The next `times` matching requests (None: all of them) get HTTP `status` with an error body."""
        self._add(
            _Fault(
                endpoint,
                api,
                times,
                status=status,
                retry_after=retry_after,
                retry_after_ms=retry_after_ms,
                delay=delay,
            )
        )

    def malform_next(
        self, kind: str, *, times: int | None = 1, endpoint: str | None = None, api: str | None = None
    ) -> None:
        """The next matching responses are 200 but unusable: malformed_json, wrong_dimension, empty_data."""
        if kind not in ("malformed_json", "wrong_dimension", "empty_data"):
            raise ValueError(f"unknown kind {kind!r}")
        self._add(_Fault(endpoint, api, times, kind=kind))

    def delay_next(
        self,
        seconds: float,
        *,
        times: int | None = 1,
        endpoint: str | None = None,
        api: str | None = None,
        batches_only: bool = False,
    ) -> None:
        """The next matching requests wait `seconds` (interrupted by stop) before a normal answer;
        `batches_only`: only embedding requests of more than one text."""
        self._add(_Fault(endpoint, api, times, delay=seconds, batches_only=batches_only))

    def clear(self) -> None:
        """Forget the recorded requests and script errors (a server shared by several tests)."""
        with self._lock:
            self.requests.clear()
            self.script_errors.clear()
            self.peak.clear()

    def heal(self) -> None:
        """Drop every fault still programmed (a module's server shared by several tests)."""
        with self._lock:
            self._faults.clear()

    @contextlib.contextmanager
    def _handling(self, endpoint: str) -> Iterator[None]:
        with self._lock:
            self._active[endpoint] = self._active.get(endpoint, 0) + 1
            self.peak[endpoint] = max(self.peak.get(endpoint, 0), self._active[endpoint])
        try:
            yield
        finally:
            with self._lock:
                self._active[endpoint] -= 1

    def script_chat(self, script: ChatScript | None) -> None:
        """Decide each chat reply with `script(body)` from now on (None: the fixed `chat_reply` again)."""
        self.chat_script = script

    def _add(self, fault: _Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def _take_fault(self, api: str, endpoint: str, texts: int = 1) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(api, endpoint, texts):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    # --- what it answers -----------------------------------------------------------------------

    def vector(self, text: str) -> np.ndarray:
        """The deterministic float32 vector the server returns for `text` (not unit length)."""
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        return (np.random.default_rng(seed).standard_normal(self.dim) + 0.1).astype(np.float32)

    def unit_vector(self, text: str) -> np.ndarray:
        v = self.vector(text)
        return v / np.linalg.norm(v)

    def requests_to(self, endpoint: str, api: str | None = None) -> list[Recorded]:
        """Recorded requests whose path ends with `endpoint` (and starts with /openai or /voyage)."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.path.rstrip("/").endswith("/" + endpoint)
                and (api is None or r.path.startswith(f"/{api}/"))
            ]

    def _record(self, recorded: Recorded) -> None:
        with self._lock:
            self.requests.append(recorded)


def _texts(raw: Any) -> list[str]:
    """The texts of an embeddings `input`: a string, strings, a token array, or token arrays."""
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw):
        return [json.dumps(raw)]
    if isinstance(raw, list):
        return [item if isinstance(item, str) else json.dumps(item) for item in raw]
    raise ValueError("input must be a string or a list")


def _arguments(value: Any) -> str:
    """Tool-call arguments as OpenAI sends them: a JSON string."""
    return value if isinstance(value, str) else json.dumps(value)


class _Handler(BaseHTTPRequestHandler):
    api: FakeAPI
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = (
        True  # headers and body go out in two writes: without it each reply stalls ~40 ms
    )

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = self.path.split("?", 1)[0]
        self.api._record(Recorded(path, body, {k.lower(): v for k, v in self.headers.items()}))

        api = "openai" if path.startswith("/openai/") else "voyage" if path.startswith("/voyage/") else ""
        endpoint = (
            "chat/completions"
            if path.endswith("/chat/completions")
            else "embeddings"
            if path.endswith("/embeddings")
            else "rerank"
            if path.endswith("/rerank") and api == "voyage"
            else ""
        )
        if not api or not endpoint or (api == "voyage" and endpoint == "chat/completions"):
            return self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
        if not isinstance(body, dict):
            return self._error(api, 400, "the body must be a JSON object")
        inputs = body.get("input")
        batch = isinstance(inputs, list) and len(inputs) > 1
        with self.api._handling(f"{endpoint} batches" if batch else endpoint):
            self._answer(api, endpoint, body)

    def _answer(self, api: str, endpoint: str, body: dict[str, Any]) -> None:
        inputs = body.get("input")
        fault = self.api._take_fault(api, endpoint, len(inputs) if isinstance(inputs, list) else 1)
        if fault is not None and fault.delay and self.api._stopping.wait(fault.delay):
            return
        if fault is not None and fault.status is not None:
            headers = {}
            if fault.retry_after is not None:
                headers["Retry-After"] = f"{fault.retry_after:g}"
            if fault.retry_after_ms is not None:
                headers["retry-after-ms"] = f"{fault.retry_after_ms:g}"
            message = f"injected HTTP {fault.status}"
            if fault.status == 401:  # as providers do, the error names the key it refused: a leak to guard
                message = f"Incorrect API key provided: {self.headers.get('Authorization', '').split()[-1:]}"
            return self._error(api, fault.status, message, headers)
        if fault is not None and fault.kind == "malformed_json":
            return self._send_raw(200, b'{"object": "list", "data": [', "application/json")

        if endpoint == "chat/completions":
            try:
                message, finish = self._reply(body)
            except Exception as error:  # a broken script must show up in the test, not hang it in retries
                self.api.script_errors.append(f"{type(error).__name__}: {error}")
                return self._error(api, 400, f"chat script failed: {type(error).__name__}: {error}")
            if body.get("stream"):
                return self._stream(body, message, finish)
            return self._send(200, self._completion(body, message, finish))
        if endpoint == "rerank":
            return self._rerank(body)
        try:
            texts = _texts(body.get("input"))
        except ValueError as error:
            return self._error(api, 400, str(error))
        vectors = [self.api.vector(t) for t in texts]
        if fault is not None and fault.kind == "wrong_dimension" and vectors:
            vectors[-1] = vectors[-1][:-1]
        if fault is not None and fault.kind == "empty_data":
            vectors = []
        as_base64 = body.get("encoding_format") == "base64" and self.api.encoding == "auto"
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": (
                    base64.b64encode(v.astype("<f4").tobytes()).decode()
                    if as_base64
                    else [float(x) for x in v]
                ),
            }
            for i, v in enumerate(vectors)
        ]
        tokens = sum(len(t.split()) for t in texts)
        if api == "openai":
            usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        else:
            usage = {"total_tokens": tokens}
        self._send(200, {"object": "list", "data": data, "model": body.get("model", ""), "usage": usage})

    def _rerank(self, body: dict[str, Any]) -> None:
        """Voyage's rerank reply: the documents by the share of the query's words each holds (a stand-in
        for a cross-encoder that tests can predict), best first, cut to top_k."""
        query, documents = body.get("query"), body.get("documents")
        if not isinstance(query, str) or not isinstance(documents, list) or not documents:
            return self._error("voyage", 400, "rerank needs a query and a non-empty list of documents")
        words = set(re.findall(r"\w+", query.lower()))
        scores = [
            len(words & set(re.findall(r"\w+", str(d).lower()))) / max(len(words), 1) for d in documents
        ]
        order = sorted(range(len(documents)), key=lambda i: (-scores[i], i))[: body.get("top_k") or None]
        data = [{"index": i, "relevance_score": scores[i]} for i in order]
        tokens = sum(len(str(d).split()) for d in documents)
        self._send(
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model", ""),
                "usage": {"total_tokens": tokens},
            },
        )

    def _reply(self, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The assistant message for a request (the script's, or the fixed reply) and its finish_reason."""
        reply: Any = self.api.chat_script(body) if self.api.chat_script else self.api.chat_reply
        if isinstance(reply, str):
            reply = {"content": reply}
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
        calls = reply.get("tool_calls") or []
        if not calls:
            return {**message, "content": message["content"] or ""}, "stop"
        message["tool_calls"] = [
            {
                "id": call.get("id") or f"call_{len(self.api.requests)}_{n}",
                "type": "function",
                "function": {"name": call["name"], "arguments": _arguments(call["arguments"])},
            }
            for n, call in enumerate(calls)
        ]
        return message, "tool_calls"

    def _completion(self, body: dict[str, Any], message: dict[str, Any], finish: str) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-fake{len(self.api.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "finish_reason": finish, "logprobs": None, "message": message}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
        }

    def _stream(self, body: dict[str, Any], message: dict[str, Any], finish: str) -> None:
        """The reply as chat.completion.chunk events: role and content, tool calls, finish, usage, [DONE]."""
        base = {
            "id": f"chatcmpl-fake{len(self.api.requests)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
        }
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": n, **call} for n, call in enumerate(message["tool_calls"])]
        events = [
            {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        ]
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(
                {
                    **base,
                    "choices": [],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
                }
            )
        data = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        self._send_raw(200, data.encode(), "text/event-stream")

    def _error(self, api: str, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        if api == "voyage":
            payload: dict[str, Any] = {"detail": message}
        else:
            payload = {"error": {"message": message, "type": "fake_error", "param": None, "code": None}}
        self._send(status, payload, headers)

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(payload).encode(), "application/json", headers)

    def _send_raw(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)


# --- a scripted agent ---------------------------------------------------------------------------

CHUNK_ID = re.compile(r"(?<![\w#])[\w][\w.\-/]*#\d+\b")  # chunk ids are "<document id>#<n>"
FIELD_ID = re.compile(r"(?<![\w])id=[\"']?([^\s|,\"'<>]+)")  # "id=..." in tool output, <passage id="...">
HYDE = re.compile(r"\bexactly (\d+)\b[^.\n]*\bparagraphs\b")  # prompts/hyde.md asks for {num} paragraphs
TABLE = re.compile(r"create\s+table\s+(?:if\s+not\s+exists\s+)?[\"`\[]?(\w+)", re.IGNORECASE)


def agent_script(body: dict[str, Any]) -> dict[str, Any]:
    """A plausible model for the graphs, decided from the request alone.

    Structured output (response_format json_schema, or a forced tool call) gets a plan for QueryPlan and a
    minimal valid instance otherwise; offered retrieval tools are called document_retriever first, then
    chunk_retriever with the document ids it returned; HyDE gets the paragraphs it asks for; SQL requests
    get a SELECT over a table the prompt defines; anything else is a short answer citing the first chunk
    id outside the system prompt.
    """
    messages = body.get("messages") or []
    question = _question(messages)
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        return {
            "content": json.dumps(
                _structured(spec.get("name", ""), spec.get("schema") or {}, question, messages)
            )
        }
    forced = _forced_tool(body)
    if forced is not None:
        name, schema = forced
        return {"tool_calls": [{"name": name, "arguments": _structured(name, schema, question, messages)}]}
    turn = _since_last_user(messages)
    results = _tool_results(turn)
    if "document_retriever" in _tool_names(body) and not results:
        return {"tool_calls": [{"name": "document_retriever", "arguments": {"query": question}}]}
    if results and results[-1][0] == "document_retriever" and "chunk_retriever" in _tool_names(body):
        ids = [i for i in FIELD_ID.findall(results[-1][1]) if "#" not in i]
        arguments: dict[str, Any] = {"query": question, **({"document_ids": ids} if ids else {})}
        return {"tool_calls": [{"name": "chunk_retriever", "arguments": arguments}]}
    if results:
        return {"content": _cited_answer(results[-1][1])}
    hyde = HYDE.search("\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system"))
    if hyde:
        count = int(hyde.group(1))
        return {"content": "\n\n".join(f"A document states this ({n + 1}): {question}" for n in range(count))}
    sql = _sql(messages)
    if sql:
        return {"content": f"```sql\n{sql}\n```"}
    return {
        "content": _cited_answer(
            "\n".join(_text(m.get("content")) for m in messages if m.get("role") != "system")
        )
    }


def _structured(name: str, schema: dict[str, Any], question: str, messages: list[dict[str, Any]]) -> Any:
    if name == "QueryPlan":
        return {
            "intent": f"find what the documents say about: {question}"[:200],
            "queries": [
                {
                    "text": question,
                    "target": "chunks",
                    "category": None,
                    "purpose": "direct",
                    "priority": 1,
                    "resolves": None,
                }
            ],
            "filters": {},
            "search_strategy": "simple",
        }
    sql = _sql(messages)
    strings = {"code": sql, "sql": sql, "query": sql or question} if sql else {"query": question}
    return example_for(schema, strings=strings)


def example_for(
    schema: dict[str, Any],
    defs: dict[str, Any] | None = None,
    name: str = "",
    strings: dict[str, str] | None = None,
) -> Any:
    """A minimal instance of a JSON schema: every property, the first choice, the smallest number."""
    if defs is None:
        defs = schema.get("$defs") or schema.get("definitions") or {}
    strings = strings or {}

    def walk(node: dict[str, Any], key: str = "") -> Any:
        if "$ref" in node:
            return walk(defs[node["$ref"].rsplit("/", 1)[-1]], key)
        if "const" in node:
            return node["const"]
        if node.get("enum"):
            return node["enum"][0]
        for combinator in ("anyOf", "oneOf", "allOf"):
            if node.get(combinator):
                options = [o for o in node[combinator] if o.get("type") != "null"] or node[combinator]
                return walk(options[0], key)
        kind = node.get("type", "object")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object":
            return {k: walk(v, k) for k, v in (node.get("properties") or {}).items()}
        if kind == "array":
            return [walk(node.get("items") or {}, key) for _ in range(max(1, node.get("minItems", 1)))]
        if kind == "string":
            return strings.get(key, "example")
        if kind == "integer":
            return int(node.get("minimum", 1))
        if kind == "number":
            return float(node.get("minimum", 0))
        return False if kind == "boolean" else None

    return walk(schema, name)


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return ""


def _question(messages: list[dict[str, Any]]) -> str:
    """The last user message, without the <request> tags the planner wraps it in."""
    text = next((_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    inner = re.search(r"<request>\s*(.*?)\s*</request>", text, re.DOTALL)
    return " ".join((inner.group(1) if inner else text).split())


def _since_last_user(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    last = max((n for n, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    return messages[last + 1 :]


def _tool_results(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(tool name, content) of each tool message; OpenAI's tool messages name only the call id."""
    names = {
        call.get("id"): (call.get("function") or {}).get("name", "")
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    }
    return [
        (names.get(m.get("tool_call_id"), ""), _text(m.get("content")))
        for m in messages
        if m.get("role") == "tool"
    ]


def _tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or [] if t.get("type") == "function"]


def _forced_tool(body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(name, parameters) of the tool the request forces (how function-calling structured output asks)."""
    choice = body.get("tool_choice")
    schemas = {
        t["function"]["name"]: t["function"].get("parameters") or {}
        for t in body.get("tools") or []
        if t.get("type") == "function"
    }
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") or choice.get("name")
        return (name, schemas.get(name, {})) if name else None
    if choice in ("required", "any") and len(schemas) == 1:
        return next(iter(schemas.items()))
    return None


def _cited_answer(text: str) -> str:
    ids = CHUNK_ID.findall(text)
    if not ids:
        return "The documents I found do not answer this."
    return f"The documents answer this in the passage cited here [{ids[0]}]."


def _sql(messages: list[dict[str, Any]]) -> str | None:
    """A SELECT over the first table the prompt defines, when the prompt asks for SQL."""
    prompt = "\n".join(_text(m.get("content")) for m in messages)
    tables = TABLE.findall(prompt)
    if not tables or "sql" not in prompt.lower():
        return None
    return f"SELECT * FROM {tables[0]} LIMIT 10;"
