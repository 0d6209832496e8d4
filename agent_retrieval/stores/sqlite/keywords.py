"""Keyword search in one SQLite file: FTS5's BM25 with the title weighted, scored exactly but only over the
rows that can reach the top k (MaxScore).

A search of the whole level reads each word's part of the score in every row holding it (its postings)
once, and keeps it until the next write: a common word is then summed in numpy instead of being scored
again, row by row, by every query that holds it. A common word's postings come from the lists stored in the
file (stored_postings.py), a rarer one's from FTS5. A search inside a scope (filters, documents) ranks the
scope's rows from the same postings (best_within); one holding a word in more than POSTINGS_ROWS rows that
the file has no list of asks FTS5 directly."""

from __future__ import annotations

import math
import sqlite3
from typing import Any

import numpy as np

from agent_retrieval.models import Level
from agent_retrieval.stores.postings import Postings, PostingsCache, best_of_postings, best_of_rows
from agent_retrieval.stores.sqlite.cache import FileCache
from agent_retrieval.stores.sqlite.schema import BM25_K1, EVERY_ROW, TABLE, bm25_score, fts_any
from agent_retrieval.stores.sqlite.stored_postings import Tokenizer, fts5_idf, stored_level

IDF_CACHE_TERMS = 50_000  # words whose document frequency is kept per level until the next write
# A word's postings take about 1.2 us a row to read from FTS5 (60 ms at this size) and 16 bytes a row to
# keep until the next write; a query holding a commoner word with no stored list is scored by FTS5, which
# scores such a word only in the rows holding a rarer one. (At 100K SciFact chunks the commonest query word
# is in 38K rows; at 1M, 385K.)
POSTINGS_ROWS = 50_000


def postings(
    conn: sqlite3.Connection,
    held: PostingsCache,
    level: Level,
    counts: dict[str, int],
    from_file: dict[str, Postings],
) -> list[Postings] | None:
    """The postings of the words some row holds: from the file's lists (`from_file`), as kept, or read
    from FTS5 (and kept) for a word in at most POSTINGS_ROWS rows; None if a word is in none of these."""
    missing = [t for t, n in counts.items() if n and t not in from_file and held.get(t) is None]
    if any(counts[t] > POSTINGS_ROWS for t in missing):
        return None
    found = []
    for term, count in counts.items():
        kept = from_file.get(term) or held.get(term)
        if kept is None and count:
            kept = _read_postings(conn, level, term)
            held.put(term, kept)
        if kept is not None:
            found.append(kept)
    return found


def stored_postings(
    conn: sqlite3.Connection,
    cache: FileCache,
    generation: int,
    level: Level,
    terms: list[str],
    held: PostingsCache,
    tokenizer: Tokenizer,
) -> dict[str, Postings]:
    """The postings of the terms the file keeps lists of (as kept, or read from the lists and kept)."""
    stored = stored_level(conn, cache, generation, level)
    found: dict[str, Postings] = {}
    if stored is None:
        return found
    for term in terms:
        token = tokenizer.tokens(term)
        if len(token) == 1 and token[0] in stored.terms:
            kept = held.get(term)
            if kept is None:
                kept = stored.read(conn, level, term, token[0])
                held.put(term, kept)
            found[term] = kept
    return found


def _held(cache: FileCache, generation: int, level: Level) -> PostingsCache:
    held = cache.postings.get(level)
    if held is None or held.generation != generation:
        held = cache.postings[level] = PostingsCache(generation)
    return held


def _read_postings(conn: sqlite3.Connection, level: Level, term: str) -> Postings:
    """The term's rows and its part of their score, from FTS5's own bm25 (a one-word query scores exactly
    that word's part: the same idf, frequency and row length)."""
    fts = f"{level}_fts"
    sql = f"SELECT rowid, {bm25_score(level)} FROM {fts} WHERE {fts} MATCH ? ORDER BY rowid"
    rows = conn.execute(sql, (fts_any([term]),)).fetchall()
    pairs = np.array(rows, dtype=np.float64).reshape(len(rows), 2)  # rowids below 2**53 stay exact
    return Postings(pairs[:, 0].astype(np.int64), np.ascontiguousarray(pairs[:, 1]))


def best_rows(
    conn: sqlite3.Connection,
    cache: FileCache,
    generation: int,
    level: Level,
    terms: list[str],
    k: int,
    scope: tuple[str, list[Any], np.ndarray | None],
    tokenizer: Tokenizer,
) -> tuple[list[tuple[int, float]], dict[str, float]]:
    """The k best rows (rowid, BM25 score) for the terms within a scope (`where`, SQL on alias d, with its
    `params`, and the rowids it leaves; empty for the whole level), best first, and each term's idf."""
    where, params, within = scope
    held = _held(cache, generation, level)
    from_file = stored_postings(conn, cache, generation, level, terms, held, tokenizer)
    level_rows, counted = row_counts(conn, cache, generation, level, [t for t in terms if t not in from_file])
    counts = {t: len(from_file[t].rowids) if t in from_file else counted[t] for t in terms}
    weights = idf(level_rows, counts)
    if (found := postings(conn, held, level, counts, from_file)) is not None:
        if not where:
            return best_of_postings(found, k), weights
        if within is not None:
            return best_within(found, within, k, level_rows), weights
    return best_by_fts(conn, level, terms, weights, k, where, params), weights


# A scope of at most this many rows is scored row by row; a larger one filters the whole level's ranking.
SCORED_SCOPE_ROWS = 20_000


def best_within(
    found: list[Postings], within: np.ndarray, k: int, level_rows: int
) -> list[tuple[int, float]]:
    """The k best rows of `within` (rowids, ascending) from the words' postings, best first (ties to the
    older row), exactly as scoring every row of it: a small scope scored row by row, a large one by the
    whole level's ranking, whose first rows are filtered and read deeper until k of them are the scope's
    (every row below them scores lower) or the ranking ends."""
    if len(within) <= SCORED_SCOPE_ROWS:
        return best_of_rows(found, within, k)
    head = math.ceil(2 * k * level_rows / len(within))  # twice what the scope's share asks
    while True:
        ranked = best_of_postings(found, head)
        rowids = np.array([rowid for rowid, _ in ranked], dtype=np.int64)
        at = np.minimum(np.searchsorted(within, rowids), len(within) - 1)
        kept = [pair for pair, inside in zip(ranked, within[at] == rowids, strict=True) if inside]
        if len(kept) >= k or len(ranked) < head:
            return kept[:k]
        head *= 4


def best_by_fts(
    conn: sqlite3.Connection,
    level: Level,
    terms: list[str],
    weights: dict[str, float],
    k: int,
    where: str,
    params: list[Any],
) -> list[tuple[int, float]]:
    """The k best rows (rowid, BM25 score) for the terms within `where` (SQL on alias d), best first, as
    FTS5 scores them.

    Long queries use MaxScore: a row holding none of the rarer terms scores at most the sum of the common
    terms' upper bounds, so once k rows beat that sum, rows with only common terms are never scored. On
    100K chunks this halves the time of a SciFact query."""
    fts, score = f"{level}_fts", bm25_score(level)
    # Unscoped, the FTS index answers alone: joining the table for every match would double the time.
    sql = (
        f"SELECT rowid, {score} AS score FROM {fts} WHERE {fts} MATCH ? ORDER BY score DESC LIMIT ?"
        if not where
        else f"""SELECT d.rowid, f.score
               FROM (SELECT rowid, {score} AS score FROM {fts} WHERE {fts} MATCH ?) f
               JOIN {TABLE[level]} d ON d.rowid = f.rowid WHERE {where} ORDER BY f.score DESC LIMIT ?"""
    )

    def ranked(essential: list[str]) -> list[tuple[int, float]]:
        rest = [t for t in terms if t not in essential]
        match = f"({fts_any(essential)})" + (f" AND ({fts_any(rest)} OR {EVERY_ROW})" if rest else "")
        return conn.execute(sql, (match, *params, k)).fetchall()

    if len(terms) < 3:
        return ranked(terms)
    by_rarity = sorted((t for t in terms if weights[t] > 0), key=lambda t: -weights[t])
    if not by_rarity:
        return []
    first = by_rarity[: (len(by_rarity) + 1) // 2]
    rows = ranked(first)
    threshold = rows[-1][1] if len(rows) == k else 0.0
    bound, essential = 0.0, list(by_rarity)
    # a term adds less than (k1 + 1) times its idf to any row's score
    while essential and bound + (BM25_K1 + 1) * weights[essential[-1]] < threshold:
        bound += (BM25_K1 + 1) * weights[essential.pop()]
    if not set(essential) <= set(first):
        rows = ranked(essential)
    return rows


def row_counts(
    conn: sqlite3.Connection, cache: FileCache, generation: int, level: Level, terms: list[str]
) -> tuple[int, dict[str, int]]:
    """How many rows the level holds, and how many hold each term (cached until the next write)."""
    kept = cache.frequencies.get(level)
    if kept is None or kept[0] != generation:
        rows = conn.execute(f"SELECT count(*) FROM {TABLE[level]}").fetchone()[0]
        kept = cache.frequencies[level] = (generation, rows, {})
    _, rows, frequencies = kept
    if len(frequencies) > IDF_CACHE_TERMS:
        frequencies.clear()
    # Other threads share the cache and may empty it at any moment: this call's counts are kept in its
    # own dict, and the shared one is only ever asked with get() and added to.
    counts: dict[str, int] = {}
    for term in terms:
        count = frequencies.get(term)
        if count is None:
            sql = f"SELECT count(*) FROM {level}_fts WHERE {level}_fts MATCH ?"
            count = frequencies[term] = conn.execute(sql, (fts_any([term]),)).fetchone()[0]
        counts[term] = count
    return rows, counts


def idf(rows: int, counts: dict[str, int]) -> dict[str, float]:
    """FTS5's bm25 idf of each term held by counts[term] of `rows` rows (0 for a term in no row)."""
    return {t: fts5_idf(rows, n) if n else 0.0 for t, n in counts.items()}


def coverage(conn: sqlite3.Connection, level: Level, rowid: int, idf: dict[str, float]) -> float:
    """The share of the query's idf that one row's words hold (a lookup per term in that row alone: cheap,
    so it is measured for the best keyword hit only)."""
    total = sum(idf.values())
    sql = f"SELECT 1 FROM {level}_fts WHERE {level}_fts MATCH ? AND rowid = ?"
    held = sum(w for t, w in idf.items() if w and conn.execute(sql, (fts_any([t]), rowid)).fetchone())
    return held / total if total else 0.0
