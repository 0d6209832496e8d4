"""HyDE accounting: LLM calls and embedding requests per question when an agent calls both tools.

On the demo corpus with the local embedder (counted at its LangChain boundary) and langchain-core's
FakeListChatModel as the LLM (counted), with HyDE on:
- a distinct long question, asked of document_retriever and then chunk_retriever: goal 1 LLM call and
  1 embedding request in all;
- a short question (at most hyde_skip_max_words words): goal 0 LLM calls, 1 embedding request;
- N concurrent identical questions (threads, then asyncio tasks): goal 1 LLM call in flight.

    python benchmarks/hyde_accounting.py        # table on stdout, JSON in benchmarks/results/
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from agent_retrieval import demo
from agent_retrieval.context import Context
from agent_retrieval.embeddings import Embedder, make_embedder
from agent_retrieval.ingest import ingest
from agent_retrieval.loaders import load_documents
from agent_retrieval.retrieval import Retrieval
from agent_retrieval.tools import make_retrieval_tools

RESULTS = Path(__file__).resolve().parent / "results"
CONCURRENT = 16
PASSAGES = (
    "A negotiator must disclose in writing any referral fee received from a third party.\n\n"
    "Remuneration from a third party is a personal interest that is declared to the client."
)


class CountingEmbeddings(Embeddings):
    """Counts requests to the wrapped embeddings (one request embeds one query, or a batch of texts)."""

    def __init__(self, inner: Embeddings):
        self.inner, self.requests, self._lock = inner, 0, threading.Lock()

    def _count(self) -> None:
        with self._lock:
            self.requests += 1

    def embed_query(self, text: str) -> list[float]:
        self._count()
        return self.inner.embed_query(text)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self._count()
        return self.inner.embed_documents(texts)


class CountingChat(FakeListChatModel):
    """FakeListChatModel that counts its calls and takes a moment, as a real model does."""

    calls: int = 0

    def _call(self, *args: Any, **kwargs: Any) -> str:
        with _lock:
            self.calls += 1
        threading.Event().wait(0.2)
        return super()._call(*args, **kwargs)


_lock = threading.Lock()


def call(tool: Any, args: dict[str, Any]) -> Any:
    return tool.invoke({"type": "tool_call", "id": "bench", "name": tool.name, "args": args})


def main() -> dict[str, Any]:
    folder = tempfile.TemporaryDirectory(prefix="hyde-accounting-")
    context = Context(db_path=str(Path(folder.name) / "demo.db"), use_hyde=True)
    local = make_embedder(Context())
    embeddings = CountingEmbeddings(local.embeddings)
    embedder = Embedder(embeddings, local.model_id)
    chat = CountingChat(responses=[PASSAGES])
    rows = []
    with Retrieval(context, embedder=embedder, llm=chat) as retrieval:
        ingest(load_documents([demo.corpus_dir()]), retrieval.store, embedder, context, progress=False)
        document_retriever, chunk_retriever = make_retrieval_tools(retrieval=retrieval)

        def measure(label: str, run: Any) -> None:
            chat.calls, embeddings.requests = 0, 0
            run()
            rows.append({"case": label, "llm_calls": chat.calls, "embedding_requests": embeddings.requests})

        for item in demo.questions():
            question = item["question"]

            def both_tools(question: str = question) -> None:
                ids = [h["id"] for h in call(document_retriever, {"query": question}).artifact["hits"]]
                call(chunk_retriever, {"query": question, "document_ids": ids})

            kind = "short" if len(question.split()) <= context.hyde_skip_max_words else "long"
            measure(f"{kind}: {question[:60]}", both_tools)

        threaded = "Which third-party payments must a negotiator disclose to the vendor in writing?"
        measure(
            f"{CONCURRENT} threads, one question",
            lambda: list(
                ThreadPoolExecutor(CONCURRENT).map(
                    lambda _: call(chunk_retriever, {"query": threaded}), range(CONCURRENT)
                )
            ),
        )
        gathered = "How quickly must an emergency repair be attended to in a managed property?"
        measure(
            f"{CONCURRENT} asyncio tasks, one question",
            lambda: asyncio.run(_gather(chunk_retriever, gathered)),
        )
    folder.cleanup()
    goals = {"long": (1, 1), "short": (0, 1)}
    for row in rows:
        kind = row["case"].split(":")[0]
        goal = goals.get(kind, (1, 1))
        row["meets_goal"] = (row["llm_calls"], row["embedding_requests"]) == goal
    report = {"rows": rows, "all_goals_met": all(r["meets_goal"] for r in rows)}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hyde_accounting.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'case':<70}{'LLM calls':>10}{'embed req':>11}  goal")
    for row in rows:
        print(
            f"{row['case']:<70}{row['llm_calls']:>10}{row['embedding_requests']:>11}  "
            f"{'met' if row['meets_goal'] else 'MISSED'}"
        )
    return report


async def _gather(tool: Any, question: str) -> None:
    await asyncio.gather(
        *(
            tool.ainvoke({"type": "tool_call", "id": f"b{n}", "name": tool.name, "args": {"query": question}})
            for n in range(CONCURRENT)
        )
    )


if __name__ == "__main__":
    main()
