"""A local HTTP server speaking the OpenAI (embeddings, chat completions) and Voyage (embeddings) API shapes.

The real SDKs (openai through langchain-openai, voyageai) talk to it over real HTTP, so tests exercise
their request building, retries, timeouts and response parsing without network access:

    with FakeAPI() as api:
        Context(openai_base_url=api.openai_url, ...)   # http://127.0.0.1:PORT/openai/v1
        Context(voyage_base_url=api.voyage_url, ...)   # http://127.0.0.1:PORT/voyage/v1
        api.fail_next(status=429, times=1, retry_after=0)
        ...
        api.requests_to("embeddings")                  # [Recorded(path, body, headers), ...]

Vectors are deterministic in the text (`FakeAPI.vector`), so tests can compare directions. Faults are
queued per endpoint and consumed in order by the matching requests; every request, failed or not, is
recorded before any fault applies.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import numpy as np

DIM = 8
DEFAULT_CHAT_REPLY = (
    "Estate agents must disclose in writing any referral fee or commission paid to them by a third party.\n\n"
    "A payment from a third party is a personal interest that must be declared to the client promptly."
)


class Recorded(NamedTuple):
    path: str
    body: Any  # the parsed JSON body, or None when it was not JSON
    headers: dict[str, str]  # lower-case names


@dataclass
class _Fault:
    endpoint: str | None  # "embeddings", "chat/completions", or None for any
    api: str | None  # "openai", "voyage", or None for either
    times: int | None  # None: every matching request from now on
    status: int | None = None
    retry_after: float | None = None
    retry_after_ms: float | None = None
    kind: str | None = None  # "malformed_json", "wrong_dimension", "empty_data"
    delay: float = 0.0

    def matches(self, api: str, endpoint: str) -> bool:
        return (self.times is None or self.times > 0) and self.endpoint in (None, endpoint) \
            and self.api in (None, api)


class FakeAPI:
    """The server; use as a context manager (or call start/stop). Thread-safe."""

    def __init__(self, dim: int = DIM, chat_reply: str = DEFAULT_CHAT_REPLY):
        self.dim = dim
        self.chat_reply = chat_reply
        # "auto": base64 when the body asks for it (both SDKs do by default); "float": always float lists,
        # like compatible servers (Ollama, vLLM) that ignore encoding_format
        self.encoding = "auto"
        self.requests: list[Recorded] = []
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
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fakeapi", daemon=True)
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

    def fail_next(self, status: int = 500, *, times: int | None = 1, retry_after: float | None = None,
                  retry_after_ms: float | None = None, endpoint: str | None = None,
                  api: str | None = None, delay: float = 0.0) -> None:
        """The next `times` matching requests (None: all of them) get HTTP `status` with an error body."""
        self._add(_Fault(endpoint, api, times, status=status, retry_after=retry_after,
                         retry_after_ms=retry_after_ms, delay=delay))

    def malform_next(self, kind: str, *, times: int | None = 1, endpoint: str | None = None,
                     api: str | None = None) -> None:
        """The next matching responses are 200 but unusable: malformed_json, wrong_dimension, empty_data."""
        if kind not in ("malformed_json", "wrong_dimension", "empty_data"):
            raise ValueError(f"unknown kind {kind!r}")
        self._add(_Fault(endpoint, api, times, kind=kind))

    def delay_next(self, seconds: float, *, times: int | None = 1, endpoint: str | None = None,
                   api: str | None = None) -> None:
        """The next matching requests wait `seconds` (interrupted by stop) before a normal answer."""
        self._add(_Fault(endpoint, api, times, delay=seconds))

    def _add(self, fault: _Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def _take_fault(self, api: str, endpoint: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(api, endpoint):
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
            return [r for r in self.requests if r.path.rstrip("/").endswith("/" + endpoint)
                    and (api is None or r.path.startswith(f"/{api}/"))]

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


class _Handler(BaseHTTPRequestHandler):
    api: FakeAPI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence the default stderr log
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = self.path.split("?", 1)[0]
        self.api._record(Recorded(path, body, {k.lower(): v for k, v in self.headers.items()}))

        api = "openai" if path.startswith("/openai/") else "voyage" if path.startswith("/voyage/") else ""
        endpoint = ("chat/completions" if path.endswith("/chat/completions")
                    else "embeddings" if path.endswith("/embeddings") else "")
        if not api or not endpoint or (api == "voyage" and endpoint != "embeddings"):
            return self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
        if not isinstance(body, dict):
            return self._error(api, 400, "the body must be a JSON object")

        fault = self.api._take_fault(api, endpoint)
        if fault is not None and fault.delay:
            if self.api._stopping.wait(fault.delay):
                return
        if fault is not None and fault.status is not None:
            headers = {}
            if fault.retry_after is not None:
                headers["Retry-After"] = f"{fault.retry_after:g}"
            if fault.retry_after_ms is not None:
                headers["retry-after-ms"] = f"{fault.retry_after_ms:g}"
            return self._error(api, fault.status, f"injected HTTP {fault.status}", headers)
        if fault is not None and fault.kind == "malformed_json":
            return self._send_raw(200, b'{"object": "list", "data": [', "application/json")

        if endpoint == "chat/completions":
            return self._send(200, self._chat(body))
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
        data = [{"object": "embedding", "index": i,
                 "embedding": (base64.b64encode(v.astype("<f4").tobytes()).decode() if as_base64
                               else [float(x) for x in v])}
                for i, v in enumerate(vectors)]
        tokens = sum(len(t.split()) for t in texts)
        if api == "openai":
            usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        else:
            usage = {"total_tokens": tokens}
        self._send(200, {"object": "list", "data": data, "model": body.get("model", ""), "usage": usage})

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-fake{len(self.api.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": self.api.chat_reply}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
        }

    def _error(self, api: str, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        if api == "voyage":
            payload: dict[str, Any] = {"detail": message}
        else:
            payload = {"error": {"message": message, "type": "fake_error", "param": None, "code": None}}
        self._send(status, payload, headers)

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(payload).encode(), "application/json", headers)

    def _send_raw(self, status: int, data: bytes, content_type: str,
                  headers: dict[str, str] | None = None) -> None:
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
