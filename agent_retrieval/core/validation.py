"""The rules arguments are held to, each written once: text, counts, ids and questions.

Request models take a rule as a type (`Annotated[str, Text(...)]`, `Annotated[int, Count(...)]`); stores and
graphs call the same rule's `check` on plain arguments. Either way a bad value gets the same message, naming
the field and what is allowed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from agent_retrieval.errors import InvalidRequest

MAX_QUERY_CHARS = 4000
MAX_ID_CHARS = 512
MAX_FILTER_TEXT_CHARS = 1000  # a metadata key, or a string value of metadata or a filter


def is_unicode(text: str) -> bool:
    """False for text holding lone surrogates (U+D800 to U+DFFF): no UTF-8 database or JSON carries them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def one_line(text: str) -> str:
    """Text with every run of white space (line breaks too) made one space, and none at either end."""
    return " ".join(text.split())


@dataclass(frozen=True)
class Text:
    """Text no database refuses: no NUL and no lone surrogate (UTF-8, so Postgres and JSON, holds neither),
    `min_chars` to `max_chars` characters once `normalize` has run; with `min_chars`, blank is empty.

    `empty` and `too_long` say what to do instead, appended to those messages. As pydantic metadata the
    field holds the normalised text; `check` does the same for a plain argument, raising InvalidRequest.
    """

    min_chars: int = 0
    max_chars: int = sys.maxsize
    normalize: Callable[[str], str] | None = None
    empty: str = ""
    too_long: str = ""

    def problem(self, text: str) -> str | None:
        """What is wrong with `text` (already normalised), or None."""
        if (nul := text.find("\x00")) >= 0:
            return f"must not contain NUL characters (one at position {nul})"
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            return (
                f"must be valid Unicode text: it holds a lone surrogate ({text[error.start]!r} at "
                f"position {error.start})"
            )
        if self.min_chars and not text.strip():
            return "must not be empty" + (f": {self.empty}" if self.empty else "")
        if len(text) < self.min_chars:
            return f"must be at least {self.min_chars:,} characters (got {len(text):,})"
        if len(text) > self.max_chars:
            advice = f"; {self.too_long}" if self.too_long else ""
            return f"must be at most {self.max_chars:,} characters (got {len(text):,}){advice}"
        return None

    def validate(self, value: str) -> str:
        """The text normalised, or ValueError saying what is wrong (pydantic names the field)."""
        text = self.normalize(value) if self.normalize else value
        if problem := self.problem(text):
            raise ValueError(problem)
        return text

    def check(self, name: str, value: Any) -> str:
        """`validate` for a plain argument: InvalidRequest naming it."""
        try:
            return self.validate(_text_only(value))
        except ValueError as error:
            raise InvalidRequest(f"{name}: {error}") from None

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # Text only, refused in the rule's words (pydantic's lax str would decode bytes).
        checked = core_schema.no_info_after_validator_function(self.validate, handler(source))
        return core_schema.no_info_before_validator_function(_text_only, checked)


def _text_only(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be text (got {type(value).__name__})")
    return value


@dataclass(frozen=True)
class Count:
    """A whole number from `minimum` (1 unless given) to `maximum`: an int (numpy's too), never a bool
    (pydantic would read True as 1), a float or a numeric string, which would be rounded or parsed instead
    of refused."""

    maximum: int
    minimum: int = 1

    def problem(self, value: Any) -> str | None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | np.integer)
            or not self.minimum <= value <= self.maximum
        ):
            return (
                f"must be a whole number between {self.minimum} and {self.maximum:,} (got {repr(value)[:40]})"
            )
        return None

    def validate(self, value: Any) -> int:
        if problem := self.problem(value):
            raise ValueError(problem)
        return int(value)

    def check(self, name: str, value: Any) -> int:
        try:
            return self.validate(value)
        except ValueError as error:
            raise InvalidRequest(f"{name}: {error}") from None

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # Before pydantic's own int validation, which is lax: it would take True, 2.0 and "2".
        return core_schema.no_info_before_validator_function(self.validate, handler(source))


# --- the rules every entry point shares ---------------------------------------------------------------

ID = Text(1, MAX_ID_CHARS)  # a document's or chunk's id, a model id, a text hash: what names a stored thing
Id = Annotated[str, ID]

# What a user asks, in their own words: a tool's query, the question of a graph, a code request.
QUESTION = Text(
    1,
    MAX_QUERY_CHARS,
    normalize=str.strip,
    empty="say what to look for",
    too_long="ask the question itself, without the material around it",
)
Question = Annotated[str, QUESTION]
# A keyword search's text as a store takes it: the same text rule, but blank asks for nothing rather than
# being an error (a store has no user to tell).
KEYWORD_QUERY = Text(0, MAX_QUERY_CHARS)

FILTER_KEY_TEXT = Text(1, MAX_FILTER_TEXT_CHARS)
FILTER_TEXT = Text(0, MAX_FILTER_TEXT_CHARS)


def unique_ids(ids: Sequence[str], max_ids: int | None) -> list[str]:
    """Ids once each, in the order given; ValueError when there are more than `max_ids`."""
    if max_ids is not None and len(ids) > max_ids:
        raise ValueError(f"at most {max_ids:,} ids (got {len(ids):,})")
    return list(dict.fromkeys(ids))


def check_ids(ids: Any, name: str = "document_ids", *, max_ids: int | None) -> list[str]:
    """A list of ids (`ID` text each), once each; a single string is refused rather than read as its
    characters. Each bad id is named by its place: `document_ids[2]: ...`."""
    if isinstance(ids, str | bytes) or not isinstance(ids, list | tuple):
        raise InvalidRequest(f"{name}: must be a list of ids (got {type(ids).__name__})")
    if max_ids is None or len(ids) <= max_ids:  # past it, the count is the error: no id need be read
        for index, value in enumerate(ids):
            ID.check(f"{name}[{index}]", value)
    try:
        return unique_ids(ids, max_ids)
    except ValueError as error:
        raise InvalidRequest(f"{name}: {error}") from None


def check_question(value: Any, name: str = "question") -> str:
    """A question as every entry point takes it (stripped), or InvalidRequest naming `name`."""
    return QUESTION.check(name, value)
