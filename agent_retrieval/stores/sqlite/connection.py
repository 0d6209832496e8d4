"""One SQLite file's connections: one per thread and process (a forked child opens its own: SQLite's locks
are per process), in WAL mode so readers work beside one writer, read-only where the filesystem is;
transactions that count every write; and SQLite's errors said in words, never the SQL."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from agent_retrieval.core.process import PROCESS, ProcessState
from agent_retrieval.errors import StoreError
from agent_retrieval.stores.base import Failure
from agent_retrieval.stores.sqlite.schema import SCHEMA_VERSION, migrate, schema_version


class Connections:
    """The connections to one store file, opened as threads ask for them and closed together."""

    def __init__(self, path: Path, timeout: float, process: ProcessState = PROCESS):
        self.path = path
        self.timeout = timeout
        self._process = process
        self._local = threading.local()
        self._connections: list[tuple[int, sqlite3.Connection]] = []  # each with the process that opened it
        self._guard_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = False

    def connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        # A forked child must not use its parent's connection: SQLite's locks are per process.
        if conn is None or self._local.pid != os.getpid():
            if self._closed:
                raise StoreError("the store is closed")
            with self.errors():
                conn = self._open()
            self._local.conn, self._local.pid = conn, os.getpid()
            with self._guard_lock:
                self._connections.append((os.getpid(), conn))
        return conn

    def _open(self) -> sqlite3.Connection:
        """A new connection in WAL mode; on a read-only filesystem, a read-only one."""
        try:
            return _set_up(
                sqlite3.connect(
                    self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
                ),
                self.timeout,
                "PRAGMA journal_mode=WAL",
                "PRAGMA synchronous=NORMAL",
                "PRAGMA foreign_keys=ON",
            )
        except sqlite3.OperationalError:
            if not _on_read_only_filesystem(self.path):
                raise
        # There SQLite cannot create the WAL's shared-memory file, so the plain open fails even for reading.
        if not self.path.exists():
            raise StoreError(
                f"cannot create the store {self.path}: it is on a read-only filesystem; point "
                "AGENT_RETRIEVAL_DB (or --db) at a writable place"
            ) from None
        wal = Path(f"{self.path}-wal")
        # immutable=1 reads without the shared-memory file, but would ignore commits still in the WAL: use it
        # only when the WAL is empty. (A store that something keeps writing through another, writable mount
        # must not be read through a read-only one: SQLite could not see those writes coming.)
        immutable = not wal.exists() or wal.stat().st_size == 0
        uri = f"{self.path.resolve().as_uri()}?mode=ro" + ("&immutable=1" if immutable else "")
        try:
            return _set_up(
                sqlite3.connect(
                    uri, uri=True, timeout=self.timeout, isolation_level=None, check_same_thread=False
                ),
                self.timeout,
                "PRAGMA query_only=ON",
                "SELECT count(*) FROM sqlite_schema",
            )
        except sqlite3.OperationalError:
            raise StoreError(
                f"cannot open the store {self.path}: it is on a read-only filesystem and its last "
                f"writes are still in {wal.name} without their index file; open it once where it "
                "is writable (any agent-retrieval command) so SQLite folds them into the store"
            ) from None

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Turn SQLite errors into StoreErrors that say what happened and what to do, never the SQL."""
        try:
            yield
        except sqlite3.Error as error:
            raise StoreError(self.explain(error)) from error

    def explain(self, error: sqlite3.Error) -> str:
        """What happened to which file, and what to do about it."""
        code, text = _code(error), str(error).lower()
        if failure(code, text) is Failure.CONFLICT:
            return (
                f"the store {self.path} is locked by another writer (waited {self.timeout:g} s): another "
                "process is writing to it, such as an ingest or reembed. Wait for it to finish, then run "
                "this again"
            )
        if code == sqlite3.SQLITE_READONLY or "readonly" in text:
            return (
                f"cannot write the store {self.path}: it is read-only (the file's permissions or a read-only "
                "filesystem); searches still work. To write, make the file and its folder writable, or copy "
                "the store to a writable place and point AGENT_RETRIEVAL_DB (or --db) at it"
            )
        if code == sqlite3.SQLITE_FULL or "full" in text:
            return (
                f"cannot write the store {self.path}: the disk is full. The unfinished write was undone; "
                "free some space, then run this again"
            )
        if code == sqlite3.SQLITE_IOERR or "disk i/o" in text:
            return (
                f"cannot read or write the store {self.path}: the disk failed "
                f"({getattr(error, 'sqlite_errorname', 'I/O error')}). Check the disk, then run this again"
            )
        if (
            code in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT)
            or "not a database" in text
            or "malformed" in text
        ):
            return f"{self.path} is not a valid agent-retrieval store (or is damaged)"
        if code == sqlite3.SQLITE_CANTOPEN:
            return (
                f"cannot open the store {self.path}: check that its folder exists and may be read and written"
            )
        return f"the store {self.path} failed: {type(error).__name__}"

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: one writer per process at a time; BEGIN IMMEDIATE waits out others."""
        conn = self.connection()
        with self._write_lock, self.errors():
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute(
                    "UPDATE store_info SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'"
                )
                conn.execute("COMMIT")
            except BaseException:
                _end(conn, "ROLLBACK")
                raise

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every statement in it sees one snapshot, even while a writer commits."""
        conn = self.connection()
        with self.errors():
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                _end(conn, "COMMIT")

    def migrate(self) -> None:
        """Bring the file's schema up to date (sqlite_schema.py) in one transaction. Not `_write()`: that
        counts the write in store_info, a table the first migration creates."""
        conn = self.connection()
        with self._write_lock, self.errors():
            if schema_version(conn) >= SCHEMA_VERSION:
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                migrate(conn)
                conn.execute("COMMIT")
            except BaseException:
                _end(conn, "ROLLBACK")
                raise

    def close(self) -> None:
        self._closed = True
        with self._guard_lock:
            for pid, conn in self._connections:
                if pid == os.getpid():
                    conn.close()
                else:  # a parent's, in a forked child: closing it here could act on the parent's locks
                    self._process.keep(conn)
            self._connections.clear()


def failure(code: int, text: str) -> Failure | None:
    """A SQLite result code in the stores' vocabulary. Another writer's lock, held past the busy timeout, is a
    conflict (transient: once it commits the call succeeds); a local file is never unreachable."""
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in text:
        return Failure.CONFLICT
    return None


def _code(error: sqlite3.Error) -> int:
    """The error's primary SQLite result code (0 when it carries none)."""
    return getattr(error, "sqlite_errorcode", 0) & 0xFF


def _set_up(conn: sqlite3.Connection, seconds: float, *statements: str) -> sqlite3.Connection:
    """Run the statements that prepare a new connection, each again while SQLite says the file is locked,
    for up to `seconds`: turning a new file to WAL needs it alone, and SQLite answers "locked" at once there
    instead of waiting out the busy timeout (two runs opening one tenant's new store together failed). If
    one fails the connection is closed, so no file stays open."""
    deadline = time.monotonic() + seconds
    try:
        for statement in statements:
            while not _ran(conn, statement, deadline):
                time.sleep(0.01)
    except BaseException:
        conn.close()
        raise
    return conn


def _ran(conn: sqlite3.Connection, statement: str, deadline: float) -> bool:
    """Whether the statement ran: False while another connection holds the file and `deadline` is ahead."""
    try:
        conn.execute(statement)
        return True
    except sqlite3.OperationalError as error:
        if failure(_code(error), str(error).lower()) is Failure.CONFLICT and time.monotonic() < deadline:
            return False
        raise


def _end(conn: sqlite3.Connection, statement: str) -> None:
    """End a transaction after its work, unless SQLite already ended it: on a full disk or an I/O error it
    rolls back by itself, and a second ROLLBACK would fail and hide that error behind its own."""
    if conn.in_transaction:
        conn.execute(statement)


def _on_read_only_filesystem(path: Path) -> bool:
    folder = path.resolve().parent
    while not folder.exists():
        folder = folder.parent
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False
