"""The graphs served by a real `langgraph dev` (from langgraph.json), driven through langgraph-sdk.

The server is configured only by its environment, as a user's would be: the embedded SQLite store
(pre-filled with the demo corpus and schemas), OpenAI embeddings and chat pointed at tests.fakeapi
playing `agent_script`, HyDE on, and nothing that reaches the network (no LangSmith, analytics or
version check). It runs without --allow-blocking, so a blocking call in an async node fails the run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import httpx
import pytest
from dotenv import dotenv_values
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from agent_retrieval import demo
from agent_retrieval.context import Context
from agent_retrieval.embeddings import make_embedder
from agent_retrieval.ingest import ingest, load_documents
from agent_retrieval.retrieval import Retrieval
from tests.fakeapi import FakeAPI, agent_script

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0
QUESTION = "Do estate agents have to tell the seller about referral fees from third parties?"
BLOCKING = re.compile(r"BlockingError|Blocking call to|identified a synchronous blocking call")
CONTEXT_VARIABLES = {f.metadata.get("env") or f.name.upper() for f in fields(Context)}


@dataclass
class Server:
    url: str
    log: Path
    api: FakeAPI
    started_in: float

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_environment(api: FakeAPI, db_path: Path) -> dict[str, str]:
    """The machine's environment without any agent-retrieval, provider or LangSmith setting, plus ours."""
    env = {k: v for k, v in os.environ.items()
           if k not in CONTEXT_VARIABLES and not k.startswith(("LANGSMITH_", "LANGCHAIN_", "OPENAI_"))}
    env.update({
        "AGENT_RETRIEVAL_DB": str(db_path),
        "EMBEDDING_PROVIDER": "openai",
        "OPENAI_BASE_URL": api.openai_url,
        "OPENAI_API_KEY": "sk-fake-server-key",
        "USE_HYDE": "true",
        "MAX_RETRIES": "0",
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",  # the CLI otherwise posts usage analytics
        "LANGGRAPH_NO_VERSION_CHECK": "true",  # the server otherwise asks PyPI for a newer langgraph-api
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    })
    return env


def check_dotenv(env: dict[str, str]) -> None:
    """langgraph.json loads .env, whose values win over the process environment: they must not clash."""
    path = REPO / ".env"
    if not path.exists():
        return
    clashes = sorted(k for k in dotenv_values(path)
                     if k in env or k in CONTEXT_VARIABLES or k.startswith(("LANGSMITH_", "LANGCHAIN_")))
    if clashes:
        pytest.fail(f"{path} sets {', '.join(clashes)}, which `langgraph dev` would apply over this test's "
                    "settings; move the file aside to run this test")


def fill_store(api: FakeAPI, db_path: Path) -> None:
    """The demo corpus and schemas, embedded by the same OpenAI model config the server will use."""
    context = Context(db_path=str(db_path), embedding_provider="openai", openai_base_url=api.openai_url,
                      openai_api_key="sk-fake-server-key", use_hyde=False)
    embedder = make_embedder(context)
    with Retrieval(context, embedder=embedder) as retrieval:
        report = ingest(load_documents([demo.corpus_dir(), demo.schemas_dir()]), retrieval.store, embedder,
                        context, progress=False)
    assert report.written == report.documents > 0 and report.unembedded == 0


def wait_until_serving(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"langgraph dev exited with {process.returncode}:\n{log.read_text(errors='replace')}")
        try:
            if httpx.get(f"{url}/ok", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"langgraph dev did not serve within {START_TIMEOUT:g} s:\n{log.read_text(errors='replace')}")


def stop(process: subprocess.Popen) -> None:
    """Terminate the server's whole process group (uvicorn starts children), then make sure."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("langgraph-server")
    db_path, log = folder / "store.db", folder / "server.log"
    persisted = REPO / ".langgraph_api"  # where `langgraph dev` keeps threads and runs between restarts
    persisted_before = persisted.exists()
    with FakeAPI(chat=agent_script) as api, pytest.MonkeyPatch.context() as patch:
        for name in CONTEXT_VARIABLES:
            patch.delenv(name, raising=False)
        env = server_environment(api, db_path)
        check_dotenv(env)
        fill_store(api, db_path)
        api.clear()
        port = free_port()
        command = [str(Path(sys.executable).parent / "langgraph"), "dev", "--no-browser", "--no-reload",
                   "--port", str(port), "--config", "langgraph.json"]
        started = time.monotonic()
        with log.open("wb") as out:
            process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until_serving(url, process, log)
            started_in = time.monotonic() - started
            print(f"\nlanggraph dev served in {started_in:.1f} s")
            yield Server(url, log, api, started_in)
        finally:
            stop(process)
            if not persisted_before and persisted.exists():
                import shutil

                shutil.rmtree(persisted, ignore_errors=True)


@pytest.fixture
def client(server: Server) -> Iterator[SyncLangGraphClient]:
    server.api.clear()
    with get_sync_client(url=server.url) as sdk:
        yield sdk
    assert server.api.script_errors == []


def cited(text: str) -> list[str]:
    return re.findall(r"\[([^\[\]]+#\d+)\]", text)


def test_assistants_are_the_graphs_of_langgraph_json(client):
    graphs = json.loads((REPO / "langgraph.json").read_text())["graphs"]
    assistants = client.assistants.search(limit=100)
    assert {a["graph_id"] for a in assistants} == set(graphs)
    for graph_id in graphs:
        assert client.assistants.get_graph(graph_id)["nodes"], graph_id


def test_rag_answers_on_a_thread_citing_a_hit(client, server):
    thread = client.threads.create()
    out = client.runs.wait(thread["thread_id"], "rag",
                           input={"messages": [{"role": "user", "content": QUESTION}]})

    assert [(q["text"], q["purpose"]) for q in out["plan"]["queries"]] == [(QUESTION, "direct")]
    assert [s["status"] for s in out["searches"]] == ["ran"]
    assert out["searches"][0]["hyde"] == "used" and out["searches"][0]["degraded"] == []
    hit_ids = [h["id"] for h in out["hits"]]
    assert hit_ids and out["citations"] == [hit_ids[0]]
    assert cited(out["answer"]) == [hit_ids[0]]
    assert out["messages"][-1]["type"] == "ai" and out["messages"][-1]["content"] == out["answer"]
    assert out["notes"] == []

    sent = server.api.requests_to("chat/completions")
    assert any((r.body.get("response_format") or {}).get("json_schema", {}).get("name") == "QueryPlan"
               for r in sent)
    assert all(r.headers["authorization"] == "Bearer sk-fake-server-key" for r in sent)
    state = client.threads.get_state(thread["thread_id"])
    assert state["values"]["answer"] == out["answer"]


def test_rag_streams_its_answer_as_studio_does_with_the_run_context(client, server):
    """Studio streams messages, so ChatOpenAI streams too; the run's context overrides the environment."""
    answer_tokens, values = [], {}
    for part in client.runs.stream(None, "rag", input={"messages": [{"role": "user", "content": QUESTION}]},
                                   context={"answer_chunks": 2}, stream_mode=["messages-tuple", "values"]):
        if part.event == "messages":
            chunk, metadata = part.data
            if metadata.get("langgraph_node") == "answer" and chunk["type"] == "AIMessageChunk":
                answer_tokens.append(chunk["content"])  # streamed by the model, not the node's final message
        elif part.event == "values":
            values = part.data
        assert part.event != "error", part.data
    assert len(values["hits"]) == 2
    assert "".join(answer_tokens) == values["answer"] and cited(values["answer"]) == [values["hits"][0]["id"]]
    assert any(r.body.get("stream") for r in server.api.requests_to("chat/completions"))


def test_agent_calls_both_tools_then_cites_a_chunk(client):
    out = client.runs.wait(None, "agent", input={"messages": [{"role": "user", "content": QUESTION}]})

    messages = out["messages"]
    calls = [c for m in messages if m["type"] == "ai" for c in m.get("tool_calls") or []]
    tools = [m for m in messages if m["type"] == "tool"]
    assert [c["name"] for c in calls] == ["document_retriever", "chunk_retriever"]
    assert [t["name"] for t in tools] == ["document_retriever", "chunk_retriever"]
    assert all(t["status"] == "success" for t in tools)
    assert calls[1]["args"]["document_ids"]
    chunk_ids = re.findall(r'<passage id="([^"]+#\d+)"', tools[1]["content"])
    final = messages[-1]
    assert final["type"] == "ai" and not final.get("tool_calls")
    assert cited(final["content"]) == [chunk_ids[0]]


def test_codegen_writes_valid_sql(client):
    out = client.runs.wait(None, "codegen", input={"request": "total value of one-off orders per customer",
                                                   "language": "sql"})
    assert out["errors"] == [] and out["valid"] is True, out
    assert out["code"].startswith("SELECT ") and out["attempts"] == 1
    assert out["context_ids"]


def test_indexer_stores_a_new_document(client, server):
    document = {"id": "zanzibar-memo", "title": "Zanzibar office memo",
                "content": "The Zanzibar branch closes at noon on Fridays for staff training."}
    out = client.runs.wait(None, "indexer", input={"documents": [document]})
    assert out["errors"] == []
    assert out["report"]["documents"] == 1 and out["report"]["written"] == 1 and out["report"]["chunks"] >= 1
    embedded = [text for r in server.api.requests_to("embeddings") for text in r.body["input"]]
    assert any("Zanzibar branch" in text for text in embedded)


def test_server_log_shows_no_blocking_call(server):
    """Runs above would fail on a blocking call; this also catches ones that a node caught and logged."""
    text = server.log_text()
    assert not BLOCKING.search(text), text[-5000:]
    assert "Traceback" not in text, text[-5000:]
