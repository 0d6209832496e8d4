"""Two-level retrieval on SQuAD v1.1 dev: document_retriever over articles, chunk_retriever over paragraphs,
unscoped and scoped to the documents document_retriever returned.

Each article is one document (its title with underscores as spaces) and each paragraph exactly one chunk;
the mapping is checked against the store before anything is measured. A question's relevant document is its
article and its relevant chunk its paragraph. Every search is a real tool call (`tool.invoke`, top_k 10,
HyDE off) on the embedded SQLite store with the local all-MiniLM-L6-v2 embedder. The store is cached in
benchmarks/results/, so a rerun embeds nothing.

    python benchmarks/squad.py                   # 1000 seeded questions over all 48 articles
    python benchmarks/squad.py --questions 10570 # every question
    python benchmarks/squad.py --smoke           # 4 small articles, 30 questions: well under a minute

The dataset folder (holding dev-v1.1.json) is ../shared/datasets/squad from the repository, or
--dataset / SQUAD_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from agent_retrieval import (
    ChunkRetrieverTool,
    Context,
    Document,
    DocumentRetrieverTool,
    Embedder,
    Retrieval,
    SQLiteStore,
    Store,
    hyde,
    make_embedder,
)
from agent_retrieval.evaluation import RANKING_SETTINGS
from agent_retrieval.ingest import ingest

ROOT = Path(__file__).resolve().parent
DEFAULT_DATASET = ROOT.parent.parent / "shared" / "datasets" / "squad"
DATA_FILE = "dev-v1.1.json"
RESULTS = ROOT / "results"
EMBEDDER_ID = "local/all-MiniLM-L6-v2"

KS = (1, 3, 5, 10)
TOP_K = 10  # one document_retriever call serves every scope: top-n of a top_k=10 call equals a top_k=n call
SCOPES = (3, 5)
CHUNK_SIZE = 5000  # above the longest paragraph (4,063 characters), so the chunker never splits one
DEFAULT_QUESTIONS = 1000
SMOKE_ARTICLES = 4  # the smallest ones: few texts to embed, yet scoping to the top 3 still leaves one out
SMOKE_QUESTIONS = 30
WARMUP_QUESTIONS = 20


class BenchmarkError(RuntimeError):
    """The data, the store or a tool did not behave as the measurement needs; the message says what to do."""


class MappingError(BenchmarkError):
    """A paragraph is not exactly one chunk of the store."""


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    article_id: str
    paragraph: int  # index in the article, 0-based


@dataclass
class Article:
    """One SQuAD article: `id` is its SQuAD title as written, `title` reads with spaces."""

    id: str
    title: str
    paragraphs: list[str]
    questions: list[Question] = field(default_factory=list)


# --- the data -----------------------------------------------------------------------------------


def dataset_folder(flag: str | None = None) -> Path:
    """The folder holding dev-v1.1.json: the flag, else SQUAD_DIR, else the shared datasets folder."""
    return Path(flag or os.environ.get("SQUAD_DIR") or DEFAULT_DATASET).expanduser()


def paragraph_text(context: str) -> str:
    """A paragraph as the chunker keeps it: one line, single spaces, printable characters only.

    MarkdownHeaderTextSplitter joins a section's lines with "  \\n" and drops unprintable characters
    (zero-width spaces, direction marks, BOMs: a few SQuAD paragraphs hold them), so the stored paragraph
    is this form, and chunk content can then be compared with it exactly.
    """
    printable = "".join(ch for ch in " ".join(context.split()) if ch.isprintable())
    return " ".join(printable.split())


def load_squad(folder: Path) -> list[Article]:
    """The articles of SQuAD v1.1 dev, each with its normalised paragraphs and its questions."""
    path = folder / DATA_FILE
    if not path.is_file():
        raise BenchmarkError(
            f"{path}: not found; point --dataset or SQUAD_DIR at the folder holding {DATA_FILE}"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BenchmarkError(f"{path}: not a readable JSON file ({error})") from None
    if not isinstance(data, dict) or data.get("version") != "1.1":
        raise BenchmarkError(f"{path}: expected SQuAD v1.1 (an object with version '1.1')")
    articles: list[Article] = []
    for number, raw in enumerate(data.get("data") or []):
        try:
            article = Article(
                id=raw["title"],
                title=raw["title"].replace("_", " "),
                paragraphs=[paragraph_text(p["context"]) for p in raw["paragraphs"]],
            )
            article.questions = [
                Question(qa["id"], " ".join(qa["question"].split()), article.id, index)
                for index, p in enumerate(raw["paragraphs"])
                for qa in p["qas"]
            ]
        except (KeyError, TypeError, AttributeError):
            raise BenchmarkError(
                f"{path}: article {number} is not shaped like SQuAD: "
                "{title, paragraphs: [{context, qas: [{id, question}]}]}"
            ) from None
        if not article.paragraphs or not all(article.paragraphs):
            raise BenchmarkError(f"{path}: article {article.id!r} has an empty paragraph or none at all")
        articles.append(article)
    if not articles:
        raise BenchmarkError(f"{path}: holds no articles")
    if len({a.id for a in articles}) != len(articles):
        raise BenchmarkError(f"{path}: two articles share a title, so documents would collide")
    return articles


def sample_questions(questions: list[Question], count: int, seed: int) -> list[Question]:
    """`count` questions drawn without replacement; the same seed draws the same ones."""
    if not 1 <= count <= len(questions):
        raise BenchmarkError(f"--questions must be between 1 and {len(questions)} (got {count})")
    return random.Random(seed).sample(questions, count)


def article_document(article: Article) -> Document:
    """The article as one document, a `## Paragraph n` heading before each paragraph.

    The headings keep paragraphs apart: without them the chunker packs neighbouring paragraphs into one
    chunk up to chunk_size; and one heading per paragraph, each different, stops the heading splitter
    from merging neighbours that share a heading.
    """
    content = "\n\n".join(f"## Paragraph {n}\n\n{text}" for n, text in enumerate(article.paragraphs, start=1))
    return Document(id=article.id, title=article.title, content=content, source=f"squad/{DATA_FILE}")


# --- the store ----------------------------------------------------------------------------------


def local_embedder(context: Context) -> Embedder:
    """The local MiniLM embedder; the environment may not swap in another, or the figures would mislead."""
    embedder = make_embedder(context.embeddings)
    if embedder.model_id != EMBEDDER_ID:
        raise BenchmarkError(
            f"this benchmark measures {EMBEDDER_ID}, but the environment selects "
            f"{embedder.model_id}: unset AGENT_RETRIEVAL_EMBEDDING_PROVIDER "
            "and AGENT_RETRIEVAL_LOCAL_EMBEDDING_MODEL"
        )
    return embedder


def verify_mapping(store: Store, articles: list[Article]) -> dict[tuple[str, int], str]:
    """Check that every paragraph is exactly one chunk's content, in order, and nothing else is stored.

    Returns the chunk id of each (article id, paragraph index); raises MappingError otherwise.
    """
    chunk_ids: dict[tuple[str, int], str] = {}
    for article in articles:
        chunks = store.document_chunks([article.id], len(article.paragraphs) + 1)
        if len(chunks) != len(article.paragraphs):
            raise MappingError(
                f"{article.id!r}: {len(article.paragraphs)} paragraphs became {len(chunks)} chunks"
            )
        for index, (text, chunk) in enumerate(zip(article.paragraphs, chunks, strict=False)):
            if chunk.content != text:
                raise MappingError(
                    f"{article.id!r} paragraph {index}: chunk {chunk.id!r} holds "
                    f"{chunk.content[:60]!r}..., not {text[:60]!r}..."
                )
            chunk_ids[article.id, index] = chunk.id
    stats = store.stats()
    if (stats.documents, stats.chunks) != (len(articles), len(chunk_ids)):
        raise MappingError(
            f"the store holds {stats.documents} documents and {stats.chunks} chunks; expected "
            f"{len(articles)} and {len(chunk_ids)} (delete the store file to rebuild it)"
        )
    return chunk_ids


# --- asking -------------------------------------------------------------------------------------


def call(tool: DocumentRetrieverTool | ChunkRetrieverTool, args: dict[str, Any]) -> tuple[list[dict], float]:
    """One tool call as an agent makes it; its hits and its wall time in milliseconds."""
    started = time.perf_counter()
    message = tool.invoke({"type": "tool_call", "id": "squad", "name": tool.name, "args": args})
    elapsed = (time.perf_counter() - started) * 1000
    if message.status == "error":
        raise BenchmarkError(f"{tool.name} failed on {args['query']!r}: {message.content}")
    result = message.artifact
    if result["hyde"] != "off" or result["degraded"]:
        raise BenchmarkError(
            f"{tool.name} did not run as measured: hyde {result['hyde']}, degraded {result['degraded']}"
        )
    return result["hits"], elapsed


def rank_of(ids: list[str], wanted: str) -> int | None:
    """1-based rank of `wanted`, or None if it was not returned."""
    return ids.index(wanted) + 1 if wanted in ids else None


def ask(
    tools: tuple[DocumentRetrieverTool, ChunkRetrieverTool], question: Question, chunk_id: str
) -> tuple[dict[str, int | None], dict[str, float]]:
    """Run one question through every step: its ranks of the right article and paragraph, and each step's ms.

    The unscoped chunk search and document_retriever each start with an empty query-vector cache, as an
    agent's first call does; the scoped searches then reuse document_retriever's vector, as they do when
    an agent calls the two tools in turn.
    """
    documents, chunks = tools
    query = {"query": question.text, "top_k": TOP_K, "hyde": "off"}
    ranks: dict[str, int | None] = {}
    ms: dict[str, float] = {}
    hyde.clear_cache()
    hits, ms["chunks"] = call(chunks, query)
    ranks["chunks"] = rank_of([h["id"] for h in hits], chunk_id)
    hyde.clear_cache()
    hits, ms["documents"] = call(documents, query)
    doc_ids = [h["id"] for h in hits]
    ranks["documents"] = rank_of(doc_ids, question.article_id)
    for n in SCOPES:
        scope = doc_ids[:n]
        if not scope:  # an empty document_ids would search everything: nothing to scope to is a miss
            ranks[f"chunks_top{n}"] = None
            continue
        hits, ms[f"chunks_top{n}"] = call(chunks, {**query, "document_ids": scope})
        strays = {h["document_id"] for h in hits} - set(scope)
        if strays:
            raise BenchmarkError(f"chunk_retriever scoped to {scope} returned chunks of {sorted(strays)}")
        ranks[f"chunks_top{n}"] = rank_of([h["id"] for h in hits], chunk_id)
        ms[f"flow_top{n}"] = ms["documents"] + ms[f"chunks_top{n}"]
    return ranks, ms


# --- scoring ------------------------------------------------------------------------------------


def scores(ranks: list[int | None]) -> dict[str, float]:
    """Recall@k and MRR@10 for one relevant item per question, from the ranks it was found at."""
    found = [r for r in ranks if r is not None]
    result = {f"recall@{k}": sum(r <= k for r in found) / len(ranks) for k in KS}
    result["mrr@10"] = sum(1 / r for r in found if r <= 10) / len(ranks)
    return result


def latency(ms: list[float]) -> dict[str, float]:
    """Median, 95th percentile and mean of one step's call times."""
    return {
        "p50": round(float(np.percentile(ms, 50)), 2),
        "p95": round(float(np.percentile(ms, 95)), 2),
        "mean": round(float(np.mean(ms)), 2),
        "calls": len(ms),
    }


def summarise(runs: list[tuple[Question, dict[str, int | None], dict[str, float]]]) -> dict[str, Any]:
    """The figures of every step over all questions."""
    steps = ["documents", "chunks", *(f"chunks_top{n}" for n in SCOPES)]
    quality = {step: scores([ranks[step] for _, ranks, _ in runs]) for step in steps}
    for n in SCOPES:
        missed = sum(1 for _, ranks, _ in runs if ranks["documents"] is None or ranks["documents"] > n)
        quality[f"chunks_top{n}"] |= {"scope_missed": missed, "scope_missed_rate": missed / len(runs)}
    timed = [*steps, *(f"flow_top{n}" for n in SCOPES)]
    times = {step: latency([ms[step] for _, _, ms in runs if step in ms]) for step in timed}
    return {"quality": quality, "latency_ms": times}


NOTES = (
    (
        "scope missed: the right article was not among the documents searched, so the paragraph could not "
        "be found."
    ),
    (
        "The scoped searches reuse document_retriever's query vector (hyde.py's cache), as an agent's second "
        "call does."
    ),
)
LABELS = {
    "documents": "document_retriever",
    "chunks": "chunk_retriever, unscoped",
    **{f"chunks_top{n}": f"chunk_retriever in top {n} docs" for n in SCOPES},
    **{f"flow_top{n}": f"both steps (top {n} docs)" for n in SCOPES},
}


def table(results: dict[str, Any]) -> str:
    """The results as text: quality and latency per step."""
    data, sample, settings = results["data"], results["sample"], results["settings"]
    quality, times = results["quality"], results["latency_ms"]
    header = f"{'step':<34}" + "".join(f"{'R@' + str(k):>7}" for k in KS)
    lines = [
        (
            f"SQuAD v1.1 dev: {sample['questions']} questions (seed {sample['seed']}) "
            f"over {data['articles']} articles, {data['paragraphs']} paragraphs = {data['chunks']} chunks "
            "(mapping verified)"
        ),
        (
            f"tool calls, top_k {TOP_K}, HyDE off, {settings['embedder']}; "
            f"hybrid: {settings['fusion']} fusion, "
            f"vector {settings['vector_weight']:g} / keyword {settings['keyword_weight']:g}, "
            f"{settings['candidates']} candidates, entity boost {settings['entity_boost']:g}"
        ),
        "",
        header + f"{'MRR@10':>8}{'scope missed':>14}{'p50 ms':>9}{'p95 ms':>9}",
    ]
    for step, label in LABELS.items():
        figures = quality.get(step)
        if figures is None:  # a flow: its time only
            row = " " * (7 * len(KS) + 8 + 14)
        else:
            row = "".join(f"{figures[f'recall@{k}']:>7.3f}" for k in KS) + f"{figures['mrr@10']:>8.3f}"
            row += f"{100 * figures['scope_missed_rate']:>13.1f}%" if "scope_missed" in figures else " " * 14
        lines.append(f"{label:<34}{row}{times[step]['p50']:>9.1f}{times[step]['p95']:>9.1f}")
    return "\n".join([*lines, "", *NOTES])


# --- the run ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Build or reuse the store, check the mapping, ask the sampled questions, write and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help=f"{SMOKE_ARTICLES} small articles, {SMOKE_QUESTIONS} questions"
    )
    parser.add_argument(
        "--questions",
        type=int,
        help=f"questions sampled (default {DEFAULT_QUESTIONS}; smoke {SMOKE_QUESTIONS})",
    )
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument(
        "--dataset", help=f"folder holding {DATA_FILE} (default: SQUAD_DIR, else {DEFAULT_DATASET})"
    )
    parser.add_argument("--results", default=str(RESULTS), help="folder for the store and the JSON")
    args = parser.parse_args(argv)

    folder = dataset_folder(args.dataset)
    articles = load_squad(folder)
    if args.smoke:
        articles = sorted(articles, key=lambda a: len(a.paragraphs))[:SMOKE_ARTICLES]
    pool = [q for a in articles for q in a.questions]
    count = (
        args.questions if args.questions is not None else SMOKE_QUESTIONS if args.smoke else DEFAULT_QUESTIONS
    )
    questions = sample_questions(pool, count, args.seed)
    longest = max(len(p) for a in articles for p in a.paragraphs)
    if longest > CHUNK_SIZE:
        raise BenchmarkError(
            f"a paragraph has {longest} characters, more than CHUNK_SIZE {CHUNK_SIZE}: raise it"
        )
    results_dir = Path(args.results)
    results_dir.mkdir(parents=True, exist_ok=True)
    name = "squad-smoke" if args.smoke else "squad"
    context = Context(db_path=str(results_dir / f"{name}.db"), chunk_size=CHUNK_SIZE, chunk_overlap=0)
    embedder = local_embedder(context)
    started = time.perf_counter()
    with SQLiteStore(
        context.store.db_path
    ) as store:  # the embedded store, whatever the environment configures
        report = ingest([article_document(a) for a in articles], store, embedder, context)
        print(report.summary(), file=sys.stderr)
        ingest_seconds = time.perf_counter() - started
        chunk_ids = verify_mapping(store, articles)
        retrieval = Retrieval(context, store=store, embedder=embedder)
        tools = (DocumentRetrieverTool(retrieval=retrieval), ChunkRetrieverTool(retrieval=retrieval))
        # Warm up as a running service would be (model loaded, pages cached) on questions outside the sample.
        chosen = {q.id for q in questions}
        warmup = [q for q in pool if q.id not in chosen][:WARMUP_QUESTIONS] or questions[:WARMUP_QUESTIONS]
        for question in warmup:
            ask(tools, question, chunk_ids[question.article_id, question.paragraph])
        started = time.perf_counter()
        runs = []
        for question in tqdm(questions, desc="squad", unit="question", file=sys.stderr):
            ranks, ms = ask(tools, question, chunk_ids[question.article_id, question.paragraph])
            runs.append((question, ranks, ms))
        query_seconds = time.perf_counter() - started

    results = {
        "data": {
            "path": str(folder / DATA_FILE),
            "articles": len(articles),
            "paragraphs": sum(len(a.paragraphs) for a in articles),
            "chunks": len(chunk_ids),
            "questions_available": len(pool),
        },
        "sample": {"questions": len(questions), "seed": args.seed, "smoke": args.smoke},
        "settings": {
            "embedder": embedder.model_id,
            "hyde": "off",
            "top_k": TOP_K,
            "chunk_size": CHUNK_SIZE,
            **{key: getattr(context, key) for key in RANKING_SETTINGS},
        },
        "mapping": {"verified": True, "paragraphs": len(chunk_ids), "chunks": len(chunk_ids)},
        "ingest": asdict(report) | {"seconds": round(ingest_seconds, 1)},
        **summarise(runs),
        "seconds": {
            "questions": round(query_seconds, 1),
            "per_question": round(query_seconds / len(runs), 4),
        },
        "per_question": [
            {"id": q.id, "article": q.article_id, "paragraph": q.paragraph, "ranks": ranks}
            for q, ranks, _ in runs
        ],
    }
    out = results_dir / f"{name}.json"
    out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(table(results))
    print(
        f"\nwritten to {out}; ingest {ingest_seconds:.1f} s ({report.embedded} texts embedded), "
        f"questions {query_seconds:.1f} s",
        file=sys.stderr,
    )
    return results


if __name__ == "__main__":
    try:
        main()
    except BenchmarkError as error:
        sys.exit(f"squad.py: {error}")
