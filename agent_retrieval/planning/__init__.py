"""Query plans: what a plan is (schema), making one (planners: the chat model, or heuristics offline),
running it (execution: hops, reading on, fusion across queries), where reading on goes (links), and the
answer written from what was found (answer).
"""

from agent_retrieval.planning.execution import READING_ON, PlanRun, Search, resolve_placeholder, run_plan
from agent_retrieval.planning.heuristic import heuristic_plan, to_statement
from agent_retrieval.planning.planners import Planned, make_plan, parse_plan, simple_plan
from agent_retrieval.planning.schema import (
    PLACEHOLDER,
    Facets,
    PlannedQuery,
    QueryPlan,
    SearchStrategy,
    check_request,
)

__all__ = [
    "PLACEHOLDER",
    "READING_ON",
    "Facets",
    "PlanRun",
    "Planned",
    "PlannedQuery",
    "QueryPlan",
    "Search",
    "SearchStrategy",
    "check_request",
    "heuristic_plan",
    "make_plan",
    "parse_plan",
    "resolve_placeholder",
    "run_plan",
    "simple_plan",
    "to_statement",
]
