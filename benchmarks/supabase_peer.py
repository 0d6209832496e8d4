"""A peer on Postgres in the same run: the hybrid search function of Supabase's hybrid-search guide against
ours, on the same database, the same embeddings and the same queries.

The peer is written from the guide's description: a table with a generated `fts` tsvector (english) under a
GIN index and the embedding under an HNSW index for inner product; one SQL function that takes the
`least(match_count, 30) * 2` best of each side (full text by `ts_rank_cd` over `websearch_to_tsquery`,
vectors by negative inner product) and fuses them by reciprocal rank (k 50, weights 1 and 1). It holds the
SciFact documents (title and text) with the vectors our store holds for them.

Ours is `hybrid_search_documents`, the SQL function an RPC caller uses, with the tools' defaults. Both are
called by DSN (psycopg) with the query's vector computed beforehand, top 10, and judged as BEIR judges
SciFact (nDCG@10 over documents, 300 test queries).

    python -m benchmarks.supabase_peer   # needs benchmarks/results/scifact-base.db (make bench-quality)
"""

from __future__ import annotations

import json
import statistics
import sys

import numpy as np
from tqdm import tqdm

from agent_retrieval import EmbeddingSettings, PostgresStore, make_embedder
from benchmarks.postgres import DATASET, RESULTS, copy_store, ndcg_at_10, qrels, timed
from tests.stack import start_postgres

OURS, PEER = "bench_scifact", "guide_peer"


def peer_sql(peer: str = PEER, dimension: int = 384) -> str:
    """The guide's table, indexes and function, in schema `peer`."""
    return f"""
create schema if not exists {peer};
create table if not exists {peer}.documents (
  id bigint primary key generated always as identity,
  doc_id text not null,
  content text not null,
  fts tsvector generated always as (to_tsvector('english', content)) stored,
  embedding vector({dimension})
);
create index if not exists documents_fts on {peer}.documents using gin (fts);
create index if not exists documents_embedding on {peer}.documents using hnsw (embedding vector_ip_ops);

create or replace function {peer}.hybrid_search(
  query_text text, query_embedding vector({dimension}), match_count int,
  full_text_weight float = 1, semantic_weight float = 1, rrf_k int = 50
) returns setof {peer}.documents
language sql as $$
  with full_text as (
    select d.id,
           row_number() over (order by ts_rank_cd(d.fts, websearch_to_tsquery(query_text)) desc) as rank_ix
    from {peer}.documents d
    where d.fts @@ websearch_to_tsquery(query_text)
    order by rank_ix
    limit least(match_count, 30) * 2
  ),
  semantic as (
    select d.id, row_number() over (order by d.embedding <#> query_embedding) as rank_ix
    from {peer}.documents d
    order by rank_ix
    limit least(match_count, 30) * 2
  )
  select d.*
  from full_text f
  full outer join semantic s on f.id = s.id
  join {peer}.documents d on coalesce(f.id, s.id) = d.id
  order by coalesce(1.0 / (rrf_k + f.rank_ix), 0.0) * full_text_weight
         + coalesce(1.0 / (rrf_k + s.rank_ix), 0.0) * semantic_weight desc
  limit least(match_count, 30)
$$;
"""


def load_peer(conn, ours: str = OURS, peer: str = PEER, dimension: int = 384) -> None:
    """Make the peer in `peer` and fill it, once, with our store's documents (title and text) and vectors."""
    conn.execute(peer_sql(peer, dimension))
    if not conn.execute(f"select exists (select from {peer}.documents)").fetchone()[0]:
        conn.execute(
            f"insert into {peer}.documents (doc_id, content, embedding) "
            f"select id, title || ' ' || content, embedding from {ours}.documents"
        )
    conn.execute(f"vacuum analyze {peer}.documents")


def main() -> dict:
    base = RESULTS / "scifact-base.db"
    if not base.exists():
        sys.exit("run make bench-quality first: it builds benchmarks/results/scifact-base.db")
    texts = {
        json.loads(line)["_id"]: json.loads(line)["text"]
        for line in (DATASET / "queries.jsonl").read_text().splitlines()
    }
    judged = qrels()
    embedder = make_embedder(EmbeddingSettings())
    vectors = {qid: embedder.embed_query(texts[qid]) for qid in tqdm(judged, desc="embed queries")}
    postgres = start_postgres(RESULTS / "postgres-stack")
    try:
        ours = PostgresStore(postgres.dsn, schema=OURS)
        ours.init(384)
        if ours.stats().documents < 5183:
            copy_store(base, ours)
        with postgres.connect() as conn:
            load_peer(conn)

            def run(function: str):
                def call(qid: str) -> list[str]:
                    rows = conn.execute(
                        function, (texts[qid], np.asarray(vectors[qid]).tolist(), 10)
                    ).fetchall()
                    return [r[0] for r in rows]

                return call

            searches = {
                "ours: hybrid_search_documents": run(
                    f"select id from {OURS}.hybrid_search_documents(%s, %s::vector, %s)"
                ),
                "Supabase guide: hybrid_search": run(
                    f"select doc_id from {PEER}.hybrid_search(%s, %s::vector, %s)"
                ),
            }
            report: dict = {}
            for name, call in searches.items():
                quality = [ndcg_at_10(call(qid), relevant) for qid, relevant in judged.items()]
                report[name] = {
                    "ndcg@10": round(100 * statistics.fmean(quality), 2),
                    **timed(call, list(judged)),
                }
        ours.close()
    finally:
        postgres.stop()
    (RESULTS / "supabase_peer.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
