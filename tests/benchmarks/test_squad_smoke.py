"""benchmarks/squad.py: the smoke run end to end (real tools, embedded store, local embedder), and the checks
the figures rest on (the paragraph -> chunk mapping, the seeded sample, the dataset's errors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_retrieval.ingest import chunk_document
from agent_retrieval.stores import SQLiteStore
from tests.benchmarks import load_script

squad = load_script("squad")


def _articles() -> list:
    long = "A paragraph long enough to be split when chunks are small. " * 6
    return [
        squad.Article("First_one", "First one", ["Alpha paragraph one.", long.strip(), "Alpha three."]),
        squad.Article("Second", "Second", ["Beta paragraph one.", "Beta paragraph two."]),
    ]


def _store(
    tmp_path: Path, articles: list, chunk_size: int = squad.CHUNK_SIZE, headings: bool = True
) -> SQLiteStore:
    """A real store, the articles chunked as the benchmark does (no vectors: the check reads text only)."""
    store = SQLiteStore(tmp_path / "mapping.db")
    for article in articles:
        document = squad.article_document(article)
        if not headings:
            document.content = "\n\n".join(article.paragraphs)
        store.upsert([document], chunk_document(document, chunk_size, 0), "test/none")
    return store


def test_the_mapping_check_passes_when_each_paragraph_is_one_chunk(tmp_path):
    articles = _articles()
    with _store(tmp_path, articles) as store:
        chunk_ids = squad.verify_mapping(store, articles)
    assert len(chunk_ids) == 5 and len(set(chunk_ids.values())) == 5
    assert chunk_ids["First_one", 1].startswith("First_one#")


@pytest.mark.parametrize(
    ("chunk_size", "headings", "problem"),
    [
        (100, True, "3 paragraphs became 4 chunks"),  # a paragraph split in two
        (
            squad.CHUNK_SIZE,
            False,
            "3 paragraphs became 1 chunks",
        ),  # without headings, paragraphs are packed together
    ],
)
def test_the_mapping_check_fails_loudly_when_paragraphs_are_split_or_merged(
    tmp_path, chunk_size, headings, problem
):
    articles = _articles()
    with (
        _store(tmp_path, articles, chunk_size, headings) as store,
        pytest.raises(squad.MappingError) as error,
    ):
        squad.verify_mapping(store, articles)
    assert problem in str(error.value)


def test_the_mapping_check_fails_when_the_store_holds_other_documents(tmp_path):
    articles = _articles()
    with _store(tmp_path, articles) as store, pytest.raises(squad.MappingError, match="expected 1 and 3"):
        squad.verify_mapping(store, articles[:1])


def test_paragraphs_are_kept_in_the_form_the_chunker_stores():
    assert (
        squad.paragraph_text(" model\u2014\u200b\u200bmany\n leaders  9\u00b0E\ufeff / x \u200e y ")
        == "model\u2014many leaders 9\u00b0E / x y"
    )


def test_the_sample_is_seeded_and_checked():
    pool = [squad.Question(str(i), f"q{i}", "a", 0) for i in range(100)]
    first = squad.sample_questions(pool, 10, seed=0)
    assert first == squad.sample_questions(pool, 10, seed=0) != squad.sample_questions(pool, 10, seed=1)
    assert len({q.id for q in first}) == 10
    with pytest.raises(squad.BenchmarkError, match="between 1 and 100"):
        squad.sample_questions(pool, 101, seed=0)


def test_a_missing_or_malformed_dataset_says_what_to_do(tmp_path):
    with pytest.raises(squad.BenchmarkError, match="SQUAD_DIR"):
        squad.load_squad(tmp_path)
    (tmp_path / squad.DATA_FILE).write_text(json.dumps({"version": "1.1", "data": [{"title": "T"}]}))
    with pytest.raises(squad.BenchmarkError, match="article 0 is not shaped like SQuAD"):
        squad.load_squad(tmp_path)


@pytest.mark.slow
def test_the_smoke_run_measures_both_tools_and_a_rerun_embeds_nothing(tmp_path, capsys):
    folder = squad.dataset_folder()
    if not (folder / squad.DATA_FILE).is_file():
        pytest.skip(f"SQuAD v1.1 dev is not at {folder} (set SQUAD_DIR)")
    results = squad.main(["--smoke", "--results", str(tmp_path)])

    assert json.loads((tmp_path / "squad-smoke.json").read_text()) == json.loads(json.dumps(results))
    assert "document_retriever" in capsys.readouterr().out
    assert results["mapping"]["verified"] and results["data"]["articles"] == squad.SMOKE_ARTICLES
    assert results["data"]["paragraphs"] == results["data"]["chunks"] == results["ingest"]["chunks"] > 0
    assert results["sample"]["questions"] == len(results["per_question"]) == squad.SMOKE_QUESTIONS

    quality = results["quality"]
    for figures in quality.values():
        recalls = [figures[f"recall@{k}"] for k in squad.KS]
        assert all(0.0 <= value <= 1.0 for value in [*recalls, figures["mrr@10"]])
        assert recalls == sorted(recalls) and recalls[0] <= figures["mrr@10"] <= recalls[-1]
    assert (
        quality["chunks"]["recall@10"] >= 0.6
    )  # the right paragraph is usually found: a broken mapping finds none
    for n in squad.SCOPES:
        scoped = quality[f"chunks_top{n}"]
        # A paragraph is findable only inside its article: the scoped search is bounded by document recall@n.
        assert all(scoped[f"recall@{k}"] <= quality["documents"][f"recall@{n}"] for k in squad.KS)
        missed = [q for q in results["per_question"] if (q["ranks"]["documents"] or n + 1) > n]
        assert scoped["scope_missed"] == len(missed)
        assert scoped["scope_missed_rate"] == pytest.approx(1 - quality["documents"][f"recall@{n}"])
        assert all(q["ranks"][f"chunks_top{n}"] is None for q in missed)
    for timing in results["latency_ms"].values():
        assert 0 < timing["p50"] <= timing["p95"] and timing["calls"] == squad.SMOKE_QUESTIONS

    again = squad.main(["--smoke", "--results", str(tmp_path)])
    assert again["ingest"]["embedded"] == 0 and again["ingest"]["unchanged"] == squad.SMOKE_ARTICLES
    assert again["per_question"] == results["per_question"] and again["quality"] == results["quality"]


def test_a_question_count_out_of_range_is_refused_before_anything_is_embedded(tmp_path):
    article = {"title": "T", "paragraphs": [{"context": "Text.", "qas": [{"id": "q1", "question": "What?"}]}]}
    (tmp_path / squad.DATA_FILE).write_text(json.dumps({"version": "1.1", "data": [article]}))
    for count in ("0", "2"):
        with pytest.raises(squad.BenchmarkError, match=f"between 1 and 1 \\(got {count}\\)"):
            squad.main(["--questions", count, "--dataset", str(tmp_path), "--results", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
