"""What one process keeps between calls, owned in one place.

Search threads, the HyDE cache, Postgres connection pools, the embedded store's file caches, loaded models,
the turns of callers' writes and the locks that guard them are parts of the process: each is made on first
use (`PROCESS.part`) and shared by everything in the process that asks for the same key. A forked child (a
server's worker) starts with none of them, through the one fork hook here: its parent's threads did not
come along, the parent's connections are the parent's to use and close, and a lock may have been held at
the fork. `PROCESS.close()` releases them in this process.

An object made before a fork and used after it (a store, a Retrieval) asks for its parts again, so it finds
the child's.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, Protocol, TypeVar, cast

T = TypeVar("T")


class _Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


S = TypeVar("S", bound=_Sized)


class KeptInMemory(Generic[S]):
    """What a process keeps by key (a store file's caches, a scope's postings), each of `nbytes`: the least
    recently used dropped once all of them pass a budget."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[Hashable, S] = OrderedDict()

    def trim(self, budget: int) -> None:
        """Drop the least recently used until the rest fit in `budget` bytes (whoever holds one keeps using
        it: only later users make it again)."""
        with self._lock:
            total = sum(kept.nbytes for kept in self._kept.values())
            while self._kept and total > budget:
                total -= self._kept.popitem(last=False)[1].nbytes

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(kept.nbytes for kept in self._kept.values())


class ProcessState:
    """The parts of this process: made once, forgotten by a forked child, released by `close()`."""

    _lock: threading.Lock
    _parts: dict[Hashable, Any]
    _closers: dict[Hashable, Callable[[Any], None]]
    _making: dict[Hashable, threading.Lock]  # a lock per part being made

    def __init__(self) -> None:
        self._start()
        # What a forked child inherited, held and never used: destroying it there could wait forever on
        # threads that did not come along (an ONNX session joins its pool) or act on the parent's
        # connections (closing a SQLite connection releases the parent's locks).
        self._inherited: list[Any] = []

    def part(self, key: Hashable, make: Callable[[], T], close: Callable[[T], None] | None = None) -> T:
        """The process's part under `key`, made by `make` on first use; `close` releases it. Slow makers
        (loading a model) hold only their own key: other parts are served meanwhile."""
        with self._lock:
            if key in self._parts:
                return cast(T, self._parts[key])
            making = self._making.setdefault(key, threading.Lock())
        with making:
            with self._lock:
                if key in self._parts:  # another thread made it while this one waited
                    return cast(T, self._parts[key])
            value = make()
            with self._lock:
                self._parts[key] = value
                if close is not None:
                    self._closers[key] = close
                self._making.pop(key, None)
            return value

    def parts(self, kind: type[T]) -> list[T]:
        """The parts made so far that are `kind`s."""
        with self._lock:
            return [part for part in self._parts.values() if isinstance(part, kind)]

    def close(self) -> None:
        """Release every part that says how (threads stopped, connections closed); all are made anew if
        asked for again."""
        with self._lock:
            parts, closers = self._parts, self._closers
            self._parts, self._closers = {}, {}
        for key, closer in closers.items():
            closer(parts[key])

    def keep(self, inherited: Any) -> None:
        """Hold something of the parent's for the life of this process, unused (see `_inherited`)."""
        with self._lock:
            self._inherited.append(inherited)

    def _start(self) -> None:
        self._lock = threading.Lock()
        self._parts, self._closers, self._making = {}, {}, {}

    def _forked(self) -> None:
        """In a forked child: start empty, keeping the parent's parts unused and unclosed."""
        self._inherited.append(self._parts)
        self._start()


PROCESS = ProcessState()
os.register_at_fork(after_in_child=PROCESS._forked)
