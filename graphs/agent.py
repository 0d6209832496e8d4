"""The agent graph for `langgraph dev` (langgraph.json names this file), built in agent_retrieval.graphs."""

from agent_retrieval.graphs.agent import graph

__all__ = ["graph"]
