"""Making a plan from a request: by the chat model's structured output, or by heuristics offline; filters
checked against what the documents are tagged with."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import ValidationError

from agent_retrieval.context import Context
from agent_retrieval.core.prompts import load_prompt
from agent_retrieval.core.quoting import element, quote, quote_json
from agent_retrieval.planning.heuristic import heuristic_plan
from agent_retrieval.planning.schema import Facets, PlannedQuery, QueryPlan, check_request
from agent_retrieval.stores.base import FACET_VALUES

log = logging.getLogger(__name__)


@dataclass
class Planned:
    """A plan and how it was made: by the LLM, by heuristics, or as the fallback of a failed LLM call."""

    plan: QueryPlan
    planner: Literal["llm", "heuristic", "fallback"]
    notes: list[str] = field(default_factory=list)


async def make_plan(
    request: str, context: Context, llm: BaseChatModel | None = None, *, facets: Facets | None = None
) -> Planned:
    """Plan the searches for a request, held to the question rule first (InvalidRequest if it breaks it).
    Never raises for LLM failures: it falls back.

    `facets` (Store.metadata_values: the keys the caller's documents are tagged with, and their values) are
    what filters may name: the planner is shown them, and a filter on a key no document carries, or on a
    value a key's complete list lacks, is dropped with a note. None: filters are not checked."""
    request = check_request(request)
    if llm is None:
        planned = Planned(
            heuristic_plan(request, facets), "heuristic", ["no chat model configured: heuristic plan"]
        )
        return capped(_within_facets(planned, facets), context)
    try:
        plan = await asyncio.wait_for(_llm_plan(request, context, llm, facets), context.chat_timeout_seconds)
    except Exception as error:  # a timeout, a provider error, or output that is not a valid plan
        log.warning("planner failed (%s); searching the request as written", type(error).__name__)
        return Planned(
            simple_plan(request),
            "fallback",
            [f"planner failed ({_describe(error)}): searched the request as written"],
        )
    return capped(_within_facets(Planned(plan, "llm"), facets), context)


async def _llm_plan(request: str, context: Context, llm: BaseChatModel, facets: Facets | None) -> QueryPlan:
    # The documents' tags are their authors' words: quoted as data, as passages are.
    tags = element("metadata", quote_json(facets)) if facets is not None else ""
    messages = [
        SystemMessage(load_prompt("planner").replace("{max_queries}", str(context.max_plan_queries))),
        HumanMessage(element("request", quote(request)) + ("\n" + tags if tags else "")),
    ]
    try:
        structured = llm.with_structured_output(QueryPlan, include_raw=True)
    except NotImplementedError:  # a model without structured output: ask for JSON and parse it
        return parse_plan((await llm.ainvoke(messages)).text)
    out = cast(dict[str, Any], await structured.ainvoke(messages))  # include_raw: a dict, not the plan
    if out.get("parsing_error") or out.get("parsed") is None:
        raise ValueError(f"the plan did not validate: {out.get('parsing_error')}")
    parsed = out["parsed"]
    return parsed if isinstance(parsed, QueryPlan) else QueryPlan.model_validate(parsed)


def parse_plan(text: str) -> QueryPlan:
    """A plan from an LLM's JSON reply (a fenced block or the outermost object); ValueError if invalid."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("the reply holds no JSON object")
    try:
        return QueryPlan.model_validate(json.loads(text[start : end + 1]))
    except (json.JSONDecodeError, ValidationError) as error:
        raise ValueError(f"the reply is not a valid plan: {error}") from None


def simple_plan(request: str) -> QueryPlan:
    """One query: the request as written."""
    return QueryPlan(
        intent=request[:200], queries=[PlannedQuery(text=request, purpose="the request as written")]
    )


def capped(planned: Planned, context: Context) -> Planned:
    """At most `max_plan_queries` queries, the most important first; placeholders mark the plan multi-hop."""
    plan = planned.plan
    queries = sorted(plan.queries, key=lambda q: q.priority)  # stable: the planner's order within a priority
    if len(queries) > context.max_plan_queries:
        planned.notes.append(
            f"the plan had {len(queries)} queries; ran the {context.max_plan_queries} most important"
        )
        queries = queries[: context.max_plan_queries]
    strategy = "multi_hop" if any(q.placeholders for q in queries) else plan.search_strategy
    planned.plan = plan.model_copy(update={"queries": queries, "search_strategy": strategy})
    return planned


def _within_facets(planned: Planned, facets: Facets | None) -> Planned:
    """The plan with only filters some document can satisfy, each value as the documents store it (a year
    asked as "2024" filters on 2024 when that is how it is tagged); what was dropped is noted."""
    if facets is None:
        return planned
    plan, kept = planned.plan, {}
    for key, value in plan.filters.items():
        stored = _stored_values(key, value if isinstance(value, list) else [value], facets)
        if stored:
            kept[key] = stored if isinstance(value, list) else stored[0]
        else:
            planned.notes.append(f"no document is tagged {key}={value!r}: searched without that filter")
    queries = []
    for query in plan.queries:
        category = (
            _stored_values("category", [query.category], facets) if query.category is not None else None
        )
        if query.category is not None and not category:
            planned.notes.append(
                f"no document is tagged category={query.category!r}: searched every category"
            )
        queries.append(query.model_copy(update={"category": category[0] if category else None}))
    strategy = plan.search_strategy
    if strategy == "filtered" and not kept and all(q.category is None for q in queries):
        strategy = "simple"
    planned.plan = plan.model_copy(update={"filters": kept, "queries": queries, "search_strategy": strategy})
    return planned


def _stored_values(key: str, values: list[Any], facets: Facets) -> list[Any]:
    """`values` as the documents store them under `key`: a listed value matched by its text (case aside),
    or, where the key has more values than were listed, the value as given; [] when none can match."""
    if key not in facets:
        return []
    listed = {str(v).lower(): v for v in facets[key]}
    complete = len(facets[key]) < FACET_VALUES
    matched = [listed.get(str(v).lower(), None if complete else v) for v in values]
    return [v for v in matched if v is not None]


def _describe(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    return type(error).__name__
