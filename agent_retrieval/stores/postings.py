"""Words' postings and the top k rows by BM25 over them, for the stores that score keyword search in
Python: the embedded store (from FTS5 and its stored lists) and the Postgres store by DSN (from its
postings tables). Each keeps the postings it read until a write changes them."""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from agent_retrieval.core.process import KeptInMemory


@dataclass(frozen=True)
class Postings:
    """One word's rows of a level (rowid ascending) and its part of each row's BM25 score, idf included."""

    rowids: np.ndarray
    scores: np.ndarray

    @functools.cached_property
    def bound(self) -> float:
        """The most the word adds to any row's score."""
        return float(self.scores.max(initial=0.0))

    @property
    def nbytes(self) -> int:
        return self.rowids.nbytes + self.scores.nbytes

    def parts_of(self, rows: np.ndarray) -> np.ndarray:
        """The word's part of each of `rows`' scores (0 in a row without it), by binary search."""
        if not len(self.rowids):
            return np.zeros(len(rows))
        at = np.minimum(np.searchsorted(self.rowids, rows), len(self.rowids) - 1)
        return np.where(self.rowids[at] == rows, self.scores[at], 0.0)


POSTINGS_CACHE_BYTES = 256 * 2**20  # a level's postings kept per file (500 queries on 100K chunks: 88 MB)


class PostingsCache:
    """Words' postings read at one generation, the least recently used dropped past `limit` bytes."""

    def __init__(self, generation: Hashable, limit: int | None = None) -> None:
        self.generation = generation
        self.limit = POSTINGS_CACHE_BYTES if limit is None else limit
        self.nbytes = 0
        self._lock = threading.Lock()
        self._terms: OrderedDict[str, Postings] = OrderedDict()

    def get(self, term: str) -> Postings | None:
        with self._lock:
            found = self._terms.get(term)
            if found is not None:
                self._terms.move_to_end(term)
            return found

    def put(self, term: str, postings: Postings) -> None:
        with self._lock:
            if term in self._terms or postings.nbytes > self.limit:
                return
            self._terms[term] = postings
            self.nbytes += postings.nbytes
            while self.nbytes > self.limit:
                self.nbytes -= self._terms.popitem(last=False)[1].nbytes


class KeptPostings(KeptInMemory[PostingsCache]):
    """Words' postings a process's stores read, per scope (a store, a level and a tenant), each at the stamp
    it was read at: a scope read at another stamp starts empty, and the least recently used scopes are
    dropped past a budget in bytes (`trim`). One scope may hold the whole budget: at a million chunks the
    words of a few hundred queries outgrow a smaller share, and a word read again each time costs most of a
    search."""

    def of(self, scope: Hashable, stamp: Hashable, budget: int) -> PostingsCache:
        with self._lock:
            kept = self._kept.get(scope)
            if kept is None or kept.generation != stamp:
                kept = self._kept[scope] = PostingsCache(stamp)
            kept.limit = budget  # the searching store's (two stores of one scope may be given two)
            self._kept.move_to_end(scope)
            return kept


def best_of_postings(lists: list[Postings], k: int) -> list[tuple[int, float]]:
    """The k best rows (rowid, BM25 score) of a whole level from its words' postings, best first (ties to
    the older row).

    MaxScore: the rows of the rarer half of the words are scored first; their k-th score is a threshold.
    Words whose largest parts together stay below it cannot lift a row holding none of the other words
    into the top k, so only the rows of the other words are scored."""
    lists = [p for p in lists if len(p.rowids)]
    if not lists:
        return []
    first = sorted(lists, key=lambda p: len(p.rowids))[: (len(lists) + 1) // 2]
    rows, scores = _scored(first, lists)
    threshold = float(np.partition(scores, len(scores) - k)[len(scores) - k]) if len(scores) >= k else 0.0
    essential = sorted(lists, key=lambda p: p.bound)
    bound = 0.0
    while essential and bound + essential[0].bound < threshold:
        bound += essential.pop(0).bound
    if any(all(p is not f for f in first) for p in essential):
        rows, scores = _scored(essential, lists)
    if len(rows) > k:
        top = np.argpartition(-scores, k - 1)[:k]
        rows, scores = rows[top], scores[top]
    order = np.lexsort((rows, -scores))
    return list(zip(rows[order].tolist(), scores[order].tolist(), strict=True))


def best_of_rows(lists: list[Postings], rows: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k best of `rows` (rowids, ascending: a document list's or a filter's) for the words' postings,
    every row scored, best first (ties to the older row); rows holding no word are no hit."""
    total = sum((postings.parts_of(rows) for postings in lists), np.zeros(len(rows)))
    holding = np.flatnonzero(total > 0)
    order = np.lexsort((rows[holding], -total[holding]))[:k]
    return list(zip(rows[holding][order].tolist(), total[holding][order].tolist(), strict=True))


# The widest span of rowids scored in one array (8 bytes a rowid): a wider one (a file whose rows were
# written again many times over) is scored by sorting the rows instead.
DENSE_ROWIDS = 2**25


def _scored(essential: list[Postings], lists: list[Postings]) -> tuple[np.ndarray, np.ndarray]:
    """The rows holding a word of `essential`, ascending, and their scores (every word's part).

    Summed in an array indexed by rowid: adding a word's parts costs a few nanoseconds a row, against a
    sort of all the rows and a binary search per word. (MaxScore at 1M chunks: p95 126 ms -> 35 ms.)"""
    low = min(int(p.rowids[0]) for p in essential)
    high = max(int(p.rowids[-1]) for p in essential)
    if high - low >= DENSE_ROWIDS:
        rows = np.unique(np.concatenate([p.rowids for p in essential]))
        return rows, _summed(rows, lists)
    total = np.zeros(high - low + 1)
    for p in essential:
        total[p.rowids - low] += p.scores
    at = np.flatnonzero(total)  # every part is above zero
    for p in lists:
        if any(p is e for e in essential):
            continue
        if len(p.rowids) < 8 * len(at):  # adding the whole word costs less than finding the rows in it
            inside = slice(np.searchsorted(p.rowids, low), np.searchsorted(p.rowids, high, side="right"))
            total[p.rowids[inside] - low] += p.scores[inside]
        else:
            total[at] += _summed(at + low, [p])
    return at + low, total[at]


def _summed(rows: np.ndarray, lists: list[Postings]) -> np.ndarray:
    """Each row's score: the sum of the words' parts in it, found by binary search in each word's rows."""
    total = np.zeros(len(rows))
    for p in lists:
        total += p.parts_of(rows)
    return total
