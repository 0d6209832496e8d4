"""Document stores behind one contract; `open_store` picks the backend the store settings configure."""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from pathlib import Path

from agent_retrieval.context import StoreSettings
from agent_retrieval.core.process import PROCESS, ProcessState
from agent_retrieval.errors import ConfigError
from agent_retrieval.stores.base import Store, StoreStats
from agent_retrieval.stores.sqlite import SQLiteStore

__all__ = ["SQLiteStore", "Store", "StoreStats", "open_store", "sqlite_path"]


def open_store(settings: StoreSettings, *, process: ProcessState = PROCESS) -> Store:
    """The configured store: Postgres by DSN, else Supabase by URL and key, else the embedded SQLite file.

    Nothing connects until the first call; its pools and caches are `process`'s parts.
    """
    tenant = settings.tenant_id or None
    if settings.backend == "postgres":
        from agent_retrieval.stores.postgres import PostgresStore

        return PostgresStore(
            settings.backend_dsn,
            schema=settings.db_schema,
            tenant=tenant,
            max_retries=settings.max_retries,
            timeout=settings.request_timeout_seconds,
            cache_mb=settings.store_cache_mb,
            process=process,
        )
    if settings.backend == "supabase":
        from agent_retrieval.stores.supabase import SupabaseStore

        return SupabaseStore(
            settings.supabase_url,
            settings.supabase_key.get_secret_value(),
            schema=settings.db_schema,
            tenant=tenant,
            max_retries=settings.max_retries,
            timeout=settings.request_timeout_seconds,
            user_token=settings.supabase_user_token.get_secret_value() or None,
            cache_mb=settings.store_cache_mb,
            process=process,
        )
    return SQLiteStore(
        sqlite_path(settings),
        tenant=settings.tenant_id,
        cache_mb=settings.store_cache_mb,
        index_rows=settings.vector_index_rows,
        process=process,
    )


def missing_store(settings: StoreSettings) -> str | None:
    """What to do when the embedded store the settings name was never made, or None (it exists, or the
    store is not the embedded one): reading it would make an empty file and find nothing, in silence."""
    if settings.backend != "sqlite" or (path := sqlite_path(settings)).is_file():
        return None
    return (
        f"no store at {path}: ingest into it first (`agent-retrieval ingest PATH --db {path}`), or name "
        "an existing store with --db or $AGENT_RETRIEVAL_DB"
    )


def sqlite_path(settings: StoreSettings) -> Path:
    """The embedded store's file: `db_path`, or for a tenant its own file in a folder beside it.

    A tenant's searches then open only that tenant's file: no query, filter or id can reach another
    tenant's rows. (Public documents shared by every tenant exist on Postgres and Supabase only.)
    """
    path = Path(settings.db_path)
    if not settings.tenant_id:
        return path
    # Percent-encoded, dots too: any tenant id names one file inside the folder, never a path out of it.
    name = urllib.parse.quote(settings.tenant_id, safe="").replace(".", "%2E")
    if len(name) > 200:
        raise ConfigError(
            f"tenant_id is too long for a file name on the embedded store ({len(name)} characters "
            "once encoded; at most 200): use a shorter id, or Postgres"
        )
    path = path.with_name(f"{path.stem}.tenants") / f"{name}{path.suffix or '.db'}"
    # Tenant ids are exact ("ACME" is not "acme"), but many file systems fold letter case: two such tenants
    # would share one file, so the second is refused wherever it opens.
    with contextlib.suppress(FileNotFoundError), os.scandir(path.parent) as entries:
        for entry in entries:
            if entry.name != path.name and entry.name.casefold() == path.name.casefold():
                raise ConfigError(
                    f"tenant_id {settings.tenant_id!r} differs only in letter case from the tenant stored "
                    f"in {entry.name}, and many file systems cannot tell the two files apart: use tenant "
                    "ids that differ in more than case, or Postgres"
                )
    return path
