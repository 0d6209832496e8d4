"""What a query plan is: QueryPlan, the schema a planner's LLM fills in, and the question rule every
request is held to."""

from __future__ import annotations

import logging
import re
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from agent_retrieval.core.validation import MAX_QUERY_CHARS, check_question, one_line
from agent_retrieval.models import (
    Level,
    validate_filters,
)
from agent_retrieval.stores.base import MetadataValue

log = logging.getLogger(__name__)


MAX_ENTITY_CHARS = 80
MAX_PURPOSE_CHARS = 200  # a plan's intent and a query's purpose: a few words, shown and prompted
Facets = dict[str, list[MetadataValue]]  # Store.metadata_values: each key the documents carry, its values


def check_request(request: str) -> str:
    """The request, held to the question rule every entry point shares (validation.QUESTION), with its
    white space made single spaces; or InvalidRequest saying what is allowed."""
    return one_line(check_question(request))


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
