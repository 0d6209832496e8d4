"""Faults the Postgres and Supabase stores must ride out: Postgres restarting under a search and under an
ingest, PostgREST going away and coming back, and statements running into their timeout.

The module starts its own Postgres, PostgREST and gateway, since it restarts and stops them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import re
import threading
import time
import traceback
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext

import pytest

from agent_retrieval import demo
from agent_retrieval.context import Context
from agent_retrieval.errors import AgentRetrievalError, StoreError, StoreUnavailable
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.loaders import load_documents
from agent_retrieval.models import Document
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.stores import open_store
from agent_retrieval.stores.postgres import PostgresStore
from agent_retrieval.stores.supabase import SupabaseStore
from tests.conftest import WordHashEmbeddings
from tests.stack import SupabaseStack, _free_port, start_stack

SCHEMA = "faults"
DIM = 256  # the word-hash test embedder's
QUERY = "tenancy deposit protection"
# In the DSN only to prove no error shows it (the Unix socket trusts local users, so it is never checked).
PASSWORD = "pg-Secret-7f3e"
RPC_LOGGER = "agent_retrieval.stores.rpc"


def embedder() -> Embedder:
    return Embedder(WordHashEmbeddings(), "test/word-hash")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SupabaseStack]:
    """A private stack holding the demo corpus (tenant ''), searchable by DSN and through PostgREST."""
    stack = start_stack(tmp_path_factory.mktemp("faults"), [SCHEMA])
    try:
        with PostgresStore(stack.postgres.dsn, schema=SCHEMA) as store:
            store.init(DIM)
            ingest(load_documents([demo.corpus_dir()]), store, embedder(), progress=False)
        stack.postgrest.reload_schema()
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def dsn(stack: SupabaseStack) -> str:
    host = urllib.parse.quote(stack.postgres.socket_dir, safe="")
    return f"postgresql://postgres:{PASSWORD}@/postgres?host={host}"


@pytest.fixture
def rpc_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger=RPC_LOGGER)
    return caplog


def retries_logged(caplog: pytest.LogCaptureFixture) -> list[float]:
    """The delays of the retries the stores logged."""
    return [
        float(m.group(1))
        for r in caplog.records
        if r.name == RPC_LOGGER and (m := re.search(r"retry \d+ of \d+ in ([\d.]+) s", r.getMessage()))
    ]


def ids(hits: list) -> list[str]:
    return [h.id for h in hits]


@contextmanager
def table_locked(stack: SupabaseStack, table: str) -> Iterator[None]:
    """Another session holds an exclusive lock on the table: every query touching it waits."""
    locker = stack.postgres.connect()
    try:
        locker.execute("begin")
        locker.execute(f"lock table {SCHEMA}.{table} in access exclusive mode")
        yield
    finally:
        locker.close()  # ends the transaction, and with it the lock (if a restart has not already)


def wait_until_waiting_on_a_lock(stack: SupabaseStack, function: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stack.postgres.execute(
            "select count(*) from pg_stat_activity where wait_event_type = 'Lock' and query like %s",
            (f"%{function}%",),
        )[0][0]:
            return
        time.sleep(0.02)
    raise AssertionError(f"no {function} call came to wait on the lock")


def assert_readable(error: BaseException, *secrets: str) -> str:
    """The message names no secret, and no transport exception (httpx, psycopg) comes along with it."""
    message = str(error)
    for secret in secrets:
        assert secret not in message
    link: BaseException | None = error
    while link is not None:
        assert isinstance(link, AgentRetrievalError), f"a raw {type(link).__name__} in the chain"
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    rendered = "".join(traceback.format_exception(error))
    assert "httpx" not in rendered and "psycopg" not in rendered
    return message


# --- Postgres restarting -----------------------------------------------------------------------------


@pytest.mark.parametrize("max_retries", [3, 0], ids=["retried", "not-retried"])
def test_a_search_in_flight_when_postgres_restarts(stack, dsn, rpc_log, max_retries):
    """The search waits on a lock when the server restarts: with retries it is repeated once the server is
    back and answers as before; without, it fails saying it cannot reach the store and to try again, and the
    next call works (the pool dropped the dead connection)."""
    with (
        PostgresStore(dsn, schema=SCHEMA, timeout=10, max_retries=max_retries) as store,
        ThreadPoolExecutor(1) as worker,
    ):
        expected = ids(store.keyword_search("chunks", QUERY, 5))
        assert expected
        with table_locked(stack, "chunks"):
            search = worker.submit(store.keyword_search, "chunks", QUERY, 5)
            # by DSN the words and their postings (kept) need no row of chunks; reading the hits does
            wait_until_waiting_on_a_lock(stack, "keyword_rows_chunks")
            stack.postgres.restart(down_seconds=0.5)
        if max_retries:
            assert ids(search.result(timeout=20)) == expected
            assert len(retries_logged(rpc_log)) >= 1  # it did fail, and was repeated
        else:
            with pytest.raises(StoreUnavailable) as caught:
                search.result(timeout=20)
            message = assert_readable(caught.value, PASSWORD)
            assert "cannot reach" in message and "try again" in message
        assert ids(store.keyword_search("chunks", QUERY, 5)) == expected


def test_the_pool_lends_no_dead_connection_after_a_restart(stack, dsn):
    """Four idle pooled connections die with the server; with no retries allowed, every later call still
    succeeds, and quickly: the pool tests a connection before lending it and drops all the dead at once."""
    with PostgresStore(dsn, schema=SCHEMA, timeout=10, max_retries=0, pool_size=4) as store:
        expected = ids(store.keyword_search("chunks", QUERY, 5))
        pool = store._open_pool()
        held = [pool.getconn() for _ in range(4)]
        for conn in held:
            pool.putconn(conn)
        assert pool.get_stats()["pool_available"] == 4
        stack.postgres.restart()
        started = time.monotonic()
        for _ in range(8):
            assert ids(store.keyword_search("chunks", QUERY, 5)) == expected
        assert time.monotonic() - started < 4, (
            "dead connections were tested one per pause of the pool's backoff"
        )


def synthetic_corpus(count: int) -> list[Document]:
    """`count` documents of three sections each (about three chunks), the same every run."""
    rng = random.Random(7)
    words = [
        "deposit",
        "tenancy",
        "landlord",
        "boiler",
        "repair",
        "commission",
        "referral",
        "fee",
        "vendor",
        "survey",
        "inventory",
        "notice",
        "rent",
        "arrears",
        "garden",
        "lease",
        "clause",
    ]
    docs = []
    for i in range(count):
        sections = [
            f"## Section {s}\n\n" + " ".join(rng.choice(words) for _ in range(110)) + "." for s in range(3)
        ]
        docs.append(
            Document(f"doc-{i:03d}", f"Document {i}", f"# Document {i}\n\n" + "\n\n".join(sections), {"n": i})
        )
    return docs


def tenant_digest(stack: SupabaseStack, tenant: str) -> tuple[int, int, str]:
    """Document and chunk counts of a tenant, and a hash of every row's ids, content, vector and of the
    keyword statistics the triggers keep (a duplicated or half-written row would change them)."""
    documents = (
        "select id, title, content, metadata::text, content_hash, text_hash, embedding::text, "
        f"embedding_model from {SCHEMA}.documents where tenant_id = %s order by id"
    )
    chunks = (
        "select document_id, id, ordinal, heading_path, content, text_hash, embedding::text, "
        f"embedding_model from {SCHEMA}.chunks where tenant_id = %s order by id"
    )
    keyword_stats = (
        f"select level, is_public, rows, total_length from {SCHEMA}.corpus_stats "
        "where tenant_id = %s order by level, is_public"
    )
    rows = [stack.postgres.execute(sql, (tenant,)) for sql in (documents, chunks, keyword_stats)]
    return len(rows[0]), len(rows[1]), hashlib.sha256(repr(rows).encode()).hexdigest()


@pytest.fixture(scope="module")
def clean_ingest(stack) -> tuple[int, int, str]:
    """The corpus ingested with no fault: what every faulted ingest must end up holding."""
    with PostgresStore(stack.postgres.dsn, schema=SCHEMA, tenant="clean") as store:
        report = ingest(synthetic_corpus(300), store, embedder(), progress=False)
    assert report.written == 300 and report.chunks > 600
    return tenant_digest(stack, "clean")


@pytest.mark.parametrize(
    ("down_seconds", "timeout"), [(0.3, 2.0), (8.5, 1.0)], ids=["short-outage", "long-outage"]
)
def test_postgres_restarting_mid_ingest_loses_and_duplicates_nothing(
    stack, dsn, clean_ingest, down_seconds, timeout
):
    """The server restarts from another thread after the second batch. A short outage is ridden out; a
    long one fails the ingest clearly, within about one request timeout. Either way a re-run completes
    (after the long outage the pool's own reconnection is seconds away: the store must not wait for it),
    and the store holds exactly what a clean ingest writes."""
    tenant = f"restart-{down_seconds:g}"
    began_at: list[float] = []
    back_at: list[float] = []

    def restart_server() -> None:
        began_at.append(time.monotonic())
        stack.postgres.restart(down_seconds=down_seconds)
        back_at.append(time.monotonic())

    restart = threading.Thread(target=restart_server)

    def restart_after_two_batches(report) -> None:
        if report.written >= 64 and restart.ident is None:
            restart.start()

    # a short outage is ridden out; one longer than the request timeout must fail the ingest
    outcome = nullcontext() if down_seconds < 1 else pytest.raises(StoreUnavailable)
    with PostgresStore(dsn, schema=SCHEMA, tenant=tenant, timeout=timeout, max_retries=3) as store:
        first = None
        try:
            with outcome as failed:
                first = ingest(
                    synthetic_corpus(300),
                    store,
                    embedder(),
                    progress=False,
                    on_batch=restart_after_two_batches,
                )
        finally:  # whatever happened, the server is back before anything else runs
            finished_at = time.monotonic()
            if restart.ident is not None:
                restart.join()
        assert back_at, "the restart never happened"
        if down_seconds < 1:
            assert first is not None and first.written == 300, "a short outage should be ridden out"
            assert finished_at > back_at[0], "the ingest ended before the server was back: nothing was tested"
        else:
            message = assert_readable(failed.value, PASSWORD)
            assert "cannot reach" in message and "try again" in message
            assert finished_at - began_at[0] < timeout + 1.5, "the failure waited out more than one timeout"
        again = ingest(synthetic_corpus(300), store, embedder(), progress=False)
        assert again.unchanged + again.written == 300 and again.documents == 300
        assert store.stats().documents_missing_embeddings == 0
    assert tenant_digest(stack, tenant) == clean_ingest


# --- PostgREST down ----------------------------------------------------------------------------------


def test_postgrest_down_is_a_clear_error_after_bounded_retries_then_works_again(stack, rpc_log, request):
    """With PostgREST stopped the gateway answers 502: each call retries 3 times with growing, jittered
    pauses, then says it cannot reach the API and what to do, sync and async; once PostgREST is back the
    same store works again."""
    store = SupabaseStore(stack.url, stack.service_key, schema=SCHEMA, timeout=5, max_retries=3)
    request.addfinalizer(store.close)
    expected = ids(store.keyword_search("chunks", QUERY, 5))
    assert expected
    calls = {
        "sync": lambda: store.keyword_search("chunks", QUERY, 5),
        "async": lambda: asyncio.run(store.akeyword_search("chunks", QUERY, 5)),
    }
    delays: list[float] = []
    stack.postgrest.stop()
    try:
        for call in calls.values():
            rpc_log.clear()
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as caught:
                call()
            elapsed = time.monotonic() - started
            message = assert_readable(caught.value, stack.service_key)
            assert "cannot reach" in message and "HTTP 502" in message and "PostgREST" in message
            assert "tried 4 times" in message and "try again" in message and "paused" in message
            waits = retries_logged(rpc_log)
            assert len(waits) == 3  # bounded: max_retries, then the error
            for wait, base in zip(waits, (0.2, 0.4, 0.8), strict=False):
                assert base / 2 <= wait <= base  # backoff doubles; jitter takes up to half off
            assert sum(waits) - 0.05 <= elapsed < sum(waits) + 2  # (logged delays are rounded)
            delays += [w / b for w, b in zip(waits, (0.2, 0.4, 0.8), strict=False)]
        assert len({round(d, 3) for d in delays}) > 1, "no jitter: retrying clients would move in step"
    finally:
        stack.postgrest.start()
    for call in calls.values():
        assert ids(call()) == expected


def test_an_api_nobody_answers_at_is_unreachable(stack):
    store = SupabaseStore(f"http://127.0.0.1:{_free_port()}", stack.service_key, schema=SCHEMA, max_retries=1)
    for call in (lambda: store.stats(), lambda: asyncio.run(store.akeyword_search("chunks", QUERY, 5))):
        with pytest.raises(StoreUnavailable) as caught:
            call()
        message = assert_readable(caught.value, stack.service_key)
        assert "cannot reach" in message and "ConnectError" in message and "SUPABASE_URL" in message


# --- statement timeouts ------------------------------------------------------------------------------


def test_a_query_blocked_by_a_lock_ends_at_the_request_timeout_on_postgres(stack, dsn):
    context = Context(postgres_dsn=dsn, db_schema=SCHEMA, request_timeout_seconds=1.0)
    with open_store(context.store) as store:
        expected = ids(store.keyword_search("chunks", QUERY, 5))
        with table_locked(stack, "chunks"):
            started = time.monotonic()
            with pytest.raises(StoreError) as caught:
                store.keyword_search("chunks", QUERY, 5)
            assert time.monotonic() - started < 1.0 + 1.0
        message = assert_readable(caught.value, PASSWORD)
        assert "statement timeout (1 s, request_timeout_seconds)" in message and "lock" in message
        assert not isinstance(caught.value, StoreUnavailable)
        assert ids(store.keyword_search("chunks", QUERY, 5)) == expected


def test_a_query_blocked_by_a_lock_ends_at_the_request_timeout_on_supabase(stack):
    """PostgREST holds the request while the query waits: the client gives up at request_timeout_seconds
    and does not ask again (a retry would wait on the same lock), sync and async."""
    context = Context(
        supabase_url=stack.url, supabase_key=stack.service_key, db_schema=SCHEMA, request_timeout_seconds=1.0
    )
    with open_store(context.store) as store:
        expected = ids(store.keyword_search("chunks", QUERY, 5))
        calls = [
            lambda: store.keyword_search("chunks", QUERY, 5),
            lambda: asyncio.run(store.akeyword_search("chunks", QUERY, 5)),
        ]
        with table_locked(stack, "chunks"):
            for call in calls:
                started = time.monotonic()
                with pytest.raises(StoreError) as caught:
                    call()
                assert time.monotonic() - started < 1.0 + 1.0
                message = assert_readable(caught.value, stack.service_key)
                assert (
                    "did not answer within 1 s" in message
                    and "AGENT_RETRIEVAL_REQUEST_TIMEOUT_SECONDS" in message
                )
        for call in calls:
            assert ids(call()) == expected
