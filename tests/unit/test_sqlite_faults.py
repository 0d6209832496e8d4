"""The embedded store when its file is locked by another writer, read-only, or on a full disk.

Every fault is real: the lock is held by another process's `BEGIN IMMEDIATE`; read-only means a
read-only bind mount (a read-only filesystem, which binds root too) or a 0444 file opened by a process
without CAP_DAC_OVERRIDE (root ignores file modes, so plain chmod proves nothing when tests run as
root); a full disk is a small tmpfs filled with a ballast file, or SQLite's own page limit. Each ends
in a clear error, a consistent store, and a re-run that finishes with nothing lost or duplicated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent_retrieval.context import Context
from agent_retrieval.errors import StoreError
from agent_retrieval.ingest import IngestReport, chunk_document, chunk_text, document_text, ingest
from agent_retrieval.ingest.loaders import load_documents
from agent_retrieval.models import Chunk
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.stores import SQLiteStore
from agent_retrieval.stores.sqlite import stored_postings
from tests.conftest import WordHashEmbeddings
from tests.storecheck import (
    Expected,
    check_sqlite_store,
    embedded_texts,
    expected,
    sqlite_digest,
    write_corpus,
)

CONTEXT = Context(chunk_size=300, chunk_overlap=30)
REPO = Path(__file__).resolve().parents[2]


class RecordingEmbeddings(WordHashEmbeddings):
    """The word-hash test embeddings, keeping every text sent to them."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts += texts
        return super().embed_documents(texts)


def run_ingest(
    store: SQLiteStore,
    folder: Path,
    embeddings: WordHashEmbeddings | None = None,
    *,
    first: int | None = None,
) -> IngestReport:
    """Ingest the folder (only its `first` documents, if given) with the word-hash test embeddings."""
    embedder = Embedder(embeddings or WordHashEmbeddings(), "test/word-hash")
    documents = list(load_documents([folder]))[:first]
    return ingest(documents, store, embedder, CONTEXT, progress=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("faults") / "corpus", 120, seed=11)


@pytest.fixture(scope="module")
def want(corpus: Path) -> Expected:
    return expected(corpus, CONTEXT)


@pytest.fixture(scope="module")
def clean(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, int, str]:
    """The digest of a one-shot ingest with no fault: what every recovered store must equal."""
    path = tmp_path_factory.mktemp("clean") / "clean.db"
    with SQLiteStore(path) as store:
        run_ingest(store, corpus)
    return sqlite_digest(path)


def assert_finishes_only_what_is_missing(
    store: SQLiteStore, corpus: Path, want: Expected, clean: tuple[int, int, str]
) -> None:
    """A re-run embeds exactly the texts the store lacks, each once, and leaves the store a clean ingest's."""
    missing = want.texts - embedded_texts(store.path)
    embeddings = RecordingEmbeddings()
    report = run_ingest(store, corpus, embeddings)
    assert sorted(embeddings.texts) == sorted(missing)
    assert report.errors == [] and report.unembedded == 0
    assert sqlite_digest(store.path) == clean
    assert check_sqlite_store(store.path, want) == set(want.documents)


def assert_readable(message: str, path: Path, *phrases: str) -> None:
    assert str(path) in message, message
    for phrase in phrases:
        assert phrase in message, message
    assert "Traceback" not in message and "INSERT" not in message and "BEGIN" not in message


# --- another writer holds the lock -------------------------------------------------------------------


@contextlib.contextmanager
def write_lock_held(path: Path) -> Iterator[Callable]:
    """Another process holds the store's write lock (BEGIN IMMEDIATE) until `release()` or the end."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
            import sqlite3, sys
            conn = sqlite3.connect(sys.argv[1], isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
            print("locked", flush=True)
            sys.stdin.readline()
            conn.execute("ROLLBACK")
        """),
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"

    def release() -> None:
        if holder.poll() is None:
            holder.stdin.write("\n")
            holder.stdin.flush()
            holder.wait(10)

    try:
        yield release
    finally:
        release()


def test_reads_keep_working_while_another_process_holds_the_write_lock(tmp_path, corpus, want):
    path = tmp_path / "store.db"
    embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    with SQLiteStore(path, timeout=0.2) as store:
        run_ingest(store, corpus)
        with write_lock_held(path):
            assert store.keyword_search("chunks", "boiler repair", 3)
            assert store.vector_search("chunks", embedder.embed_query("boiler repair"), 3)
            assert store.document_chunks(["note-0001"], 10)
            assert store.stats().documents == len(want.documents)
            assert all(s.embedded for s in store.document_states(list(want.documents)).values())
            with SQLiteStore(path, timeout=0.2) as late:  # a process that opens the store meanwhile
                assert late.keyword_search("documents", "tenancy deposit", 3)


def test_a_write_waits_for_the_lock_and_succeeds_once_it_is_released(tmp_path, corpus, want, clean):
    path = tmp_path / "store.db"
    with SQLiteStore(path, timeout=10) as store:
        store.stats()  # created before the other process locks it
        with write_lock_held(path) as release:
            timer = threading.Timer(0.5, release)
            timer.start()
            started = time.monotonic()
            run_ingest(store, corpus)
            waited = time.monotonic() - started
            timer.join()
        assert waited >= 0.5
        assert sqlite_digest(path) == clean
        check_sqlite_store(path, want)


def test_a_new_store_opened_while_another_writer_makes_it_waits_for_the_lock(tmp_path):
    """Two server runs opening one tenant's new store at once: turning a new file to WAL needs it alone,
    and SQLite answers "locked" at once there instead of waiting out the busy timeout."""
    path = tmp_path / "store.db"
    with write_lock_held(path) as release:  # the other writer has created the file and holds its lock
        timer = threading.Timer(0.5, release)
        timer.start()
        with SQLiteStore(path, timeout=10) as store:
            assert store.stats().documents == 0
        timer.join()


def test_a_write_that_outwaits_the_timeout_names_the_file_and_what_to_do(tmp_path, corpus, want, clean):
    path = tmp_path / "store.db"
    with SQLiteStore(path, timeout=0.3) as store:
        run_ingest(store, corpus, first=60)
        before = sqlite_digest(path)
        with write_lock_held(path):
            with pytest.raises(StoreError) as failure:
                run_ingest(store, corpus)
            assert_readable(
                str(failure.value), path, "locked by another", "0.3 s", "run the same ingest again"
            )
            assert sqlite_digest(path) == before  # the refused batch left nothing behind
        # the holder is gone: the same store object finishes the job
        assert_finishes_only_what_is_missing(store, corpus, want, clean)


# --- read-only ---------------------------------------------------------------------------------------


@pytest.fixture
def read_only_view(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(a writable folder, the same folder bind-mounted read-only): EROFS for everyone, root included."""
    source, view = tmp_path / "rw", tmp_path / "ro"
    source.mkdir()
    view.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(source), str(view)], check=False, capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("a read-only bind mount needs root with CAP_SYS_ADMIN")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True, capture_output=True)
        yield source, view
    finally:
        if subprocess.run(["umount", str(view)], check=False, capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(view)], check=True)
            raise AssertionError("a connection into the read-only view was left open")


def test_a_store_on_a_read_only_filesystem_serves_reads_and_refuses_writes_clearly(
    read_only_view, corpus, want, monkeypatch
):
    source, view = read_only_view
    with SQLiteStore(source / "store.db") as writer:
        run_ingest(writer, corpus)
    # the end of an ingest now finds the common words' lists missing: not writing them fails nothing
    monkeypatch.setattr(stored_postings, "STORED_ROWS", 1)
    embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    path = view / "store.db"
    with pytest.raises(OSError, match="Read-only file system"):
        path.with_suffix(".probe").write_text("")  # the view really is read-only, for root too
    with SQLiteStore(path) as store:
        assert store.keyword_search("chunks", "boiler repair", 3)
        assert store.vector_search("documents", embedder.embed_query("tenancy deposit"), 3)
        assert store.stats().documents == len(want.documents)
        states = store.document_states(list(want.documents))
        assert len(states) == len(want.documents) and all(s.embedded for s in states.values())
        assert run_ingest(store, corpus).unchanged == len(want.documents)  # nothing to write: nothing fails
        doc = next(iter(want.documents.values()))
        doc = dataclasses.replace(doc, content=doc.content + " A new closing sentence.")
        with pytest.raises(StoreError) as failure:
            ingest([doc], store, embedder, CONTEXT, progress=False)
        assert_readable(str(failure.value), path, "read-only", "searches still work", "writable")
    assert sorted(os.listdir(source)) == ["store.db"]
    with pytest.raises(StoreError) as failure:
        SQLiteStore(view / "new.db")
    assert_readable(str(failure.value), view / "new.db", "read-only filesystem", "AGENT_RETRIEVAL_DB")


def test_a_read_only_filesystem_still_shows_writes_waiting_in_the_wal(read_only_view, corpus):
    """A store whose writer still has it open (or was killed) keeps its last commits in the WAL file:
    a reader on a read-only mount must see them, not the older main file."""
    source, view = read_only_view
    writer = SQLiteStore(source / "store.db")
    try:
        run_ingest(writer, corpus)
        assert (source / "store.db-wal").stat().st_size > 0
        with SQLiteStore(view / "store.db") as store:
            assert store.stats().documents == writer.stats().documents > 0
            assert store.keyword_search("chunks", "boiler repair", 3)
    finally:
        writer.close()


READ_ONLY_SCRIPT = """
import json, sys
from agent_retrieval.errors import StoreError
from agent_retrieval.models import Document
from agent_retrieval.stores import SQLiteStore

with SQLiteStore(sys.argv[1]) as store:
    out = {"hits": [h.id for h in store.keyword_search("chunks", "boiler repair", 3)],
           "documents": store.stats().documents}
    try:
        store.upsert([Document("new", "New", "text", content_hash="h")], [], "test/word-hash")
    except StoreError as error:
        out["error"] = str(error)
print(json.dumps(out))
"""


def test_a_read_only_file_serves_reads_and_refuses_writes_clearly(tmp_path, corpus, want):
    path = tmp_path / "store.db"
    with SQLiteStore(path) as store:
        run_ingest(store, corpus)
    path.chmod(0o444)
    command = [sys.executable, "-c", READ_ONLY_SCRIPT, str(path)]
    if os.geteuid() == 0:  # root writes a 0444 file anyway; without CAP_DAC_OVERRIDE the mode binds it
        if not shutil.which("setpriv"):
            pytest.skip("running as root needs setpriv to drop CAP_DAC_OVERRIDE")
        caps = "-dac_override,-dac_read_search"
        command = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", *command]
    done = subprocess.run(command, check=False, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["hits"] and out["documents"] == len(want.documents)
    assert_readable(out["error"], path, "read-only", "searches still work", "writable")
    path.chmod(0o644)
    assert sqlite_digest(path)[0] == len(want.documents)  # nothing was written


# --- a full disk -------------------------------------------------------------------------------------


class SmallDisk:
    """A store folder with room for about `free` more bytes, and a way to free space afterwards."""

    def __init__(self, method: str, folder: Path):
        self.method, self.folder, self.path = method, folder, folder / "store.db"
        self.store: SQLiteStore | None = None

    def fill(self, free: int) -> None:
        if self.method == "tmpfs":
            self.ballast = self.folder / "ballast"
            stat = os.statvfs(self.folder)
            self.ballast.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - free))
        else:  # SQLite's own limit, on the connection the ingest below writes through (this thread's)
            conn = self.store._db.connection()
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {pages + free // 4096}")

    def free(self) -> None:
        if self.method == "tmpfs":
            self.ballast.unlink()
        else:
            self.store._db.connection().execute("PRAGMA max_page_count = 1073741823")


@pytest.fixture(params=["tmpfs", "max_page_count"])
def small_disk(request, tmp_path: Path) -> Iterator[SmallDisk]:
    folder = tmp_path / "disk"
    folder.mkdir()
    if request.param == "tmpfs":
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)], check=False, capture_output=True
        )
        if mounted.returncode != 0:
            pytest.skip("mounting a small tmpfs needs root with CAP_SYS_ADMIN")
    disk = SmallDisk(request.param, folder)
    try:
        yield disk
    finally:
        if request.param == "tmpfs":
            if disk.store is not None:
                disk.store.close()
            subprocess.run(["umount", "-l", str(folder)], check=True)


def test_a_full_disk_fails_clearly_keeps_the_store_consistent_and_a_rerun_completes(
    small_disk, corpus, want, clean
):
    with SQLiteStore(small_disk.path) as store:
        small_disk.store = store
        store.stats()
        small_disk.fill(free=1_000_000)  # about half of what this corpus needs (~2 MB of WAL)
        with pytest.raises(StoreError) as failure:
            run_ingest(store, corpus)
        assert_readable(
            str(failure.value),
            small_disk.path,
            "disk is full",
            "free some space",
            "run the same ingest again",
        )
        stored = check_sqlite_store(small_disk.path, want)
        assert 0 < len(stored) < len(want.documents), "the disk should fill up part way through"
        small_disk.free()
        assert_finishes_only_what_is_missing(store, corpus, want, clean)


def test_a_batch_that_fills_the_disk_after_its_documents_leaves_none_of_them(tmp_path, corpus, want):
    """The disk fills after a batch's documents are written but before its chunks are: the whole batch
    is undone, so no document stays without its chunks (which would count as done, and never be redone)."""
    embedder = Embedder(WordHashEmbeddings(), "test/word-hash")
    docs = list(load_documents([corpus]))[:32]
    chunks = [
        c for d in docs for c in chunk_document(d, CONTEXT.ingest.chunk_size, CONTEXT.ingest.chunk_overlap)
    ]
    texts = [document_text(d) for d in docs] + [chunk_text(c) for c in chunks]
    for row, text, vector in zip([*docs, *chunks], texts, embedder.embed_documents(texts), strict=False):
        row.text_hash, row.embedding = text, vector
    for doc in docs:
        doc.content_hash = doc.id

    def pages(path: Path, batch_chunks: list[Chunk]) -> int:
        """Pages the batch adds to an empty store."""
        with SQLiteStore(path) as scratch:
            start = scratch._db.connection().execute("PRAGMA page_count").fetchone()[0]
            scratch.upsert(docs, batch_chunks, embedder.model_id)
            return scratch._db.connection().execute("PRAGMA page_count").fetchone()[0] - start

    documents_only, whole = pages(tmp_path / "a.db", []), pages(tmp_path / "b.db", chunks)
    assert documents_only < whole
    path = tmp_path / "store.db"
    with SQLiteStore(path) as store:
        conn = store._db.connection()  # the connection this thread writes through
        start = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {start + (documents_only + whole) // 2}")
        with pytest.raises(StoreError, match="disk is full"):
            store.upsert(docs, chunks, embedder.model_id)
        assert store.stats().documents == store.stats().chunks == 0
        conn.execute("PRAGMA max_page_count = 1073741823")
        store.upsert(docs, chunks, embedder.model_id)
    assert check_sqlite_store(path, want) == {d.id for d in docs}
