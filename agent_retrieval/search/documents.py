"""A document found by what it says anywhere: each document ranked at its best passage.

A document's own vector is its title and opening (chunking.document_text), and BM25 over its whole text
favours short pages (its length normalisation), so a long reference page was not found for what its
later sections say, and a short neighbouring page outranked it (BENCHMARKS, "Documentation sets"). At the
documents level both sides also search the passages, which carry the title and headings in their heading
path (a field weighted as the title is), and each document takes its best one: the vector side the most
similar of its passages and its own vector, the keyword side its best passage.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from agent_retrieval.models import Hit


def each_at_best(hits: Iterable[Hit]) -> list[Hit]:
    """Each document once, at its first hit (hits come best first), as a document hit. A passage it was
    found by stays its text and heading path: that is what matched, where the opening may say nothing of it.
    """
    best: dict[tuple[str, str], Hit] = {}
    for hit in hits:
        key = (hit.tenant, hit.document_id)
        if key not in best:
            best[key] = replace(hit, id=hit.document_id, level="documents", ordinal=None)
    return list(best.values())


def most_similar(documents: Iterable[Hit], passages: Iterable[Hit]) -> list[Hit]:
    """The vector side's documents, each at the most similar of its own vector and its passages'."""
    hits = sorted([*documents, *passages], key=lambda hit: -(hit.vector_similarity or 0.0))
    return each_at_best(hits)  # sorted is stable: a tie keeps the store's order, documents first
