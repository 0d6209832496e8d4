"""The entry points langgraph.json names; the graphs ship in the package (agent_retrieval.graphs)."""
