"""What searches keep of a store file until its next write, shared by every store of the process open on
that file: the vectors as one matrix per level, the words' row counts and postings, and the metadata
counts."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from cachetools import LRUCache

from agent_retrieval.core.process import PROCESS, KeptInMemory, ProcessState
from agent_retrieval.models import Level
from agent_retrieval.stores.base import MetadataCount
from agent_retrieval.stores.postings import PostingsCache

if TYPE_CHECKING:
    from agent_retrieval.stores.sqlite.stored_postings import StoredLevel
    from agent_retrieval.stores.sqlite.vector_index import VectorIndex


# Scopes (a filter, a document list) whose rows a file's searches keep: an agent repeats its filter across
# calls, and listing a filter's rows reads the metadata of every row (30 ms at 100K chunks keeping half).
SCOPES = 16


@dataclass
class Matrix:
    """The stored vectors of one level, rows in rowid order."""

    generation: int
    model: str
    rowids: np.ndarray
    vectors: np.ndarray


@dataclass
class ScopeRows:
    """The rows a scope (a filter, a document list) leaves at one generation: their rowids, ascending, and,
    once a vector search has asked, which of its level's vector matrix rows they are."""

    generation: int
    rowids: np.ndarray
    in_matrix: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return self.rowids.nbytes + (0 if self.in_matrix is None else self.in_matrix.nbytes)


@dataclass
class FileCache:
    """What searches keep of one store file until its next write, each entry with the generation it was
    read at: the vectors (and their approximate index, past the size where it pays), the words' row counts
    (keyword idf) and postings (keyword scores), what the file's stored postings need, and the metadata
    counts."""

    lock: threading.Lock = field(default_factory=threading.Lock)  # one thread reloads; the rest reuse it
    matrices: dict[Level, Matrix] = field(default_factory=dict)
    indexes: dict[Level, VectorIndex] = field(default_factory=dict)
    # the generation and saved index file (modified time) a search found too far behind to bring up to date
    behind: dict[Level, tuple[int, int]] = field(default_factory=dict)
    # generation, rows, each word's row count
    frequencies: dict[Level, tuple[int, int, dict[str, int]]] = field(default_factory=dict)
    postings: dict[Level, PostingsCache] = field(default_factory=dict)  # each word's rows and scores
    stored: dict[Level, tuple[int, StoredLevel | None]] = field(default_factory=dict)  # generation, lists
    metadata: tuple[int, int, list[MetadataCount]] | None = None  # generation, max_values, counts
    # (level, where, params) -> the rows that scope leaves: the last SCOPES scopes searched
    scopes: LRUCache[Hashable, ScopeRows] = field(default_factory=lambda: LRUCache(maxsize=SCOPES))

    @property
    def nbytes(self) -> int:
        matrices = sum(m.vectors.nbytes + m.rowids.nbytes for m in tuple(self.matrices.values()))
        indexes = sum(index.nbytes for index in tuple(self.indexes.values()))
        stored = sum(s.nbytes for _, s in tuple(self.stored.values()) if s is not None)
        scopes = sum(scope.nbytes for scope in tuple(self.scopes.values()))
        return matrices + indexes + stored + scopes + sum(p.nbytes for p in tuple(self.postings.values()))

    def scope(self, key: Hashable, generation: int) -> ScopeRows | None:
        """The rows a scope left at `generation`, if it was searched since the last write."""
        with self.lock:
            kept = self.scopes.get(key)
            return kept if kept is not None and kept.generation == generation else None

    def keep_scope(self, key: Hashable, scope: ScopeRows) -> None:
        with self.lock:
            self.scopes[key] = scope


class FileCaches(KeptInMemory[FileCache]):
    """The caches of the store files this process has searched, shared by all its stores on a file (a
    server opens one per run: reading 100K vectors again would cost it half a second a run), the least
    recently opened dropped beyond a budget in bytes (`trim`). A file is known by its path and the random
    id in its store_info, so a file made again at the same path, or a copy at another, never reads
    another's cache."""

    def of(self, path: Path, store_id: str | None, budget: int) -> FileCache:
        """The file's shared cache; a cache of its own for a store with no budget, or for a file no
        migration could give an id (read-only)."""
        if store_id is None or budget <= 0:
            return FileCache()
        key = (str(path.resolve()), store_id)
        with self._lock:
            cache = self._kept.setdefault(key, FileCache())
            self._kept.move_to_end(key)
            return cache


def file_caches(process: ProcessState = PROCESS) -> FileCaches:
    return process.part("sqlite file caches", FileCaches)


def release_file_caches() -> None:
    """Drop what the process keeps between stores of the files it searched (stores open now keep theirs):
    for measuring one store's memory alone."""
    file_caches().trim(0)
