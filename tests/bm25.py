"""Keyword rankings checked against BM25 over every row: a Zipf-like corpus, and the exact top k of a
Postgres schema (bm25_<level> scoring every row a scope may read, nothing pruned)."""

from __future__ import annotations

from typing import Any

import numpy as np

VOCABULARY = [f"w{n}" for n in range(60)]


def zipf_corpus(rng: np.random.Generator, rows: int = 400) -> list[str]:
    """Texts over a Zipf-like vocabulary: a few words in most rows, many in a few, as in real text."""
    weights = 1 / np.arange(1, len(VOCABULARY) + 1) ** 1.1
    weights /= weights.sum()
    return [" ".join(rng.choice(VOCABULARY, size=int(rng.integers(3, 25)), p=weights)) for _ in range(rows)]


def random_query(rng: np.random.Generator) -> str:
    return " ".join(rng.choice(VOCABULARY, size=int(rng.integers(3, 9)), replace=False))


def idf_and_average(
    postgres: Any, schema: str, words: list[str], tenant: str | None = None
) -> tuple[list[str], list[float], float]:
    """The words held by the rows `tenant` may read (its own and public ones; None: every row), rarest
    first, their idf and those rows' average length, as keyword_search_chunks computes them."""
    scope = "(%(tenant)s::text is null or tenant_id = %(tenant)s or is_public)"
    rows = postgres.execute(
        f"""select t.term, ln(1 + (s.n - sum(t.rows) + 0.5) / (sum(t.rows) + 0.5))
            from {schema}.chunks_term_stats t,
                 (select sum(rows)::float8 as n from {schema}.corpus_stats
                  where level = 'chunks' and {scope}) s
            where t.term = any (%(words)s) and {scope} group by t.term, s.n having sum(t.rows) > 0
            order by 2 desc, 1""",
        {"tenant": tenant, "words": words},
    )
    average = postgres.execute(
        f"select sum(total_length)::float8 / sum(rows) from {schema}.corpus_stats "
        f"where level = 'chunks' and {scope}",
        {"tenant": tenant},
    )[0][0]
    return [t for t, _ in rows], [w for _, w in rows], average


def every_row_top_k(
    postgres: Any, schema: str, query: str, k: int, tenant: str | None = None
) -> list[tuple[str, float]]:
    """The exact BM25 top k (chunk id, score) of the chunks `tenant` may read: every row holding a query
    word scored, best first, ties to the older row."""
    terms, idfs, average = idf_and_average(postgres, schema, query.split(), tenant)
    rows = postgres.execute(
        f"""select c.id, b.score from {schema}.bm25_chunks(%s, %s, null, %s, %s, null) b
            join {schema}.chunks c on c.rowid = b.row_id order by b.score desc, b.row_id limit %s""",
        (terms, idfs, average, tenant, k),
    )
    return [(chunk, score) for chunk, score in rows]
