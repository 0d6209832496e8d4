"""Passages with their neighbours: a chunk hit widened to the chunks around it in its document's reading
order, as one text, for an answer that runs across a chunk's edge or needs the paragraph before."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from agent_retrieval.models import Hit

# Shorter text shared by a chunk's end and the next one's start may be chance ("the" + "e...").
MIN_OVERLAP = 8
_Place = tuple[str, str, int | None]  # a chunk's tenant, document and ordinal


def widened(hits: Sequence[Hit], around: Sequence[Hit], reach: int, overlap: int) -> list[Hit]:
    """Each hit with the chunks of `around` that lie within `reach` places before and after it in its own
    document (contiguous ones only), as one text in reading order, keeping the hit's id, heading path and
    score. The text the chunker repeats at a boundary (at most `overlap` characters) is said once. No chunk
    is in two passages: a hit already inside a better one's passage is left out, and a passage stops where
    a better one's begins."""
    chunks: dict[_Place, Hit] = {_place(chunk): chunk for chunk in around}
    shown: set[_Place] = set()
    passages: list[Hit] = []
    for hit in hits:
        if hit.ordinal is None:  # a document hit: nothing around it
            passages.append(hit)
            continue
        if _place(hit) in shown:
            continue
        window = [hit]
        for step in (-1, 1):
            for distance in range(1, reach + 1):
                place = (hit.tenant, hit.document_id, hit.ordinal + step * distance)
                if place in shown or place not in chunks:
                    break
                window.append(chunks[place])
        window.sort(key=lambda chunk: chunk.ordinal or 0)
        shown.update(_place(chunk) for chunk in window)
        passages.append(replace(hit, content=_joined(window, overlap)) if len(window) > 1 else hit)
    return passages


def _place(chunk: Hit) -> _Place:
    return chunk.tenant, chunk.document_id, chunk.ordinal


def _joined(window: list[Hit], overlap: int) -> str:
    text = window[0].content
    for chunk in window[1:]:
        shared = _shared(text, chunk.content, overlap)
        text += chunk.content[shared:] if shared else f"\n\n{chunk.content}"
    return text


def _shared(before: str, after: str, overlap: int) -> int:
    """How many characters `after` opens with that `before` ends with (at most `overlap`, at least
    MIN_OVERLAP, else 0): the longest such run."""
    opening = after[:MIN_OVERLAP]
    if len(opening) < MIN_OVERLAP:
        return 0
    start = before.find(opening, max(0, len(before) - overlap))
    while start != -1:
        if after.startswith(before[start:]):
            return len(before) - start
        start = before.find(opening, start + 1)
    return 0
