"""Document stores behind one contract; `open_store` picks the backend the Context configures."""

from __future__ import annotations

from agent_retrieval.context import Context
from agent_retrieval.stores.base import Store, StoreStats
from agent_retrieval.stores.sqlite import SQLiteStore

__all__ = ["SQLiteStore", "Store", "StoreStats", "open_store"]


def open_store(context: Context) -> Store:
    """The configured store (for now the embedded SQLite file at `db_path`), created if missing."""
    return SQLiteStore(context.db_path)
