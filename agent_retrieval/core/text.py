"""Words in text: the terms keyword search looks for, the names, quoted phrases and numbers in a query, and
text cut short, or made safe, for display."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

# The Postgres and Supabase stores pick a query's words in SQL (stores/sql/002_search.per-level.sql) by the
# same rule, with Postgres's english stopwords, and keep 32 too.
MAX_KEYWORD_TERMS = 32

# Words that carry no topic: dropping them keeps keyword search fast and its ranking on the content words.
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most
    my myself no nor not now of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves
    """.split()  # noqa: SIM905 - words read better as prose than one a line
)


# English auxiliary verbs: a yes-no question opens with one ("Were X and Y born ..."), a question after "and"
# may too, and a relative clause after "and who" has one.
AUXILIARY_VERBS = frozenset(
    "is are was were do does did has have had can could should must will would".split()  # noqa: SIM905
)
AUXILIARY = "|".join(sorted(AUXILIARY_VERBS))  # for a regular expression's alternation


def keyword_terms(query: str) -> list[str]:
    """The words keyword search looks for: lower-cased, stopwords dropped (unless nothing else is left)."""
    words = list(dict.fromkeys(re.findall(r"\w+", query.lower())))
    content = [w for w in words if w not in STOPWORDS]
    return (content or words)[:MAX_KEYWORD_TERMS]


_QUOTED = re.compile(r'"([^"]{2,100})"|“([^”]{2,100})”')
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,:/-]\d+)*%?")
_NAME = re.compile(r"\b[A-Z][\w'’-]*(?:\s+(?:&\s+|of\s+|de\s+)?[A-Z][\w'’-]*)*")
# Words that open a question or request rather than a name ("What Banda Lane ...", "Please list ..."):
# dropped from the front of a run of capitalised words. Not STOPWORDS, which is about topic: there "may"
# (the month) carries one, and here "Under", "No" or "Most" may begin a real name.
_NOT_NAMES = frozenset(
    """
    a an and are can could did do does for from how i if in is it may might must of on or should the
    their there these this those to was we were what when where which who whom whose why will with would
    you your please tell find show give list
    """.split()  # noqa: SIM905 - as STOPWORDS
)


def entity_terms(query: str) -> list[str]:
    """Names (capitalised words), quoted phrases and numbers in a query: terms a good hit should contain."""
    terms = [a or b for a, b in _QUOTED.findall(query)]
    terms += _NUMBER.findall(query)
    for name in _NAME.findall(query):
        words = name.split()
        while words and words[0].lower() in _NOT_NAMES:  # "What Banda Lane" -> "Banda Lane"
            words.pop(0)
        if words:
            terms.append(" ".join(words))
    seen: dict[str, str] = {}
    for term in terms:
        seen.setdefault(term.lower(), term)
    return list(seen.values())


def counted(count: int, noun: str) -> str:
    """ "1 document", "2 documents": a count and its noun, in the number the count takes."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def has_words(text: str) -> bool:
    """Whether `text` holds anything to search: a letter or a digit."""
    return any(char.isalnum() for char in text)


def shorten(text: str, limit: int) -> str:
    """`text`, or if longer than `limit` characters, its words within them and " ..." marking the cut."""
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def entity_matches(text: str, terms: Sequence[str]) -> int:
    """How many of the terms appear in the text, case-insensitively."""
    haystack = " ".join(text.lower().split())
    return sum(1 for term in terms if " ".join(term.lower().split()) in haystack)


def printable(text: str, *, lines: bool = False) -> str:
    """`text` for a terminal: each control or format character (escape sequences, line breaks, bidi
    overrides) written as its escape, so a file's name cannot move the cursor, retitle the terminal or
    print a line of its own. `lines` keeps the line breaks of text meant to span several."""
    if lines:
        return "\n".join(printable(line) for line in text.split("\n"))
    if text.isprintable():
        return text
    return "".join(
        repr(char)[1:-1] if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp") else char
        for char in text
    )
