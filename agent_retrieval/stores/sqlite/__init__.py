"""The embedded default store: one SQLite file, FTS5 with bm25 for keywords, exact numpy search for vectors.

store (SQLiteStore: writes, reads, vector search), keywords (BM25 in SQL), stored_postings (common words'
postings kept in the file), cache (what searches keep of a file between writes, shared by its stores),
connection (connections, transactions, errors in words) and schema (the tables and their migrations).
"""

from agent_retrieval.stores.sqlite.cache import release_file_caches
from agent_retrieval.stores.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore", "release_file_caches"]
