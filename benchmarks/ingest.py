"""Ingestion rate with the local embedder on this CPU, per local runtime, a re-ingest of unchanged input, and
peak memory.

SciFact abstracts (the first N, default 1000) are ingested into a fresh embedded store with
all-MiniLM-L6-v2, once on ONNX Runtime and once on torch in the same run, then ingested again unchanged,
which must embed nothing.

    python benchmarks/ingest.py [--documents N] [--runtimes onnx,torch]   # JSON on stdout and in results/
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import tempfile
import time
from pathlib import Path

from agent_retrieval import Context, Retrieval
from agent_retrieval.evaluation import load_beir
from agent_retrieval.ingest import ingest

ROOT = Path(__file__).resolve().parent
DATASET = ROOT.parent.parent / "shared" / "datasets" / "scifact"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=1000, help="abstracts to ingest (default 1000)")
    parser.add_argument("--dataset", type=Path, default=DATASET, help="a BEIR folder (default: SciFact)")
    parser.add_argument(
        "--runtimes", default="onnx,torch", help="local runtimes to measure, in one run (default onnx,torch)"
    )
    args = parser.parse_args(argv)
    documents = list(itertools.islice(load_beir(args.dataset).documents(), args.documents))
    report: dict = {}
    for runtime in args.runtimes.split(","):
        report[runtime] = measure(documents, runtime)
    if {"onnx", "torch"} <= report.keys():
        report["onnx_over_torch_texts_per_second"] = round(
            report["onnx"]["texts_per_second"] / report["torch"]["texts_per_second"], 2
        )
    report["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # the whole run
    (ROOT / "results").mkdir(exist_ok=True)
    (ROOT / "results" / "ingest.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return report


def measure(documents: list, runtime: str) -> dict:
    """One fresh store ingested with this local runtime, then the same input again."""
    with tempfile.TemporaryDirectory(prefix="ingest-bench-") as folder:
        context = Context(db_path=str(Path(folder) / "store.db"), local_runtime=runtime)
        with Retrieval(context) as retrieval:
            retrieval.embedder.embed_query("warm up")  # model load is not ingestion
            started = time.perf_counter()
            first = ingest(documents, retrieval.store, retrieval.embedder, context)
            seconds = time.perf_counter() - started
            started = time.perf_counter()
            again = ingest(documents, retrieval.store, retrieval.embedder, context)
            again_seconds = time.perf_counter() - started
    return {
        "documents": first.documents,
        "chunks": first.chunks,
        "texts_embedded": first.embedded,
        "seconds": round(seconds, 1),
        "documents_per_second": round(first.documents / seconds, 1),
        "chunks_per_second": round(first.chunks / seconds, 1),
        "texts_per_second": round(first.embedded / seconds, 1),
        "reingest_seconds": round(again_seconds, 2),
        "reingest_embedded": again.embedded,
        "reingest_unchanged": again.unchanged,
    }


if __name__ == "__main__":
    main()
