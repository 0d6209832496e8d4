"""The Postgres store by DSN: `db init`, the CLI and the tools on it, tenants scoped inside the SQL, filtered
vector search that still fills k, and clear errors for what goes wrong."""

from __future__ import annotations

import json
import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from agent_retrieval import cli
from agent_retrieval.core.fusion import fuse, keyword_trust
from agent_retrieval.core.process import ProcessState
from agent_retrieval.core.text import keyword_terms
from agent_retrieval.errors import DimensionMismatch, InvalidRequest, StoreError
from agent_retrieval.models import Chunk, Document
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.stores import postings as kept_postings
from agent_retrieval.stores import rpc
from agent_retrieval.stores.base import DocumentState
from agent_retrieval.stores.postgres import PostgresStore
from agent_retrieval.stores.postings import KeptPostings
from agent_retrieval.stores.rpc import POSTINGS_BLOCK, _hit
from tests.bm25 import VOCABULARY, every_row_top_k, idf_and_average, random_query, zipf_corpus
from tests.conftest import WordHashEmbeddings


@pytest.fixture
def schema(request, postgres) -> str:
    """A fresh schema named after the test."""
    name = "t_" + request.node.name.lower().replace("[", "_").replace("]", "")[:40]
    postgres.execute(f"drop schema if exists {name} cascade")
    return name


@pytest.fixture(autouse=True)
def word_hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands build their embedder from the Context; here they get the fast test one."""

    def make(context, **_):
        return Embedder(WordHashEmbeddings(), "test/word-hash")

    monkeypatch.setattr("agent_retrieval.search.retrieval.make_embedder", make)
    monkeypatch.setattr("agent_retrieval.providers.embeddings.make_embedder", make)


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_db_init_then_the_cli_ingests_queries_and_counts(capsys, monkeypatch, postgres, schema, tmp_path):
    monkeypatch.setenv("AGENT_RETRIEVAL_DSN", postgres.dsn)
    monkeypatch.setenv("AGENT_RETRIEVAL_SCHEMA", schema)
    code, out, err = run(capsys, "db", "init")
    assert code == 0 and f"schema {schema} is ready for 256-dimensional vectors" in out
    assert "from test/word-hash" in err  # the dimension was read off the configured embedder
    assert run(capsys, "db", "init")[0] == 0  # running it again changes nothing

    (tmp_path / "fees.md").write_text(
        "---\ncategory: policy\n---\n# Fees\n\nSales commission is 1.2% of the price.\n"
    )
    (tmp_path / "banda.md").write_text("# 14 Banda Lane\n\nThe tenancy deposit of £2,100 is protected.\n")
    code, out, _ = run(capsys, "ingest", "--no-progress", str(tmp_path))
    assert code == 0 and "2 documents: 2 written" in out
    code, out, _ = run(capsys, "ingest", "--no-progress", str(tmp_path))
    assert code == 0 and "2 unchanged" in out and "0 texts embedded" in out
    code, out, _ = run(capsys, "query", "tenancy deposit", "--json")
    hits = json.loads(out)["hits"]
    assert code == 0 and hits[0]["id"] == "banda#0" and set(hits[0]["found_by"]) == {"vector", "keyword"}
    code, out, _ = run(capsys, "stats", "--json")
    stats = json.loads(out)
    assert (stats["backend"], stats["documents"], stats["dimension"]) == ("postgres", 2, 256)
    assert "password" not in stats["location"] and stats["location"].endswith(f"#{schema}")


def test_db_init_refuses_another_dimension_and_prints_sql_for_supabase(capsys, monkeypatch, postgres, schema):
    monkeypatch.setenv("AGENT_RETRIEVAL_DSN", postgres.dsn)
    assert run(capsys, "db", "init", "--schema", schema, "--dimension", "8")[0] == 0
    code, _, err = run(capsys, "db", "init", "--schema", schema, "--dimension", "16")
    assert code == 2 and "8-dimensional vectors, not 16" in err and "Traceback" not in err
    code, out, _ = run(capsys, "db", "init", "--print", "--schema", "other", "--dimension", "1536")
    assert code == 0 and "create or replace function other.match_chunks" in out and "vector(1536)" in out
    assert "{{" not in out  # every placeholder filled
    monkeypatch.delenv("AGENT_RETRIEVAL_DSN")
    code, _, err = run(capsys, "db", "init", "--dimension", "8")
    assert code == 2 and "db init --print" in err


def test_db_init_builds_the_vector_indexes_as_deep_as_the_operator_sets(
    capsys, monkeypatch, postgres, schema
):
    monkeypatch.setenv("AGENT_RETRIEVAL_DSN", postgres.dsn)
    monkeypatch.setenv("AGENT_RETRIEVAL_SCHEMA", schema)

    def indexes() -> dict[str, tuple[int, list[str]]]:
        rows = postgres.execute(
            "select c.relname, c.oid::int, c.reloptions from pg_class c join pg_am a on a.oid = c.relam "
            "where c.relnamespace = %s::regnamespace and a.amname = 'hnsw'",
            (schema,),
        )
        return {name: (oid, options) for name, oid, options in rows}

    monkeypatch.setenv("AGENT_RETRIEVAL_VECTOR_INDEX_BUILD_DEPTH", "40")
    assert run(capsys, "db", "init", "--dimension", "4")[0] == 0
    first = indexes()
    assert {n: o for n, (_, o) in first.items()} == {
        "documents_embedding": ["ef_construction=40"],
        "chunks_embedding": ["ef_construction=40"],
    }
    store = PostgresStore(postgres.dsn, schema=schema)
    docs = [Document(f"d{n}", "", f"clause {n}", content_hash=str(n)) for n in range(8)]
    chunks = [
        Chunk(f"d{n}#0", f"d{n}", 0, d.content, "", {}, embedding=np.eye(4, dtype=np.float32)[n % 4])
        for n, d in enumerate(docs)
    ]
    store.upsert(docs, chunks, "test/axes")
    code, out, _ = run(capsys, "db", "init", "--dimension", "4")
    assert code == 0 and indexes() == first  # the same depth: left alone, and nothing to say
    assert out.splitlines() == [f"schema {schema} is ready for 4-dimensional vectors at {store.location}"]

    monkeypatch.setenv("AGENT_RETRIEVAL_VECTOR_INDEX_BUILD_DEPTH", "80")
    code, out, _ = run(capsys, "db", "init", "--dimension", "4")
    assert code == 0 and "the chunks vector index was built again 80 deep (it was 40 deep)" in out
    again = indexes()
    assert {n: o for n, (_, o) in again.items()} == {
        "documents_embedding": ["ef_construction=80"],
        "chunks_embedding": ["ef_construction=80"],
    }
    assert all(again[name][0] != first[name][0] for name in first)  # built anew, beside the old ones
    assert [h.id for h in store.vector_search("chunks", np.eye(4, dtype=np.float32)[1], 2)] == [
        "d1#0",
        "d5#0",
    ]
    assert store.init(4) == [] and indexes() == again  # code that names no depth keeps the index's
    assert "wanted int := 80;" in run(capsys, "db", "init", "--print", "--dimension", "4")[1]

    monkeypatch.setenv("AGENT_RETRIEVAL_VECTOR_INDEX_BUILD_DEPTH", "8")
    code, _, err = run(capsys, "db", "init", "--dimension", "4")
    assert code == 2 and "vector_index_build_depth" in err and "32" in err and "Traceback" not in err
    assert indexes() == again
    store.close()


def test_an_embedder_of_another_dimension_is_refused_pointing_to_db_init(stores):
    store = stores()
    doc = Document("a", "A", "text", content_hash="h", embedding=np.ones(8, dtype=np.float32) / np.sqrt(8))
    with pytest.raises(DimensionMismatch, match="db init"):
        store.upsert([doc], [], "big/model")
    assert store.stats().documents == 0


@pytest.fixture
def stores(postgres, schema):
    """Opens stores on the test's schema (the first one creates it, for 4 dimensions) and closes them all."""
    opened: list[PostgresStore] = []

    def open_store(**kwargs) -> PostgresStore:
        opened.append(PostgresStore(postgres.dsn, schema=schema, **kwargs))
        if len(opened) == 1:
            opened[0].init(4)
        return opened[-1]

    yield open_store
    for store in opened:
        store.close()


def test_tenants_are_scoped_inside_the_sql(stores):
    owner = stores()
    vector = np.asarray([1, 0, 0, 0], dtype=np.float32)
    for tenant in ("acme", "globex"):
        doc = Document(
            "plan", f"{tenant} plan", f"secret plan of {tenant}", content_hash=tenant, embedding=vector
        )
        chunk = Chunk("plan#0", "plan", 0, f"secret plan of {tenant}", "plan", embedding=vector)
        stores(tenant=tenant).upsert([doc], [chunk], "m")
    acme = stores(tenant="acme")
    assert [h.content for h in acme.keyword_search("chunks", "secret plan", 5)] == ["secret plan of acme"]
    assert [h.content for h in acme.vector_search("chunks", vector, 5)] == ["secret plan of acme"]
    assert acme.document_states(["plan"]) == {"plan": DocumentState("acme", True, None, False)}
    assert acme.stats().documents == 1
    assert acme.delete_documents(["plan"]) == 1
    assert stores(tenant="globex").stats().documents == 1
    assert owner.stats().documents == 1  # the owner's view, with no tenant: every tenant's rows


def test_filtered_vector_search_fills_k_where_the_index_alone_would_not(stores):
    """3,000 rows near the query and 5 far from it: HNSW's candidates hold none of the 5, the answer all."""
    store = stores()
    rng = np.random.default_rng(1)
    near = rng.normal([1, 0, 0, 0], 0.05, (3000, 4)).astype(np.float32)
    docs = [
        Document(
            f"n{i}", "near", "near", {"kind": "near"}, content_hash=str(i), embedding=v / np.linalg.norm(v)
        )
        for i, v in enumerate(near)
    ]
    docs += [
        Document(
            f"f{i}",
            "far",
            "far",
            {"kind": "far"},
            content_hash=f"f{i}",
            embedding=np.asarray([0, 1, 0.1 * i, 0], dtype=np.float32) / np.hypot(1, 0.1 * i),
        )
        for i in range(5)
    ]
    for start in range(0, len(docs), 500):
        store.upsert(docs[start : start + 500], [], "m")
    query = np.asarray([1, 0, 0, 0], dtype=np.float32)
    assert {h.id for h in store.vector_search("documents", query, 5, filters={"kind": "far"})} == {
        f"f{i}" for i in range(5)
    }
    assert len(store.vector_search("documents", query, 50)) == 50
    best = store.vector_search("documents", query, 10)
    exact = np.argsort(-(np.stack([d.embedding for d in docs]) @ query))[:10]
    assert len({h.id for h in best} & {docs[i].id for i in exact}) >= 9  # the index's recall


def test_a_filter_keeping_a_few_percent_reads_on_through_the_vector_index(postgres, schema):
    """k = 100 and a filter keeping 5%: the index's first 400 candidates hold about 20 of the filter's rows,
    so pgvector's iterative scan reads on to 200 of them and keeps the nearest 100 (the exact scan of every
    kept row took 331 ms at a million chunks). A filter keeping 0.5% (30 rows, k = 20) holds too few of the
    first candidates for that, and has the exact scan over its own rows, found by the metadata's index;
    but not under row-level security, where that scan reads every row: a tenant's user reads on. Each way,
    k rows the filter keeps; the exact scan's are the exact top k. metadata_matches (about 10 us a call, not
    inlined) confirms only rows that pass the filter's path, and the exact scan's nearest until k pass. The
    filter's rows as the keyword side listed them are scanned by their keys, under row-level security
    too, while no write has come since."""
    store = PostgresStore(postgres.dsn, schema=schema, tenant="t1")
    store.init(8)
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(6000, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    docs = [
        Document(f"d{n}", "", "text", {"bucket": n % 200}, content_hash=str(n), embedding=v)
        for n, v in enumerate(vectors)
    ]
    for start in range(0, len(docs), 1000):
        store.upsert(docs[start : start + 1000], [], "m")
    indexes = dict(
        postgres.execute(
            "select a.amname, c.relname from pg_index i join pg_class c on c.oid = i.indexrelid "
            "join pg_am a on a.oid = c.relam where i.indrelid = %s::regclass",
            (f"{schema}.documents",),
        )
    )
    query = vectors[0]
    with postgres.connect() as conn:
        conn.execute("set enable_seqscan = off")  # the index in use, as at scale (here 6,000 rows)
        conn.execute("set track_functions = 'all'")

        def reads() -> dict[str, int]:
            """How many times each index (hnsw, gin) has been read, and metadata_matches called, this
            session's counts flushed first."""
            conn.execute("select pg_stat_force_next_flush()")
            counts = conn.execute(
                "select indexrelname, idx_scan from pg_stat_user_indexes where schemaname = %s", (schema,)
            ).fetchall()
            calls = conn.execute(
                "select coalesce(sum(calls), 0) from pg_stat_user_functions "
                "where schemaname = %s and funcname = 'metadata_matches'",
                (schema,),
            ).fetchone()
            return {kind: dict(counts)[indexes[kind]] for kind in ("hnsw", "gin")} | {"calls": calls[0]}

        def search(buckets: list[int], k: int) -> tuple[list[str], dict[str, int]]:
            """The ids found, and how many times each index was read meanwhile."""
            before = reads()
            rows = conn.execute(
                f"select id from {schema}.match_documents(%s::vector, %s, %s::jsonb)",
                (str(query.tolist()), k, json.dumps({"bucket": buckets})),
            ).fetchall()
            after = reads()
            return [row for (row,) in rows], {kind: after[kind] - before[kind] for kind in after}

        def exact(buckets: list[int], k: int) -> list[str]:
            kept = np.flatnonzero(np.arange(len(docs)) % 200 < len(buckets))
            return [docs[i].id for i in kept[np.argsort(-(vectors[kept] @ query), kind="stable")][:k]]

        # 5%: the index's first candidates, then read on through it; never the metadata's index
        found, read = search(list(range(10)), 100)
        assert len(found) == 100 and all(int(row[1:]) % 200 < 10 for row in found)
        assert (read["hnsw"], read["gin"]) == (2, 0)
        assert len(set(found[:10]) & set(exact(list(range(10)), 10))) >= 9
        # about 4,000 rows read through, 20-odd kept at first then 200: only those reached metadata_matches
        assert read["calls"] <= 100 + 200
        # 0.5%: the index's first candidates, then the filter's own rows, exactly
        found, read = search([0], 20)
        assert found == exact([0], 20) and read["hnsw"] == 1 and read["gin"] > 0
        # the first pass kept under 8 (or it would have read on); of the filter's 30 rows, the nearest 10
        found, read = search([0], 10)
        assert found == exact([0], 10) and read["calls"] <= 7 + 10
        # a tenant's user (row-level security on): read on through the vector index instead
        conn.execute("set role authenticated")
        claims = {"sub": "u1", "app_metadata": {"tenant_id": "t1"}}
        conn.execute("select set_config('request.jwt.claims', %s, false)", (json.dumps(claims),))
        found, read = search([0], 20)
        assert len(found) == 20 and all(int(row[1:]) % 200 == 0 for row in found)
        assert read["hnsw"] == 2
        # the filter's rows as a client listed them, at the stamp it read: scanned by their keys, neither
        # index read and no read-on under row-level security; at another stamp they are not used
        listed = conn.execute(
            f"select {schema}.filter_scope_rows_documents(%s::jsonb)", (json.dumps({"bucket": [0]}),)
        ).fetchone()[0]
        others = conn.execute(
            f"select {schema}.filter_scope_rows_documents(%s::jsonb)", (json.dumps({"bucket": [1]}),)
        ).fetchone()[0]
        (stamp,) = conn.execute(f"select stamp from {schema}.corpus_totals_documents(null)").fetchone()
        for rows, at in ((listed, stamp), (others, "a stamp before a write")):
            before = reads()
            found = conn.execute(
                f"select id from {schema}.match_documents(%s::vector, 20, %s::jsonb, "
                "filter_rows => %s, rows_stamp => %s)",
                (str(query.tolist()), json.dumps({"bucket": [0]}), rows, at),
            ).fetchall()
            read = {kind: count - before[kind] for kind, count in reads().items()}
            assert [row for (row,) in found] == exact([0], 20), at
            assert read["hnsw"] == (0 if at == stamp else 2), (at, read)
    # the store passes the rows its keyword side listed to the vector side, until a write
    sent: list[dict] = []
    calling = store._call

    def noting(function, **params):
        sent.append(params)
        return calling(function, **params)

    store._call = noting
    assert store.keyword_search("documents", "text", 5, filters={"bucket": [0]})
    found = store.vector_search("documents", query, 20, filters={"bucket": [0]})
    assert [h.id for h in found] == exact([0], 20) and len(sent[-1]["filter_rows"]) == 30
    store.upsert([Document("near", "", "text", {"bucket": 0}, content_hash="near", embedding=query)], [], "m")
    found = store.vector_search("documents", query, 20, filters={"bucket": [0]})
    assert "near" in [h.id for h in found][:2] and "filter_rows" in sent[-1]
    store.close()


def test_errors_say_what_to_do(postgres, schema, stores):
    with PostgresStore(postgres.dsn, schema=schema) as missing, pytest.raises(StoreError, match="db init"):
        missing.stats()
    store = stores(timeout=0.2)
    postgres.execute(
        f"create function {schema}.slow() returns int language sql as 'select 1 from pg_sleep(5)'"
    )
    with pytest.raises(StoreError, match="statement timeout"):
        store._call("slow")
    unreachable = PostgresStore("postgresql://user:hunter2@127.0.0.1:1/db", schema=schema, max_retries=0)
    with pytest.raises(StoreError, match="cannot reach") as error:
        unreachable.stats()
    assert "hunter2" not in str(error.value)


def test_a_search_blocked_on_both_paths_fails_clearly_at_the_tool_deadline(postgres, schema, stores):
    """Both paths wait on a lock another session holds: the call ends at its deadline, not the statement
    timeout's, with an error that says what to check; once the lock is gone the same call succeeds."""
    import time

    from agent_retrieval.context import Context
    from agent_retrieval.models import ChunkSearchRequest
    from agent_retrieval.search.retrieval import Retrieval

    store = stores(timeout=20)
    vector = np.asarray([1, 0, 0, 0], dtype=np.float32)
    store.upsert(
        [Document("plan", "plan", "the plan", content_hash="h", embedding=vector)],
        [Chunk("plan#0", "plan", 0, "the plan", "plan", embedding=vector)],
        "test/word-hash",
    )
    retrieval = Retrieval(
        Context(tool_timeout_seconds=0.5),
        store=store,
        embedder=Embedder(WordHashEmbeddings(size=4), "test/word-hash"),
    )
    request = ChunkSearchRequest(query="the plan")
    with postgres.connect() as locker:
        locker.execute("begin")
        locker.execute(f"lock table {schema}.chunks in access exclusive mode")
        started = time.monotonic()
        with pytest.raises(StoreError, match=r"tool_timeout_seconds=0\.5.*reachable"):
            retrieval.search(request, "chunks")
        assert time.monotonic() - started < 5, "the call waited for the statement timeout, not its deadline"
        locker.execute("rollback")
    assert [h.id for h in retrieval.search(request, "chunks").hits] == ["plan#0"]


def test_ingest_public_is_the_operators_flag_and_metadata_publishes_nothing(
    capsys, monkeypatch, postgres, schema, tmp_path
):
    monkeypatch.setenv("AGENT_RETRIEVAL_DSN", postgres.dsn)
    monkeypatch.setenv("AGENT_RETRIEVAL_SCHEMA", schema)
    assert run(capsys, "db", "init")[0] == 0
    (tmp_path / "hours.md").write_text("---\npublic: true\n---\n# Opening hours\n\nThe office opens at nine.")
    monkeypatch.setenv("AGENT_RETRIEVAL_TENANT", "press")
    assert run(capsys, "ingest", "--no-progress", str(tmp_path))[0] == 0
    with PostgresStore(postgres.dsn, schema=schema, tenant="acme") as acme:
        assert acme.keyword_search("chunks", "office opens", 5) == []  # the file's own "public: true" is data
        code, out, _ = run(capsys, "ingest", "--no-progress", "--public", str(tmp_path))
        assert code == 0 and "1 written" in out and "0 texts embedded" in out
        found = acme.keyword_search("chunks", "office opens", 5)
        assert [(h.tenant, h.id) for h in found] == [("press", "hours#0")]
        assert acme.document_states(["hours"]) == {}  # state and writes are the writing tenant's own
    with PostgresStore(postgres.dsn, schema=schema, tenant="press") as press:
        assert press.document_states(["hours"])["hours"].public is True


@pytest.mark.parametrize("listing", ["listed when few", "the ranking's head only"])
def test_filtered_keyword_search_ranks_exactly_as_scoring_every_row_the_filter_keeps(
    postgres, schema, monkeypatch, listing
):
    """A filter keeping half the rows is answered from the unfiltered ranking's head, a few percent from a
    longer head or from its own rows, listed once and kept until a write, one that keeps almost nothing
    from the SQL function: every way, the exact BM25 top k of the rows the filter keeps (it scored every
    row holding a word: seconds at 100K chunks). Filters match numbers and their text alike, as
    metadata_matches does."""
    if listing != "listed when few":
        monkeypatch.setattr(rpc, "_worth_listing", lambda *_: False)
    rng = np.random.default_rng(12)
    texts = zipf_corpus(rng)
    store = PostgresStore(postgres.dsn, schema=schema)
    store.init(4)
    metadata = [{"bucket": n % 50, "tag": str(n % 3), "flag": n % 7 == 0} for n in range(len(texts))]
    docs = [Document(f"d{n}", "", t, content_hash=str(n), text_hash=str(n)) for n, t in enumerate(texts)]
    chunks = [Chunk(f"d{n}#0", f"d{n}", 0, t, "", metadata[n], str(n)) for n, t in enumerate(texts)]
    store.upsert(docs, chunks, "test/none")
    filters = [
        {"bucket": list(range(25))},  # half
        {"bucket": [0, 1]},  # 4%
        {"bucket": 7},  # 2%
        {"bucket": "7"},  # the number's text
        {"tag": 1, "flag": True},  # the text's number, and a boolean
        {"bucket": [49], "tag": ["0", "2"]},
    ]
    called: list[str] = []
    calls_of(store, called)
    asked: list[list[int]] = []  # the rows of each filter_rows call of a search
    calling = store._calling

    def noting(function, params):
        if function == "filter_rows_chunks":
            asked.append(params["ids"])
        return (yield from calling(function, params))

    store._calling = noting
    deeper = 0
    for _ in range(20):
        query = random_query(rng)
        terms, idfs, average = idf_and_average(postgres, schema, query.split())
        every_row = postgres.execute(
            f"""select c.id, b.score, c.metadata from {schema}.bm25_chunks(%s, %s, null, %s, null, null) b
                join {schema}.chunks c on c.rowid = b.row_id order by b.score desc, b.row_id""",
            (terms, idfs, average),
        )
        for where in filters:
            k = int(rng.integers(1, 6))
            kept = postgres.execute(
                f"select id from {schema}.chunks where {schema}.metadata_matches(metadata, %s::jsonb)",
                (json.dumps(where),),
            )
            allowed = {row for (row,) in kept}
            expected = [(row, score) for row, score, _ in every_row if row in allowed][:k]
            asked.clear()
            found = store.keyword_search("chunks", query, k, filters=where)
            assert [h.id for h in found] == [row for row, _ in expected], (query, where)
            rows = [row for call in asked for row in call]
            assert len(rows) == len(set(rows)), "a row of the ranking was asked about twice"
            deeper += len(asked) > 1
            assert [h.keyword_score for h in found] == pytest.approx([s for _, s in expected], rel=1e-9)
            sql = postgres.execute(
                f"select id from {schema}.keyword_search_chunks(%s, %s, %s::jsonb)",
                (query, k, json.dumps(where)),
            )
            assert [row for (row,) in sql] == [row for row, _ in expected], (query, where)
            # a filter keeping too little of the longest head a client filters goes to the SQL function
            with monkeypatch.context() as short:
                short.setattr(rpc, "MAX_FILTERED_HEAD", 4 * k)
                head = store.keyword_search("chunks", query, k, filters=where)
            assert [h.id for h in head] == [row for row, _ in expected], (query, where)
    # the store filters the head of the ranking it scores itself, deeper where few passed; the SQL function
    # answered the short heads
    assert "filter_rows_chunks" in called and "keyword_search_chunks" in called
    if listing == "listed when few":
        assert "filter_scope_rows_chunks" in called
        assert_a_listed_filters_rows_are_kept_until_a_write(store, rng, called, monkeypatch)
        store.close()
        return
    assert "filter_scope_rows_chunks" not in called and deeper
    # a filter used before starts at the head its share asked for: one round where its first search took more
    rounds = []
    for _ in range(40):
        asked.clear()
        store.keyword_search("chunks", random_query(rng), 5, filters={"bucket": [3, 4]})
        rounds.append(len(asked))
        if len(rounds) > 1 and rounds[-2] > 1:
            break
    assert rounds[-2:] == [rounds[-2], 1] and rounds[-2] > 1, rounds
    # a caller may send a new filter every call: the process keeps so many shares and listed rows
    memories = ((store._filter_shares, rpc.FILTER_SHARES), (store._filter_scopes, rpc.FILTER_SCOPES))
    for memory, bound in memories:
        for n in range(bound + 10):
            memory.put(("another filter", n), (1, 2))
        assert len(memory._values) == bound
    # the filter as the GIN index reads it keeps every row the filter keeps; none for what no index answers
    for where in filters:
        path = postgres.execute(f"select {schema}.filter_path(%s::jsonb)::text", (json.dumps(where),))[0][0]
        by_path = postgres.execute(
            f"select count(*) from {schema}.chunks where metadata @? %s::jsonpath", (path,)
        )
        by_filter = postgres.execute(
            f"select count(*) from {schema}.chunks where {schema}.metadata_matches(metadata, %s::jsonb)",
            (json.dumps(where),),
        )
        assert by_path == by_filter, where
    for hard in ({"k": {"nested": 1}}, {"k": [[1]]}, {}, {"k": []}, {'a "quoted" key': 'it\'s \\ "x"'}):
        path = postgres.execute(f"select {schema}.filter_path(%s::jsonb)::text", (json.dumps(hard),))[0][0]
        assert (path is None) == (hard != {'a "quoted" key': 'it\'s \\ "x"'}), hard
    store.close()


def assert_a_listed_filters_rows_are_kept_until_a_write(store, rng, called, monkeypatch):
    where = {"bucket": 11}  # 8 rows of 400
    for _ in range(3):  # the first search measures the filter's share of a head; a later one lists its rows
        store.keyword_search("chunks", random_query(rng), 5, filters=where)
    called.clear()
    store.keyword_search("chunks", random_query(rng), 5, filters=where)
    assert called and not {"filter_rows_chunks", "filter_scope_rows_chunks", "keyword_search_chunks"} & set(
        called
    ), called
    # a write changes the stamp: what was kept of the filter is forgotten, and its rows listed again hold
    # the new one
    text = "zqxnew w0"
    store.upsert(
        [Document("new", "", text, content_hash="new", text_hash="new")],
        [Chunk("new#0", "new", 0, text, "", {"bucket": 11, "tag": "0", "flag": False}, "new")],
        "test/none",
    )
    listed = []
    for _ in range(3):
        called.clear()
        found = store.keyword_search("chunks", text, 5, filters=where)
        assert found[0].id == "new#0" and {h.metadata["bucket"] for h in found} == {11}
        listed.append(called.count("filter_scope_rows_chunks"))
    assert sum(listed) == 1 and "filter_rows_chunks" not in called, listed
    # a filter found to keep more rows than a client keeps is listed once, then filtered from the head
    monkeypatch.setattr(rpc, "MAX_SCOPE_ROWS", 4)
    monkeypatch.setattr(rpc, "_worth_listing", lambda *_: True)
    lists = []
    for _ in range(4):
        called.clear()
        store.keyword_search("chunks", random_query(rng), 5, filters={"bucket": 12})
        lists.append(called.count("filter_scope_rows_chunks"))
    assert sum(lists) == 1, lists


def test_the_sql_hybrid_function_trusts_a_keyword_passage_standing_out_of_its_list_as_the_tools_do(
    postgres, schema
):
    """fusion.keyword_trust in SQL: for a question of many words, a best keyword passage far above the rest
    of the list (a rare name it holds) keeps the keyword side's full weight, as the tools give it; below
    that, or for a short question, the side counts by how much of the query its best passage holds."""
    rng = np.random.default_rng(3)
    texts = zipf_corpus(rng, 300)
    texts[7] += " zqxrare zqxrare zqxrare"  # the rare name one passage holds
    embeddings = WordHashEmbeddings(size=16)
    store = PostgresStore(postgres.dsn, schema=schema)
    store.init(16)
    docs = [Document(f"d{n}", "", t, content_hash=str(n), text_hash=str(n)) for n, t in enumerate(texts)]
    chunks = [
        Chunk(f"d{n}#0", f"d{n}", 0, t, "", {}, str(n), embedding=embeddings.vector(t))
        for n, t in enumerate(texts)
    ]
    store.upsert(docs, chunks, "test/word-hash")
    fired = 0
    for words in (3, 6, 7, 9):
        for _ in range(6):
            query = " ".join([*rng.choice(VOCABULARY, size=words - 1, replace=False), "zqxrare"])
            vector = embeddings.vector(query)
            keyword = store.keyword_search("chunks", query, 300)  # every row: no ties cut at the end
            trust = keyword_trust(keyword, len(keyword_terms(query)))
            fired += trust == 1.0 and keyword_trust(keyword) < 1.0
            vector_hits = store.vector_search("chunks", vector, 300)
            expected = fuse(vector_hits, keyword, mode="convex", query_words=len(keyword_terms(query)))
            rows = store._call(
                "hybrid_search_chunks",
                query_text=query,
                query_embedding=np.asarray(vector, dtype=np.float32),
                match_count=600,  # every row either side found
                fusion="convex",
                vector_weight=1.0,
                keyword_weight=1.0,
                candidates=300,
            )
            # every fused row with its score (SQL's BM25 differs from the store's own in the last digits)
            found = {r["id"]: r["score"] for r in rows}
            scores = {h.id: h.score for h in expected}
            assert found == pytest.approx(scores, rel=1e-6, abs=1e-6), (query, trust)
    assert fired  # the rule decided some of these: long questions whose rare name stood out
    store.close()


def test_pruned_keyword_search_ranks_exactly_as_scoring_every_row(postgres, schema):
    # The first pass scores only the rows of the rarest words, and the rows holding only common words are
    # never scored once k rows beat their bound: the result must still be the exact BM25 top k.
    rng = np.random.default_rng(11)
    texts = zipf_corpus(rng)
    store = PostgresStore(postgres.dsn, schema=schema, tenant="acme")
    store.init(4)
    docs = [Document(f"d{n}", "", t, content_hash=str(n), text_hash=str(n)) for n, t in enumerate(texts)]
    chunks = [Chunk(f"d{n}#0", f"d{n}", 0, t, "", {}, str(n)) for n, t in enumerate(texts)]
    for part in range(4):
        if part:  # each later part's rows begin 50 before a block's end: a word's rows span blocks
            postgres.execute(
                "; ".join(
                    f"select setval(pg_get_serial_sequence('{schema}.{level}', 'rowid'), "
                    f"{part * POSTINGS_BLOCK - 50})"
                    for level in ("documents", "chunks")
                )
            )
        store.upsert(docs[part * 100 : part * 100 + 100], chunks[part * 100 : part * 100 + 100], "test/none")
    assert postgres.execute(f"select count(distinct block) from {schema}.chunks_postings") == [(4,)]
    pruned_queries = left_out = 0
    for _ in range(60):
        query = random_query(rng)
        k = int(rng.integers(1, 12))
        every_row = every_row_top_k(postgres, schema, query, k, "acme")
        # scored here from the postings (the DSN store), and by the SQL function (Supabase, and filters)
        in_sql = store._call("keyword_search_chunks", query_text=query, match_count=k, tenant="acme")
        for found in (store.keyword_search("chunks", query, k), [_hit("chunks", row) for row in in_sql]):
            assert [h.id for h in found] == [chunk for chunk, _ in every_row], query
            assert [h.keyword_score for h in found] == pytest.approx([s for _, s in every_row], rel=1e-9)
        terms, idfs, average = idf_and_average(postgres, schema, query.split(), "acme")
        bm25 = f"select b.row_id, b.score from {schema}.bm25_chunks(%s, %s, %s, %s, null, null, %s, %s) b"
        exact = dict(postgres.execute(bm25, (terms, idfs, None, average, None, 0)))
        pruned_queries += len(terms) >= 3
        # The rows of the rarer terms, the other terms' postings probed in the rows' blocks (the other terms
        # have many postings) or read whole (few): each row scored exactly, and with a floor, every row that
        # reaches it kept.
        essential = list(terms[: int(rng.integers(1, len(terms)))])
        holding = dict(postgres.execute(bm25, (terms, idfs, essential, average, None, 0)))
        floor = float(np.median(list(holding.values())))
        for postings in (1e18, 0):
            counts = [postings] * len(terms)
            rows = dict(postgres.execute(bm25, (terms, idfs, essential, average, counts, floor)))
            assert {row for row, score in holding.items() if score >= floor} <= rows.keys() <= holding.keys()
            assert rows == pytest.approx({row: exact[row] for row in rows}, rel=1e-12), query
            left_out += len(rows) < len(holding)
    assert pruned_queries > 40  # most queries took the pruned path
    assert left_out > 5  # and the floor spared scoring rows that could not reach it
    store.close()


def calls_of(store: PostgresStore, called: list[str]) -> None:
    """Note the name of every SQL function `store` calls in `called`."""
    calling = store._calling

    def noted(function, params):
        called.append(function)
        return (yield from calling(function, params))

    store._calling = noted


def test_keyword_search_scored_here_answers_as_the_sql_function_in_every_scope(postgres, schema, monkeypatch):
    # The DSN store scores a whole level from the words' postings it keeps: each tenant's own rows and the
    # public ones, the same rows, scores, coverage and unknown words as the SQL function, after every write.
    rng = np.random.default_rng(7)
    texts = zipf_corpus(rng, rows=120)
    process = ProcessState()
    stores = {
        t: PostgresStore(postgres.dsn, schema=schema, tenant=t, process=process) for t in ("acme", "globex")
    }
    operator = PostgresStore(postgres.dsn, schema=schema, process=process)  # no tenant: every row
    operator.init(4)
    for level in ("documents", "chunks"):  # the rows begin 30 before a block's end: words span blocks
        postgres.execute(
            f"select setval(pg_get_serial_sequence('{schema}.{level}', 'rowid'), {POSTINGS_BLOCK - 30})"
        )

    def write(tenant: str, first: int, last: int, public: bool = False, suffix: str = "") -> None:
        docs = [
            Document(f"d{n}", "", texts[n] + suffix, content_hash=f"{n}{suffix}{public}", public=public)
            for n in range(first, last)
        ]
        stores[tenant].upsert(
            docs, [Chunk(f"{d.id}#0", d.id, 0, d.content, "", {}) for d in docs], "test/none"
        )

    def fields(hits) -> list[tuple]:
        return [(h.id, h.tenant, h.title, h.content, h.unknown_terms) for h in hits]

    def same_as_sql(query: str, k: int = 8) -> None:
        for store in (*stores.values(), operator):
            found = store.keyword_search("chunks", query, k)
            rows = store._call("keyword_search_chunks", query_text=query, match_count=k, tenant=store.tenant)
            expected = [_hit("chunks", row) for row in rows]
            assert fields(found) == fields(expected), (store.tenant, query)
            assert [h.keyword_score for h in found] == pytest.approx([h.keyword_score for h in expected])
            assert [h.keyword_coverage for h in found] == pytest.approx(
                [h.keyword_coverage for h in expected]
            )

    write("acme", 0, 50)
    write("globex", 40, 90, public=True)
    queries = [random_query(rng) for _ in range(12)] + ["w0 nowhere", "w59 w58 w57 unheard"]
    for query in queries:
        same_as_sql(query)
    kept = process.part("postgres postings", KeptPostings)
    assert kept.nbytes > 0  # the words' postings stayed for the next search, for each tenant
    read: list[str] = []
    for store in (*stores.values(), operator):
        calls_of(store, read)
    for query in queries:  # again, each tenant in turn: every word's postings served as kept
        same_as_sql(query)
    assert read and not [function for function in read if function.startswith("keyword_postings_")]
    for store in (*stores.values(), operator):
        del store._calling
    # every kind of write, each searched after: replaced text, a row made public or private, deletions
    write("acme", 10, 30, suffix=" w3 w3 w3 w7")
    same_as_sql("w3 w7 w11")
    write("acme", 30, 35, public=True)
    write("globex", 40, 60, public=False)
    same_as_sql("w3 w7 w11")
    stores["globex"].delete_documents([f"d{n}" for n in range(60, 70)])
    for query in queries:
        same_as_sql(query)
    # a write from another process (the superuser's own connection) is seen too: every row ranked again
    same_as_sql("w5", k=120)
    postgres.execute(f"update {schema}.chunks set content = content || ' w5 w5 w5' where id = 'd1#0'")
    same_as_sql("w5", k=120)
    # a write that leaves the totals as they were (a word for another): its row version tells
    postgres.execute(f"update {schema}.chunks set content = replace(content, 'w5', 'w6') where id = 'd1#0'")
    same_as_sql("w5", k=120)
    # a document list's rows are scored from the same postings, as the SQL function scores them
    called: list[str] = []
    for store in (*stores.values(), operator):
        calls_of(store, called)
    for query in queries[:6]:
        for store in (*stores.values(), operator):
            for ids in (["d2", "d3"], [f"d{n}" for n in range(35, 75, 3)], ["nowhere"]):
                found = store.keyword_search("chunks", query, 8, document_ids=ids)
                rows = store._call(
                    "keyword_search_chunks",
                    query_text=query,
                    match_count=8,
                    document_ids=ids,
                    tenant=store.tenant,
                )
                assert fields(found) == fields([_hit("chunks", row) for row in rows]), (query, ids)
                assert {h.document_id for h in found} <= set(ids)
    assert "scope_rows_chunks" in called
    # within a filter, or a list of more rows than a client scores, the SQL function answers
    called.clear()
    monkeypatch.setattr(rpc, "MAX_SCOPE_ROWS", 1)
    scoped = stores["acme"].keyword_search("chunks", "w0 w1", 50, document_ids=["d2", "d3"])
    assert {h.document_id for h in scoped} == {"d2", "d3"} and "keyword_search_chunks" in called
    for store in (*stores.values(), operator):
        store.close()


def write_texts(store: PostgresStore, texts: list[str]) -> None:
    """Each text as document d<n> with one chunk of it."""
    docs = [Document(f"d{n}", "", t, content_hash=str(n)) for n, t in enumerate(texts)]
    store.upsert(docs, [Chunk(f"{d.id}#0", d.id, 0, d.content, "", {}) for d in docs], "test/none")


def test_one_scope_may_keep_postings_up_to_the_operators_whole_budget(postgres, schema, monkeypatch):
    # The embedded store keeps at most POSTINGS_CACHE_BYTES of a file's postings; a Postgres scope keeps up to
    # store_cache_mb: at 1M chunks a fixed 256 MB share made a server read common words again at each search.
    monkeypatch.setattr(kept_postings, "POSTINGS_CACHE_BYTES", 1024)
    rng = np.random.default_rng(4)
    texts = zipf_corpus(rng, rows=300)
    process = ProcessState()
    store = PostgresStore(postgres.dsn, schema=schema, process=process, cache_mb=1)
    store.init(4)
    write_texts(store, texts)
    for _ in range(10):
        store.keyword_search("chunks", random_query(rng), 5)
    assert 1024 < process.part("postgres postings", KeptPostings).nbytes <= 2**20
    store.close()


def test_the_postings_kept_stay_within_the_operators_budget(postgres, schema):
    rng = np.random.default_rng(3)
    texts = zipf_corpus(rng, rows=200)
    process = ProcessState()
    store = PostgresStore(postgres.dsn, schema=schema, process=process, cache_mb=0)
    store.init(4)
    write_texts(store, texts)
    first = store.keyword_search("chunks", "w0 w1 w2 w9", 5)
    assert first and process.part("postgres postings", KeptPostings).nbytes == 0  # a budget of 0 keeps none
    kept = PostgresStore(postgres.dsn, schema=schema, process=process, cache_mb=1)
    assert kept.keyword_search("chunks", "w0 w1 w2 w9", 5) == first
    held = process.part("postgres postings", KeptPostings).nbytes
    assert 0 < held <= 2**20
    kept._cache_bytes = held // 2  # a budget below what one search keeps (bytes: the setting's MB is coarse)
    kept.keyword_search("chunks", "w3 w4", 5)
    assert process.part("postgres postings", KeptPostings).nbytes <= held // 2  # the scope went whole
    store.close()
    kept.close()


@pytest.mark.parametrize("before", ["keyword_postings_chunks", "keyword_rows_chunks"])
def test_a_write_between_the_calls_of_a_search_is_answered_in_one_snapshot(postgres, schema, before):
    # Keyword search by DSN is three calls (the words, their postings, the rows), each in its own snapshot:
    # a write between them must neither mix two states in one answer nor leave the newer postings kept
    # under the older stamp, where the next searches would score them with the older idf.
    process = ProcessState()
    store = PostgresStore(postgres.dsn, schema=schema, process=process)
    store.init(4)
    docs = [Document(f"d{n}", "", f"clause w{n % 3} clause", content_hash=str(n)) for n in range(9)]
    store.upsert(docs, [Chunk(f"{d.id}#0", d.id, 0, d.content, "", {}) for d in docs], "test/none")
    postgres.execute(f"update {schema}.chunks set content = 'clause clause clause' where id = 'd4#0'")
    calling = store._calling

    def write_between(function, params):
        if function == before:  # d4 loses the word, d0 gains it
            postgres.execute(
                f"update {schema}.chunks set content = "
                "case id when 'd4#0' then 'w1' else content || ' clause' end where id in ('d0#0', 'd4#0')"
            )
        return (yield from calling(function, params))

    store._calling = write_between
    found = store.keyword_search("chunks", "clause", 3)
    store._calling = calling
    in_sql = [
        _hit("chunks", row)
        for row in store._call("keyword_search_chunks", query_text="clause", match_count=3)
    ]
    assert [(h.id, h.keyword_score) for h in found] == [(h.id, h.keyword_score) for h in in_sql]
    assert found[0].id == "d0#0" and "d4#0" not in {h.id for h in found}
    if before == "keyword_postings_chunks":
        assert process.part("postgres postings", KeptPostings).nbytes == 0  # nothing kept of the newer state
    assert [(h.id, h.keyword_score) for h in store.keyword_search("chunks", "clause", 3)] == [
        (h.id, h.keyword_score) for h in in_sql
    ]
    store.close()


def test_the_stores_of_a_process_share_one_pool_per_dsn(postgres, schema):
    """A LangGraph server makes a store per run: forty runs at once with a pool each took all 100 of the
    server's connections. Every store on one DSN borrows from one pool, which closes with the last of them."""

    def connections() -> int:
        query = "select count(*) from pg_stat_activity where application_name = 'agent-retrieval'"
        return postgres.execute(query)[0][0]

    before = connections()  # other tests' stores may still hold theirs
    stores = [PostgresStore(postgres.dsn, schema=schema, pool_size=3) for _ in range(20)]
    stores[0].init(4)
    doc = Document("lease", "Lease", "the tenancy deposit is protected", content_hash="h")
    stores[0].upsert([doc], [Chunk("lease#0", "lease", 0, doc.content, "Lease", {})], "test/none")
    with ThreadPoolExecutor(8) as workers:
        found = list(workers.map(lambda s: s.keyword_search("chunks", "deposit", 3), stores * 3))
    assert all([hit.id for hit in hits] == ["lease#0"] for hits in found)
    assert 1 <= connections() - before <= 3
    for store in stores[1:]:
        store.close()
    assert connections() > before  # still open for the store not closed
    assert [hit.id for hit in stores[0].keyword_search("chunks", "deposit", 3)] == ["lease#0"]
    stores[0].close()
    deadline = time.monotonic() + 10
    while connections() > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert connections() <= before  # the last store closed the pool


_PARENTS: list[PostgresStore] = []  # the store a forked child finds, as it was in its parent


def _search_in_a_forked_child(dsn: str, schema: str) -> list[tuple[bool, list[str]]]:
    """Through the parent's store and a new one: whether each starts without a pool (the parent's is not
    theirs), and what it finds."""

    def search(store: PostgresStore) -> tuple[bool, list[str]]:
        with store:
            fresh = store._shared.pool is None
            return fresh, [hit.id for hit in store.keyword_search("chunks", "deposit", 3)]

    return [search(_PARENTS[0]), search(PostgresStore(dsn, schema=schema))]


def test_a_forked_process_never_borrows_its_parents_connections(postgres, schema):
    # Two processes on one connection garble each other's replies: a worker forked from a server that had
    # searched already opens its own pool, for the parent's store as for its own.
    with PostgresStore(postgres.dsn, schema=schema) as store:
        store.init(4)
        doc = Document("lease", "Lease", "the tenancy deposit is protected", content_hash="h")
        store.upsert([doc], [Chunk("lease#0", "lease", 0, doc.content, "Lease", {})], "test/none")
        assert store._shared.pool is not None  # the parent's pool is open
        _PARENTS[:] = [store]
        with multiprocessing.get_context("fork").Pool(1) as worker:
            found = worker.apply(_search_in_a_forked_child, (postgres.dsn, schema))
        assert found == [(True, ["lease#0"]), (True, ["lease#0"])]
        assert [hit.id for hit in store.keyword_search("chunks", "deposit", 3)] == ["lease#0"]


def test_postings_and_counts_follow_every_write(postgres, schema):
    # The triggers keep the postings (per term and block of rows), the per-term counts keyword search reads
    # its idf from and the corpus totals: after inserts, a replacement, a change of visibility and deletions
    # in two tenants they equal what one build from every row makes (rebuild_postings_*, as a first load).
    rng = np.random.default_rng(5)
    texts = zipf_corpus(rng)[:60]
    stores = {t: PostgresStore(postgres.dsn, schema=schema, tenant=t) for t in ("acme", "globex")}
    stores["acme"].init(4)

    def write(tenant: str, first: int, last: int, public: bool = False, suffix: str = "") -> None:
        docs = [
            Document(f"d{n}", "", texts[n] + suffix, content_hash=f"{n}{suffix}{public}", public=public)
            for n in range(first, last)
        ]
        chunks = [Chunk(f"{d.id}#0", d.id, 0, d.content, "", {}) for d in docs]
        stores[tenant].upsert(docs, chunks, "test/none")

    def index(level: str) -> tuple[set[tuple], ...]:
        postings = postgres.execute(
            f"select p.term, p.tenant_id, p.is_public, p.block::bigint * {POSTINGS_BLOCK} + u.place, "
            f"u.tf, u.length from {schema}.{level}_postings p, "
            "unnest(p.places, p.tfs, p.lengths) u(place, tf, length)"
        )
        counts = f"select term, tenant_id, is_public, rows from {schema}.{level}_term_stats where rows <> 0"
        totals = f"select tenant_id, is_public, rows, total_length from {schema}.corpus_stats "
        totals += f"where level = '{level}' and rows <> 0"
        return set(postings), set(postgres.execute(counts)), set(postgres.execute(totals))

    write("acme", 0, 40)
    write("globex", 20, 60, public=True)
    write("acme", 10, 30, suffix=" w1 extra")  # replaced: the old postings and counts go, the new ones come
    write("globex", 20, 30, public=False)  # unpublished: its postings move from public to private
    stores["acme"].delete_documents([f"d{n}" for n in range(15)])
    for level in ("documents", "chunks"):
        kept = index(level)
        assert len(kept[0]) > 500 and len(kept[2]) == 3  # acme's, globex's private and public rows
        postgres.execute(f"select {schema}.rebuild_postings_{level}()")
        assert kept == index(level)
    for store in stores.values():
        store.close()


def test_an_initial_load_drops_the_search_indexes_and_builds_them_at_the_end(postgres, schema):
    store = PostgresStore(postgres.dsn, schema=schema)
    store.init(4)

    # Search indexes by access method: not through pg_indexes, whose definitions wait for the load's locks.
    query = (
        "select i.relname from pg_index x join pg_class i on i.oid = x.indexrelid "
        "join pg_am a on a.oid = i.relam "
        "where i.relnamespace = %s::regnamespace and a.amname in ('hnsw', 'gin')"
    )

    def search_indexes(conn=None) -> set[str]:
        rows = conn.execute(query, (schema,)).fetchall() if conn else postgres.execute(query, (schema,))
        return {row["relname"] if isinstance(row, dict) else row[0] for row in rows}

    def postings(conn=None) -> list[tuple]:
        query = (
            f"select count(*), sum(cardinality(places)) from {schema}.chunks_postings where term = 'claus'"
        )
        return [tuple(r.values()) for r in conn.execute(query)] if conn else postgres.execute(query)

    before = search_indexes()
    assert {"chunks_embedding", "documents_embedding", "chunks_metadata", "documents_metadata"} == before
    docs = [Document(f"d{n}", "", f"deposit clause {n}", content_hash=str(n)) for n in range(30)]
    chunks = [
        Chunk(f"d{n}#0", f"d{n}", 0, d.content, "", {}, embedding=np.eye(4, dtype=np.float32)[n % 4])
        for n, d in enumerate(docs)
    ]
    with store.initial_load():
        assert search_indexes(store._loading) == set()  # dropped, as the load itself sees them
        store.upsert(docs[:15], chunks[:15], "test/axes")
        store.upsert(docs[15:], chunks[15:], "test/axes")
        store.upsert(docs[:2], chunks[:2], "test/axes")  # written again: replaced
        assert store.stats().chunks == 30  # the load reads its own writes
        assert postings(store._loading) == [(0, None)]  # the postings wait for the end of the load
    assert search_indexes() == before  # built again
    analysed = (
        "select relname, reltuples from pg_class where relnamespace = %s::regnamespace and relkind = 'r'"
    )
    assert {
        t: n
        for t, n in postgres.execute(analysed, (schema,))
        if t.endswith("_postings") or t in ("documents", "chunks")
    } == {
        "documents": 30,
        "chunks": 30,
        "documents_postings": 32,
        "chunks_postings": 32,  # statistics for the planner
    }
    # the postings and their counts hold the 30 rows once each (one block), the replaced ones' old rows gone
    assert postings() == [(1, 30)]
    assert postgres.execute(f"select rows from {schema}.chunks_term_stats where term = 'claus'") == [(30,)]
    assert [h.id for h in store.keyword_search("chunks", "clause 7", 1)] == ["d7#0"]
    assert len(store.vector_search("chunks", np.eye(4, dtype=np.float32)[1], 30)) == 30
    # and the triggers keep them again after the load
    store.upsert(
        [Document("d30", "", "clause 30", content_hash="30")],
        [Chunk("d30#0", "d30", 0, "clause 30", "", {})],
        "test/axes",
    )
    assert [h.id for h in store.keyword_search("chunks", "clause 30", 1)] == ["d30#0"]

    # a store that holds documents is refused, and nothing changes
    with pytest.raises(InvalidRequest, match="already holds documents"), store.initial_load():
        pass
    assert search_indexes() == before


def test_an_initial_load_leaves_each_words_postings_side_by_side(postgres, schema):
    # The postings are made a slice of blocks at a time; a search reads one word's rows, which are then
    # scattered over the table unless the load puts them in the order of the primary key.
    store = PostgresStore(postgres.dsn, schema=schema)
    store.init(4)
    for level in ("documents", "chunks"):  # the rows begin 20 before a slice's end (8 blocks of 512 rows)
        postgres.execute(
            f"select setval(pg_get_serial_sequence('{schema}.{level}', 'rowid'), {8 * POSTINGS_BLOCK - 20})"
        )
    texts = zipf_corpus(np.random.default_rng(2), rows=60)
    with store.initial_load():
        write_texts(store, texts)
    for level in ("documents", "chunks"):
        stored = f"select term, block, tenant_id, is_public from {schema}.{level}_postings order by "
        in_place = postgres.execute(stored + "ctid")
        assert len({row[1] for row in in_place}) == 2
        assert in_place == postgres.execute(stored + "term, block, tenant_id, is_public")
    store.close()


def test_an_initial_load_writes_the_rows_an_upsert_writes(postgres, schema):
    store = PostgresStore(postgres.dsn, schema=schema, tenant="acme")
    store.init(4)
    docs = [
        Document("lease", "Lease", "deposit clause", {"kind": "contract"}, "a/lease.md", "h1", "t1",
                 np.array([0.6, 0.8, 0, 0], np.float32), public=True),
        Document("memo", "Memo", "unembedded memo", {}, None, "h2", "t2"),
    ]  # fmt: skip
    chunks = [
        Chunk("lease#0", "lease", 0, "deposit clause", "Lease", {"page": 1}, "c1",
              np.array([0, 0, 0.8, 0.6], np.float32)),
        Chunk("lease#1", "lease", 1, "rent review", "Lease > Rent", {}, "c2", np.eye(4, dtype=np.float32)[3]),
        Chunk("memo#0", "memo", 0, "unembedded memo", "Memo", {}, "c3"),
    ]  # fmt: skip
    columns = {
        "documents": "tenant_id, id, title, content, metadata, source, is_public, content_hash, text_hash, "
        "embedding::text, embedding_model",
        "chunks": "tenant_id, document_id, id, ordinal, heading_path, content, metadata, is_public, "
        "text_hash, embedding::text, embedding_model",
    }

    def stored() -> dict[str, list[tuple]]:
        return {t: postgres.execute(f"select {c} from {schema}.{t} order by id") for t, c in columns.items()}

    with store.initial_load():  # the rows copied
        store.upsert(docs, chunks, "test/axes")
    loaded = stored()
    store.upsert(docs, chunks, "test/axes")  # the same rows by upsert_documents, replacing them
    assert loaded == stored()
    assert [row[:2] + row[6:7] for row in loaded["documents"]] == [
        ("acme", "lease", True),
        ("acme", "memo", False),
    ]
    assert [row[7] for row in loaded["chunks"]] == [True, True, False]  # as public as their document
    store.close()


def test_an_interrupted_initial_load_leaves_the_store_empty_with_its_indexes(postgres, schema):
    store = PostgresStore(postgres.dsn, schema=schema)
    store.init(4)
    docs = [Document("d0", "", "deposit", content_hash="0")]

    def load_then_interrupt() -> None:
        with store.initial_load():
            store.upsert(docs, [Chunk("d0#0", "d0", 0, "deposit", "", {})], "test/axes")
            raise KeyboardInterrupt  # Ctrl-C in the middle of the load

    with pytest.raises(KeyboardInterrupt):
        load_then_interrupt()
    assert store.stats().documents == 0 and store.keyword_search("chunks", "deposit", 5) == []
    rows = postgres.execute(
        "select count(*) from pg_indexes where schemaname = %s and indexdef ~ ' USING hnsw '", (schema,)
    )
    assert rows == [(2,)]


def test_files_ingested_inside_an_initial_load_are_searchable_after_it(postgres, schema, tmp_path):
    from agent_retrieval import Context, Retrieval, ingest_paths
    from agent_retrieval.models import SearchRequest

    (tmp_path / "fees.md").write_text("# Fees\n\nSales commission is 1.2% of the price.\n")
    (tmp_path / "banda.md").write_text("# 14 Banda Lane\n\nThe tenancy deposit of £2,100 is protected.\n")
    retrieval = Retrieval(Context(postgres_dsn=postgres.dsn, db_schema=schema))
    retrieval.store.init(256)
    with retrieval.store.initial_load():  # as docs/postgres-supabase.md shows it
        report = ingest_paths([tmp_path], retrieval=retrieval)
    assert report.written == 2
    result = retrieval.search(SearchRequest(query="tenancy deposit"), "chunks")
    assert result.hits[0].id == "banda#0" and set(result.hits[0].found_by) == {"vector", "keyword"}
