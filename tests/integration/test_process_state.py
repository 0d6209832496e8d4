"""One owner of process state (agent_retrieval.core.process): a worker forked from a process that used every
store, the search threads, the local model and a held write turn works on its own, through one fork hook."""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import pytest

from agent_retrieval.context import Context, EmbeddingSettings
from agent_retrieval.core.process import PROCESS
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.turns import NoTurn, shared_turns
from agent_retrieval.models import Document, SearchRequest
from agent_retrieval.providers.embeddings import make_embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.stores.postgres import PostgresStore
from agent_retrieval.stores.supabase import SupabaseStore

SCHEMA = "ar_process"
QUESTION = "When is the tenancy deposit returned?"
DOCUMENTS = [
    Document("deposit", "Tenancy deposits", "The tenancy deposit is returned within ten days of agreement."),
    Document("fees", "Fees", "Sales commission is 1.2% of the agreed price, payable on completion."),
]
_PARENTS: list[Retrieval] = []  # what the parent made, inherited by the child


def _searches() -> list[list[str]]:
    """Each of the parent's Retrievals asked once, sync and async."""
    import asyncio

    request = SearchRequest(query=QUESTION, top_k=1)
    found = []
    for retrieval in _PARENTS:
        found.append([h.document_id for h in retrieval.search(request, "chunks").hits])
        found.append([h.document_id for h in asyncio.run(retrieval.asearch(request, "chunks")).hits])
    return found


def _in_the_child() -> dict[str, Any]:
    try:
        with shared_turns().turn("child-writer", 2.0):  # the parent's holder never hands it back here
            turn = "taken"
    except NoTurn:
        turn = "refused"
    return {"turn": turn, "found": _searches()}


@pytest.mark.slow
def test_a_forked_worker_of_a_process_that_used_everything_works_on_its_own(tmp_path, supabase_stack):
    supabase_stack.postgres.execute(f"drop schema if exists {SCHEMA} cascade")
    embedder = make_embedder(EmbeddingSettings())  # the local model, loaded in the parent
    PostgresStore(supabase_stack.postgres.dsn, schema=SCHEMA).init(len(embedder.embed_query("dimension")))
    supabase_stack.postgrest.reload_schema()
    context = Context(db_path=str(tmp_path / "store.db"))
    stores = [
        None,  # the embedded store of `context`
        PostgresStore(supabase_stack.postgres.dsn, schema=SCHEMA),
        SupabaseStore(supabase_stack.url, supabase_stack.service_key, schema=SCHEMA),
    ]
    _PARENTS[:] = [Retrieval(context, store=store, embedder=embedder) for store in stores]
    for retrieval in _PARENTS[:2]:  # Supabase reads what Postgres wrote: the same database
        ingest(DOCUMENTS, retrieval.store, embedder, context, progress=False)
    expected = [["deposit"]] * 6
    assert _searches() == expected  # the parent's pools, caches, threads and clients are all open

    released, holding = threading.Event(), threading.Event()

    def hold_a_turn() -> None:
        with shared_turns().turn("parent-writer", 5.0):
            holding.set()
            released.wait(30)

    holder = threading.Thread(target=hold_a_turn)
    holder.start()
    holding.wait(10)
    try:
        with multiprocessing.get_context("fork").Pool(1) as worker:
            child = worker.apply(_in_the_child)
    finally:
        released.set()
        holder.join()
    assert child == {"turn": "taken", "found": expected}
    assert _searches() == expected  # and the parent's own still work

    PROCESS.close()  # releases pools and threads; used again, they are made anew
    assert _searches() == expected
    for retrieval in _PARENTS:
        retrieval.close()
