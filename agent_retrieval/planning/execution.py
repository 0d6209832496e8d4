"""Running a plan: by priority, concurrently within a hop, placeholders filled from earlier hops,
reading on from the best hits to what they name, and results fused across queries with each hit
remembering which queries found it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from agent_retrieval.context import Context
from agent_retrieval.core.fusion import rrf
from agent_retrieval.core.prompts import load_prompt
from agent_retrieval.core.quoting import clean, element, quote, unquote
from agent_retrieval.core.text import entity_matches
from agent_retrieval.errors import AgentRetrievalError
from agent_retrieval.models import (
    MAX_TOP_K,
    ChunkSearchRequest,
    Hit,
    Level,
    SearchRequest,
    parse_request,
)
from agent_retrieval.planning.answer import format_passages
from agent_retrieval.planning.links import (
    bridge_names,
    carried,
    compared,
    compares_through,
    find_links,
    find_titled,
    given_names,
    mentions,
    relations,
    shorter_form,
)
from agent_retrieval.planning.planners import Planned, capped
from agent_retrieval.planning.schema import MAX_ENTITY_CHARS, PLACEHOLDER, PlannedQuery, QueryPlan
from agent_retrieval.search.retrieval import Retrieval

log = logging.getLogger(__name__)


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
    confidence: float | None = None  # that the store answers this search (confidence.py)

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

    @property
    def confidence(self) -> float | None:
        """That the store answers the question: the most confident of the plan's searches (None if none
        knows)."""
        return max((s.confidence for s in self.searches if s.confidence is not None), default=None)

    def place(self, level: Level, hits: list[Hit]) -> None:
        """Put `hits` in the place of the level's hits (reading on reorders and adds to them)."""
        if level == "chunks":
            self.chunks = hits
        else:
            self.documents = hits


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
    planned = capped(Planned(plan, "llm"), context)  # a plan from a thread's state may hold any number
    plan = planned.plan
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
        planned.notes,
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
        confidence=result.confidence,
    ), result.hits


LINK_SOURCES = 3  # the best hits read on from: what they lead to comes right after them
SOURCE_DEPTH = 5  # how far down the hits a chain's start (one holding the question's names) is sought
LINK_LOOKUPS = 8  # names looked up as titles per round
BRIDGE_NAMES = 3  # names per source searched beside the question, each a query
READING_ON = "documents the best hits lead to"  # the purpose of a reading-on hop's Search
COMPARED = "the things the question compares"  # the purpose of looking up what a comparison names
NAMED = "the documents the question names by title"  # the purpose of looking up what any question names


async def _follow_links(run: PlanRun, retrieval: Retrieval, *, first_hop: int) -> None:
    """Multi-hop without a chat model. Each round of the hops a plan left reads on from its best hits that
    hold what the question names (then from what the round before found): to the documents they name by
    title, then to the best hit of the question searched with a name they introduce (links.py). It takes
    as many rounds as the question nests relations beyond the first, which its own searches answer. What a
    round finds, at most `follow_links` documents, is placed after what it was read from and leaves its
    place further down: a document named by title right after the passage naming it (a chain stays
    together, so the top few hold whole chains), one reached through a name after all the sources. It is
    added to the plan's hits, never in place of one: a round makes the list at most `follow_links` longer.
    Each round is recorded as a search and in the notes. A question comparing two things it names puts the
    documents titled by them first; it is not read on from (what it needs is what it names), unless it
    compares what they lead to ("the director of X or of Y"): then it reads on from both. Any other
    question puts the documents it names by title first too ("the author of The Canon of Medicine": one
    end of its chain), then reads on."""
    context, plan = retrieval.context, run.plan
    level: Level = "chunks" if run.chunks else "documents"
    question = min(plan.queries, key=lambda q: q.priority).text
    lead: list[Hit] = []  # the compared things, each read on from on its own
    given = list(dict.fromkeys(given_names(question, "")))[:LINK_LOOKUPS]  # a question's own bound
    if names := compared(question):
        try:
            lead = await _titled_first(run, names, question, level, retrieval, COMPARED)
        except AgentRetrievalError as error:
            run.notes.append(f"looking up what the question compares failed: {error}")
        if not compares_through(question):
            run.notes.append(
                "no reading on: the question compares what it names, and its searches read those"
            )
            return
    elif given:
        # A document the question names by title ("the author of The Canon of Medicine") starts its chain.
        try:
            await _titled_first(run, given, question, level, retrieval, NAMED)
        except AgentRetrievalError as error:
            run.notes.append(f"looking up what the question names failed: {error}")
    asked = " ".join(q.text for q in plan.queries)
    sources = _chain_starts(run.chunks or run.documents, given)
    ahead = {hit.document_id for hit in sources}  # never read on to: the sources, and earlier rounds' finds
    # As many rounds as the question nests relations beyond the one its own searches answer, within max_hops:
    # a round more than a chain needs only pushes its passages down.
    last = min(context.max_hops, first_hop + max(1, relations(question) - 1))
    for hop in range(first_hop, last):
        try:
            if lead and hop == first_hop:  # each side of a comparison with lookups of its own
                sides = await asyncio.gather(
                    *(_read_on([s], question, asked, level, retrieval, plan.filters, ahead) for s in lead)
                )
                found = _alternated(sides)
            else:
                found = await _read_on(sources, question, asked, level, retrieval, plan.filters, ahead)
        except AgentRetrievalError as error:
            run.notes.append(f"following links stopped: {error}")
            return
        # What the question's own searches ranked too comes first, best first: a document both read on to
        # and found by the question is likelier needed, and moving it up pushes nothing out of the top k.
        ranked = dict.fromkeys(hit.document_id for hit in run.chunks or run.documents)
        place = {document_id: n for n, document_id in enumerate(ranked)}
        found = sorted(found, key=lambda pair: place.get(pair[1].document_id, len(place)))
        found = found[: context.follow_links]
        if not found:
            return
        reached = [hit for _, hit in found]
        ahead |= {hit.document_id for hit in reached}
        run.place(level, _placed_after(run.chunks or run.documents, found))
        run.searches.append(Search(question, level, READING_ON, hop, "ran", [h.id for h in reached]))
        run.notes.append(f"hop {hop + 1}: read on to {len(found)} document(s) the best passages name")
        sources = reached


def _chain_starts(hits: list[Hit], given: list[str]) -> list[Hit]:
    """The hits to read on from: the first LINK_SOURCES of the best SOURCE_DEPTH that hold a name the question
    gives (`given`), since a chain starts at what the question names (a passage sharing only its other words
    leads elsewhere); the first LINK_SOURCES when none does, or the question names nothing."""
    starts = [hit for hit in hits[:SOURCE_DEPTH] if any(mentions(hit, name) for name in given)]
    return (starts or hits)[:LINK_SOURCES]


async def _titled_first(
    run: PlanRun, names: list[str], question: str, level: Level, retrieval: Retrieval, why: str
) -> list[Hit]:
    """The documents the names are titles of, first (at the chunk level, each at its best passage for the
    question), scored as the best hit and no longer further down; recorded as a search for `why`."""
    titled = await find_titled(names, retrieval.store, filters=run.plan.filters)
    if not titled:
        return []
    hits = await _best_passages(titled, question, retrieval) if level == "chunks" else titled
    listed = run.chunks or run.documents
    first = {hit.key: hit for hit in listed}
    top = listed[0].score if listed else 0.0
    lead = [_moved(hit, first, top, why) for hit in hits]
    run.place(level, lead + [hit for hit in listed if hit.key not in {h.key for h in lead}])
    run.searches.append(Search(" | ".join(names), level, why, None, "ran", [h.id for h in lead]))
    return lead


def _alternated(sides: Sequence[list[tuple[Hit, Hit]]]) -> list[tuple[Hit, Hit]]:
    """Each side's first find, then each one's second, ..., each document once."""
    taken: set[str] = set()
    alternated = []
    for row in itertools.zip_longest(*sides):
        for pair in row:
            if pair is not None and pair[1].document_id not in taken:
                taken.add(pair[1].document_id)
                alternated.append(pair)
    return alternated


async def _read_on(
    sources: list[Hit],
    question: str,
    asked: str,
    level: Level,
    retrieval: Retrieval,
    filters: dict[str, Any],
    ahead: set[str],
) -> list[tuple[Hit, Hit]]:
    """Hits of the documents `sources` lead to, each with the source it was reached from, none of them in
    `ahead`: those they name by title first (at the chunk level, each one's best passage for the question),
    then for each name they introduce the best hit of the question searched with it that holds the name."""
    named = await find_links(
        sources, asked, retrieval.store, exclude=ahead, filters=filters, max_lookups=LINK_LOOKUPS
    )
    found = named
    if named and level == "chunks":
        passages = await _best_passages([hit for _, hit in named], question, retrieval)
        best = {hit.document_id: hit for hit in passages}
        found = [(source, best[hit.document_id]) for source, hit in named if hit.document_id in best]
    taken = ahead | {hit.document_id for _, hit in named}
    wanted = [
        (name, carried(question, source, name))
        for source in sources
        for name in bridge_names(source, asked, per_source=BRIDGE_NAMES)
    ]
    model = ChunkSearchRequest if level == "chunks" else SearchRequest
    # Bridge queries embed as written and are not reranked: a model call for each would multiply a
    # question's calls.
    searches = [
        retrieval.asearch(
            parse_request(model, {"query": query, "top_k": 10, "filters": filters, "hyde": "off"}),
            level,
            rerank=False,
        )
        for _, query in wanted
    ]
    for (name, _), result in zip(wanted, await asyncio.gather(*searches), strict=True):
        # the best hit holding the name, else its shorter form: "South Carolina" for "South Carolina Senate"
        fresh = [hit for hit in result.hits if hit.document_id not in taken]
        forms = filter(None, (name, shorter_form(name)))
        if hit := next((h for form in forms for h in fresh if mentions(h, form)), None):
            taken.add(hit.document_id)
            # A weaker lead than a title: placed after all the sources, not inside the chain of one.
            found.append((sources[-1], hit))
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


def _placed_after(hits: list[Hit], found: list[tuple[Hit, Hit]]) -> list[Hit]:
    """`hits` with each found hit right after the hit it was read from (after the last when that one is not
    listed), scored as it, and no longer further down: a chain's documents stay together. Nothing is cut:
    what reading on finds is added to the passages, and never takes the place of one the plan's own
    searches found."""
    listed, moved = {hit.key: hit for hit in hits}, {hit.key for _, hit in found}
    kept = [hit for hit in hits if hit.key not in moved]
    after: dict[tuple[str, str] | None, list[Hit]] = {}
    for source, hit in found:
        at = source.key if source.key in listed and source.key not in moved else None
        after.setdefault(at, []).append(hit)

    placed: list[Hit] = []
    for hit in kept:
        placed += [hit, *(_moved(f, listed, hit.score, READING_ON) for f in after.get(hit.key, []))]
    last = placed[-1].score if placed else 0.0
    return placed + [_moved(f, listed, last, READING_ON) for f in after.get(None, [])]


def _moved(hit: Hit, listed: dict[tuple[str, str], Hit], score: float, why: str) -> Hit:
    """`hit` placed by reading on, scored `score`; one the plan's searches had found (in `listed`) keeps
    saying so: it was only moved."""
    queries = [*(listed[hit.key].queries if hit.key in listed else []), why]
    return replace(hit, score=score, queries=queries)


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
