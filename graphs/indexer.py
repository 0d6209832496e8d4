"""The indexer graph for `langgraph dev` (langgraph.json names this file), built in agent_retrieval.graphs."""

from agent_retrieval.graphs.indexer import graph

__all__ = ["graph"]
