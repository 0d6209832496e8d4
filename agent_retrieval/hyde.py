"""The one place the retrieval query vector is computed: raw query, HyDE passages, or the schema template.

HyDE: an LLM writes short hypothetical passages answering the question; their document-side
embeddings, averaged, replace the raw query's for vector search (keyword search always keeps the
user's words). A TTL cache keyed by the query and every setting that changes the vector lets
document_retriever and then chunk_retriever share one LLM call, and concurrent identical queries
share one in-flight computation. HyDE text never leaves this module and is never logged.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import threading
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
from cachetools import TLRUCache
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from agent_retrieval.context import Context
from agent_retrieval.embeddings import Embedder, average, make_embedder
from agent_retrieval.errors import EmbeddingError
from agent_retrieval.llm import make_chat_model
from agent_retrieval.models import HydeMode, HydeStatus
from agent_retrieval.prompts import load_prompt, prompt_version
from agent_retrieval.redaction import endpoint_id, fingerprint

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


_lock = threading.Lock()
_cache: TLRUCache = TLRUCache(maxsize=2048, ttu=lambda _key, value, now: now + value[1])
_inflight: dict[tuple[Any, ...], Future] = {}
_warned_no_llm = False


def clear_cache() -> None:
    """Forget every cached query vector (tests, or after re-embedding a store)."""
    with _lock:
        _cache.clear()


def word_count(query: str) -> int:
    return len(query.split())


# --- the LLM calls ------------------------------------------------------------------------------


def _passages_messages(query: str, num: int) -> list[Any]:
    return [SystemMessage(load_prompt("hyde").replace("{num}", str(num))), HumanMessage(query)]


def _schema_messages(query: str, input_schema: Any, output_schema: Any) -> list[Any]:
    parts = [f"Request: {query}"]
    if input_schema:
        parts.append(f"Input schema: {json.dumps(input_schema, sort_keys=True, default=str)}")
    if output_schema:
        parts.append(f"Output schema: {json.dumps(output_schema, sort_keys=True, default=str)}")
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
    """ONE LLM call writing `num` short passages that answer the question; [] on any failure."""
    llm = llm or hyde_chat_model(context or Context())
    if llm is None:
        return []
    try:
        reply = llm.invoke(_passages_messages(query, num))
    except Exception as error:
        log.warning("HyDE generation failed (%s); using the raw query", type(error).__name__)
        return []
    return _log_passages(parse_passages(reply.text, num))


async def agenerate_hypothetical_documents(
    query: str, num: int = 2, *, llm: BaseChatModel | None = None, context: Context | None = None
) -> list[str]:
    """Async `generate_hypothetical_documents`, bounded by the HyDE timeout."""
    context = context or Context()
    llm = llm or hyde_chat_model(context)
    if llm is None:
        return []
    try:
        reply = await asyncio.wait_for(
            llm.ainvoke(_passages_messages(query, num)), context.hyde_timeout_seconds
        )
    except Exception as error:
        log.warning("HyDE generation failed (%s); using the raw query", type(error).__name__)
        return []
    return _log_passages(parse_passages(reply.text, num))


def _log_passages(passages: list[str]) -> list[str]:
    log.debug("HyDE generated %d passages", len(passages))  # counts only: the text is never logged
    return passages


def format_query_for_embedding(
    query: str,
    input_schema: Any = None,
    output_schema: Any = None,
    *,
    llm: BaseChatModel | None = None,
    context: Context | None = None,
) -> str | None:
    """Rewrite a request into the stored-item template (Inputs / Outputs / Purpose); None on failure."""
    llm = llm or hyde_chat_model(context or Context())
    if llm is None:
        return None
    try:
        text = llm.invoke(_schema_messages(query, input_schema, output_schema)).text.strip()
    except Exception as error:
        log.warning("schema query formatting failed (%s); using the raw query", type(error).__name__)
        return None
    return text or None


async def aformat_query_for_embedding(
    query: str,
    input_schema: Any = None,
    output_schema: Any = None,
    *,
    llm: BaseChatModel | None = None,
    context: Context | None = None,
) -> str | None:
    """Async `format_query_for_embedding`, bounded by the HyDE timeout."""
    context = context or Context()
    llm = llm or hyde_chat_model(context)
    if llm is None:
        return None
    try:
        reply = await asyncio.wait_for(
            llm.ainvoke(_schema_messages(query, input_schema, output_schema)), context.hyde_timeout_seconds
        )
    except Exception as error:
        log.warning("schema query formatting failed (%s); using the raw query", type(error).__name__)
        return None
    return reply.text.strip() or None


def hyde_chat_model(context: Context) -> BaseChatModel | None:
    """The chat model HyDE calls, or None when none is configured."""
    # No retries: the SDK's timeout is per attempt, and HyDE is best-effort within hyde_timeout_seconds.
    return make_chat_model(
        context,
        model=context.hyde_chat_model,
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
) -> _Plan:
    """Decide how the vector is made, and the cache key naming everything that changes it."""
    global _warned_no_llm
    text = " ".join(query.split())
    if mode == "auto":
        if input_schema or output_schema:
            mode = "schema"
        else:
            mode = context.hyde_mode if context.use_hyde else "off"
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
        if not _warned_no_llm:
            log.info("HyDE skipped: no chat model configured (set OPENAI_API_KEY or OPENAI_BASE_URL)")
            _warned_no_llm = True
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


def _cache_scope(context: Context, embedder: Embedder) -> tuple[str, ...]:
    """Who may share a cached vector: callers of one tenant (a cache hit must not tell one tenant what another
    asked), embedding through the same endpoint with the same key (another endpoint could plant vectors)."""
    return (context.tenant_id, fingerprint(context.supabase_user_token), embedder.model_id, embedder.endpoint)


def _chat_endpoint(llm: BaseChatModel) -> str:
    """Where HyDE's chat model is served and with which key, when the model says (ChatOpenAI does)."""
    key = getattr(llm, "openai_api_key", None)
    return endpoint_id(
        getattr(llm, "openai_api_base", None),
        key.get_secret_value() if hasattr(key, "get_secret_value") else key,
    )


def _prepare(
    query: str,
    context: Context | None,
    embedder: Embedder | None,
    llm: BaseChatModel | None,
    mode: HydeMode,
    input_schema: Any,
    output_schema: Any,
) -> tuple[Context, Embedder, BaseChatModel | None, _Plan]:
    """Fill in what the caller left out (from the Context) and plan the computation."""
    context = context or Context()
    embedder = embedder or make_embedder(context)
    if llm is None and (context.use_hyde or mode in ("passages", "schema") or input_schema or output_schema):
        llm = hyde_chat_model(context)
    return context, embedder, llm, _plan(query, context, embedder, llm, mode, input_schema, output_schema)


def _begin(plan: _Plan) -> tuple[QueryEmbedding | None, Future, bool]:
    """A cached result, or the in-flight future to wait on, or a new future this caller must fulfil."""
    with _lock:
        hit = _cache.get(plan.key)
        if hit is not None:
            return _reused(hit[0], plan), Future(), False
        future = _inflight.get(plan.key)
        if future is not None:
            return None, future, False
        future = _inflight[plan.key] = Future()
        return None, future, True


def _reused(result: QueryEmbedding, plan: _Plan) -> QueryEmbedding:
    """A cached or shared result, saying why this call used it: "off" and "skipped" share the raw vector."""
    if plan.action == "raw" and result.vector is not None:
        return replace(result, cached=True, hyde=plan.status, reason=plan.reason)
    return replace(result, cached=True)


def _finish(plan: _Plan, future: Future, result: QueryEmbedding, ttl: float) -> QueryEmbedding:
    with _lock:
        if result.vector is not None and ttl > 0:  # a failed embedding is retried by the next call
            _cache[plan.key] = (result, ttl)
        _inflight.pop(plan.key, None)
    future.set_result(result)
    return result


def _abandon(plan: _Plan, future: Future, error: BaseException) -> None:
    with _lock:
        _inflight.pop(plan.key, None)
    future.set_exception(error)


def _raw_or_none(embedder: Embedder, query: str, status: HydeStatus, reason: str) -> QueryEmbedding:
    try:
        return QueryEmbedding(embedder.embed_query(query), status, reason=reason)
    except EmbeddingError as error:
        return QueryEmbedding(None, status, reason=f"{reason}; query embedding failed: {error}".lstrip("; "))


async def _araw_or_none(embedder: Embedder, query: str, status: HydeStatus, reason: str) -> QueryEmbedding:
    try:
        return QueryEmbedding(await embedder.aembed_query(query), status, reason=reason)
    except EmbeddingError as error:
        return QueryEmbedding(None, status, reason=f"{reason}; query embedding failed: {error}".lstrip("; "))


def _averaged(vectors: np.ndarray, mode: str) -> QueryEmbedding:
    count = len(vectors)
    what = f"{count} hypothetical passages" if mode == "passages" else "the schema template"
    return QueryEmbedding(average(vectors), "used", reason=f"vector from {what}")


def get_query_embedding_for_retrieval(
    query: str,
    context: Context | None = None,
    *,
    embedder: Embedder | None = None,
    llm: BaseChatModel | None = None,
    mode: HydeMode = "auto",
    input_schema: Any = None,
    output_schema: Any = None,
) -> QueryEmbedding:
    """The vector for vector search, made as the settings say, never raising for provider failures.

    HyDE off -> the raw query on the query side. A query of at most `hyde_skip_max_words` words ->
    the raw query, no LLM call. Otherwise the hypothetical passages (or the schema template) on the
    document side, averaged and re-normalised. HyDE empty or failed -> the raw query. Embedding
    failure -> `vector=None`, and the caller returns no vector results.
    """
    context, embedder, llm, plan = _prepare(query, context, embedder, llm, mode, input_schema, output_schema)
    cached, future, owner = _begin(plan)
    if cached is not None:
        return cached
    if not owner:
        return _reused(future.result(), plan)
    try:
        result = _compute(query, context, embedder, llm, plan, input_schema, output_schema)
    except BaseException as error:
        _abandon(plan, future, error)
        raise
    return _finish(plan, future, result, context.hyde_cache_ttl_seconds)


def _compute(
    query: str,
    context: Context,
    embedder: Embedder,
    llm: BaseChatModel | None,
    plan: _Plan,
    input_schema: Any,
    output_schema: Any,
) -> QueryEmbedding:
    if plan.action == "raw":
        return _raw_or_none(embedder, query, plan.status, plan.reason)
    if plan.action == "passages":
        texts = generate_hypothetical_documents(query, context.hyde_num_docs, llm=llm, context=context)
    else:
        formatted = format_query_for_embedding(query, input_schema, output_schema, llm=llm, context=context)
        texts = [formatted] if formatted else []
    if not texts:
        return _raw_or_none(embedder, query, "failed", "HyDE returned nothing: raw query used")
    try:
        vectors = embedder.embed_documents(texts)
    except EmbeddingError as error:
        return _raw_or_none(embedder, query, "failed", f"HyDE embedding failed ({error}): raw query used")
    return _averaged(vectors, plan.action)


async def aget_query_embedding_for_retrieval(
    query: str,
    context: Context | None = None,
    *,
    embedder: Embedder | None = None,
    llm: BaseChatModel | None = None,
    mode: HydeMode = "auto",
    input_schema: Any = None,
    output_schema: Any = None,
) -> QueryEmbedding:
    """Async `get_query_embedding_for_retrieval`, sharing its cache and in-flight calls."""
    context, embedder, llm, plan = _prepare(query, context, embedder, llm, mode, input_schema, output_schema)
    cached, future, owner = _begin(plan)
    if cached is not None:
        return cached
    # Shielded both ways: a caller giving up (a tool's deadline) must not cancel the computation other
    # callers of the same question wait on, and the vector still lands in the cache for them.
    if not owner:
        return _reused(await asyncio.shield(asyncio.wrap_future(future)), plan)
    task = asyncio.ensure_future(_acompute(query, context, embedder, llm, plan, input_schema, output_schema))
    task.add_done_callback(lambda done: _complete(plan, future, done, context.hyde_cache_ttl_seconds))
    return await asyncio.shield(task)


def _complete(plan: _Plan, future: Future, task: asyncio.Task, ttl: float) -> None:
    """Hand an async computation's outcome to everyone waiting on `plan`."""
    if task.cancelled():
        _abandon(plan, future, asyncio.CancelledError())
    elif task.exception() is not None:
        _abandon(plan, future, task.exception())
    else:
        _finish(plan, future, task.result(), ttl)


async def _acompute(
    query: str,
    context: Context,
    embedder: Embedder,
    llm: BaseChatModel | None,
    plan: _Plan,
    input_schema: Any,
    output_schema: Any,
) -> QueryEmbedding:
    if plan.action == "raw":
        return await _araw_or_none(embedder, query, plan.status, plan.reason)
    if plan.action == "passages":
        texts = await agenerate_hypothetical_documents(query, context.hyde_num_docs, llm=llm, context=context)
    else:
        formatted = await aformat_query_for_embedding(
            query, input_schema, output_schema, llm=llm, context=context
        )
        texts = [formatted] if formatted else []
    if not texts:
        return await _araw_or_none(embedder, query, "failed", "HyDE returned nothing: raw query used")
    try:
        vectors = await embedder.aembed_documents(texts)
    except EmbeddingError as error:
        return await _araw_or_none(
            embedder, query, "failed", f"HyDE embedding failed ({error}): raw query used"
        )
    return _averaged(vectors, plan.action)
