"""Which store failures are transient is said once (stores/base.py: Failure, TRANSIENT); each backend maps its
own errors to that vocabulary. These tests hold every backend's mapping to it, and the retrying to it."""

from __future__ import annotations

import sqlite3
from typing import Any

import httpx
import psycopg
import pytest
from postgrest import APIError

from agent_retrieval.errors import StoreError, StoreUnavailable
from agent_retrieval.stores import postgres, supabase
from agent_retrieval.stores.base import TRANSIENT, Failure
from agent_retrieval.stores.rpc import CallError, RPCStore
from agent_retrieval.stores.sqlite import connection

# SQLSTATEs mean the same on both transports: PostgREST passes the database's on as its error code.
SQLSTATES = {
    "08006": Failure.UNREACHABLE,  # connection failure
    "08001": Failure.UNREACHABLE,
    "57P01": Failure.UNREACHABLE,  # admin shutdown
    "57P03": Failure.UNREACHABLE,  # cannot connect now (starting up)
    "40001": Failure.CONFLICT,  # serialization failure
    "40P01": Failure.CONFLICT,  # deadlock detected
    "57014": None,  # statement timeout: the same query would be as slow again
    "42501": None,  # permission denied
    "22023": None,
}


@pytest.mark.parametrize(("code", "failure"), SQLSTATES.items())
def test_postgres_maps_sqlstates_to_the_vocabulary(code, failure):
    error = postgres._call_error(psycopg, psycopg.errors.lookup(code)("failed"))
    assert (error.code, error.failure, error.transient) == (code, failure, failure in TRANSIENT)


@pytest.mark.parametrize(("code", "failure"), SQLSTATES.items())
def test_supabase_maps_the_same_sqlstates_to_the_same_words(code, failure):
    error = supabase._call_error(APIError({"code": code, "message": "failed"}))
    assert (error.code, error.failure, error.transient) == (code, failure, failure in TRANSIENT)


@pytest.mark.parametrize(
    ("error", "failure"),
    [
        (APIError({"code": "PGRST001", "message": "no database"}), Failure.UNREACHABLE),
        (APIError({"code": "503", "message": "unavailable"}), Failure.UNREACHABLE),
        (supabase._GatewayError(502, "Bad Gateway"), Failure.UNREACHABLE),
        (httpx.ConnectError("refused"), Failure.UNREACHABLE),
        (httpx.ReadTimeout("slow"), None),  # the request arrived: asking again only adds waiting
        (APIError({"code": "PGRST301", "message": "bad token"}), None),
    ],
)
def test_supabase_maps_its_transport_errors_to_the_vocabulary(error, failure):
    assert supabase._call_error(error).failure == failure


def test_postgres_maps_a_lost_connection_and_not_a_refused_login():
    lost = postgres._call_error(psycopg, psycopg.OperationalError("server closed the connection"))
    refused = postgres._call_error(
        psycopg, psycopg.OperationalError('FATAL:  password authentication failed for user "u"')
    )
    assert (lost.code, lost.failure, lost.transient) == ("connection", Failure.UNREACHABLE, True)
    assert (refused.failure, refused.transient) == (None, False)


def test_sqlite_maps_a_lock_held_past_the_timeout_to_a_conflict():
    assert connection.failure(sqlite3.SQLITE_BUSY, "database is locked") is Failure.CONFLICT
    assert connection.failure(sqlite3.SQLITE_FULL, "database or disk is full") is None


class Scripted(RPCStore):
    """An RPC store whose calls fail with the given errors, in turn, then answer."""

    backend = "scripted"
    location = "nowhere"

    def __init__(self, *errors: CallError):
        super().__init__(max_retries=3)
        self.errors, self.calls = list(errors), 0

    def _send(self, function: str, params: dict[str, Any]) -> Any:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return []

    def close(self) -> None:
        pass


@pytest.mark.parametrize("failure", sorted(TRANSIENT))
def test_a_transient_failure_is_retried_and_then_succeeds(monkeypatch, failure):
    monkeypatch.setattr("agent_retrieval.stores.rpc.time.sleep", lambda seconds: None)
    store = Scripted(CallError("x", "failed", failure=failure), CallError("x", "failed", failure=failure))
    assert store.unknown_documents(["a"]) == [] and store.calls == 3


@pytest.mark.parametrize(
    ("error", "raised", "calls"),
    [
        (CallError("x", "failed", failure=Failure.UNREACHABLE), StoreUnavailable, 4),  # 1 + max_retries
        (CallError("x", "failed", failure=Failure.UNREACHABLE, waited=True), StoreUnavailable, 1),
        (CallError("40001", "failed", failure=Failure.CONFLICT), StoreError, 4),
        (CallError("42501", "denied"), StoreError, 1),
    ],
)
def test_only_transient_failures_are_retried_and_unreachable_is_store_unavailable(
    monkeypatch, error, raised, calls
):
    monkeypatch.setattr("agent_retrieval.stores.rpc.time.sleep", lambda seconds: None)
    store = Scripted(*[error] * 10)
    with pytest.raises(raised) as caught:
        store.unknown_documents(["a"])
    assert store.calls == calls
    assert isinstance(caught.value, StoreUnavailable) == (error.failure is Failure.UNREACHABLE)
