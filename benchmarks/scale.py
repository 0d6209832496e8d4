"""Postgres at scale: a first load, the size of the tables beside the embedded store's file, hybrid search
latency, HNSW recall and the keyword ranking against scoring every row, at each size asked for.

Each size copies benchmarks/latency.py's embedded store of that many chunks (real SciFact text, copies'
vectors jittered; `python benchmarks/latency.py --sizes N` builds it) into an empty schema through
`initial_load`, on a fresh Postgres in a temporary folder, and measures:

- the load: rows per second in all, and its parts: writing the rows (postings triggers off), then at the end
  the keyword postings made from every row at once and the HNSW and GIN builds; beside them the floor of
  the postings, stemming every text once (`to_tsvector` over all rows);
- size: the schema's tables and indexes against the embedded store file holding the same rows;
- hybrid and keyword search p50/p95 over SciFact test queries, in SQL (`hybrid_search_chunks`,
  `keyword_search_chunks`) and as the tools run them by DSN (`keyword_search` scored by the store from
  the postings it keeps; `Retrieval.search`, the query vectors given);
- HNSW recall@10 of `match_chunks` against exact search over the same vectors;
- the keyword top 10 of every query against the exact BM25 top 10 (`bm25_chunks` scoring every row);
- `chunk_retriever` scoped to each query's first three documents, as the two-tool flow calls it;
- with `--supabase`, the same searches through PostgREST (and a gateway in front, as Supabase's) with the anon
  key and a user's token, under row-level security: the rows are loaded in that user's tenant, and the
  user's hybrid search is timed as the tools run it with a `SupabaseStore`, beside the DSN path's.

    python -m benchmarks.scale [--sizes 10000 100000] [--queries 300]   # JSON in results/scale.json
    python -m benchmarks.scale --store some.db --dataset beir-folder     # any embedded store
    python -m benchmarks.scale --sizes 10000 1000000 --keep   # loads kept for `make bench-growth`
    python -m benchmarks.scale --sizes 1000000 --keep --searches-only   # the kept load, searched again
    python -m benchmarks.scale --sizes 1000000 --build-depth 200   # HNSW indexes built 200 deep
    python -m benchmarks.scale --sizes 1000000 --keep --supabase   # and through PostgREST, as a user
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from tqdm import tqdm

from agent_retrieval import (
    Context,
    Embedder,
    EmbeddingSettings,
    PostgresStore,
    Retrieval,
    Store,
    SupabaseStore,
    make_embedder,
)
from agent_retrieval.core.process import ProcessState
from agent_retrieval.evaluation import DatasetError, load_beir
from agent_retrieval.models import ChunkSearchRequest, SearchRequest, parse_request
from agent_retrieval.stores.rpc import INDEXED_TEXT, RPCStore
from benchmarks.latency import DATASET, RESULTS
from benchmarks.postgres import (
    GROWTH_STACK,
    LOAD_SETTINGS,
    copy_store,
    growth_schema,
    hnsw_recall,
    start_postgres_for_loads,
    timed,
)
from tests.stack import mint_jwt, start_gateway, start_postgrest


def load(postgres: Any, store: PostgresStore, source: Path) -> dict[str, float]:
    """`source` into the empty `store` by `initial_load`: rows per second in all and the time of each part."""
    started = time.perf_counter()
    with store.initial_load():
        copied = copy_store(source, store)
        written = time.perf_counter()
    finished = time.perf_counter()
    schema = store.schema
    stemming = time.perf_counter()
    postgres.execute(
        "; ".join(
            f"select sum(length(to_tsvector('{schema}.english_all'::regconfig, {text}))) "
            f"from {schema}.{level} r"
            for level, text in INDEXED_TEXT.items()
        )
    )
    stemming = time.perf_counter() - stemming
    postgres.execute("vacuum analyze")  # as an operator would after a load: statistics for the planner
    return {
        "rows": copied["rows"],
        "rows_per_second": round(copied["rows"] / (finished - started)),
        "seconds": round(finished - started, 1),
        "writing_rows_s": round(written - started, 1),
        "postings_and_indexes_at_the_end_s": round(finished - written, 1),
        "floor_stemming_every_text_once_s": round(stemming, 1),
    }


def sizes_mb(postgres: Any, schema: str) -> dict[str, float]:
    """Each of the schema's tables with its indexes and TOAST, in MB, and their sum."""
    rows = postgres.execute(
        "select c.relname, pg_total_relation_size(c.oid) from pg_class c "
        "where c.relnamespace = %s::regnamespace and c.relkind = 'r' order by 2 desc",
        (schema,),
    )
    tables = {name: round(int(size) / 2**20, 1) for name, size in rows}
    return {"total": round(sum(tables.values()), 1), **tables}


def exact_keyword_rankings(
    postgres: Any, store: PostgresStore, texts: list[str], k: int = 10
) -> dict[str, int]:
    """How many queries' pruned keyword top k scores as the top k of scoring every row holding a query word,
    in SQL (keyword_search_chunks) and as the store scores it. Scores, not ids: the stores above 10K hold
    copies of each text, whose equal scores differ in the last bits by the order they were summed in, so
    equal rows may trade places."""
    schema = store.schema
    same = same_by_store = 0
    for text in tqdm(texts, desc="keyword rankings"):
        pruned = postgres.execute(
            f"select keyword_score from {schema}.keyword_search_chunks(%s, %s)", (text, k)
        )
        by_store = [(hit.keyword_score,) for hit in store.keyword_search("chunks", text, k)]
        every_row = postgres.execute(
            f"""with stats as (
                  select sum(rows)::float8 as n, sum(total_length)::float8 / sum(rows) as average
                  from {schema}.corpus_stats where level = 'chunks'),
                words as (select distinct t.lexeme as term
                          from unnest(to_tsvector('english', %s)) t),
                weights as (
                  select w.term, ln(1 + (s.n - sum(t.rows) + 0.5) / (sum(t.rows) + 0.5)) as idf
                  from words w join {schema}.chunks_term_stats t on t.term = w.term, stats s
                  group by w.term, s.n having sum(t.rows) > 0)
                select b.score from {schema}.bm25_chunks(
                    (select array_agg(term) from weights), (select array_agg(idf) from weights), null,
                    (select average from stats), null, null) b
                order by b.score desc limit %s""",
            (text, k),
        )
        same += same_scores(pruned, every_row)
        same_by_store += same_scores(by_store, every_row)
    return {"queries": len(texts), "same_top_10_scores": same, "same_scored_by_the_store": same_by_store}


def same_scores(ranked: list[tuple[float]], every_row: list[tuple[float]]) -> bool:
    return len(ranked) == len(every_row) and all(
        math.isclose(a, b, rel_tol=1e-9) for (a,), (b,) in zip(ranked, every_row, strict=True)
    )


@contextlib.contextmanager
def nothing_kept(dsn: str, schema: str, tenant: str | None = None) -> Iterator[PostgresStore]:
    """A store on `schema` with process parts of its own: no postings kept, no pool shared."""
    with (
        contextlib.closing(ProcessState()) as process,
        PostgresStore(dsn, schema=schema, tenant=tenant, process=process) as store,
    ):
        yield store


SUPABASE_TENANT = "bench"  # the tenant of the rows and of the user searching them through PostgREST


class Supabase:
    """PostgREST in front of the bench's Postgres, as Supabase serves it: a gateway, the anon key, and a
    user of SUPABASE_TENANT signed in."""

    def __init__(self, postgres: Any, schemas: list[str]):
        secret = secrets.token_urlsafe(32)
        self.postgrest = start_postgrest(postgres, schemas=schemas, jwt_secret=secret)
        self.anon_key = mint_jwt(secret, "anon", expires_in=86400)
        self.gateway = start_gateway(
            self.postgrest.url, anon_key=self.anon_key, service_key=mint_jwt(secret, "service_role")
        )
        self.token = mint_jwt(
            secret, "authenticated", sub="bench-user", app_metadata={"tenant_id": SUPABASE_TENANT}
        )

    def measure(
        self,
        schema: str,
        texts: list[str],
        vectors: dict[str, np.ndarray],
        model_id: str,
        warm_up: list[str] | None,
    ) -> dict[str, Any]:
        """The user's searches through PostgREST: hybrid and keyword in SQL, and hybrid as the tools run it
        (a SupabaseStore with process parts of its own, warmed by `warm_up`)."""
        self.postgrest.reload_schema()
        candidates = Context().candidates
        with (
            contextlib.closing(ProcessState()) as process,
            SupabaseStore(
                self.gateway.url, self.anon_key, schema=schema, user_token=self.token, process=process
            ) as user,
        ):
            report: dict[str, Any] = {}
            report["hybrid_sql"], report["keyword_sql"] = sql_searches(user, texts, vectors)
            report["hybrid_tool"], report["scoped_tool"] = tool_searches(
                user, process, vectors, model_id, texts, warm_up
            )
            # the same queries again: every word's postings kept
            report["keyword_tool_kept"] = timed(
                lambda text: user.keyword_search("chunks", text, candidates), texts
            )
        return report

    def stop(self) -> None:
        self.gateway.stop()
        self.postgrest.stop()


def sql_searches(
    store: RPCStore, texts: list[str], vectors: dict[str, np.ndarray]
) -> tuple[dict[str, float], dict[str, float]]:
    """The SQL functions a caller may run itself: `hybrid_search_chunks` (top 10, the tools' candidates deep)
    and `keyword_search_chunks` (as many rows as the tools' candidates)."""
    candidates = Context().candidates
    hybrid = timed(
        lambda text: store._call(
            "hybrid_search_chunks",
            query_text=text,
            query_embedding=vectors[text],
            match_count=10,
            candidates=candidates,
        ),
        texts,
    )
    keyword = timed(
        lambda text: store._call("keyword_search_chunks", query_text=text, match_count=candidates), texts
    )
    return hybrid, keyword


def tool_searches(
    store: Store,
    process: ProcessState,
    vectors: dict[str, np.ndarray],
    model_id: str,
    texts: list[str],
    warm_up: list[str] | None,
) -> tuple[dict[str, float], dict[str, float]]:
    """`chunk_retriever`'s hybrid search as the tools run it (`Retrieval.search`; the query vectors given,
    so no model's time is counted), warmed by `warm_up` and meeting each query once; then `scoped`."""
    embedder = Embedder(KnownVectors(vectors), model_id)
    retrieval = Retrieval(Context(), store=store, embedder=embedder, process=process)
    request = {"top_k": 10, "hyde": "off"}
    hybrid = timed(
        lambda text: retrieval.search(parse_request(ChunkSearchRequest, request | {"query": text}), "chunks"),
        texts,
        warm_up,
    )
    return hybrid, scoped(retrieval, texts)


def scoped(retrieval: Retrieval, texts: list[str]) -> dict[str, float]:
    """The two-tool flow's second call: `chunk_retriever` within the three documents `document_retriever`
    ranks first for each query (found before the clock starts), after the unscoped searches."""
    scopes = {
        text: [
            hit.document_id for hit in retrieval.search(SearchRequest(query=text, top_k=3), "documents").hits
        ]
        for text in texts
    }
    request = {"top_k": 10, "hyde": "off"}
    return timed(
        lambda text: retrieval.search(
            parse_request(ChunkSearchRequest, request | {"query": text, "document_ids": scopes[text]}),
            "chunks",
        ),
        texts,
    )


class KnownVectors(Embeddings):
    """The bench's query vectors, made once: a search timed with them leaves out the model's time."""

    def __init__(self, vectors: dict[str, np.ndarray]):
        self.vectors = vectors

    def embed_query(self, text: str) -> list[float]:
        return self.vectors[text].tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]


def measure(
    postgres: Any,
    source: Path,
    schema: str,
    texts: list[str],
    vectors: dict[str, np.ndarray],
    model_id: str,
    others: list[str],
    reload: bool = True,
    build_depth: int | None = None,
    supabase: Supabase | None = None,
) -> dict[str, Any]:
    """Every figure for the embedded store `source` copied into `schema`, made anew unless `reload` is
    false (then the schema's functions are brought up to date and its rows searched as they are), its HNSW
    indexes `build_depth` deep (None: the store's default); with `supabase`, in its user's tenant, and
    searched through it too."""
    if reload:
        postgres.execute(f"drop schema if exists {schema} cascade")
    dsn = postgres.dsn
    tenant = SUPABASE_TENANT if supabase else None
    store = PostgresStore(dsn, schema=schema, tenant=tenant)
    store.init(384, build_depth=build_depth)
    report: dict[str, Any] = {"load": load(postgres, store, source)} if reload else {}
    if supabase and not postgres.execute(
        f"select 1 from {schema}.chunks where tenant_id = %s limit 1", (tenant,)
    ):
        raise SystemExit(
            f"{schema}'s rows are not the Supabase user's: load them with --keep --supabase first"
        )
    report["size_mb"] = sizes_mb(postgres, schema)
    report["embedded_file_mb"] = round(source.stat().st_size / 2**20, 1)
    report["size_ratio"] = round(report["size_mb"]["total"] / report["embedded_file_mb"], 2)
    candidates = Context().candidates
    # Both searches each way, in one run: in SQL (hybrid_search_chunks, keyword_search_chunks: what a
    # Supabase caller runs), and as the tools run them by DSN (keyword search scored by the store from the
    # postings it keeps, vector search by match_chunks, fused in Python; the query vectors given, so no
    # model's time is counted). The store's own measures start with nothing kept, warmed by `others`
    # (other queries), and meet each query once: its rarer words are read at first sight.
    report["hybrid_dsn"], report["keyword_sql"] = sql_searches(store, texts, vectors)
    warm_up = others or None
    with nothing_kept(dsn, schema, tenant) as fresh:
        report["keyword_dsn"] = timed(
            lambda text: fresh.keyword_search("chunks", text, candidates), texts, warm_up
        )
    with nothing_kept(dsn, schema, tenant) as fresh:
        report["hybrid_tool_dsn"], report["scoped_tool_dsn"] = tool_searches(
            fresh, fresh.process, vectors, model_id, texts, warm_up
        )
    if supabase:
        report["supabase"] = supabase.measure(schema, texts, vectors, model_id, warm_up)
    report["hnsw_recall_at_10"] = hnsw_recall(store, source, [vectors[text] for text in texts])
    report["keyword_rankings"] = exact_keyword_rankings(postgres, store, texts)
    store.close()
    return report


def schema_of(source: Path, keep: bool) -> str:
    """The schema a load of `source` goes in: bench-growth's when kept, else one of its own."""
    if keep:
        return growth_schema(int(source.stem.rpartition("-")[2]))
    return f"scale_{source.stem.replace('-', '_')}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument(
        "--store", type=Path, help="one embedded store to copy, instead of results/scifact-N.db"
    )
    parser.add_argument(
        "--dataset", type=Path, default=DATASET, help="a BEIR folder: its judged test queries"
    )
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument(
        "--output",
        type=Path,
        help="JSON report (default results/scale.json; with --searches-only, scale-searches.json)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="load into bench-growth's server and schemas and keep them: bench-growth then times the tool "
        "on these loads instead of loading again",
    )
    parser.add_argument(
        "--searches-only",
        action="store_true",
        help="with --keep: search the kept loads again (after a change to the search SQL) without loading",
    )
    parser.add_argument(
        "--build-depth", type=int, help="the HNSW indexes' ef_construction (vector_index_build_depth)"
    )
    parser.add_argument(
        "--supabase",
        action="store_true",
        help="also search through PostgREST as a signed-in user (the rows are loaded in that user's tenant)",
    )
    args = parser.parse_args(argv)
    if args.searches_only and not args.keep:
        parser.error("--searches-only searches the loads --keep kept: pass both")
    sources = [args.store] if args.store else [RESULTS / f"scifact-{size}.db" for size in args.sizes]
    if missing := [str(path) for path in sources if not path.exists()]:
        sys.exit(f"{', '.join(missing)} not found: python benchmarks/latency.py --sizes N builds them")
    texts = list(load_beir(args.dataset, "test", limit=args.queries).queries.values())
    try:  # other questions, to warm the store's own searches up with
        others = list(load_beir(args.dataset, "train", limit=50).queries.values())
    except DatasetError:
        others = []
    embedder = make_embedder(EmbeddingSettings())
    vectors = {text: embedder.embed_query(text) for text in tqdm(texts + others, desc="embed queries")}
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
        postgres = start_postgres_for_loads(GROWTH_STACK if args.keep else Path(folder))
        schemas = {source: schema_of(source, args.keep) for source in sources}
        supabase = Supabase(postgres, list(schemas.values())) if args.supabase else None
        report["server_settings"] = LOAD_SETTINGS
        report["build_depth"] = args.build_depth  # None: pgvector's 64 for a new load, a kept load's own
        try:
            for source, schema in schemas.items():
                report[source.name] = measure(
                    postgres,
                    source,
                    schema,
                    texts,
                    vectors,
                    embedder.model_id,
                    others,
                    reload=not args.searches_only,
                    build_depth=args.build_depth,
                    supabase=supabase,
                )
                print(source.name, json.dumps(report[source.name]), flush=True)
        finally:
            if supabase:
                supabase.stop()
            postgres.stop()
    output = args.output or RESULTS / ("scale-searches.json" if args.searches_only else "scale.json")
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
