"""Evaluation: metrics checked against trec_eval (pytrec_eval), BEIR folders read strictly, resumable runs."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import pytrec_eval

from agent_retrieval import demo, evaluation, hyde
from agent_retrieval.cli import main
from agent_retrieval.context import Context
from agent_retrieval.core.prompts import prompt_files
from agent_retrieval.errors import InvalidRequest
from agent_retrieval.evaluation import (
    DEPTH,
    MODE_DEPTH,
    DatasetError,
    all_gold,
    available_modes,
    evaluate,
    load_beir,
    mrr,
    ndcg,
    read_run,
    recall,
    score_run,
)
from agent_retrieval.ingest import ingest
from agent_retrieval.ingest.loaders import load_documents
from agent_retrieval.models import Document
from agent_retrieval.search.retrieval import Retrieval
from tests.beir import write_beir
from tests.conftest import CountingChatModel

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "scifact"


# --- metrics ------------------------------------------------------------------------------------


def test_metrics_match_trec_eval_on_random_runs():
    rng = random.Random(5)
    docs = [f"d{n}" for n in range(300)]
    qrels = {
        f"q{n}": {d: rng.choice([0, 1, 1, 2]) for d in rng.sample(docs, rng.randint(1, 8))} for n in range(40)
    }
    qrels = {q: g for q, g in qrels.items() if any(v > 0 for v in g.values())}
    run = {q: rng.sample(docs, 150) for q in qrels}
    ours = score_run(run, qrels)
    scored = {q: {d: 1000.0 - rank for rank, d in enumerate(ranked)} for q, ranked in run.items()}
    measures = {"ndcg_cut.10", "recall.2", "recall.5", "recall.10", "recall.100"}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(scored)
    top10 = {q: {d: s for d, s in ranked.items() if s > 990} for q, ranked in scored.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)  # MRR@10: a run cut at 10
    mean = lambda table, key: sum(row[key] for row in table.values()) / len(table)  # noqa: E731
    assert ours["ndcg@10"] == pytest.approx(mean(theirs, "ndcg_cut_10"), abs=1e-4)
    for k in (2, 5, 10):  # multi-hop papers report Recall@2 and @5
        assert ours[f"recall@{k}"] == pytest.approx(mean(theirs, f"recall_{k}"), abs=1e-4)
    assert ours["recall@100"] == pytest.approx(mean(theirs, "recall_100"), abs=1e-4)
    assert ours["mrr@10"] == pytest.approx(mean(rr, "recip_rank"), abs=1e-4)
    assert 0 < ours["ndcg@10"] < 1


def test_metrics_on_a_hand_worked_case():
    grades = {"a": 2, "b": 1, "z": 0}
    assert ndcg(["a", "b"], grades) == 1.0 and ndcg(["x", "y"], grades) == 0.0
    assert ndcg(["b", "a"], grades) == pytest.approx((1 + 2 / 1.5849625) / (2 + 1 / 1.5849625))
    assert recall(["x", "a"], grades, 10) == 0.5 and recall(["x", "a"], grades, 1) == 0.0
    assert mrr(["z", "x", "b"], grades) == pytest.approx(1 / 3)


def test_all_gold_counts_a_query_only_when_every_relevant_document_is_in_the_top_k():
    grades = {"a": 1, "b": 2, "z": 0}
    assert all_gold(["a", "x", "b"], grades, 3) == 1.0 and all_gold(["a", "x", "b"], grades, 2) == 0.0
    qrels = {"two": grades, "one": {"a": 1}, "three": {"a": 1, "b": 1, "c": 1}}
    run = {"two": ["b", "a"], "one": ["a"], "three": ["a", "b", "x", "y", "z", "c"]}
    scores = score_run(run, qrels)
    # over "two" and "three" only: "two" has both in its top 5; "three" needs its top 6 for "c"
    assert scores["all-gold@5"] == 0.5 and scores["all-gold@10"] == 1.0
    assert "all-gold@5" not in score_run({"one": ["a"]}, {"one": {"a": 1}})  # no query with two


# --- reading BEIR folders -----------------------------------------------------------------------


def demo_beir(folder: Path) -> Path:
    """The demo corpus and questions as a BEIR folder."""
    corpus = [{"_id": d.id, "title": d.title, "text": d.content} for d in load_documents([demo.corpus_dir()])]
    questions = demo.questions()
    queries = [{"_id": f"q{n}", "text": item["question"]} for n, item in enumerate(questions)]
    qrels = [f"q{n}\t{item['expected_document']}\t1" for n, item in enumerate(questions)]
    return write_beir(folder, corpus, queries, qrels)


def test_a_missing_file_is_named(tmp_path):
    (tmp_path / "corpus.jsonl").write_text("")
    with pytest.raises(DatasetError, match=r"missing queries.jsonl, qrels/test.tsv"):
        load_beir(tmp_path)


def test_a_malformed_line_is_named_by_file_and_line(tmp_path):
    write_beir(tmp_path, [{"_id": "d1", "text": "x"}], [{"_id": "q1", "text": "x"}], ["q1\td1\t1"])
    with (tmp_path / "queries.jsonl").open("a") as queries:
        queries.write('{"_id": "q2", "text": \n')
    with pytest.raises(DatasetError, match=r"queries.jsonl:2: not valid JSON"):
        load_beir(tmp_path)
    write_beir(tmp_path, [{"_id": "d1", "text": "x"}], [{"_id": "q1", "text": "x"}], ["q1\td1\tmany"])
    with pytest.raises(DatasetError, match=r"test.tsv:2: expected 'query-id<TAB>corpus-id<TAB>score'"):
        load_beir(tmp_path)


def test_unknown_documents_and_empty_queries_are_counted_skips(tmp_path):
    write_beir(
        tmp_path,
        [{"_id": "d1", "text": "x"}, {"_id": "d2", "text": "y"}],
        [{"_id": "q1", "text": "find x"}, {"_id": "q2", "text": "  "}],
        ["q1\td1\t1", "q1\tghost\t1", "q2\td2\t1", "q9\td1\t1"],
    )
    dataset = load_beir(tmp_path)
    assert dataset.queries == {"q1": "find x"} and dataset.qrels == {"q1": {"d1": 1}}
    assert len(dataset.skipped) == 4
    assert any("test.tsv:3: document 'ghost'" in s for s in dataset.skipped)
    assert any("queries.jsonl:2: empty query 'q2'" in s for s in dataset.skipped)


def test_a_folder_without_usable_judgements_is_refused(tmp_path):
    write_beir(tmp_path, [{"_id": "d1", "text": "x"}], [{"_id": "q1", "text": "x"}], ["q1\td1\t0"])
    with pytest.raises(DatasetError, match="no query has a relevant document"):
        load_beir(tmp_path)


def test_a_smaller_corpus_keeps_every_judged_document(tmp_path):
    dataset = load_beir(demo_beir(tmp_path), limit=2, max_documents=4)
    kept = {d.id for d in dataset.documents()}
    assert len(kept) == dataset.corpus_size == 4
    assert {doc for grades in dataset.qrels.values() for doc in grades} <= kept


# --- running ------------------------------------------------------------------------------------


@pytest.fixture
def beir_store(tmp_path, embedder):
    dataset = load_beir(demo_beir(tmp_path / "demo"))
    context = Context(db_path=str(tmp_path / "eval.db"))
    with Retrieval(context, embedder=embedder) as retrieval:
        ingest(dataset.documents(), retrieval.store, embedder, context, progress=False)
        yield dataset, retrieval


def test_every_mode_is_run_written_as_trec_and_scored(beir_store, tmp_path):
    dataset, retrieval = beir_store
    report = evaluate(dataset, retrieval, tmp_path / "out", progress=False)
    assert list(report.scores) == [
        "keyword",
        "vector",
        "hybrid-rrf",
        "hybrid-convex",
        "plan",
    ]  # no chat model: no HyDE (the plan is the heuristic one)
    for mode, path in report.runs.items():
        lines = Path(path).read_text().splitlines()
        _qid, q0, _doc, rank, score, tag = lines[0].split()
        assert (q0, rank, tag) == ("Q0", "1", mode) and float(score) > 0
        assert report.scores[mode] == score_run(read_run(path), dataset.qrels, MODE_DEPTH.get(mode, DEPTH))
    assert report.scores["keyword"]["recall@100"] == 1.0  # every expected document is found somewhere
    assert report.scores["hybrid-rrf"]["ndcg@10"] > 0.5
    assert report.scores["plan"]["recall@10"] > 0.5  # the rag graph's searches, fused, find them too
    assert "hybrid-convex" in report.table() and report.to_dict()["queries"] == len(dataset.queries)


def test_a_metric_deeper_than_a_mode_ranks_is_not_reported_and_plans_level_is_said(beir_store, tmp_path):
    dataset, retrieval = beir_store
    report = evaluate(dataset, retrieval, tmp_path / "out", modes=["keyword", "plan"], progress=False)
    assert "recall@100" in report.scores["keyword"] and "recall@100" not in report.scores["plan"]
    table = report.table().splitlines()
    column = next(line for line in table if line.startswith("mode ")).split().index("recall@100")
    assert next(line for line in table if line.startswith("plan ")).split()[column] == "-"
    assert any("plan ranks passages at either level" in note for note in report.notes)
    assert "recall@k: the mean share of a query's relevant documents in its top k" in report.table()


def test_runs_made_under_other_settings_are_not_reported_as_new(beir_store, tmp_path, embeddings):
    """A rerun into the same folder with vector_weight 0.9 printed the earlier score beside the new one."""
    dataset, retrieval = beir_store
    first = evaluate(dataset, retrieval, tmp_path / "out", modes=["hybrid-convex"], progress=False)
    assert first.notes == []
    calls = embeddings.query_calls
    hyde.clear_cache()
    heavier = Retrieval(
        retrieval.context.replace(vector_weight=0.9), store=retrieval.store, embedder=retrieval.embedder
    )
    again = evaluate(dataset, heavier, tmp_path / "out", modes=["hybrid-convex"], progress=False)
    assert embeddings.query_calls == calls + len(dataset.queries)  # every query ran again
    assert any("vector_weight: 0.45 -> 0.9" in note for note in again.notes)
    fresh = evaluate(dataset, heavier, tmp_path / "fresh", modes=["hybrid-convex"], progress=False)
    assert again.scores == fresh.scores


def test_runs_made_by_other_code_of_the_same_version_are_not_reused(beir_store, tmp_path, monkeypatch):
    """A checkout changed since the runs were made (the version unchanged) printed the old code's score."""
    dataset, retrieval = beir_store
    evaluate(dataset, retrieval, tmp_path / "out", modes=["keyword"], progress=False)
    monkeypatch.setattr(evaluation, "_code_digest", lambda: "changed")
    again = evaluate(dataset, retrieval, tmp_path / "out", modes=["keyword"], progress=False)
    assert any(re.search(r"code: '\w+' -> 'changed'", note) for note in again.notes)


def test_the_code_digest_covers_the_package_and_its_prompts():
    before = evaluation._code_digest()
    assert re.fullmatch(r"[0-9a-f]{16}", before) and evaluation._code_digest() == before
    assert {p.name for p in prompt_files()} >= {"planner.md", "answer.md"}


def test_a_store_holding_documents_outside_the_corpus_is_refused(beir_store, tmp_path, embedder):
    dataset, retrieval = beir_store
    extra = Document(id="stray", title="Stray", content="A document the dataset does not hold.")
    ingest([extra], retrieval.store, embedder, retrieval.context, progress=False)
    with pytest.raises(InvalidRequest, match=f"holds {dataset.corpus_size + 1:,} documents and the corpus"):
        evaluate(dataset, retrieval, tmp_path / "out", modes=["keyword"], progress=False)


def test_a_rerun_resumes_and_runs_only_what_is_missing(beir_store, tmp_path, embeddings):
    dataset, retrieval = beir_store
    first = evaluate(dataset, retrieval, tmp_path / "out", modes=["keyword", "vector"], progress=False)
    calls = embeddings.query_calls
    again = evaluate(dataset, retrieval, tmp_path / "out", modes=["keyword", "vector"], progress=False)
    assert embeddings.query_calls == calls and again.scores == first.scores
    run = Path(first.runs["vector"])
    kept = [line for line in run.read_text().splitlines() if not line.startswith("q7 ")]
    run.write_text("\n".join(kept) + "\n")  # as if interrupted before the last query
    hyde.clear_cache()  # no cached query vector to hide the rerun
    resumed = evaluate(dataset, retrieval, tmp_path / "out", modes=["keyword", "vector"], progress=False)
    assert embeddings.query_calls == calls + 1 and resumed.scores == first.scores
    assert sum(
        line.startswith("q7 ") for line in Path(first.runs["keyword"]).read_text().splitlines()
    ) == len(read_run(first.runs["keyword"])["q7"])  # the complete run was not appended to again


def test_hyde_mode_runs_with_a_chat_model_and_is_refused_without(beir_store, tmp_path, embedder):
    dataset, retrieval = beir_store
    with pytest.raises(ValueError, match="unknown mode"):
        evaluate(dataset, retrieval, tmp_path / "x", modes=["bm25"], progress=False)
    with pytest.raises(ValueError, match="needs a chat model"):
        evaluate(dataset, retrieval, tmp_path / "x", modes=["hyde+hybrid"], progress=False)
    chat = CountingChatModel(responses=["A passage about deposits.\n\nAnother about fees."])
    context = Context(db_path=retrieval.context.store.db_path, openai_base_url="http://127.0.0.1:9/v1")
    with Retrieval(context, store=retrieval.store, embedder=embedder, llm=chat) as with_llm:
        # the plan mode would plan with the chat model too: left out, so the calls counted are HyDE's
        report = evaluate(dataset, with_llm, tmp_path / "hyde", modes=["hyde+hybrid"], progress=False)
    assert "hyde+hybrid" in report.scores and "hyde+hybrid" in available_modes(context)
    long_questions = [q for q in dataset.queries.values() if len(q.split()) > context.hyde_skip_max_words]
    assert chat.calls == len(long_questions)


@pytest.mark.slow
@pytest.mark.skipif(not SCIFACT.is_dir(), reason="the shared SciFact dataset is not beside the repository")
def test_the_cli_evaluates_a_scifact_sample_and_a_rerun_embeds_nothing(tmp_path, capsys):
    args = [
        "eval",
        str(SCIFACT),
        "--limit",
        "10",
        "--max-documents",
        "60",
        "--out",
        str(tmp_path),
        "--no-progress",
        "--modes",
        "keyword,vector,hybrid-rrf",
    ]
    assert main(args) == 0
    first = capsys.readouterr()
    assert "60 documents: 60 written" in first.err and "hybrid-rrf" in first.out
    assert main([*args, "--json"]) == 0
    again = capsys.readouterr()
    assert "0 texts embedded" in again.err and "60 unchanged" in again.err
    report = json.loads(again.out)
    assert report["queries"] == 10 and 0 < report["scores"]["hybrid-rrf"]["ndcg@10"] <= 1
    assert (tmp_path / "scifact-60-test-chunks" / "report.json").is_file()


def test_scores_are_reported_per_query_type_and_each_relevant_documents_rank_and_finder_per_query(
    tmp_path, embedder
):
    folder = demo_beir(tmp_path / "demo")
    queries = [json.loads(line)["_id"] for line in (folder / "queries.jsonl").read_text().splitlines()]
    kinds = {qid: "first half" if n < len(queries) // 2 else "second half" for n, qid in enumerate(queries)}
    (folder / "query_types.tsv").write_text(
        "query-id\ttype\n" + "".join(f"{q}\t{k}\n" for q, k in kinds.items()) + "unknown-query\tx\n"
    )
    dataset = load_beir(folder)
    assert dataset.types == kinds and any("unknown-query" in skip for skip in dataset.skipped)
    context = Context(db_path=str(tmp_path / "eval.db"))
    with Retrieval(context, embedder=embedder) as retrieval:
        ingest(dataset.documents(), retrieval.store, embedder, context, progress=False)
        report = evaluate(dataset, retrieval, tmp_path / "out", modes=["hybrid-rrf", "plan"], progress=False)
    run = read_run(report.runs["hybrid-rrf"])
    for kind in ("first half", "second half"):
        judged = {q: g for q, g in dataset.qrels.items() if kinds[q] == kind}
        assert report.by_type[kind]["hybrid-rrf"] == score_run(run, judged)
        assert report.type_counts[kind] == len(judged) and f"{kind} ({len(judged)} queries)" in report.table()
    per_query = json.loads((tmp_path / "out" / "per_query.json").read_text())
    assert set(per_query) == set(dataset.qrels)
    for qid, grades in dataset.qrels.items():
        entry = per_query[qid]
        assert entry["type"] == kinds[qid] and entry["query"] == dataset.queries[qid]
        for doc in (d for d, g in grades.items() if g > 0):
            found = entry["modes"]["hybrid-rrf"][doc]
            assert found["rank"] == (run[qid].index(doc) + 1 if doc in run[qid] else None)
            if found["rank"] is not None:  # which side found it, at which rank
                assert found["found_by"] and all(
                    side.split(" #")[0] in ("vector", "keyword") for side in found["found_by"]
                )
            plan = entry["modes"]["plan"][doc]
            if plan["rank"] is not None:  # the plan's searches that found it, by their text
                assert plan["found_by"] and all(isinstance(q, str) for q in plan["found_by"])


def test_a_malformed_query_types_line_is_named(tmp_path):
    folder = demo_beir(tmp_path / "demo")
    (folder / "query_types.tsv").write_text("q0\tcomparison\nq1 has no tab\n")
    with pytest.raises(DatasetError, match=r"query_types.tsv:2: expected 'query-id<TAB>type'"):
        load_beir(folder)
