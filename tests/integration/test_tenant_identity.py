"""Who a row belongs to, on the real stack (Postgres + pgvector, PostgREST, JWTs signed with its secret):

- ids are unique within a tenant only: one tenant's private "handbook" and another's public "handbook" are two
  documents through every search, the SQL hybrid function, summarize and both tools, never one;
- a token without a tenant claim reads its user's own namespace ("user:<sub>"), which no tenant name equals;
- publishing is the operator's explicit act (Document.public, ingest(public=True)), never a metadata key.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agent_retrieval.context import Context
from agent_retrieval.ingest import chunk_document, ingest
from agent_retrieval.models import ChunkSearchRequest, Document
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.server.identity import tenant_of_claims
from agent_retrieval.stores import open_store
from agent_retrieval.stores.postgres import PostgresStore
from agent_retrieval.stores.supabase import SupabaseStore
from agent_retrieval.tools import make_retrieval_tools
from tests.conftest import WordHashEmbeddings

SCHEMA = "agent_retrieval"  # one of the schemas the session's PostgREST serves
DIM = 256  # the word-hash test embedder's
MODEL = "test/word-hash"
QUERY = "annual leave and expenses handbook"

# The same document id in two tenants: acme's own handbook, and the press's, published to everyone.
HANDBOOKS = {
    "acme": (
        "Acme staff handbook",
        "# Annual leave\n\nAcme staff take 25 days of annual leave a year, "
        "booked in the rota.\n\n# Expenses\n\nAcme expenses are claimed monthly with receipts.",
    ),
    "press": (
        "Press contributor handbook",
        "# Annual leave\n\nContributors agree annual leave with the desk "
        "editor.\n\n# Expenses\n\nTravel expenses are repaid after the story runs, from the handbook "
        "rate.",
    ),
}


def embedder() -> Embedder:
    return Embedder(WordHashEmbeddings(), MODEL)


def writer(stack, tenant: str) -> Context:
    """The operator: the service role, writing into `tenant`."""
    return Context(supabase_url=stack.url, supabase_key=stack.service_key, db_schema=SCHEMA, tenant_id=tenant)


def handbook(tenant: str) -> Document:
    title, text = HANDBOOKS[tenant]
    return Document("handbook", title, text, {"owner": tenant})


@pytest.fixture(scope="module")
def stack(supabase_stack):
    """acme's private handbook, the press's public one (same id), a private note in mallory's own namespace,
    and a note written without a tenant (the single-tenant rows, tenant '')."""
    supabase_stack.postgres.execute(f"drop schema if exists {SCHEMA} cascade")
    PostgresStore(supabase_stack.postgres.dsn, schema=SCHEMA).init(DIM)
    supabase_stack.postgrest.reload_schema()
    for tenant in HANDBOOKS:
        with open_store(writer(supabase_stack, tenant).store) as store:
            ingest([handbook(tenant)], store, embedder(), progress=False, public=tenant == "press")
    for tenant, doc_id in [("user:mallory", "mallory-note"), ("", "default-note")]:
        note = Document(doc_id, "Private note", f"The private note {doc_id} about annual leave.")
        service = SupabaseStore(supabase_stack.url, supabase_stack.service_key, schema=SCHEMA, tenant=tenant)
        with service:
            ingest([note], service, embedder(), progress=False)
    return supabase_stack


def as_user(stack, sub: str | None, **claims) -> SupabaseStore:
    """A user's store: anon key plus a token signed with the stack's secret; `claims` go in app_metadata."""
    from tests.stack import mint_jwt

    token = mint_jwt(stack.jwt_secret, "authenticated", sub=sub, app_metadata=claims or None) if sub else None
    return SupabaseStore(stack.url, stack.anon_key, schema=SCHEMA, user_token=token)


@pytest.fixture(params=["supabase-user", "postgres-tenant"])
def acme(request, stack):
    """acme's view of the store: a signed-in user of acme under row-level security, or the Postgres store by
    DSN with tenant="acme" (the scope then comes from the argument inside every SQL function)."""
    if request.param == "supabase-user":
        store = as_user(stack, "alice", tenant_id="acme")
    else:
        store = PostgresStore(stack.postgres.dsn, schema=SCHEMA, tenant="acme")
    yield store
    store.close()


def keys(hits) -> list[tuple[str, str]]:
    return [(h.tenant, h.id) for h in hits]


def test_the_same_id_in_two_tenants_is_two_rows_in_every_search(acme):
    vector = embedder().embed_query(QUERY)
    for level, expected in [("documents", 2), ("chunks", 4)]:
        vector_hits = acme.vector_search(level, vector, 10)
        keyword_hits = acme.keyword_search(level, QUERY, 10)
        tenants = [sorted({h.tenant for h in hits}) for hits in (vector_hits, keyword_hits)]
        assert tenants == [["acme", "press"], ["acme", "press"]]
        assert len(set(keys(vector_hits))) == len(vector_hits) == expected
        rows = acme._call(
            f"hybrid_search_{level}",
            query_text=QUERY,
            query_embedding=vector,
            match_count=10,
            tenant=acme.tenant,
        )
        # a join on id alone gave 4 and 8 rows
        assert len(rows) == expected, [(r["tenant_id"], r["id"]) for r in rows]
        # each row's two scores are its own tenant's row's, never one tenant's paired with the other's
        similarity = {h.key: h.vector_similarity for h in vector_hits}
        bm25 = {h.key: h.keyword_score for h in keyword_hits}
        for row in rows:
            key = (row["tenant_id"], row["id"])
            assert row["vector_similarity"] == pytest.approx(similarity[key], abs=1e-9)
            assert row["keyword_score"] == pytest.approx(bm25[key], rel=1e-9)
        assert len({r["vector_similarity"] for r in rows}) == expected  # the texts differ, so the scores do


def test_the_words_no_row_holds_are_counted_over_the_callers_rows_alone(acme):
    # "mallory" is in mallory's private note only: to acme it is a word no row holds, as "zyzzyva" is
    for level in ("documents", "chunks"):
        assert acme.keyword_search(level, "annual leave mallory zyzzyva", 5)[0].unknown_terms == 2
        assert acme.keyword_search(level, "annual leave rota", 5)[0].unknown_terms == 0


def test_summarize_returns_each_tenants_document_whole_and_apart(acme):
    hits = acme.document_chunks(["default-note", "handbook"], 20)
    assert [(h.tenant, h.document_id, h.ordinal) for h in hits] == [
        ("acme", "handbook", 0),
        ("acme", "handbook", 1),
        ("press", "handbook", 0),
        ("press", "handbook", 1),
    ]
    for hit in hits:  # each chunk is its own tenant's text and title
        title, _ = HANDBOOKS[hit.tenant]
        assert hit.title == title and hit.content in HANDBOOKS[hit.tenant][1]
    assert acme.unknown_documents(["handbook", "mallory-note", "default-note"]) == [
        "mallory-note",
        "default-note",
    ]


def test_neighbours_are_read_in_the_hits_own_tenant_and_only_where_the_caller_may_read(acme, stack):
    own, public = acme.document_chunks(["handbook"], 20)[0], acme.document_chunks(["handbook"], 20)[2]
    assert [(h.tenant, h.id) for h in acme.chunk_neighbors([own], 1)] == [
        ("acme", "handbook#0"),
        ("acme", "handbook#1"),
    ]
    assert [(h.tenant, h.id) for h in acme.chunk_neighbors([public], 1)] == [
        ("press", "handbook#0"),
        ("press", "handbook#1"),
    ]
    # a hit forged in another tenant's name (mallory's private note, the tenant-less note) reads nothing
    for tenant, doc_id in [("user:mallory", "mallory-note"), ("", "default-note")]:
        assert acme.chunk_neighbors([replace(own, tenant=tenant, document_id=doc_id)], 3) == []


def test_summarize_of_two_documents_keeps_the_order_asked(stack, monkeypatch):
    store = PostgresStore(stack.postgres.dsn, schema=SCHEMA)  # the owner: every tenant's rows
    asked = ["mallory-note", "handbook", "default-note"]
    hits = store.document_chunks(asked, 20)
    assert [(h.tenant, h.document_id) for h in hits] == [
        ("user:mallory", "mallory-note"),
        ("acme", "handbook"),
        ("acme", "handbook"),
        ("press", "handbook"),
        ("press", "handbook"),
        ("", "default-note"),
    ]
    monkeypatch.setattr("agent_retrieval.stores.rpc.PAGE_ROWS", 1)  # each page's cursor crosses a boundary
    assert [(h.tenant, h.id) for h in store.document_chunks(asked, 20)] == [(h.tenant, h.id) for h in hits]
    store.close()


def test_both_tools_return_both_documents(stack):
    reader = Context(
        supabase_url=stack.url,
        supabase_key=stack.anon_key,
        db_schema=SCHEMA,
        supabase_user_token=stack.user_token("alice", tenant="acme"),
    )
    with Retrieval(reader, embedder=embedder()) as retrieval:
        document_retriever, chunk_retriever = make_retrieval_tools(retrieval=retrieval)
        docs = document_retriever.invoke(
            {
                "type": "tool_call",
                "id": "1",
                "name": "document_retriever",
                "args": {"query": QUERY, "top_k": 5},
            }
        ).artifact["hits"]
        chunks = chunk_retriever.invoke(
            {"type": "tool_call", "id": "2", "name": "chunk_retriever", "args": {"query": QUERY, "top_k": 10}}
        ).artifact["hits"]
        summary = chunk_retriever.invoke(
            {
                "type": "tool_call",
                "id": "3",
                "name": "chunk_retriever",
                "args": {"query": "", "query_type": "summarize", "document_ids": ["handbook"]},
            }
        ).artifact
    assert sorted((h["tenant"], h["id"]) for h in docs) == [("acme", "handbook"), ("press", "handbook")]
    assert {(h["tenant"], h["document_id"]) for h in chunks} == {("acme", "handbook"), ("press", "handbook")}
    assert len(chunks) == 4 and all(set(h["found_by"]) == {"vector", "keyword"} for h in chunks)
    assert [h["tenant"] for h in summary["hits"]] == ["acme", "acme", "press", "press"]
    assert summary["truncated"] is False


# --- user ids and tenant names ------------------------------------------------------------------------------


def readable(store: SupabaseStore) -> set[tuple[str, str]]:
    """Every (tenant, document id) the store's caller can reach by search or by id."""
    found = set(keys(store.keyword_search("documents", "annual leave note handbook", 20)))
    found |= {
        (h.tenant, h.document_id)
        for h in store.document_chunks(["handbook", "mallory-note", "default-note"], 20)
    }
    return found


PUBLIC = {("press", "handbook")}


@pytest.mark.parametrize(
    ("sub", "claims", "expected"),
    [
        ("alice", {"tenant_id": "acme"}, {("acme", "handbook")} | PUBLIC),
        ("acme", {}, PUBLIC),  # a user whose id is a tenant's name: not that tenant (it read acme's rows)
        ("mallory", {}, {("user:mallory", "mallory-note")} | PUBLIC),  # no tenant claim: the user's own rows
        ("eve", {"tenant_id": "user:mallory"}, PUBLIC),  # a tenant claim inside the user namespace: no tenant
        ("eve", {"tenant_id": ""}, PUBLIC),  # an empty claim: no tenant (it read the tenant-less rows)
        ("eve", {"tenant_id": 7}, PUBLIC),  # a claim that is not text: no tenant
        ("eve", {"other": "acme"}, PUBLIC),  # app_metadata without tenant_id: eve's own (empty) namespace
        (None, {}, PUBLIC),  # anon
    ],
)
def test_a_token_reads_its_tenant_or_else_its_users_own_namespace(stack, sub, claims, expected):
    with as_user(stack, sub, **claims) as store:
        assert readable(store) == expected


CLAIMS = [
    {"sub": "alice", "app_metadata": {"tenant_id": "acme"}},
    {"sub": "acme"},
    {"sub": "mallory", "app_metadata": {"provider": "email"}},
    {"sub": "eve", "app_metadata": {"tenant_id": "user:mallory"}},
    {"sub": "eve", "app_metadata": {"tenant_id": ""}},
    {"sub": "eve", "app_metadata": {"tenant_id": None}},
    {"sub": "eve", "app_metadata": {"tenant_id": 7}},
    {"sub": "eve", "app_metadata": {"tenant_id": ["acme"]}},
    {"sub": "eve", "app_metadata": "tenant_id"},  # not an object: jsonb's "?" would find the key in it
    {"sub": "", "app_metadata": {}},
    {"sub": 42},
    {"role": "anon"},
    {},
    {"sub": "ünï cödé", "app_metadata": {"tenant_id": "Tenant: ünï"}},
    {"sub": "eve", "app_metadata": {"tenant_id": "User:eve"}},  # another case is another name
]


@pytest.fixture(scope="module")
def current_tenant(postgres):
    """The SQL rule: current_tenant() of a store's schema, for the claims PostgREST puts in the request."""
    postgres.execute("drop schema if exists identity_rule cascade")
    PostgresStore(postgres.dsn, schema="identity_rule").init(4)

    def in_sql(claims: dict) -> str | None:
        with postgres.connect() as conn:
            conn.execute("select set_config('request.jwt.claims', %s, false)", (json.dumps(claims),))
            return conn.execute("select identity_rule.current_tenant()").fetchone()[0]

    return in_sql


@pytest.mark.parametrize("claims", CLAIMS, ids=[json.dumps(c) for c in CLAIMS])
def test_the_python_rule_is_the_sql_rule(current_tenant, claims):
    """identity.tenant_of_claims (the auth handler's) and the SQL current_tenant() (row-level security's)
    name the same tenant for every token."""
    assert current_tenant(claims) == tenant_of_claims(claims)


# --- publishing ---------------------------------------------------------------------------------------------


def test_metadata_never_publishes_only_the_operators_flag_does(stack):
    vector = embedder().embed_query("quarterly memo")
    memo = Document("memo", "Quarterly memo", "The quarterly memo is for acme staff only.", {"public": True})
    notice = Document("notice", "Opening hours notice", "The quarterly opening hours notice.", public=True)
    for doc in (memo, notice):
        doc.content_hash, doc.embedding = doc.id, vector
    with SupabaseStore(stack.url, stack.service_key, schema=SCHEMA, tenant="acme") as service:
        service.upsert([memo, notice], chunk_document(memo) + chunk_document(notice), MODEL)
        states = service.document_states(["memo", "notice", "handbook"])
    assert {i: s.public for i, s in states.items()} == {"memo": False, "notice": True, "handbook": False}
    try:
        for store in (as_user(stack, "gina", tenant_id="globex"), as_user(stack, None)):
            with store:
                found = {
                    h.id
                    for level in ("documents", "chunks")
                    for h in store.keyword_search(level, "quarterly memo notice", 10)
                }
                assert found == {"notice", "notice#0"}  # chunks inherit the document's visibility
                assert store.unknown_documents(["memo", "notice"]) == ["memo"]
    finally:
        with SupabaseStore(stack.url, stack.service_key, schema=SCHEMA, tenant="acme") as service:
            service.delete_documents(["memo", "notice"])


def test_ingest_publishes_only_when_asked_and_says_where_each_document_came_from(stack, tmp_path):
    (tmp_path / "rota.md").write_text("---\npublic: true\n---\n# Rota\n\nThe weekend rota starts at nine.\n")
    from agent_retrieval.ingest.loaders import load_documents

    context = writer(stack, "globex")
    with open_store(context.store) as store:
        report = ingest(load_documents([tmp_path]), store, embedder(), context, progress=False)
        assert report.written == 1
        state = store.document_states(["rota"])["rota"]
        assert (state.public, state.embedded, state.source) == (False, True, str(tmp_path / "rota.md"))
        with as_user(stack, None) as anon:
            assert anon.keyword_search("documents", "weekend rota", 5) == []  # front matter published nothing
            again = ingest(
                load_documents([tmp_path]), store, embedder(), context, progress=False, public=True
            )
            assert (again.written, again.embedded, again.reused) == (1, 0, 2)  # rewritten, not re-embedded
            assert store.document_states(["rota"])["rota"].public is True
            assert [h.id for h in anon.keyword_search("chunks", "weekend rota", 5)] == ["rota#0"]
            same = ingest(load_documents([tmp_path]), store, embedder(), context, progress=False, public=True)
            assert (same.unchanged, same.written) == (1, 0)
        store.delete_documents(["rota"])


def test_summarize_through_the_async_path_keeps_tenants_apart(stack):
    import asyncio

    reader = Context(
        supabase_url=stack.url,
        supabase_key=stack.anon_key,
        db_schema=SCHEMA,
        supabase_user_token=stack.user_token("alice", tenant="acme"),
    )
    request = ChunkSearchRequest(query="", query_type="summarize", document_ids=["handbook"])
    with Retrieval(reader, embedder=embedder()) as retrieval:
        result = asyncio.run(retrieval.asearch(request, "chunks"))
    assert [(h.tenant, h.ordinal) for h in result.hits] == [
        ("acme", 0),
        ("acme", 1),
        ("press", 0),
        ("press", 1),
    ]


async def test_a_planner_is_shown_the_metadata_of_the_callers_rows_and_public_ones_only(acme, stack):
    assert acme.metadata_values() == {"owner": ["acme", "press"]} == await acme.ametadata_values()
    with as_user(stack, "mallory") as mallory:  # its own namespace, which has no tagged rows, and public rows
        assert mallory.metadata_values() == {"owner": ["press"]}
