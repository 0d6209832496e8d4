"""Process-wide settings touched once or under one lock (the log redaction hook, torch's thread count), and
what a Retrieval shares kept in the ProcessState it is given."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agent_retrieval.context import Context
from agent_retrieval.core import redaction
from agent_retrieval.core.process import PROCESS, ProcessState
from agent_retrieval.ingest import ingest
from agent_retrieval.models import ChunkSearchRequest, Document, parse_request
from agent_retrieval.providers.embeddings import make_embedder
from agent_retrieval.providers.llm import make_chat_model
from agent_retrieval.search.resources import SearchResources
from agent_retrieval.search.retrieval import Retrieval
from agent_retrieval.stores import SQLiteStore
from agent_retrieval.stores.sqlite.cache import FileCaches


def test_the_log_hook_is_installed_once_and_a_chat_model_only_records_new_keys():
    make_chat_model(Context(openai_api_key="sk-first-key-0000").chat)
    hook = logging.getLogRecordFactory()
    for n in range(3):
        make_chat_model(Context(openai_api_key=f"sk-later-key-{n}{n}{n}{n}").chat)
    assert logging.getLogRecordFactory() is hook
    assert isinstance(hook, redaction._RedactingFactory)
    assert not isinstance(hook.previous, redaction._RedactingFactory)  # never wrapped a second time
    record = logging.getLogger("test").makeRecord(
        "test",
        logging.ERROR,
        __file__,
        1,
        "refused %s and %s",
        ("sk-first-key-0000", "sk-later-key-2222"),
        None,
    )
    assert record.getMessage() == f"refused {redaction.MASK} and {redaction.MASK}"


def test_torch_threads_are_switched_by_one_encode_at_a_time_and_always_restored():
    torch = pytest.importorskip("torch")
    from agent_retrieval.providers.embeddings import _torch_threads

    configured = torch.get_num_threads()
    inside = 0
    seen: list[tuple[int, bool]] = []
    lock = threading.Lock()

    def encode(count: int | None) -> None:
        nonlocal inside
        with _torch_threads(count):
            with lock:
                inside += 1
            time.sleep(0.005)
            seen.append((inside, torch.get_num_threads() == (count or configured)))
            with lock:
                inside -= 1

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(encode, [1, None] * 20))
    assert set(seen) == {(1, True)}  # no encode overlapped another, and each ran on the threads it asked for
    assert torch.get_num_threads() == configured


def test_users_tokens_are_masked_but_only_the_latest_are_kept(monkeypatch):
    """A server protects each signed-in user's token; the set every log record is checked against stays
    bounded, and the operator's own keys are never pushed out by it."""
    monkeypatch.setattr(redaction, "_recent", {})
    redaction.protect("sk-operator-key-kept-for-good")
    tokens = [f"eyJ.user-token-{n:05d}.sig" for n in range(redaction.RECENT_USER_TOKENS + 500)]
    for token in tokens:
        redaction.protect(token, user_token=True)
    assert len(redaction._recent) == redaction.RECENT_USER_TOKENS
    text = redaction.redact(f"{tokens[-1]} {tokens[0]} sk-operator-key-kept-for-good")
    assert text == f"{redaction.MASK} {tokens[0]} {redaction.MASK}"


def test_a_retrieval_keeps_what_it_shares_in_the_process_state_it_is_given(tmp_path, embedder):
    own = ProcessState()
    context = Context(db_path=str(tmp_path / "own.db"))
    document = Document(id="d", title="Deposits", content="The landlord protects the deposit.")
    with SQLiteStore(context.store.db_path, process=own) as store:
        ingest([document], store, embedder, context, progress=False)
    request = parse_request(ChunkSearchRequest, {"query": "deposit protection", "top_k": 2})
    with Retrieval(context, embedder=embedder, process=own) as retrieval:
        assert retrieval.search(request, "chunks").hits
        assert (
            make_embedder(context.embeddings, process=own).embeddings.process is own
        )  # where a local model loads
    (resources,) = own.parts(SearchResources)
    assert own.parts(FileCaches) and resources not in PROCESS.parts(SearchResources)
    assert not any(c for c in PROCESS.parts(FileCaches) if str(tmp_path) in str(c._kept))
    threads = resources.search_pool  # started by the sync search
    own.close()  # releases what it made: the search threads stop
    with pytest.raises(RuntimeError, match="shutdown"):
        threads.submit(print)
