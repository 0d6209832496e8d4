"""Work on a document's text in a process of its own, under a deadline that can stop it.

A server answers many users from one process: work on one caller's text there holds the interpreter's lock,
and a pattern call or a parser cannot be interrupted. Here the work runs in a child process forked from a
fork server that has the ingest modules imported already (a few milliseconds a call); the calling thread
waits on a pipe, which lets every other request run, and a child still working at the deadline is killed.
Used for a caller's documents (chunking) and for reStructuredText, whose parser, docutils, takes quadratic
time on some input (thousands of comments in a row).
"""

from __future__ import annotations

import functools
import multiprocessing
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from agent_retrieval.errors import AgentRetrievalError, InvalidRequest
from agent_retrieval.models import Chunk, Document

T = TypeVar("T")
CALLER_CHUNKING_SECONDS = 30.0  # the most a caller's documents may take to chunk; 2 M characters take ~2 s


class Overtime(Exception):
    """The work was still running at its deadline, and was stopped."""


def run_apart(function: Callable[..., T], args: tuple[Any, ...], seconds: float) -> T:
    """function(*args) in a child process killed after `seconds` (Overtime). An AgentRetrievalError it
    raises comes back as InvalidRequest with its message; any other failure as InvalidRequest naming it."""
    if multiprocessing.current_process().daemon:  # a daemon may not start processes: the work runs here
        return function(*args)
    context = _context()
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_run_and_send, args=(function, args, sending), daemon=True)
    child.start()
    sending.close()  # the child holds the only writing end: its exit ends the pipe
    try:
        if not receiving.poll(seconds):
            raise Overtime
        outcome, value = receiving.recv()
    except EOFError:
        raise InvalidRequest(f"the process doing the work stopped (exit code {child.exitcode})") from None
    finally:
        child.kill()
        child.join()
        receiving.close()
    if outcome != "done":
        raise InvalidRequest(str(value))
    done: T = value
    return done


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


def _run_and_send(function: Callable[..., Any], args: tuple[Any, ...], sending: Connection) -> None:
    try:
        result: tuple[str, Any] = ("done", function(*args))
    except AgentRetrievalError as error:
        result = ("refused", str(error))
    except Exception as error:  # sent back as the caller's error: a traceback would reach no one
        result = ("failed", f"the work failed ({type(error).__name__})")
    sending.send(result)
    sending.close()


@functools.cache
def _context() -> Any:
    """The fork server's context (children forked from a process that imported the ingest modules once),
    or spawn where there is none (Windows)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, "agent_retrieval.ingest.chunking", "docutils.core"])
    return context
