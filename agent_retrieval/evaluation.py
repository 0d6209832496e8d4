"""Evaluation on BEIR-layout folders: check the data, run every query through the tools' search path under
each mode, and score the runs (nDCG@10, Recall@10, Recall@100, MRR@10).

A folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv. Each query's candidates are fetched
once (`Retrieval.candidates`, as the tools do) and ranked under every mode by the tools' own fusion
(`Retrieval.rank`). Runs are written as TREC run files, one line per ranked document, appended query by
query: an interrupted evaluation resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from agent_retrieval.context import Context
from agent_retrieval.errors import InvalidRequest
from agent_retrieval.models import MAX_TOP_K, Document, Hit, Level, SearchRequest, parse_request
from agent_retrieval.planning import Facets, make_plan, run_plan
from agent_retrieval.retrieval import Candidates, Retrieval

T = TypeVar("T")
METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
# Every relevant document in the top k, over the queries with two or more: what a multi-hop question needs,
# and what recall hides (finding one of two documents scores recall 0.5, and answers nothing).
ALL_GOLD = ("all-gold@5", "all-gold@10")
DEPTH = 100  # documents ranked per query: Recall@100 needs them
# The settings a ranking depends on, recorded beside every score (here and in benchmarks/).
RANKING_SETTINGS = ("fusion", "rrf_k", "vector_weight", "keyword_weight", "entity_boost", "candidates")
MODES = {
    "keyword": "BM25 keyword search alone, on the query's own words",
    "vector": "vector search alone, on the raw query's embedding",
    "hybrid-rrf": "both, fused by weighted reciprocal rank",
    "hybrid-convex": "both, fused by the weighted mean of each side's standard scores",
    "hyde+hybrid": "HyDE passages' embedding for the vector side, fused as configured (needs a chat model)",
    "plan": "the rag graph's retrieval: the planner's searches (heuristic without a chat model), fused; "
    f"documents at their best passage, {MAX_TOP_K} at most",
}


class DatasetError(InvalidRequest):
    """A BEIR folder lacks a file or holds a line that cannot be read; the message names file and line."""


# --- the dataset --------------------------------------------------------------------------------


@dataclass
class Dataset:
    """A BEIR folder's queries with relevance judgements, and what was skipped while reading it."""

    folder: Path
    split: str
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    corpus_size: int
    skipped: list[str] = field(default_factory=list)
    subset: set[str] | None = None  # the documents kept by `max_documents`; None: the whole corpus

    @property
    def corpus(self) -> Path:
        return self.folder / "corpus.jsonl"

    def documents(self) -> Iterator[Document]:
        """The corpus (or its subset) as Documents (`_id`, `title`, `text`), for ingestion."""
        from agent_retrieval.loaders import load_documents

        return (d for d in load_documents([self.corpus]) if self.subset is None or d.id in self.subset)


def load_beir(
    folder: str | Path, split: str = "test", *, limit: int | None = None, max_documents: int | None = None
) -> Dataset:
    """Read and check a BEIR folder. Unreadable lines raise DatasetError naming file and line; empty queries,
    and judgements naming an unknown query or document, are skipped and counted in `skipped`.

    `limit` keeps the first judged queries; `max_documents` keeps a smaller corpus for a quick run: every
    document judged for the kept queries, then others in file order up to that many.
    """
    folder = Path(folder)
    paths = {
        "corpus": folder / "corpus.jsonl",
        "queries": folder / "queries.jsonl",
        "qrels": folder / "qrels" / f"{split}.tsv",
    }
    missing = [str(p.relative_to(folder)) for p in paths.values() if not p.is_file()]
    if missing:
        raise DatasetError(
            f"{folder}: missing {', '.join(missing)}; a BEIR folder holds corpus.jsonl, "
            f"queries.jsonl and qrels/{split}.tsv"
        )
    skipped: list[str] = []
    corpus_order = [record["_id"] for record, _ in _jsonl(paths["corpus"], ("_id", "text"))]
    corpus_ids = set(corpus_order)
    texts: dict[str, str] = {}
    for record, where in _jsonl(paths["queries"], ("_id", "text")):
        if record["text"].strip():
            texts[record["_id"]] = " ".join(record["text"].split())
        else:
            skipped.append(f"{where}: empty query {record['_id']!r}")
    qrels: dict[str, dict[str, int]] = {}
    for qid, doc_id, grade, where in _qrels(paths["qrels"]):
        if qid not in texts:
            skipped.append(f"{where}: query {qid!r} is not in queries.jsonl (or is empty)")
        elif doc_id not in corpus_ids:
            skipped.append(f"{where}: document {doc_id!r} is not in corpus.jsonl")
        else:
            qrels.setdefault(qid, {})[doc_id] = grade
    judged = sorted(q for q, grades in qrels.items() if any(g > 0 for g in grades.values()))
    if not judged:
        raise DatasetError(f"{paths['qrels']}: no query has a relevant document in the corpus")
    judged = judged[:limit] if limit else judged
    subset = None
    if max_documents is not None and max_documents < len(corpus_ids):
        subset = {doc for q in judged for doc in qrels[q]}
        subset |= set([d for d in corpus_order if d not in subset][: max(0, max_documents - len(subset))])
    return Dataset(
        folder,
        split,
        {q: texts[q] for q in judged},
        {q: qrels[q] for q in judged},
        len(subset) if subset is not None else len(corpus_ids),
        skipped,
        subset,
    )


def _jsonl(path: Path, required: Sequence[str]) -> Iterator[tuple[dict[str, Any], str]]:
    from agent_retrieval.loaders import jsonl_records

    for where, record in jsonl_records(path, DatasetError):
        if not isinstance(record, dict) or any(not isinstance(record.get(k), str) for k in required):
            raise DatasetError(
                f"{where}: each line must be an object with string fields {', '.join(required)}"
            )
        yield record, where


def _qrels(path: Path) -> Iterator[tuple[str, str, int, str]]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            fields = line.rstrip("\n").split("\t")
            if not line.strip() or (number == 1 and fields[-1] == "score"):
                continue
            try:
                qid, doc_id, grade = fields if len(fields) == 3 else (fields[0], fields[2], fields[3])
                yield qid, doc_id, int(grade), f"qrels/{path.name}:{number}"
            except (ValueError, IndexError):
                raise DatasetError(
                    f"{path}:{number}: expected 'query-id<TAB>corpus-id<TAB>score' with an "
                    f"integer score (got {line.strip()[:80]!r})"
                ) from None


# --- metrics ------------------------------------------------------------------------------------


def ndcg(ranked: Sequence[str], grades: dict[str, int], k: int = 10) -> float:
    """nDCG@k with linear gains (as trec_eval and BEIR compute it)."""
    dcg = sum(grades.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:k]))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    best = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
    return dcg / best if best else 0.0


def recall(ranked: Sequence[str], grades: dict[str, int], k: int) -> float:
    relevant = {doc for doc, g in grades.items() if g > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr(ranked: Sequence[str], grades: dict[str, int], k: int = 10) -> float:
    return next((1.0 / rank for rank, doc in enumerate(ranked[:k], start=1) if grades.get(doc, 0) > 0), 0.0)


def all_gold(ranked: Sequence[str], grades: dict[str, int], k: int) -> float:
    """1 when every relevant document is in the top k, else 0."""
    return float({doc for doc, g in grades.items() if g > 0} <= set(ranked[:k]))


def multi_gold(qrels: dict[str, dict[str, int]]) -> list[str]:
    """The queries with two or more relevant documents, which all-gold@k is measured over."""
    return [qid for qid, grades in qrels.items() if sum(g > 0 for g in grades.values()) >= 2]


def score_run(run: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """Mean of each metric over the judged queries (a query missing from the run scores 0); all-gold@k over
    the queries with two or more relevant documents, when there are any."""
    totals = dict.fromkeys(METRICS, 0.0)
    for qid, grades in qrels.items():
        ranked = run.get(qid, [])
        totals["ndcg@10"] += ndcg(ranked, grades)
        totals["recall@10"] += recall(ranked, grades, 10)
        totals["recall@100"] += recall(ranked, grades, 100)
        totals["mrr@10"] += mrr(ranked, grades)
    scores = {name: total / len(qrels) for name, total in totals.items()}
    several = multi_gold(qrels)
    for name in ALL_GOLD if several else ():
        k = int(name.split("@")[1])
        scores[name] = sum(all_gold(run.get(qid, []), qrels[qid], k) for qid in several) / len(several)
    return scores


# --- running ------------------------------------------------------------------------------------


@dataclass
class EvalReport:
    """Scores per mode, with what the numbers rest on."""

    dataset: str
    split: str
    level: Level
    queries: int
    scores: dict[str, dict[str, float]]
    skipped: list[str]
    seconds_per_query: float
    settings: dict[str, Any]
    runs: dict[str, str]
    multi_gold_queries: int = 0  # queries with two or more relevant documents

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "split": self.split,
            "level": self.level,
            "queries": self.queries,
            "multi_gold_queries": self.multi_gold_queries,
            "scores": self.scores,
            "skipped": len(self.skipped),
            "skipped_examples": self.skipped[:10],
            "seconds_per_query": self.seconds_per_query,
            "settings": self.settings,
            "runs": self.runs,
        }

    def table(self) -> str:
        head = f"{self.dataset} ({self.split}, {self.queries} queries, {self.level} level)"
        metrics = [m for m in (*METRICS, *ALL_GOLD) if all(m in s for s in self.scores.values())]
        lines = [head, "", f"{'mode':<15}" + "".join(f"{m:>12}" for m in metrics)]
        for mode, scores in self.scores.items():
            lines.append(f"{mode:<15}" + "".join(f"{100 * scores[m]:>12.2f}" for m in metrics))
        if ALL_GOLD[0] in metrics:
            lines.append(
                f"all-gold@k: every relevant document in the top k, over the {self.multi_gold_queries} "
                "queries with two or more"
            )
        if self.skipped:
            lines += ["", f"skipped {len(self.skipped)} line(s) of the dataset, e.g. {self.skipped[0]}"]
        return "\n".join(lines)


def available_modes(context: Context) -> list[str]:
    """Every mode this configuration can run: hyde+hybrid only with a chat model."""
    return [m for m in MODES if m != "hyde+hybrid" or context.has_chat_model]


def evaluate(
    dataset: Dataset,
    retrieval: Retrieval,
    out: str | Path,
    *,
    level: Level = "documents",
    modes: Sequence[str] | None = None,
    progress: bool = True,
) -> EvalReport:
    """Run every judged query under each mode into `out`/run.<mode>.trec and score the runs.

    Queries already in every run file are not run again, so an interrupted evaluation resumes.
    """
    modes = list(modes or available_modes(retrieval.context))
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise InvalidRequest(f"unknown mode(s) {', '.join(unknown)}; the modes are {', '.join(MODES)}")
    if "hyde+hybrid" in modes and not retrieval.context.has_chat_model:
        raise InvalidRequest("hyde+hybrid needs a chat model: set OPENAI_API_KEY or OPENAI_BASE_URL")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    deep = replace(retrieval.context, candidates=max(retrieval.context.candidates, DEPTH))
    searcher = Retrieval(
        deep,
        store=retrieval.store,
        embedder=retrieval.embedder,
        llm=retrieval.llm,
        resources=retrieval.resources,
    )
    files = {mode: out / f"run.{mode}.trec" for mode in modes}
    done = {mode: _run_queries(path) for mode, path in files.items()}
    todo = [q for q in dataset.queries if any(q not in done[mode] for mode in modes)]
    # the plan mode is told the documents' metadata, as the rag graph's planner is
    facets = searcher.store.metadata_values() if "plan" in modes else None
    started = time.perf_counter()
    for qid in tqdm(todo, desc=f"eval {dataset.folder.name}", unit="query", disable=not progress):
        missing = [mode for mode in modes if qid not in done[mode]]
        ranked = _rank_modes(searcher, dataset.queries[qid], level, missing, facets)
        for mode in missing:
            _append_run(files[mode], qid, ranked[mode], mode)
    per_query = (time.perf_counter() - started) / len(todo) if todo else 0.0
    scores = {mode: score_run(read_run(files[mode]), dataset.qrels) for mode in modes}
    settings = {key: getattr(deep, key) for key in (*RANKING_SETTINGS, "embedding_provider")}
    return EvalReport(
        dataset.folder.name,
        dataset.split,
        level,
        len(dataset.queries),
        scores,
        dataset.skipped,
        per_query,
        settings,
        {mode: str(path) for mode, path in files.items()},
        len(multi_gold(dataset.qrels)),
    )


def _rank_modes(
    searcher: Retrieval, query: str, level: Level, modes: Sequence[str], facets: Facets | None = None
) -> dict[str, list[Hit]]:
    """Each mode's ranking of one query, from one fetch of candidates (two with HyDE)."""
    request = parse_request(SearchRequest, {"query": query, "hyde": "off"}).model_copy(
        update={"top_k": DEPTH}
    )
    found = searcher.candidates(request, level)
    context = searcher.context
    alone = replace(context, entity_boost=0.0)  # a single path is scored as it is, without the entity boost
    views = {
        "keyword": (Candidates([], found.keyword_hits, found.query_embedding, found.degraded), alone),
        "vector": (Candidates(found.vector_hits, [], found.query_embedding, found.degraded), alone),
        "hybrid-rrf": (found, replace(context, fusion="rrf")),
        "hybrid-convex": (found, replace(context, fusion="convex")),
    }
    ranked = {}
    for mode in modes:
        if mode in views:
            candidates, fusion = views[mode]
            ranked[mode] = searcher.rank(request, level, candidates, context=fusion).hits
    if "plan" in modes:  # as the rag graph retrieves: plan, run the searches hop by hop, fuse the passages
        llm = searcher.llm if searcher.context.has_chat_model else None
        planned = _run_async(make_plan(query, searcher.context, llm, facets=facets))
        ranked["plan"] = _run_async(run_plan(planned.plan, searcher, top_k=MAX_TOP_K, llm=llm)).chunks
    if "hyde+hybrid" in modes:
        hyde_request = request.model_copy(update={"hyde": "passages"})
        ranked["hyde+hybrid"] = searcher.rank(
            hyde_request, level, searcher.candidates(hyde_request, level)
        ).hits
    return ranked


def _run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end from sync code, in a thread of its own: a notebook's running event loop
    would refuse asyncio.run."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _documents(hits: list[Hit]) -> list[tuple[str, float]]:
    """Ranked document ids: a chunk-level ranking counts each document at its best chunk."""
    seen: dict[str, float] = {}
    for hit in hits:
        seen.setdefault(hit.document_id, hit.score)
    return list(seen.items())


def _append_run(path: Path, qid: str, hits: list[Hit], mode: str) -> None:
    lines = [
        f"{qid} Q0 {doc} {rank} {score:.6f} {mode}\n"
        for rank, (doc, score) in enumerate(_documents(hits)[:DEPTH], start=1)
    ]
    with path.open("a", encoding="utf-8") as run:
        run.writelines(lines or [f"# {qid} found nothing\n"])  # a marker, so the query is not run again


def _run_queries(path: Path) -> set[str]:
    if not path.exists():
        return set()
    return {
        line.split()[1] if line.startswith("#") else line.split(" ", 1)[0]
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    }


def read_run(path: str | Path) -> dict[str, list[str]]:
    """A TREC run file as {query id: document ids, best first}."""
    scored: dict[str, list[tuple[int, str]]] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            qid, _, doc, rank, *_ = line.split()
            scored.setdefault(qid, []).append((int(rank), doc))
    return {qid: [doc for _, doc in sorted(pairs)] for qid, pairs in scored.items()}
