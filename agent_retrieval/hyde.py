"""The one place the retrieval query vector is computed: raw query, HyDE passages, or the schema template.

HyDE: an LLM writes short hypothetical passages answering the question; their document-side
embeddings, averaged, replace the raw query's for vector search (keyword search always keeps the
user's words). A TTL cache keyed by the query and every setting that changes the vector (held by
SearchResources) lets document_retriever and then chunk_retriever share one LLM call, and concurrent
identical queries share one in-flight computation. Each step is written once and driven sync or async
(steps.py), so a bound like hyde_timeout_seconds holds on both faces. HyDE text never leaves this
module and is never logged.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import re
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from agent_retrieval.context import Context
from agent_retrieval.core.prompts import load_prompt, prompt_version
from agent_retrieval.core.quoting import quote_json
from agent_retrieval.core.redaction import endpoint_id, fingerprint
from agent_retrieval.core.steps import Steps, arun, blocking, bounded, call, run
from agent_retrieval.errors import EmbeddingError
from agent_retrieval.models import HydeMode, HydeStatus
from agent_retrieval.providers.embeddings import Embedder, average, make_embedder
from agent_retrieval.providers.llm import make_chat_model
from agent_retrieval.search.resources import (
    SearchResources,
    SharedValues,
    clear_shared_caches,
    shared_resources,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueryEmbedding:
    """The vector for vector search (None if embedding failed) and how it was made, without HyDE text."""

    vector: np.ndarray | None
    hyde: HydeStatus
    cached: bool = False
    reason: str = ""


@dataclass(frozen=True)
class _Plan:
    key: tuple[Any, ...]
    action: Literal["raw", "passages", "schema"]
    status: HydeStatus  # what the result says when HyDE does not run
    reason: str


def clear_cache() -> None:
    """Forget every query vector cached by the shared resources (tests, or after re-embedding a store)."""
    clear_shared_caches()


def word_count(query: str) -> int:
    return len(query.split())


# --- the LLM calls ------------------------------------------------------------------------------


def _passages_messages(query: str, num: int) -> list[Any]:
    return [SystemMessage(load_prompt("hyde").replace("{num}", str(num))), HumanMessage(query)]


def _schema_messages(query: str, input_schema: Any, output_schema: Any) -> list[Any]:
    parts = [f"Request: {query}"]  # the schemas are a model's tool arguments: structured data, quoted
    if input_schema:
        parts.append(f"Input schema: {quote_json(input_schema)}")
    if output_schema:
        parts.append(f"Output schema: {quote_json(output_schema)}")
    return [SystemMessage(load_prompt("schema_query")), HumanMessage("\n".join(parts))]


_LEADER = re.compile(r"^\s*(?:(?:paragraph|passage)\s*\d+\s*[:.)-]|\d+\s*[.)]|[-*•])\s*", re.IGNORECASE)


def parse_passages(text: str, num: int) -> list[str]:
    """Split an LLM reply into at most `num` non-empty paragraphs, dropping numbering and bullets."""
    blocks = [b for b in re.split(r"\n\s*\n", text.strip()) if b.strip()]
    if len(blocks) < num:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) >= num:
            blocks = lines
    passages = [" ".join(_LEADER.sub("", block).split()) for block in blocks]
    return [p for p in passages if p][:num]


def generate_hypothetical_documents(
    query: str, num: int = 2, *, llm: BaseChatModel | None = None, context: Context | None = None
) -> list[str]:
    """ONE LLM call writing `num` short passages that answer the question, bounded by the HyDE timeout;
    [] on any failure."""
    return run(_passages(query, num, llm, context or Context()))


async def agenerate_hypothetical_documents(
    query: str, num: int = 2, *, llm: BaseChatModel | None = None, context: Context | None = None
) -> list[str]:
    """Async `generate_hypothetical_documents`."""
    return await arun(_passages(query, num, llm, context or Context()))


def format_query_for_embedding(
    query: str,
    input_schema: Any = None,
    output_schema: Any = None,
    *,
    llm: BaseChatModel | None = None,
    context: Context | None = None,
) -> str | None:
    """Rewrite a request into the stored-item template (Inputs / Outputs / Purpose), bounded by the HyDE
    timeout; None on failure."""
    return run(_schema_text(query, input_schema, output_schema, llm, context or Context()))


async def aformat_query_for_embedding(
    query: str,
    input_schema: Any = None,
    output_schema: Any = None,
    *,
    llm: BaseChatModel | None = None,
    context: Context | None = None,
) -> str | None:
    """Async `format_query_for_embedding`."""
    return await arun(_schema_text(query, input_schema, output_schema, llm, context or Context()))


def _passages(query: str, num: int, llm: BaseChatModel | None, context: Context) -> Steps[list[str]]:
    reply = yield from _ask(llm, _passages_messages(query, num), context, "HyDE generation")
    if reply is None:
        return []
    passages = parse_passages(reply, num)
    log.debug("HyDE generated %d passages", len(passages))  # counts only: the text is never logged
    return passages


def _schema_text(
    query: str, input_schema: Any, output_schema: Any, llm: BaseChatModel | None, context: Context
) -> Steps[str | None]:
    reply = yield from _ask(
        llm, _schema_messages(query, input_schema, output_schema), context, "schema query formatting"
    )
    if reply is None:
        return None
    return reply.strip() or None


def _ask(llm: BaseChatModel | None, messages: list[Any], context: Context, what: str) -> Steps[str | None]:
    """The chat model's reply, or None when no model is configured, the call fails, or it takes longer than
    hyde_timeout_seconds (HyDE is best-effort: the raw query serves instead)."""
    if llm is None:
        if not context.chat.configured:
            return None
        llm = yield blocking(hyde_chat_model, context)  # building a client reads files: off the event loop
        if llm is None:
            return None
    try:
        reply = yield bounded(call(llm.invoke, llm.ainvoke, messages), context.hyde_timeout_seconds)
    except Exception as error:
        log.warning("%s failed (%s); using the raw query", what, type(error).__name__)
        return None
    return str(reply.text)


def hyde_chat_model(context: Context) -> BaseChatModel | None:
    """The chat model HyDE calls, or None when none is configured."""
    # No retries: the SDK's timeout is per attempt, and HyDE is best-effort within hyde_timeout_seconds.
    return make_chat_model(
        context.chat,
        temperature=context.hyde_temperature,
        timeout=context.hyde_timeout_seconds,
        max_retries=0,
    )


# --- the query vector ---------------------------------------------------------------------------


def _plan(
    query: str,
    context: Context,
    embedder: Embedder,
    llm: BaseChatModel | None,
    mode: HydeMode,
    input_schema: Any,
    output_schema: Any,
    resources: SearchResources,
) -> _Plan:
    """Decide how the vector is made, and the cache key naming everything that changes it."""
    text = " ".join(query.split())
    mode = _chosen_mode(context, mode, input_schema, output_schema)
    scope = _cache_scope(context, embedder)
    raw = _Plan(("raw", scope, text), "raw", "off", "HyDE is off")
    if mode == "off":
        return raw
    if mode == "passages" and word_count(text) <= context.hyde_skip_max_words:
        return replace(
            raw,
            status="skipped",
            reason=f"query has at most {context.hyde_skip_max_words} words: raw query used",
        )
    if llm is None:
        if resources.first_notice("no chat model"):
            log.info("HyDE skipped: no chat model configured (set OPENAI_API_KEY or OPENAI_BASE_URL)")
        return replace(raw, status="skipped", reason="no chat model configured: raw query used")
    llm_id = getattr(llm, "model_name", None) or getattr(llm, "model", None) or type(llm).__name__
    prompt = "hyde" if mode == "passages" else "schema_query"
    schemas = (
        json.dumps([input_schema, output_schema], sort_keys=True, default=str) if mode == "schema" else ""
    )
    key = (
        mode,
        scope,
        _chat_endpoint(llm),
        text,
        context.hyde_num_docs if mode == "passages" else 1,
        llm_id,
        context.hyde_temperature,
        prompt_version(prompt),
        hashlib.sha256(schemas.encode()).hexdigest(),
    )
    return _Plan(key, mode, "used", "")


def may_call_llm(context: Context, mode: HydeMode, input_schema: Any, output_schema: Any) -> bool:
    """Whether a request may need HyDE's chat model (a short query or a cached vector may still spare the
    call); when not, no client is built."""
    return _chosen_mode(context, mode, input_schema, output_schema) != "off"


def _chosen_mode(
    context: Context, mode: HydeMode, input_schema: Any, output_schema: Any
) -> Literal["passages", "schema", "off"]:
    """What "auto" means for this request: the schema template when it has schemas, else the settings."""
    if mode != "auto":
        return mode
    if input_schema or output_schema:
        return "schema"
    return context.hyde_mode if context.use_hyde else "off"


def _cache_scope(context: Context, embedder: Embedder) -> tuple[str, ...]:
    """Who may share a cached vector: callers of one tenant (a cache hit must not tell one tenant what another
    asked), embedding through the same endpoint with the same key (another endpoint could plant vectors)."""
    user = fingerprint(context.store.supabase_user_token.get_secret_value())
    return (context.store.tenant_id, user, embedder.model_id, embedder.endpoint)


def _chat_endpoint(llm: BaseChatModel) -> str:
    """Where HyDE's chat model is served and with which key, when the model says (ChatOpenAI does)."""
    key = getattr(llm, "openai_api_key", None)
    secret = key.get_secret_value() if key is not None and hasattr(key, "get_secret_value") else key
    return endpoint_id(getattr(llm, "openai_api_base", None), secret)


@dataclass(frozen=True)
class _Job:
    """One request for a query vector, with everything the caller left out filled in from the Context."""

    query: str
    context: Context
    embedder: Embedder
    llm: BaseChatModel | None
    input_schema: Any
    output_schema: Any
    cache: SharedValues
    plan: _Plan

    def reused(self, result: QueryEmbedding) -> QueryEmbedding:
        """A cached or shared result, saying why this call used it ("off" and "skipped" share the raw
        vector)."""
        if self.plan.action == "raw" and result.vector is not None:
            return replace(result, cached=True, hyde=self.plan.status, reason=self.plan.reason)
        return replace(result, cached=True)

    def fulfil(self, future: Future[Any], result: QueryEmbedding) -> QueryEmbedding:
        # a failed embedding is not kept: the next call tries again
        ttl = self.context.resources.hyde_cache_ttl_seconds if result.vector is not None else 0
        self.cache.fulfil(self.plan.key, future, result, ttl)
        return result

    def complete(self, future: Future[Any], task: asyncio.Task[QueryEmbedding]) -> None:
        """Hand an async computation's outcome to everyone waiting on this job's key."""
        if task.cancelled():
            self.cache.abandon(self.plan.key, future, asyncio.CancelledError())
        elif task.exception() is not None:
            self.cache.abandon(self.plan.key, future, task.exception())  # type: ignore[arg-type]
        else:
            self.fulfil(future, task.result())


def _prepare(
    query: str,
    context: Context | None,
    embedder: Embedder | None,
    llm: BaseChatModel | None,
    mode: HydeMode,
    input_schema: Any,
    output_schema: Any,
    resources: SearchResources | None,
) -> Steps[_Job]:
    """Fill in what the caller left out (from the Context) and plan the computation."""
    context = context or Context()
    resources = resources or shared_resources(context.resources)
    # Building an embedder or a chat client reads files (a model, certificates): off the event loop.
    if embedder is None:
        embedder = yield blocking(make_embedder, context.embeddings)
    if llm is None and context.chat.configured and may_call_llm(context, mode, input_schema, output_schema):
        llm = yield blocking(hyde_chat_model, context)
    plan = _plan(query, context, embedder, llm, mode, input_schema, output_schema, resources)
    return _Job(query, context, embedder, llm, input_schema, output_schema, resources.hyde_cache, plan)


def _raw_or_none(embedder: Embedder, query: str, status: HydeStatus, reason: str) -> Steps[QueryEmbedding]:
    try:
        vector = yield call(embedder.embed_query, embedder.aembed_query, query)
    except EmbeddingError as error:
        return QueryEmbedding(None, status, reason=f"{reason}; query embedding failed: {error}".lstrip("; "))
    return QueryEmbedding(vector, status, reason=reason)


def _compute(job: _Job) -> Steps[QueryEmbedding]:
    """The vector as the plan says: the raw query, or HyDE's texts averaged, falling back to the raw query."""
    query, embedder, plan = job.query, job.embedder, job.plan
    if plan.action == "raw":
        return (yield from _raw_or_none(embedder, query, plan.status, plan.reason))
    if plan.action == "passages":
        texts = yield from _passages(query, job.context.hyde_num_docs, job.llm, job.context)
    else:
        formatted = yield from _schema_text(query, job.input_schema, job.output_schema, job.llm, job.context)
        texts = [formatted] if formatted else []
    if not texts:
        return (yield from _raw_or_none(embedder, query, "failed", "HyDE returned nothing: raw query used"))
    try:
        vectors = yield call(embedder.embed_documents, embedder.aembed_documents, texts)
    except EmbeddingError as error:
        reason = f"HyDE embedding failed ({error}): raw query used"
        return (yield from _raw_or_none(embedder, query, "failed", reason))
    what = f"{len(vectors)} hypothetical passages" if plan.action == "passages" else "the schema template"
    return QueryEmbedding(average(vectors), "used", reason=f"vector from {what}")


# The two faces below differ only in how a caller waits, which is why they are two: a sync caller cannot be
# cancelled mid-call, so the first caller of a question computes in its own thread; an async caller can be
# (a tool's deadline), so its computation runs as a task of its own that the caller only awaits, and giving up
# cancels neither that task nor the other callers waiting on it.


def get_query_embedding_for_retrieval(
    query: str,
    context: Context | None = None,
    *,
    embedder: Embedder | None = None,
    llm: BaseChatModel | None = None,
    mode: HydeMode = "auto",
    input_schema: Any = None,
    output_schema: Any = None,
    resources: SearchResources | None = None,
) -> QueryEmbedding:
    """The vector for vector search, made as the settings say, never raising for provider failures.

    HyDE off -> the raw query on the query side. A query of at most `hyde_skip_max_words` words ->
    the raw query, no LLM call. Otherwise the hypothetical passages (or the schema template) on the
    document side, averaged and re-normalised. HyDE empty, failed or past `hyde_timeout_seconds` -> the
    raw query. Embedding failure -> `vector=None`, and the caller returns no vector results. Concurrent
    and repeated calls of one question share one computation through `resources` (by default the
    process's shared instance). Without `context`, the default settings (the environment is read only by the
    apps and `Retrieval.from_env`).
    """
    job = run(_prepare(query, context, embedder, llm, mode, input_schema, output_schema, resources))
    claim = job.cache.claim(job.plan.key)
    if claim.value is not None:
        return job.reused(claim.value)
    assert claim.future is not None
    if not claim.owner:
        return job.reused(claim.future.result())
    try:
        result = run(_compute(job))
    except BaseException as error:
        job.cache.abandon(job.plan.key, claim.future, error)
        raise
    return job.fulfil(claim.future, result)


async def aget_query_embedding_for_retrieval(
    query: str,
    context: Context | None = None,
    *,
    embedder: Embedder | None = None,
    llm: BaseChatModel | None = None,
    mode: HydeMode = "auto",
    input_schema: Any = None,
    output_schema: Any = None,
    resources: SearchResources | None = None,
) -> QueryEmbedding:
    """Async `get_query_embedding_for_retrieval`, sharing its cache and in-flight calls."""
    job = await arun(_prepare(query, context, embedder, llm, mode, input_schema, output_schema, resources))
    claim = job.cache.claim(job.plan.key)
    if claim.value is not None:
        return job.reused(claim.value)
    assert claim.future is not None
    if not claim.owner:
        return job.reused(await asyncio.shield(asyncio.wrap_future(claim.future)))
    task = asyncio.ensure_future(arun(_compute(job)))
    task.add_done_callback(functools.partial(job.complete, claim.future))
    return await asyncio.shield(task)
