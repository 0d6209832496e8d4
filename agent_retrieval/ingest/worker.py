"""Work on a document's text under a deadline that can stop it.

- `run_apart`: in a new Python process (`python -m agent_retrieval.ingest.worker`, half a second to start),
  given the function and its arguments pickled on its standard input. A server answers many users from one
  process: work there holds the interpreter's lock, and a pattern call cannot be interrupted. The calling
  thread waits on a pipe, which lets every other request run, and a child still working at the deadline is
  killed. A new interpreter, not multiprocessing: its fork server and spawn run the caller's main script
  again in the child, and a script that ingests at import time would start over. Used for a caller's
  documents (chunking).
- `run_within`: in this thread, stopped at the deadline between two Python function calls (a trace hook);
  for pure-Python work that is not the server's to isolate but may take quadratic time: docutils, on
  thousands of comments in a row.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, TypeVar

from agent_retrieval.errors import AgentRetrievalError, InvalidRequest
from agent_retrieval.models import Chunk, Document

T = TypeVar("T")
CALLER_CHUNKING_SECONDS = 30.0  # the most a caller's documents may take to chunk; 2 M characters take ~2 s


class Overtime(BaseException):
    """The work was still running at its deadline, and was stopped. A BaseException, so that no library's
    `except Exception` on the way out takes it for an error of its own."""


def run_apart(function: Callable[..., T], args: tuple[Any, ...], seconds: float) -> T:
    """function(*args) (a module-level function, and arguments that pickle) in a new process killed after
    `seconds` (Overtime). An AgentRetrievalError it raises comes back as InvalidRequest with its message; any
    other failure as InvalidRequest naming it."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__],
            input=pickle.dumps((function, args), protocol=pickle.HIGHEST_PROTOCOL),
            capture_output=True,
            timeout=seconds,
            check=False,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)},
        )
    except subprocess.TimeoutExpired:
        raise Overtime from None
    if done.returncode != 0 or not done.stdout:
        raise InvalidRequest(f"the process doing the work stopped (exit code {done.returncode})")
    outcome, value = pickle.loads(done.stdout)  # our own child's answer
    if outcome != "done":
        raise InvalidRequest(str(value))
    result: T = value
    return result


def run_within(
    function: Callable[..., T], args: tuple[Any, ...], seconds: float, *, modules: tuple[str, ...]
) -> T:
    """function(*args) in this thread, stopped with Overtime at the first call into one of `modules` (by
    name prefix) after `seconds` of this thread's own CPU time: the work the input costs, not the time a
    busy machine gives other processes or requests. Only there: a call elsewhere may be a garbage
    collector's callback, where the exception would be swallowed and the watch with it. A tracer set before
    (a debugger's, coverage's) is set again afterwards."""
    deadline = time.thread_time() + seconds
    calls = 0

    def watch(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal calls
        calls += 1
        # The thread's clock is a system call, ten times the cost of the monotonic one: read at every 64th
        # call, or it alone would add half the time the work takes.
        if (
            calls % 64 == 0
            and time.thread_time() > deadline
            and str(frame.f_globals.get("__name__", "")).startswith(modules)
        ):
            raise Overtime
        return None  # no line events: only calls are watched

    before = sys.gettrace()
    sys.settrace(watch)
    try:
        return function(*args)
    finally:
        sys.settrace(before)


def chunked_apart(
    documents: Sequence[Document], chunk_size: int, chunk_overlap: int, seconds: float
) -> list[list[Chunk]]:
    """Each document's chunks, made in a child process that is killed after `seconds`: then InvalidRequest
    says the time was spent, and nothing is written."""
    if not documents:
        return []
    try:
        return run_apart(_chunked, (list(documents), chunk_size, chunk_overlap), seconds)
    except Overtime:
        raise InvalidRequest(
            f"chunking these documents took longer than the {seconds:g} s one caller's write may take; "
            "send fewer or shorter documents"
        ) from None


def _chunked(documents: list[Document], chunk_size: int, chunk_overlap: int) -> list[list[Chunk]]:
    from agent_retrieval.ingest.chunking import chunk_document

    return [chunk_document(document, chunk_size, chunk_overlap) for document in documents]


def _serve() -> None:
    """The child: one function call read from standard input, its outcome written to standard output."""
    function, args = pickle.loads(sys.stdin.buffer.read())  # from the parent that started us
    answer, sys.stdout = sys.stdout.buffer, sys.stderr  # what the work prints must not mix with the answer
    try:
        result: tuple[str, Any] = ("done", function(*args))
    except AgentRetrievalError as error:
        result = ("refused", str(error))
    except Exception as error:  # sent back as the caller's error: a traceback would reach no one
        result = ("failed", f"the work failed ({type(error).__name__})")
    answer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":
    _serve()
