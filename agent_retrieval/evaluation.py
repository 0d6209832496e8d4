"""Evaluation on BEIR-layout folders: check the data, run every query through the tools' search path under
each mode, and score the runs (nDCG@10, Recall@10, Recall@100, MRR@10).

A folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv. Each query's candidates are fetched
once (`Retrieval.candidates`, as the tools do) and ranked under every mode by the tools' own fusion
(`Retrieval.rank`). Runs are written as TREC run files, one line per ranked document, appended query by
query: an interrupted evaluation resumes where it stopped. A run is reused only under the same key (the
dataset's content, every setting a ranking depends on, the embedding model and this version), and only
over a store that holds the corpus and nothing else.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from agent_retrieval import __version__
from agent_retrieval.context import RUN_SETTINGS, Context
from agent_retrieval.core.prompts import prompt_files
from agent_retrieval.errors import InvalidRequest
from agent_retrieval.models import MAX_TOP_K, Document, Hit, Level, SearchRequest, parse_request
from agent_retrieval.planning import Facets, make_plan, run_plan
from agent_retrieval.search.retrieval import Candidates, Retrieval

T = TypeVar("T")
METRICS = ("ndcg@10", "recall@2", "recall@5", "recall@10", "recall@100", "mrr@10")
# What each column measures, printed under the table.
LEGEND = (
    "ndcg@10: graded gain of the top 10 against the best possible order; recall@k: the mean share of a "
    "query's relevant documents in its top k (multi-hop papers' Recall@2 and @5); mrr@10: 1 / rank of the "
    "first relevant one (0 past 10); "
    "all-gold@k: the share of queries with two or more relevant documents that have all of them in the top k"
)
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
    f"passages at either level, each document at its best one, {MAX_TOP_K} passages at most",
}
# How deep each mode ranks documents: a metric past it is not reported (plan's recall@100 was a recall@50).
MODE_DEPTH = {"plan": MAX_TOP_K}


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
    types: dict[str, str] = field(default_factory=dict)  # query id -> its type (query_types.tsv), if given

    @property
    def corpus(self) -> Path:
        return self.folder / "corpus.jsonl"

    def fingerprint(self) -> str:
        """A digest of what the scores rest on: the files' bytes, the split and the queries and documents
        kept."""
        digest = hashlib.sha256(f"{self.split}|{sorted(self.queries)}|{sorted(self.subset or ())}".encode())
        for path in (self.corpus, self.folder / "queries.jsonl", self.folder / "qrels" / f"{self.split}.tsv"):
            with path.open("rb") as file:
                while block := file.read(2**20):
                    digest.update(block)
        return digest.hexdigest()

    def documents(self) -> Iterator[Document]:
        """The corpus (or its subset) as Documents (`_id`, `title`, `text`), for ingestion."""
        from agent_retrieval.ingest.loaders import load_documents

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
    types = _query_types(folder / "query_types.tsv", set(judged), skipped)
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
        types,
    )


def _jsonl(path: Path, required: Sequence[str]) -> Iterator[tuple[dict[str, Any], str]]:
    from agent_retrieval.ingest.loaders import jsonl_records

    for where, record in jsonl_records(path, DatasetError):
        if not isinstance(record, dict) or any(not isinstance(record.get(k), str) for k in required):
            raise DatasetError(
                f"{where}: each line must be an object with string fields {', '.join(required)}"
            )
        yield record, where


def _query_types(path: Path, judged: set[str], skipped: list[str]) -> dict[str, str]:
    """Each judged query's type from an optional `query_types.tsv` (query id, type; a header line may name
    them), so scores can be read per type; a query it does not name is of no type."""
    types: dict[str, str] = {}
    if not path.is_file():
        return types
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            fields = line.rstrip("\n").split("\t")
            if not line.strip() or (number == 1 and fields[0] in ("query-id", "query_id", "qid")):
                continue
            if len(fields) != 2 or not fields[1].strip():
                raise DatasetError(
                    f"{path}:{number}: expected 'query-id<TAB>type' (got {line.strip()[:80]!r})"
                )
            if fields[0] in judged:
                types[fields[0]] = fields[1].strip()[:40]
            else:
                skipped.append(f"{path.name}:{number}: query {fields[0]!r} is not judged")
    return types


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


def score_run(
    run: dict[str, list[str]], qrels: dict[str, dict[str, int]], depth: int = DEPTH
) -> dict[str, float]:
    """Mean of each metric over the judged queries (a query missing from the run scores 0); all-gold@k over
    the queries with two or more relevant documents, when there are any. A metric looking past `depth`,
    how deep the run ranks, is left out."""
    totals = {name: 0.0 for name in METRICS if _k(name) <= depth}
    for qid, grades in qrels.items():
        ranked = run.get(qid, [])
        totals["ndcg@10"] += ndcg(ranked, grades)
        for name in ("recall@2", "recall@5", "recall@10", "recall@100"):
            if name in totals:
                totals[name] += recall(ranked, grades, _k(name))
        totals["mrr@10"] += mrr(ranked, grades)
    scores = {name: total / len(qrels) for name, total in totals.items()}
    several = multi_gold(qrels)
    for name in ALL_GOLD if several else ():
        k = _k(name)
        scores[name] = sum(all_gold(run.get(qid, []), qrels[qid], k) for qid in several) / len(several)
    return scores


def _k(metric: str) -> int:
    return int(metric.split("@")[1])


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
    notes: list[str] = field(default_factory=list)  # what a reader of the scores must know
    by_type: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # type -> mode -> scores
    type_counts: dict[str, int] = field(default_factory=dict)

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
            "notes": self.notes,
            "by_type": self.by_type,
            "type_counts": self.type_counts,
        }

    def table(self) -> str:
        head = f"{self.dataset} ({self.split}, {self.queries} queries, {self.level} level)"
        lines = [head, "", *_rows(self.scores)]
        for kind, scores in self.by_type.items():
            lines += ["", f"{kind} ({self.type_counts[kind]} queries)", *_rows(scores)]
        lines += [
            "",
            LEGEND + (f" ({self.multi_gold_queries} such queries)" if self.multi_gold_queries else ""),
        ]
        lines += self.notes
        if self.skipped:
            lines += ["", f"skipped {len(self.skipped)} line(s) of the dataset, e.g. {self.skipped[0]}"]
        return "\n".join(lines)


def _rows(scores: dict[str, dict[str, float]]) -> list[str]:
    """A table of each mode's scores, in percent; a metric no mode has is left out, one a mode lacks is -."""
    metrics = [m for m in (*METRICS, *ALL_GOLD) if any(m in s for s in scores.values())]
    lines = [f"{'mode':<15}" + "".join(f"{m:>12}" for m in metrics)]
    for mode, row in scores.items():
        lines.append(
            f"{mode:<15}" + "".join(f"{100 * row[m]:>12.2f}" if m in row else f"{'-':>12}" for m in metrics)
        )
    return lines


def available_modes(context: Context) -> list[str]:
    """Every mode this configuration can run: hyde+hybrid only with a chat model."""
    return [m for m in MODES if m != "hyde+hybrid" or context.chat.configured]


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
    if "hyde+hybrid" in modes and not retrieval.context.chat.configured:
        raise InvalidRequest("hyde+hybrid needs a chat model: set OPENAI_API_KEY or OPENAI_BASE_URL")
    stats = retrieval.store.stats()
    held = stats.documents
    if held != dataset.corpus_size:
        raise InvalidRequest(
            f"the store at {stats.location} holds {held:,} documents and the corpus "
            f"{dataset.corpus_size:,}: "
            + (
                "the others would be ranked beside it; evaluate on a store of its own (`agent-retrieval "
                "eval` keeps one per dataset under --out when --db is left out)"
                if held > dataset.corpus_size
                else "ingest the corpus into it first"
            )
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    deep = retrieval.context.replace(candidates=max(retrieval.context.candidates, DEPTH))
    searcher = Retrieval(
        deep,
        store=retrieval.store,
        embedder=retrieval.embedder,
        llm=retrieval.llm,
        resources=retrieval.resources,
    )
    files = {mode: out / f"run.{mode}.trec" for mode in modes}
    trails = {mode: out / f"found.{mode}.jsonl" for mode in modes}
    notes = _reuse_runs(out, _run_key(dataset, searcher, level))
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
            _append_trail(trails[mode], qid, ranked[mode], dataset.qrels[qid])
    per_query = (time.perf_counter() - started) / len(todo) if todo else 0.0
    runs = {mode: read_run(files[mode]) for mode in modes}
    scores = {mode: score_run(runs[mode], dataset.qrels, MODE_DEPTH.get(mode, DEPTH)) for mode in modes}
    by_type: dict[str, dict[str, dict[str, float]]] = {}
    for kind in sorted(set(dataset.types.values())):
        qrels = {q: g for q, g in dataset.qrels.items() if dataset.types.get(q) == kind}
        by_type[kind] = {m: score_run(runs[m], qrels, MODE_DEPTH.get(m, DEPTH)) for m in modes}
    _write_per_query(out / "per_query.json", dataset, runs, trails)
    settings = {key: deep.get(key) for key in (*RANKING_SETTINGS, "embedding_provider")}
    if "plan" in modes and level == "documents":
        notes.append("plan ranks passages at either level: its documents are ranked at their best passage")
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
        notes,
        by_type,
        {kind: sum(t == kind for t in dataset.types.values()) for kind in by_type},
    )


def _run_key(dataset: Dataset, searcher: Retrieval, level: Level) -> dict[str, Any]:
    """Everything a stored ranking depends on besides the store: if any of it changes, the runs are stale."""
    context = searcher.context
    return {
        "dataset": dataset.fingerprint(),
        "level": level,
        "version": __version__,
        "code": _code_digest(),
        "embedder": searcher.embedder.model_id,
        "chat_model": context.chat.openai_chat_model if context.chat.configured else None,
        "chunking": [context.ingest.chunk_size, context.ingest.chunk_overlap],
        "reranker": context.rerank.reranker,
        "settings": {name: getattr(context, name) for name in RUN_SETTINGS},
    }


def _code_digest() -> str:
    """A digest of the package's source and prompts: a checkout changed since the runs were made (the
    version unchanged) has made them stale too."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in [*sorted(package.rglob("*.py")), *prompt_files()]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _reuse_runs(out: Path, key: dict[str, Any]) -> list[str]:
    """Keep the run files in `out` only if they were made under `key`; else remove them, and say what
    changed. Records the key for the next run."""
    path = out / "key.json"
    notes: list[str] = []
    earlier = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    runs = sorted([*out.glob("run.*.trec"), *out.glob("found.*.jsonl")])
    if runs and earlier != key:
        changed = _changes(earlier or {}, key)
        for run in runs:
            run.unlink()
        notes.append(
            f"earlier runs in {out} were made under other conditions ({changed}): every query ran again"
        )
    path.write_text(json.dumps(key, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return notes


def _changes(earlier: dict[str, Any], now: dict[str, Any]) -> str:
    """What differs between two run keys, as "name: was -> now" (no record at all: "unrecorded")."""
    if not earlier:
        return "unrecorded"
    flat_earlier = {**earlier, **earlier.get("settings", {})}
    flat_now = {**now, **now.get("settings", {})}
    parts = [
        f"{name}: {flat_earlier.get(name)!r} -> {value!r}"
        for name, value in flat_now.items()
        if name != "settings" and flat_earlier.get(name) != value
    ]
    return "; ".join(parts)[:500] or "unrecorded"


def _rank_modes(
    searcher: Retrieval, query: str, level: Level, modes: Sequence[str], facets: Facets | None = None
) -> dict[str, list[Hit]]:
    """Each mode's ranking of one query, from one fetch of candidates (two with HyDE)."""
    request = parse_request(SearchRequest, {"query": query, "hyde": "off"}).model_copy(
        update={"top_k": DEPTH}
    )
    found = searcher.candidates(request, level)
    context = searcher.context
    alone = context.replace(entity_boost=0.0)  # a single path is scored as it is, without the entity boost
    views = {
        "keyword": (Candidates([], found.keyword_hits, found.query_embedding, found.degraded), alone),
        "vector": (Candidates(found.vector_hits, [], found.query_embedding, found.degraded), alone),
        "hybrid-rrf": (found, context.replace(fusion="rrf")),
        "hybrid-convex": (found, context.replace(fusion="convex")),
    }
    ranked = {}
    for mode in modes:
        if mode in views:
            candidates, fusion = views[mode]
            ranked[mode] = searcher.rank(request, level, candidates, context=fusion).hits
    if "plan" in modes:  # as the rag graph retrieves: plan, run the searches hop by hop, fuse the passages
        llm = searcher.llm if searcher.context.chat.configured else None
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


def _append_trail(path: Path, qid: str, hits: list[Hit], grades: dict[str, int]) -> None:
    """What found each relevant document of the query, at its best passage: the searches of a plan (reading
    on among them), or the sides of a hybrid search with the rank each gave it."""
    found: dict[str, list[str]] = {}
    for hit in hits:
        if grades.get(hit.document_id, 0) > 0 and hit.document_id not in found:
            sides = [f"vector #{hit.vector_rank}"] if hit.vector_rank is not None else []
            sides += [f"keyword #{hit.keyword_rank}"] if hit.keyword_rank is not None else []
            found[hit.document_id] = hit.queries or sides
    with path.open("a", encoding="utf-8") as trail:
        trail.write(json.dumps({"query": qid, "found_by": found}) + "\n")


def _write_per_query(
    path: Path, dataset: Dataset, runs: dict[str, dict[str, list[str]]], trails: dict[str, Path]
) -> None:
    """Per query and mode: the rank of each relevant document (None: not ranked) and what found it."""
    found = {mode: _read_trail(trail) for mode, trail in trails.items()}
    per_query = {
        qid: {
            "query": dataset.queries[qid],
            "type": dataset.types.get(qid),
            "modes": {
                mode: _ranks(run.get(qid, []), grades, found[mode].get(qid, {})) for mode, run in runs.items()
            },
        }
        for qid, grades in dataset.qrels.items()
    }
    path.write_text(json.dumps(per_query, indent=1) + "\n", encoding="utf-8")


def _ranks(
    ranked: list[str], grades: dict[str, int], found_by: dict[str, list[str]]
) -> dict[str, dict[str, Any]]:
    """Each relevant document's rank in `ranked` (None: not ranked) and what found it."""
    place = {doc: rank for rank, doc in enumerate(ranked, start=1)}
    return {
        doc: {"rank": place.get(doc), "found_by": found_by.get(doc, [])}
        for doc, grade in grades.items()
        if grade > 0
    }


def _read_trail(path: Path) -> dict[str, dict[str, list[str]]]:
    if not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    return {row["query"]: row["found_by"] for row in map(json.loads, filter(str.strip, lines))}


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
