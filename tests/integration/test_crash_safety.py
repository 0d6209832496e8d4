"""Ingestion survives SIGKILL: after a kill at any point the store is consistent, and a re-run embeds only
what is missing and ends equal to a clean one-shot ingest.

Each run is the real `agent-retrieval ingest` command (its `main`), embedding through the OpenAI provider
and SDK against tests/fakeapi.py's server in this process, which records every text it is sent. Runs are
forked from one driver process that imported the library once, so a run costs its ingest, not 4 s of
imports. Kills land, by seeded choice, while an embedding request is in flight (the server holds each
one for a moment), while the run holds the store's write lock (seen from here: another writer could
not take it, or Postgres shows its upsert running), or after a random delay. The first run also
meets a failing provider, so the re-runs must also finish documents stored without vectors.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent_retrieval import context as settings
from agent_retrieval.stores.base import DocumentState
from agent_retrieval.stores.postgres import PostgresStore
from tests.fakeapi import FakeAPI
from tests.storecheck import (
    Expected,
    Snapshot,
    check_snapshot,
    expected,
    pg_digest,
    pg_snapshot,
    sqlite_digest,
    sqlite_snapshot,
    write_corpus,
)

REPO = Path(__file__).resolve().parents[2]
SEED = 20240611
CONTEXT = settings.Context(chunk_size=400, chunk_overlap=40)
SETTINGS = {
    "AGENT_RETRIEVAL_EMBEDDING_PROVIDER": "openai",
    "OPENAI_API_KEY": "test-key-not-a-secret",
    "AGENT_RETRIEVAL_CHUNK_SIZE": "400",
    "AGENT_RETRIEVAL_CHUNK_OVERLAP": "40",
    "AGENT_RETRIEVAL_EMBEDDING_BATCH_SIZE": "64",
    "AGENT_RETRIEVAL_MAX_RETRIES": "0",
}
FAILED_REQUESTS = 2  # the provider's first embedding requests fail
REQUEST_DELAY = 0.02  # every embedding request is held this long, so a kill can land inside one
# Where the kills of one store land, in order (how far into its work each run gets first is seeded).
KILLS = ["embedding", "writing", "random", "writing", "embedding", "writing"]

# Imports once, then forks one child per job; each child runs the CLI with the job's environment and
# output file. Forking is safe here: the driver has started no thread and opened no connection.
DRIVER = textwrap.dedent("""
    import json, os, sys, threading, traceback
    from agent_retrieval import cli
    import agent_retrieval.ingest, agent_retrieval.search.retrieval, langchain_openai  # noqa
    try:
        import psycopg, psycopg_pool  # noqa: the Postgres store's, when the extra is installed
    except ImportError:
        pass
    assert threading.active_count() == 1
    print(json.dumps({"ready": True}), flush=True)
    for line in iter(sys.stdin.readline, ""):
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            out = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.environ.update(job["env"])
            code = 70
            try:
                code = cli.main(job["argv"])
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                          "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None}), flush=True)
""")


class Driver:
    """The forking driver: `start` a CLI run and get its pid, then `wait` for how it ended."""

    def __init__(self, env: dict[str, str]):
        self.process = subprocess.Popen(
            [sys.executable, "-c", DRIVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )
        assert self._read() == {"ready": True}

    def _read(self) -> dict[str, Any]:
        line = self.process.stdout.readline()
        assert line, f"the driver died (exit {self.process.wait()})"
        return json.loads(line)

    def start(self, argv: list[str], env: dict[str, str], log: Path) -> int:
        self.process.stdin.write(json.dumps({"argv": argv, "env": env, "log": str(log)}) + "\n")
        self.process.stdin.flush()
        return self._read()["pid"]

    def wait(self) -> dict[str, Any]:
        return self._read()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(10)


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    """The provider: its first FAILED_REQUESTS embedding requests fail (HTTP 500, not retried), every later
    one is held for REQUEST_DELAY before its answer."""
    with FakeAPI() as server:
        server.fail_next(500, times=FAILED_REQUESTS, endpoint="embeddings")  # faults apply in queued order
        server.delay_next(REQUEST_DELAY, times=None, endpoint="embeddings")
        yield server


@pytest.fixture(scope="module")
def driver() -> Iterator[Driver]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {name for setting in settings.SETTINGS for name in settings.env_names(setting)}
    }
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(REPO))
    runner = Driver(env)
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("crash") / "corpus", 300, seed=SEED, copies=10)


@pytest.fixture(scope="module")
def want(corpus: Path) -> Expected:
    return expected(corpus, CONTEXT)


def texts_sent(api: FakeAPI) -> list[str]:
    """The texts of every embedding request answered or in flight (not the two that failed at once)."""
    requests = api.requests_to("embeddings")[FAILED_REQUESTS:]
    return [text for request in requests for text in request.body["input"]]


@dataclass
class Backend:
    """How the test reaches one kind of store: the CLI's settings, its rows, its digest, its states,
    and whether a run is inside a write transaction right now."""

    env: dict[str, str]
    snapshot: Callable[[], Snapshot]
    digest: Callable[[], tuple[int, int, str]]
    states: Callable[[list[str]], dict[str, tuple[str, bool]]]
    writing: Callable[[], bool]
    close: Callable[[], None] = lambda: None


def sqlite_backend(path: Path) -> Backend:
    def states(ids: list[str]) -> dict[str, DocumentState]:
        from agent_retrieval.stores import SQLiteStore

        if not ids:
            return {}
        with SQLiteStore(path) as store:
            return store.document_states(ids)

    def writing() -> bool:
        """Whether another connection holds the write lock: then ours cannot take it, even for a moment."""
        if not path.exists():
            return False
        probe = sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError as error:
            if "locked" in str(error):
                return True
            raise
        finally:
            probe.close()

    def snapshot() -> Snapshot:
        return sqlite_snapshot(path) if path.exists() else Snapshot(None, {}, {})

    return Backend({"AGENT_RETRIEVAL_DB": str(path)}, snapshot, lambda: sqlite_digest(path), states, writing)


def postgres_backend(dsn: str, schema: str) -> Backend:
    import psycopg

    PostgresStore(dsn, schema=schema).init(8)  # `db init`, for FakeAPI's 8-dimensional vectors
    store = PostgresStore(dsn, schema=schema)
    monitor = psycopg.connect(dsn, autocommit=True)

    def writing() -> bool:
        """Whether a run's upsert is executing or its transaction is still open."""
        return (
            monitor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query LIKE %s "
                "AND state IN ('active', 'idle in transaction')",
                (f"%{schema}%upsert_documents%",),
            ).fetchone()[0]
            > 0
        )

    def close() -> None:
        store.close()
        monitor.close()

    return Backend(
        {"AGENT_RETRIEVAL_DSN": dsn, "AGENT_RETRIEVAL_SCHEMA": schema},
        lambda: pg_snapshot(dsn, schema),
        lambda: pg_digest(dsn, schema),
        store.document_states,
        writing,
        close,
    )


class Runs:
    """Ingest runs of one corpus into one store, each checked against what the store lacked before it."""

    def __init__(
        self, driver: Driver, api: FakeAPI, corpus: Path, want: Expected, backend: Backend, logs: Path
    ):
        self.driver, self.api, self.corpus, self.want = driver, api, corpus, want
        self.backend, self.logs = backend, logs
        self.env = {**SETTINGS, "OPENAI_BASE_URL": api.openai_url, **backend.env}
        self.count = 0

    def check(self) -> set[str]:
        """The store's invariants (see check_snapshot); the texts it lacks a vector for."""
        snapshot = self.backend.snapshot()
        check_snapshot(
            snapshot, self.want, self.backend.states(list(snapshot.documents)), self.api.unit_vector
        )
        return self.want.texts - snapshot.embedded_texts()

    def run(self, kill: Callable[[int, int], str] | None = None) -> tuple[dict[str, Any], list[str], str]:
        """One `agent-retrieval ingest`; `kill(pid, texts sent before)` may SIGKILL it and says where.
        Returns how it ended, the texts it sent to be embedded, and its output."""
        missing = self.check()
        before = len(texts_sent(self.api))
        log = self.logs / f"run-{self.count}.log"
        self.count += 1
        pid = self.driver.start(["ingest", "--no-progress", str(self.corpus)], self.env, log)
        where = kill(pid, before) if kill else "no kill"
        end = self.driver.wait()
        sent = texts_sent(self.api)[before:]
        # a run asks only for texts the store lacked, each once: stored vectors are reused
        assert len(sent) == len(set(sent)) and set(sent) <= missing, where
        return {**end, "where": where}, sent, log.read_text()


def alive(pid: int) -> bool:
    """Whether the run is still running (the driver reaps it at once when it ends)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def killer(
    api: FakeAPI, backend: Backend, phase: str, fraction: float, rng: random.Random, missing: int
) -> Callable[[int, int], str]:
    """A kill once the run has sent `fraction` of the `missing` texts, then: at once while that request is
    held (embedding), inside the next write transaction (writing), or after a random delay."""

    def kill(pid: int, before: int) -> str:
        while len(texts_sent(api)) - before < max(1, int(fraction * missing)):
            if not alive(pid):
                return "finished before the kill"
            time.sleep(0.001)
        if phase == "embedding":
            time.sleep(rng.uniform(0, REQUEST_DELAY / 3))
        elif phase == "writing":  # a seeded moment into a write transaction, seen still open just before
            while True:
                while not backend.writing():
                    if not alive(pid):
                        return "finished before the kill"
                time.sleep(rng.uniform(0, 0.01))
                if backend.writing():
                    break
        else:  # within a few requests: a fixed span of time may outlast a fast run, leaving nothing to kill
            time.sleep(rng.uniform(0, 3 * REQUEST_DELAY))
        # ProcessLookupError: it finished first (and was reaped): the driver reports how
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return phase

    return kill


def crash_and_recover(
    driver: Driver, api: FakeAPI, corpus: Path, want: Expected, backend: Backend, clean: Backend, logs: Path
) -> None:
    rng = random.Random(SEED)
    runs = Runs(driver, api, corpus, want, backend, logs)

    landed = []
    for number, phase in enumerate(KILLS):
        missing = runs.check()
        end, sent, output = runs.run(killer(api, backend, phase, rng.uniform(0.05, 0.5), rng, len(missing)))
        landed.append(end["where"] if end["signal"] == signal.SIGKILL else f"finished ({end['where']})")
        assert end["signal"] == signal.SIGKILL or end["code"] in (0, 1), output  # 1: left rows unembedded
        if number == 0:  # its first two batches met the failing provider: stored without vectors, not done
            assert sum(not s.embedded for s in backend.states(list(want.documents)).values()) >= 32
    # the schedule really hit both places: a request in flight, and an open write transaction
    assert landed.count("embedding") >= 1 and landed.count("writing") >= 2, landed

    missing = runs.check()
    end, sent, output = runs.run()
    assert end["code"] == 0, output
    assert sorted(sent) == sorted(missing)  # exactly what was missing, each text once
    assert runs.check() == set()

    # The same corpus ingested in one go, into a fresh store, with no fault.
    (logs / "clean").mkdir()
    one_shot = Runs(driver, api, corpus, want, clean, logs / "clean")
    assert one_shot.run()[0]["code"] == 0
    assert backend.digest() == clean.digest()
    assert backend.digest()[:2] == (len(want.documents), sum(len(c) for c in want.chunks.values()))


def test_sigkilled_sqlite_ingests_leave_a_consistent_store_that_a_rerun_completes(
    driver, api, corpus, want, tmp_path
):
    crash_and_recover(
        driver,
        api,
        corpus,
        want,
        sqlite_backend(tmp_path / "store.db"),
        sqlite_backend(tmp_path / "clean.db"),
        tmp_path,
    )


def test_sigkilled_postgres_ingests_leave_a_consistent_store_that_a_rerun_completes(
    driver, api, corpus, want, postgres, tmp_path
):
    for schema in ("crash_safety", "crash_safety_clean"):
        postgres.execute(f"drop schema if exists {schema} cascade")
    backend = postgres_backend(postgres.dsn, "crash_safety")
    clean = postgres_backend(postgres.dsn, "crash_safety_clean")
    try:
        crash_and_recover(driver, api, corpus, want, backend, clean, tmp_path)
    finally:
        backend.close()
        clean.close()
