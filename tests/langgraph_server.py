"""A real `langgraph dev` serving langgraph.json, started for a test module and stopped after it.

The server is configured only by its environment, as a user's would be: nothing of the machine's own
agent-retrieval, provider or LangSmith settings leaks in, and nothing reaches the network (no LangSmith,
analytics or version check). It runs without --allow-blocking, so a blocking call in an async node fails
the run. Requests carry a signed-in user's access token, verified by agent_retrieval.server.auth.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from dotenv import dotenv_values
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from agent_retrieval.context import SETTINGS, env_names
from tests.stack import ISSUER, _free_port, mint_jwt

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT = 60.0
CONTEXT_VARIABLES = {name for setting in SETTINGS for name in env_names(setting)}


@dataclass
class Server:
    url: str
    log: Path
    jwt_secret: str
    started_in: float

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def token(
        self, sub: str, tenant: str | None = None, *, role: str = "authenticated", expires_in: int = 3600
    ) -> str:
        """An access token as Supabase Auth signs it; `tenant` goes in app_metadata.tenant_id."""
        return mint_jwt(
            self.jwt_secret,
            role,
            sub=sub,
            expires_in=expires_in,
            app_metadata={"tenant_id": tenant} if tenant is not None else None,
        )

    def headers(self, sub: str, tenant: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(sub, tenant)}"}

    def signed_in(self, sub: str, tenant: str | None = None, **options: Any) -> SyncLangGraphClient:
        """A langgraph-sdk client of this server, signed in as the user `sub` of `tenant`."""
        return get_sync_client(url=self.url, headers=self.headers(sub, tenant), **options)


def server_environment(settings: dict[str, str]) -> dict[str, str]:
    """The machine's environment without agent-retrieval, provider or LangSmith settings, plus `settings`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in CONTEXT_VARIABLES and not k.startswith(("LANGSMITH_", "LANGCHAIN_", "OPENAI_"))
    }
    env.update(
        {
            "AGENT_RETRIEVAL_MAX_RETRIES": "0",
            "LANGSMITH_TRACING": "false",
            "LANGCHAIN_TRACING_V2": "false",
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",  # the CLI otherwise posts usage analytics
            "LANGGRAPH_NO_VERSION_CHECK": "true",  # the server otherwise asks PyPI for a newer langgraph-api
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            # what the tests' tokens name (tests.stack.mint_jwt)
            "AGENT_RETRIEVAL_SUPABASE_JWT_ISSUER": ISSUER,
            **settings,
        }
    )
    return env


def check_dotenv(env: dict[str, str]) -> None:
    """langgraph.json loads .env, whose values win over the process environment: they must not clash."""
    path = REPO / ".env"
    if not path.exists():
        return
    clashes = sorted(
        k
        for k in dotenv_values(path)
        if k in env or k in CONTEXT_VARIABLES or k.startswith(("LANGSMITH_", "LANGCHAIN_"))
    )
    if clashes:
        pytest.fail(
            f"{path} sets {', '.join(clashes)}, which `langgraph dev` would apply over this test's "
            "settings; move the file aside to run this test"
        )


@contextlib.contextmanager
def serve(folder: Path, settings: dict[str, str], *, jobs: int = 1) -> Iterator[Server]:
    """`langgraph dev` with these settings (SUPABASE_JWT_SECRET among them), until the block ends, running
    `jobs` runs at a time (langgraph dev's default is one; a deployment's, ten)."""
    env = server_environment(settings)
    check_dotenv(env)
    log = folder / "server.log"
    port = _free_port()
    command = [
        str(Path(sys.executable).parent / "langgraph"),
        "dev",
        "--no-browser",
        "--no-reload",
        "--port",
        str(port),
        "--config",
        str(own_config(folder)),
        "--n-jobs-per-worker",
        str(jobs),
    ]
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_serving(f"{url}/ok", process, log)
        yield Server(url, log, settings["SUPABASE_JWT_SECRET"], time.monotonic() - started)
    finally:
        stop(process)


def own_config(folder: Path) -> Path:
    """The repository's langgraph.json with its paths made absolute, written into `folder`: `langgraph dev`
    keeps its threads and runs in `.langgraph_api` under the folder it runs in, so each server runs in its
    own (servers of tests run side by side would otherwise write and remove one folder)."""
    config = json.loads((REPO / "langgraph.json").read_text())
    config["dependencies"] = [str(REPO / path) for path in config["dependencies"]]
    config["graphs"] = {name: str(REPO / path) for name, path in config["graphs"].items()}
    config["env"] = str(REPO / config["env"])
    path = folder / "langgraph.json"
    path.write_text(json.dumps(config))
    return path


def wait_until_serving(
    url: str, process: subprocess.Popen, log: Path, *, name: str = "langgraph dev", status: int = 200
) -> None:
    """Until a GET of `url` answers `status` (or the process exits, or START_TIMEOUT passes: a failure)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{name} exited with {process.returncode}:\n{log.read_text(errors='replace')}")
        try:
            if httpx.get(url, timeout=1.0).status_code == status:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"{name} did not serve within {START_TIMEOUT:g} s:\n{log.read_text(errors='replace')}")


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
