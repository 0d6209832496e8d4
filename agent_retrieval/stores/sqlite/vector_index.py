"""The embedded store's approximate vector index: past a size threshold (`vector_index_rows`) a level's
vectors are searched through an HNSW graph (usearch) instead of read whole for every query.

The graph is kept in a file beside the store (`<store>-<level>.usearch`), so a new process loads it instead
of building it, and is brought up to date by comparing what it holds with the level's vectors as the store
reads them after a write: rows gone or changed are taken out, new ones added. The end of an ingest does that
for whatever was written; a search does it only for a few rows (SEARCH_ADDS), and otherwise answers by the
exact scan, so no query waits minutes for a graph to be built. Searches inside a filter's or a list of
documents' rows stay exact: they read only those rows.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from agent_retrieval.core.progress import bar
from agent_retrieval.models import Level
from agent_retrieval.stores.sqlite.cache import Matrix

if TYPE_CHECKING:
    from usearch.index import Index

log = logging.getLogger(__name__)

# bench-ann at 100K (usearch): depth 400 finds 0.994 of the exact top 10 and 0.995 of the top 100, ~2 ms
SEARCH_DEPTH = 400
LINKS, BUILD_DEPTH = 16, 200  # the graph's links per node and build depth, the usual HNSW choice
# The graph keeps its vectors in 8 bits: it only picks candidates, and they are scored from the store's own
# float32 vectors. Against half precision (BENCHMARKS, "Where a call's time goes now"): a search a third of
# the time and the graph half the memory; asked for a quarter more than it returns, the exact top 100 it
# finds is as complete (0.995). What the graph holds is read back in half precision, and a row counts as
# changed when its vector moves by more than two of the 8-bit steps (1/127; usearch truncates, so a stored
# value is within one): a smaller move leaves it where the graph still finds it.
HELD, QUANTIZED = np.float16, "i8"
MOVED = 2 / 127
OVERREAD = 1.25
# Rows a search may add to bring the graph up to date (about a second); more is left to the next ingest.
SEARCH_ADDS = 5_000
SAVE_ROWS = 1_000  # a search that changed the graph by this many rows saves it, so other processes need not
ADD_ROWS = 10_000  # rows added at a time, so a bar can show a long build
COMPARE_ROWS = 65_536  # rows compared at a time when a saved graph is checked against the store's vectors


@dataclass(frozen=True)
class VectorIndex:
    """An HNSW graph holding exactly the rows and vectors of `matrix`."""

    graph: Index  # usearch is imported when first needed: small stores never load it
    matrix: Matrix
    # the graph's bytes at its last measured row count: usearch measures them slowly (half a millisecond
    # at 100K rows), and every keyword search weighs the caches against their budget
    _measured: dict[int, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def nbytes(self) -> int:
        """The graph's memory, measured again only when its row count has changed."""
        rows = len(self.graph)
        if rows not in self._measured:
            self._measured.clear()
            self._measured[rows] = int(self.graph.memory_usage)
        return self._measured[rows]

    def search(self, query: np.ndarray, k: int) -> np.ndarray:
        """The positions in `matrix` of the (approximately) k nearest rows, best first by their vectors."""
        asked = math.ceil(OVERREAD * k)
        self.graph.expansion_search = max(SEARCH_DEPTH, asked)  # type: ignore[misc]  # the stub misses its setter
        keys = np.asarray(self.graph.search(query, asked, threads=1).keys, dtype=np.int64)
        rowids = self.matrix.rowids
        places = np.minimum(np.searchsorted(rowids, keys), len(rowids) - 1)
        # The graph holds the matrix's rows by construction; should a key not be one, it is dropped, never
        # answered with the row beside it.
        found: np.ndarray = places[rowids[places] == keys]
        nearest = np.argsort(-np.einsum("ij,j->i", self.matrix.vectors[found], query), kind="stable")[:k]
        return found[nearest]


def usearch_index() -> type[Index]:
    """usearch's Index class. Its compiled module carries a C++ runtime of its own, and loading onnxruntime
    (the local embedder) after it crashes the process, the other way round is fine: so onnxruntime, where
    installed, is loaded first."""
    with contextlib.suppress(ImportError):
        import onnxruntime  # noqa: F401

    from usearch.index import Index

    return Index


def sidecar(store: Path, level: Level) -> Path:
    return store.with_name(f"{store.name}-{level}.usearch")


def refreshed(
    current: VectorIndex | None,
    matrix: Matrix,
    path: Path,
    *,
    searching: bool,
    progress: bool = False,
) -> VectorIndex | None:
    """`current` brought to `matrix`'s rows (from the saved graph at `path`, or new, when there is none),
    and saved when it changed. For a search: None when that would add more than SEARCH_ADDS rows, and saved
    only past SAVE_ROWS changed rows."""
    if current is not None and current.matrix.generation == matrix.generation:
        return current
    dim, most_added = matrix.vectors.shape[1], SEARCH_ADDS if searching else len(matrix.rowids)
    graph: Index | None = None
    if current is not None:
        graph, held = current.graph, current.matrix
    elif (loaded := _load(path, dim)) is not None:
        graph, held = loaded
    else:
        held = Matrix(-1, matrix.model, np.empty(0, np.int64), np.empty((0, dim), HELD))
    gone, new = _changes(held, matrix)
    # None yet, or most of it gone (deleted, or a new model's vectors): a new graph beats a patched one.
    rebuild = graph is None or 2 * len(gone) > len(held.rowids)
    if rebuild:
        gone, new = gone[:0], np.arange(len(matrix.rowids))
    if len(new) > most_added:
        return None
    if graph is None or rebuild:
        graph = usearch_index()(
            ndim=dim, metric="ip", dtype=QUANTIZED, connectivity=LINKS, expansion_add=BUILD_DEPTH
        )
    elif current is not None:
        graph = graph.copy()  # other threads may be searching the one they hold
    if len(gone):
        graph.remove(gone)
    with bar(len(new), unit="vector", desc="vector index", enabled=progress) as shown:
        for part in np.array_split(new, -(-len(new) // ADD_ROWS)) if len(new) else ():
            graph.add(matrix.rowids[part], matrix.vectors[part], threads=os.cpu_count() or 1)
            shown.update(len(part))
    if len(gone) + len(new) >= (SAVE_ROWS if searching else 1):
        _save(graph, path)
    return VectorIndex(graph, matrix)


def _changes(held: Matrix, matrix: Matrix) -> tuple[np.ndarray, np.ndarray]:
    """The rowids the graph must drop (gone from the store, or a new vector) and the positions in `matrix`
    of the rows it must add (new, or a new vector)."""
    _, old, now = np.intersect1d(held.rowids, matrix.rowids, assume_unique=True, return_indices=True)
    changed = np.zeros(len(old), bool)
    for i in range(0, len(old), COMPARE_ROWS):
        was, is_now = held.vectors[old[i : i + COMPARE_ROWS]], matrix.vectors[now[i : i + COMPARE_ROWS]]
        changed[i : i + COMPARE_ROWS] = np.any(np.abs(was.astype(np.float32) - is_now) > MOVED, axis=1)
    kept = np.zeros(len(held.rowids), bool)
    kept[old[~changed]] = True
    fresh = np.ones(len(matrix.rowids), bool)
    fresh[now[~changed]] = False
    return held.rowids[~kept], np.flatnonzero(fresh)


def _load(path: Path, dim: int) -> tuple[Index, Matrix] | None:
    """The graph saved at `path` and what it holds, or None (none saved, unreadable, or of another
    dimension: it is then built again)."""
    if not path.is_file():
        return None
    try:
        graph = usearch_index().restore(str(path))
    except (OSError, ValueError, RuntimeError) as error:  # usearch's words for a file it cannot read
        log.warning("the vector index %s cannot be read (%s); it is built again", path, error)
        return None
    if graph is None or graph.ndim != dim:
        return None
    rowids = np.sort(np.asarray(graph.keys, dtype=np.int64))
    vectors = np.empty((len(rowids), dim), HELD)
    for i in range(0, len(rowids), COMPARE_ROWS):
        part = rowids[i : i + COMPARE_ROWS]
        vectors[i : i + len(part)] = np.stack(graph.get(part.astype(np.uint64), dtype="f16"))  # type: ignore[arg-type]
    return graph, Matrix(-1, "", rowids, vectors)


def _save(graph: Index, path: Path) -> None:
    """Write the graph beside the store in one step: a reader sees the old file or the new, never half."""
    # a name of this writer's own (the file gets the usual permissions, as the store's file does)
    part = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        graph.save(str(part))
        os.replace(part, path)
    except (OSError, RuntimeError) as error:  # a read-only folder: kept in memory, made again by each process
        log.warning("the vector index cannot be saved at %s (%s)", path, error)
        with contextlib.suppress(OSError):
            part.unlink()
