"""Answers grounded in retrieved passages: an LLM's answer citing chunk ids, or offline an extractive one.

Retrieved text reaches the model only as quoted data inside <passage> tags that it cannot close, and
the answer's citations are checked against the passages it was given.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from agent_retrieval.context import Context
from agent_retrieval.models import Hit
from agent_retrieval.prompts import load_prompt
from agent_retrieval.stores.base import keyword_terms

log = logging.getLogger(__name__)

NOT_FOUND = "The documents I found do not answer this."
NOTHING_FOUND = ("I found nothing in the documents about this. Try other words, or check that the documents "
                 "were ingested.")
PASSAGE_CHARS = 4000  # per passage: enough for a chunk, bounded for a pasted giant
_CITATION = re.compile(r"\[([^\[\]\n]{1,600})\]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_MARKUP = re.compile(r"(?m)^#{1,6}\s+|\*\*|__|`")


@dataclass
class Answer:
    """An answer, the chunk ids it cites (all among the passages it was given), and how it was made."""

    text: str
    citations: list[str]
    mode: Literal["llm", "extractive", "nothing_found"]
    notes: list[str] = field(default_factory=list)


def format_passages(hits: list[Hit], max_chars: int = PASSAGE_CHARS) -> str:
    """Hits as <passage> blocks: the id to cite, the title, and the text quoted so it cannot close its tag."""
    blocks = []
    for hit in hits:
        where = json.dumps(hit.heading_path or hit.title, ensure_ascii=False)
        blocks.append(f"<passage id={json.dumps(hit.id)} source={where}>\n{quote(hit.content[:max_chars])}\n"
                      "</passage>")
    return "<passages>\n" + "\n".join(blocks) + "\n</passages>"


def quote(text: str, tags: Sequence[str] = ("passage", "passages")) -> str:
    """Text made safe to sit inside the given tags: any tag of those names in it, opening or closing,
    loses its '<', so retrieved text cannot end the block that marks it as data."""
    names = "|".join(re.escape(tag) for tag in tags)
    return re.sub(rf"<(?=\s*/?\s*(?:{names})\b)", "&lt;", text, flags=re.IGNORECASE)


async def write_answer(question: str, hits: list[Hit], llm: BaseChatModel | None, context: Context) -> Answer:
    """The answer to `question` from `hits` (chunks, best first). Never raises for LLM failures."""
    if not hits:
        return Answer(NOTHING_FOUND, [], "nothing_found")
    if llm is None:
        return extractive_answer(question, hits, "no chat model configured: an extractive answer (the best "
                                 "passages, cited) instead of a written one")
    messages = [SystemMessage(load_prompt("answer")),
                HumanMessage(f"<question>\n{question}\n</question>\n\n{format_passages(hits)}")]
    try:
        reply = await asyncio.wait_for(llm.ainvoke(messages), context.chat_timeout_seconds)
        text = reply.text.strip()
    except Exception as error:
        log.warning("answer generation failed (%s); answering extractively", type(error).__name__)
        reason = "timed out" if isinstance(error, TimeoutError) else type(error).__name__
        return extractive_answer(question, hits, f"the answer model failed ({reason}): an extractive answer")
    if not text:
        return extractive_answer(question, hits, "the answer model replied with nothing: an extractive answer")
    citations, unknown = cited_ids(text, hits)
    notes = []
    if unknown:
        notes.append(f"the answer cites ids that were not among its passages: {', '.join(unknown[:5])}")
    if not citations and NOT_FOUND.lower() not in text.lower():
        notes.append("the answer cites no passage")
    return Answer(text, citations, "llm", notes)


def cited_ids(text: str, hits: list[Hit]) -> tuple[list[str], list[str]]:
    """The passage ids an answer cites in [brackets], and bracketed id-like strings that match no passage."""
    known = {hit.id for hit in hits}
    cited: list[str] = []
    unknown: list[str] = []
    for group in _CITATION.findall(text):
        for item in (part.strip() for part in re.split(r"[,;]\s*", group)):
            if item in known:
                cited.append(item)
            elif "#" in item or "/" in item:  # shaped like a chunk id, but not one it was given
                unknown.append(item)
    return list(dict.fromkeys(cited)), list(dict.fromkeys(unknown))


def extractive_answer(question: str, hits: list[Hit], note: str, passages: int = 3) -> Answer:
    """The sentences of the best passages that share most words with the question, each cited."""
    terms = set(keyword_terms(question))
    lines = []
    for hit in hits[:passages]:
        lines.append(f"- {_best_sentences(hit.content, terms)} [{hit.id}]")
    text = "These passages best match the question:\n" + "\n".join(lines)
    return Answer(text, [hit.id for hit in hits[:passages]], "extractive", [note])


def _best_sentences(content: str, terms: set[str], count: int = 2, limit: int = 400) -> str:
    sentences = [s.strip() for s in _SENTENCE.split(" ".join(_MARKUP.sub(" ", content).split())) if s.strip()]
    if not sentences:
        return ""
    scored = sorted(range(len(sentences)),
                    key=lambda i: -len(terms & set(keyword_terms(sentences[i]))))[:count]
    text = " ".join(sentences[i] for i in sorted(scored))  # in reading order
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."
