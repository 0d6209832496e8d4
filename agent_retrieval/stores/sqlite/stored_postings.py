"""Common words' postings written into the store file at the end of an ingest, so that a search reads a word
held by 400K rows as one blob (milliseconds) instead of asking FTS5 to score it row by row (half a second).

For each word (FTS5 token) in at least STORED_ROWS rows of a level the file keeps its rows and, in each, the
word's weighted count (a title occurrence counts TITLE_WEIGHT times, a text one once), and for the level
each row's length in tokens. With FTS5's current row count and average length these give the part FTS5's
bm25 gives: the same formula in the same float64 operations. Rows written since (triggers log them in
keyword_changed) are left out of the stored lists and asked of FTS5, which knows them; once they are too
many or too scattered, the next refresh (the end of an ingest) writes the lists again."""

from __future__ import annotations

import math
import sqlite3
import threading
from dataclasses import dataclass

import numpy as np

from agent_retrieval.core.process import PROCESS, ProcessState
from agent_retrieval.core.progress import bar
from agent_retrieval.models import Level
from agent_retrieval.stores.postings import Postings
from agent_retrieval.stores.sqlite.cache import FileCache
from agent_retrieval.stores.sqlite.schema import (
    BM25_B,
    BM25_K1,
    EVERY_ROW,
    TABLE,
    TITLE_COLUMN,
    TITLE_WEIGHT,
    TOKENIZER,
    bm25_score,
    fts_any,
)

# Rarer words are read from FTS5 at first sight (1.2 us a row). At 100K chunks, words in 200 to 2,000 rows
# cost a query's first sight 1.8 ms at the median, and storing them adds a third to the lists (+11 MB).
STORED_ROWS = 200
# The next refresh writes the lists again once this share of a level's rows was written since, or once
# they lie in more runs of consecutive rowids than this: a word's written rows are asked of FTS5 by run.
REWRITE_SHARE, MAX_CHANGED_RUNS = 0.1, 64
# Past this many rows written since (writes with no ingest after them), a level is asked of FTS5 without
# reading the log at each write.
MAX_CHANGED_ROWS = 100_000


@dataclass(frozen=True)
class StoredLevel:
    """What a level's stored postings need at one generation: the stored words, each stored row's length,
    the rows written since (as runs of consecutive rowids), and FTS5's row count and average length."""

    terms: frozenset[str]
    lengths: np.ndarray  # by rowid; 0 for a rowid no stored row has
    changed: np.ndarray  # rowids written since, ascending
    runs: list[tuple[int, int]]
    rows: int
    average_length: float

    @property
    def nbytes(self) -> int:
        return self.lengths.nbytes + self.changed.nbytes

    def read(self, conn: sqlite3.Connection, level: Level, word: str, token: str) -> Postings:
        """The word's postings (`token`, its one token, stored): the stored rows not written since, scored
        here, and the rows written since that hold it, scored by FTS5."""
        rowids_blob, counts_blob = conn.execute(
            "SELECT rowids, counts FROM keyword_postings WHERE level = ? AND term = ?", (level, token)
        ).fetchone()
        rowids = np.frombuffer(rowids_blob, dtype=np.uint32).astype(np.int64)
        counts = np.frombuffer(counts_blob, dtype=np.uint16).astype(np.float64)
        if len(self.changed):
            kept = ~np.isin(rowids, self.changed, assume_unique=True)
            rowids, counts = rowids[kept], counts[kept]
        fts = f"{level}_fts"
        sql = f"SELECT rowid, {bm25_score(level)} FROM {fts} WHERE {fts} MATCH ? AND rowid BETWEEN ? AND ?"
        written = [
            row for first, last in self.runs for row in conn.execute(sql, (fts_any([word]), first, last))
        ]
        idf = fts5_idf(self.rows, len(rowids) + len(written))
        # FTS5's bm25 (fts5_aux.c), operation for operation, so the float64 results are the same
        scaled = self.lengths[rowids] * BM25_B / self.average_length
        scores = idf * ((counts * (BM25_K1 + 1.0)) / (counts + BM25_K1 * (1 - BM25_B + scaled)))
        if written:
            extra = np.array(written, dtype=np.float64).reshape(len(written), 2)
            rowids = np.concatenate([rowids, extra[:, 0].astype(np.int64)])
            scores = np.concatenate([scores, extra[:, 1]])
            order = np.argsort(rowids, kind="stable")
            rowids, scores = rowids[order], scores[order]
        return Postings(rowids, np.ascontiguousarray(scores))


def fts5_idf(rows: int, holding: int) -> float:
    """FTS5's bm25 idf of a word held by `holding` of `rows` rows: ln((N - n + 0.5) / (n + 0.5)), >= 1e-6."""
    return max(1e-6, math.log((rows - holding + 0.5) / (holding + 0.5)))


def stored_level(
    conn: sqlite3.Connection, cache: FileCache, generation: int, level: Level
) -> StoredLevel | None:
    """The level's stored postings at this generation (read once per generation), or None when there are
    none, or the rows written since are too many or too scattered to ask FTS5 for by run."""
    held = cache.stored.get(level)
    if held is not None and held[0] == generation:
        return held[1]
    found = _read_stored_level(conn, level)
    cache.stored[level] = (generation, found)
    return found


def _read_stored_level(conn: sqlite3.Connection, level: Level) -> StoredLevel | None:
    row = conn.execute(
        "SELECT title_weight, rowids, lengths FROM keyword_lengths WHERE level = ?", (level,)
    ).fetchone()
    if row is None or row[0] != TITLE_WEIGHT:
        return None
    past = "SELECT 1 FROM keyword_changed WHERE level = ? LIMIT 1 OFFSET ?"
    if conn.execute(past, (level, MAX_CHANGED_ROWS)).fetchone():
        return None
    changed, runs = _changed(conn, level)
    if len(runs) > MAX_CHANGED_RUNS:
        return None
    rowids = np.frombuffer(row[1], dtype=np.uint32)
    lengths = np.zeros(int(rowids.max(initial=0)) + 1, dtype=np.float64)
    lengths[rowids] = np.frombuffer(row[2], dtype=np.uint32)
    terms = frozenset(
        r[0] for r in conn.execute("SELECT term FROM keyword_postings WHERE level = ?", (level,))
    )
    rows, tokens = _totals(conn, level)
    return StoredLevel(terms, lengths, changed, runs, rows, tokens / rows if rows else 1.0)


def _changed(conn: sqlite3.Connection, level: Level) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The level's rowids written since its lists were, ascending, and the runs of those it still holds
    (a deleted row is only left out of the lists)."""
    sql = f"""SELECT c.rowid, d.rowid IS NOT NULL FROM keyword_changed c LEFT JOIN {TABLE[level]} d
              ON d.rowid = c.rowid WHERE c.level = ? ORDER BY c.rowid"""
    rows = np.array(conn.execute(sql, (level,)).fetchall(), dtype=np.int64).reshape(-1, 2)
    return rows[:, 0], _runs(rows[rows[:, 1] == 1, 0])


def _runs(rowids: np.ndarray) -> list[tuple[int, int]]:
    """Ascending rowids as runs of consecutive ones (first, last)."""
    if not len(rowids):
        return []
    breaks = np.flatnonzero(np.diff(rowids) != 1)
    firsts = np.concatenate([rowids[:1], rowids[breaks + 1]])
    lasts = np.concatenate([rowids[breaks], rowids[-1:]])
    return list(zip(firsts.tolist(), lasts.tolist(), strict=True))


def _totals(conn: sqlite3.Connection, level: Level) -> tuple[int, int]:
    """FTS5's row count and total tokens of the level (its averages record: varints, rows then each column's
    tokens), as its bm25 reads them."""
    blob = conn.execute(f"SELECT block FROM {level}_fts_data WHERE id = 1").fetchone()
    values = _varints(blob[0]) if blob else [0]
    return values[0], sum(values[1:])


def _varints(blob: bytes) -> list[int]:
    """SQLite's varints (big-endian, seven bits a byte, the ninth byte whole), one after another."""
    values, at = [], 0
    while at < len(blob):
        value = 0
        for size in range(9):
            byte = blob[at]
            at += 1
            if size == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        values.append(value)
    return values


def needs_writing(conn: sqlite3.Connection, level: Level) -> bool:
    """Whether the level's lists should be written (again): none yet on a level with a word that common,
    lists of another title weight or from another word count, or too many rows written since."""
    row = conn.execute("SELECT title_weight FROM keyword_lengths WHERE level = ?", (level,)).fetchone()
    rows = conn.execute(f"SELECT count(*) FROM {TABLE[level]}").fetchone()[0]
    if row is None or row[0] != TITLE_WEIGHT or _written_from(conn, level) != STORED_ROWS:
        return bool(rows >= STORED_ROWS)
    changed, runs = _changed(conn, level)
    return len(changed) > REWRITE_SHARE * rows or len(runs) > MAX_CHANGED_RUNS // 2


def _written_from(conn: sqlite3.Connection, level: Level) -> int:
    """The word count the level's lists were written from: a note in store_info, not a column of
    keyword_lengths, so an older version (which inserts that table's four columns) can still write lists into
    this file. Lists with no note were written from 2,000 rows; an older version's rewrite leaves the note as
    it was, which costs first sights their speed until the next rewrite, never a ranking."""
    row = conn.execute("SELECT value FROM store_info WHERE key = ?", (f"{level} lists from",)).fetchone()
    return int(row[0]) if row else 2_000


def write(conn: sqlite3.Connection, level: Level, *, progress: bool = False) -> None:
    """Write the level's stored postings from its FTS5 index, inside the caller's write transaction."""
    fts = f"{level}_fts"
    conn.execute("DELETE FROM keyword_postings WHERE level = ?", (level,))
    conn.execute("DELETE FROM keyword_lengths WHERE level = ?", (level,))
    conn.execute("DELETE FROM keyword_changed WHERE level = ?", (level,))
    largest = conn.execute(f"SELECT max(rowid) FROM {TABLE[level]}").fetchone()[0] or 0
    if largest >= 2**32 or not TITLE_WEIGHT.is_integer():  # stored as 32-bit rowids and whole counts
        return
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{fts}_terms USING fts5vocab(main, {fts}, row)")
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{fts}_hits USING fts5vocab(main, {fts}, instance)")
    common = [
        term
        for (term,) in conn.execute(
            f"SELECT term FROM temp.{fts}_terms WHERE doc >= ? AND term != ?", (STORED_ROWS, EVERY_ROW)
        )
    ]
    sql = f"""SELECT doc, sum(CASE col WHEN '{TITLE_COLUMN[level]}' THEN {int(TITLE_WEIGHT)} ELSE 1 END)
              FROM temp.{fts}_hits WHERE term = ? AND col != 'every_row' GROUP BY doc ORDER BY doc"""
    with bar(len(common), unit="word", desc=f"{level} keyword postings", enabled=progress) as shown:
        for term in common:
            pairs = np.array(conn.execute(sql, (term,)).fetchall(), dtype=np.int64).reshape(-1, 2)
            if len(pairs) and pairs[:, 1].max() < 2**16:  # else FTS5 is asked for the word
                conn.execute(
                    "INSERT INTO keyword_postings VALUES (?, ?, ?, ?)",
                    (
                        level,
                        term,
                        pairs[:, 0].astype(np.uint32).tobytes(),
                        pairs[:, 1].astype(np.uint16).tobytes(),
                    ),
                )
            shown.update(1)
    sizes = conn.execute(f"SELECT id, sz FROM {fts}_docsize ORDER BY id").fetchall()
    rowids = np.array([r[0] for r in sizes], dtype=np.uint32)
    lengths = np.array([sum(_varints(r[1])) for r in sizes], dtype=np.uint32)
    conn.execute(
        "INSERT INTO keyword_lengths (level, title_weight, rowids, lengths) VALUES (?, ?, ?, ?)",
        (level, TITLE_WEIGHT, rowids.tobytes(), lengths.tobytes()),
    )
    conn.execute("INSERT OR REPLACE INTO store_info VALUES (?, ?)", (f"{level} lists from", str(STORED_ROWS)))


class Tokenizer:
    """Words as FTS5 tokenizes them (the store's tokenizer, in a table of its own in memory): the stored lists
    are kept by token ("effects" is stored as "effect")."""

    LIMIT = 50_000  # words remembered, then forgotten all at once

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[str, tuple[str, ...]] = {}
        self._conn: sqlite3.Connection | None = None

    def tokens(self, word: str) -> tuple[str, ...]:
        known = self._known.get(word)
        if known is not None:
            return known
        with self._lock:
            if self._conn is None:
                self._conn = sqlite3.connect(":memory:", check_same_thread=False)
                self._conn.execute(f"CREATE VIRTUAL TABLE words USING fts5(word, tokenize='{TOKENIZER}')")
                self._conn.execute("CREATE VIRTUAL TABLE tokens USING fts5vocab(words, instance)")
            self._conn.execute("INSERT INTO words (rowid, word) VALUES (1, ?)", (word,))
            found = tuple(t for (t,) in self._conn.execute("SELECT term FROM tokens ORDER BY offset"))
            self._conn.execute("DELETE FROM words")
        if len(self._known) > self.LIMIT:
            self._known.clear()
        self._known[word] = found
        return found

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def tokenizer(process: ProcessState = PROCESS) -> Tokenizer:
    """The process's tokenizer."""
    return process.part("fts5 tokenizer", Tokenizer, Tokenizer.close)
