"""The Voyage and OpenAI code paths through their real SDKs, against tests.fakeapi's local HTTP server.

Nothing here mocks an SDK: voyageai (requests/aiohttp), openai (via langchain-openai's OpenAIEmbeddings
and ChatOpenAI) build real requests, retry, time out and parse real responses. The server records
every request, so the tests check what was sent (input_type, batching, temperature, HyDE passages).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from agent_retrieval import hyde
from agent_retrieval.context import SETTINGS, Context
from agent_retrieval.errors import EmbeddingError
from agent_retrieval.hyde import (
    aget_query_embedding_for_retrieval,
    get_query_embedding_for_retrieval,
    parse_passages,
)
from agent_retrieval.providers.embeddings import make_embedder
from agent_retrieval.search.retrieval import Retrieval
from tests.fakeapi import FakeAPI

QUERY = "do estate agents have to disclose referral fees paid by third parties"  # 12 words: HyDE runs
OPENAI_SECRET = "sk-test-secret"
VOYAGE_SECRET = "pa-voyage-secret-123"


def voyage_context(api: FakeAPI, **overrides) -> Context:
    settings = {
        "embedding_provider": "voyage",
        "voyage_api_key": "k",
        "voyage_base_url": api.voyage_url,
        **overrides,
    }
    return Context(**settings)


def openai_context(api: FakeAPI, **overrides) -> Context:
    settings = {
        "embedding_provider": "openai",
        "openai_api_key": OPENAI_SECRET,
        "openai_base_url": api.openai_url,
        **overrides,
    }
    return Context(**settings)


def assert_unit_rows(matrix: np.ndarray, api: FakeAPI, texts: list[str]) -> None:
    """Every row has length 1 and points the way the server's vector for that text does."""
    assert matrix.shape == (len(texts), api.dim)
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(matrix, np.stack([api.unit_vector(t) for t in texts]), rtol=1e-5, atol=1e-6)


# --- Voyage -------------------------------------------------------------------------------------


def test_voyage_sends_input_type_query_and_document(api):
    embedder = make_embedder(voyage_context(api).embeddings)
    assert embedder.model_id == "voyage/voyage-3.5"

    query = embedder.embed_query("what is a referral fee")
    docs = embedder.embed_documents(["Referral fees must be disclosed.", "Deposits are protected."])

    sent = api.requests_to("embeddings", api="voyage")
    assert [r.path for r in sent] == ["/voyage/v1/embeddings"] * 2
    assert [(r.body["input_type"], r.body["input"]) for r in sent] == [
        ("query", ["what is a referral fee"]),
        ("document", ["Referral fees must be disclosed.", "Deposits are protected."]),
    ]
    assert all(r.body["model"] == "voyage-3.5" for r in sent)
    assert all(r.headers["authorization"] == "Bearer k" for r in sent)
    assert_unit_rows(query[None, :], api, ["what is a referral fee"])
    assert_unit_rows(docs, api, ["Referral fees must be disclosed.", "Deposits are protected."])


async def test_voyage_async_sides(api):
    embedder = make_embedder(voyage_context(api).embeddings)
    query = await embedder.aembed_query("what is a referral fee")
    docs = await embedder.aembed_documents(["one text", "another text"])
    sides = [r.body["input_type"] for r in api.requests_to("embeddings", api="voyage")]
    assert sides == ["query", "document"]
    assert_unit_rows(query[None, :], api, ["what is a referral fee"])
    assert_unit_rows(docs, api, ["one text", "another text"])


@pytest.mark.parametrize("variable", ["AGENT_RETRIEVAL_USE_VOYAGE_EMBEDDINGS", "USE_VOYAGE_EMBEDDINGS"])
def test_the_earlier_use_voyage_embeddings_variable_still_selects_voyage_with_a_warning(
    api, monkeypatch, variable
):
    """The setting is gone (embedding_provider says it); the seed's variable still works until 1.0."""
    monkeypatch.setenv(variable, "true")
    monkeypatch.setenv("VOYAGE_API_KEY", "k")
    monkeypatch.setenv("AGENT_RETRIEVAL_VOYAGE_BASE_URL", api.voyage_url)
    with pytest.warns(
        FutureWarning, match=f"{variable} is deprecated: set AGENT_RETRIEVAL_EMBEDDING_PROVIDER=voyage"
    ):
        context = Context.from_env()
    assert "use_voyage_embeddings" not in SETTINGS
    given = Context.from_env(embedding_provider="local")
    assert given.embeddings.embedding_provider == "local"  # a given value wins
    embedder = make_embedder(context.embeddings)
    assert embedder.model_id == "voyage/voyage-3.5"
    vector = embedder.embed_query("hello")
    assert [r.path for r in api.requests] == ["/voyage/v1/embeddings"]
    assert_unit_rows(vector[None, :], api, ["hello"])


def test_voyage_retries_a_429_then_succeeds(api):
    api.fail_next(status=429, times=1, api="voyage")
    embedder = make_embedder(
        voyage_context(api, max_retries=1).embeddings
    )  # the SDK waits 1-2 s before retrying
    vector = embedder.embed_query("retry me")
    assert len(api.requests_to("embeddings", api="voyage")) == 2
    assert_unit_rows(vector[None, :], api, ["retry me"])


@pytest.mark.parametrize("status", [500, 503])
def test_voyage_persistent_server_error_is_an_embedding_error_without_the_key(api, status):
    api.fail_next(status=status, times=None, api="voyage")
    embedder = make_embedder(voyage_context(api, voyage_api_key=VOYAGE_SECRET, max_retries=0).embeddings)
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed_documents(["a", "b"])
    message = str(caught.value)
    assert message.startswith("voyage/voyage-3.5 failed")
    assert f"HTTP {status}" in message
    assert VOYAGE_SECRET not in message
    assert len(api.requests) == 1  # max_retries=0: one attempt, no retry


# --- OpenAI embeddings --------------------------------------------------------------------------


def test_openai_embeddings_through_the_sdk(api):
    embedder = make_embedder(openai_context(api).embeddings)
    assert embedder.model_id == "openai/text-embedding-3-small"

    query = embedder.embed_query("what is a referral fee")
    docs = embedder.embed_documents(["first text", "second text"])

    sent = api.requests_to("embeddings", api="openai")
    assert [r.path for r in sent] == ["/openai/v1/embeddings"] * 2
    assert [r.body["input"] for r in sent] == [["what is a referral fee"], ["first text", "second text"]]
    assert all(r.body["model"] == "text-embedding-3-small" for r in sent)
    assert all(r.headers["authorization"] == f"Bearer {OPENAI_SECRET}" for r in sent)
    assert_unit_rows(query[None, :], api, ["what is a referral fee"])
    assert_unit_rows(docs, api, ["first text", "second text"])


@pytest.mark.parametrize("provider", ["openai", "voyage"])
def test_float_list_responses_are_read_too(api, provider):
    """Both SDKs ask for base64; a server answering float lists anyway (Ollama, vLLM) still works."""
    api.encoding = "float"
    context = openai_context(api) if provider == "openai" else voyage_context(api)
    vector = make_embedder(context.embeddings).embed_query("floats please")
    assert api.requests[0].body.get("encoding_format") == "base64"
    assert_unit_rows(vector[None, :], api, ["floats please"])


def test_openai_batches_by_embedding_batch_size(api):
    texts = [f"text number {i}" for i in range(5)]
    embedder = make_embedder(openai_context(api, embedding_batch_size=2).embeddings)
    matrix = embedder.embed_documents(texts)
    assert [r.body["input"] for r in api.requests_to("embeddings")] == [texts[0:2], texts[2:4], texts[4:5]]
    assert_unit_rows(matrix, api, texts)


async def test_openai_async_batches_and_query(api):
    texts = [f"text number {i}" for i in range(3)]
    embedder = make_embedder(openai_context(api, embedding_batch_size=2).embeddings)
    matrix = await embedder.aembed_documents(texts)
    query = await embedder.aembed_query("async query")
    sent = [r.body["input"] for r in api.requests_to("embeddings")]
    assert sent == [texts[0:2], texts[2:3], ["async query"]]
    assert_unit_rows(matrix, api, texts)
    assert_unit_rows(query[None, :], api, ["async query"])


def test_openai_retries_a_429_with_retry_after_zero(api):
    api.fail_next(status=429, times=1, retry_after=0, api="openai")
    embedder = make_embedder(openai_context(api, max_retries=2).embeddings)
    vector = embedder.embed_query("retry me")
    assert len(api.requests_to("embeddings")) == 2
    assert_unit_rows(vector[None, :], api, ["retry me"])


def test_openai_persistent_429_is_an_embedding_error_without_the_key(api):
    api.fail_next(status=429, times=None, api="openai")
    embedder = make_embedder(openai_context(api, max_retries=0).embeddings)
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed_query("rate limited")
    assert "HTTP 429" in str(caught.value)
    assert OPENAI_SECRET not in str(caught.value)
    assert len(api.requests) == 1


@pytest.mark.parametrize("provider", ["openai", "voyage"])
def test_a_persistent_429_without_retry_after_is_retried_with_backoff_then_given_up(api, provider):
    """No Retry-After header: the SDK's own backoff with jitter paces the retries; max_retries bounds them."""
    api.fail_next(status=429, times=None, api=provider)
    context = (
        openai_context(api, max_retries=1) if provider == "openai" else voyage_context(api, max_retries=1)
    )
    embedder = make_embedder(context.embeddings)
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match="HTTP 429"):
        embedder.embed_query("rate limited")
    assert len(api.requests_to("embeddings", api=provider)) == 2  # one try and one retry, no more
    assert time.monotonic() - started > 0.2, "the retry did not back off"


def test_an_embedding_request_that_hangs_times_out_each_attempt_and_gives_up(api):
    api.delay_next(5.0, times=None, endpoint="embeddings")
    embedder = make_embedder(openai_context(api, request_timeout_seconds=0.3, max_retries=1).embeddings)
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match="Timeout"):
        embedder.embed_query("slow provider")
    elapsed = time.monotonic() - started
    assert len(api.requests_to("embeddings")) == 2
    assert elapsed < 4, f"two 0.3 s attempts took {elapsed:.2f}s"


UNUSABLE = [
    ("documents", "wrong_dimension"),  # one lone query vector has no other row to disagree with
    ("documents", "empty_data"),
    ("query", "empty_data"),
    ("documents", "malformed_json"),
    ("query", "malformed_json"),
]


@pytest.mark.parametrize(("side", "kind"), UNUSABLE)
@pytest.mark.parametrize("provider", ["openai", "voyage"])
def test_unusable_responses_are_embedding_errors(api, provider, side, kind):
    """The openai SDK rejects an empty data list itself; voyageai does not, so the Embedder must."""
    api.malform_next(kind, times=None, api=provider)
    if provider == "openai":
        context = openai_context(api, max_retries=0)
        model_id, secret = "openai/text-embedding-3-small", OPENAI_SECRET
    else:
        context = voyage_context(api, voyage_api_key=VOYAGE_SECRET, max_retries=0)
        model_id, secret = "voyage/voyage-3.5", VOYAGE_SECRET
    embedder = make_embedder(context.embeddings)
    if side == "query":
        embed, texts = embedder.embed_query, "a query"
    else:
        embed, texts = embedder.embed_documents, ["first", "second", "third"]
    with pytest.raises(EmbeddingError) as caught:
        embed(texts)
    message = str(caught.value)
    assert message.startswith(model_id)
    assert secret not in message
    assert len(api.requests) == 1


def test_openai_wrong_dimension_across_batches_is_an_embedding_error(api):
    """Each response is self-consistent, but the second batch's vectors are one shorter."""
    embedder = make_embedder(openai_context(api, embedding_batch_size=1, max_retries=0).embeddings)
    embedder.embed_documents(["warm up"])  # the first request is fine
    api.malform_next("wrong_dimension", times=1, api="openai")
    with pytest.raises(EmbeddingError, match="different lengths"):
        embedder.embed_documents(["ok", "short"])


# --- HyDE through a real ChatOpenAI -------------------------------------------------------------


def hyde_context(api: FakeAPI, **overrides) -> Context:
    return openai_context(api, **{"use_hyde": True, "openai_api_key": "x", **overrides})


def assert_hyde_used(api: FakeAPI, result: hyde.QueryEmbedding) -> None:
    passages = parse_passages(api.chat_reply, 2)
    assert len(passages) == 2
    assert result.hyde == "used"
    chats = api.requests_to("chat/completions", api="openai")
    assert len(chats) == 1
    body = chats[0].body
    assert body["model"] == "gpt-4o-mini"
    assert "temperature" in body and body["temperature"] <= 0.2
    assert any(m["role"] == "user" and m["content"] == QUERY for m in body["messages"])
    assert chats[0].headers["authorization"] == "Bearer x"
    embeds = api.requests_to("embeddings", api="openai")
    assert [r.body["input"] for r in embeds] == [passages]  # the passages, never the raw query
    expected = np.mean([api.unit_vector(p) for p in passages], axis=0)
    np.testing.assert_allclose(result.vector, expected / np.linalg.norm(expected), rtol=1e-5, atol=1e-6)


def test_hyde_uses_the_chat_reply_passages(api):
    context = hyde_context(api)
    embedder = make_embedder(context.embeddings)
    result = get_query_embedding_for_retrieval(QUERY, context, embedder=embedder)
    assert_hyde_used(api, result)

    again = get_query_embedding_for_retrieval(QUERY, context, embedder=embedder)  # the TTL cache answers
    assert again.cached and again.hyde == "used"
    assert len(api.requests) == 2  # still one chat and one embeddings request


async def test_hyde_async_uses_the_chat_reply_passages(api):
    context = hyde_context(api)
    result = await aget_query_embedding_for_retrieval(
        QUERY, context, embedder=make_embedder(context.embeddings)
    )
    assert_hyde_used(api, result)


def assert_raw_fallback(api: FakeAPI, result: hyde.QueryEmbedding) -> None:
    """HyDE failed after one chat attempt, and the vector is the raw query's, embedded once."""
    assert result.hyde == "failed"
    assert len(api.requests_to("chat/completions")) == 1
    assert [r.body["input"] for r in api.requests_to("embeddings")] == [[QUERY]]
    np.testing.assert_allclose(result.vector, api.unit_vector(QUERY), rtol=1e-5, atol=1e-6)


def test_hyde_chat_500_falls_back_to_the_raw_query(api):
    api.fail_next(status=500, times=None, endpoint="chat/completions")
    context = hyde_context(api, max_retries=0)
    result = get_query_embedding_for_retrieval(QUERY, context, embedder=make_embedder(context.embeddings))
    assert_raw_fallback(api, result)


async def test_hyde_async_chat_500_falls_back_to_the_raw_query(api):
    api.fail_next(status=500, times=None, endpoint="chat/completions")
    context = hyde_context(api, max_retries=0)
    result = await aget_query_embedding_for_retrieval(
        QUERY, context, embedder=make_embedder(context.embeddings)
    )
    assert_raw_fallback(api, result)


def test_hyde_embedding_failure_after_chat_leaves_no_vector_and_says_why(api):
    api.fail_next(status=500, times=None, endpoint="embeddings")
    context = hyde_context(api, openai_api_key=OPENAI_SECRET, max_retries=0)
    result = get_query_embedding_for_retrieval(QUERY, context, embedder=make_embedder(context.embeddings))
    assert result.vector is None and result.hyde == "failed"
    assert "HTTP 500" in result.reason and OPENAI_SECRET not in result.reason
    assert len(api.requests_to("chat/completions")) == 1
    assert [r.body["input"] for r in api.requests_to("embeddings")] == [
        parse_passages(api.chat_reply, 2),
        [QUERY],
    ]


# --- the HyDE deadline --------------------------------------------------------------------------


async def test_async_hyde_gives_up_at_hyde_timeout_seconds(api):
    api.delay_next(2.0, times=None, endpoint="chat/completions")
    context = hyde_context(api, hyde_timeout_seconds=0.3, max_retries=0)
    embedder = make_embedder(context.embeddings)
    started = time.monotonic()
    result = await aget_query_embedding_for_retrieval(QUERY, context, embedder=embedder)
    elapsed = time.monotonic() - started
    assert elapsed < 1.8, f"async HyDE took {elapsed:.2f}s with hyde_timeout_seconds=0.3"
    assert_raw_fallback(api, result)


async def test_async_hyde_deadline_covers_the_sdk_retries(api):
    """hyde_timeout_seconds bounds the whole call, not each attempt: retries must not stretch it."""
    api.delay_next(2.0, times=None, endpoint="chat/completions")
    context = hyde_context(api, hyde_timeout_seconds=0.3, max_retries=2)
    started = time.monotonic()
    result = await aget_query_embedding_for_retrieval(
        QUERY, context, embedder=make_embedder(context.embeddings)
    )
    elapsed = time.monotonic() - started
    # without the overall deadline: three 0.3 s attempts plus >= 1.1 s of backoff, over 2 s
    assert elapsed < 1.5, f"async HyDE took {elapsed:.2f}s with hyde_timeout_seconds=0.3 and 2 retries"
    assert result.hyde == "failed"
    np.testing.assert_allclose(result.vector, api.unit_vector(QUERY), rtol=1e-5, atol=1e-6)


def test_sync_hyde_gives_up_at_hyde_timeout_seconds(api):
    api.delay_next(2.0, times=None, endpoint="chat/completions")
    context = hyde_context(api, hyde_timeout_seconds=0.3, max_retries=0)
    started = time.monotonic()
    result = get_query_embedding_for_retrieval(QUERY, context, embedder=make_embedder(context.embeddings))
    elapsed = time.monotonic() - started
    assert elapsed < 1.8, f"sync HyDE took {elapsed:.2f}s with hyde_timeout_seconds=0.3"
    assert_raw_fallback(api, result)


def test_sync_hyde_deadline_holds_with_retries_configured(api):
    api.delay_next(2.0, times=None, endpoint="chat/completions")
    context = hyde_context(api, hyde_timeout_seconds=0.3, max_retries=1)
    started = time.monotonic()
    result = get_query_embedding_for_retrieval(QUERY, context, embedder=make_embedder(context.embeddings))
    elapsed = time.monotonic() - started
    assert result.hyde == "failed"
    # were the chat call retried, two 0.3 s attempts plus >= 0.375 s backoff would take >= 0.975 s
    assert elapsed < 0.9, f"sync HyDE took {elapsed:.2f}s with hyde_timeout_seconds=0.3"


# --- the tool call's deadline -------------------------------------------------------------------

DEADLINE_DOCS = [
    ("deposits", "Tenancy deposits", "A landlord must protect a tenancy deposit within 30 days."),
    ("fees", "Referral fees", "Estate agents must disclose referral fees paid by third parties."),
]


@pytest.fixture
def slow_embeddings_tools(api, tmp_path):
    """Both tools on a store ingested through the fake OpenAI server, whose embeddings then hang for 5 s."""
    from agent_retrieval.ingest import ingest
    from agent_retrieval.models import Document
    from agent_retrieval.tools import make_retrieval_tools

    context = openai_context(
        api,
        db_path=str(tmp_path / "store.db"),
        tool_timeout_seconds=0.5,
        request_timeout_seconds=10,
        max_retries=3,
    )
    tools = make_retrieval_tools(Retrieval(context))
    retrieval = tools[0].retrieval
    ingest(
        [Document(id=i, title=t, content=c) for i, t, c in DEADLINE_DOCS],
        retrieval.store,
        retrieval.embedder,
        context,
        progress=False,
    )
    api.delay_next(5.0, times=None, endpoint="embeddings")
    yield tools
    retrieval.close()


def assert_keyword_only_within_the_deadline(message, elapsed: float) -> None:
    # without the deadline the call waits out the 5 s embedding request
    assert elapsed < 2.5, f"the tool took {elapsed:.2f}s with tool_timeout_seconds=0.5"
    assert message.status == "success"
    hits = message.artifact["hits"]
    assert hits and hits[0]["id"].startswith("fees") and all(h["found_by"] == ["keyword"] for h in hits)
    assert any(
        "tool_timeout_seconds=0.5" in note and "keyword-only" in note for note in message.artifact["degraded"]
    )
    assert "keyword-only" in message.content


def test_a_hanging_embedding_provider_gives_keyword_results_at_the_tool_deadline(slow_embeddings_tools):
    document_retriever, _ = slow_embeddings_tools
    started = time.monotonic()
    message = document_retriever.invoke(
        {
            "type": "tool_call",
            "id": "1",
            "name": "document_retriever",
            "args": {"query": "referral fees estate agents"},
        }
    )
    assert_keyword_only_within_the_deadline(message, time.monotonic() - started)


async def test_async_tool_calls_keep_the_deadline_too(slow_embeddings_tools):
    _, chunk_retriever = slow_embeddings_tools
    started = time.monotonic()
    message = await chunk_retriever.ainvoke(
        {
            "type": "tool_call",
            "id": "1",
            "name": "chunk_retriever",
            "args": {"query": "referral fees estate agents"},
        }
    )
    assert_keyword_only_within_the_deadline(message, time.monotonic() - started)
