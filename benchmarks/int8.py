"""Quantized copies of the local model: SciFact nDCG@10 and a query's embedding time against fp32, in one run.

- the 8-bit copy the local embedder runs lone queries on where the CPU has 8-bit products (onnx_model.py:
  8-bit matrix weights in blocks of 32, int8 products; measured here on any CPU), its queries searched
  against the stored fp32 vectors: shipped only while its nDCG@10 stays within 0.3 of fp32's at both levels;
- int8 by ONNX Runtime's dynamic quantization for the whole model, its own store made here from the same
  documents: offered only if within 0.3 at both levels (issue 16).

The fp32 figures come from the stored SciFact base (`make bench-quality`'s store).

    python benchmarks/int8.py   # JSON on stdout and in results/int8.json
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from langchain_core.embeddings import Embeddings

from agent_retrieval import Context, Retrieval, hyde
from agent_retrieval.evaluation import evaluate, load_beir
from agent_retrieval.ingest import ingest
from agent_retrieval.providers import onnx_model
from agent_retrieval.providers.embeddings import Embedder, bundled_model_path

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
DATASET = ROOT.parent.parent / "shared" / "datasets" / "scifact"
QUERIES = 200  # single-query embeddings timed per model


class _Onnx(Embeddings):
    """A LangChain Embeddings over one ONNX file of the bundled model."""

    def __init__(self, model: onnx_model.OnnxModel, *, query_copy: bool = False):
        self.model = model
        self.query_copy = query_copy  # queries on the model's 8-bit copy

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.model.encode(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.model.encode([text], query=self.query_copy)[0].tolist()


def _query_ms(
    model: onnx_model.OnnxModel, queries: list[str], *, query_copy: bool = False
) -> dict[str, float]:
    times = []
    for query in queries:
        started = time.perf_counter()
        model.encode([query], query=query_copy)
        times.append(1000 * (time.perf_counter() - started))
    return {"p50_ms": statistics.median(times), "p95_ms": statistics.quantiles(times, n=20)[-1]}


def main() -> dict:
    RESULTS.mkdir(exist_ok=True)
    model_dir = bundled_model_path()
    fp32 = onnx_model.load(model_dir, onnx_model.cache_folder(), "onnx")
    assert fp32 is not None
    int8_path = RESULTS / "all-MiniLM-L6-v2-int8.onnx"
    if not int8_path.exists():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(fp32.path), str(int8_path), weight_type=QuantType.QInt8)
    int8 = onnx_model.OnnxModel(int8_path, model_dir)

    dataset = load_beir(DATASET)
    queries = list(dataset.queries.values())[:QUERIES]
    # measured whatever the CPU: where it has no 8-bit products (int8_products) the library leaves it unused
    fp32.query_path = onnx_model.query_copy(fp32.path)
    assert fp32.query_path is not None, "the 8-bit copy could not be made here (see the log)"
    report: dict = {
        "cpu_has_int8_products": onnx_model.int8_products(),
        "query_embedding": {
            "fp32": _query_ms(fp32, queries),
            "8-bit copy": _query_ms(fp32, queries, query_copy=True),
            "int8": _query_ms(int8, queries),
        },
    }

    base = RESULTS / "scifact-base.db"
    stores = {
        "fp32": (base, _Onnx(fp32), ""),
        "8-bit copy": (base, _Onnx(fp32, query_copy=True), ""),
        "int8": (RESULTS / "scifact-int8.db", _Onnx(int8), "-int8"),
    }
    for name, (db, model, suffix) in stores.items():
        hyde.clear_cache()  # the same model id for the first two: a cached query vector would be the other's
        context = Context(db_path=str(db))
        embedder = Embedder(model, "local/all-MiniLM-L6-v2" + suffix)
        with Retrieval(context, embedder=embedder) as retrieval:
            if name == "int8":
                ingest(dataset.documents(), retrieval.store, embedder, context)
            for level in ("documents", "chunks"):
                out = RESULTS / f"int8-eval-{name}-{level}"
                scores = evaluate(dataset, retrieval, out, level=level, modes=["vector", "hybrid-convex"])
                report[f"{name} {level}"] = {
                    m: round(100 * s["ndcg@10"], 2) for m, s in scores.scores.items()
                }
    for name in ("8-bit copy", "int8"):
        report[f"{name} within 0.3"] = all(
            abs(report[f"{name} {level}"]["hybrid-convex"] - report[f"fp32 {level}"]["hybrid-convex"]) <= 0.3
            for level in ("documents", "chunks")
        )
    (RESULTS / "int8.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
