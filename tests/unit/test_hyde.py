"""HyDE: skip rule, on/off, caching and in-flight sharing, fallbacks, averaging, sides, prompt content."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

import numpy as np
import pytest

from agent_retrieval import hyde
from agent_retrieval.context import Context
from agent_retrieval.hyde import (
    aget_query_embedding_for_retrieval,
    format_query_for_embedding,
    generate_hypothetical_documents,
    get_query_embedding_for_retrieval,
    parse_passages,
)
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.tools import make_retrieval_tools
from tests.conftest import CountingChatModel, WordHashEmbeddings, chat_text

LONG = "do agents have to declare themselves legally when a third party pays them"
SHORT = "Banda Lane deposit"


def unit(vector: list[float]) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_off_embeds_the_raw_query_on_the_query_side(embedder, embeddings, chat):
    result = get_query_embedding_for_retrieval(LONG, Context(use_hyde=False), embedder=embedder, llm=chat)
    assert result.hyde == "off"
    assert chat.calls == 0
    assert (embeddings.query_calls, embeddings.document_calls) == (1, 0)
    np.testing.assert_allclose(result.vector, unit(embeddings.vector(LONG)), rtol=1e-5)


@pytest.mark.parametrize(
    ("query", "calls", "status"),
    [
        ("one two three four five", 0, "skipped"),
        ("one two three four five six", 1, "used"),
        (SHORT, 0, "skipped"),
    ],
)
def test_queries_of_at_most_skip_max_words_make_no_llm_call(embedder, chat, query, calls, status):
    result = get_query_embedding_for_retrieval(query, Context(use_hyde=True), embedder=embedder, llm=chat)
    assert (chat.calls, result.hyde) == (calls, status)


def test_skip_threshold_is_a_setting(embedder, chat):
    result = get_query_embedding_for_retrieval(
        "one two three four five six",
        Context(use_hyde=True, hyde_skip_max_words=6),
        embedder=embedder,
        llm=chat,
    )
    assert (chat.calls, result.hyde) == (0, "skipped")


def test_used_averages_the_passages_on_the_document_side_and_renormalises(embedder, embeddings, chat):
    result = get_query_embedding_for_retrieval(LONG, Context(use_hyde=True), embedder=embedder, llm=chat)
    passages = parse_passages(chat.responses[0], 2)
    assert len(passages) == 2
    expected = np.mean([unit(embeddings.vector(p)) for p in passages], axis=0)
    expected /= np.linalg.norm(expected)
    assert result.hyde == "used"
    assert (embeddings.query_calls, embeddings.document_calls) == (0, 1)
    np.testing.assert_allclose(result.vector, expected, rtol=1e-5)
    assert abs(np.linalg.norm(result.vector) - 1) < 1e-5
    assert not np.allclose(result.vector, unit(embeddings.vector(LONG)))


def test_document_then_chunk_retrieval_of_one_question_costs_one_llm_call(retrieval, chat, embeddings):
    retrieval.context = Context(db_path=retrieval.context.store.db_path, use_hyde=True)
    retrieval._llm = chat
    document_retriever, chunk_retriever = make_retrieval_tools(retrieval=retrieval)
    before = embeddings.document_calls
    first = document_retriever.invoke(
        {"type": "tool_call", "id": "1", "name": "document_retriever", "args": {"query": LONG}}
    )
    ids = [h["id"] for h in first.artifact["hits"]]
    second = chunk_retriever.invoke(
        {
            "type": "tool_call",
            "id": "2",
            "name": "chunk_retriever",
            "args": {"query": LONG, "document_ids": ids},
        }
    )
    assert chat.calls == 1
    assert embeddings.document_calls - before == 1  # the passages were embedded once
    assert (first.artifact["hyde"], first.artifact["hyde_cached"]) == ("used", False)
    assert (second.artifact["hyde"], second.artifact["hyde_cached"]) == ("used", True)


def test_concurrent_identical_queries_share_one_in_flight_generation(embedder):
    slow = CountingChatModel(responses=["First passage here.\n\nSecond passage here."], sleep=0.3)
    context = Context(use_hyde=True)
    results = []

    def run() -> None:
        results.append(get_query_embedding_for_retrieval(LONG, context, embedder=embedder, llm=slow))

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert slow.calls == 1
    assert len(results) == 8 and sum(not r.cached for r in results) == 1
    assert all(np.array_equal(r.vector, results[0].vector) for r in results)


async def test_concurrent_identical_async_and_sync_queries_share_one_call(embedder):
    slow = CountingChatModel(responses=["First passage here.\n\nSecond passage here."], sleep=0.3)
    context = Context(use_hyde=True)
    tasks = [aget_query_embedding_for_retrieval(LONG, context, embedder=embedder, llm=slow) for _ in range(6)]
    tasks.append(
        asyncio.to_thread(get_query_embedding_for_retrieval, LONG, context, embedder=embedder, llm=slow)
    )
    results = await asyncio.gather(*tasks)
    assert slow.calls == 1
    assert {r.hyde for r in results} == {"used"}


@pytest.mark.parametrize("impatient_first", [True, False])
async def test_a_caller_giving_up_does_not_cancel_the_hyde_call_others_share(embedder, impatient_first):
    """One caller of a question stops waiting (its tool's deadline) while others still wait for the same
    in-flight HyDE call: they get the vector, and it is cached, whichever of them started it."""
    slow = CountingChatModel(responses=["First passage here.\n\nSecond passage here."], sleep=0.5)
    context = Context(use_hyde=True)

    async def impatient() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(
                aget_query_embedding_for_retrieval(LONG, context, embedder=embedder, llm=slow), 0.1
            )

    async def patient(delay: float) -> hyde.QueryEmbedding:
        if delay:  # without a pause, this call claims the question before wait_for's task runs
            await asyncio.sleep(delay)
        return await aget_query_embedding_for_retrieval(LONG, context, embedder=embedder, llm=slow)

    # the first patient caller starts the call unless the impatient one did; the second always waits on it
    _, *results = await asyncio.gather(impatient(), patient(0.02 if impatient_first else 0), patient(0.04))
    assert all(result.hyde == "used" and result.vector is not None for result in results)
    assert slow.calls == 1
    again = await aget_query_embedding_for_retrieval(LONG, context, embedder=embedder, llm=slow)
    assert again.cached and slow.calls == 1


def test_different_settings_do_not_share_a_cache_entry(embedder, chat):
    get_query_embedding_for_retrieval(LONG, Context(use_hyde=True), embedder=embedder, llm=chat)
    get_query_embedding_for_retrieval(
        "  " + LONG.upper() + " ", Context(use_hyde=True), embedder=embedder, llm=chat
    )
    assert chat.calls == 2  # case is kept (names matter), surrounding whitespace is not
    get_query_embedding_for_retrieval(LONG, Context(use_hyde=True), embedder=embedder, llm=chat)
    get_query_embedding_for_retrieval(
        " ".join(LONG.split()) + "  ", Context(use_hyde=True), embedder=embedder, llm=chat
    )
    assert chat.calls == 2
    get_query_embedding_for_retrieval(
        LONG, Context(use_hyde=True, hyde_num_docs=3), embedder=embedder, llm=chat
    )
    assert chat.calls == 3
    other = Embedder(WordHashEmbeddings(), "test/other-model")
    get_query_embedding_for_retrieval(LONG, Context(use_hyde=True), embedder=other, llm=chat)
    assert chat.calls == 4


def test_cache_entries_expire_after_the_ttl(embedder, chat):
    context = Context(use_hyde=True, hyde_cache_ttl_seconds=0.2)
    get_query_embedding_for_retrieval(LONG, context, embedder=embedder, llm=chat)
    assert get_query_embedding_for_retrieval(LONG, context, embedder=embedder, llm=chat).cached
    time.sleep(0.3)
    assert not get_query_embedding_for_retrieval(LONG, context, embedder=embedder, llm=chat).cached
    assert chat.calls == 2


@pytest.mark.parametrize("reply", ["", "   \n\n  "])
def test_empty_output_falls_back_to_the_raw_query(embedder, embeddings, reply):
    empty = CountingChatModel(responses=[reply])
    result = get_query_embedding_for_retrieval(LONG, Context(use_hyde=True), embedder=embedder, llm=empty)
    assert result.hyde == "failed"
    np.testing.assert_allclose(result.vector, unit(embeddings.vector(LONG)), rtol=1e-5)


async def test_llm_failure_falls_back_to_the_raw_query_sync_and_async(embedder, embeddings):
    down = CountingChatModel(responses=["unused"], fail=True)
    for result in (
        get_query_embedding_for_retrieval(LONG, Context(use_hyde=True), embedder=embedder, llm=down),
        await aget_query_embedding_for_retrieval(
            LONG + " now", Context(use_hyde=True), embedder=embedder, llm=down
        ),
    ):
        assert result.hyde == "failed"
        assert result.vector is not None
    assert generate_hypothetical_documents(LONG, 2, llm=down) == []


async def test_async_generation_is_bounded_by_the_hyde_timeout(embedder, embeddings):
    stuck = CountingChatModel(responses=["too late"], sleep=2.0)
    started = time.monotonic()
    result = await aget_query_embedding_for_retrieval(
        LONG, Context(use_hyde=True, hyde_timeout_seconds=0.2), embedder=embedder, llm=stuck
    )
    assert result.hyde == "failed"
    assert time.monotonic() - started < 1.5


def test_sync_generation_is_bounded_by_the_hyde_timeout(embedder, embeddings):
    """A chat model that ignores every timeout of its own: the sync call still gives up at the bound."""
    stuck = CountingChatModel(responses=["too late"], sleep=2.0)
    started = time.monotonic()
    result = get_query_embedding_for_retrieval(
        LONG, Context(use_hyde=True, hyde_timeout_seconds=0.2), embedder=embedder, llm=stuck
    )
    elapsed = time.monotonic() - started
    assert elapsed < 1.5, f"sync HyDE took {elapsed:.2f}s with hyde_timeout_seconds=0.2"
    assert (result.hyde, stuck.calls) == ("failed", 1)
    np.testing.assert_allclose(result.vector, unit(embeddings.vector(LONG)), rtol=1e-5)


def test_embedding_failure_gives_no_vector_and_is_not_cached(chat):
    broken = WordHashEmbeddings(fail=True)
    embedder = Embedder(broken, "test/broken")
    result = get_query_embedding_for_retrieval(LONG, Context(use_hyde=True), embedder=embedder, llm=chat)
    assert result.vector is None and "embedding failed" in result.reason
    broken.fail = False
    again = get_query_embedding_for_retrieval(LONG, Context(use_hyde=True), embedder=embedder, llm=chat)
    assert again.vector is not None and not again.cached


def test_no_chat_model_configured_skips_hyde_with_a_reason(embedder):
    result = get_query_embedding_for_retrieval(LONG, Context(use_hyde=True), embedder=embedder)
    assert result.hyde == "skipped" and "no chat model" in result.reason
    assert result.vector is not None


def test_the_prompt_asks_for_n_passages_and_keeps_every_name(chat):
    query = (
        "What deposit did Mrs Okafor pay Halden & Rowe Estates for 14 Banda Lane under the Tenancy Agreement?"
    )
    generate_hypothetical_documents(query, 3, llm=chat)
    system, human = chat.messages[0]
    assert human.content == query  # the question is passed verbatim
    assert "exactly 3 short paragraphs" in system.content
    assert "{num}" not in system.content
    for rule in ("Keep every specific name", "Do not add facts", "2 to 4 sentences"):
        assert rule in system.content


def test_parse_passages_drops_numbering_and_caps_the_count():
    assert parse_passages("1. First one.\n2. Second one.\n3. Third.", 2) == ["First one.", "Second one."]
    assert parse_passages("Paragraph 1: Alpha beta.\n\nParagraph 2: Gamma.", 2) == ["Alpha beta.", "Gamma."]
    assert parse_passages("- a b\n- c d", 2) == ["a b", "c d"]
    assert parse_passages("Only one block\nwrapped over lines.", 1) == ["Only one block wrapped over lines."]
    assert parse_passages("", 2) == []


def test_hyde_text_never_reaches_logs_tool_output_or_artifact(retrieval, caplog):
    marker = "Zanzibarquux"
    secret_chat = CountingChatModel(responses=[f"{marker} passage one about commission.\n\n{marker} two."])
    retrieval.context = Context(db_path=retrieval.context.store.db_path, use_hyde=True)
    retrieval._llm = secret_chat
    document_retriever, _ = make_retrieval_tools(retrieval=retrieval)
    with caplog.at_level(logging.DEBUG):
        message = document_retriever.invoke(
            {"type": "tool_call", "id": "1", "name": "document_retriever", "args": {"query": LONG}}
        )
    assert secret_chat.calls == 1 and message.artifact["hyde"] == "used"
    assert marker not in caplog.text
    assert marker not in message.content
    assert marker not in json.dumps(message.artifact)


def test_schema_mode_rewrites_the_request_into_the_catalogue_template(embedder, embeddings):
    template = (
        "Inputs:\n- image (type: RGB image file): a photo\n\nOutputs:\n- caption (type: text): a caption\n\n"
        "Purpose:\n- Describes an image."
    )
    llm = CountingChatModel(responses=[template])
    schema = {"type": "object", "properties": {"image": {"type": "string", "format": "binary"}}}
    result = get_query_embedding_for_retrieval(
        "caption my photos", Context(), embedder=embedder, llm=llm, input_schema=schema
    )
    assert result.hyde == "used" and llm.calls == 1
    sent = chat_text(llm.messages[0])
    assert "Inputs:" in sent and '"image"' in sent and "caption my photos" in sent
    np.testing.assert_allclose(result.vector, unit(embeddings.vector(template)), rtol=1e-5)
    # the same request again is served from the shared cache
    assert get_query_embedding_for_retrieval(
        "caption my photos", Context(), embedder=embedder, llm=llm, input_schema=schema
    ).cached
    assert format_query_for_embedding("caption my photos", llm=CountingChatModel(responses=["  "])) is None


def test_schema_mode_is_selectable_by_setting(embedder):
    llm = CountingChatModel(responses=["Inputs:\n- text\n\nOutputs:\n- summary\n\nPurpose:\n- Summarises."])
    result = get_query_embedding_for_retrieval(
        "summarise a long text", Context(use_hyde=True, hyde_mode="schema"), embedder=embedder, llm=llm
    )
    assert result.hyde == "used"
    assert "Purpose:" in llm.messages[0][0].content  # the schema prompt, not the passages prompt


def test_tool_argument_turns_hyde_on_for_one_call(retrieval, chat):
    retrieval._llm = chat
    _, chunk_retriever = make_retrieval_tools(retrieval=retrieval)
    off = chunk_retriever.invoke(
        {"type": "tool_call", "id": "1", "name": "chunk_retriever", "args": {"query": LONG}}
    )
    on = chunk_retriever.invoke(
        {
            "type": "tool_call",
            "id": "2",
            "name": "chunk_retriever",
            "args": {"query": LONG, "hyde": "passages"},
        }
    )
    assert (off.artifact["hyde"], on.artifact["hyde"]) == ("off", "used")
    assert chat.calls == 1
    assert hyde.word_count(LONG) > 5


def test_a_cached_raw_vector_reports_why_this_call_used_it(embedder, embeddings, chat):
    off = get_query_embedding_for_retrieval(SHORT, Context(use_hyde=False), embedder=embedder, llm=chat)
    skipped = get_query_embedding_for_retrieval(SHORT, Context(use_hyde=True), embedder=embedder, llm=chat)
    assert (off.hyde, off.cached) == ("off", False)
    assert (skipped.hyde, skipped.cached) == ("skipped", True) and "at most 5 words" in skipped.reason
    assert embeddings.query_calls == 1 and chat.calls == 0  # one raw vector serves both
