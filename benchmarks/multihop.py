"""Multi-hop retrieval as the field reports it: Recall@2, @5 and @10 (the mean share of a question's
supporting paragraphs in the top k) and all-gold@5/@10 (every one of them there), by question type, for one
`document_retriever` call, one `chunk_retriever` call and the rag graph's retrieval (`plan` mode, no chat
model), with a figure.

Each dataset is a BEIR folder; its types come from `query_types.tsv` (2WikiMultihopQA: compositional,
comparison, bridge_comparison, inference) or, for MuSiQue, from the hop count in each question's id. The
stores and run files are kept in results/, so a rerun embeds nothing and searches only what changed (the
run files carry a key of everything a ranking depends on). `failed_hop` counts, per path, the questions
whose chain failed first at each hop (its paragraph not in the top 5; each paragraph's hop read off the
texts, `chain_order`), and each supporting paragraph's hop is written into `per_query.json`.

    python benchmarks/multihop.py                                   # MuSiQue dev and 2Wiki train
    python benchmarks/multihop.py --datasets ../shared/datasets/musique --limit 50
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from agent_retrieval import Context, Retrieval
from agent_retrieval.evaluation import Dataset, evaluate, load_beir
from agent_retrieval.planning.links import given_names, holds

ROOT = Path(__file__).resolve().parent
RESULTS, FIGURES = ROOT / "results", ROOT / "figures"
DATASETS = ROOT.parent.parent / "shared" / "datasets"
# (level, mode) -> the path it stands for
PATHS = {
    ("documents", "hybrid-convex"): "one document_retriever call",
    ("chunks", "hybrid-convex"): "one chunk_retriever call",
    ("chunks", "plan"): "the rag graph's retrieval (plan)",
}
MEASURES = ("recall@2", "recall@5", "recall@10", "all-gold@5", "all-gold@10")
FAILED_AT = 5  # a chain's hop fails when its paragraph is not in the top 5


def run(folder: Path, limit: int | None = None) -> dict:
    """Each path's measures over all questions and by type, in percent, with the count of each group."""
    dataset = load_beir(folder, limit=limit)
    if not dataset.types:  # MuSiQue: the hop count opens each id ("2hop__...", "3hop1__...")
        dataset.types = {q: f"{q[0]} hops" for q in dataset.queries if q[0].isdigit()}
    name = folder.name + (f"-{limit}" if limit else "")
    report: dict = {"questions": len(dataset.queries), "paths": {}}
    texts = supporting_texts(dataset)
    with Retrieval(Context(db_path=str(RESULTS / f"{folder.name}.db"))) as retrieval:
        retrieval.ingest_documents(dataset.documents(), progress=False)
        for level in ("documents", "chunks"):
            modes = [mode for lvl, mode in PATHS if lvl == level]
            out = RESULTS / "eval" / f"{name}-{level}"
            ran = evaluate(dataset, retrieval, out, level=level, modes=modes, progress=True)
            report["types"] = ran.type_counts
            failed = hops_failed(out / "per_query.json", texts)
            for mode in modes:
                report.setdefault("failed_hop", {})[PATHS[(level, mode)]] = failed[mode]
                groups = {"all": ran.scores[mode]} | {t: s[mode] for t, s in ran.by_type.items()}
                report["paths"][PATHS[(level, mode)]] = {
                    group: {m: round(100 * scores[m], 1) for m in MEASURES if m in scores}
                    for group, scores in groups.items()
                }
    return report


def chain_order(question: str, paragraphs: dict[str, str]) -> dict[str, int]:
    """Each supporting paragraph's hop in the question's chain, from 1, as read off the texts (the BEIR files
    keep no decomposition): a hop is the paragraphs holding the first name that the hop before gives (the
    question, then the paragraphs it reached) and one of the rest holds. A paragraph nothing leads to comes
    after the rest."""
    order: dict[str, int] = {}
    given, hop = list(given_names(question, "")), 1
    while left := [p for p in paragraphs if p not in order]:
        held = next((name for name in given if any(holds(paragraphs[p], name) for p in left)), None)
        if held is None:
            break
        reached = [p for p in left if holds(paragraphs[p], held)]
        order |= dict.fromkeys(reached, hop)
        given, hop = [n for p in reached for n in given_names(paragraphs[p], question)], hop + 1
    return order | dict.fromkeys((p for p in paragraphs if p not in order), hop)


def supporting_texts(dataset: Dataset) -> dict[str, str]:
    """Each supporting paragraph's title and text, read once for every level's `hops_failed`."""
    wanted = {doc for judged in dataset.qrels.values() for doc in judged}
    return {d.id: f"{d.title} {d.content}" for d in dataset.documents() if d.id in wanted}


def hops_failed(per_query: Path, texts: dict[str, str]) -> dict[str, dict[str, int]]:
    """Per mode, how many questions failed first at each hop (the lowest hop whose paragraph is not in the
    top FAILED_AT; "none": every hop's is), with each paragraph's hop written into `per_query.json`;
    `texts` holds the supporting paragraphs (`supporting_texts`)."""
    rows = json.loads(per_query.read_text(encoding="utf-8"))
    failed: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows.values():
        supporting = next(iter(row["modes"].values()))
        order = chain_order(row["query"], {doc: texts[doc] for doc in supporting})
        for mode, paragraphs in row["modes"].items():
            missed = []
            for doc, found in paragraphs.items():
                found["hop"] = order[doc]
                if found["rank"] is None or found["rank"] > FAILED_AT:
                    missed.append(order[doc])
            failed[mode][str(min(missed)) if missed else "none"] += 1
    per_query.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return {mode: dict(sorted(counts.items())) for mode, counts in failed.items()}


def plot(reports: dict[str, dict]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(reports), 2, figsize=(13, 4.2 * len(reports)), squeeze=False)
    for row, (dataset, report) in zip(axes, reports.items(), strict=True):
        groups = ["all", *sorted(report["types"])]
        width = 0.8 / len(report["paths"])
        for ax, measure in zip(row, ("recall@2", "recall@5"), strict=True):
            for n, (path, by_group) in enumerate(report["paths"].items()):
                xs = [i + n * width for i in range(len(groups))]
                values = [by_group.get(g, {}).get(measure, 0.0) for g in groups]
                ax.bar(xs, values, width, label=path)
                for x, value in zip(xs, values, strict=True):
                    ax.text(x, value + 0.8, f"{value:.0f}", ha="center", fontsize=7)
            counts = {"all": report["questions"], **report["types"]}
            ax.set_xticks([i + width * (len(report["paths"]) - 1) / 2 for i in range(len(groups))])
            ax.set_xticklabels([f"{g}\n({counts[g]})" for g in groups], fontsize=8)
            ax.set_title(f"{dataset}: {measure.replace('recall', 'Recall')}")
            ax.set_ylim(0, 105)
            ax.grid(axis="y", alpha=0.3)
        row[0].set_ylabel("% of supporting paragraphs")
    axes[0][0].legend(fontsize=8, loc="upper right")
    fig.suptitle("Multi-hop retrieval by question type: local embedder (all-MiniLM-L6-v2), no chat model")
    FIGURES.mkdir(exist_ok=True)
    path = FIGURES / "multihop_types.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--datasets", nargs="+", type=Path, default=[DATASETS / "musique", DATASETS / "2wiki-train"]
    )
    parser.add_argument("--limit", type=int, help="only the first N judged questions of each")
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    reports = {folder.name: run(folder, args.limit) for folder in args.datasets}
    (RESULTS / "multihop.json").write_text(json.dumps(reports, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(reports, indent=2))
    print(plot(reports))
    return reports


if __name__ == "__main__":
    main()
