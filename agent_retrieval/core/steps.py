"""Logic with a sync and an async face, written once: a generator yields its calls, two drivers make them.

The logic (what to call, in which order, under which bound, what a failure means) is written once, as a
generator of `Call`s and `Together`s; it receives each call's result, or has the call's exception raised at
its `yield`. `run` drives it in the caller's thread through the blocking forms and starts no event loop, so it
is safe where a loop is already running (Jupyter, a LangChain tool's `invoke` inside a graph); `arun` awaits
the async forms and never blocks its loop. The drivers are the only place where sync and async differ.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Awaitable, Callable, Generator, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One call in both forms: `sync()` blocks, `async_()` is awaited. `timeout` (seconds) bounds either form,
    and its expiry is a TimeoutError raised into the logic."""

    sync: Callable[[], T]
    async_: Callable[[], Awaitable[T]]
    timeout: float | None = None


@dataclass(frozen=True)
class Together:
    """Branches (each a generator of steps) run at once until all finish or `deadline` seconds pass; the logic
    receives one `Outcome` per branch, in order. The sync driver runs the branches in `pool`, so that its
    caller can stop waiting at the deadline; the async driver runs them as tasks. A branch unfinished at the
    deadline is cancelled: before it starts (a running thread cannot be stopped) or at its next await."""

    branches: Sequence[Steps[Any]]
    deadline: float
    pool: futures.Executor


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """How one branch of `Together` stood at the deadline: unfinished, or done with a value or an error."""

    finished: bool
    value: T | None = None
    error: BaseException | None = None

    def result(self) -> T:
        """The branch's value, or its error raised here."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # None only for a branch whose value is None


Step: TypeAlias = Call[Any] | Together
Steps: TypeAlias = Generator[Step, Any, T]


def call(sync: Callable[..., T], async_: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> Call[T]:
    """A Call of the two forms of one operation, with the same arguments."""
    return Call(functools.partial(sync, *args, **kwargs), functools.partial(async_, *args, **kwargs))


def bounded(step: Call[T], timeout: float) -> Call[T]:
    """The same call, given up after `timeout` seconds."""
    return Call(step.sync, step.async_, timeout)


def blocking(function: Callable[..., T], *args: Any, **kwargs: Any) -> Call[T]:
    """A Call to blocking work (reading files, building a client): made in place when sync, and in a worker
    thread when async, so that the event loop stays free."""
    work = functools.partial(function, *args, **kwargs)
    return Call(work, functools.partial(asyncio.to_thread, work))


def single(step: Call[T]) -> Steps[T]:
    """Logic that is one call: how a lone call becomes a branch of `Together`."""
    value: T = yield step
    return value


# The two drivers share their shape: they cannot share the loop, as one awaits where the other calls.


def run(steps: Steps[T]) -> T:
    """Drive `steps` in the caller's thread, making each call in its blocking form."""
    with contextlib.closing(steps):
        step = _resume(steps, Outcome(True))
        while not isinstance(step, _Returned):
            step = _resume(steps, _made(step))
        return step.value


async def arun(steps: Steps[T]) -> T:
    """Drive `steps` on the running event loop, awaiting each call's async form."""
    with contextlib.closing(steps):
        step = _resume(steps, Outcome(True))
        while not isinstance(step, _Returned):
            step = _resume(steps, await _amade(step))
        return step.value


@dataclass(frozen=True)
class _Returned(Generic[T]):
    value: T


def _resume(steps: Steps[T], outcome: Outcome[Any]) -> Step | _Returned[T]:
    """Hand the logic a call's outcome (its value, or its error raised at the `yield`); what it asks next."""
    try:
        return steps.send(outcome.value) if outcome.error is None else steps.throw(outcome.error)
    except StopIteration as done:
        return _Returned(done.value)


def _made(step: Step) -> Outcome[Any]:
    """Make a step in its blocking form; an error is the logic's to handle, as a value is."""
    try:
        if isinstance(step, Together):
            return Outcome(True, _together(step))
        return Outcome(True, step.sync() if step.timeout is None else _within(step.sync, step.timeout))
    except Exception as error:
        return Outcome(True, error=error)


async def _amade(step: Step) -> Outcome[Any]:
    try:
        if isinstance(step, Together):
            return Outcome(True, await _atogether(step))
        work = step.async_() if step.timeout is None else asyncio.wait_for(step.async_(), step.timeout)
        return Outcome(True, await work)
    except Exception as error:
        return Outcome(True, error=error)


def _within(function: Callable[[], T], timeout: float) -> T:
    """function() in a thread of its own, waited on for `timeout` seconds.

    A blocking call cannot be interrupted, and some never return on their own (a chat model without a
    timeout of its own, a hung connection): past the bound the caller goes on and the thread is left to
    finish. A thread per call, not a pool: an abandoned call must not hold a worker others wait for, and the
    calls bounded here (LLM requests) take far longer than starting a thread.
    """
    outcome: futures.Future[T] = futures.Future()
    context = contextvars.copy_context()  # the caller's LangChain callbacks and tracing go along

    def work() -> None:
        try:
            outcome.set_result(context.run(function))
        except BaseException as error:
            outcome.set_exception(error)

    threading.Thread(target=work, name="agent-retrieval-bounded-call", daemon=True).start()
    return outcome.result(timeout)  # raises TimeoutError at the bound


def _together(step: Together) -> list[Outcome[Any]]:
    # Each branch runs with a copy of the caller's context variables (LangChain callbacks, tracing).
    pending = [step.pool.submit(contextvars.copy_context().run, run, branch) for branch in step.branches]
    futures.wait(pending, timeout=step.deadline)
    outcomes = [_outcome(future) for future in pending]
    for future in pending:
        future.cancel()
    return outcomes


async def _atogether(step: Together) -> list[Outcome[Any]]:
    tasks = [asyncio.ensure_future(arun(branch)) for branch in step.branches]
    try:
        await asyncio.wait(tasks, timeout=step.deadline)
        return [_outcome(task) for task in tasks]
    finally:
        for task in tasks:
            task.cancel()


def _outcome(future: futures.Future[Any] | asyncio.Future[Any]) -> Outcome[Any]:
    if not future.done() or future.cancelled():
        return Outcome(False)
    error = future.exception()
    return Outcome(True, error=error) if error is not None else Outcome(True, future.result())
