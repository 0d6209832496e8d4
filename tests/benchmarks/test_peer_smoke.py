"""benchmarks/peer.py: the peer's vector cache and recipe, and the smoke run end to end (LangChain's
EnsembleRetriever against our search on 200 SciFact abstracts, the real local embedder for both)."""

from __future__ import annotations

import json
import shutil

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from tests.benchmarks import load_script

for _package in ("langchain_classic", "langchain_community", "rank_bm25"):
    pytest.importorskip(_package, reason="the peer needs langchain-classic, langchain-community, rank_bm25")


peer = load_script("peer")


class CountingEmbeddings(DeterministicFakeEmbedding):
    """langchain-core's deterministic fake, counting the texts it embeds."""

    texts: int = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        return super().embed_documents(texts)


def test_the_peer_cache_embeds_each_text_once_per_model(tmp_path):
    cache, model = tmp_path / "vectors.npz", CountingEmbeddings(size=8)
    vectors, info = peer.cached_vectors(["a", "b", "a"], model, "fake/1", cache)
    assert model.texts == 2 and info["embedded_now"] == 2 and set(vectors) == {"a", "b"}

    again, info = peer.cached_vectors(["a", "b", "c"], model, "fake/1", cache)
    assert model.texts == 3 and info["embedded_now"] == 1 and info["reused_from_cache"] == 2
    assert (again["a"] == vectors["a"]).all()

    _, info = peer.cached_vectors(["a"], model, "fake/2", cache)  # another model's vectors are never reused
    assert info["embedded_now"] == 1 and model.texts == 4


def test_the_peer_recipe_ranks_100_deep_by_document_id():
    documents = [
        peer.LCDocument(page_content=f"abstract {i} about topic{i % 7}", id=f"d{i}") for i in range(150)
    ]
    embeddings = peer.PeerEmbeddings(CountingEmbeddings(size=8))
    ensemble, seconds = peer.build_peer(documents, embeddings)
    assert ensemble.weights == [0.5, 0.5] and seconds["index_seconds"] >= 0
    found = [d.id for d in ensemble.invoke("topic3")]
    assert len(found) == len(set(found)) >= peer.DEPTH  # each side returns 100; fusion unites them
    assert {f"d{i}" for i in range(3, 150, 7)} <= set(found)  # every keyword match, by document id


@pytest.mark.slow
def test_the_smoke_run_compares_both_on_the_same_queries(tmp_path, capsys):
    if not (peer.DATASET / "corpus.jsonl").is_file():
        pytest.skip(f"BEIR SciFact is not at {peer.DATASET}")
    cache = peer.RESULTS / "peer-vectors.npz"
    if cache.is_file():  # the peer's vectors of a full run make the smoke run embed nothing
        shutil.copyfile(cache, tmp_path / cache.name)
    result = peer.main(["--smoke", "--out", str(tmp_path)])

    assert json.loads((tmp_path / "peer-smoke.json").read_text()) == json.loads(json.dumps(result))
    assert "langchain-ensemble" in capsys.readouterr().out
    assert result["queries"] == 20 and result["documents"] == 200
    assert result["build"]["ours"]["documents"] == 200
    theirs = result["build"]["theirs"]
    assert theirs["embedded_now"] + theirs["reused_from_cache"] == 200
    assert result["settings"]["theirs"]["weights"] == [0.5, 0.5] and result["settings"]["theirs"]["k"] == 100

    rows = result["systems"]
    for name, row in rows.items():
        # the 200 documents hold every judged one: a working retriever finds them; wrong ids would find none
        assert 0.6 <= row["ndcg@10"] <= 1.0, name
        assert row["recall@10"] <= row["recall@100"] and row["recall@100"] >= 0.9, name
        assert 0 < row["p50_ms"] <= row["p95_ms"], name  # timed, never judged: speed lives in BENCHMARKS.md
    for name, ratio in result["ratios"].items():
        assert ratio["ndcg@10"] == pytest.approx(rows[name]["ndcg@10"] / rows[peer.THEIRS]["ndcg@10"])
        assert ratio["p50"] == pytest.approx(rows[name]["p50_ms"] / rows[peer.THEIRS]["p50_ms"])
    for name, scores in result["components"].items():
        assert 0.4 <= scores["ndcg@10"] <= 1.0, name
