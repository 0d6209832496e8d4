"""Turns callers' writes take in a process: a server's callers share one writer at a time, fairly."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterator

from agent_retrieval.core.process import PROCESS


class NoTurn(TimeoutError):
    """A turn that did not come in time."""


class Turns:
    """One at a time, the next turn to the waiting writer whose last turn is oldest (then the one that came
    first), and one turn held or awaited per writer: a writer's second write is refused at once, so a caller
    who writes often neither keeps the others waiting nor holds the server's run slots while waiting."""

    REMEMBERED = 4096  # writers whose last turn is kept; one forgotten counts as never having written

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._holder: Hashable | None = None  # the writer whose turn it is; None: nobody's
        self._waiting: list[tuple[Hashable, int]] = []  # (writer, arrival)
        self._last: OrderedDict[Hashable, int] = OrderedDict()  # writer -> its last turn's number
        self._count = itertools.count()

    @contextlib.contextmanager
    def turn(self, writer: Hashable, wait_seconds: float) -> Iterator[None]:
        """Hold the turn for the block; NoTurn if it does not come within `wait_seconds`, or at once if this
        writer holds or awaits one already."""
        deadline = time.monotonic() + wait_seconds
        with self._condition:
            if self._holder == writer or any(w == writer for w, _ in self._waiting):
                raise NoTurn("an earlier write of the same caller is still running")
            ticket = (writer, next(self._count))
            self._waiting.append(ticket)
            while self._holder is not None or self._next() != ticket:
                if not self._condition.wait(deadline - time.monotonic()):
                    self._waiting.remove(ticket)
                    self._condition.notify_all()  # the one behind may be next now
                    raise NoTurn(f"other callers' writes held the server for {wait_seconds:g} s")
            self._waiting.remove(ticket)
            self._holder = writer
            self._last[writer] = next(self._count)
            self._last.move_to_end(writer)
            while len(self._last) > self.REMEMBERED:
                self._last.popitem(last=False)
        try:
            yield
        finally:
            with self._condition:
                self._holder = None
                self._condition.notify_all()

    def _next(self) -> tuple[Hashable, int]:
        return min(self._waiting, key=lambda ticket: (self._last.get(ticket[0], -1), ticket[1]))


def shared_turns() -> Turns:
    """The process's turns for callers' writes (a forked child starts its own: a turn held in the parent
    would never be handed back there)."""
    return PROCESS.part("caller turns", Turns)
