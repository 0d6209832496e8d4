"""Reading on from the best passages without a chat model: the names they hold lead to other documents.

A multi-hop question's second document is rarely like the question ("Who is the sibling of the actress
who played Susan Walker?"): what leads to it is a name the first passage holds ("Natalie Wood as Susan
Walker"). Names here are runs of capitalised words. A name that is another document's title links to it,
as an encyclopedia links an article (`find_links`, through the store's keyword index); the first names a
passage gives are searched with what the question asks of them (`bridge_names`, `carried`).
Titles and text are the documents' (untrusted): they only choose which stored documents, within the
caller's own scope and filters, are read next.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Sequence
from typing import Any

from agent_retrieval.core.text import AUXILIARY, keyword_terms
from agent_retrieval.models import Hit
from agent_retrieval.stores.base import Store

# A name: capitalised words (or numbers), joined by the small words that names hold ("Bank of England").
# A word holds a full stop inside ("U.S"), never one ending a sentence, but an initial is one word with its
# full stop before the next capitalised word ("Michael J. Fox").
_WORD = r"(?:[A-Z]\.(?=[ \t]+[A-Z])|[A-Z0-9](?:[\w'’&\-]|\.(?=\w))*)"
_JOIN = r"(?:of|the|de|del|da|di|du|von|van|der|den|la|le|for|y)"
NAME = re.compile(rf"(?<![\w'’]){_WORD}(?:[ \t]+(?:{_JOIN}[ \t]+)*{_WORD})*")
# A thing a question names as a title may hold commas and a parenthesis: "Hajjiabad, Jask", "Thomas
# Worthington (Governor)".
_TITLED = rf"{NAME.pattern}(?:[ \t]*\([^()\n]{{1,40}}\))?"
TITLED = re.compile(rf"{_TITLED}(?:,[ \t]+{_TITLED})*")
LOOKUP_DEPTH = 3  # documents read per name looked up: a title outranks prose that merely mentions it


_YES_NO_OPENING = re.compile(rf"(?:{AUXILIARY})\s+(?:the\s+)?", re.I)
_OR = re.compile(r"\s*,?\s+or\s+(?:the\s+)?")
_AND = re.compile(r"\s+and\s+(?:the\s+)?")
_LEAD = re.compile(r"(?:(?!and\b|or\b)[a-z]+[ \t,:]+){0,5}")  # "both films ", "the directors of films "


def compared(question: str) -> list[str]:
    """The two things a question compares, by name, or [] when it compares nothing it names: two names
    joined by "or" at its end ("Which came first, Green or Blue?"), or by "and" after an opening auxiliary
    verb ("Were X and Y born in the same town?", "Are the directors of films X and Y from ..."). Every
    document such a question needs is one it names, or one those lead to (`compares_through`). Read in one
    pass of the names (a question may be thousands of characters)."""
    text = question.strip().rstrip("?.").rstrip()
    if opening := _YES_NO_OPENING.match(text):
        rest = text[opening.end() :]
        first = TITLED.match(rest, _past_lead(rest, 0))
        if first and (joined := _AND.match(rest, first.end())):
            second = TITLED.match(rest, _past_lead(rest, joined.end()))
            if second:
                return [first.group(0), second.group(0)]
    found = list(TITLED.finditer(text))
    if (
        len(found) >= 2
        and found[-1].end() == len(text)
        and _OR.fullmatch(text, found[-2].end(), found[-1].start()) is not None
    ):
        return [found[-2].group(0), found[-1].group(0)]
    return []


def _past_lead(text: str, at: int) -> int:
    lead = _LEAD.match(text, at)
    return lead.end() if lead else at


# A relation a question nests: a role or thing "of", "where", "who", ... something further in ("the performer
# of", "the county where", "the most populous city in", "the county sharing a border with"). "The name of"
# names no relation. Bounded words between, so any question is read in linear time.
_RELATION = re.compile(
    r"\b[Tt]he (?!name of\b)(?:[a-z]+[ \t]+){0,4}?(?:of|where|who|whom|whose|which|that|in|with|by)\b"
)


def relations(question: str) -> int:
    """How many relations a question nests, each a hop of the chain it asks for: "the seat of the county
    sharing a border with the county where Tenement was founded" nests three."""
    return len(_RELATION.findall(question))


def compares(question: str) -> bool:
    """Whether the question compares things it names (`compared`)."""
    return bool(compared(question))


# The compared thing is reached through what the question names: a role "of" a name ("the directors of
# films X and Y"), one the named things "have" ("Which film has the director who died first, X or Y?"),
# or "whose" ("the film whose director ..."). "Have the same nationality" compares the named things.
_THROUGH = re.compile(
    r"\b(?!out\b)[a-z]+ of (?:both |the |each )?(?:[a-z]+ )?[A-Z0-9]"
    r"|\b(?:has|have|had) the (?!same\b)[a-z]|\bwhose [a-z]"
)


def compares_through(question: str) -> bool:
    """Whether a comparing question (`compares`) compares something its named things lead to ("Which film has
    the director who died first, X or Y?": the films are named, their directors are not): then both sides
    need reading on, from each named thing to what it introduces."""
    return _THROUGH.search(question) is not None


def names(text: str) -> list[str]:
    """The distinct names in a text, in order of appearance."""
    return list(dict.fromkeys(m.group(0) for m in NAME.finditer(text)))


def title_forms(title: str) -> list[str]:
    """How a passage may name a titled document, lowercased: the title without its trailing parenthesis
    ("Green (album)" is named "Green") and the part before its first comma ("Mountrail County, North
    Dakota" is often just "Mountrail County"). Forms shorter than 3 characters name nothing reliably."""
    bare = re.sub(r"\s*\([^)]*\)\s*$", "", title).strip().lower()
    forms = [bare, bare.split(",")[0].strip()]
    return [form for form in dict.fromkeys(forms) if len(form) >= 3]


def holds(text: str, form: str) -> bool:
    """Whether the text holds the form as whole words, ignoring case."""
    return re.search(rf"(?<!\w){re.escape(form)}(?!\w)", text, re.IGNORECASE) is not None


def mentions(hit: Hit, form: str) -> bool:
    """Whether a hit's title or text holds the form (`holds`)."""
    return holds(f"{hit.title} {hit.content}", form)


async def find_links(
    sources: Sequence[Hit],
    asked: str,
    store: Store,
    *,
    exclude: set[str],
    filters: dict[str, Any] | None = None,
    max_lookups: int,
) -> list[tuple[Hit, Hit]]:
    """The documents (keyword hits) the `sources` name by title, each with the source naming it, best source
    first. At most `max_lookups` names are looked up (not those the question holds: its own search found
    them), and no document returned is a source or in `exclude` (document ids)."""
    named = {source.key: list(dict.fromkeys(given_names(source.content, asked))) for source in sources}
    wanted: dict[str, Hit] = {}  # each name, with the best source naming it
    for source in sources:
        for name in named[source.key]:
            wanted.setdefault(name, source)
    lookups = list(wanted.items())[:max_lookups]
    found = await _look_up([name for name, _ in lookups], store, filters)
    seen = set(exclude) | {s.document_id for s in sources}
    links: list[tuple[Hit, Hit]] = []
    for (_, source), hits in zip(lookups, found, strict=True):
        named_here = {name.lower() for name in named[source.key]}
        for hit in hits:
            forms = title_forms(hit.title)
            # a whole name of the passage: "Green Day" is no link to "Green (album)"
            if hit.document_id in seen or named_here.isdisjoint(forms):
                continue
            seen.add(hit.document_id)
            links.append((source, hit))
    return links


async def find_titled(
    wanted: Sequence[str], store: Store, *, filters: dict[str, Any] | None = None
) -> list[Hit]:
    """The document each name is the title of (keyword hits, in the names' order), where one is: a name a
    question compares is looked up as a passage's name is (`find_links`)."""
    found = await _look_up(wanted, store, filters)
    titled: dict[str, Hit] = {}
    for name, hits in zip(wanted, found, strict=True):
        forms = set(title_forms(name))
        hit = next((h for h in hits if not forms.isdisjoint(title_forms(h.title))), None)
        if hit is not None:
            titled.setdefault(hit.document_id, hit)
    return list(titled.values())


async def _look_up(wanted: Sequence[str], store: Store, filters: dict[str, Any] | None) -> list[list[Hit]]:
    """Each name's best documents by keywords, as titles are looked up: a title outranks prose that merely
    mentions it."""
    return list(
        await asyncio.gather(
            *(store.akeyword_search("documents", name, LOOKUP_DEPTH, filters=filters) for name in wanted)
        )
    )


_JOINING = re.compile(rf"[ \t]+{_JOIN}[ \t]+")
_LOOSE_END = re.compile(rf"{_JOIN}|[A-Z]\.")  # no shorter form ends "of" or an initial


def shorter_form(name: str) -> str | None:
    """How a later passage may name what a passage's name names, shorter: the name before its first joining
    word ("Glenn L. Martin Company for the United States Navy": "Glenn L. Martin Company"), else without its
    last word ("South Carolina Senate": "South Carolina"); None when under two words would be left ("Bank
    of England" names a bank, not England)."""
    joining = _JOINING.search(name)
    if joining and len(head := name[: joining.start()].split()) >= 2:
        return " ".join(head)
    words = name.split()[:-1]
    while words and _LOOSE_END.fullmatch(words[-1]):
        words.pop()
    return " ".join(words) if len(words) >= 2 else None


def carried(question: str, source: Hit, name: str) -> str:
    """The question as the next hop asks it: the name a passage gives, in place of what that passage answers.
    "What is the seat of the county sharing a border with the county where Tenement was founded?", read on
    from Tenement's passage with the county it names, asks for that county with the question's words the
    passage does not hold ("seat sharing border"): the chain's next link, not the question it started from.
    A statement asks for nothing reached through the name (a claim to check: SciFact's lost 1.3 R@5 so),
    and a passage holding every content word leaves nothing to ask: both are searched as written, with the
    name."""
    as_written = f"{question} {name}"
    if not question.rstrip().endswith("?"):
        return as_written
    held = {word.lower() for word in re.findall(r"\w+", f"{source.title} {source.content}")}
    rest = [word for word in keyword_terms(question) if word not in held]
    return " ".join([name, *rest]) if rest else as_written


# A single capitalised word naming a nationality or a language ("British painter", "Austrian physicist"):
# an adjective beside a name, not one that leads anywhere.
_NATIONALITY = re.compile(r"[A-Z][a-z]+(?:ian|an|ish|ese|ch|ic)")
_ARTICLE = re.compile(r"^(?:The|An?) ")
_SENTENCE_END = re.compile(r"[.!?:;]\s+")
_NUMBERS_BEFORE = re.compile(rf"^(?:\d\S*[ \t]+(?:{_JOIN}[ \t]+)*)+")
_MONTHS = {
    *("January", "February", "March", "April", "May", "June", "July", "August", "September", "October"),
    *("November", "December"),
}


def given_names(text: str, asked: str) -> Iterator[str]:
    """The names a passage gives that may lead on from it, in its order: not a name the question holds
    whole (its own subjects; "Ernst Mach" is given for "the Mach number"), nor numbers and dates, nor a
    single word naming a nationality or opening a sentence (any capitalised word does: "This" is no link
    to a song of that title)."""
    # Where sentences open, found in one pass: testing the text before each name again was quadratic.
    opening = {0} | {end.end() for end in _SENTENCE_END.finditer(text)}
    for match in NAME.finditer(text):
        name = _NUMBERS_BEFORE.sub("", match.group(0))  # "21 of the Housing Act 1988": the Act
        if all(word.isdigit() or word in _MONTHS for word in name.split()):  # "1", "24 August 2023"
            continue
        if holds(asked, _ARTICLE.sub("", name)):  # "The Mach number" opening a sentence is the question's
            continue
        wordy = [word for word in name.split() if not word.isdigit()]  # "In 1947" is one word
        if len(wordy) == 1 and (_NATIONALITY.fullmatch(wordy[0]) or match.start() in opening):
            continue
        yield name


def bridge_names(source: Hit, asked: str, *, per_source: int) -> list[str]:
    """Names a passage that meets the question (holds a word of it) gives (`given_names`), in its order, at
    most `per_source`, none shorter than 3 characters. A passage says what its subject is first
    ("a 1943 painting by the British painter Laura Knight" answers "the creator of Ruby Loftus Screwing a
    Breech Ring"), so its first names are the likeliest answer to the question's inner part: nearness to
    the question's words chose the dates and nationalities beside them as often."""
    text = source.content
    asked_words = {w.lower() for w in re.findall(r"\w{3,}", asked)}
    if not any(m.group(0).lower() in asked_words for m in re.finditer(r"\w{3,}", text)):
        return []
    found: list[str] = []
    for name in given_names(text, asked):
        if len(name) >= 3 and name not in found:
            found.append(name)
            if len(found) == per_source:
                break
    return found
