"""The embedded store's schema: its tables, FTS5 indexes and triggers, as migrations applied in order."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

TOKENIZER = "porter unicode61 remove_diacritics 2"
# Each level's table: SQL names a table only through this map, never a value as given.
TABLE = {"documents": "documents", "chunks": "chunks"}
# Each level's title column, first in its FTS index and weighted TITLE_WEIGHT.
TITLE_COLUMN = {"documents": "title", "chunks": "heading_path"}
NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

# Every row's FTS entry also holds this token, in a column of its own: "(rare) AND (common OR EVERY_ROW)"
# then matches the rows holding a rare term and scores them with every term (SQLiteStore.keyword_search).
EVERY_ROW = "zzagentretrievaleveryrow"

# A word of the title (a chunk's heading path) counts 3 times one of the text: tuned on SciFact train.
TITLE_WEIGHT = 3.0
BM25_K1, BM25_B = 1.2, 0.75  # FTS5's bm25 constants (fts5_aux.c)


def bm25_score(level: str) -> str:
    """FTS5's bm25 of a level as a score (higher is better): the title (heading path) weighted, then the text;
    the every-row column (EVERY_ROW) weighs nothing."""
    return f"-bm25({level}_fts, {TITLE_WEIGHT}, 1.0, 0.0)"


def fts_any(terms: Sequence[str]) -> str:
    """An FTS5 expression matching any of the terms, each quoted so nothing in them is syntax, in the text
    columns only: the every-row column holds EVERY_ROW, which a query naming it (or a word stemming to it)
    would otherwise match in every row."""
    return "- {every_row} : (" + " OR ".join('"' + term.replace('"', '""') + '"' for term in terms) + ")"


def _every_row_column(level: str, heading: str) -> list[str]:
    """Migration 2 for one level: rebuild its FTS index with the every-row column beside the text."""
    text = f"{heading}, content"
    values = ", ".join(f"new.{c}" for c in (heading, "content", "every_row"))
    old_values = ", ".join(f"old.{c}" for c in (heading, "content", "every_row"))
    return [
        f"ALTER TABLE {level} ADD COLUMN every_row TEXT GENERATED ALWAYS AS ('{EVERY_ROW}') VIRTUAL",
        f"DROP TRIGGER {level}_ai",
        f"DROP TRIGGER {level}_ad",
        f"DROP TRIGGER {level}_au",
        f"DROP TABLE {level}_fts",
        f"""CREATE VIRTUAL TABLE {level}_fts USING fts5({text}, every_row, content='{level}',
            content_rowid='rowid', tokenize='{TOKENIZER}')""",
        f"INSERT INTO {level}_fts ({level}_fts) VALUES ('rebuild')",
        f"""CREATE TRIGGER {level}_ai AFTER INSERT ON {level} BEGIN
            INSERT INTO {level}_fts (rowid, {text}, every_row) VALUES (new.rowid, {values}); END""",
        f"""CREATE TRIGGER {level}_ad AFTER DELETE ON {level} BEGIN
            INSERT INTO {level}_fts ({level}_fts, rowid, {text}, every_row)
            VALUES ('delete', old.rowid, {old_values}); END""",
        f"""CREATE TRIGGER {level}_au AFTER UPDATE OF {text} ON {level} BEGIN
            INSERT INTO {level}_fts ({level}_fts, rowid, {text}, every_row)
            VALUES ('delete', old.rowid, {old_values});
            INSERT INTO {level}_fts (rowid, {text}, every_row) VALUES (new.rowid, {values}); END""",
    ]


def _changed_log(level: str) -> list[str]:
    """Migration 4 for one level: triggers that log each row whose words a write changes."""
    # Not INSERT OR IGNORE: an upsert's own conflict clause overrides a trigger's, and the logged row then
    # fails the upsert.
    log = (
        f"INSERT INTO keyword_changed SELECT '{level}', {{0}}.rowid WHERE NOT EXISTS "
        f"(SELECT 1 FROM keyword_changed WHERE level = '{level}' AND rowid = {{0}}.rowid);"
    )
    return [
        f"CREATE TRIGGER {level}_changed_ai AFTER INSERT ON {level} BEGIN {log.format('new')} END",
        f"CREATE TRIGGER {level}_changed_ad AFTER DELETE ON {level} BEGIN {log.format('old')} END",
        f"CREATE TRIGGER {level}_changed_au AFTER UPDATE OF {TITLE_COLUMN[level]}, content ON {level} "
        f"BEGIN {log.format('old')} END",
    ]


# Applied in order, each once; PRAGMA user_version records how many have run.
MIGRATIONS: list[list[str]] = [
    [
        "CREATE TABLE store_info (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "INSERT INTO store_info VALUES ('generation', '0')",
        f"""CREATE TABLE documents (
            rowid INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            title TEXT NOT NULL,
            content TEXT NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{{}}' CHECK (json_valid(metadata)),
            source TEXT,
            content_hash TEXT NOT NULL,
            text_hash TEXT NOT NULL DEFAULT '',
            embedding BLOB,
            embedding_model TEXT,
            created_at TEXT NOT NULL DEFAULT ({NOW}),
            updated_at TEXT NOT NULL DEFAULT ({NOW}))""",
        """CREATE TABLE chunks (
            rowid INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            ordinal INTEGER NOT NULL,
            heading_path TEXT NOT NULL,
            content TEXT NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
            text_hash TEXT NOT NULL,
            embedding BLOB,
            embedding_model TEXT,
            UNIQUE (document_id, ordinal))""",
        "CREATE INDEX documents_text_hash ON documents (text_hash)",
        "CREATE INDEX chunks_text_hash ON chunks (text_hash)",
        f"""CREATE VIRTUAL TABLE documents_fts USING fts5(title, content, content='documents',
            content_rowid='rowid', tokenize='{TOKENIZER}')""",
        f"""CREATE VIRTUAL TABLE chunks_fts USING fts5(heading_path, content, content='chunks',
            content_rowid='rowid', tokenize='{TOKENIZER}')""",
        # External-content FTS tables are kept in step by triggers, inside the writing transaction.
        """CREATE TRIGGER documents_ai AFTER INSERT ON documents BEGIN
            INSERT INTO documents_fts (rowid, title, content)
            VALUES (new.rowid, new.title, new.content); END""",
        """CREATE TRIGGER documents_ad AFTER DELETE ON documents BEGIN
            INSERT INTO documents_fts (documents_fts, rowid, title, content)
            VALUES ('delete', old.rowid, old.title, old.content); END""",
        """CREATE TRIGGER documents_au AFTER UPDATE OF title, content ON documents BEGIN
            INSERT INTO documents_fts (documents_fts, rowid, title, content)
            VALUES ('delete', old.rowid, old.title, old.content);
            INSERT INTO documents_fts (rowid, title, content)
            VALUES (new.rowid, new.title, new.content); END""",
        """CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
            INSERT INTO chunks_fts (rowid, heading_path, content)
            VALUES (new.rowid, new.heading_path, new.content); END""",
        """CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
            INSERT INTO chunks_fts (chunks_fts, rowid, heading_path, content)
            VALUES ('delete', old.rowid, old.heading_path, old.content); END""",
        """CREATE TRIGGER chunks_au AFTER UPDATE OF heading_path, content ON chunks BEGIN
            INSERT INTO chunks_fts (chunks_fts, rowid, heading_path, content)
            VALUES ('delete', old.rowid, old.heading_path, old.content);
            INSERT INTO chunks_fts (rowid, heading_path, content)
            VALUES (new.rowid, new.heading_path, new.content); END""",
    ],
    _every_row_column("documents", "title") + _every_row_column("chunks", "heading_path"),
    # A random id per file: with its path it names the file for the search caches the process shares
    # (sqlite.py), so a file made again at the same path never reads the old one's cache.
    ["INSERT OR IGNORE INTO store_info VALUES ('store_id', lower(hex(randomblob(16))))"],
    # Common words' postings kept in the file (stored_postings.py), and the rows written since they were.
    [
        """CREATE TABLE keyword_postings (level TEXT NOT NULL, term TEXT NOT NULL, rowids BLOB NOT NULL,
            counts BLOB NOT NULL, PRIMARY KEY (level, term))""",
        """CREATE TABLE keyword_lengths (level TEXT PRIMARY KEY, title_weight REAL NOT NULL,
            rowids BLOB NOT NULL, lengths BLOB NOT NULL)""",
        """CREATE TABLE keyword_changed (level TEXT NOT NULL, rowid INTEGER NOT NULL,
            PRIMARY KEY (level, rowid)) WITHOUT ROWID""",
        *_changed_log("documents"),
        *_changed_log("chunks"),
    ],
    # A filter's rows listed from narrow indexes instead of the tables' rows (text and vectors): at 100K
    # chunks a filtered vector search took 110 ms to list them, whatever the filter kept; now 6.
    [
        "CREATE INDEX documents_metadata ON documents (metadata)",
        "CREATE INDEX chunks_metadata ON chunks (metadata, document_id)",
    ],
]

SCHEMA_VERSION = len(MIGRATIONS)


def schema_version(conn: sqlite3.Connection) -> int:
    """How many migrations the file has had."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection) -> None:
    """Apply the migrations the file has not had, in order, each once, inside the write transaction the caller
    holds (BEGIN IMMEDIATE): another process opening the same file waits, then finds nothing left to do."""
    version = schema_version(conn)  # read again inside the transaction: another process may have won
    for number, statements in enumerate(MIGRATIONS[version:], start=version + 1):
        for statement in statements:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
