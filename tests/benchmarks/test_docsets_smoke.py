"""benchmarks/docsets.py end to end on one documentation set with the word-hash embedder: every question is
asked, every file's words are counted, and a question whose answer phrase the page holds finds its file."""

from __future__ import annotations

from agent_retrieval.providers.embeddings import Embedder
from tests.benchmarks import load_script
from tests.conftest import WordHashEmbeddings


def test_the_docsets_benchmark_runs_and_reports_each_measure(monkeypatch, tmp_path):
    module = load_script("docsets")
    monkeypatch.setattr(module, "RESULTS", tmp_path)
    monkeypatch.setattr(
        "agent_retrieval.search.retrieval.make_embedder",
        lambda context, **_: Embedder(WordHashEmbeddings(), "test/w"),
    )
    result = module.main(["--sets", "jest"])
    assert result["ingest"]["files_stored"] == 38 and not result["ingest"]["skipped"]
    assert len(result["questions"]) == 16 and result["summary"]["jest"]["file@10"] > 50
    assert 50 < result["sets"]["jest"]["kept"] <= 100 and result["sets"]["jest"]["words"] > 50_000
    assert (tmp_path / "docsets.json").exists()
