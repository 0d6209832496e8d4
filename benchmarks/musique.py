"""Multi-hop retrieval on MuSiQue dev, by hop count: all-gold@5/10 and nDCG@10 of one `document_retriever`
call, of one `chunk_retriever` call (documents at their best passage), and of the rag graph's retrieval
(`plan` mode), each over the 2-, 3- and 4-hop questions, with a figure.

It ingests the MuSiQue corpus and evaluates it at both levels as `agent-retrieval eval` does (the store and
the run files are kept in results/, so a rerun embeds and searches nothing), then splits the runs by the
hop count in each question's id (`2hop__...`, `3hop1__...`, `4hop2__...`).

    python benchmarks/musique.py   # JSON in results/musique.json, figure in figures/musique_hops.png
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path

from agent_retrieval import Context, Retrieval
from agent_retrieval.evaluation import Dataset, all_gold, evaluate, load_beir, ndcg, read_run
from agent_retrieval.planning import make_plan, run_plan

ROOT = Path(__file__).resolve().parent
RESULTS, FIGURES = ROOT / "results", ROOT / "figures"
DATASET = ROOT.parent.parent / "shared" / "datasets" / "musique"
# (level, mode) -> the path it stands for
PATHS = {
    ("documents", "hybrid-convex"): "one document_retriever call",
    ("chunks", "hybrid-convex"): "one chunk_retriever call (best passage)",
    ("chunks", "plan"): "the rag graph's retrieval (plan)",
}


# 5 and 10, and the passages the rag graph writes its answer from (answer_chunks)
KS = sorted({5, Context().answer_chunks, 10})


ANSWERED = "the rag graph's passages, as it answers"


def graph_passages(dataset: Dataset, retrieval: Retrieval) -> dict:
    """All-gold over the passages the rag graph answers from (its `answer_chunks`, and what reading on
    adds to them), planned and run as the graph does, by hop count; with how many passages that was."""
    facets = retrieval.store.metadata_values()

    async def passages(question: str) -> list[str]:
        planned = await make_plan(question, retrieval.context, None, facets=facets)
        run = await run_plan(planned.plan, retrieval, top_k=retrieval.context.answer_chunks)
        return list(dict.fromkeys(hit.document_id for hit in run.chunks))

    found = {qid: asyncio.run(passages(dataset.queries[qid])) for qid in dataset.qrels}
    groups: dict[str, list[str]] = defaultdict(list)
    for qid in dataset.qrels:
        groups[hops(qid)].append(qid)
        groups["all"].append(qid)
    return {
        group: {
            "questions": len(qids),
            "all-gold": round(
                100 * sum(all_gold(found[q], dataset.qrels[q], len(found[q])) for q in qids) / len(qids), 1
            ),
            "passages": round(sum(len(found[q]) for q in qids) / len(qids), 2),
        }
        for group, qids in sorted(groups.items())
    }


def hops(query_id: str) -> str:
    return query_id[0]  # "2hop__...", "3hop1__...", "4hop3__..."


def main(dataset_folder: Path = DATASET, results: Path = RESULTS) -> dict:
    dataset = load_beir(dataset_folder)
    report: dict = defaultdict(dict)
    results.mkdir(parents=True, exist_ok=True)
    with Retrieval(Context(db_path=str(results / "musique.db"))) as retrieval:
        # the corpus, once: a rerun finds every paragraph unchanged and embeds nothing
        retrieval.ingest_documents(dataset.documents(), progress=False)
        for level in ("documents", "chunks"):
            modes = [mode for lvl, mode in PATHS if lvl == level]
            out = results / "eval" / f"musique-{level}"
            ran = evaluate(dataset, retrieval, out, level=level, modes=modes, progress=False)
            for mode in modes:
                run = read_run(ran.runs[mode])
                groups: dict[str, list[str]] = defaultdict(list)
                for qid in dataset.qrels:
                    groups[hops(qid)].append(qid)
                    groups["all"].append(qid)
                for group, qids in sorted(groups.items()):
                    report[PATHS[(level, mode)]][group] = {
                        "questions": len(qids),
                        **{
                            f"all-gold@{k}": round(
                                100
                                * sum(all_gold(run.get(q, []), dataset.qrels[q], k) for q in qids)
                                / len(qids),
                                1,
                            )
                            for k in KS
                        },
                        "ndcg@10": round(
                            100 * sum(ndcg(run.get(q, []), dataset.qrels[q]) for q in qids) / len(qids), 2
                        ),
                    }
        report[ANSWERED] = graph_passages(dataset, retrieval)
    (results / "musique.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    return report


def plot(report: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report = {path: by_group for path, by_group in report.items() if path != ANSWERED}  # no k to cut at
    groups = [g for g in ("2", "3", "4", "all") if all(g in path for path in report.values())]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    width = 0.8 / len(report)
    for ax, k in zip(axes, (5, 10), strict=True):
        for n, (path, by_group) in enumerate(report.items()):
            xs = [i + n * width for i in range(len(groups))]
            values = [by_group[g][f"all-gold@{k}"] for g in groups]
            ax.bar(xs, values, width, label=path)
            for x, value in zip(xs, values, strict=True):
                ax.text(x, value + 0.8, f"{value:.0f}", ha="center", fontsize=8)
        ax.set_xticks([i + width * (len(report) - 1) / 2 for i in range(len(groups))])
        ax.set_xticklabels(
            [
                f"{g} hops ({report[next(iter(report))][g]['questions']})"
                if g != "all"
                else f"all ({report[next(iter(report))][g]['questions']})"
                for g in groups
            ]
        )
        ax.set_title(f"all-gold@{k}: every supporting paragraph in the top {k}")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("% of questions")
    axes[0].legend(fontsize=8)
    fig.suptitle("MuSiQue dev (200 questions), local embedder, no chat model")
    FIGURES.mkdir(exist_ok=True)
    path = FIGURES / "musique_hops.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(plot(main()))
