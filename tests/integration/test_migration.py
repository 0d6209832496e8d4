"""`agent-retrieval db init` over a store made by the previous version's SQL (schema_version 1, kept as
rendered in tests/data/schema_v1.sql), with rows in it: it brings the store up to date without losing a row,
twice over, and the store then answers through Postgres and through PostgREST (which refuses a call that
matches two overloads).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent_retrieval import cli
from agent_retrieval.stores.postgres import PostgresStore
from agent_retrieval.stores.rpc import SCHEMA_VERSION
from agent_retrieval.stores.supabase import SupabaseStore
from tests.stack import start_gateway, start_postgrest

SCHEMA = "ar_migrate"  # the schema tests/data/schema_v1.sql was rendered for
DIM = 4
MODEL = "test/axes"
V1_SQL = Path(__file__).parents[1] / "data" / "schema_v1.sql"


def axis(*weights: float) -> list[float]:
    v = np.asarray(weights + (0.0,) * (DIM - len(weights)))
    return (v / np.linalg.norm(v)).tolist()


def v1_upsert(pg, tenant: str, title: str, text: str, public: bool) -> None:
    """A document "plan" with two chunks, written by version 1's own upsert (which published by metadata)."""
    document = {
        "id": "plan",
        "title": title,
        "content": text,
        "content_hash": tenant,
        "metadata": {"public": public} if public else {},
        "text_hash": f"d-{tenant}",
        "embedding": axis(1, 0.5),
    }
    chunks = [
        {
            "id": f"plan#{n}",
            "document_id": "plan",
            "ordinal": n,
            "heading_path": title,
            "content": f"{text} Part {n}.",
            "metadata": {},
            "text_hash": f"c-{tenant}{n}",
            "embedding": axis(1, 0.1 * n),
        }
        for n in range(2)
    ]
    pg.execute(
        f"select {SCHEMA}.upsert_documents(%s::jsonb, %s::jsonb, %s, %s)",
        (json.dumps([document]), json.dumps(chunks), MODEL, tenant),
    )


def functions(pg) -> list[tuple[str, int]]:
    """Each of the schema's functions with how many overloads it has."""
    return pg.execute(
        "select proname, count(*)::int from pg_proc where pronamespace = %s::regnamespace "
        "group by proname order by proname",
        (SCHEMA,),
    )


@pytest.fixture
def v1_store(supabase_stack):
    """A version-1 store holding acme's private plan and the press's public plan: the same id."""
    pg = supabase_stack.postgres
    pg.execute(f"drop schema if exists {SCHEMA} cascade")
    pg.execute(V1_SQL.read_text(encoding="utf-8"))
    v1_upsert(pg, "acme", "Acme plan", "The acme acquisition plan.", public=False)
    v1_upsert(pg, "press", "Press plan", "The press publication plan.", public=True)
    return pg


def test_db_init_brings_a_version_1_store_up_to_date_and_can_run_again(
    capsys, monkeypatch, supabase_stack, v1_store, tmp_path
):
    pg = v1_store
    assert pg.execute(f"select value from {SCHEMA}.store_info where key = 'schema_version'") == [("1",)]
    rows = f"select tenant_id, id, is_public, embedding::text from {SCHEMA}.chunks order by 1, 2"
    before = pg.execute(rows)
    monkeypatch.setenv("AGENT_RETRIEVAL_DSN", pg.dsn)
    for _ in range(2):
        code = cli.main(["db", "init", "--schema", SCHEMA, "--dimension", str(DIM)])
        _, err = capsys.readouterr()
        assert code == 0, err
        assert all(count == 1 for _, count in functions(pg)), functions(pg)  # no old overload left
        assert pg.execute(rows) == before
        for level, holding in (("documents", 1), ("chunks", 2)):  # the postings, made from each row's text
            counts = set(
                pg.execute(f"select term, tenant_id, is_public, rows from {SCHEMA}.{level}_term_stats")
            )
            assert counts == set(
                pg.execute(
                    f"select term, tenant_id, is_public, sum(cardinality(places)) "
                    f"from {SCHEMA}.{level}_postings group by term, tenant_id, is_public"
                )
            )
            assert {
                ("plan", "acme", False, holding),
                ("plan", "press", True, holding),
                ("acquisit", "acme", False, holding),
            } <= counts
        assert pg.execute(  # what version 10 replaced is gone: one posting a row, the stored tsvectors
            f"select count(*) from pg_attribute where attrelid in ('{SCHEMA}.documents'::regclass, "
            f"'{SCHEMA}.chunks'::regclass) and attname = 'tsv' and not attisdropped"
        ) == [(0,)]
        assert pg.execute(f"select to_regclass('{SCHEMA}.chunks_terms')") == [(None,)]

    with PostgresStore(pg.dsn, schema=SCHEMA, tenant="acme") as acme:
        assert acme.stats().schema_version == SCHEMA_VERSION
        rows = acme._call(
            "hybrid_search_chunks",
            query_text="plan",
            query_embedding=np.asarray(axis(1)),
            match_count=10,
            tenant="acme",
        )
        assert sorted((r["tenant_id"], r["id"]) for r in rows) == [
            ("acme", "plan#0"),
            ("acme", "plan#1"),
            ("press", "plan#0"),
            ("press", "plan#1"),
        ]
        assert [(h.tenant, h.ordinal) for h in acme.document_chunks(["plan"], 10)] == [
            ("acme", 0),
            ("acme", 1),
            ("press", 0),
            ("press", 1),
        ]
        assert acme.document_states(["plan"])["plan"][:2] == ("acme", True)

    # PostgREST serves the migrated functions (after the reload db init asks for), to a user of acme
    stack = supabase_stack
    rest = start_postgrest(pg, schemas=[SCHEMA], jwt_secret=stack.jwt_secret, folder=tmp_path / "rest")
    gateway = start_gateway(rest.url, anon_key=stack.anon_key, service_key=stack.service_key)
    try:
        with SupabaseStore(
            gateway.url,
            supabase_stack.anon_key,
            schema=SCHEMA,
            user_token=supabase_stack.user_token("alice", tenant="acme"),
        ) as alice:
            hits = alice.keyword_search("chunks", "plan", 10)
            assert sorted((h.tenant, h.id) for h in hits) == [
                ("acme", "plan#0"),
                ("acme", "plan#1"),
                ("press", "plan#0"),
                ("press", "plan#1"),
            ]
            assert len(alice.document_chunks(["plan"], 10)) == 4 and alice.unknown_documents(["plan"]) == []
    finally:
        gateway.stop()
        rest.stop()
