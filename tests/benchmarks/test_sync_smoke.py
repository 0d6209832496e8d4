"""benchmarks/sync.py end to end on 60 SciFact abstracts, with the word-hash embedder: after edits, renames
and deletions, the sync embeds only the edited files' texts and leaves exactly the live files."""

from __future__ import annotations

import pytest

from agent_retrieval.providers.embeddings import Embedder
from tests.benchmarks import BENCHMARKS, load_script
from tests.conftest import WordHashEmbeddings


def test_the_sync_benchmark_runs_and_embeds_only_edited_text(monkeypatch, tmp_path):
    if not (BENCHMARKS.parents[1] / "shared" / "datasets" / "scifact" / "corpus.jsonl").exists():
        pytest.skip("SciFact is not beside the repository")
    module = load_script("sync")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(
        "agent_retrieval.search.retrieval.make_embedder",
        lambda context, **_: Embedder(WordHashEmbeddings(), "test/w"),
    )
    result = module.main(["--files", "60"])
    assert (result["edited"], result["renamed"], result["deleted"]) == (3, 3, 3)
    assert result["store_holds_exactly_the_live_files"] and result["store_documents"] == 57
    sync = result["sync"]
    assert (sync["reported_renamed"], sync["reported_removed"]) == (3, 3)
    assert 3 <= sync["texts_embedded"] <= 6  # each edited file's last chunk, and its lead if it changed
