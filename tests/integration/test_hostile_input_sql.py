"""Hostile input against real SQL: the properties of tests/unit/test_hostile_input.py on the Postgres store
(by DSN) and the Supabase store (RPC through PostgREST). Postgres adds its own traps: tsquery syntax, text
that cannot hold NUL, UTF-8 that cannot hold a lone surrogate, int4 arguments, JSON without NaN.

Each backend holds the demo corpus in its own schema, shared by the module; every table's rows are hashed
before and after each test, which must leave them unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_retrieval import demo
from agent_retrieval.context import Context
from agent_retrieval.errors import AgentRetrievalError, InvalidRequest
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.loaders import load_documents
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.stores.postgres import PostgresStore
from agent_retrieval.stores.rpc import POSTINGS_BLOCK
from agent_retrieval.stores.supabase import SupabaseStore
from agent_retrieval.tools import make_retrieval_tools
from tests.conftest import WordHashEmbeddings
from tests.unit.test_hostile_input import (
    SETTINGS,
    Corpus,
    accepted_scope,
    call,
    check_hits,
    check_tool_answer,
    chunk_strategies,
    clean_query,
    draw_tool_call,
    expected_chunks,
    hostile_text,
    hostile_vectors,
    keyword_words,
    nest,
    one_bad,
    search_strategies,
    store_call,
    valid_text,
    vector_256,
)

# Each call is a round trip (PostgREST's are slower): fewer examples than on SQLite keep the module quick.
SQL_SETTINGS = settings(SETTINGS, max_examples=30)
SUPABASE_SCHEMA = "agent_retrieval"  # one of the schemas the session's PostgREST serves
POSTGRES_SCHEMA = "hostile_input"
DIM = 256  # the word-hash test embedder's


def _load(execute, schema: str) -> Corpus:
    """What is stored, read with SQL: ids, metadata, and the lexemes each row is indexed under."""
    documents = dict(execute(f"select id, metadata from {schema}.documents"))
    chunks = {i: (d, o) for i, d, o in execute(f"select id, document_id, ordinal from {schema}.chunks")}
    words = {
        level: {
            i: set(lexemes)
            for i, lexemes in execute(
                f"select d.id, array_agg(p.term) from {schema}.{level}_postings p "
                f"join {schema}.{level} d on d.rowid / {POSTINGS_BLOCK} = p.block "
                f"and d.rowid % {POSTINGS_BLOCK} = any (p.places) group by d.id"
            )
        }
        for level in ("documents", "chunks")
    }
    return Corpus(documents=documents, chunks=chunks, words=words)


class Backend:
    """One store holding the demo corpus, and direct SQL on its database to check what it answers."""

    def __init__(self, name: str, store: Any, execute: Any, schema: str):
        self.name, self.store, self.execute, self.schema = name, store, execute, schema
        self.corpus = _load(execute, schema)
        self.retrieval = Retrieval(
            Context(), store=store, embedder=Embedder(WordHashEmbeddings(), "test/word-hash")
        )
        names = ["document_retriever", "chunk_retriever", "similarity_search"]
        self.tools = dict(
            zip(names, make_retrieval_tools(retrieval=self.retrieval, names=names), strict=True)
        )

    def __repr__(self) -> str:
        return f"Backend({self.name})"

    def fingerprint(self) -> list[tuple[str, str]]:
        """An md5 of every row of every table in the store's schema."""
        tables = [
            r[0]
            for r in self.execute(
                "select table_name from information_schema.tables "
                "where table_schema = %s and table_type = 'BASE TABLE' order by 1",
                (self.schema,),
            )
        ]
        assert {"documents", "chunks", "chunks_postings", "corpus_stats", "store_info"} <= set(tables)
        return [
            (
                t,
                self.execute(
                    f"select md5(coalesce(string_agg(r::text, '|' order by r::text), '')) "
                    f"from {self.schema}.{t} r"
                )[0][0],
            )
            for t in tables
        ]

    def query_words(self, query: str) -> set[str]:
        """The lexemes of the query as the keyword function reads it (the store refuses any query Postgres
        could not hold)."""
        return set(
            self.execute(
                f"select array(select lexeme from unnest(to_tsvector("
                f"'{self.schema}.english_all'::regconfig, %s)))",
                (query,),
            )[0][0]
        )


def _ingest(store: Any) -> None:
    embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    ingest(load_documents([demo.corpus_dir()]), store, embedder, Context(), progress=False)


@pytest.fixture(scope="module", params=["postgres", "supabase"])
def backend(request):
    if request.param == "postgres":
        pg = request.getfixturevalue("postgres")
        pg.execute(f"drop schema if exists {POSTGRES_SCHEMA} cascade")
        store = PostgresStore(pg.dsn, schema=POSTGRES_SCHEMA)
        store.init(DIM)
        _ingest(store)
        yield Backend("postgres", store, pg.execute, POSTGRES_SCHEMA)
    else:
        stack = request.getfixturevalue("supabase_stack")
        stack.postgres.execute(f"drop schema if exists {SUPABASE_SCHEMA} cascade")
        PostgresStore(stack.postgres.dsn, schema=SUPABASE_SCHEMA).init(DIM)
        stack.postgrest.reload_schema()
        store = SupabaseStore(stack.url, stack.service_key, schema=SUPABASE_SCHEMA)
        _ingest(store)
        yield Backend("supabase", store, stack.postgres.execute, SUPABASE_SCHEMA)
    store.close()


@pytest.fixture
def unchanged(backend):
    """After the test (all its examples), every table of the schema is exactly as before it."""
    before = backend.fingerprint()
    yield
    assert backend.fingerprint() == before, "a read changed the database"


# --- the tools -----------------------------------------------------------------------------------------


@SQL_SETTINGS
@given(data=st.data())
def test_every_tool_answers_any_arguments_with_bounded_hits_or_an_error_naming_the_argument(
    backend, unchanged, data
):
    name, bad, args = draw_tool_call(data, sorted(backend.corpus["documents"]), sorted(backend.tools))
    check_tool_answer(call(backend.tools[name], args), name, bad, args, backend.corpus)


@SQL_SETTINGS
@given(query=st.one_of(clean_query, hostile_text), top_k=st.integers(1, 50))
def test_tsquery_fts5_and_sql_syntax_in_the_query_never_widen_the_search(backend, unchanged, query, top_k):
    result = call(
        backend.tools["chunk_retriever"],
        {"query": query, "top_k": top_k, "query_type": "exact", "hyde": "off"},
    )
    if result.status == "error":
        assert result.content.startswith("Invalid arguments: query"), result.content
        return
    words = backend.query_words(query)
    for hit in result.artifact["hits"]:
        if "keyword" in hit["found_by"]:
            assert backend.corpus["words"]["chunks"][hit["id"]] & words, (query, hit["id"])


def test_a_thousand_levels_of_nesting_and_the_inputs_postgres_cannot_hold_are_tool_errors(backend):
    tool = backend.tools["chunk_retriever"]
    for args, message in [
        ({"filters": nest(1000, "dict")}, "filters: nested more than 32 levels"),
        ({"input_schema": nest(1000, "list")}, "input_schema: nested more than 32 levels"),
        ({"query": "deposit \ud800"}, "query: must be valid Unicode text"),  # was: UnicodeEncodeError
        ({"query": "deposit\x00"}, "query: must not contain NUL"),
        ({"filters": {"category": "\udfff"}}, "filters: 'category': must be valid Unicode text"),
        ({"filters": {"year": float("inf")}}, "filters: 'year': numbers must be finite"),  # was: invalid json
        ({"document_ids": ["a\x00b"]}, "document_ids[0]: must not contain NUL characters"),
    ]:
        result = call(tool, {"query": "deposit", **args})
        assert result.status == "error" and result.content.startswith(f"Invalid arguments: {message}"), (
            result.content
        )


async def test_the_async_path_checks_the_same_arguments(backend, unchanged):
    # The tools' async path calls the stores' async methods, which take the same checks.
    store = backend.store
    for coroutine, message in [
        (store.akeyword_search("chunks", "deposit", 10**12), "k: must be"),
        (store.avector_search("chunks", [0.1] * DIM, 5, filters={"year": float("nan")}), "filters: 'year'"),
        (store.adocument_chunks("fee-schedule", 5), "document_ids: must be a list"),
        (store.aunknown_documents(["\ud800"]), r"ids\[0\]: must be valid Unicode text"),
        (store.akeyword_search("chunks", "deposit\x00", 5), "query: must not contain NUL"),
    ]:
        with pytest.raises(InvalidRequest, match=message):
            await coroutine
    result = await backend.tools["chunk_retriever"].ainvoke(
        {
            "type": "tool_call",
            "id": "c",
            "name": "chunk_retriever",
            "args": {
                "query": "'; drop table chunks; -- deposit & !lane",
                "document_ids": ["fee-schedule", "nope"],
            },
        }
    )
    assert result.status == "error" and "document_ids: 1 unknown id(s): 'nope'" in result.content
    result = await backend.tools["document_retriever"].ainvoke(
        {
            "type": "tool_call",
            "id": "c",
            "name": "document_retriever",
            "args": {"query": "deposit <-> lane:* | !fee", "filters": {"year": ["2024", 2021]}, "top_k": 50},
        }
    )
    assert result.status == "success" and result.artifact["hits"]
    assert all(h["metadata"]["year"] in (2021, 2024) for h in result.artifact["hits"])


# --- the store's read methods, called directly ---------------------------------------------------------


@SQL_SETTINGS
@given(data=st.data())
def test_keyword_search_answers_any_arguments_or_names_the_bad_one(backend, unchanged, data):
    valid, hostile = search_strategies(sorted(backend.corpus["documents"]))
    bad, args = one_bad(
        data,
        {**valid, "query": st.one_of(clean_query, st.sampled_from(["", " ", "\t\n", "\u3000"]))},
        {**hostile, "query": st.one_of(hostile_text, st.none(), st.integers(), st.just(["deposit"]))},
    )
    result = store_call(
        bad,
        backend.store.keyword_search,
        args["level"],
        args["query"],
        args["k"],
        filters=args["filters"],
        document_ids=args["document_ids"],
    )
    if result is None:
        return
    assert accepted_scope(args["level"], args["k"], args["document_ids"])
    assert isinstance(args["query"], str) and valid_text(args["query"]) and len(args["query"]) <= 4000
    hits = [h.to_dict() for h in result]
    check_hits(
        hits,
        backend.corpus,
        args["level"],
        top_k=args["k"],
        filters=args["filters"],
        document_ids=args["document_ids"],
    )
    if hits:
        words = backend.query_words(args["query"])
        assert all(backend.corpus["words"][args["level"]][h["id"]] & words for h in hits), args["query"]
    assert keyword_words(args["query"]) or not hits  # no words, no keyword hits


@SQL_SETTINGS
@given(data=st.data())
def test_vector_search_answers_any_arguments_or_names_the_bad_one(backend, unchanged, data):
    valid, hostile = search_strategies(sorted(backend.corpus["documents"]))
    bad, args = one_bad(
        data,
        {**valid, "vector": vector_256, "min_similarity": st.floats(-1, 1)},
        {
            **hostile,
            "vector": hostile_vectors,
            "min_similarity": st.one_of(st.just(float("nan")), st.booleans(), hostile_text),
        },
    )
    try:
        result = store_call(
            bad,
            backend.store.vector_search,
            args["level"],
            args["vector"],
            args["k"],
            filters=args["filters"],
            document_ids=args["document_ids"],
            min_similarity=args["min_similarity"],
        )
    except AgentRetrievalError as error:  # another dimension, named
        # PT017: the call may also succeed (hypothesis input); pytest.raises would demand an error
        assert not isinstance(error, InvalidRequest)  # noqa: PT017
        assert bad in ("vector", "all") and "dimension" in str(error), str(error)  # noqa: PT017
        return
    if result is None:
        return
    assert accepted_scope(args["level"], args["k"], args["document_ids"])
    hits = [h.to_dict() for h in result]
    check_hits(
        hits,
        backend.corpus,
        args["level"],
        top_k=args["k"],
        filters=args["filters"],
        document_ids=args["document_ids"],
    )
    assert all(h["vector_similarity"] >= args["min_similarity"] for h in hits)


@SQL_SETTINGS
@given(data=st.data())
def test_document_chunks_answers_any_arguments_or_names_the_bad_one(backend, unchanged, data):
    bad, args = one_bad(data, *chunk_strategies(sorted(backend.corpus["documents"])))
    result = store_call(bad, backend.store.document_chunks, args["document_ids"], args["limit"])
    if result is None:
        return
    assert accepted_scope("chunks", args["limit"], args["document_ids"], maximum=100_000)
    assert [h.id for h in result] == expected_chunks(backend.corpus, args["document_ids"], args["limit"])


@SQL_SETTINGS
@given(data=st.data())
def test_unknown_documents_answers_any_ids_or_names_the_bad_one(backend, unchanged, data):
    valid, hostile = chunk_strategies(sorted(backend.corpus["documents"]))
    bad, args = one_bad(data, {"ids": valid["document_ids"]}, {"ids": hostile["document_ids"]})
    result = store_call(bad, backend.store.unknown_documents, args["ids"])
    if result is None:
        return
    assert accepted_scope("chunks", 1, args["ids"])
    assert result == list(dict.fromkeys(i for i in args["ids"] if i not in backend.corpus["documents"]))


FOUND = [  # each once reached the database and came back as a misleading or unhandled error
    ("keyword_search", ("chunks", "deposit", 10**12), "k: must be a whole number between 1 and 1,000"),
    # was: "the agent-retrieval SQL is not installed" (no function takes a bigint match_count)
    ("vector_search", ("chunks", [0.1] * DIM, True), "k: must be a whole number"),
    ("keyword_search", ("chunks; drop", "deposit", 3), "level: must be 'documents' or 'chunks'"),
    ("keyword_search", ("chunks", None, 3), "query: must be text"),  # was: AttributeError
    ("unknown_documents", (["\ud800"],), "ids[0]: must be valid Unicode text"),  # was: UnicodeEncodeError
    (
        "unknown_documents",
        (["a\x00b"],),
        "ids[0]: must not contain NUL",
    ),  # was: "text fields cannot contain NUL"
    ("unknown_documents", ([7],), "ids[0]: must be text"),  # was: "SQL is not installed" (no int[] function)
    ("document_chunks", (["fee-schedule"], -1), "limit: must be"),  # was: "LIMIT must not be negative"
    # Postgres text holds no NUL and UTF-8 no lone surrogate: such a query is refused, as by the tools
    ("keyword_search", ("documents", "banda\ud800lane deposit", 5), "query: must be valid Unicode text"),
    ("keyword_search", ("documents", "banda\x00lane deposit", 5), "query: must not contain NUL characters"),
    (
        "vector_search",
        ("chunks", [float("nan")] * DIM, 5),
        "vector: must be a non-empty list of finite numbers",
    ),
]


@pytest.mark.parametrize(("method", "args", "message"), FOUND, ids=[f"{m}-{msg[:24]}" for m, _, msg in FOUND])
def test_inputs_that_once_reached_the_database_are_clear_errors(backend, method, args, message):
    with pytest.raises(InvalidRequest, match=re.escape(message)):
        getattr(backend.store, method)(*args)


def test_tsquery_syntax_in_keyword_text_is_searched_as_plain_words(backend, unchanged):
    for query in ("deposit & !lane | (x <-> y):*", "banda lane deposit"):
        hits = backend.store.keyword_search("documents", query, 5)
        assert hits and all(
            backend.corpus["words"]["documents"][h.id] & backend.query_words(query) for h in hits
        )
