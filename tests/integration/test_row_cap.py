"""PostgREST's row cap: a real PostgREST whose db-max-rows is 25 (hosted Supabase's is 1000), in front of the
session's Postgres, and more rows than that behind every answer that can grow. PostgREST cuts a result at the
cap without a word, so each of these once came back short: summarize (with truncated=False), change detection
(unchanged documents rewritten), vector reuse (stored vectors embedded again), reembed's pending rows, and the
unknown ids of a scope.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import pytest

from agent_retrieval.context import Context
from agent_retrieval.ingest import ingest, reembed
from agent_retrieval.models import Chunk, ChunkSearchRequest, Document
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.stores.postgres import PostgresStore
from agent_retrieval.stores.supabase import SupabaseStore
from tests.conftest import WordHashEmbeddings
from tests.stack import Gateway, PostgREST, start_gateway, start_postgrest

CAP = 25
SCHEMA = "ar_capped"
DIM = 16
MODEL = "test/word-hash"
DOCUMENTS = 2 * CAP + 10  # notes, one chunk each
LONG_CHUNKS = 3 * CAP  # the chunks of one long document


@pytest.fixture(scope="module")
def capped(supabase_stack, tmp_path_factory) -> Iterator[Gateway]:
    """A second PostgREST on the session's Postgres, capped at CAP rows, behind a gateway taking the stack's
    keys."""
    stack = supabase_stack
    stack.postgres.execute(f"drop schema if exists {SCHEMA} cascade")
    PostgresStore(stack.postgres.dsn, schema=SCHEMA).init(DIM)
    rest: PostgREST = start_postgrest(
        stack.postgres,
        schemas=[SCHEMA],
        jwt_secret=stack.jwt_secret,
        folder=tmp_path_factory.mktemp("postgrest-capped"),
        max_rows=CAP,
    )
    gateway = start_gateway(rest.url, anon_key=stack.anon_key, service_key=stack.service_key)
    yield gateway
    gateway.stop()
    rest.stop()


@pytest.fixture
def service(capped, supabase_stack) -> Iterator[SupabaseStore]:
    """The service role writing tenant acme through the capped API, on an emptied schema."""
    supabase_stack.postgres.empty_store(SCHEMA)
    with SupabaseStore(capped.url, supabase_stack.service_key, schema=SCHEMA, tenant="acme") as store:
        yield store


@pytest.fixture
def embeddings() -> WordHashEmbeddings:
    return WordHashEmbeddings(size=DIM)


def notes() -> list[Document]:
    # a heading, so a note's chunk (heading path + text) and the note (title + text) are two texts to embed
    return [
        Document(f"note-{n:03d}", f"Note {n}", f"## Week {n}\n\nThe rota of week {n}.")
        for n in range(DOCUMENTS)
    ]


def the_long_document() -> tuple[Document, list[Chunk]]:
    doc = Document("long", "The long handbook", "A handbook of many sections.", content_hash="long")
    return doc, [
        Chunk(f"long#{n}", "long", n, f"Section {n} of the handbook.", "The long handbook")
        for n in range(LONG_CHUNKS)
    ]


def reader(capped, stack, **settings) -> Context:
    """A signed-in user of acme, through the capped API."""
    return Context(
        supabase_url=capped.url,
        supabase_key=stack.anon_key,
        db_schema=SCHEMA,
        supabase_user_token=stack.user_token("alice", tenant="acme"),
        **settings,
    )


@pytest.mark.parametrize("path", ["sync", "async"])
@pytest.mark.parametrize(
    ("most", "returned", "truncated"),
    [
        (LONG_CHUNKS + 10, LONG_CHUNKS, False),
        (LONG_CHUNKS, LONG_CHUNKS, False),
        (LONG_CHUNKS - 1, LONG_CHUNKS - 1, True),
        (CAP, CAP, True),
    ],
)
def test_summarize_reads_past_the_cap_and_says_truncated_exactly_when_it_cut(
    capped, supabase_stack, service, embeddings, path, most, returned, truncated
):
    doc, chunks = the_long_document()
    service.upsert([doc], chunks, MODEL)
    request = ChunkSearchRequest(query="", query_type="summarize", document_ids=["long"])
    with Retrieval(
        reader(capped, supabase_stack, summarize_max_chunks=most), embedder=Embedder(embeddings, MODEL)
    ) as retrieval:
        result = (
            retrieval.search(request, "chunks")
            if path == "sync"
            else asyncio.run(retrieval.asearch(request, "chunks"))
        )
    assert [h.ordinal for h in result.hits] == list(range(returned))  # in reading order, none twice
    assert result.truncated is truncated


def test_an_unchanged_reingest_past_the_cap_writes_and_embeds_nothing(service, embeddings):
    embedder = Embedder(embeddings, MODEL)
    first = ingest(notes(), service, embedder, progress=False)
    assert (first.written, first.embedded) == (DOCUMENTS, 2 * DOCUMENTS)
    calls = embeddings.document_calls
    again = ingest(notes(), service, embedder, progress=False)
    assert (again.unchanged, again.written, again.embedded) == (DOCUMENTS, 0, 0)
    assert embeddings.document_calls == calls
    assert len(service.document_states([d.id for d in notes()] + ["absent"])) == DOCUMENTS


def test_stored_vectors_are_reused_past_the_cap(supabase_stack, service, embeddings):
    embedder = Embedder(embeddings, MODEL)
    ingest(notes(), service, embedder, progress=False)
    hashes = [
        h
        for (h,) in supabase_stack.postgres.execute(
            f"select text_hash from {SCHEMA}.documents union all select text_hash from {SCHEMA}.chunks"
        )
    ]
    assert len(service.vectors_by_hash(hashes, MODEL)) == len(set(hashes)) == 2 * DOCUMENTS
    # the same texts under other ids: every vector is found, none embedded again
    copies = [Document(f"copy-{d.id}", d.title, d.content) for d in notes()]
    report = ingest(copies, service, embedder, progress=False)
    assert (report.written, report.embedded, report.reused) == (DOCUMENTS, 0, 2 * DOCUMENTS)


def test_reembed_takes_whole_batches_past_the_cap(service, embeddings):
    ingest(notes(), service, Embedder(embeddings, MODEL), progress=False)
    doc, chunks = the_long_document()
    service.upsert([doc], chunks, MODEL)  # stored without vectors: reembed backfills them
    assert len(service.pending_embeddings("chunks", "test/other", 100)) == 100
    other = WordHashEmbeddings(size=DIM)
    report = reembed(service, Embedder(other, "test/other", batch_size=1000), batch_size=100, progress=False)
    rows = {"documents": DOCUMENTS + 1, "chunks": DOCUMENTS + LONG_CHUNKS}
    assert report.embedded == sum(rows.values())
    assert other.document_calls == sum(math.ceil(n / 100) for n in rows.values())  # one call per full batch
    stats = service.stats()
    assert (stats.embedding_model, stats.documents_missing_embeddings, stats.chunks_missing_embeddings) == (
        "test/other",
        0,
        0,
    )


@pytest.mark.parametrize("path", ["sync", "async"])
def test_every_unknown_id_of_a_scope_is_named_past_the_cap(capped, supabase_stack, service, path):
    doc, chunks = the_long_document()
    service.upsert([doc], chunks, MODEL)
    asked = [f"missing-{n}" for n in range(2 * CAP)] + ["long"]
    with SupabaseStore(
        capped.url,
        supabase_stack.anon_key,
        schema=SCHEMA,
        user_token=supabase_stack.user_token("alice", tenant="acme"),
    ) as user:
        unknown = (
            user.unknown_documents(asked) if path == "sync" else asyncio.run(user.aunknown_documents(asked))
        )
    assert unknown == asked[:-1]


def test_pages_and_batches_of_any_size_add_up_to_the_whole_answer(
    monkeypatch, supabase_stack, service, embeddings
):
    """The same answers when every page and batch is smaller than the cap: each call's cursor or batch picks
    up exactly where the last one stopped, on the sync and the async path."""
    ingest(notes(), service, Embedder(embeddings, MODEL), progress=False)
    doc, chunks = the_long_document()
    service.upsert([doc], chunks, MODEL)
    for name in ("PAGE_ROWS", "IDS_PER_CALL", "HASHES_PER_CALL"):
        monkeypatch.setattr(f"agent_retrieval.stores.rpc.{name}", 7)
    everything = list(range(LONG_CHUNKS))
    assert [h.ordinal for h in service.document_chunks(["long"], 1000)] == everything
    assert [h.ordinal for h in asyncio.run(service.adocument_chunks(["long"], 1000))] == everything
    assert [h.ordinal for h in service.document_chunks(["long"], 10)] == everything[
        :10
    ]  # never past the limit
    ids = [d.id for d in notes()]
    assert sorted(service.document_states(ids)) == ids
    hashes = [
        h
        for (h,) in supabase_stack.postgres.execute(
            f"select text_hash from {SCHEMA}.documents where id <> 'long' union all "
            f"select text_hash from {SCHEMA}.chunks where document_id <> 'long'"
        )
    ]
    assert len(service.vectors_by_hash(hashes, MODEL)) == 2 * DOCUMENTS
