"""A caller's documents chunked in a process of their own, under a deadline that can stop it.

Chunking is linear in a document's size (tests/unit/test_linear_time.py), but a server answers many users
from one process: work on one caller's text there holds the interpreter's lock, and a pattern call cannot be
interrupted. Here the work runs in a child process forked from a server process that has the chunker
imported already (a few milliseconds a call); the caller's thread waits on a pipe, which lets every other
request run, and a child still working at the deadline is killed.
"""

from __future__ import annotations

import functools
import multiprocessing
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from agent_retrieval.errors import InvalidRequest
from agent_retrieval.ingest.chunking import chunk_document
from agent_retrieval.models import Chunk, Document

CALLER_CHUNKING_SECONDS = 30.0  # the most a caller's documents may take to chunk; 2 M characters take ~2 s


def chunked_apart(
    documents: Sequence[Document], chunk_size: int, chunk_overlap: int, seconds: float
) -> list[list[Chunk]]:
    """Each document's chunks, made in a child process that is killed after `seconds`: then InvalidRequest
    says the time was spent, and nothing is written."""
    if not documents:
        return []
    if multiprocessing.current_process().daemon:  # a daemon may not start processes: chunk here
        return [chunk_document(document, chunk_size, chunk_overlap) for document in documents]
    context = _context()
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(
        target=_chunk_and_send, args=(list(documents), chunk_size, chunk_overlap, sending), daemon=True
    )
    child.start()
    sending.close()  # the child holds the only writing end: its exit ends the pipe
    try:
        if not receiving.poll(seconds):
            raise InvalidRequest(
                f"chunking these documents took longer than the {seconds:g} s one caller's write may "
                "take; send fewer or shorter documents"
            )
        outcome, value = receiving.recv()
    except EOFError:
        raise InvalidRequest(
            f"the process chunking these documents stopped (exit code {child.exitcode}); send fewer "
            "or shorter documents"
        ) from None
    finally:
        child.kill()
        child.join()
        receiving.close()
    if outcome == "error":
        raise InvalidRequest(str(value))
    chunks: list[list[Chunk]] = value
    return chunks


def _chunk_and_send(
    documents: list[Document], chunk_size: int, chunk_overlap: int, sending: Connection
) -> None:
    try:
        result: tuple[str, Any] = (
            "chunks",
            [chunk_document(document, chunk_size, chunk_overlap) for document in documents],
        )
    except Exception as error:  # sent back as the caller's error: a traceback would reach no one
        result = ("error", f"the documents could not be chunked ({type(error).__name__})")
    sending.send(result)
    sending.close()


@functools.cache
def _context() -> Any:
    """The fork server's context (children forked from a process that imported the chunker once), or spawn
    where there is none (Windows)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context
