"""HyDE and rerank accounting: LLM calls, embedding requests and rerank calls per question when an agent
calls both tools, and when the rag graph answers it.

On the demo corpus with the local embedder (counted at its LangChain boundary) and langchain-core's
FakeListChatModel as the LLM (counted), with HyDE on:
- a distinct long question, asked of document_retriever and then chunk_retriever: goal 1 LLM call and
  1 embedding request in all;
- a short question (at most hyde_skip_max_words words): goal 0 LLM calls, 1 embedding request;
- N concurrent identical questions (threads, then asyncio tasks): goal 1 LLM call in flight;
- with a reranker (a counting BaseDocumentCompressor that keeps the order), one rerank call per tool call
  (2 for the two tools), one per concurrent call (rerank results are not shared), and in the rag graph one
  per planned search (reading on's searches are not reranked).

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

from langchain_core.documents import BaseDocumentCompressor
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from agent_retrieval import (
    Context,
    Embedder,
    EmbeddingSettings,
    Retrieval,
    demo,
    load_documents,
    make_embedder,
    make_retrieval_tools,
)
from agent_retrieval.graphs import rag
from agent_retrieval.ingest import ingest
from agent_retrieval.planning import READING_ON
from agent_retrieval.server.graph_parts import GraphParts

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


class CountingReranker(BaseDocumentCompressor):
    """A reranker that keeps the fused order and counts its calls."""

    calls: int = 0

    def compress_documents(self, documents: Any, query: str, callbacks: Any = None) -> Any:
        with _lock:
            self.calls += 1
        return documents


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
    local = make_embedder(EmbeddingSettings())
    embeddings = CountingEmbeddings(local.embeddings)
    embedder = Embedder(embeddings, local.model_id)
    chat, reranker = CountingChat(responses=[PASSAGES]), CountingReranker()
    rows = []
    with Retrieval(context, embedder=embedder, llm=chat, reranker=reranker) as retrieval:
        ingest(load_documents([demo.corpus_dir()]), retrieval.store, embedder, context, progress=False)
        document_retriever, chunk_retriever = make_retrieval_tools(retrieval=retrieval)

        def measure(label: str, run: Any, goal: Any) -> None:
            """Run and count; `goal(counts)` is the (LLM calls, embedding requests, rerank calls) wanted."""
            chat.calls, embeddings.requests, reranker.calls = 0, 0, 0
            run()
            counts = (chat.calls, embeddings.requests, reranker.calls)
            wanted = goal(counts)
            rows.append(
                {
                    "case": label,
                    **dict(zip(("llm_calls", "embedding_requests", "rerank_calls"), counts, strict=True)),
                    "meets_goal": counts == wanted,
                    "goal": wanted,
                }
            )

        for item in demo.questions():
            question = item["question"]

            def both_tools(question: str = question) -> None:
                ids = [h["id"] for h in call(document_retriever, {"query": question}).artifact["hits"]]
                call(chunk_retriever, {"query": question, "document_ids": ids})

            short = len(question.split()) <= context.hyde_skip_max_words
            kind = "short" if short else "long"
            measure(f"{kind}: {question[:60]}", both_tools, lambda _, short=short: (int(not short), 1, 2))

        threaded = "Which third-party payments must a negotiator disclose to the vendor in writing?"
        measure(
            f"{CONCURRENT} threads, one question",
            lambda: list(
                ThreadPoolExecutor(CONCURRENT).map(
                    lambda _: call(chunk_retriever, {"query": threaded}), range(CONCURRENT)
                )
            ),
            lambda _: (1, 1, CONCURRENT),
        )
        gathered = "How quickly must an emergency repair be attended to in a managed property?"
        measure(
            f"{CONCURRENT} asyncio tasks, one question",
            lambda: asyncio.run(_gather(chunk_retriever, gathered)),
            lambda _: (1, 1, CONCURRENT),
        )
        graph = rag.build(GraphParts(retrieval=retrieval))
        asked = "How long does the landlord have to protect the deposit and who checks it at Banda Lane?"
        state: dict[str, Any] = {}

        def per_planned_search(counts: tuple[int, int, int]) -> tuple[int, int, int]:
            # one HyDE call per distinct long planned query and one rerank call per planned search; reading
            # on's searches embed as written (their embedding requests are not a goal here)
            planned = [s for s in state["searches"] if s["purpose"] != READING_ON]
            long = {s["query"] for s in planned if len(s["query"].split()) > context.hyde_skip_max_words}
            return len(long), counts[1], len(planned)

        measure(
            "rag graph: one question, planned offline",
            lambda: state.update(
                asyncio.run(
                    graph.ainvoke({"messages": [{"role": "user", "content": asked}]}, context=context)
                )
            ),
            per_planned_search,
        )
    folder.cleanup()
    report = {"rows": rows, "all_goals_met": all(r["meets_goal"] for r in rows)}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hyde_accounting.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'case':<70}{'LLM calls':>10}{'embed req':>11}{'reranks':>9}  goal")
    for row in rows:
        counts = f"{row['llm_calls']:>10}{row['embedding_requests']:>11}{row['rerank_calls']:>9}"
        print(f"{row['case']:<70}{counts}  {'met' if row['meets_goal'] else 'MISSED'}")
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
