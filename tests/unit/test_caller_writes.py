"""A caller's writes (index_document, the indexer graph) share a server fairly: they take turns, the next
turn to whoever wrote least recently, and each embeds for a bounded time, storing the rest unembedded."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from agent_retrieval.context import Context
from agent_retrieval.ingest import IngestReport, ingest_for_caller, pipeline
from agent_retrieval.ingest.turns import NoTurn, Turns
from agent_retrieval.ingest.worker import chunked_apart
from agent_retrieval.models import ChunkSearchRequest, Document
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from tests.conftest import WordHashEmbeddings


def test_the_next_turn_goes_to_whoever_wrote_least_recently():
    turns, order, holding = Turns(), [], threading.Event()
    with turns.turn("carol", 1):
        pass  # carol has written before

    def write(writer: str, started: threading.Event | None = None) -> None:
        with turns.turn(writer, 10):
            order.append(writer)
            if started is not None:
                started.set()
                holding.wait(10)

    first_started = threading.Event()
    first = threading.Thread(target=write, args=("mallory", first_started))
    first.start()
    first_started.wait(10)
    waiting = []
    for writer in ["carol", "bob"]:  # carol comes first, but bob has never written
        waiting.append(threading.Thread(target=write, args=(writer,)))
        waiting[-1].start()
        while len(turns._waiting) < len(waiting):
            time.sleep(0.01)
    refused = pytest.raises(NoTurn, match="an earlier write of the same caller is still running")
    with refused, turns.turn("carol", 10):  # one turn held or awaited per writer: refused at once
        pass
    holding.set()
    for thread in [first, *waiting]:
        thread.join(10)
    assert order == ["mallory", "bob", "carol"]


def test_a_turn_that_does_not_come_in_time_is_refused_and_lets_the_next_one_go():
    turns = Turns()
    with turns.turn("mallory", 1):
        with pytest.raises(NoTurn), turns.turn("bob", 0.05):
            pass
        assert turns._waiting == []
    with turns.turn("bob", 0.05):
        pass


class SlowEmbeddings(WordHashEmbeddings):
    def embed_documents(self, texts):
        time.sleep(0.3)
        return super().embed_documents(texts)


def test_a_callers_write_embeds_for_its_time_and_stores_the_rest_for_keyword_search(tmp_path):
    content = "\n\n".join(f"Paragraph {n} about the Zephyrine quokka sanctuary. " * 8 for n in range(200))
    # The write's time counts its chunking in a new process too (1.2 s on a slow machine): a second more
    # than that embeds a few of its 13 batches of 0.3 s, never all.
    started = time.monotonic()
    chunked_apart([Document(id="d", title="Sanctuary", content=content)], 1000, 100, 60)
    seconds = round(time.monotonic() - started + 1.0, 1)
    context = Context(
        db_path=str(tmp_path / "store.db"), caller_write_seconds=seconds, embedding_batch_size=8
    )
    embedder = Embedder(SlowEmbeddings(), "test/word-hash", batch_size=8)
    with Retrieval(context, embedder=embedder) as retrieval:
        report = ingest_for_caller(
            [("documents[0]", {"title": "Sanctuary", "content": content})],
            retrieval.store,
            embedder,
            context,
            source="indexer",
        )
        hits = retrieval.search(ChunkSearchRequest(query="Paragraph 199 Zephyrine", top_k=1), "chunks").hits
    assert report.written == 1 and report.embedded > 0 and report.unembedded > 0
    spent = f"the {seconds:g} s one caller's write may embed for are spent (caller_write_seconds)"
    assert spent in report.errors[0]
    assert hits and "Paragraph 199" in hits[0].content  # stored whole: keyword search finds the last part


# --- a caller's text is chunked apart from the server, under a deadline ---------------------------------


def caller_write(tmp_path, content: str) -> tuple[IngestReport, Retrieval]:
    context = Context(db_path=str(tmp_path / "store.db"))
    embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    retrieval = Retrieval(context, embedder=embedder)
    report = ingest_for_caller(
        [("documents[0]", {"title": "Manual", "content": content})],
        retrieval.store,
        embedder,
        context,
        source="indexer",
    )
    return report, retrieval


def test_a_callers_document_is_chunked_in_a_process_of_its_own(tmp_path, monkeypatch):
    """Who sets it: a caller (index_document, an indexer run). What bounds it: the chunking runs in a child
    process, so this process's chunker, made to fail here, is never called, and nothing holds its lock."""

    def here(*args, **kwargs):
        raise AssertionError("chunked in the server's own process")

    monkeypatch.setattr(pipeline, "chunk_document", here)
    report, retrieval = caller_write(tmp_path, "# Valves\n\nValve 7 opens at 40 bar.")
    with retrieval:
        hits = retrieval.search(ChunkSearchRequest(query="valve 7", top_k=1), "chunks").hits
    assert report.written == 1 and not report.errors
    assert hits and hits[0].heading_path == "Manual > Valves"
    assert not multiprocessing.active_children()  # the child is gone


def test_chunking_past_its_deadline_is_stopped_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "CALLER_CHUNKING_SECONDS", 0.001)  # over before the child has started
    report, retrieval = caller_write(tmp_path, "Valve 7 opens at 40 bar. " * 40_000)
    with retrieval:
        assert retrieval.store.stats().documents == 0
    assert report.written == 0
    assert report.errors == [
        "ingest stopped: chunking these documents took longer than the 0.001 s one caller's write may take; "
        "send fewer or shorter documents"
    ]
    assert not multiprocessing.active_children()  # killed, not left running


def test_a_store_that_refuses_every_write_is_answered_before_any_document_is_chunked(tmp_path, monkeypatch):
    """Who sets it: a signed-in user on Supabase, who may only search. What bounds it: the refusal comes
    from the store's known permissions, after the cheap checks of each document's fields, before chunking."""
    context = Context(db_path=str(tmp_path / "store.db"))
    embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    with Retrieval(context, embedder=embedder) as retrieval:
        monkeypatch.setattr(
            type(retrieval.store), "write_refusal", property(lambda self: "users may only search")
        )
        monkeypatch.setattr(pipeline, "chunked_apart", lambda *a: pytest.fail("documents were chunked"))
        report = ingest_for_caller(
            [
                ("documents[0]", {"title": "Manual", "content": "x" * 1_000_000}),
                ("documents[1]", {"title": "Notes", "content": "Ours.", "metadata": {"public": True}}),
            ],
            retrieval.store,
            embedder,
            context,
            source="indexer",
        )
    assert report.written == 0 and report.errors[1:] == ["not written: users may only search"]
    assert report.errors[0].startswith("documents[1]: ") and "public" in report.errors[0]
