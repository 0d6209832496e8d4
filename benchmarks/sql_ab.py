"""The Postgres store's search SQL of another revision against this checkout's, in one run on the same rows:
keyword and hybrid search of chunks by DSN, called alternately (before, after; then after, before) on the
loads bench-scale kept (`--keep`), p50/p95 of each, and how many calls returned the same keyword scores.

The other revision's search functions (the stable ones of its chunks level) are installed beside this
checkout's under other names (`<name>__before`), so both read the same tables, caches and statistics.

    python -m benchmarks.sql_ab --against 5d04552 --sizes 100000 1000000 [--queries 300]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from tqdm import tqdm

from agent_retrieval import Context, EmbeddingSettings, PostgresStore, make_embedder
from agent_retrieval.evaluation import load_beir
from benchmarks.embedded_peers import percentiles
from benchmarks.latency import DATASET, RESULTS
from benchmarks.postgres import GROWTH_STACK, growth_schema, start_postgres_for_loads

ROOT = Path(__file__).resolve().parent.parent
SIDES = {"before": "__before", "after": ""}  # each side's suffix of the function names
RENDER = "import sys; from agent_retrieval.stores.rpc import render_sql; print(render_sql(sys.argv[1], 384))"


def revision_sql(revision: str, schema: str) -> str:
    """All of the store's SQL as `revision` renders it for `schema`."""
    archive = subprocess.run(
        ["git", "archive", revision, "agent_retrieval"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryDirectory(prefix="sql-ab-") as folder:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        return subprocess.run(
            [sys.executable, "-c", RENDER, schema], cwd=folder, capture_output=True, text=True, check=True
        ).stdout


def search_functions(sql: str, schema: str) -> str:
    """The stable (search) functions of the chunks level in `sql`, renamed `<name>__before` and calling
    each other by those names."""
    start = re.compile(rf"create or replace function {schema}\.(\w+_chunks)\(")
    functions = {}
    for found in start.finditer(sql):
        opened = sql.index("$$", found.end())
        closed = sql.index("$$", opened + 2)
        text = sql[found.start() : sql.index(";", closed) + 1]
        if re.search(r"\blanguage \w+ stable\b", sql[found.end() : opened]):
            functions[found.group(1)] = text
    renamed = "\n\n".join(functions.values())
    for name in functions:
        renamed = renamed.replace(f"{schema}.{name}(", f"{schema}.{name}__before(")
    return renamed


def compare(
    postgres: Any, schema: str, texts: list[str], vectors: list[Any], before_sql: str
) -> dict[str, Any]:
    """Each search before and after, alternately, and how many keyword answers scored the same."""
    from pgvector.psycopg import register_vector

    PostgresStore(postgres.dsn, schema=schema).init(384)  # this checkout's functions
    candidates = Context().candidates
    statements = {
        "keyword": f"select keyword_score from {schema}.keyword_search_chunks{{}}(%s, {candidates})",
        "hybrid": f"select id from {schema}.hybrid_search_chunks{{}}(%s, %s, 10, candidates => {candidates})",
    }
    times: dict[str, list[float]] = {f"{search} {side}": [] for search in statements for side in SIDES}
    same = 0
    with postgres.connect() as conn:
        conn.autocommit = True
        register_vector(conn)
        conn.execute(before_sql)
        try:
            for round_ in range(2):
                pairs = list(zip(texts, vectors, strict=True))
                for text, vector in tqdm(pairs, desc=f"{schema}, round {round_ + 1}"):
                    scores: dict[str, list[float]] = {}
                    for search, statement in statements.items():
                        for side in list(SIDES) if round_ == 0 else list(SIDES)[::-1]:
                            arguments = (text,) if search == "keyword" else (text, vector)
                            started = time.perf_counter()
                            rows = conn.execute(statement.format(SIDES[side]), arguments).fetchall()
                            times[f"{search} {side}"].append((time.perf_counter() - started) * 1000)
                            if search == "keyword":
                                scores[side] = [round(score, 9) for (score,) in rows]
                    same += scores["before"] == scores["after"]
        finally:  # the kept load keeps only this checkout's functions
            installed = "select oid::regprocedure::text from pg_proc where pronamespace = %s::regnamespace"
            for (function,) in conn.execute(
                installed + " and proname like %s", (schema, r"%\_\_before")
            ).fetchall():
                conn.execute(f"drop function {function}")
    report: dict[str, Any] = {name: percentiles(values) for name, values in times.items()}
    report["same_keyword_scores"] = f"{same} of {2 * len(texts)}"
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", required=True, help="the git revision whose search SQL is 'before'")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--dataset", type=Path, default=DATASET, help="a BEIR folder: its test queries")
    parser.add_argument("--stack", type=Path, default=GROWTH_STACK, help="the server bench-scale --keep kept")
    parser.add_argument("--output", type=Path, default=RESULTS / "sql-ab.json")
    args = parser.parse_args(argv)
    texts = list(load_beir(args.dataset, "test", limit=args.queries).queries.values())
    embedder = make_embedder(EmbeddingSettings())
    vectors = [embedder.embed_query(text) for text in tqdm(texts, desc="embed queries")]
    report: dict[str, Any] = {"against": args.against}
    postgres = start_postgres_for_loads(args.stack)
    try:
        for size in args.sizes:
            schema = growth_schema(size)
            before = search_functions(revision_sql(args.against, schema), schema)
            report[schema] = compare(postgres, schema, texts, vectors, before)
            print(schema, json.dumps(report[schema]), flush=True)
    finally:
        postgres.stop()
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
