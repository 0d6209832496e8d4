"""Query plans: what a plan is (QueryPlan, the schema an LLM's structured output fills), making one from a
request (by that LLM, or heuristics offline), and running it: by priority, concurrently within a hop,
multi-hop placeholders filled from earlier hops, results fused across queries with each hit remembering
which queries found it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field, ValidationError, field_validator

from agent_retrieval.answer import format_passages
from agent_retrieval.context import Context
from agent_retrieval.errors import AgentRetrievalError
from agent_retrieval.fusion import rrf
from agent_retrieval.links import bridge_names, compares, find_links, holds
from agent_retrieval.models import (
    MAX_TOP_K,
    ChunkSearchRequest,
    Hit,
    Level,
    SearchRequest,
    parse_request,
    validate_filters,
)
from agent_retrieval.prompts import load_prompt
from agent_retrieval.quoting import clean, element, quote, quote_json, unquote
from agent_retrieval.retrieval import Retrieval
from agent_retrieval.stores.base import FACET_VALUES, MetadataValue
from agent_retrieval.text import AUXILIARY, AUXILIARY_VERBS, entity_matches
from agent_retrieval.validation import MAX_QUERY_CHARS, check_question, one_line

log = logging.getLogger(__name__)

MAX_ENTITY_CHARS = 80
MAX_PURPOSE_CHARS = 200  # a plan's intent and a query's purpose: a few words, shown and prompted
Facets = dict[str, list[MetadataValue]]  # Store.metadata_values: each key the documents carry, its values


def check_request(request: str) -> str:
    """The request, held to the question rule every entry point shares (validation.QUESTION), with its
    white space made single spaces; or InvalidRequest saying what is allowed."""
    return one_line(check_question(request))


# --- the plan schema: what the planner's LLM fills in -------------------------------------------


SearchStrategy = Literal["simple", "expanded", "decomposed", "multi_hop", "filtered"]
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z][A-Za-z0-9_]{0,39})\s*\}\}")


class PlannedQuery(BaseModel):
    """One search of a plan. `{{NAME}}` in `text` is filled from an earlier hop (multi-hop plans)."""

    text: str = Field(
        description="The search text: a declarative statement or keywords, not a question. "
        "May hold a {{PLACEHOLDER}} that an earlier query's results resolve."
    )
    target: Level = Field(
        "chunks",
        description="'chunks' for passages that answer; 'documents' to find "
        "which whole documents are relevant.",
    )
    category: str | None = Field(
        None,
        description="A value of the documents' `category` metadata to "
        "search within, or null for every category.",
    )
    purpose: str = Field("", description="What this query is meant to find, in a few words.")
    priority: int = Field(1, ge=1, le=5, description="1 (run first, most important) to 5.")
    resolves: str | None = Field(
        None,
        description="For multi-hop: the PLACEHOLDER name (without braces) "
        "that this query's results name, e.g. COMPANY.",
    )

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        value = " ".join(value.split())
        if not value:
            raise ValueError("must not be empty")
        return value[:MAX_QUERY_CHARS]

    @field_validator("purpose")
    @classmethod
    def _purpose(cls, value: str) -> str:
        return one_line(value)[:MAX_PURPOSE_CHARS]

    @field_validator("resolves")
    @classmethod
    def _resolves(cls, value: str | None) -> str | None:
        value = (value or "").strip().strip("{}").strip() or None
        if value is not None and not PLACEHOLDER.fullmatch("{{" + value + "}}"):
            raise ValueError("must be a placeholder name: a letter, then letters, digits or '_'")
        return value

    @property
    def placeholders(self) -> list[str]:
        return list(dict.fromkeys(PLACEHOLDER.findall(self.text)))


class QueryPlan(BaseModel):
    """How to search for one request: the queries to run, shared filters, and the strategy."""

    intent: str = Field(description="A short description of what the user is looking for.")
    queries: list[PlannedQuery] = Field(
        min_length=1, description="The searches to run, most important first."
    )
    filters: dict[str, Any] = Field(
        default_factory=dict,
        description='Metadata filters every query applies, e.g. {"year": 2024}; {} for none.',
    )
    search_strategy: SearchStrategy = Field(
        "simple",
        description="simple: one direct query; expanded: "
        "rephrasings; decomposed: one query per sub-question; multi_hop: "
        "later queries need names found by earlier ones; filtered: "
        "metadata filters narrow the search.",
    )

    @field_validator("intent")
    @classmethod
    def _intent(cls, value: str) -> str:
        return one_line(value)[:MAX_PURPOSE_CHARS]

    @field_validator("filters", mode="before")
    @classmethod
    def _filters(cls, value: Any) -> dict[str, Any]:
        return validate_filters(value or None) or {}


# --- planning -----------------------------------------------------------------------------------


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
        return _capped(_within_facets(planned, facets), context)
    try:
        plan = await asyncio.wait_for(_llm_plan(request, context, llm, facets), context.chat_timeout_seconds)
    except Exception as error:  # a timeout, a provider error, or output that is not a valid plan
        log.warning("planner failed (%s); searching the request as written", type(error).__name__)
        return Planned(
            simple_plan(request),
            "fallback",
            [f"planner failed ({_describe(error)}): searched the request as written"],
        )
    return _capped(_within_facets(Planned(plan, "llm"), facets), context)


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


def _capped(planned: Planned, context: Context) -> Planned:
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


# --- the heuristic planner (offline) -------------------------------------------------------------

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


# --- running a plan -----------------------------------------------------------------------------


@dataclass
class Search:
    """One planned query as it ran: the text searched (placeholders filled), and how it went."""

    query: str
    target: Level
    purpose: str
    hop: int | None
    status: Literal["ran", "failed", "skipped"]
    hit_ids: list[str] = field(default_factory=list)
    hyde: str = "off"
    rerank: str = "off"
    degraded: list[str] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PlanRun:
    """Everything a plan found: hits fused across its queries per level, and an account of each search."""

    plan: QueryPlan
    searches: list[Search]
    documents: list[Hit]
    chunks: list[Hit]
    resolved: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


async def run_plan(
    plan: QueryPlan,
    retrieval: Retrieval,
    *,
    top_k: int,
    llm: BaseChatModel | None = None,
    relax_filters: bool = True,
) -> PlanRun:
    """Run a plan's queries hop by hop and fuse what they find; no query failure fails the run.

    Each hop runs, concurrently, every query whose placeholders are all filled; the placeholders its
    results name are then resolved for the next hop. Queries still waiting after `max_hops` hops (or in a
    loop of placeholders) are skipped and say why. With `relax_filters`, a filtered plan that finds
    nothing is run again without its filters (planner-chosen filters can be wrong), and says so.
    """
    context = retrieval.context
    capped = _capped(Planned(plan, "llm"), context)  # a plan from a thread's state may hold any number
    plan = capped.plan
    waiting, resolved = list(plan.queries), dict[str, str]()
    declared = {q.resolves for q in plan.queries}
    ran: list[tuple[PlannedQuery, Search, list[Hit]]] = []
    hops = 0
    for hop in range(context.max_hops):
        ready = [q for q in waiting if all(name in resolved for name in q.placeholders)]
        if not ready:
            break
        waiting = [q for q in waiting if q not in ready]
        outcomes = await asyncio.gather(
            *(_search(q, plan.filters, resolved, hop, retrieval, top_k) for q in ready)
        )
        ran += [(q, *outcome) for q, outcome in zip(ready, outcomes, strict=True)]
        hops = hop + 1
        needed = {name for q in waiting for name in q.placeholders} - resolved.keys()
        for name in sorted(needed):
            # A placeholder some query declares it resolves is filled by that query alone; otherwise by
            # whatever this hop found.
            sources = [
                (q, hits) for q, _, hits in ran[-len(ready) :] if q.resolves == name or name not in declared
            ]
            value = await resolve_placeholder(name, sources, llm, context)
            if value:
                resolved[name] = value
    skipped = [
        Search(
            q.text, q.target, q.purpose, None, "skipped", note=_unresolved_note(q, resolved, context.max_hops)
        )
        for q in waiting
    ]
    run = PlanRun(
        plan,
        [s for _, s, _ in ran] + skipped,
        _fuse(ran, "documents", top_k, context),
        _fuse(ran, "chunks", top_k, context),
        resolved,
        capped.notes,
    )
    if context.follow_links and hops < context.max_hops:
        await _follow_links(run, retrieval, first_hop=hops)
    if relax_filters and plan.filters and not (run.documents or run.chunks):
        relaxed = await run_plan(
            plan.model_copy(update={"filters": {}}), retrieval, top_k=top_k, llm=llm, relax_filters=False
        )
        relaxed.notes.insert(0, f"the filters {plan.filters} matched nothing: searched without them")
        return relaxed
    return run


async def _search(
    query: PlannedQuery,
    filters: dict[str, Any],
    resolved: dict[str, str],
    hop: int,
    retrieval: Retrieval,
    top_k: int,
) -> tuple[Search, list[Hit]]:
    text = PLACEHOLDER.sub(lambda m: resolved[m.group(1)], query.text)
    scope = {**filters, **({"category": query.category} if query.category else {})}
    model = ChunkSearchRequest if query.target == "chunks" else SearchRequest
    try:
        request = parse_request(model, {"query": text, "top_k": min(MAX_TOP_K, 2 * top_k), "filters": scope})
        result = await retrieval.asearch(request, query.target)
    except AgentRetrievalError as error:
        return Search(text, query.target, query.purpose, hop, "failed", note=str(error)), []
    return Search(
        text,
        query.target,
        query.purpose,
        hop,
        "ran",
        [h.id for h in result.hits],
        result.hyde,
        result.rerank,
        result.degraded,
    ), result.hits


LINK_SOURCES = 3  # the best hits read on from: what they lead to comes right after them
LINK_LOOKUPS = 8  # names looked up as titles per round
BRIDGE_NAMES = 3  # names per source searched beside the question, each a query
READING_ON = "documents the best hits lead to"  # the purpose of a reading-on hop's Search


async def _follow_links(run: PlanRun, retrieval: Retrieval, *, first_hop: int) -> None:
    """Multi-hop without a chat model. Each round of the hops a plan left reads on from its best hits (then
    from what the round before found): to the documents they name by title, then to the best hit of the
    question searched with a name they introduce (links.py). What a round finds, at most `follow_links`
    documents, comes right after the hits it was read from, so the question's own best three stay first,
    and leaves its place further down. It is added to the plan's hits, never in place of one: a round makes
    the list at most `follow_links` longer. Each round is recorded as a search and in the notes. A question
    comparing what it names is not read on from: what it needs is what it names."""
    context, plan = retrieval.context, run.plan
    level: Level = "chunks" if run.chunks else "documents"
    question = min(plan.queries, key=lambda q: q.priority).text
    if compares(question):
        run.notes.append("no reading on: the question compares what it names, and its searches read those")
        return
    asked = " ".join(q.text for q in plan.queries)
    sources = (run.chunks or run.documents)[:LINK_SOURCES]
    ahead = {hit.document_id for hit in sources}  # never read on to: the sources, and earlier rounds' finds
    for hop in range(first_hop, context.max_hops):
        try:
            found = await _read_on(sources, question, asked, level, retrieval, plan.filters, ahead)
        except AgentRetrievalError as error:
            run.notes.append(f"following links stopped: {error}")
            return
        # What the question's own searches ranked too comes first, best first: a document both read on to
        # and found by the question is likelier needed, and moving it up pushes nothing out of the top k.
        ranked = dict.fromkeys(hit.document_id for hit in run.chunks or run.documents)
        place = {document_id: n for n, document_id in enumerate(ranked)}
        found = sorted(found, key=lambda hit: place.get(hit.document_id, len(place)))[: context.follow_links]
        if not found:
            return
        ahead |= {hit.document_id for hit in found}
        placed = _placed_after(run.chunks or run.documents, found, sources)
        run.chunks, run.documents = (placed, run.documents) if level == "chunks" else (run.chunks, placed)
        run.searches.append(Search(question, level, READING_ON, hop, "ran", [h.id for h in found]))
        run.notes.append(f"hop {hop + 1}: read on to {len(found)} document(s) the best passages name")
        sources = found


async def _read_on(
    sources: list[Hit],
    question: str,
    asked: str,
    level: Level,
    retrieval: Retrieval,
    filters: dict[str, Any],
    ahead: set[str],
) -> list[Hit]:
    """Hits of the documents `sources` lead to, none of them in `ahead`: those they name by title first
    (at the chunk level, each one's best passage for the question), then for each name they introduce the
    best hit of the question searched with it that holds the name."""
    named = await find_links(
        sources, asked, retrieval.store, exclude=ahead, filters=filters, max_lookups=LINK_LOOKUPS
    )
    found = await _best_passages(named, question, retrieval) if named and level == "chunks" else named
    taken = ahead | {hit.document_id for hit in named}
    wanted = [name for source in sources for name in bridge_names(source, asked, per_source=BRIDGE_NAMES)]
    model = ChunkSearchRequest if level == "chunks" else SearchRequest
    # Bridge queries embed as written and are not reranked: a model call for each would multiply a
    # question's calls.
    searches = [
        retrieval.asearch(
            parse_request(
                model, {"query": f"{question} {name}", "top_k": 10, "filters": filters, "hyde": "off"}
            ),
            level,
            rerank=False,
        )
        for name in wanted
    ]
    for name, result in zip(wanted, await asyncio.gather(*searches), strict=True):
        for hit in result.hits:
            if hit.document_id not in taken and holds(f"{hit.title} {hit.content}", name):
                taken.add(hit.document_id)
                found.append(hit)
                break
    return found


async def _best_passages(documents: list[Hit], question: str, retrieval: Retrieval) -> list[Hit]:
    """Each document's passage that best answers the question, or its opening when none matches it."""
    ids = [hit.document_id for hit in documents]
    request = parse_request(
        ChunkSearchRequest, {"query": question, "top_k": min(MAX_TOP_K, 2 * len(ids)), "document_ids": ids}
    )
    best: dict[str, Hit] = {}
    for hit in (await retrieval.asearch(request, "chunks", rerank=False)).hits:
        best.setdefault(hit.document_id, hit)
    for missing in [i for i in ids if i not in best]:
        best.update({hit.document_id: hit for hit in await retrieval.store.adocument_chunks([missing], 1)})
    return [best[i] for i in ids if i in best]


def _placed_after(hits: list[Hit], found: list[Hit], sources: list[Hit]) -> list[Hit]:
    """`hits` with `found` right after the last of `sources` (at the end if none is there), scored as it,
    and no longer further down. Nothing is cut: what reading on finds is added to the passages, and never
    takes the place of one the plan's own searches found."""
    listed, moved, read_from = (
        {hit.key: hit for hit in hits},
        {h.key for h in found},
        {s.key for s in sources},
    )
    kept = [hit for hit in hits if hit.key not in moved]
    at = max((n + 1 for n, hit in enumerate(kept) if hit.key in read_from), default=len(kept))
    score = kept[at - 1].score if at else 0.0
    # a hit the plan's searches had found keeps saying so: reading on only moved it
    read_on = [
        replace(
            hit, score=score, queries=[*(listed[hit.key].queries if hit.key in listed else []), READING_ON]
        )
        for hit in found
    ]
    return kept[:at] + read_on + kept[at:]


def _unresolved_note(query: PlannedQuery, resolved: dict[str, str], max_hops: int) -> str:
    missing = [name for name in query.placeholders if name not in resolved]
    return (
        f"skipped: {', '.join('{{' + m + '}}' for m in missing)} not found by an earlier query "
        f"within {max_hops} hop(s)"
    )


def _fuse(
    ran: list[tuple[PlannedQuery, Search, list[Hit]]], level: Level, top_k: int, context: Context
) -> list[Hit]:
    """Reciprocal-rank fusion across queries, each weighing 1 / its priority: the question as asked
    (priority 1) keeps its full weight, and a hit only a rewrite or sub-question found (priority 2) ranks
    below every hit of the question's own list. Each hit lists the queries that found it. Hits are the same
    row when their (tenant, id) is: one tenant's document never stands in for another's of the same id."""
    rankings = {str(n): [h.key for h in hits] for n, (q, _, hits) in enumerate(ran) if q.target == level}
    weights = {str(n): 1.0 / q.priority for n, (q, _, _) in enumerate(ran)}
    scores = rrf(rankings, weights, k=context.rrf_k)
    first: dict[tuple[str, str], Hit] = {}
    found_by: dict[tuple[str, str], list[str]] = {}
    for q, search, hits in ran:
        for hit in hits if q.target == level else []:
            first.setdefault(hit.key, hit)
            found_by.setdefault(hit.key, []).append(search.query)
    ordered = sorted(first, key=lambda i: -scores[i])[:top_k]
    return [replace(first[i], score=scores[i], queries=list(dict.fromkeys(found_by[i]))) for i in ordered]


# --- multi-hop ----------------------------------------------------------------------------------


async def resolve_placeholder(
    name: str, sources: list[tuple[PlannedQuery, list[Hit]]], llm: BaseChatModel | None, context: Context
) -> str | None:
    """The value of {{name}} from earlier results: the LLM reads the top passages (its answer must appear
    in them), else the best hit's `entity` metadata. None if neither names it."""
    hits = [hit for _, found in sources for hit in found[:3]]
    if not hits:
        return None
    if llm is not None:
        purpose = "; ".join(q.purpose for q, _ in sources if q.purpose) or f"the {name} the request is about"
        value = await _llm_entity(name, purpose, hits, llm, context)
        if value:
            return value
    for hit in hits:
        entity = hit.metadata.get("entity")
        if isinstance(entity, str) and entity.strip():
            return _clean_entity(entity)
    return None


async def _llm_entity(
    name: str, purpose: str, hits: list[Hit], llm: BaseChatModel, context: Context
) -> str | None:
    system = load_prompt("entity").replace("{placeholder}", name)
    # The purpose is the planner model's words: quoted data beside the passages, never the instructions.
    asked = element("purpose", quote(purpose)) + "\n\n" + format_passages(hits)
    try:
        reply = await asyncio.wait_for(
            llm.ainvoke([SystemMessage(system), HumanMessage(asked)]), context.chat_timeout_seconds
        )
    except Exception as error:
        log.warning("placeholder resolution failed (%s); trying entity metadata", type(error).__name__)
        return None
    # The model read the passages quoted (look-alikes folded, '<' as '&lt;') and may copy either form.
    value = _clean_entity(unquote(reply.text.strip().splitlines()[0]) if reply.text.strip() else "")
    # Only a name the passages contain: an invented or injected value must not steer the next search.
    passages = "\n".join(clean(h.content) for h in hits)
    if not value or value.upper() == "NONE" or not entity_matches(passages, [value]):
        return None
    return value


def _clean_entity(value: str) -> str | None:
    value = " ".join(value.replace("{", " ").replace("}", " ").split()).strip(" .\"'")
    return value[:MAX_ENTITY_CHARS] or None
