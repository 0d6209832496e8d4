"""AgentRetrievalVectorStore against LangChain's own standard suite for vector stores, on the embedded store,
Postgres by DSN and Supabase through PostgREST; and with LangChain's indexing API (a record manager and its
cleanup modes)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.documents import Document as LCDocument
from langchain_core.indexing import InMemoryRecordManager, index
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from agent_retrieval.context import Context
from agent_retrieval.errors import InvalidRequest
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.stores import SQLiteStore
from agent_retrieval.stores.postgres import PostgresStore
from agent_retrieval.stores.supabase import SupabaseStore
from agent_retrieval.vectorstore import AgentRetrievalVectorStore

SUPABASE_SCHEMA = "ar_vectorstore"
DIM = 6  # the standard suite's fake embeddings


def _open(backend: str, request: pytest.FixtureRequest, folder: Path) -> AgentRetrievalVectorStore:
    embedder = Embedder(VectorStoreIntegrationTests.get_embeddings(), "test/fake-6")
    if backend == "sqlite":
        store = SQLiteStore(folder / "vs.db")
    elif backend == "postgres":
        schema = "vs_" + hashlib.sha1(str(folder).encode()).hexdigest()[:16]
        store = PostgresStore(request.getfixturevalue("postgres").dsn, schema=schema)
        store.init(DIM)
    else:
        stack = request.getfixturevalue("supabase_vectorstore")
        store = SupabaseStore(stack.url, stack.service_key, schema=SUPABASE_SCHEMA)
    retrieval = Retrieval(Context(), store=store, embedder=embedder, min_similarity=-1.0)
    return AgentRetrievalVectorStore(retrieval=retrieval)


@pytest.fixture(scope="session")
def supabase_vectorstore_schema(supabase_stack):
    PostgresStore(supabase_stack.postgres.dsn, schema=SUPABASE_SCHEMA).init(DIM)
    supabase_stack.postgrest.reload_schema()
    return supabase_stack


@pytest.fixture
def supabase_vectorstore(supabase_vectorstore_schema):
    """The stack with the schema emptied: each standard test starts from an empty store."""
    supabase_vectorstore_schema.postgres.empty_store(SUPABASE_SCHEMA)
    return supabase_vectorstore_schema


@pytest.fixture(params=["sqlite", "postgres", "supabase"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


class TestStandardSuite(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, backend, request, tmp_path) -> Iterator[AgentRetrievalVectorStore]:
        vectorstore = _open(backend, request, tmp_path)
        try:
            yield vectorstore
        finally:
            vectorstore.retrieval.store.close()


@pytest.fixture
def vectorstore(backend, request, tmp_path) -> Iterator[AgentRetrievalVectorStore]:
    opened = _open(backend, request, tmp_path)
    yield opened
    opened.retrieval.store.close()


def test_langchain_indexing_writes_only_what_changed_and_cleans_up(vectorstore):
    manager = InMemoryRecordManager("agent-retrieval")
    manager.create_schema()
    docs = [
        LCDocument(page_content=f"Clause {n} of the lease.", metadata={"source": f"lease-{n}.md"})
        for n in range(4)
    ]
    options = {"source_id_key": "source", "key_encoder": "sha256"}
    first = index(docs, manager, vectorstore, cleanup="incremental", **options)
    assert (first["num_added"], first["num_skipped"], first["num_deleted"]) == (4, 0, 0)
    again = index(docs, manager, vectorstore, cleanup="incremental", **options)
    assert (again["num_added"], again["num_skipped"], again["num_deleted"]) == (0, 4, 0)
    amended = LCDocument(page_content="Clause 2, amended.", metadata={"source": "lease-2.md"})
    edited = index([amended], manager, vectorstore, cleanup="incremental", **options)
    assert (edited["num_added"], edited["num_deleted"]) == (1, 1)  # the old clause 2 went with its source
    assert sorted(d.page_content for d in vectorstore.similarity_search("clause lease", k=10)) == [
        "Clause 0 of the lease.",
        "Clause 1 of the lease.",
        "Clause 2, amended.",
        "Clause 3 of the lease.",
    ]
    pruned = index([docs[0], amended], manager, vectorstore, cleanup="full", **options)
    assert pruned["num_deleted"] == 2  # clauses 1 and 3 were not in the full set
    assert len(vectorstore.similarity_search("clause lease", k=10)) == 2


def test_documents_keep_their_metadata_and_chunks_name_their_document(vectorstore):
    ids = vectorstore.add_texts(
        ["# Deposits\n\nThe deposit is protected within 30 days."], [{"title": "Deposits", "year": 2024}]
    )
    assert vectorstore.get_by_ids(ids)[0].metadata == {"title": "Deposits", "year": 2024}
    chunks = AgentRetrievalVectorStore(retrieval=vectorstore.retrieval, level="chunks")
    hit = chunks.similarity_search("deposit protected", k=1, filter={"year": 2024})[0]
    assert hit.metadata["document_id"] == ids[0] and "30 days" in hit.page_content


def test_bad_input_is_a_clear_error_and_writes_nothing(vectorstore):
    with pytest.raises(InvalidRequest, match="must not contain NUL"):
        vectorstore.add_texts(["fine", "bad\x00text"], ids=["a", "b"])
    assert vectorstore.get_by_ids(["a", "b"]) == []
    with pytest.raises(InvalidRequest, match="ids: 1 given for 2 documents"):
        vectorstore.add_texts(["one", "two"], ids=["x"])
    with pytest.raises(InvalidRequest, match="top_k"):
        vectorstore.similarity_search("one", k=0)
    with pytest.raises(InvalidRequest, match="name the documents to delete"):
        vectorstore.delete()


def test_search_by_vector_returns_the_nearest_whole_documents(vectorstore):
    ids = vectorstore.add_texts(["alpha " * 300, "beta"], ids=["long", "short"])
    vector = vectorstore.embeddings.embed_query("beta")
    assert [d.id for d in vectorstore.similarity_search_by_vector(vector, k=1)] == ["short"]
    assert vectorstore.get_by_ids(ids)[0].page_content == "alpha " * 300  # whole, not the opening


def test_relevance_scores_are_cosine_similarities_and_a_threshold_cuts_on_them(vectorstore):
    # One candidate a side: "gamma delta" is the vector side's (the same text as the query), the repeated
    # text the keyword side's; the latter's relevance is looked up, not taken as 0.
    vectorstore.retrieval.context = Context(candidates=1)
    vectorstore.add_texts(["gamma delta", "gamma delta gamma delta"], ids=["same", "twice"])
    scored = {
        doc.id: score
        for doc, score in vectorstore.similarity_search_with_relevance_scores("gamma delta", k=2)
    }
    query = vectorstore.retrieval.embedder.embed_query("gamma delta")
    nearest = vectorstore.retrieval.store.vector_search("documents", query, 2, min_similarity=-1.0)
    assert scored == pytest.approx({h.id: max(0.0, h.vector_similarity) for h in nearest})
    assert scored["same"] == pytest.approx(1.0) and scored["twice"] > 0.1
    threshold = vectorstore.as_retriever(
        search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.99, "k": 2}
    )
    assert [d.id for d in threshold.invoke("gamma delta")] == ["same"]


def test_maximal_marginal_relevance_trades_relevance_for_diversity(vectorstore):
    vectorstore.add_texts(["alpha", "alpha", "omega"], ids=["a1", "a2", "o"])
    relevant = vectorstore.max_marginal_relevance_search("alpha", k=2, lambda_mult=1.0)
    assert sorted(d.id for d in relevant) == ["a1", "a2"]
    diverse = vectorstore.max_marginal_relevance_search("alpha", k=2, lambda_mult=0.25)
    assert sorted(d.page_content for d in diverse) == ["alpha", "omega"]
    retriever = vectorstore.as_retriever(search_type="mmr", search_kwargs={"k": 2, "lambda_mult": 0.25})
    assert sorted(d.page_content for d in retriever.invoke("alpha")) == ["alpha", "omega"]
    vector = vectorstore.embeddings.embed_query("alpha")
    by_vector = vectorstore.max_marginal_relevance_search_by_vector(vector, k=2, lambda_mult=0.25)
    assert sorted(d.page_content for d in by_vector) == ["alpha", "omega"]
    with pytest.raises(InvalidRequest, match="lambda_mult"):
        vectorstore.max_marginal_relevance_search("alpha", lambda_mult=2)


def test_metadata_grants_nothing_across_tenants(postgres, tmp_path):
    # Metadata naming a visibility, a tenant or a source is stored as plain metadata: only the operator's
    # `public=True` publishes, and only the writer's tenant reads a private document.
    schema = "vs_tenants"
    PostgresStore(postgres.dsn, schema=schema).init(DIM)
    embedder = Embedder(VectorStoreIntegrationTests.get_embeddings(), "test/fake-6")

    def tenant_store(tenant: str) -> AgentRetrievalVectorStore:
        store = PostgresStore(postgres.dsn, schema=schema, tenant=tenant)
        return AgentRetrievalVectorStore(retrieval=Retrieval(Context(), store=store, embedder=embedder))

    claims = {"public": True, "tenant_id": "globex", "source": "/etc/passwd", "is_public": True}
    acme, globex = tenant_store("acme"), tenant_store("globex")
    acme.add_texts(["the acme merger plan"], [claims], ids=["plan"])
    assert [d.id for d in acme.similarity_search("merger plan", k=3)] == ["plan"]
    assert acme.get_by_ids(["plan"])[0].metadata == claims  # kept as given
    assert globex.similarity_search("merger plan", k=3) == [] and globex.get_by_ids(["plan"]) == []
    assert acme.retrieval.store.documents_from("/etc/passwd") == []
    for opened in (acme, globex):
        opened.retrieval.store.close()
