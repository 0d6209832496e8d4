"""Pure functions that fuse vector and keyword results: reciprocal rank, convex (standard scores), the
keyword side's trust, entity boost, thresholds."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent_retrieval.core.text import entity_matches
from agent_retrieval.models import Hit, Level


@dataclass(frozen=True)
class QueryProfile:
    """How one query_type weighs the two paths, and the least cosine similarity a vector hit needs."""

    vector_weight: float
    keyword_weight: float
    min_similarity: float


PROFILES: dict[str, QueryProfile] = {
    "general": QueryProfile(1.0, 1.0, 0.10),
    "exact": QueryProfile(0.5, 1.5, 0.25),
    "conceptual": QueryProfile(1.5, 0.6, 0.05),
}


# A paraphrased question shares few words with its answer, and the keyword side's best passage then holds
# only a few of the query's words, by chance (in a short text, one shared word scores high): that ranking is
# mostly noise. For passages, the keyword side keeps its full weight when its best hit holds this share of the
# query's idf, and less below it, by the square of the shortfall. Chosen on SciFact's train queries and the
# demo's paraphrased questions: even for passages on SciFact (-0.27 train, +0.26 test nDCG@10), the demo's
# answering passage shown 8 of 8 times instead of 4. Whole documents keep the keyword side's full weight
# (None): scaled too, they lost 1.3 points on SciFact.
FULL_KEYWORD_COVERAGE: dict[Level, float | None] = {"chunks": 0.8, "documents": None}
# A question of several relations ("the state where the author of X died") holds more words than any one
# passage, and its keyword side's best passage holds the rare name it hinges on and little else: low
# coverage, for a reason other than chance. Such a passage stands far out of the keyword list, where chance
# matches of common words score alike: in a question of MANY_WORDS words or more (those keyword search looks
# for, stopwords aside), a best passage STANDOUT standard deviations above the list's mean keeps the keyword
# side's full weight. Chosen on MuSiQue dev (4-hop R@5 of the rag graph's retrieval 31.5 -> 37.0), keeping
# the demo, SciFact and the documentation sets as they were (benchmarks/reports/multihop.md).
STANDOUT, MANY_WORDS = 3.5, 7


def keyword_trust(keyword_hits: Sequence[Hit], query_words: int = 0) -> float:
    """How far to trust the keyword ranking, 0 to 1: its best hit's coverage of the query relative to
    FULL_KEYWORD_COVERAGE of its level, squared (1 when either is unknown, or when the best hit of a
    question of `query_words` >= MANY_WORDS words stands out of the list)."""
    if not keyword_hits:
        return 1.0
    best = keyword_hits[0]
    full = FULL_KEYWORD_COVERAGE[best.level]
    if full is None or best.keyword_coverage is None:
        return 1.0
    if query_words >= MANY_WORDS and _stands_out([hit.keyword_score or 0.0 for hit in keyword_hits]):
        return 1.0
    return min(1.0, best.keyword_coverage / full) ** 2


def _stands_out(scores: list[float]) -> bool:
    """Whether the first of five or more scores is STANDOUT standard deviations above their mean."""
    if len(scores) < 5:
        return False
    mean = sum(scores) / len(scores)
    spread = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    return spread > 0 and scores[0] - mean >= STANDOUT * spread


def rrf(
    rankings: Mapping[str, Sequence[Hashable]], weights: Mapping[str, float], k: int = 60
) -> dict[Any, float]:
    """Weighted reciprocal-rank fusion: sum over paths of weight / (k + rank), ranks from 1."""
    fused: dict[Any, float] = {}
    for path, ids in rankings.items():
        weight = weights.get(path, 1.0)
        for rank, item in enumerate(ids, start=1):
            fused[item] = fused.get(item, 0.0) + weight / (k + rank)
    return fused


def zscores(scores: Mapping[Any, float]) -> dict[Any, float]:
    """Standard scores: (score - mean) / standard deviation. A list of one score, or of equal ones, gives 1.0
    each (present is all it says)."""
    if not scores:
        return {}
    mean = sum(scores.values()) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores.values()) / len(scores))
    if std == 0:
        return dict.fromkeys(scores, 1.0)
    return {item: (s - mean) / std for item, s in scores.items()}


def convex(scores: Mapping[str, Mapping[Any, float]], weights: Mapping[str, float]) -> dict[Any, float]:
    """Convex fusion: the weighted mean of each path's standard scores.

    An item a path did not return takes that path's lowest standard score (0 when the path's scores say
    nothing), so it ranks as the path's worst candidate, not as an average one.
    """
    total = sum(weights.get(path, 1.0) for path in scores) or 1.0
    items = {item for path_scores in scores.values() for item in path_scores}
    fused = dict.fromkeys(items, 0.0)
    for path, path_scores in scores.items():
        weight = weights.get(path, 1.0) / total
        standard = zscores(path_scores)
        floor = min(standard.values()) if standard and len(set(standard.values())) > 1 else 0.0
        for item in items:
            fused[item] += weight * standard.get(item, floor)
    return fused


def fuse(
    vector_hits: Sequence[Hit],
    keyword_hits: Sequence[Hit],
    *,
    mode: str = "rrf",
    vector_weight: float = 1.0,
    keyword_weight: float = 1.0,
    k: int = 60,
    entities: Sequence[str] = (),
    boost: float = 0.0,
    limit: int | None = None,
    query_words: int = 0,
) -> list[Hit]:
    """Merge the two ranked lists into one, best first, each hit carrying both paths' ranks and scores; the
    best `limit` (default all). The keyword side's weight is scaled by `keyword_trust` (`query_words`: how
    many words keyword search looked for).

    A hit of one list meets its own row in the other by (tenant, id): the same id may be two tenants' rows."""
    vector_ranks = {hit.key: rank for rank, hit in enumerate(vector_hits, start=1)}
    keyword_found = {hit.key: (rank, hit) for rank, hit in enumerate(keyword_hits, start=1)}
    rows = {hit.key: hit for hit in keyword_hits} | {hit.key: hit for hit in vector_hits}
    weights = {"vector": vector_weight, "keyword": keyword_weight * keyword_trust(keyword_hits, query_words)}
    if mode == "rrf":
        scores = rrf(
            {"vector": [h.key for h in vector_hits], "keyword": [h.key for h in keyword_hits]}, weights, k
        )
    elif mode == "convex":
        scores = convex(
            {
                "vector": {h.key: h.vector_similarity or 0.0 for h in vector_hits},
                "keyword": {h.key: h.keyword_score or 0.0 for h in keyword_hits},
            },
            weights,
        )
    else:
        raise ValueError(f"fusion mode must be rrf or convex (got {mode!r})")
    if entities and boost:
        for item, hit in rows.items():
            scores[item] *= 1.0 + boost * entity_matches(f"{hit.title}\n{hit.content}", entities)
    # ties: by id, then tenant, as the SQL hybrid functions order them
    ranked = sorted(rows, key=lambda key: (-scores[key], rows[key].id, rows[key].tenant))[:limit]
    # Each hit is built once, for the ones returned only: copying every candidate was most of a call's
    # Python time.
    return [_fused(rows[key], scores[key], vector_ranks.get(key), keyword_found.get(key)) for key in ranked]


def _fused(row: Hit, score: float, vector_rank: int | None, keyword: tuple[int, Hit] | None) -> Hit:
    """The row as fusion ranked it: its score, and each path's rank (and the keyword side's scores)."""
    if keyword is None:
        return replace(row, score=score, vector_rank=vector_rank)
    rank, found = keyword
    return replace(
        row,
        score=score,
        vector_rank=vector_rank,
        keyword_rank=rank,
        keyword_score=found.keyword_score,
        keyword_coverage=found.keyword_coverage,
    )
