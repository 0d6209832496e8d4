"""The figures of BENCHMARKS.md, drawn from the JSON the benchmark scripts leave in benchmarks/results/.

python benchmarks/plots.py  # benchmarks/figures/: quality, latency (with growth.json), peers, reliability
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no screen here
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parent
RESULTS, FIGURES = ROOT / "results", ROOT / "figures"
EVAL = RESULTS / "eval" / "scifact-test-{level}" / "report.json"
# Published nDCG@10 on BEIR SciFact test (the anchors of issue 5).
ANCHORS = {
    "BM25 (Anserini flat)": 67.89,
    "SQLite FTS5 bm25": 68.62,
    "all-MiniLM-L6-v2 dense": 64.51,
    "convex BM25 + MiniLM": 73.38,
    "RRF BM25 + MiniLM": 71.43,
}


def quality() -> Path:
    """nDCG@10 of each of our modes, the peer's, and the published anchors, on one horizontal bar chart."""
    scores = json.loads(Path(str(EVAL).format(level="documents")).read_text())["scores"]
    ours = {f"ours: {mode}": 100 * value["ndcg@10"] for mode, value in scores.items()}
    chunks = Path(str(EVAL).format(level="chunks"))
    if chunks.exists():  # documents ranked by their best chunk: the vector path's better form
        ours["ours: vector, best chunk"] = 100 * json.loads(chunks.read_text())["scores"]["vector"]["ndcg@10"]
    bars = {f"published: {name}": value for name, value in ANCHORS.items()} | ours
    peer = RESULTS / "peer.json"
    if peer.exists():
        bars |= {
            "LangChain EnsembleRetriever (BM25 + MiniLM)": 100 * _peer_ndcg(json.loads(peer.read_text()))
        }
    names = list(bars)
    colours = [
        "#9aa5b1" if n.startswith("published") else "#4c72b0" if n.startswith("ours") else "#dd8452"
        for n in names
    ]
    fig, ax = plt.subplots(figsize=(10, 0.42 * len(names) + 1.2))
    ax.barh(names, [bars[n] for n in names], color=colours)
    for y, name in enumerate(names):
        ax.text(bars[name] + 0.2, y, f"{bars[name]:.2f}", va="center", fontsize=9)
    ax.axvline(75.0, color="#c44e52", linestyle="--", linewidth=1)
    ax.text(75.2, len(names) - 0.6, "goal: 75.0", color="#c44e52", fontsize=9)
    ax.set_xlim(55, 82)
    ax.invert_yaxis()
    ax.set_xlabel("nDCG@10 on BEIR SciFact test (300 queries)")
    ax.set_title("Retrieval quality: our modes against published figures")
    return _save(fig, "quality.png")


def _peer_ndcg(report: dict) -> float:
    return report["systems"]["langchain-ensemble"]["ndcg@10"]


def latency() -> Path:
    """How cost grows: p50 and p95 of a chunk_retriever call, and memory, against corpus size, per store."""
    embedded = json.loads((RESULTS / "latency.json").read_text())
    growth_file = RESULTS / "growth.json"
    growth = json.loads(growth_file.read_text()) if growth_file.exists() else {}
    fig, (ax, mem) = plt.subplots(1, 2, figsize=(12, 4.4))
    sizes = sorted(int(size) for size in embedded)
    pg_sizes = sorted(int(size) for size in growth)
    for stat, style in (("p50_ms", "-o"), ("p95_ms", "--o")):
        ax.plot(
            sizes,
            [embedded[str(s)][stat] for s in sizes],
            style,
            color="#4c72b0",
            label=f"embedded SQLite ({stat[:3]})",
        )
        if pg_sizes:
            ax.plot(
                pg_sizes,
                [growth[str(s)]["postgres"][stat] for s in pg_sizes],
                style,
                color="#dd8452",
                label=f"Postgres by DSN ({stat[:3]})",
            )
    ax.set_xscale("log")
    ax.set_xlabel("chunks in the store")
    ax.set_ylabel("milliseconds per chunk_retriever call")
    ax.set_title("Latency against corpus size (SciFact queries, 2 cores)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    rss = [s for s in sizes if "peak_rss_mb" in embedded[str(s)]]
    mem.plot(
        rss,
        [embedded[str(s)]["peak_rss_mb"] for s in rss],
        "-o",
        color="#4c72b0",
        label="embedded: process peak memory",
    )
    if pg_sizes:
        mem.plot(
            pg_sizes,
            [growth[str(s)]["postgres"]["database_mb"] for s in pg_sizes],
            "-o",
            color="#dd8452",
            label="Postgres: tables and indexes",
        )
        mem.plot(
            pg_sizes,
            [growth[str(s)]["embedded"]["file_mb"] for s in pg_sizes],
            ":o",
            color="#4c72b0",
            label="embedded: store file",
        )
    mem.set_xscale("log")
    mem.set_xlabel("chunks in the store")
    mem.set_ylabel("MB")
    mem.set_title("Memory and size against corpus size")
    mem.grid(alpha=0.3)
    mem.legend(fontsize=8)
    return _save(fig, "latency.png")


def peers() -> Path:
    """The embedded peers (`make bench-peers`): SciFact nDCG@10, then p50 and p95 at each size, per system."""
    report = json.loads((RESULTS / "embedded-peers.json").read_text())
    systems = list(report["quality"])
    sizes = [key for key in report if key != "quality"]
    colours = ["#4c72b0" if name == "ours" else "#dd8452" for name in systems]
    fig, axes = plt.subplots(1, 1 + len(sizes), figsize=(5 + 4.5 * len(sizes), 3.2 + 0.25 * len(systems)))
    quality_ax, *speed_axes = axes
    ndcg = [report["quality"][name]["ndcg@10"] for name in systems]
    quality_ax.barh(systems, ndcg, color=colours)
    for y, value in enumerate(ndcg):
        quality_ax.text(value + 0.2, y, f"{value:.2f}", va="center", fontsize=9)
    quality_ax.set_xlim(min(ndcg) - 5, max(ndcg) + 3)
    quality_ax.invert_yaxis()
    quality_ax.set_xlabel("nDCG@10, SciFact test (chunks)")
    quality_ax.set_title("Quality")
    for ax, size in zip(speed_axes, sizes, strict=True):
        rows = report[size]
        p95 = [rows[name]["p95_ms"] for name in systems]
        ax.barh(systems, p95, color="#c8d1dc", label="p95")
        ax.barh(systems, [rows[name]["p50_ms"] for name in systems], color=colours, label="p50")
        for y, name in enumerate(systems):
            ax.text(p95[y] * 1.02, y, f"{rows[name]['p50_ms']:.0f} / {p95[y]:.0f}", va="center", fontsize=8)
        ax.set_xlim(0, max(p95) * 1.25)
        ax.invert_yaxis()
        ax.set_yticklabels([])
        ax.set_xlabel("ms per chunk_retriever-equivalent call (p50 / p95)")
        ax.set_title(size)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    fig.suptitle("Embedded peers with our chunks and vectors (2 cores, one run)")
    return _save(fig, "peers.png")


def reliability() -> Path:
    """The shipped confidence on each dataset held out (`python -m benchmarks.answerability`): in each bin of
    predicted probability, the share of questions the store answers (a calibrated model's follows the
    diagonal)."""
    report = json.loads((RESULTS / "answerability.json").read_text())
    shipped = report["shipped (confidence.signals)"]
    fig, ax = plt.subplots(figsize=(6.5, 5))
    ax.plot([0, 1], [0, 1], color="#9aa5b1", linestyle="--", linewidth=1, label="calibrated")
    for name, bins in shipped["reliability (held out)"].items():
        kept = [b for b in bins if b["questions"]]
        ax.plot(
            [b["bin"] + 0.05 for b in kept],
            [b["answerable"] / b["questions"] for b in kept],
            marker="o",
            label=f"{name} ({sum(b['questions'] for b in kept)} questions)",
        )
    low = shipped["threshold (held out)"]
    ax.axvline(low, color="#c44e52", linewidth=1)
    ax.text(low + 0.01, 0.02, f'"probably not covered" below {low}', color="#c44e52", fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("confidence, fitted on the other four datasets")
    ax.set_ylabel("share of questions the store answers")
    ax.set_title("Confidence held out, per dataset")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return _save(fig, "reliability.png")


def _save(fig: plt.Figure, name: str) -> Path:
    FIGURES.mkdir(exist_ok=True)
    path = FIGURES / name
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


if __name__ == "__main__":
    for figure in (quality, latency, peers, reliability):
        try:
            print(figure())
        except FileNotFoundError as missing:
            print(f"skipped {figure.__name__}: {missing.filename} is missing; run its benchmark first")
