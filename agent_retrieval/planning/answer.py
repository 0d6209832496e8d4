"""Answers grounded in retrieved passages: an LLM's answer citing chunk ids, or offline an extractive one.

Retrieved text reaches the model only as quoted data inside <passage> tags that it cannot close (see
quoting.py), and the answer's citations are checked against the passages it was given.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from agent_retrieval.context import Context
from agent_retrieval.core.prompts import load_prompt
from agent_retrieval.core.quoting import element, passage, passages, quote, quote_id
from agent_retrieval.core.text import keyword_terms, shorten
from agent_retrieval.models import Hit
from agent_retrieval.planning.links import names
from agent_retrieval.search.confidence import is_low

log = logging.getLogger(__name__)

NOT_FOUND = "The documents I found do not answer this."
NOTHING_FOUND = (
    "I found nothing in the documents about this. Try other words, or check that the documents were ingested."
)
PROBABLY_NOT_COVERED = "The documents probably do not cover this question"  # said where confidence is low
ANSWER_SENTENCES = 6  # an offline answer's sentences: what three passages' two sentences each were before
SENTENCE_CHARS = 600  # per sentence shown: text without full stops is one long "sentence"
PASSAGE_CHARS = 4000  # per passage: enough for a chunk, bounded for a pasted giant
# An id is at most 512 characters, and shown with character references (&#x...;) it may be longer.
_CITATION = re.compile(r"\[([^\[\]\n]{1,6000})\]")
_SEPARATOR = re.compile(r"[,;]")
_PAST_SEPARATOR = re.compile(r"\s*[,;]?\s*")  # anchored where an id ends: white space and one separator
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
# Markup an extracted sentence should not carry: heading marks, emphasis and code marks, list bullets and task
# boxes, HTML tags, and wiki macros such as {tab} or {caution:title=Note}.
_MARKUP = re.compile(
    r"(?m)^#{1,6}\s+|\*\*|__|`|^[ \t]*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?|\[[ xX]\]\s+|</?[A-Za-z][^<>]*>"
    r"|\{[a-z][\w-]*(?::[^{}]*)?\}"
)
_LINK = re.compile(r"\[([^\[\]]+)\]\([^()]*\)")  # [text](url): the text


@dataclass
class Answer:
    """An answer, the chunk ids it cites (all among the passages it was given), and how it was made."""

    text: str
    citations: list[str]
    mode: Literal["llm", "extractive", "nothing_found"]
    notes: list[str] = field(default_factory=list)


def format_passages(hits: list[Hit], max_chars: int = PASSAGE_CHARS) -> str:
    """Hits as one <passages> block: per hit the id to cite, where it comes from, and its text, all quoted."""
    return passages(
        passage(hit.content[:max_chars], id=hit.id, source=hit.heading_path or hit.title) for hit in hits
    )


async def write_answer(
    question: str,
    hits: list[Hit],
    llm: BaseChatModel | None,
    context: Context,
    *,
    confidence: float | None = None,
) -> Answer:
    """The answer to `question` from `hits` (chunks, best first), told how likely it is that the documents
    answer it (`confidence`, confidence.py). Never raises for LLM failures."""
    if not hits:
        return Answer(NOTHING_FOUND, [], "nothing_found")
    if llm is None:
        return extractive_answer(
            question,
            hits,
            "no chat model configured: an extractive answer (the best "
            "passages, cited) instead of a written one",
            confidence=confidence,
        )
    told = _retrieval_note(confidence)
    messages = [
        SystemMessage(load_prompt("answer")),
        HumanMessage(f"{element('question', quote(question))}\n\n{told}{format_passages(hits)}"),
    ]
    try:
        reply = await asyncio.wait_for(llm.ainvoke(messages), context.chat_timeout_seconds)
        text = reply.text.strip()
    except Exception as error:
        log.warning("answer generation failed (%s); answering extractively", type(error).__name__)
        reason = "timed out" if isinstance(error, TimeoutError) else type(error).__name__
        failed = f"the answer model failed ({reason}): an extractive answer"
        return extractive_answer(question, hits, failed, confidence=confidence)
    if not text:
        empty = "the answer model replied with nothing: an extractive answer"
        return extractive_answer(question, hits, empty, confidence=confidence)
    citations, unknown = cited_ids(text, hits)
    notes = []
    if unknown:
        notes.append(f"the answer cites ids that were not among its passages: {', '.join(unknown[:5])}")
    if not citations and NOT_FOUND.lower() not in text.lower():
        notes.append("the answer cites no passage")
    return Answer(text, citations, "llm", notes)


def cited_ids(text: str, hits: list[Hit]) -> tuple[list[str], list[str]]:
    """The passage ids an answer cites in [brackets], and bracketed id-like strings that match no passage.

    A citation may copy the id as the passage showed it (quoting.quote_id) or as stored; either way the
    stored id is returned. Known ids are matched whole, so an id holding ',' or ';' is still one citation.
    """
    if not hits:
        return [], []
    forms = {hit.id: hit.id for hit in hits} | {quote_id(hit.id): hit.id for hit in hits}
    alternatives = "|".join(re.escape(form) for form in sorted(forms, key=len, reverse=True))
    known = re.compile(rf"(?:{alternatives})(?=\s*(?:[,;]|$))")
    cited: list[str] = []
    unknown: list[str] = []
    for group in _CITATION.findall(text):
        group, position = group.strip(), 0
        while position < len(group):
            if match := known.match(group, position):
                cited.append(forms[match.group()])
                position = match.end()
            else:
                separator = _SEPARATOR.search(group, position)
                end = separator.start() if separator else len(group)
                item = group[position:end].strip()
                if "#" in item or "/" in item:  # shaped like a chunk id, but not one it was given
                    unknown.append(item)
                position = end
            position = _PAST_SEPARATOR.match(group, position).end()  # type: ignore[union-attr]  # matches ""
    return list(dict.fromkeys(cited)), list(dict.fromkeys(unknown))


def _retrieval_note(confidence: float | None) -> str:
    """What the answer model is told of the search's confidence ("" when unknown)."""
    if confidence is None:
        return ""
    if is_low(confidence):
        said = f"the documents probably do not answer the question (confidence {confidence:.2f})"
    else:  # not low is not "probably answers": a paraphrased question scores low when its answer is stored
        said = f"confidence that the documents answer the question: {confidence:.2f}"
    return f"{element('retrieval', quote(said))}\n\n"


def extractive_answer(
    question: str, hits: list[Hit], note: str, *, confidence: float | None = None
) -> Answer:
    """The sentences of the passages that best answer the question (`answer_sentences`), grouped by passage
    in the passages' order and each group cited. Where the search's confidence is low it says the documents
    probably do not cover the question, and offers the passages as the closest, never as the answer."""
    chosen: dict[int, list[str]] = {}
    for place, sentence in answer_sentences(question, hits):
        chosen.setdefault(place, []).append(sentence)
    lines = [f"- {' '.join(chosen[place])} [{hits[place].id}]" for place in sorted(chosen)]
    opening = "These passages best match the question:"
    if is_low(confidence):
        opening = f"{PROBABLY_NOT_COVERED} (confidence {confidence:.2f}). The closest passages:"
    text = opening + "\n" + "\n".join(lines)
    return Answer(text, [hits[place].id for place in sorted(chosen)], "extractive", [note])


def answer_sentences(question: str, hits: list[Hit], count: int = ANSWER_SENTENCES) -> list[tuple[int, str]]:
    """The `count` sentences of the passages that best answer the question, as (passage place, sentence) in
    reading order. A sentence scores the question's words it holds, each weighted by how rare it is among
    these sentences (idf), less a point per place its passage stands below the first. After the best one,
    the names that sentence holds count too: the answer to a multi-hop question is often in the sentence
    about what the first one names ("... created by Y" then "Y married Z")."""
    candidates = [
        (place, n, sentence, set(keyword_terms(sentence)))
        for place, hit in enumerate(hits)
        for n, sentence in enumerate(_sentences(hit.content))
    ]
    asked = set(keyword_terms(question))
    weights = _rarity(asked, candidates)
    chosen: list[tuple[int, int, str, set[str]]] = []
    while candidates and len(chosen) < count:
        best = max(candidates, key=lambda c: (sum(weights.get(t, 0.0) for t in c[3]) - c[0], -c[0], -c[1]))
        candidates.remove(best)
        if not chosen:  # the best sentence's names lead on
            named = {t for name in names(best[2]) for t in keyword_terms(name)} - asked
            weights = _rarity(named, candidates) | weights
        chosen.append(best)
    return [(place, shorten(sentence, SENTENCE_CHARS)) for place, _, sentence, _ in sorted(chosen)]


def _rarity(terms: set[str], candidates: list[tuple[int, int, str, set[str]]]) -> dict[str, float]:
    """Each term's idf among the candidate sentences."""
    held = Counter(t for candidate in candidates for t in candidate[3] & terms)
    return {t: math.log((len(candidates) + 1) / (held[t] + 0.5)) for t in terms}


def _sentences(content: str) -> list[str]:
    plain = " ".join(_MARKUP.sub(" ", _LINK.sub(r"\1", content)).split())
    return [s.strip() for s in _SENTENCE.split(plain) if s.strip()]
