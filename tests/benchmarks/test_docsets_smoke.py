"""benchmarks/docsets.py end to end on one documentation set with the word-hash embedder: every question is
asked, every file's words are counted, and a question whose answer phrase the page holds finds its file."""

from __future__ import annotations

import pytest

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
    # a file judged to state the answer counts as answering: never later than the question's own file
    for answer in result["questions"]:
        assert answer["answer_rank"] is None or answer["answer_rank"] <= (answer["file_rank"] or 11)
    assert result["summary"]["jest"]["answer@1"] >= result["summary"]["jest"]["file@1"]


def test_a_judgment_whose_quote_is_not_in_its_file_stops_the_benchmark(tmp_path):
    module = load_script("docsets")
    question = {"set": "jest", "file": "docs/CLI.md", "q": "q", "answer": "a"}
    judged = {"file": "docs/SnapshotTesting.md", "quote": "snapshots are written by hand"}
    assert module.answering_files({**question, "also": []}) == {"jest/docs/CLI.md": "a"}
    with pytest.raises(SystemExit, match=r"SnapshotTesting\.md: the quote judging it"):
        module.answering_files({**question, "also": [judged]})
