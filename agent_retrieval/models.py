"""The plain types that flow through agent-retrieval: documents, chunks, hits, results and search requests."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import unicodedata
from dataclasses import asdict, dataclass, field, replace
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from agent_retrieval.context import FusionMode, HydeMethod
from agent_retrieval.core.validation import (
    FILTER_KEY_TEXT,
    FILTER_TEXT,
    MAX_ID_CHARS,
    MAX_QUERY_CHARS,
    QUESTION,
    Count,
    Id,
    Question,
    Text,
    one_line,
    unique_ids,
)
from agent_retrieval.core.validation import is_unicode as is_unicode  # the loaders import it from here
from agent_retrieval.errors import InvalidRequest

Level = Literal["documents", "chunks"]
Path_ = Literal["vector", "keyword"]
Scalar = str | int | float | bool

MAX_TOP_K = 50
MAX_DOCUMENT_IDS = 100
MAX_NEIGHBORS = 3  # chunks on each side of a passage: past that, read the document (query_type 'summarize')
MAX_FILTER_KEYS = 16
MAX_FILTER_VALUES = 100
MAX_SCHEMA_CHARS = 20_000
FILTER_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")
MAX_NESTING = 32  # deeper JSON is refused before anything walks it recursively

QUERY_TYPES = {
    "general": "balanced hybrid search (the default)",
    "exact": "names, codes, figures or quoted phrases that must appear: leans on keyword search",
    "conceptual": "paraphrased or descriptive questions: leans on vector search",
}


MAX_LISTED = 100_000  # documents one listing (Store.list_documents, `agent-retrieval list`) returns


@dataclass
class Document:
    """A source document; `content` is its full text.

    Stores fill `content_hash` (a fingerprint of what was ingested, without a title taken from the file's
    name), `text_hash` (of the text that was embedded) and `embedding` (its unit vector; None until
    embedded). `public` publishes the document and its chunks to every tenant and to anonymous readers of a
    shared store (Postgres, Supabase): the operator's explicit choice, which no loader, metadata key or tool
    argument makes.
    """

    id: str
    title: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    source: str | None = None
    content_hash: str = ""
    text_hash: str = ""
    embedding: Any = field(default=None, repr=False)
    public: bool = False
    # The title is the file's name, not the document's own words: a rename changes it, so the fingerprint
    # that follows renames (content_hash) leaves it out.
    title_from_name: bool = False


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

    `content` is the chunk's text; for a document, the passage it was found by (its `heading_path` then says
    where), or its opening when its title and opening matched best. `keyword_coverage` is the share of the
    query's words (each weighted by its idf) that a keyword hit contains; the best keyword hit always carries
    it, others may, and it also carries `unknown_terms`: how many of the query's words no row the caller may
    read holds (a question about something never stored asks for words the store has never seen). Ids are
    unique within a tenant only:
    `tenant` is the row's tenant ("" on a single-tenant store), and (tenant, id) names a hit. `queries`
    names the queries that found it when several ran (query plans).
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
    keyword_coverage: float | None = None
    unknown_terms: int | None = None
    queries: list[str] = field(default_factory=list)
    tenant: str = ""

    @property
    def key(self) -> tuple[str, str]:
        """What names this hit across tenants: the same id may be one tenant's private document and
        another's public one, which must never merge."""
        return self.tenant, self.id

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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hit:
        """The inverse of `to_dict` (graph state holds hits as plain dicts)."""
        return cls(**{key: value for key, value in data.items() if key != "found_by"})


# How a request's query vector is made: "auto" follows the Context (its hyde_mode when use_hyde is on, else
# "off"); "passages" or "schema" asks for that HyDE method; "off" embeds the query as written.
HydeMode = Literal["auto", HydeMethod, "off"]
HydeStatus = Literal["off", "skipped", "used", "failed"]
RerankStatus = Literal["off", "used", "failed"]


@dataclass
class RetrievalResult:
    """What a retrieval returns: the hits, and an honest account of how they were found.

    `hyde` is off (disabled), skipped (short query or no LLM), used, or failed (fell back to the raw
    query); `hyde_cached` says the query vector was reused from an earlier call. `rerank` is off (no
    reranker, or no candidates to reorder), used, or failed (the fused order stands, and `degraded` says
    why). `degraded` lists
    every path that did not run as configured, with the reason. `fusion` is the fusion that ranked the
    hits (the Context's), or None where none did (summarize returns chunks in reading order).
    `confidence` is the calibrated probability that the store answers the query (confidence.py),
    None where it is not known (an uncalibrated embedder, no vector search, summarize).
    """

    query: str
    level: Level
    hits: list[Hit]
    query_type: str = "general"
    hyde: HydeStatus = "off"
    hyde_cached: bool = False
    hyde_reason: str = ""
    degraded: list[str] = field(default_factory=list)
    fusion: FusionMode | None = None
    rerank: RerankStatus = "off"
    truncated: bool = False
    confidence: float | None = None

    def to_dict(self) -> dict[str, Any]:
        # the hits converted once, each by its own to_dict (asdict(self) would copy them all first)
        return {**asdict(replace(self, hits=[])), "hits": [h.to_dict() for h in self.hits]}


TopK = Annotated[int, Count(MAX_TOP_K)]
Neighbors = Annotated[int, Count(MAX_NEIGHBORS, minimum=0)]


def _filters(value: dict[str, Any] | None) -> dict[str, Any] | None:
    return validate_filters(value)


Filters = Annotated[dict[str, Any] | None, AfterValidator(_filters)]


class SearchRequest(BaseModel):
    """Arguments of document_retriever; the descriptions are what the calling model reads."""

    model_config = ConfigDict(extra="forbid")

    # The question rule, but empty is checked below: query_type 'summarize' takes no query.
    query: Annotated[str, dataclasses.replace(QUESTION, min_chars=0)] = Field(
        description="What to look for, in the user's own words (a question or keywords). "
        f"At most {MAX_QUERY_CHARS} characters."
    )
    query_type: Literal["general", "exact", "conceptual"] = Field(
        "general", description="; ".join(f"'{k}': {v}" for k, v in QUERY_TYPES.items()) + "."
    )
    top_k: TopK = Field(5, description=f"How many results to return, 1 to {MAX_TOP_K}.")
    filters: Filters = Field(
        None,
        description='Metadata filters, all of which must hold: {"key": value} for equality, '
        '{"key": [v1, v2]} for one-of. Values are strings, numbers or booleans.',
    )

    hyde: Literal["auto", "passages", "schema", "off"] = Field(
        "auto",
        description="How the query vector is made: 'auto' follows the configuration; 'passages' "
        "embeds short hypothetical answer passages (HyDE); 'schema' rewrites the request into the "
        "Inputs/Outputs/Purpose template of a tool or block catalogue; 'off' embeds the query as written.",
    )
    input_schema: dict[str, Any] | None = Field(
        None,
        description="For catalogues of tools or blocks: the JSON schema of the inputs you have "
        "(implies hyde='schema').",
    )
    output_schema: dict[str, Any] | None = Field(
        None,
        description="For catalogues of tools or blocks: the JSON schema of the outputs you need "
        "(implies hyde='schema').",
    )

    @field_validator("input_schema", "output_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and nesting_depth(value) > MAX_NESTING:
            raise ValueError(f"must be nested at most {MAX_NESTING} levels deep")
        if value is not None and len(json.dumps(value, default=str)) > MAX_SCHEMA_CHARS:
            raise ValueError(f"must be at most {MAX_SCHEMA_CHARS} characters of JSON")
        return value or None

    @property
    def summarizes(self) -> bool:
        """Whether this asks for documents' chunks in reading order rather than a search (chunk_retriever's
        query_type 'summarize')."""
        return False

    @model_validator(mode="after")
    def _needs_query(self) -> SearchRequest:
        if not self.summarizes and (problem := QUESTION.problem(self.query)):
            raise ValueError(f"query: {problem}")
        return self


class ChunkSearchRequest(SearchRequest):
    """Arguments of chunk_retriever."""

    query_type: Literal["general", "exact", "conceptual", "summarize"] = Field(  # type: ignore[assignment]
        "general",
        description="; ".join(f"'{k}': {v}" for k, v in QUERY_TYPES.items())
        + "; 'summarize': return all chunks of `document_ids` in reading order (the query is not used).",
    )
    document_ids: list[Id] | None = Field(
        None,
        description="Search only inside these documents (ids returned by document_retriever). "
        f"Required for 'summarize'. At most {MAX_DOCUMENT_IDS}.",
    )

    neighbors: Neighbors = Field(
        0,
        description=f"Chunks before and after each passage to return with it, 0 to {MAX_NEIGHBORS}: the "
        "passage is then those chunks in reading order, one text, for an answer that runs across a chunk's "
        "edge or needs the paragraph before.",
    )

    @property
    def summarizes(self) -> bool:
        return self.query_type == "summarize"

    @field_validator("document_ids")
    @classmethod
    def _document_ids(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:  # an empty scope would otherwise quietly mean "everything"
            raise ValueError("must hold at least one id; leave it out to search every document")
        return unique_ids(value, MAX_DOCUMENT_IDS)

    @model_validator(mode="after")
    def _summarize_needs_documents(self) -> ChunkSearchRequest:
        if self.query_type == "summarize" and not self.document_ids:
            raise ValueError("document_ids is required when query_type is 'summarize'")
        if self.query_type == "summarize" and self.neighbors:
            raise ValueError(
                "neighbors: query_type 'summarize' returns every chunk of document_ids already; leave "
                "neighbors out"
            )
        if self.query_type == "summarize" and self.filters:  # it would return every chunk regardless
            raise ValueError(
                "filters: query_type 'summarize' returns every chunk of document_ids and applies no "
                "filters; leave filters out, or search with another query_type"
            )
        return self


def validate_filters(filters: dict[str, Any] | None, *, any_key: bool = False) -> dict[str, Any] | None:
    """Check a metadata filter: identifier keys, scalar or list-of-scalar values. Returns it normalised.

    `any_key` accepts any text as a key (stores are searched by keys metadata already holds, whatever they
    are; the tools' callers name identifiers)."""
    if filters is None or filters == {}:
        return None
    if not isinstance(filters, dict):
        raise ValueError('must be an object like {"category": "policy"}')
    if len(filters) > MAX_FILTER_KEYS:
        raise ValueError(f"at most {MAX_FILTER_KEYS} keys (got {len(filters)})")
    clean: dict[str, Any] = {}
    for key, value in filters.items():
        if not isinstance(key, str):
            raise ValueError(f"key {repr(key)[:40]}: must be text (got {type(key).__name__})")
        if any_key and (problem := FILTER_KEY_TEXT.problem(key)):
            raise ValueError(f"key {key[:40]!r}: {problem}")
        if not any_key and not FILTER_KEY.match(key):
            raise ValueError(
                f"key {key[:40]!r} is not allowed: keys are letters, digits, '_' or '-', "
                "starting with a letter or '_', at most 64 characters"
            )
        if isinstance(value, list):
            if not 1 <= len(value) <= MAX_FILTER_VALUES:
                raise ValueError(f"{key!r}: a one-of list holds 1 to {MAX_FILTER_VALUES} values")
            clean[key] = [_scalar(key, v) for v in value]
        else:
            clean[key] = _scalar(key, value)
    return clean


def _scalar(key: str, value: Any) -> Scalar:
    if isinstance(value, str):
        if problem := FILTER_TEXT.problem(value):
            raise ValueError(f"{key[:40]!r}: {problem}")
        return value
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        # JSON has no NaN or infinity, and SQLite's integers are 64-bit: other numbers cannot be matched
        if not (math.isfinite(value) and -(2**63) <= value < 2**63):
            raise ValueError(
                f"{key!r}: numbers must be finite and between -2**63 and 2**63 (got {repr(value)[:40]})"
            )
        return value
    raise ValueError(
        f"{key!r}: values must be strings, numbers or booleans, or a list of them "
        f"(got {type(value).__name__})"
    )


def nesting_depth(value: Any) -> int:
    """How deeply lists and dicts nest in `value` (counted up to MAX_NESTING + 1), found without recursion,
    so any depth is safe to ask about."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            deepest = max(deepest, depth + 1)
            if depth + 1 > MAX_NESTING:  # deep enough to refuse: no need to walk the rest
                return deepest
            stack += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


Request = TypeVar("Request", bound=BaseModel)


def explain(error: ValidationError) -> str:
    """One readable line per problem: the field, what is wrong, what is allowed."""
    lines = []
    for problem in error.errors():
        # A list's item is named by its place: document_ids[2], documents[0].title
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in problem["loc"]).lstrip(".")
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = "is not an argument of this tool"
        elif problem["type"] == "literal_error":
            message = f"{message} (got {repr(problem.get('input'))[:80]})"
        lines.append(f"{where}: {message}" if where else message)
    return "Invalid arguments: " + "; ".join(lines)


def parse_request(model: type[Request], data: dict[str, Any]) -> Request:
    """Validate raw arguments into a request, raising InvalidRequest with a readable message."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise InvalidRequest(explain(error)) from None


class SimilaritySearchRequest(BaseModel):
    """Arguments of similarity_search: chunk_retriever's search with only a query, top_k and filters."""

    model_config = ConfigDict(extra="forbid")

    query: Question = Field(description=SearchRequest.model_fields["query"].description)
    top_k: TopK = Field(5, description=SearchRequest.model_fields["top_k"].description)
    filters: Filters = Field(None, description=SearchRequest.model_fields["filters"].description)


MAX_TITLE_CHARS = 500
MAX_CONTENT_CHARS = 1_000_000
# Metadata keys a writer may not set: visibility and tenancy are the operator's to decide, and the rest
# name what the store records itself (a document's metadata is returned beside them in every hit).
RESERVED_METADATA = frozenset(
    {
        "public",
        "is_public",
        "tenant",
        "tenant_id",
        "id",
        "document_id",
        "chunk_id",
        "title",
        "heading_path",
        "source",
        "score",
        "found_by",
    }
)


def title_document_id(title: str) -> str:
    """A stable id for a titled document: a readable slug plus a short hash, so equal titles share it."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_title.lower()).strip("-")[:60].rstrip("-") or "document"
    return f"{slug}-{hashlib.sha256(title.encode()).hexdigest()[:8]}"


class IndexDocumentRequest(BaseModel):
    """Arguments of index_document (and the indexer graph's pasted documents): one document to store."""

    model_config = ConfigDict(extra="forbid")

    title: Annotated[str, Text(1, MAX_TITLE_CHARS, normalize=one_line)] = Field(
        description=f"The document's title, 1 to {MAX_TITLE_CHARS} characters. Indexing the "
        "same title again replaces the earlier version (unless an id is given)."
    )
    content: Annotated[
        str,
        Text(
            1,
            MAX_CONTENT_CHARS,
            normalize=str.strip,
            empty="give the document's full text",
            too_long="split a longer text into several documents",
        ),
    ] = Field(
        description=f"The document's full text, 1 to {MAX_CONTENT_CHARS:,} characters; "
        "markdown headings (#, ##, ###) help split it into passages."
    )
    metadata: dict[str, Any] | None = Field(
        None,
        description='Facts to filter searches by later, e.g. {"category": "policy", "year": 2024}. '
        "Keys are identifiers; values are strings, numbers or booleans, or lists of them. Visibility "
        "(public), the tenant and the store's own fields (id, title, source) cannot be set here.",
    )
    id: Id | None = Field(
        None,
        description=f"The id to store the document under, 1 to {MAX_ID_CHARS} "
        "characters; an existing document with this id is replaced. Default: made from "
        "the title.",
    )

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        reserved = sorted(RESERVED_METADATA & set(value or {}))
        if reserved:
            raise ValueError(
                f"{', '.join(reserved)} cannot be set: visibility and tenancy are decided by the "
                "store's operator, and ids, titles and sources are recorded by the store itself"
            )
        return validate_filters(value)  # stored metadata is what filters match, so the same rules hold

    def document(self, source: str) -> Document:
        """The Document to ingest; without an id, it is named after its title."""
        return Document(
            id=self.id or title_document_id(self.title),
            title=self.title,
            content=self.content,
            metadata=self.metadata or {},
            source=source,
        )
