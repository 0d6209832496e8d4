"""The Postgres store by DSN: psycopg 3 with a connection pool and the pgvector adapter, calling the SQL
functions of stores/sql/ (the same ones Supabase serves by RPC)."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from agent_retrieval.context import STORE_CACHE_MB
from agent_retrieval.core.process import PROCESS, ProcessState
from agent_retrieval.core.redaction import check_secret, protect
from agent_retrieval.errors import ConfigError, InvalidRequest
from agent_retrieval.stores.base import Failure, KeywordSearch
from agent_retrieval.stores.rpc import (
    DEFAULT_SCHEMA,
    CallError,
    Json,
    RPCStore,
    render_sql,
    returns_rows,
    sqlstate_failure,
)

if TYPE_CHECKING:
    from agent_retrieval.models import Chunk, Document, Level


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool  # noqa: F401 - checked here so the message below covers both
    except ImportError:
        raise ConfigError(
            "the Postgres store needs the 'postgres' extra: pip install 'agent-retrieval[postgres]'"
        ) from None
    return psycopg


# Functions whose answers are mostly bytes: sent in binary, half the size of their hex text and not decoded.
_BINARY = ("keyword_postings_documents", "keyword_postings_chunks")

# How libpq reports a login the server refused (it gives no SQLSTATE for a failed connection).
_LOGIN_REFUSED = re.compile(r"FATAL:\s*(.*(?:authentication failed|no pg_hba\.conf entry).*)")


@dataclass
class _SharedPool:
    """One connection pool for every PostgresStore of the process with the same DSN, timeout and pool size.
    A LangGraph server makes a store per run: with a pool each, 40 concurrent runs took all 100 of the
    server's connections. Opened on first use; closed when the last store using it closes."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    pool: Any = None
    stores: int = 0  # stores using it, not closed
    lent: int = 0  # connections lent to calls now: tells a busy pool from one that lends nothing


def _close_pool(shared: _SharedPool) -> None:
    with shared.lock:
        pool, shared.pool = shared.pool, None
    if pool is not None:
        pool.close()


class PostgresStore(RPCStore):
    """Documents and chunks in Postgres + pgvector, reached by DSN.

    Run `init(dimension)` (or `agent-retrieval db init`) once to create the schema. Connections come
    from a pool opened on first use and shared by the process's stores of the same DSN, timeout and
    `pool_size` (at most `pool_size` connections for all of them); async calls run the same pool in
    worker threads, so they never block the event loop and work from any loop.
    """

    backend = "postgres"
    unreachable_advice = "Check that the server is running and accepts connections at that address"

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        tenant: str | None = None,
        timeout: float = 30.0,
        pool_size: int = 8,
        max_retries: int = 3,
        cache_mb: int = STORE_CACHE_MB,
        process: ProcessState = PROCESS,
    ):
        super().__init__(
            schema=schema,
            tenant=tenant,
            max_retries=max_retries,
            timeout=timeout,
            cache_mb=cache_mb,
            process=process,
        )
        psycopg = _psycopg()
        dsn = dsn.strip()  # a DSN read from a file ends in a line break
        try:
            self._conninfo = psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError:
            raise ConfigError(
                "the Postgres DSN is not valid: expected e.g. postgresql://user:password@host:5432/dbname"
            ) from None
        if password := self._conninfo.get("password"):
            checked = check_secret(
                "the password in the Postgres DSN (AGENT_RETRIEVAL_DSN)", password, header=False
            )
            if checked != password:
                dsn = psycopg.conninfo.make_conninfo(dsn, password=checked)
                self._conninfo["password"] = checked
        self.dsn = dsn
        protect(self._conninfo.get("password", ""))  # never in a log or an error, psycopg's included
        self.pool_size = pool_size
        self._pool_key = (dsn, self.timeout, pool_size)
        self._shared_in: _SharedPool | None = None  # the process's pool this store last used, see _shared
        self._using = False  # whether this store counts among its shared pool's users
        self._use_pool()
        self._loading: Any = None  # the connection of an initial load, while one runs (initial_load)

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r}, schema={self.schema!r})"

    @property
    def location(self) -> str:
        info = self._conninfo
        host = info.get("host") or "localhost"
        port = f":{info['port']}" if info.get("port") else ""
        return f"postgresql://{info.get('user') or ''}@{host}{port}/{info.get('dbname') or ''}#{self.schema}"

    # --- connections -------------------------------------------------------------------------------
    @property
    def _shared(self) -> _SharedPool:
        """This process's pool for the store's DSN (core.process): in a forked child, the child's
        own (two processes on one connection garble each other's replies), even for a store the parent
        made."""
        shared = self.process.part(("postgres pool", self._pool_key), _SharedPool, _close_pool)
        if self._shared_in is not shared:  # first use, or the first in a forked child
            self._shared_in, self._using = shared, False  # not yet among this process's users of it
        return shared

    def _connect_options(self) -> dict[str, Any]:
        # The statement timeout bounds every call on the server side; the pool bounds waiting for a slot.
        # The application name (unless the DSN gives one) tells an operator our connections apart.
        return {
            "options": f"-c statement_timeout={int(self.timeout * 1000)}",
            "connect_timeout": 10,
            "application_name": self._conninfo.get("application_name") or "agent-retrieval",
        }

    def _use_pool(self) -> None:
        """Count this store among its pool's users (again, if it is used after `close`)."""
        with self._shared.lock:
            if not self._using:
                self._using = True
                self._shared.stores += 1

    def _open_pool(self) -> Any:
        self._use_pool()
        shared = self._shared
        with shared.lock:
            if shared.pool is None:
                from psycopg.rows import dict_row
                from psycopg_pool import ConnectionPool

                # One direct connection first: an unreachable server fails now, with its own reason,
                # instead of after the pool has waited out its timeout.
                _psycopg().connect(self.dsn, **self._connect_options()).close()
                shared.pool = ConnectionPool(
                    self.dsn,
                    min_size=1,
                    max_size=self.pool_size,
                    open=True,
                    kwargs={**self._connect_options(), "row_factory": dict_row},
                    configure=_register_vector,
                    check=self._check_connection,
                    timeout=self.timeout,
                    name="agent-retrieval",
                )
            return shared.pool

    def _check_connection(self, conn: Any) -> None:
        """The pool's test of an idle connection before lending it: after a server restart or a dropped
        network every idle connection is dead, and lending one would fail the call."""
        from psycopg_pool import ConnectionPool

        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            # Its idle neighbours died with it: test them all now, in one pass, instead of one per lending
            # with the pool's growing pause (1 s, 2 s, 4 s ...) between them.
            if (pool := self._shared.pool) is not None:
                pool.check()
            raise

    def _discard_pool(self, pool: Any) -> None:
        """Close `pool` and let the next call open a new one (unless another call already has)."""
        with self._shared.lock:
            if self._shared.pool is pool:
                self._shared.pool = None
        pool.close(timeout=0)  # calls still holding its connections finish; those waiting go to the new pool

    def close(self) -> None:
        """Stop using the shared pool, and close it if no other store of the process uses it."""
        shared, pool = self._shared, None
        with shared.lock:
            if self._using:
                self._using = False
                shared.stores -= 1
                if shared.stores == 0:
                    pool, shared.pool = shared.pool, None
        if pool is not None:
            pool.close()

    # --- calls ---------------------------------------------------------------------------------------
    def _send(self, function: str, params: dict[str, Any]) -> Any:
        psycopg = _psycopg()
        from psycopg import sql
        from psycopg.types.json import Jsonb
        from psycopg_pool import PoolClosed, PoolTimeout

        arguments = sql.SQL(", ").join(
            sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in params
        )
        target = sql.SQL("{}.{}({})").format(sql.Identifier(self.schema), sql.Identifier(function), arguments)
        query = sql.SQL("select * from {}" if returns_rows(function) else "select {} as value").format(target)
        values = {name: Jsonb(v.value) if isinstance(v, Json) else v for name, v in params.items()}
        pool = None
        try:
            if self._loading is not None:  # an initial load: every call joins its one transaction
                rows = self._loading.execute(query, values).fetchall()
                return rows if returns_rows(function) else rows[0]["value"]
            pool = self._open_pool()
            with pool.connection() as conn:
                self._count_lent(1)
                try:
                    rows = conn.execute(query, values, binary=function in _BINARY).fetchall()
                finally:
                    self._count_lent(-1)
        except PoolTimeout:
            raise self._pool_timeout(psycopg, pool) from None
        except PoolClosed:
            raise CallError(
                "connection",
                "the connection pool was replaced while waiting for it",
                failure=Failure.UNREACHABLE,
            ) from None
        except psycopg.Error as error:
            failed = _call_error(psycopg, error)
            if self._loading is not None:  # the load's transaction is lost: asking again cannot help
                raise replace(failed, failure=None) from None
            raise failed from None
        return rows if returns_rows(function) else rows[0]["value"]

    def _count_lent(self, change: int) -> None:
        with self._shared.lock:
            self._shared.lent += change

    def _pool_timeout(self, psycopg: Any, pool: Any) -> CallError:
        """Why the pool lent no connection within the timeout, and whether asking again can help."""
        try:
            # One direct attempt: the pool keeps connection errors in its log; the caller needs the reason.
            psycopg.connect(self.dsn, connect_timeout=3).close()
        except psycopg.Error as error:
            # Not retried: the pool has been reconnecting all along, so waiting again would only multiply
            # the time the caller waits.
            reason = _call_error(psycopg, error).message
            return CallError(
                "pool",
                f"no connection within {self.timeout:g} s ({reason})",
                failure=Failure.UNREACHABLE,
                waited=True,
            )
        if self._shared.lent >= self.pool_size:
            return CallError(
                "busy",
                f"all {self.pool_size} connections of the pool stayed busy for "
                f"{self.timeout:g} s: run fewer calls at once, or give the store a larger "
                "pool_size",
            )
        # The server answers, yet the pool lent nothing: after an outage it reconnects on a doubling backoff
        # (1, 2, 4 ... s) and may not try again for a while. A new pool connects at once.
        self._discard_pool(pool)
        return CallError(
            "connection",
            "the connection pool was still reconnecting after an outage",
            failure=Failure.UNREACHABLE,
        )

    # --- keyword search, scored here (RPCStore) ---------------------------------------------------
    def _scores_here(self, search: KeywordSearch) -> bool:
        return self._loading is None  # a load's calls join its transaction

    def _postings_scope(self, level: Level, stamp: str) -> Hashable:
        # kept per store, level and tenant: another tenant's search finds another stamp and starts over
        return (self.dsn, self.schema, self.tenant, level)

    # --- schema --------------------------------------------------------------------------------------
    def init(self, dimension: int, *, build_depth: int | None = None) -> list[str]:
        """Create (or bring up to date) the schema, tables, indexes and functions for this dimension, the
        HNSW indexes `build_depth` deep (None keeps their depth); what it changed beyond that, in words."""
        psycopg = _psycopg()
        script = render_sql(self.schema, dimension, build_depth)
        changes: list[str] = []

        def note(notice: Any) -> None:
            if notice.sqlstate == "AR003":  # the SQL's own notes, not Postgres's "already exists, skipping"
                changes.append(notice.message_primary or "")

        try:
            # No statement timeout here: building an index over rows already stored may take minutes.
            with psycopg.connect(self.dsn, connect_timeout=10, options="-c statement_timeout=0") as conn:
                conn.add_notice_handler(note)
                conn.execute(script)
        except psycopg.Error as error:
            raise self._readable(_call_error(psycopg, error)) from None
        if (pool := self._shared.pool) is not None:  # its connections knew the types of before the schema
            self._discard_pool(pool)
        return changes

    @contextlib.contextmanager
    def initial_load(self) -> Iterator[None]:
        """Fill an empty store faster: every write in the block (`ingest`, `upsert`) joins one transaction
        and copies its rows in binary, the search indexes (HNSW, GIN) are dropped first and built once at
        the end, and the keyword postings are made once at the end from every row, word by word in the
        table (the triggers that keep them row by row are off meanwhile). Building HNSW is quickest when
        the server's maintenance_work_mem holds the graph (about 1 KB a vector of 384 dimensions):
        pgvector then builds it in memory, with parallel workers.

        For a first load only: refused unless the store holds no documents, and the tables are locked
        against other writers (readers wait) until the load commits. All or nothing: an error or Ctrl-C in
        the block rolls everything back, the indexes included, and the store is empty again. Calls from
        other threads are not part of it: run the load from one thread.
        """
        psycopg = _psycopg()
        from psycopg import sql
        from psycopg.rows import dict_row

        schema = sql.Identifier(self.schema)
        try:
            conn = psycopg.connect(
                self.dsn, connect_timeout=10, options="-c statement_timeout=0", row_factory=dict_row
            )
        except psycopg.Error as error:
            raise self._readable(_call_error(psycopg, error)) from None
        try:
            _register_vector(conn)
            with conn.transaction():
                conn.execute(
                    sql.SQL("lock table {}.documents, {}.chunks in exclusive mode").format(schema, schema)
                )
                if conn.execute(
                    sql.SQL("select exists (select from {}.documents)").format(schema)
                ).fetchone()["exists"]:
                    raise InvalidRequest(
                        f"initial_load: the store {self.location} already holds documents; an initial load "
                        "is for an empty store (use ingest to add to one)"
                    )
                indexes = _search_indexes(conn, self.schema)
                for drop, _ in indexes:
                    conn.execute(drop)
                _postings_triggers(conn, self.schema, "disable")
                self._loading = conn
                try:
                    yield
                finally:
                    self._loading = None
                for level in ("documents", "chunks"):  # set-wise, from every row at once
                    conn.execute(
                        sql.SQL("select {}()").format(
                            sql.Identifier(self.schema, f"rebuild_postings_{level}")
                        )
                    )
                _postings_triggers(conn, self.schema, "enable")
                for _, make in indexes:
                    conn.execute(make)
                # Statistics of the new rows now: without them the first searches plan for empty tables.
                conn.execute(
                    sql.SQL("analyze {}").format(
                        sql.SQL(", ").join(sql.Identifier(self.schema, table) for table in _LOADED_TABLES)
                    )
                )
        except psycopg.Error as error:
            raise self._readable(_call_error(psycopg, error)) from None
        finally:
            conn.close()

    def _upsert(self, documents: Sequence[Document], chunks: Sequence[Chunk], model_id: str) -> None:
        if self._loading is None:
            super()._upsert(documents, chunks, model_id)
            return
        psycopg = _psycopg()
        try:
            _copy_rows(self._loading, self.schema, self.tenant, documents, chunks, model_id)
        except psycopg.Error as error:  # the load's transaction is lost: asking again cannot help
            raise replace(_call_error(psycopg, error), failure=None) from None


# What a load writes (rows, postings, term and corpus counts): analysed at its end.
_LOADED_TABLES = (
    "documents",
    "chunks",
    "documents_postings",
    "chunks_postings",
    "documents_term_stats",
    "chunks_term_stats",
    "corpus_stats",
)


def _search_indexes(conn: Any, schema: str) -> list[tuple[Any, Any]]:
    """The schema's search indexes, each as (statement that drops it, statement that makes it again): HNSW
    and GIN (vectors, metadata). They are the costly ones to keep up to date row by row, and no write of a
    load reads them; the lookup indexes stay, as the load itself reads through them (ids, stored hashes)."""
    from psycopg import sql

    rows = conn.execute(
        "select i.relname as index_name, pg_catalog.pg_get_indexdef(i.oid) as indexdef "
        "from pg_catalog.pg_index x "
        "join pg_catalog.pg_class i on i.oid = x.indexrelid "
        "join pg_catalog.pg_class t on t.oid = x.indrelid "
        "join pg_catalog.pg_am a on a.oid = i.relam "
        "where t.relnamespace = %s::regnamespace "
        "  and a.amname in ('hnsw', 'gin') "
        "order by i.relname",
        (schema,),
    ).fetchall()
    return [
        (sql.SQL("drop index {}").format(sql.Identifier(schema, row["index_name"])), sql.SQL(row["indexdef"]))
        for row in rows
    ]


def _postings_triggers(conn: Any, schema: str, action: str) -> None:
    """Turn the triggers that keep the keyword postings row by row off or on again ("disable", "enable")."""
    from psycopg import sql

    for level in ("documents", "chunks"):
        for event in ("insert", "update", "delete"):
            conn.execute(
                sql.SQL("alter table {} " + action + " trigger {}").format(
                    sql.Identifier(schema, level), sql.Identifier(f"{level}_index_{event}")
                )
            )


# The columns upsert_documents writes and their types, in the order an initial load copies them.
_COPIED = {
    "documents": {
        "tenant_id": "text", "id": "text", "title": "text", "content": "text", "metadata": "jsonb",
        "source": "text", "is_public": "bool", "content_hash": "text", "text_hash": "text",
        "embedding": "vector", "embedding_model": "text",
    },
    "chunks": {
        "tenant_id": "text", "document_id": "text", "id": "text", "ordinal": "int4", "heading_path": "text",
        "content": "text", "metadata": "jsonb", "is_public": "bool", "text_hash": "text",
        "embedding": "vector", "embedding_model": "text",
    },
}  # fmt: skip


def _copy_rows(
    conn: Any,
    schema: str,
    tenant: str | None,
    documents: Sequence[Document],
    chunks: Sequence[Chunk],
    model_id: str,
) -> None:
    """The rows upsert_documents writes, written by binary COPY inside an initial load: no JSON between the
    vectors and their columns (encoding and parsing it was most of a load's time for its rows). The same
    scope and model checks run first, and documents written earlier in the load are replaced."""
    from psycopg import sql
    from psycopg.types.json import Jsonb

    def function(name: str) -> Any:
        return sql.Identifier(schema, name)

    scope = conn.execute(sql.SQL("select {}(%s) as scope").format(function("writing_tenant")), (tenant,))
    scope = scope.fetchone()["scope"]
    rows: list[Document | Chunk] = [*documents, *chunks]
    dimensions = sorted({len(r.embedding) for r in rows if r.embedding is not None})
    conn.execute(
        sql.SQL("select {}(%s, %s)").format(function("claim_embedding_model")), (model_id, dimensions)
    )
    conn.execute(
        sql.SQL("delete from {} where tenant_id = %s and id = any (%s)").format(function("documents")),
        (scope, [d.id for d in documents]),
    )

    def model(row: Document | Chunk) -> str | None:
        return None if row.embedding is None else model_id

    public = {d.id: d.public for d in documents}  # a chunk is as public as its document
    rows_of: dict[str, list[tuple[Any, ...]]] = {
        "documents": [
            (scope, d.id, d.title, d.content, Jsonb(d.metadata), d.source, d.public, d.content_hash,
             d.text_hash, d.embedding, model(d))
            for d in documents
        ],
        "chunks": [
            (scope, c.document_id, c.id, c.ordinal, c.heading_path, c.content, Jsonb(c.metadata),
             public[c.document_id], c.text_hash, c.embedding, model(c))
            for c in chunks
        ],
    }  # fmt: skip
    for table, columns in _COPIED.items():
        statement = sql.SQL("copy {} ({}) from stdin (format binary)").format(
            function(table), sql.SQL(", ").join(map(sql.Identifier, columns))
        )
        with conn.cursor().copy(statement) as copy:
            copy.set_types(list(columns.values()))
            for row in rows_of[table]:
                copy.write_row(row)


def _register_vector(conn: Any) -> None:
    """Vectors cross in pgvector's binary form (its psycopg adapter), once the extension exists."""
    from pgvector.psycopg import register_vector

    try:
        register_vector(conn)
    except Exception:
        conn.rollback()
    else:
        conn.commit()


def _call_error(psycopg: Any, error: Any) -> CallError:
    if refused := _LOGIN_REFUSED.search(str(error)):
        # A wrong password is not an outage: asking again fails the same way, and the advice differs.
        reason = refused.group(1).strip()
        return CallError(
            "28000",
            f"the server refused the login ({reason}): check the user and password in "
            "the DSN (AGENT_RETRIEVAL_DSN)",
        )
    diag = error.diag
    code = error.sqlstate or ("connection" if isinstance(error, psycopg.OperationalError) else "unknown")
    failure = Failure.UNREACHABLE if code == "connection" else sqlstate_failure(code)
    message = (diag.message_primary or str(error).strip().splitlines()[0]) if diag else str(error)
    return CallError(code, message, diag.message_detail, diag.message_hint, failure)
