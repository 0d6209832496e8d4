"""What searches share between calls, owned by an object a caller can make and close: the threads sync
searches run their paths in, and the query-vector cache that lets document_retriever and then
chunk_retriever share one HyDE call. And the turns callers' writes take in a process (`shared_turns`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from cachetools import TLRUCache

from agent_retrieval.context import ResourceSettings
from agent_retrieval.core.process import PROCESS, ProcessState


@dataclass(frozen=True)
class Claim:
    """What a caller of a key found: a stored value, or a computation in flight to wait on, or (`owner`) the
    duty to compute the value and settle `future` for everyone waiting on it."""

    value: Any = None
    future: Future[Any] | None = None
    owner: bool = False


class SharedValues:
    """Values kept by key for a time-to-live each, and the computations of values in flight: the first caller
    of a key computes, callers meanwhile wait for it, and later callers reuse the value until it expires.

    Safe across threads and event loops (waiters hold a `concurrent.futures.Future`).
    """

    def __init__(self, maxsize: int):
        self._lock = threading.Lock()
        self._values: TLRUCache[Hashable, Any] = TLRUCache(
            maxsize=maxsize, ttu=lambda _key, kept, now: now + kept[1]
        )
        self._inflight: dict[Hashable, Future[Any]] = {}

    def claim(self, key: Hashable) -> Claim:
        """The stored value, or the in-flight computation, or a new one this caller owns."""
        with self._lock:
            kept = self._values.get(key)
            if kept is not None:
                return Claim(value=kept[0])
            future = self._inflight.get(key)
            if future is not None:
                return Claim(future=future)
            future = self._inflight[key] = Future()
            return Claim(future=future, owner=True)

    def fulfil(self, key: Hashable, future: Future[Any], value: Any, ttl: float) -> None:
        """Hand an owner's value to its waiters, and keep it for `ttl` seconds (0: not at all)."""
        with self._lock:
            if ttl > 0:
                self._values[key] = (value, ttl)
            self._inflight.pop(key, None)
        future.set_result(value)

    def abandon(self, key: Hashable, future: Future[Any], error: BaseException) -> None:
        """Raise an owner's failure in its waiters; the next caller of the key computes afresh."""
        with self._lock:
            self._inflight.pop(key, None)
        future.set_exception(error)

    def clear(self) -> None:
        """Forget every stored value (computations in flight still reach their waiters)."""
        with self._lock:
            self._values.clear()


class SearchResources:
    """The pool sync searches run their keyword and vector paths in, and the HyDE query-vector cache.

    Sized by the settings' resources section (`search_threads`, `hyde_cache_size`). A Retrieval made without
    resources uses `shared_resources(context.resources)`, the process's instance for those sizes, so that
    Retrievals made per run (the graphs) still share HyDE calls; make one to size or close it apart, and pass
    it to each Retrieval that should share it. `close()` lets running searches finish, stops the threads and
    empties the cache; the resources start again if used afterwards, as a closed Retrieval's store does.
    """

    def __init__(self, settings: ResourceSettings | None = None):
        settings = settings or ResourceSettings()
        self.search_threads = settings.search_threads
        self.hyde_cache = SharedValues(settings.hyde_cache_size)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0  # the process that started the pool's threads
        self._noticed: set[str] = set()

    def __repr__(self) -> str:
        return f"SearchResources(search_threads={self.search_threads})"

    @property
    def search_pool(self) -> ThreadPoolExecutor:
        """The search threads, started on first use (async searches never need them)."""
        with self._lock:
            # A forked child inherits the pool but not its threads: work sent there would never run.
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ThreadPoolExecutor(
                    max_workers=self.search_threads, thread_name_prefix="agent-retrieval-search"
                )
                self._pool_pid = os.getpid()
            return self._pool

    def first_notice(self, what: str) -> bool:
        """True the first time `what` is noticed here: for a log line said once, not on every call."""
        with self._lock:
            if what in self._noticed:
                return False
            self._noticed.add(what)
            return True

    def close(self) -> None:
        """Stop the search threads once their searches finish (without waiting here) and empty the cache."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        self.hyde_cache.clear()

    def __enter__(self) -> SearchResources:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def shared_resources(settings: ResourceSettings, process: ProcessState = PROCESS) -> SearchResources:
    """The process's resources for these sizes, made on first use (one, unless sizes differ)."""
    sizes = (settings.search_threads, settings.hyde_cache_size)
    return process.part(("search resources", sizes), lambda: SearchResources(settings), SearchResources.close)


def clear_shared_caches() -> None:
    """Empty the HyDE cache of every shared instance (tests, or after re-embedding a store)."""
    for resources in PROCESS.parts(SearchResources):
        resources.hyde_cache.clear()
