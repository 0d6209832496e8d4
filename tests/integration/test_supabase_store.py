"""The Supabase store through the real PostgREST: row-level security per tenant, hostile input, concurrency,
the SQL hybrid function agreeing with the tools' fusion, and the tools end to end.

Ingestion runs with the service role key; users search with the anon key and their own access token.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest

from agent_retrieval import demo
from agent_retrieval.context import Context
from agent_retrieval.core.fusion import fuse, keyword_trust
from agent_retrieval.core.process import ProcessState
from agent_retrieval.core.text import keyword_terms
from agent_retrieval.errors import StoreError
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.loaders import load_documents
from agent_retrieval.models import Chunk, ChunkSearchRequest, Document
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.stores import open_store
from agent_retrieval.stores.postgres import PostgresStore
from agent_retrieval.stores.rpc import POSTINGS_BLOCK, Json, _hit
from agent_retrieval.stores.supabase import SupabaseStore
from agent_retrieval.tools import make_retrieval_tools
from tests.bm25 import every_row_top_k, random_query, zipf_corpus
from tests.conftest import WordHashEmbeddings
from tests.integration.test_postgres_store import calls_of

SCHEMA = "agent_retrieval"
DIM = 256  # the word-hash test embedder's
# Every table holding a tenant's rows, term counts included: a count per tenant tells which words its
# private documents hold.
TABLES = (
    "documents",
    "chunks",
    "documents_postings",
    "chunks_postings",
    "documents_term_stats",
    "chunks_term_stats",
    "corpus_stats",
)


def tenant_corpus(tenant: str, secret: str, public: bool = False) -> tuple[list[Document], list[Chunk]]:
    """One document per tenant, each naming a secret only that tenant may find."""
    embedder = WordHashEmbeddings()
    doc_id = f"{tenant}-plan"
    text = f"The {tenant} acquisition plan is codenamed {secret}. Closing is planned for the spring."
    meta = {"category": "strategy", "owner": tenant}
    doc = Document(
        doc_id,
        f"{tenant} plan",
        text,
        meta,
        content_hash=tenant,
        text_hash=f"d-{tenant}",
        embedding=_unit(embedder.vector(text)),
        public=public,
    )
    chunk = Chunk(
        f"{doc_id}#0", doc_id, 0, text, f"{tenant} plan", meta, f"c-{tenant}", _unit(embedder.vector(text))
    )
    return [doc], [chunk]


def _unit(values: list[float]) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture(scope="module")
def stack(supabase_stack):
    """The default schema, for 256-dimensional vectors, with two tenants' secrets and one public document."""
    supabase_stack.postgres.execute(f"drop schema if exists {SCHEMA} cascade")
    PostgresStore(supabase_stack.postgres.dsn, schema=SCHEMA).init(DIM)
    supabase_stack.postgrest.reload_schema()
    model = "test/word-hash"
    for tenant, secret, public in [
        ("acme", "BLUEHERON", False),
        ("globex", "REDFALCON", False),
        ("press", "OPENDOOR", True),
    ]:
        with SupabaseStore(supabase_stack.url, supabase_stack.service_key, schema=SCHEMA, tenant=tenant) as s:
            s.upsert(*tenant_corpus(tenant, secret, public), model)
    return supabase_stack


def user_store(stack, sub: str | None, claim: str | None = None, **kwargs) -> SupabaseStore:
    """A user signed in as `sub`, whose token's app_metadata names tenant `claim`; None: anon."""
    token = stack.user_token(sub, tenant=claim) if sub else None
    return SupabaseStore(stack.url, stack.anon_key, schema=SCHEMA, user_token=token, **kwargs)


def visible_ids(store: SupabaseStore, **scope) -> set[str]:
    """Every id this store can reach through every read function."""
    query = "acquisition plan codenamed BLUEHERON REDFALCON OPENDOOR"
    vector = _unit(WordHashEmbeddings().vector(query))
    found = set()
    for level in ("documents", "chunks"):
        found |= {h.id for h in store.vector_search(level, vector, 20, **scope)}
        found |= {h.id for h in store.keyword_search(level, query, 20, **scope)}
        found |= {
            r["id"]
            for r in store._call(
                f"hybrid_search_{level}",
                query_text=query,
                query_embedding=vector,
                match_count=20,
                tenant=store.tenant,
            )
        }
    everything = ["acme-plan", "globex-plan", "press-plan"]
    found |= {h.id for h in store.document_chunks(everything, 20)}
    found |= set(everything) - set(store.unknown_documents(everything))
    return found


def test_each_user_reads_only_their_tenant_and_public_rows_through_every_function(stack):
    assert visible_ids(user_store(stack, "alice", "acme")) == {
        "acme-plan",
        "acme-plan#0",
        "press-plan",
        "press-plan#0",
    }
    assert visible_ids(user_store(stack, "gina", "globex")) == {
        "globex-plan",
        "globex-plan#0",
        "press-plan",
        "press-plan#0",
    }
    assert visible_ids(user_store(stack, None)) == {"press-plan", "press-plan#0"}  # anon: public only
    assert user_store(stack, "alice", "acme").stats().documents == 2


def test_crafted_scopes_and_filters_never_widen_what_a_user_reads(stack):
    # asking for another tenant by argument, filter or id narrows further or finds nothing
    alice = user_store(stack, "alice", "acme", tenant="globex")
    assert visible_ids(alice) == {"press-plan", "press-plan#0"}
    alice = user_store(stack, "alice", "acme")
    vector = _unit(WordHashEmbeddings().vector("REDFALCON"))
    assert alice.vector_search("chunks", vector, 10, filters={"owner": "globex"}) == []
    assert alice.keyword_search("chunks", "REDFALCON", 10, document_ids=["globex-plan"]) == []
    assert alice.document_chunks(["globex-plan"], 10) == []
    assert alice.unknown_documents(["globex-plan"]) == ["globex-plan"]
    assert [d.id for d in alice.get_documents(["globex-plan", "acme-plan", "press-plan"])] == [
        "acme-plan",
        "press-plan",
    ]
    # without a tenant claim a user reads their own namespace ("user:mallory"), which holds nothing
    assert visible_ids(user_store(stack, "mallory")) == {"press-plan", "press-plan#0"}


def test_users_cannot_write_and_the_service_role_sees_everything(stack):
    alice = user_store(stack, "alice", "acme")
    with pytest.raises(StoreError, match="service role"):
        alice.upsert(*tenant_corpus("acme", "OVERWRITE"), "test/word-hash")
    with pytest.raises(StoreError, match="service role"):
        alice.delete_documents(["acme-plan"])
    with pytest.raises(StoreError, match="service role"):  # sources are the operator's file paths
        alice.documents_from("/")
    with pytest.raises(StoreError, match="service role"):
        alice.list_documents()
    upkeep = {"rebuild_postings_chunks": ("()", {}), "add_postings_documents": ("(bigint[])", {"ids": [1]})}
    for function, (arguments, values) in upkeep.items():  # the store's own upkeep
        with pytest.raises(StoreError, match="service role"):
            alice._call(function, **values)
        assert stack.postgres.execute(  # refused as a function, before any table's privileges are asked
            "select has_function_privilege('authenticated', %s, 'execute')",
            (f"{SCHEMA}.{function}{arguments}",),
        ) == [(False,)]
    service = SupabaseStore(stack.url, stack.service_key, schema=SCHEMA)
    assert service.stats().documents == 3
    assert {h.id for h in service.keyword_search("documents", "BLUEHERON REDFALCON", 5)} == {
        "acme-plan",
        "globex-plan",
    }


HOSTILE = [
    "'; drop table agent_retrieval.documents; --",
    '" or 1=1 --',
    "REDFALCON') or ('1'='1",
    "$$; delete from agent_retrieval.chunks; $$",
    "a & b | !c <-> d:*",
    "\\x00\\'",
    "🔥" * 200,
]


@pytest.mark.parametrize("text", HOSTILE)
def test_injection_through_text_filters_and_ids_changes_nothing(stack, text):
    before = stack.postgres.execute(f"select count(*) from {SCHEMA}.documents")[0][0]
    alice = user_store(stack, "alice", "acme")
    vector = _unit(WordHashEmbeddings().vector("plan"))
    assert {h.id for h in alice.keyword_search("chunks", text, 10)} <= {"acme-plan#0", "press-plan#0"}
    assert alice.vector_search("chunks", vector, 10, filters={"owner": text}) == []
    assert alice.vector_search("chunks", vector, 10, filters={text[:60].replace(" ", "_") or "k": "x"}) == []
    assert alice.keyword_search("chunks", "plan", 10, document_ids=[text]) == []
    assert alice.unknown_documents([text]) == [text]
    assert stack.postgres.execute(f"select count(*) from {SCHEMA}.documents")[0][0] == before


def test_32_concurrent_searches_through_postgrest(stack):
    store = user_store(stack, "alice", "acme")
    vector = _unit(WordHashEmbeddings().vector("acquisition plan"))

    def search(n: int) -> set[str]:
        if n % 2:
            return {h.id for h in store.vector_search("chunks", vector, 5)}
        return {h.id for h in store.keyword_search("chunks", "acquisition plan", 5)}

    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(search, range(64)))
    assert all(r == {"acme-plan#0", "press-plan#0"} for r in results)


def test_no_table_shows_a_user_another_tenants_rows(stack):
    tables = {
        name
        for (name,) in stack.postgres.execute(
            "select table_name from information_schema.columns "
            "where table_schema = %s and column_name = 'tenant_id'",
            (SCHEMA,),
        )
    }
    assert tables == set(TABLES)  # a new table with tenants' rows must be listed (and guarded) here
    for sub, tenant, token in [
        ("alice", "acme", stack.user_token("alice", tenant="acme")),
        (None, None, None),
    ]:
        headers = {"apikey": stack.anon_key, "Accept-Profile": SCHEMA}
        headers["Authorization"] = f"Bearer {token or stack.anon_key}"
        for table in TABLES:
            response = httpx.get(f"{stack.url}/rest/v1/{table}?select=tenant_id,is_public", headers=headers)
            assert response.status_code == 200, response.text
            seen = {(row["tenant_id"], row["is_public"]) for row in response.json()}
            assert seen, table  # the public rows, at least
            assert all(public or owner == tenant for owner, public in seen), (sub, table, seen)


def test_async_searches_run_on_the_async_client(stack):
    store = user_store(stack, "alice", "acme")
    vector = _unit(WordHashEmbeddings().vector("acquisition plan"))

    async def run() -> list[list]:
        return await asyncio.gather(
            *[store.avector_search("chunks", vector, 5) for _ in range(16)],
            *[store.akeyword_search("chunks", "BLUEHERON", 5) for _ in range(16)],
        )

    results = asyncio.run(run())
    assert {h.id for r in results[:16] for h in r} == {"acme-plan#0", "press-plan#0"}
    assert all([h.id for h in r] == ["acme-plan#0"] for r in results[16:])
    assert store._client is None  # the async client did the work, not the sync one in threads


@pytest.mark.parametrize("mode", ["rrf", "convex"])
def test_the_sql_hybrid_function_fuses_as_the_tools_do(stack, mode):
    service = SupabaseStore(stack.url, stack.service_key, schema=SCHEMA)
    query = "acquisition plan codenamed BLUEHERON REDFALCON"  # no row holds both names
    vector = _unit(WordHashEmbeddings().vector("spring closing plan"))
    weights = {"vector_weight": 0.7, "keyword_weight": 1.3}
    rows = service._call(
        "hybrid_search_chunks",
        query_text=query,
        query_embedding=vector,
        match_count=10,
        fusion=mode,
        rrf_k=10,
        candidates=10,
        **weights,
    )
    keyword = service.keyword_search("chunks", query, 10)
    assert keyword_trust(keyword) < 1  # the keyword weight is scaled here, as the tools scale it
    expected = fuse(
        service.vector_search("chunks", vector, 10),
        keyword,
        mode=mode,
        k=10,
        query_words=len(keyword_terms(query)),
        **weights,
    )
    assert [r["id"] for r in rows] == [h.id for h in expected]
    assert [r["score"] for r in rows] == pytest.approx([h.score for h in expected], rel=1e-9)
    assert [(r["vector_rank"], r["keyword_rank"]) for r in rows] == [
        (h.vector_rank, h.keyword_rank) for h in expected
    ]


def test_the_tools_run_on_supabase_from_the_context(stack, tmp_path):
    # ingest the demo corpus as the service role into tenant "demo", then search as a user of that tenant
    embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    writer = Context(supabase_url=stack.url, supabase_key=stack.service_key, tenant_id="demo")
    with open_store(writer.store) as store:
        report = ingest(load_documents([demo.corpus_dir()]), store, embedder, writer, progress=False)
        assert report.written == report.documents > 10
        again = ingest(load_documents([demo.corpus_dir()]), store, embedder, writer, progress=False)
        assert (again.unchanged, again.embedded) == (report.documents, 0)  # nothing re-embedded
    reader = Context(
        supabase_url=stack.url,
        supabase_key=stack.anon_key,
        supabase_user_token=stack.user_token("dora", tenant="demo"),
    )
    with Retrieval(reader, embedder=embedder) as retrieval:
        document_retriever, chunk_retriever = make_retrieval_tools(retrieval=retrieval)
        docs = document_retriever.invoke(
            {
                "type": "tool_call",
                "id": "1",
                "name": "document_retriever",
                "args": {"query": "Banda Lane deposit", "top_k": 3},
            }
        )
        ids = [h["id"] for h in docs.artifact["hits"]]
        assert "banda-lane-property-file" in ids and "acme-plan" not in ids
        chunks = chunk_retriever.invoke(
            {
                "type": "tool_call",
                "id": "2",
                "name": "chunk_retriever",
                "args": {"query": "Banda Lane deposit", "document_ids": ids, "top_k": 3},
            }
        )
        assert {h["document_id"] for h in chunks.artifact["hits"]} <= set(ids)
        assert chunks.artifact["degraded"] == []
        result = asyncio.run(
            retrieval.asearch(ChunkSearchRequest(query="deposit protection scheme"), "chunks")
        )
        assert result.hits and {p for h in result.hits for p in h.found_by} == {"vector", "keyword"}


def test_a_schema_supabase_does_not_expose_is_a_clear_error(stack):
    store = SupabaseStore(stack.url, stack.service_key, schema="not_exposed")
    with pytest.raises(StoreError, match="exposed schemas"):
        store.stats()


def test_a_wrong_key_is_a_clear_error(stack):
    store = SupabaseStore(stack.url, "not-a-key", schema=SCHEMA)
    with pytest.raises(StoreError) as error:
        store.stats()
    assert "not-a-key" not in str(error.value)


def test_a_users_pruned_keyword_search_ranks_as_scoring_every_row_they_may_read(supabase_stack):
    # Under row-level security the pruned search reads only the postings and counts of the user's tenant
    # and of public rows: its top k must be the exact BM25 top k of those rows, none of another tenant's.
    schema, postgres = "ar_ranking", supabase_stack.postgres
    postgres.execute(f"drop schema if exists {schema} cascade")
    PostgresStore(postgres.dsn, schema=schema).init(4)
    supabase_stack.postgrest.reload_schema()
    rng = np.random.default_rng(5)
    texts = zipf_corpus(rng, 450)
    for tenant, first, public in (("acme", 0, False), ("globex", 150, False), ("press", 300, True)):
        docs = [
            Document(f"{tenant}{n}", "", texts[first + n], content_hash=str(n), public=public)
            for n in range(150)
        ]
        chunks = [Chunk(f"{d.id}#0", d.id, 0, d.content, "", {}) for d in docs]
        with SupabaseStore(supabase_stack.url, supabase_stack.service_key, schema=schema, tenant=tenant) as s:
            s.upsert(docs, chunks, "test/none")
    token = supabase_stack.user_token("u-acme", tenant="acme")
    with SupabaseStore(supabase_stack.url, supabase_stack.anon_key, schema=schema, user_token=token) as user:
        for _ in range(30):
            query, k = random_query(rng), int(rng.integers(1, 12))
            found = [(h.id, h.keyword_score) for h in user.keyword_search("chunks", query, k)]
            every_row = every_row_top_k(postgres, schema, query, k, "acme")
            assert [chunk for chunk, _ in found] == [chunk for chunk, _ in every_row], query
            assert [score for _, score in found] == pytest.approx([score for _, score in every_row], rel=1e-9)
            assert not any(chunk.startswith("globex") for chunk, _ in found)


def test_users_keyword_searches_are_scored_here_as_the_sql_function_ranks_them_for_each(supabase_stack):
    # Through PostgREST too the store scores a whole level from the words' postings (read once, kept): each
    # caller's answer is the SQL function's for that caller's token, and row-level security decides what
    # each reads; callers of different tenants keep their postings side by side, read once each.
    schema, postgres = "ar_ranking", supabase_stack.postgres  # an exposed schema, made anew
    postgres.execute(f"drop schema if exists {schema} cascade")
    PostgresStore(postgres.dsn, schema=schema).init(4)
    supabase_stack.postgrest.reload_schema()
    rng = np.random.default_rng(11)
    texts = zipf_corpus(rng, 300)

    def write(tenant: str, first: int, last: int, public: bool = False, suffix: str = "") -> None:
        docs = [
            Document(f"{tenant}{n}", "", texts[n] + suffix, content_hash=f"{n}{suffix}", public=public)
            for n in range(first, last)
        ]
        chunks = [Chunk(f"{d.id}#0", d.id, 0, d.content, "", {"n": n % 4}) for n, d in enumerate(docs)]
        with SupabaseStore(supabase_stack.url, supabase_stack.service_key, schema=schema, tenant=tenant) as s:
            s.upsert(docs, chunks, "test/none")

    write("acme", 0, 100)
    write("globex", 100, 200)
    write("press", 200, 300, public=True)
    process = ProcessState()
    users = {
        name: SupabaseStore(
            supabase_stack.url,
            supabase_stack.anon_key,
            schema=schema,
            user_token=supabase_stack.user_token(f"u-{name}", tenant=name) if name != "anon" else None,
            process=process,
        )
        for name in ("acme", "globex", "anon")
    }
    called: list[str] = []
    for user in users.values():
        calls_of(user, called)

    def ranked(hits: list) -> list:
        # rows whose scores tie to 12 digits in either order: SQL sums a row's parts in no set order
        return sorted((-round(h.keyword_score, 12), h.id, h.unknown_terms) for h in hits)

    def same_as_sql(
        query: str, k: int = 8, document_ids: list[str] | None = None, filters: dict | None = None
    ) -> None:
        for name, user in users.items():
            found = user.keyword_search("chunks", query, k, document_ids=document_ids, filters=filters)
            scope = {"match_count": k, "document_ids": document_ids, "filter": Json(filters or {})}
            expected = [
                _hit("chunks", r) for r in user._call("keyword_search_chunks", query_text=query, **scope)
            ]
            assert ranked(found) == ranked(expected)
            assert [h.keyword_score for h in found] == pytest.approx([h.keyword_score for h in expected])
            assert not [h for h in found if not h.id.startswith((name, "press"))], (name, query)

    queries = [random_query(rng) for _ in range(10)] + ["w0 nowhere"]
    for query in queries:
        same_as_sql(query)
    assert "keyword_postings_chunks" in called and "keyword_rows_chunks" in called
    called.clear()
    for query in queries:  # again, each tenant in turn: every word's postings served as kept
        same_as_sql(query)
    scored = [function for function in called if function != "keyword_search_chunks"]  # the comparison's
    assert scored and "keyword_postings_chunks" not in scored
    for query in queries[:4]:  # a document list's rows, of the caller's tenant and public ones only
        same_as_sql(query, document_ids=["acme1", "acme7", "globex120", "press250", "press251"])
    assert "scope_rows_chunks" in called
    for query in queries[:4]:  # a filter: the ranking's head, or the filter's few rows, under RLS
        same_as_sql(query, filters={"n": [0, 3]})
        same_as_sql(query, k=3, filters={"n": 1})
        same_as_sql(query, filters={"n": 2})
    assert "filter_rows_chunks" in called and "filter_scope_rows_chunks" in called
    # a write any of them can read (public rows), then one only acme can: each answers for the rows it sees
    write("press", 200, 230, public=True, suffix=" w3 w3 w7")
    same_as_sql("w3 w7 w11")
    write("acme", 0, 40, suffix=" w5 w5")
    for query in ["w5 w3", *queries[:4]]:
        same_as_sql(query)
    for user in users.values():
        user.close()


def test_keyword_search_under_row_level_security_reads_the_postings_by_their_index(supabase_stack):
    # A condition the planner cannot prove leaks nothing (one holding coalesce()) is kept behind the tenant
    # policy and cannot read an index: a user's keyword search through PostgREST then read every posting of
    # every tenant, 450 ms at 100K chunks where the superuser's took 22. The server counts each table's
    # sequential scans; its backends report them once idle, within PGSTAT_IDLE_INTERVAL (10 s), so the
    # count is read after that long: once for the writes' scans, once for the searches'. A new schema's
    # table, large enough that its index is the cheaper way to a few words, counts only this test's.
    schema, postgres = "ar_ranking", supabase_stack.postgres
    postgres.execute(f"drop schema if exists {schema} cascade")
    PostgresStore(postgres.dsn, schema=schema).init(4)
    supabase_stack.postgrest.reload_schema()
    # each chunk in a block of its own: a posting row per word and chunk, 30K rows of which a search wants few
    postgres.execute(f"alter sequence {schema}.chunks_rowid_seq increment by {POSTINGS_BLOCK}")
    rng = np.random.default_rng(3)
    texts = zipf_corpus(rng, 1500)
    docs = [Document(f"acme{n}", "", text, content_hash=str(n)) for n, text in enumerate(texts)]
    chunks = [Chunk(f"{d.id}#0", d.id, 0, d.content, "", {}) for d in docs]
    with SupabaseStore(supabase_stack.url, supabase_stack.service_key, schema=schema, tenant="acme") as s:
        s.upsert(docs, chunks, "test/none")
    postgres.execute(f"analyze {schema}.chunks_postings")

    def sequential_scans() -> int:
        time.sleep(11)
        (count,) = postgres.execute(
            "select seq_scan from pg_stat_user_tables where relid = %s::regclass",
            (f"{schema}.chunks_postings",),
        )[0]
        return count

    before = sequential_scans()
    token = supabase_stack.user_token("u-acme", tenant="acme")
    with SupabaseStore(supabase_stack.url, supabase_stack.anon_key, schema=schema, user_token=token) as user:
        for _ in range(8):
            assert user._call("keyword_search_chunks", query_text=random_query(rng), match_count=5)
    assert sequential_scans() == before


# --- bounds the SQL holds itself: anyone with the anon key calls these functions through PostgREST ---------


def rpc(stack, function: str, body: dict[str, Any], token: str | None = None) -> httpx.Response:
    """A direct call through PostgREST, as a caller who skips the client (and its checks) would make it."""
    headers = {"apikey": stack.anon_key, "Content-Profile": SCHEMA}
    headers["Authorization"] = f"Bearer {token or stack.anon_key}"
    return httpx.post(f"{stack.url}/rest/v1/rpc/{function}", json=body, headers=headers, timeout=60)


PUBLIC_WINDOW = {"tenant_id": "press", "document_id": "press-plan", "ordinal": 0}
QUERY_VECTOR = [1.0] + [0.0] * (DIM - 1)


@pytest.mark.parametrize(
    ("function", "within", "past", "message"),
    [
        ("chunk_neighbors", {"windows": [PUBLIC_WINDOW] * 100, "reach": 3},
         {"windows": [PUBLIC_WINDOW] * 20_000, "reach": 3}, "windows: at most 100 (got 20000)"),
        ("get_documents", {"ids": ["press-plan"] * 1000}, {"ids": ["press-plan"] * 1001},
         "ids: at most 1000 (got 1001)"),
        ("unknown_documents", {"ids": ["x"] * 10_000}, {"ids": ["x"] * 10_001}, "ids: at most 10000"),
        ("vectors_by_hash", {"hashes": ["h"] * 1000, "model": "m"}, {"hashes": ["h"] * 1001, "model": "m"},
         "hashes: at most 1000"),
        ("document_chunks", {"ids": ["press-plan"], "max_rows": 1000},
         {"ids": ["press-plan"], "max_rows": 10**6}, "max_rows: at most 1000"),
        ("metadata_counts", {"max_chars": 100, "max_values": 100}, {"max_chars": 100, "max_values": 10**6},
         "max_values: at most 100"),
        ("match_chunks", {"query_embedding": QUERY_VECTOR, "document_ids": ["x"] * 10_000},
         {"query_embedding": QUERY_VECTOR, "document_ids": ["x"] * 10_001}, "document_ids: at most 10000"),
        ("keyword_search_chunks", {"query_text": "plan", "filter": {f"k{i}": 1 for i in range(16)}},
         {"query_text": "plan", "filter": {f"k{i}": 1 for i in range(17)}}, "filter keys: at most 16"),
        ("scope_rows_chunks", {"document_ids": ["x"] * 10_000}, {"document_ids": ["x"] * 10_001},
         "document_ids: at most 10000"),
        ("filter_rows_chunks", {"ids": [1] * 16_000, "filter": {"owner": "press"}},
         {"ids": [1] * 16_001, "filter": {"owner": "press"}}, "ids: at most 16000"),
        ("filter_scope_rows_chunks", {"filter": {f"k{i}": 1 for i in range(16)}},
         {"filter": {f"k{i}": 1 for i in range(17)}}, "filter keys: at most 16"),
        ("match_chunks", {"query_embedding": QUERY_VECTOR, "filter_rows": [1] * 20_000},
         {"query_embedding": QUERY_VECTOR, "filter_rows": [1] * 20_001}, "filter_rows: at most 20000"),
        ("hybrid_search_documents",
         {"query_text": "plan", "query_embedding": QUERY_VECTOR, "filter": {"owner": ["press"] * 200}},
         {"query_text": "plan", "query_embedding": QUERY_VECTOR, "filter": {"owner": ["press"] * 201}},
         "values of one filter key: at most 200"),
    ],
    ids=lambda value: value if isinstance(value, str) and "(" not in value and ":" not in value else "",
)  # fmt: skip
def test_the_sql_functions_hold_their_own_bounds_for_anon_through_postgrest(
    stack, function, within, past, message
):
    """Who sets it: anyone with the anon key (public, in a Supabase app's client code). What bounds it: each
    function's own check in SQL, the same numbers the client checks first."""
    assert rpc(stack, function, within).status_code == 200
    refused = rpc(stack, function, past)
    assert refused.status_code == 400 and message in refused.json()["message"], refused.text


def test_db_init_gives_postgrest_roles_supabases_statement_timeouts_and_keeps_an_operators_own(stack):
    """Who sets it: anyone with the anon key, through any function. What bounds it: statement_timeout of
    the role PostgREST takes (anon 3 s, authenticated 8 s), set by `db init` where the operator set none."""
    pg = stack.postgres
    pg.execute(
        f"create function {SCHEMA}.statement_timeout_now() returns text language sql stable "
        "as $$ select current_setting('statement_timeout') $$"
    )
    pg.execute(f"grant execute on function {SCHEMA}.statement_timeout_now() to anon, authenticated")
    stack.postgrest.reload_schema()
    try:
        user = stack.user_token("alice", tenant="acme")
        assert rpc(stack, "statement_timeout_now", {}).json() == "3s"
        assert rpc(stack, "statement_timeout_now", {}, token=user).json() == "8s"
        pg.execute("alter role anon set statement_timeout = '1500ms'")  # the operator's own choice
        PostgresStore(pg.dsn, schema=SCHEMA).init(DIM)
        assert pg.execute(
            "select setconfig from pg_db_role_setting s join pg_roles r on r.oid = s.setrole "
            "where r.rolname = 'anon'"
        ) == [(["statement_timeout=1500ms"],)]
    finally:
        pg.execute("alter role anon set statement_timeout = '3s'")
        pg.execute(f"drop function {SCHEMA}.statement_timeout_now()")
        stack.postgrest.reload_schema()
