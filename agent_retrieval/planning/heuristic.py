"""The planner without an LLM: `key:value` filters, one query per sub-question, and questions rewritten
as statements."""

from __future__ import annotations

import logging
import re
from typing import Any

from agent_retrieval.core.text import AUXILIARY, AUXILIARY_VERBS
from agent_retrieval.models import (
    validate_filters,
)
from agent_retrieval.planning.schema import Facets, PlannedQuery, QueryPlan, SearchStrategy, check_request

log = logging.getLogger(__name__)


_OPERATOR = re.compile(r"(?<![\w/])([A-Za-z_][\w-]{0,63}):(\"[^\"]{1,200}\"|[^\s/\"][^\s\"]{0,199})")
_SPLIT = re.compile(
    rf"\s*(?:;|\?|,?\s+and\s+(?=(?:what|who|whom|whose|when|where|which|why|how|{AUXILIARY})\b))\s*",
    re.IGNORECASE,
)
_QUESTION_LEAD = re.compile(
    r"^(?:(?:please\s+)?(?:tell me|explain|describe|show me|find|list)\s+)?"
    r"(?:(?:what|which|who|whom|whose|when|where|why|how(?:\s+(?:much|many|long|often|soon))?)\s+)?"
    rf"(?:(?:{AUXILIARY})\s+)?",
    re.IGNORECASE,
)


def heuristic_plan(request: str, facets: Facets | None = None) -> QueryPlan:
    """A plan without an LLM: `key:value` filters, one query per sub-question, and a statement rewrite.

    Questions become statements by dropping the question words ("How long does the landlord have to
    protect the deposit?" -> "the landlord have to protect the deposit"), which is closer to how the
    answer is written; the question as asked stays first, since keyword search wants the user's words.
    With the store's `facets`, a `key:value` whose key no document carries stays part of the question, and
    a year the question restricts by ("policies from 2024") filters on the one key tagged with it.
    The request is held to the question rule first (check_request), so any input costs linear time.
    """
    filters, text = _operators(check_request(request), facets)
    if facets is not None:
        filters = _restricting_years(text, facets) | filters
    parts = [p for p in (part.strip(" ,.") for part in _SPLIT.split(text)) if p]
    queries: list[PlannedQuery] = []
    strategy: SearchStrategy
    if len(parts) > 1 and all(_stands_alone(part) for part in parts[1:]):
        # The question as asked keeps its full weight; each sub-question adds evidence beside it.
        strategy = "decomposed"
        queries = [PlannedQuery(text=text, purpose="the question as asked", priority=1)] + [
            PlannedQuery(text=part, purpose=f"sub-question {n}", priority=2)
            for n, part in enumerate(parts, start=1)
        ]
    else:
        queries = [PlannedQuery(text=text, purpose="the question as asked", priority=1)]
        statement = to_statement(text)
        expanded = statement.lower() != text.lower().rstrip("?") and len(statement.split()) >= 2
        if expanded:
            queries.append(PlannedQuery(text=statement, purpose="the question as a statement", priority=2))
        strategy = "expanded" if expanded else "simple"
    category = filters.get("category") if isinstance(filters.get("category"), str) else None
    if filters:
        strategy = "filtered" if strategy == "simple" else strategy
    queries = [q.model_copy(update={"category": category}) for q in queries]
    return QueryPlan(intent=text[:200], queries=queries, filters=filters, search_strategy=strategy)


# A later part of a request that begins with one of these and no auxiliary verb is a relative clause about
# something before it ("... the writer of X and who died in 2007"), not a question of its own.
_RELATIVE = frozenset({"who", "whom", "whose", "which", "that"})
# Words that point back to something named earlier ("... and where is it stored?").
_REFERRING = frozenset("it its they them their this that these those he she him his her".split())  # noqa: SIM905


def _stands_alone(part: str) -> bool:
    """Whether a later part of a request can be searched on its own: three words at least, not a relative
    clause, and no word that refers back to the part before."""
    words = [w.lower() for w in re.findall(r"[\w']+", part)]
    if len(words) < 3 or _REFERRING & set(words[1:] if words[0] in _RELATIVE else words):
        return False
    return words[0] not in _RELATIVE or words[1] in AUXILIARY_VERBS


def to_statement(question: str) -> str:
    """The question without its question words and mark, e.g. "What is the fee?" -> "the fee"."""
    stripped = _QUESTION_LEAD.sub("", question.strip().rstrip("?").strip())
    return stripped or question.rstrip("?")


def _operators(request: str, facets: Facets | None = None) -> tuple[dict[str, Any], str]:
    """`key:value` metadata filters written in the request (like a search engine's), and the rest of it.
    With `facets`, only keys the documents carry are operators ("note: ..." is words)."""
    filters: dict[str, Any] = {}
    for key, raw in _OPERATOR.findall(request):
        if facets is not None and key not in facets:
            continue
        value = raw.strip('"')
        filters[key] = int(value) if value.isdigit() and len(value) < 10 else value
    try:
        filters = validate_filters(filters) or {}
    except ValueError:  # an operator that is not a valid filter stays part of the question
        return {}, request
    if not filters:
        return {}, request
    rest = _OPERATOR.sub(lambda m: " " if m.group(1) in filters else m.group(0), request)
    return filters, " ".join(rest.split()) or request


# "from 2024", "in 2023", "during 2021": a year the question restricts the documents to. Only a year, and
# only these words: "since 2020" is a range and "in 30 days" a duration, which an equality filter would
# turn into the wrong restriction, hiding the answer.
_RESTRICTING_YEAR = re.compile(r"\b(?:in|from|during)\s+((?:1[5-9]|2\d)\d\d)\b", re.IGNORECASE)


def _restricting_years(text: str, facets: Facets) -> dict[str, Any]:
    """Filters for the years the question restricts by, each on the one key whose values hold it (a year
    two keys hold, or none, filters nothing)."""
    filters: dict[str, Any] = {}
    for number in _RESTRICTING_YEAR.findall(text):
        keys = [k for k, values in facets.items() if any(str(v) == number for v in values)]
        if len(keys) == 1 and keys[0] not in filters:
            filters[keys[0]] = next(v for v in facets[keys[0]] if str(v) == number)
    return filters
