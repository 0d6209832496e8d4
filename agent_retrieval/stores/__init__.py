"""Document stores behind one contract; `open_store` picks the backend the Context configures."""

from __future__ import annotations

from agent_retrieval.context import Context
from agent_retrieval.stores.base import Store, StoreStats
from agent_retrieval.stores.sqlite import SQLiteStore

__all__ = ["SQLiteStore", "Store", "StoreStats", "open_store"]


def open_store(context: Context) -> Store:
    """The configured store: Postgres by DSN, else Supabase by URL and key, else the embedded SQLite file.

    Nothing connects until the first call.
    """
    common = {"schema": context.db_schema, "tenant": context.tenant_id or None, "max_retries": context.max_retries}
    if context.store_backend == "postgres":
        from agent_retrieval.stores.postgres import PostgresStore

        return PostgresStore(context.postgres_dsn, timeout=context.request_timeout_seconds, **common)
    if context.store_backend == "supabase":
        from agent_retrieval.stores.supabase import SupabaseStore

        return SupabaseStore(context.supabase_url, context.supabase_key, timeout=context.request_timeout_seconds,
                             user_token=context.supabase_user_token or None, **common)
    return SQLiteStore(context.db_path)
