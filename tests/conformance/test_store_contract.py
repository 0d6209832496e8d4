"""The Store contract: every backend passes one suite (embedded SQLite, Postgres by DSN, Supabase by RPC)."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent_retrieval import ingest_paths
from agent_retrieval.context import Context
from agent_retrieval.errors import EmbeddingModelMismatch, InvalidRequest
from agent_retrieval.ingest import ingest
from agent_retrieval.models import Chunk, Document, Hit
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.stores import SQLiteStore, Store
from agent_retrieval.stores.base import DocumentState
from agent_retrieval.stores.postgres import PostgresStore
from agent_retrieval.stores.supabase import SupabaseStore
from tests.conftest import WordHashEmbeddings
from tests.unit.test_argument_rules import NOT_WHOLE_NUMBERS

MODEL = "test/axes"
DIM = 4


def sqlite_store(request: pytest.FixtureRequest, folder: Path) -> Store:
    return SQLiteStore(folder / "contract.db")


def sqlite_graph_store(request: pytest.FixtureRequest, folder: Path) -> Store:
    """The embedded store with every unscoped vector search going through its HNSW index."""
    return SQLiteStore(folder / "contract.db", index_rows=1)


def postgres_store(request: pytest.FixtureRequest, folder: Path) -> Store:
    """A schema of its own per test (named after the test's folder, so reopening finds it)."""
    pg = request.getfixturevalue("postgres")
    store = PostgresStore(pg.dsn, schema="c_" + hashlib.sha1(str(folder).encode()).hexdigest()[:16])
    store.init(DIM)
    return store


def supabase_store(request: pytest.FixtureRequest, folder: Path) -> Store:
    """The service role through the gateway and PostgREST, on a schema emptied before each test."""
    stack = request.getfixturevalue("supabase_contract")
    return SupabaseStore(stack.url, stack.service_key, schema=CONTRACT_SCHEMA)


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], Store]] = {
    "sqlite": sqlite_store,
    "sqlite-graph": sqlite_graph_store,
    "postgres": postgres_store,
    "supabase": supabase_store,
}
CONTRACT_SCHEMA = "ar_contract"


@pytest.fixture(scope="session")
def supabase_contract_schema(supabase_stack):
    PostgresStore(supabase_stack.postgres.dsn, schema=CONTRACT_SCHEMA).init(DIM)
    supabase_stack.postgrest.reload_schema()
    return supabase_stack


@pytest.fixture
def supabase_contract(supabase_contract_schema):
    """The stack, with the contract schema emptied (rows, statistics and the recorded model)."""
    supabase_contract_schema.postgres.empty_store(CONTRACT_SCHEMA)
    return supabase_contract_schema


@pytest.fixture(params=sorted(BACKENDS))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """Opens the backend's store on the same location (call twice to test reopening)."""
    opened: list[Store] = []

    def make() -> Store:
        opened.append(BACKENDS[request.param](request, tmp_path))
        return opened[-1]

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(make_store: Callable[[], Store]) -> Store:
    store = make_store()
    store.upsert(*corpus(), MODEL)
    return store


def axis(*weights: float) -> np.ndarray:
    v = np.asarray(weights + (0.0,) * (DIM - len(weights)), dtype=np.float32)
    return v / np.linalg.norm(v)


def corpus() -> tuple[list[Document], list[Chunk]]:
    """Three documents whose vectors point along known axes, so the expected ranking is exact."""
    docs = [
        Document(
            "fees",
            "Fee Schedule",
            "Commission and referral fees are disclosed in writing.",
            {"category": "policy", "year": 2023},
            "policies/fees.md",
            content_hash="h1",
            text_hash="t-fees",
            embedding=axis(1),
        ),
        Document(
            "banda",
            "14 Banda Lane",
            "The tenancy deposit of £2,100 is protected.",
            {"category": "property", "year": 2024},
            content_hash="h2",
            text_hash="t-banda",
            embedding=axis(0, 1),
        ),
        Document(
            "gifts",
            "Gifts and Hospitality",
            "Staff may accept gifts worth up to £50.",
            {"category": "policy", "year": "2021"},
            content_hash="h3",
            text_hash="t-gifts",
            embedding=axis(0, 0, 1),
        ),
    ]
    chunks = [
        Chunk(
            "fees#0",
            "fees",
            0,
            "Commission must be disclosed to the vendor in writing.",
            "Fee Schedule > Lettings",
            {"category": "policy", "year": 2023},
            "c-fees0",
            axis(1, 0.1),
        ),
        Chunk(
            "fees#1",
            "fees",
            1,
            "Sales commission is 1.2% of the price.",
            "Fee Schedule > Sales",
            {"category": "policy", "year": 2023},
            "c-fees1",
            axis(1, 0, 0.3),
        ),
        Chunk(
            "banda#0",
            "banda",
            0,
            "The deposit of £2,100 for Banda Lane is protected.",
            "14 Banda Lane",
            {"category": "property", "year": 2024},
            "c-banda0",
            axis(0.2, 1),
        ),
        Chunk(
            "gifts#0",
            "gifts",
            0,
            "Gifts above £50 must be declined and recorded.",
            "Gifts and Hospitality",
            {"category": "policy", "year": "2021"},
            "c-gifts0",
            axis(0, 0, 1),
        ),
    ]
    return docs, chunks


FEES_CHUNK = Hit("fees#0", "chunks", "fees", "Fee Schedule", "Commission must be disclosed.", ordinal=0)


def ids(hits: list) -> list[str]:
    return [h.id for h in hits]


def test_counts_and_model(store: Store):
    stats = store.stats()
    assert (stats.documents, stats.chunks) == (3, 4)
    assert (stats.embedding_model, stats.dimension) == (MODEL, DIM)
    assert (stats.documents_missing_embeddings, stats.chunks_missing_embeddings) == (0, 0)
    assert store.embedding_model() == (MODEL, DIM)


def test_vector_search_ranks_by_cosine_with_similarities(store: Store):
    hits = store.vector_search("chunks", axis(1), 3)
    assert ids(hits) == ["fees#0", "fees#1", "banda#0"]
    assert hits[0].vector_similarity == pytest.approx(float(axis(1, 0.1) @ axis(1)), abs=1e-6)
    assert hits[0].heading_path == "Fee Schedule > Lettings" and hits[0].title == "Fee Schedule"
    assert hits[0].document_id == "fees" and hits[0].ordinal == 0
    assert ids(store.vector_search("documents", axis(0, 1), 1)) == ["banda"]
    assert ids(store.vector_search("chunks", axis(1), 10, min_similarity=0.5)) == ["fees#0", "fees#1"]


def test_a_similarity_floor_below_the_scores_precision_still_holds(store: Store):
    # 1e-300 is 0 in float32: a floor compared at the vectors' precision would let 0.0 through
    hits = store.vector_search("chunks", axis(0, 0, 0, 1), 10, min_similarity=1e-300)
    assert all(hit.vector_similarity >= 1e-300 for hit in hits)


def test_filters_apply_inside_the_search_before_the_limit(store: Store):
    # the best vector match is a policy; filtered to property, k=1 must still return the property chunk
    assert ids(store.vector_search("chunks", axis(1), 1, filters={"category": "property"})) == ["banda#0"]
    assert ids(store.vector_search("chunks", axis(1), 5, filters={"category": ["property", "nothing"]})) == [
        "banda#0"
    ]
    assert ids(store.keyword_search("chunks", "deposit commission", 1, filters={"category": "property"})) == [
        "banda#0"
    ]


def test_numbers_and_their_text_match_each_other_in_filters(store: Store):
    assert set(ids(store.vector_search("documents", axis(1), 5, filters={"year": "2023"}))) == {"fees"}
    assert set(ids(store.vector_search("documents", axis(1), 5, filters={"year": 2021}))) == {"gifts"}
    assert set(ids(store.vector_search("documents", axis(1), 5, filters={"year": [2021, "2024"]}))) == {
        "gifts",
        "banda",
    }
    assert store.vector_search("documents", axis(1), 5, filters={"missing_key": "x"}) == []


def test_document_scope_applies_to_both_paths(store: Store):
    assert ids(store.vector_search("chunks", axis(1), 1, document_ids=["banda"])) == ["banda#0"]
    assert ids(store.keyword_search("chunks", "commission deposit", 5, document_ids=["banda"])) == ["banda#0"]
    assert store.vector_search("chunks", axis(1), 5, document_ids=[]) == []


@pytest.mark.parametrize("level", ["chunks", "documents"])
def test_a_search_without_rows_reads_them_for_the_hits_it_keeps(store: Store, level: str):
    """Ids and scores first, the rows of the few kept after (Retrieval fuses 100 candidates a side and
    returns a handful): the same hits, scores included, as a search that read every row."""
    for search, asearch, query in (
        (store.vector_search, store.avector_search, axis(1)),
        (store.keyword_search, store.akeyword_search, "commission deposit"),
    ):
        full = search(level, query, 5)
        bare = search(level, query, 5, rows=False)
        assert [(h.id, h.document_id, h.ordinal) for h in bare] == [
            (h.id, h.document_id, h.ordinal) for h in full
        ]
        assert store.with_rows(bare[::-1]) == full[::-1]  # in the order given
        assert run(store.awith_rows(run(asearch(level, query, 5, rows=False)))) == full
    elsewhere = replace(full[0], tenant="another-tenant", title="", content="")
    assert all(not hit.content for hit in store.with_rows([elsewhere]))  # another tenant's row is not read


def test_keyword_search_ranks_by_bm25_on_content_words(store: Store):
    hits = store.keyword_search("chunks", "What is the commission?", 5)
    assert set(ids(hits)) == {"fees#0", "fees#1"}
    assert all(h.keyword_score is not None for h in hits)
    assert hits[0].keyword_score >= hits[1].keyword_score
    assert ids(store.keyword_search("documents", "banda lane", 5)) == ["banda"]
    assert ids(store.keyword_search("chunks", "gift", 5)) == ["gifts#0"]  # stemming: gift ~ gifts
    assert len(store.keyword_search("chunks", "the and of", 5)) == 4  # only stopwords: search them after all


def test_the_best_keyword_hit_says_how_much_of_the_query_it_holds(store: Store):
    # fees#0 holds "commission" and "vendor" but not "deposit": a part of the query's idf, not all of it
    best = store.keyword_search("chunks", "commission vendor deposit", 5)[0]
    assert best.id == "fees#0" and 0.2 < best.keyword_coverage < 0.9
    assert store.keyword_search("chunks", "banda lane deposit", 5)[0].keyword_coverage == pytest.approx(1.0)
    # a word in no row is no evidence either way: it does not lower the coverage
    assert store.keyword_search("documents", "banda zyzzyva", 5)[0].keyword_coverage == pytest.approx(1.0)


def test_the_best_keyword_hit_counts_the_query_words_no_row_holds(store: Store):
    # what answerability reads (confidence.py): a question about something never stored asks for new words
    assert store.keyword_search("documents", "banda zyzzyva quuxplotz", 5)[0].unknown_terms == 2
    assert store.keyword_search("chunks", "commission vendor deposit", 5)[0].unknown_terms == 0
    # stopwords are not the query's words, and stemming finds a word's other forms
    assert store.keyword_search("chunks", "the gift of zyzzyva", 5)[0].unknown_terms == 1


SYNTAX = [
    '"unbalanced',
    "NEAR(commission deposit",
    "commission AND OR NOT",
    "(((",
    "*",
    "comm*",
    "'; DROP TABLE chunks; --",
    "title:commission",
    "^commission",
    "commission -deposit",
    "💥 ünïcödé",
    "",
    "   ",
]


@pytest.mark.parametrize("query", SYNTAX)
def test_search_syntax_in_keyword_queries_is_plain_text(store: Store, query: str):
    store.keyword_search("chunks", query, 5)
    store.keyword_search("documents", query, 5)
    assert (store.stats().documents, store.stats().chunks) == (3, 4)


def test_keyword_operators_are_words_not_syntax(store: Store):
    assert "fees#0" in ids(store.keyword_search("chunks", "commission NOT vendor", 5))


def test_upsert_replaces_a_document_and_all_its_chunks(store: Store):
    docs, chunks = corpus()
    fees = docs[0]
    fees.content = "Rewritten."
    store.upsert([fees], [chunks[0]], MODEL)
    assert (store.stats().documents, store.stats().chunks) == (3, 3)
    assert ids(store.document_chunks(["fees"], 10)) == ["fees#0"]
    assert store.keyword_search("chunks", "sales price", 5) == []  # the old chunk left the keyword index too


def test_upsert_refuses_chunks_without_their_document(make_store: Callable[[], Store]):
    store = make_store()
    docs, chunks = corpus()
    with pytest.raises(InvalidRequest, match="not in this batch"):
        store.upsert(docs[:1], chunks, MODEL)
    assert store.stats().documents == 0


def test_another_model_or_dimension_is_refused_with_a_pointer_to_reembed(store: Store):
    docs, _ = corpus()
    with pytest.raises(EmbeddingModelMismatch, match="agent-retrieval reembed"):
        store.upsert(docs[:1], [], "other/model")
    docs[0].embedding = np.ones(DIM + 1, dtype=np.float32)
    with pytest.raises(EmbeddingModelMismatch, match="dimension"):
        store.upsert(docs[:1], [], MODEL)
    with pytest.raises(EmbeddingModelMismatch, match="reembed"):
        store.vector_search("chunks", np.ones(DIM + 2, dtype=np.float32), 3)
    assert store.stats().documents == 3


def test_document_chunks_in_reading_order_and_unknown_ids(store: Store):
    assert ids(store.document_chunks(["gifts", "fees"], 10)) == ["gifts#0", "fees#0", "fees#1"]
    assert ids(store.document_chunks(["gifts", "fees"], 2)) == ["gifts#0", "fees#0"]
    assert store.unknown_documents(["fees", "nope", "x"]) == ["nope", "x"]


def test_chunk_neighbors_are_the_hits_own_documents_chunks_around_it(store: Store):
    fees0, fees1 = store.document_chunks(["fees"], 10)
    gifts0 = store.document_chunks(["gifts"], 1)[0]
    assert ids(store.chunk_neighbors([fees1], 1)) == ["fees#0", "fees#1"]  # not banda#0 nor gifts#0
    assert ids(store.chunk_neighbors([fees0], 3)) == ["fees#0", "fees#1"]
    assert ids(store.chunk_neighbors([gifts0, fees0], 1)) == ["gifts#0", "fees#0", "fees#1"]
    assert store.chunk_neighbors([replace(fees1, tenant="another-tenant")], 1) == []
    assert run(store.achunk_neighbors([fees1], 1)) == store.chunk_neighbors([fees1], 1)


def test_chunk_neighbors_are_read_for_chunk_hits_only_and_a_bounded_number(store: Store):
    document = store.document_chunks(["fees"], 1)[0]
    with pytest.raises(InvalidRequest, match="hits: only chunk hits have neighbours"):
        store.chunk_neighbors([replace(document, level="documents")], 1)
    with pytest.raises(InvalidRequest, match="hits: at most 100 passages at a time"):
        store.chunk_neighbors([document] * 101, 1)


def test_delete_removes_documents_with_their_chunks(store: Store):
    assert store.delete_documents(["fees", "never"]) == 1
    assert (store.stats().documents, store.stats().chunks) == (2, 2)
    assert store.keyword_search("chunks", "commission", 5) == []
    assert "fees#0" not in ids(store.vector_search("chunks", axis(1), 5))


def test_documents_from_a_source_lists_what_a_file_or_folder_was_stored_as(store: Store):
    docs, _ = corpus()
    extra = [
        Document(id="policies/old", title="Old", content="x", content_hash="h9", source="policies/old.md"),
        Document(id="elsewhere", title="E", content="y", content_hash="h8", source="policies-archive/e.md"),
    ]
    store.upsert(extra, [], MODEL)
    assert store.documents_from("policies/") == ["fees", "policies/old"]
    assert store.documents_from("policies/fees.md") == ["fees"]
    assert store.documents_from("policies") == ["elsewhere", "fees", "policies/old"]  # a prefix, not a folder
    assert store.documents_from("nowhere/") == []
    assert [d.id for d in docs if d.source is None] == ["banda", "gifts"]  # no source: never listed


def test_list_documents_by_id_prefix_with_their_chunks_and_source(store: Store):
    store.upsert(
        [
            Document(
                id="policies/old", title="Old", content="x", content_hash="h9", source="/d/policies/old.md"
            )
        ],
        [],
        MODEL,
    )
    listed = store.list_documents()
    assert [d.id for d in listed] == ["banda", "fees", "gifts", "policies/old"]
    fees = listed[1]
    assert (fees.title, fees.chunks, fees.source, fees.public) == (
        "Fee Schedule",
        2,
        "policies/fees.md",
        False,
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", fees.updated)
    assert [d.id for d in store.list_documents("policies/")] == ["policies/old"]
    assert [d.id for d in store.list_documents("", limit=2)] == ["banda", "fees"]
    assert store.list_documents("nope") == []


def test_get_documents_returns_whole_documents_in_the_order_asked(store: Store):
    docs, _ = corpus()
    got = store.get_documents(["gifts", "nope", "fees", "gifts"])
    assert [(d.id, d.title, d.content, d.metadata, d.source) for d in got] == [
        (d.id, d.title, d.content, d.metadata, d.source) for d in (docs[2], docs[0])
    ]
    assert store.get_documents([]) == []


def test_states_hashes_and_backfill(store: Store):
    states = store.document_states(["fees", "banda", "nope"])
    assert states == {
        "fees": DocumentState("h1", True, "policies/fees.md", False),
        "banda": DocumentState("h2", True, None, False),
    }
    found = store.vectors_by_hash(["c-fees0", "t-banda", "unknown"], MODEL)
    assert set(found) == {"c-fees0", "t-banda"}
    np.testing.assert_allclose(found["c-fees0"], axis(1, 0.1), rtol=1e-6)
    assert store.vectors_by_hash(["c-fees0"], "other/model") == {}

    docs, chunks = corpus()
    chunks[1].embedding = None
    store.upsert([docs[0]], chunks[:2], MODEL)
    assert store.document_states(["fees"])["fees"].embedded is False
    assert store.stats().chunks_missing_embeddings == 1
    assert "fees#1" not in ids(
        store.vector_search("chunks", axis(1), 5)
    )  # unembedded rows stay out of vector search
    assert "fees#1" in ids(store.keyword_search("chunks", "sales", 5))  # ... but keyword search finds them
    pending = store.pending_embeddings("chunks", MODEL, 10)
    assert ids(pending) == ["fees#1"] and pending[0].heading_path == "Fee Schedule > Sales"
    pending[0].embedding, pending[0].text_hash = axis(1, 0, 0.3), "c-fees1"
    store.set_embeddings("chunks", pending, MODEL)
    assert store.pending_embeddings("chunks", MODEL, 10) == []
    assert "fees#1" in ids(store.vector_search("chunks", axis(1), 5))
    assert store.document_states(["fees"])["fees"] == DocumentState("h1", True, "policies/fees.md", False)


def test_switching_models_after_a_full_reembed(store: Store):
    # Another model of the same dimension; a new dimension is backend-specific (a new schema on Postgres).
    assert len(store.pending_embeddings("documents", "new/model", 10)) == 3
    docs = store.pending_embeddings("documents", "new/model", 10)
    for doc in docs:
        doc.embedding = axis(0, 0, 0, 1)
    store.set_embeddings("documents", docs, "new/model")
    # mid-way, searches use only rows still holding the declared model's vectors, never mixing the two
    assert store.vector_search("documents", axis(1), 5, min_similarity=0.5) == []
    assert ids(store.keyword_search("documents", "banda", 5)) == ["banda"]
    store.set_embedding_model("new/model", DIM)
    assert store.embedding_model() == ("new/model", DIM)
    assert len(store.vector_search("documents", axis(0, 0, 0, 1), 5, min_similarity=0.5)) == 3


async def test_metadata_values_list_scalar_tags_most_used_first_and_bounded(make_store, monkeypatch):
    from agent_retrieval.stores import base

    monkeypatch.setattr(base, "FACET_KEYS", 3)
    monkeypatch.setattr(base, "FACET_VALUES", 2)
    store = make_store()
    tags = [
        {"year": 2024, "category": "policy", "draft": True, "score": 0.5, "notes": "x" * 101, "tags": ["a"]},
        {"year": 2024, "category": "policy", "draft": False},
        {"year": 2023, "category": "guide"},
        {"year": 2021, "category": "memo", "region": "north"},
    ]
    docs = [
        Document(f"d{n}", f"D{n}", "text", metadata, embedding=axis(1)) for n, metadata in enumerate(tags)
    ]
    store.upsert(docs, [], MODEL)
    expected = {"category": ["policy", "guide"], "year": [2024, 2021], "draft": [False, True]}
    assert store.metadata_values() == expected == await store.ametadata_values()
    assert list(store.metadata_values()) == ["category", "year", "draft"]  # most used first, then by name
    assert [type(v) for v in store.metadata_values()["draft"]] == [bool, bool]
    # ties go by the value's text; lists, objects and strings over 100 characters are no filter values
    monkeypatch.setattr(base, "FACET_KEYS", 10)
    assert store.metadata_values()["score"] == [0.5]
    assert "notes" not in store.metadata_values() and "tags" not in store.metadata_values()
    store.upsert([Document("d9", "D9", "text", {"team": "legal"}, embedding=axis(1))], [], MODEL)
    assert store.metadata_values()["team"] == ["legal"]  # a write is seen at once


def test_data_survives_reopening(store: Store, make_store: Callable[[], Store]):
    again = make_store()
    assert (again.stats().documents, again.stats().chunks) == (3, 4)
    assert again.stats().schema_version == store.stats().schema_version >= 1
    assert ids(again.vector_search("chunks", axis(0, 0, 1), 1)) == ["gifts#0"]


def test_readers_work_beside_a_writer(store: Store):
    errors: list[BaseException] = []
    docs, chunks = corpus()

    def read() -> None:
        try:
            for _ in range(30):
                assert len(store.vector_search("chunks", axis(1), 2)) == 2
                assert store.keyword_search("chunks", "deposit", 2)
        except BaseException as error:
            errors.append(error)

    def write() -> None:
        try:
            for _ in range(15):
                store.upsert([docs[1]], [chunks[2]], MODEL)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=read) for _ in range(4)] + [threading.Thread(target=write)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert (store.stats().documents, store.stats().chunks) == (3, 4)


# --- hostile arguments every backend must survive (tests/unit/test_hostile_input.py generates more) ------


@pytest.mark.parametrize(
    "vector", [[0.0] * DIM, [1e-40] * DIM, [3e38, -3e38] * (DIM // 2)], ids=["zeros", "tiny", "huge"]
)
def test_a_vector_without_direction_or_of_extreme_numbers_gives_no_nan(store, vector):
    # Float sums underflow or overflow on these (pgvector then answered NaN similarities, which passed every
    # threshold, and SQLite returned arbitrary rows).
    for level in ("documents", "chunks"):
        hits = store.vector_search(level, vector, 5, min_similarity=0.0)
        assert all(0.0 <= h.vector_similarity <= 1.0001 for h in hits), [h.vector_similarity for h in hits]
        assert hits == [] or any(vector)  # no direction: nothing is similar to it


def test_any_text_is_a_metadata_key_that_matches_only_itself(make_store):
    # '"', '.', '$', escapes and emoji once broke or misled a JSON path; keys are compared as they are.
    odd = {
        'a"b': 1,
        "a.b": "dot",
        "$.a": "dollar",
        "🔥": "fire",
        "\\x": "slash",
        "a b": True,
        "') or 1=1 --": "x",
    }
    meta = {**odd, "a": {"b": "nested"}}
    store = make_store()
    store.upsert(
        [Document("d", "Odd keys", "deposit", meta, content_hash="h", embedding=axis(1))],
        [Chunk("d#0", "d", 0, "deposit", "Odd keys", meta, "t", axis(1))],
        MODEL,
    )
    for key, value in odd.items():
        assert ids(store.keyword_search("chunks", "deposit", 3, filters={key: value})) == ["d#0"]
        assert store.keyword_search("chunks", "deposit", 3, filters={key: "other"}) == []
    assert store.keyword_search("chunks", "deposit", 3, filters={"a.b": "nested"}) == []  # not a path


# --- the argument rules, on every public method of every backend -------------------------------------------
# Store checks each argument once for all backends (validation.py's rules): these cases hold every public
# method to them, so a method that skips a check, or a backend that overrides one, fails here. One store per
# backend serves them all: each call must be refused before it reads or writes anything.


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def checked_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    folder = tmp_path_factory.mktemp("checked")
    if request.param == "supabase":
        stack = request.getfixturevalue("supabase_contract_schema")
        store: Store = SupabaseStore(stack.url, stack.service_key, schema=CONTRACT_SCHEMA)
    else:
        store = BACKENDS[request.param](request, folder)
    yield store
    store.close()


def run(call: Any) -> Any:
    """The call's result; a coroutine (an async twin) is run to its end."""
    return asyncio.run(call) if inspect.iscoroutine(call) else call


def new_document(**change: Any) -> Document:
    return Document(**{"id": "new", "title": "New", "content": "deposit", "content_hash": "h", **change})


def new_chunk(**change: Any) -> Chunk:
    return Chunk(
        **{
            "id": "new#0",
            "document_id": "new",
            "ordinal": 0,
            "content": "deposit",
            "heading_path": "New",
            **change,
        }
    )


# Every text argument: (call with the value, the name the error gives it, its most characters, or None).
TEXT_ARGUMENTS: dict[str, tuple[Callable[[Store, Any], Any], str, int | None]] = {
    "keyword_search query": (lambda s, v: s.keyword_search("chunks", v, 5), "query", 4000),
    "akeyword_search query": (lambda s, v: s.akeyword_search("chunks", v, 5), "query", 4000),
    "keyword_search document_ids": (
        lambda s, v: s.keyword_search("chunks", "deposit", 5, document_ids=["fees", v]),
        "document_ids[1]",
        512,
    ),
    "akeyword_search document_ids": (
        lambda s, v: s.akeyword_search("chunks", "deposit", 5, document_ids=[v]),
        "document_ids[0]",
        512,
    ),
    "vector_search document_ids": (
        lambda s, v: s.vector_search("chunks", axis(1), 5, document_ids=[v]),
        "document_ids[0]",
        512,
    ),
    "avector_search document_ids": (
        lambda s, v: s.avector_search("chunks", axis(1), 5, document_ids=[v]),
        "document_ids[0]",
        512,
    ),
    "keyword_search filters key": (
        lambda s, v: s.keyword_search("chunks", "deposit", 5, filters={v: 1}),
        "filters: key",
        1000,
    ),
    "vector_search filters value": (
        lambda s, v: s.vector_search("chunks", axis(1), 5, filters={"category": v}),
        "filters: 'category'",
        1000,
    ),
    "akeyword_search filters key": (
        lambda s, v: s.akeyword_search("chunks", "deposit", 5, filters={v: 1}),
        "filters: key",
        1000,
    ),
    "avector_search filters value": (
        lambda s, v: s.avector_search("chunks", axis(1), 5, filters={"year": [2023, v]}),
        "filters: 'year'",
        1000,
    ),
    "document_chunks document_ids": (lambda s, v: s.document_chunks([v], 5), "document_ids[0]", 512),
    "adocument_chunks document_ids": (lambda s, v: s.adocument_chunks([v], 5), "document_ids[0]", 512),
    "chunk_neighbors hits": (
        lambda s, v: s.chunk_neighbors([replace(FEES_CHUNK, document_id=v)], 1),
        "document_id",
        512,
    ),
    "achunk_neighbors hits": (
        lambda s, v: s.achunk_neighbors([replace(FEES_CHUNK, document_id=v)], 1),
        "document_id",
        512,
    ),
    "with_rows hits": (lambda s, v: s.with_rows([FEES_CHUNK, replace(FEES_CHUNK, id=v)]), "id", 512),
    "awith_rows hits": (lambda s, v: s.awith_rows([replace(FEES_CHUNK, id=v)]), "id", 512),
    "unknown_documents ids": (lambda s, v: s.unknown_documents(["fees", v]), "ids[1]", 512),
    "aunknown_documents ids": (lambda s, v: s.aunknown_documents([v]), "ids[0]", 512),
    "delete_documents ids": (lambda s, v: s.delete_documents(["fees", v]), "ids[1]", 512),
    "document_states ids": (lambda s, v: s.document_states([v]), "ids[0]", 512),
    "documents_from source": (lambda s, v: s.documents_from(v), "source", None),
    "list_documents prefix": (lambda s, v: s.list_documents(v), "prefix", None),
    "get_documents ids": (lambda s, v: s.get_documents(["fees", v]), "ids[1]", 512),
    "vectors_by_hash text_hashes": (lambda s, v: s.vectors_by_hash([v], MODEL), "text_hashes[0]", 512),
    "vectors_by_hash model_id": (lambda s, v: s.vectors_by_hash(["t-fees"], v), "model_id", 512),
    "pending_embeddings model_id": (lambda s, v: s.pending_embeddings("chunks", v, 5), "model_id", 512),
    "set_embeddings model_id": (lambda s, v: s.set_embeddings("chunks", [], v), "model_id", 512),
    "set_embeddings rows": (
        lambda s, v: s.set_embeddings("chunks", [new_chunk(id=v)], MODEL),
        "rows[0]",
        512,
    ),
    "model_mismatch model_id": (lambda s, v: s.model_mismatch(v), "model_id", 512),
    "set_embedding_model model_id": (lambda s, v: s.set_embedding_model(v, DIM), "model_id", 512),
    "upsert model_id": (lambda s, v: s.upsert([new_document()], [new_chunk()], v), "model_id", 512),
    "upsert documents id": (lambda s, v: s.upsert([new_document(id=v)], [], MODEL), "document id", 512),
    "upsert documents title": (
        lambda s, v: s.upsert([new_document(title=v)], [], MODEL),
        "document 'new': title",
        None,
    ),
    "upsert documents content": (
        lambda s, v: s.upsert([new_document(content=v)], [], MODEL),
        "document 'new': content",
        None,
    ),
    "upsert documents source": (
        lambda s, v: s.upsert([new_document(source=v)], [], MODEL),
        "document 'new': source",
        None,
    ),
    "upsert chunks id": (lambda s, v: s.upsert([new_document()], [new_chunk(id=v)], MODEL), "chunk id", 512),
    "upsert chunks document_id": (
        lambda s, v: s.upsert([new_document()], [new_chunk(document_id=v)], MODEL),
        "chunk 'new#0': document_id",
        512,
    ),
    "upsert chunks heading_path": (
        lambda s, v: s.upsert([new_document()], [new_chunk(heading_path=v)], MODEL),
        "chunk 'new#0': heading_path",
        None,
    ),
    "upsert chunks content": (
        lambda s, v: s.upsert([new_document()], [new_chunk(content=v)], MODEL),
        "chunk 'new#0': content",
        None,
    ),
}
# What the text rule refuses: (the bad value, given the argument's most characters; what the error says).
BAD_TEXT: dict[str, tuple[Callable[[int | None], Any], str]] = {
    "NUL": (lambda most: "de\x00posit", "must not contain NUL characters (one at position 2)"),
    "lone surrogate": (lambda most: "de\ud800posit", "must be valid Unicode text: it holds a lone surrogate"),
    "too long": (lambda most: "x" * (most + 1) if most else None, "must be at most"),
    "not text": (lambda most: 7, "must be text (got int)"),
}


@pytest.mark.parametrize("bad", sorted(BAD_TEXT))
@pytest.mark.parametrize("argument", sorted(TEXT_ARGUMENTS))
def test_every_text_argument_is_held_to_the_text_rule(checked_store: Store, argument: str, bad: str):
    call, name, most = TEXT_ARGUMENTS[argument]
    make_value, message = BAD_TEXT[bad]
    value = make_value(most)
    if value is None:
        pytest.skip("no length bound: stored text is bounded where it is loaded")
    if bad == "not text" and argument.endswith("filters value"):
        pytest.skip("numbers and booleans are filter values too")
    before = checked_store.stats()
    with pytest.raises(InvalidRequest) as refused:
        run(call(checked_store, value))
    assert str(refused.value).startswith(name) and f": {message}" in str(refused.value), str(refused.value)
    assert checked_store.stats() == before


# Every count: (call with the value, the name the error gives it, its largest value).
COUNT_ARGUMENTS: dict[str, tuple[Callable[[Store, Any], Any], str, int]] = {
    "vector_search k": (lambda s, n: s.vector_search("chunks", axis(1), n), "k", 1000),
    "avector_search k": (lambda s, n: s.avector_search("chunks", axis(1), n), "k", 1000),
    "keyword_search k": (lambda s, n: s.keyword_search("chunks", "deposit", n), "k", 1000),
    "akeyword_search k": (lambda s, n: s.akeyword_search("chunks", "deposit", n), "k", 1000),
    "document_chunks limit": (lambda s, n: s.document_chunks(["fees"], n), "limit", 100_000),
    "adocument_chunks limit": (lambda s, n: s.adocument_chunks(["fees"], n), "limit", 100_000),
    "pending_embeddings limit": (lambda s, n: s.pending_embeddings("chunks", MODEL, n), "limit", 100_000),
    "list_documents limit": (lambda s, n: s.list_documents("", n), "limit", 100_000),
    "set_embedding_model dimension": (lambda s, n: s.set_embedding_model(MODEL, n), "dimension", 16_000),
    "chunk_neighbors reach": (lambda s, n: s.chunk_neighbors([FEES_CHUNK], n), "reach", 3),
    "achunk_neighbors reach": (lambda s, n: s.achunk_neighbors([FEES_CHUNK], n), "reach", 3),
}
BAD_COUNTS = {**NOT_WHOLE_NUMBERS, "0": 0, "-1": -1, "max + 1": "max"}


@pytest.mark.parametrize("bad", sorted(BAD_COUNTS))
@pytest.mark.parametrize("argument", sorted(COUNT_ARGUMENTS))
def test_every_count_is_a_whole_number_in_range_never_a_bool(checked_store: Store, argument: str, bad: str):
    call, name, most = COUNT_ARGUMENTS[argument]
    value = most + 1 if BAD_COUNTS[bad] == "max" else BAD_COUNTS[bad]
    before = checked_store.stats()
    with pytest.raises(InvalidRequest) as refused:
        run(call(checked_store, value))
    assert str(refused.value) == f"{name}: must be a whole number between 1 and {most:,} (got {value!r})"
    assert checked_store.stats() == before


# Arguments that are neither text nor a count, each with its own check in tests/unit/test_hostile_input.py
# or below; and `progress` (refresh_indexes), whether the operator's ingest draws a bar.
NOT_TEXT_OR_COUNT = {"level", "vector", "min_similarity", "rows", "progress"}


@pytest.mark.parametrize("value", [None, 1, "False", [True]])
def test_whether_a_search_reads_rows_is_true_or_false(checked_store: Store, value: Any):
    for call in (
        lambda: checked_store.vector_search("chunks", axis(1), 5, rows=value),
        lambda: checked_store.avector_search("chunks", axis(1), 5, rows=value),
        lambda: checked_store.keyword_search("chunks", "deposit", 5, rows=value),
        lambda: checked_store.akeyword_search("chunks", "deposit", 5, rows=value),
    ):
        with pytest.raises(InvalidRequest) as refused:
            run(call())
        assert str(refused.value) == f"rows: must be True or False (got {value!r})"


def test_the_hits_whose_rows_are_read_are_search_hits_and_a_bounded_number(checked_store: Store):
    with pytest.raises(InvalidRequest, match="hits: must be the hits of a search"):
        checked_store.with_rows([{"id": "fees#0"}])
    for call in (checked_store.with_rows, checked_store.awith_rows):
        with pytest.raises(InvalidRequest, match=r"hits: at most 100 at a time \(got 101\)"):
            run(call([FEES_CHUNK] * 101))


def test_the_cases_above_cover_every_argument_of_every_public_method():
    covered = {case.split(" ", 1)[0]: set() for case in (*TEXT_ARGUMENTS, *COUNT_ARGUMENTS)}
    for case in (*TEXT_ARGUMENTS, *COUNT_ARGUMENTS):
        method, argument = case.split(" ", 1)
        covered[method].add(argument.split(" ")[0])
    for name, method in inspect.getmembers(Store, inspect.isfunction):
        arguments = set(inspect.signature(method).parameters) - {"self"}
        if name.startswith("_") or name == "check_public" or not arguments:
            continue
        missing = arguments - covered.get(name, set()) - NOT_TEXT_OR_COUNT
        assert not missing, f"{name}: no case checks {sorted(missing)}"


def test_sync_keeps_ids_stable_follows_renames_and_prunes_only_what_is_gone(make_store, tmp_path):
    store = make_store()
    embeddings = WordHashEmbeddings(size=DIM)
    retrieval = Retrieval(Context(), store=store, embedder=Embedder(embeddings, MODEL))
    coll, other = tmp_path / "coll", tmp_path / "other"
    (coll / "sub").mkdir(parents=True)
    other.mkdir()
    files = {
        "a.md": "# Alpha\n\nAlpha text.\n",
        "sub/b.md": "# Beta\n\nBeta text.\n",
        "sub/c.md": "# Gamma\n\nGamma text.\n",
        "sub/d.md": "# Delta\n\nDelta text.\n",
    }
    for name, text in files.items():
        (coll / name).write_text(text, encoding="utf-8")
    (other / "x.md").write_text("# Other\n\nOther root.\n", encoding="utf-8")

    def stored() -> list[str]:
        return sorted(
            store.document_states(["a", "sub/b", "sub/b2", "sub/c", "sub/d", "b", "c", "d", "x", "agent"])
        )

    ingest_paths([coll / "sub"], retrieval=retrieval)  # a folder first ...
    assert stored() == ["b", "c", "d"]
    around = ingest_paths([coll], retrieval=retrieval)  # ... then the folder around it: one copy, renamed
    assert stored() == ["a", "sub/b", "sub/c", "sub/d"]
    assert sorted(around.renamed) == [("b", "sub/b"), ("c", "sub/c"), ("d", "sub/d")]
    assert around.embedded == 2  # a.md's document and chunk; the renamed files' vectors were reused
    inside = ingest_paths([coll / "sub"], retrieval=retrieval)  # a folder inside keeps the outer ids
    assert (inside.written, inside.renamed, stored()) == (0, [], ["a", "sub/b", "sub/c", "sub/d"])
    ingest_paths([other], retrieval=retrieval)
    agent = Document(id="agent", title="Agent note", content="Written by a tool.", source="index_document")
    ingest([agent], store, retrieval.embedder, progress=False)

    (coll / "a.md").write_text("# Alpha\n\nAlpha text, edited.\n", encoding="utf-8")
    (coll / "sub" / "b.md").rename(coll / "sub" / "b2.md")
    (coll / "sub" / "c.md").unlink()
    (coll / "sub" / "d.md").write_text("---\na: &x [1]\nb: *x\n---\nNow unreadable.\n", encoding="utf-8")
    embedded_before = embeddings.documents_embedded
    synced = ingest_paths([coll], retrieval=retrieval, prune=True)
    assert synced.renamed == [("sub/b", "sub/b2")] and synced.removed == ["sub/c"]
    assert len(synced.skipped_files) == 1 and "sub/d.md" in synced.skipped_files[0]
    assert embeddings.documents_embedded - embedded_before == 2  # only the edited a.md (document and chunk)
    # the live files, the file that could not be read, another root's file and the tool's document remain
    assert stored() == ["a", "agent", "sub/b2", "sub/d", "x"]
    assert [h.document_id for h in store.keyword_search("chunks", "gamma", 5)] == []
