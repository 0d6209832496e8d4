"""The rag graph for `langgraph dev` (langgraph.json names this file), built in agent_retrieval.graphs."""

from agent_retrieval.graphs.rag import graph

__all__ = ["graph"]
