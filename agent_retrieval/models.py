"""The plain types that flow through agent-retrieval: documents, chunks, hits, results and search requests."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent_retrieval.errors import InvalidRequest

Level = Literal["documents", "chunks"]
Path_ = Literal["vector", "keyword"]
Scalar = str | int | float | bool

MAX_QUERY_CHARS = 4000
MAX_TOP_K = 50
MAX_DOCUMENT_IDS = 100
MAX_FILTER_KEYS = 16
MAX_FILTER_VALUES = 100
MAX_SCHEMA_CHARS = 20_000
FILTER_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")

QUERY_TYPES = {
    "general": "balanced hybrid search (the default)",
    "exact": "names, codes, figures or quoted phrases that must appear: leans on keyword search",
    "conceptual": "paraphrased or descriptive questions: leans on vector search",
}


@dataclass
class Document:
    """A source document; `content` is its full text.

    Stores fill the last three fields: `content_hash` fingerprints what was ingested, `text_hash` the
    text that was embedded, and `embedding` is its unit vector (None until embedded).
    """

    id: str
    title: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    source: str | None = None
    content_hash: str = ""
    text_hash: str = ""
    embedding: Any = field(default=None, repr=False)


@dataclass
class Chunk:
    """A piece of a document; `heading_path` is "Title > Section > Subsection"."""

    id: str
    document_id: str
    ordinal: int
    content: str
    heading_path: str
    metadata: dict[str, Any] = field(default_factory=dict)
    text_hash: str = ""
    embedding: Any = field(default=None, repr=False)


@dataclass
class Hit:
    """One search result, with what each path said about it.

    `content` is the chunk's text, or the opening of a document. `queries` names the queries that
    found it when several ran (query plans).
    """

    id: str
    level: Level
    document_id: str
    title: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    ordinal: int | None = None
    heading_path: str | None = None
    score: float = 0.0
    vector_similarity: float | None = None
    vector_rank: int | None = None
    keyword_score: float | None = None
    keyword_rank: int | None = None
    queries: list[str] = field(default_factory=list)

    @property
    def found_by(self) -> list[Path_]:
        """The search paths that returned this hit."""
        paths: list[Path_] = []
        if self.vector_rank is not None:
            paths.append("vector")
        if self.keyword_rank is not None:
            paths.append("keyword")
        return paths

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "found_by": self.found_by}


HydeStatus = Literal["off", "skipped", "used", "failed"]


@dataclass
class RetrievalResult:
    """What a retrieval returns: the hits, and an honest account of how they were found.

    `hyde` is off (disabled), skipped (short query or no LLM), used, or failed (fell back to the raw
    query); `hyde_cached` says the query vector was reused from an earlier call. `degraded` lists
    every path that did not run as configured, with the reason.
    """

    query: str
    level: Level
    hits: list[Hit]
    query_type: str = "general"
    hyde: HydeStatus = "off"
    hyde_cached: bool = False
    hyde_reason: str = ""
    degraded: list[str] = field(default_factory=list)
    fusion: str = "rrf"
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["hits"] = [h.to_dict() for h in self.hits]
        return data


class SearchRequest(BaseModel):
    """Arguments of document_retriever; the descriptions are what the calling model reads."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(description="What to look for, in the user's own words (a question or keywords). "
                       f"At most {MAX_QUERY_CHARS} characters.")
    query_type: Literal["general", "exact", "conceptual"] = Field(
        "general", description="; ".join(f"'{k}': {v}" for k, v in QUERY_TYPES.items()) + ".")
    top_k: int = Field(5, description=f"How many results to return, 1 to {MAX_TOP_K}.")
    filters: dict[str, Any] | None = Field(
        None, description='Metadata filters, all of which must hold: {"key": value} for equality, '
        '{"key": [v1, v2]} for one-of. Values are strings, numbers or booleans.')

    hyde: Literal["auto", "passages", "schema", "off"] = Field(
        "auto", description="How the query vector is made: 'auto' follows the configuration; 'passages' "
        "embeds short hypothetical answer passages (HyDE); 'schema' rewrites the request into the "
        "Inputs/Outputs/Purpose template of a tool or block catalogue; 'off' embeds the query as written.")
    input_schema: dict[str, Any] | None = Field(
        None, description="For catalogues of tools or blocks: the JSON schema of the inputs you have "
        "(implies hyde='schema').")
    output_schema: dict[str, Any] | None = Field(
        None, description="For catalogues of tools or blocks: the JSON schema of the outputs you need "
        "(implies hyde='schema').")

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        if len(value) > MAX_QUERY_CHARS:
            raise ValueError(f"must be at most {MAX_QUERY_CHARS} characters (got {len(value)}); "
                             "shorten it to the question itself")
        if "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return value.strip()

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, value: int) -> int:
        if not 1 <= value <= MAX_TOP_K:
            raise ValueError(f"must be between 1 and {MAX_TOP_K} (got {value})")
        return value

    @field_validator("input_schema", "output_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(json.dumps(value, default=str)) > MAX_SCHEMA_CHARS:
            raise ValueError(f"must be at most {MAX_SCHEMA_CHARS} characters of JSON")
        return value or None

    @field_validator("filters")
    @classmethod
    def _filters(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return validate_filters(value)

    @model_validator(mode="after")
    def _needs_query(self) -> SearchRequest:
        if not self.query and self.query_type != "summarize":
            raise ValueError("query must not be empty: say what to look for")
        return self


class ChunkSearchRequest(SearchRequest):
    """Arguments of chunk_retriever."""

    query_type: Literal["general", "exact", "conceptual", "summarize"] = Field(  # type: ignore[assignment]
        "general", description="; ".join(f"'{k}': {v}" for k, v in QUERY_TYPES.items())
        + "; 'summarize': return all chunks of `document_ids` in reading order (the query is not used).")
    document_ids: list[str] | None = Field(
        None, description="Search only inside these documents (ids returned by document_retriever). "
        f"Required for 'summarize'. At most {MAX_DOCUMENT_IDS}.")

    @field_validator("document_ids")
    @classmethod
    def _document_ids(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if len(value) > MAX_DOCUMENT_IDS:
            raise ValueError(f"at most {MAX_DOCUMENT_IDS} ids (got {len(value)})")
        for doc_id in value:
            if not doc_id or len(doc_id) > 512 or "\x00" in doc_id:
                raise ValueError(f"each id must be 1 to 512 characters without NUL (got {doc_id[:40]!r})")
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _summarize_needs_documents(self) -> ChunkSearchRequest:
        if self.query_type == "summarize" and not self.document_ids:
            raise ValueError("document_ids is required when query_type is 'summarize'")
        return self


def validate_filters(filters: dict[str, Any] | None) -> dict[str, Any] | None:
    """Check a metadata filter: identifier keys, scalar or list-of-scalar values. Returns it normalised."""
    if filters is None or filters == {}:
        return None
    if not isinstance(filters, dict):
        raise ValueError('must be an object like {"category": "policy"}')
    if len(filters) > MAX_FILTER_KEYS:
        raise ValueError(f"at most {MAX_FILTER_KEYS} keys (got {len(filters)})")
    clean: dict[str, Any] = {}
    for key, value in filters.items():
        if not isinstance(key, str) or not FILTER_KEY.match(key):
            raise ValueError(f"key {str(key)[:40]!r} is not allowed: keys are letters, digits, '_' or '-', "
                             "starting with a letter or '_', at most 64 characters")
        if isinstance(value, list):
            if not 1 <= len(value) <= MAX_FILTER_VALUES:
                raise ValueError(f"{key!r}: a one-of list holds 1 to {MAX_FILTER_VALUES} values")
            clean[key] = [_scalar(key, v) for v in value]
        else:
            clean[key] = _scalar(key, value)
    return clean


def _scalar(key: str, value: Any) -> Scalar:
    if isinstance(value, str):
        if len(value) > 1000 or "\x00" in value:
            raise ValueError(f"{key!r}: string values are at most 1000 characters, without NUL")
        return value
    if isinstance(value, bool | int | float) and value == value:  # value == value rejects NaN
        return value
    raise ValueError(f"{key!r}: values must be strings, numbers or booleans, or a list of them "
                     f"(got {type(value).__name__})")


def explain(error: ValidationError) -> str:
    """One readable line per problem: the field, what is wrong, what is allowed."""
    lines = []
    for problem in error.errors():
        where = ".".join(str(p) for p in problem["loc"])
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = "is not an argument of this tool"
        elif problem["type"] == "literal_error":
            message = f"{message} (got {problem.get('input')!r})"
        lines.append(f"{where}: {message}" if where else message)
    return "Invalid arguments: " + "; ".join(lines)


def parse_request(model: type[SearchRequest], data: dict[str, Any]) -> SearchRequest:
    """Validate raw arguments into a request, raising InvalidRequest with a readable message."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise InvalidRequest(explain(error)) from None
