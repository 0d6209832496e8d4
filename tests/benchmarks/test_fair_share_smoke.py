"""benchmarks/fair_share.py end to end, small: two short writes by one tenant and another tenant's question
through a real `langgraph dev` with two run slots and the local embedder."""

from __future__ import annotations

import pytest

from tests.benchmarks import load_script


@pytest.mark.slow
def test_the_fair_share_benchmark_runs_and_reports_each_write():
    result = load_script("fair_share").measure(jobs=2, writes=2, characters=20_000)
    assert result["jobs"] == 2 and result["question_seconds"] > 0
    assert len(result["writes"]) == 2
    assert not [w["failed"] for w in result["writes"] if "failed" in w]  # each run ended, written or refused
    assert all(w["written"] == 1 or w["errors"] for w in result["writes"])
