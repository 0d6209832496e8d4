"""Fusion as pure functions: reciprocal rank, convex, entity terms and boost."""

from __future__ import annotations

import pytest

from agent_retrieval.core.fusion import (
    FULL_KEYWORD_COVERAGE,
    MANY_WORDS,
    PROFILES,
    convex,
    fuse,
    keyword_trust,
    rrf,
    zscores,
)
from agent_retrieval.core.text import entity_matches, entity_terms
from agent_retrieval.models import Hit


def hit(id_: str, content: str = "", tenant: str = "", **scores: float) -> Hit:
    return Hit(
        id=id_,
        level="chunks",
        document_id=id_.split("#")[0],
        title=id_,
        content=content,
        tenant=tenant,
        **scores,
    )


def test_rrf_sums_weighted_reciprocal_ranks():
    fused = rrf({"vector": ["a", "b"], "keyword": ["b", "c"]}, {"vector": 1.0, "keyword": 2.0}, k=10)
    assert fused["a"] == pytest.approx(1 / 11)
    assert fused["b"] == pytest.approx(1 / 12 + 2 / 11)
    assert fused["c"] == pytest.approx(2 / 12)


def test_standard_scores_and_convex():
    assert zscores({"a": 2.0, "b": 4.0, "c": 3.0}) == pytest.approx(
        {"a": -1.2247449, "b": 1.2247449, "c": 0.0}
    )
    assert zscores({"a": 5.0}) == {"a": 1.0} and zscores({}) == {}
    fused = convex(
        {"vector": {"a": 0.9, "b": 0.1}, "keyword": {"b": 10.0, "c": 5.0}}, {"vector": 3, "keyword": 1}
    )
    # vector: a +1, b -1, c missing -> the lowest, -1; keyword: b +1, c -1, a missing -> -1
    assert fused == pytest.approx({"a": 0.5, "b": -0.5, "c": -1.0})
    lone = convex({"vector": {"a": 0.3}, "keyword": {"b": 2.0}}, {"vector": 1, "keyword": 2})
    assert lone == pytest.approx({"a": 1 / 3, "b": 2 / 3})  # a one-item list says only "present"


def test_fuse_keeps_both_paths_ranks_and_orders_by_score():
    vector = [hit("a", vector_similarity=0.9), hit("b", vector_similarity=0.5)]
    keyword = [hit("b", keyword_score=7.0), hit("c", keyword_score=3.0)]
    fused = fuse(vector, keyword)
    assert [h.id for h in fused] == ["b", "a", "c"]
    b = fused[0]
    assert (b.vector_rank, b.keyword_rank, b.keyword_score, b.vector_similarity) == (2, 1, 7.0, 0.5)
    assert (
        b.found_by == ["vector", "keyword"]
        and fused[1].found_by == ["vector"]
        and fused[2].found_by == ["keyword"]
    )
    assert fused[0].score > fused[1].score > fused[2].score


@pytest.mark.parametrize("mode", ["rrf", "convex"])
def test_a_limit_returns_the_best_hits_as_fusing_everything_would(mode):
    vector = [hit(f"v{n}", vector_similarity=1 - n / 50) for n in range(40)]
    keyword = [hit(f"v{n}", keyword_score=40.0 - n) for n in range(0, 40, 3)]
    keyword += [hit(f"k{n}", keyword_score=20.0 - n, keyword_coverage=0.5) for n in range(15)]
    everything = fuse(vector, keyword, mode=mode)
    assert len(everything) == 55
    assert fuse(vector, keyword, mode=mode, limit=10) == everything[:10]


def test_weights_move_the_order():
    vector, keyword = [hit("v")], [hit("k")]
    assert fuse(vector, keyword, vector_weight=2, keyword_weight=1)[0].id == "v"
    assert fuse(vector, keyword, vector_weight=1, keyword_weight=2)[0].id == "k"
    assert fuse(vector, keyword, mode="convex", vector_weight=1, keyword_weight=3)[0].id == "k"


def test_the_keyword_side_counts_by_how_much_of_the_query_its_best_hit_holds():
    full = FULL_KEYWORD_COVERAGE["chunks"]
    assert keyword_trust([]) == keyword_trust([hit("k", keyword_score=3.0)]) == 1.0  # unknown: full weight
    assert (
        keyword_trust([hit("k", keyword_coverage=full)]) == keyword_trust([hit("k", keyword_coverage=1)]) == 1
    )
    assert keyword_trust([hit("k", keyword_coverage=full / 2)]) == pytest.approx(0.25)
    whole = Hit(id="d", level="documents", document_id="d", title="", content="", keyword_coverage=0.1)
    assert keyword_trust([whole]) == 1.0  # documents keep the keyword side's full weight
    # A paraphrased question: the keyword side's best hit shares one word of five with it and outranks the
    # vector side's clear best; weighed by its trust, the keyword side no longer decides the order.
    vector = [hit("answer", vector_similarity=0.47), hit("noise", vector_similarity=0.17)]
    vector += [hit(f"v{n}", vector_similarity=0.2) for n in range(4)]
    keyword = [hit("noise", keyword_score=4.9), hit("answer", keyword_score=1.5)]
    keyword += [hit(f"k{n}", keyword_score=1.0) for n in range(4)]
    assert fuse(vector, keyword, mode="convex", vector_weight=0.45, keyword_weight=0.55)[0].id == "noise"
    keyword[0] = hit("noise", keyword_score=4.9, keyword_coverage=0.2)
    for mode in ("convex", "rrf"):
        fused = fuse(vector, keyword, mode=mode, vector_weight=0.45, keyword_weight=0.55)
        assert fused[0].id == "answer"
    assert next(h for h in fused if h.id == "noise").keyword_coverage == 0.2  # carried into the fused hit


def test_a_long_questions_keyword_passage_standing_out_of_its_list_keeps_full_weight():
    # A question of several relations: its best keyword passage holds the rare name the question hinges on,
    # little else of it, and scores far above the rest of the list; chance matches of common words do not.
    low = FULL_KEYWORD_COVERAGE["chunks"] / 4
    rest = [hit(f"k{n}", keyword_score=1.0 + n / 100) for n in range(20)]
    standing_out = [hit("name", keyword_score=9.0, keyword_coverage=low), *rest]
    flat = [hit("common", keyword_score=1.3, keyword_coverage=low), *rest]
    assert keyword_trust(standing_out, query_words=MANY_WORDS) == 1.0
    assert keyword_trust(flat, query_words=MANY_WORDS) == pytest.approx(1 / 16)
    # a short question's best passage is still weighed by how much of it it holds
    assert keyword_trust(standing_out, query_words=MANY_WORDS - 1) == pytest.approx(1 / 16)
    assert keyword_trust(standing_out[:4], query_words=MANY_WORDS) == pytest.approx(1 / 16)  # too few to tell


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="rrf or convex"):
        fuse([], [], mode="max")


def test_entity_terms_find_names_quotes_and_numbers():
    terms = entity_terms(
        'What was the deposit at 14 Banda Lane paid to Halden & Rowe Estates in 2023 for "Form D7"?'
    )
    assert "Banda Lane" in terms and "Halden & Rowe Estates" in terms
    assert "14" in terms and "2023" in terms and "Form D7" in terms
    assert "What" not in terms
    assert entity_terms("how do refunds work") == []


def test_entity_boost_lifts_hits_that_contain_the_names():
    plain, named = hit("plain", "a deposit was paid"), hit("named", "the deposit at 14 Banda Lane was paid")
    unboosted = fuse([plain, named], [])
    assert unboosted[0].id == "plain"
    boosted = fuse([plain, named], [], entities=["Banda Lane", "14"], boost=0.15)
    assert boosted[0].id == "named"
    assert entity_matches("At 14  BANDA lane", ["Banda Lane", "14", "Rowe"]) == 2


def test_profiles_lean_the_way_their_names_say():
    assert PROFILES["exact"].keyword_weight > PROFILES["exact"].vector_weight
    assert PROFILES["conceptual"].vector_weight > PROFILES["conceptual"].keyword_weight
    assert (
        PROFILES["exact"].min_similarity
        > PROFILES["general"].min_similarity
        > PROFILES["conceptual"].min_similarity
    )


def test_the_sql_hybrid_functions_default_to_the_tools_fusion():
    from agent_retrieval.context import SETTINGS
    from agent_retrieval.stores.rpc import render_sql

    defaults = {name: f.default for name, f in SETTINGS.items()}
    sql = render_sql()
    for level in ("documents", "chunks"):
        header = sql[sql.index(f"function agent_retrieval.hybrid_search_{level}(") :][:900]
        assert f"fusion text default '{defaults['fusion']}'" in header
        assert f"vector_weight float8 default {defaults['vector_weight']}" in header
        assert f"keyword_weight float8 default {defaults['keyword_weight']}" in header
        assert f"candidates int default {defaults['candidates']}" in header


def test_the_same_id_of_two_tenants_stays_two_hits_each_with_its_own_scores():
    # one tenant's private "handbook" and another's public one: merging by id lost one of them
    vector = [
        hit("handbook", vector_similarity=0.9, tenant="acme"),
        hit("handbook", vector_similarity=0.4, tenant="press"),
    ]
    keyword = [
        hit("handbook", keyword_score=8.0, tenant="press"),
        hit("handbook", keyword_score=2.0, tenant="acme"),
    ]
    for mode in ("rrf", "convex"):
        fused = {h.tenant: h for h in fuse(vector, keyword, mode=mode)}
        assert sorted(fused) == ["acme", "press"]
        assert (fused["acme"].vector_similarity, fused["acme"].keyword_score) == (0.9, 2.0)
        assert (fused["press"].vector_similarity, fused["press"].keyword_score) == (0.4, 8.0)
        assert (fused["acme"].vector_rank, fused["acme"].keyword_rank) == (1, 2)
