"""The LangGraph graphs, shipped in the package: rag (planner -> retrieval -> answer), agent (a tool-calling
agent over the retrieval tools), codegen (retrieval-grounded SQL) and indexer (documents into the store).

Each module builds its graph at import without creating any client, model or connection: those are made per
run from the run's `Context`. `graphs/*.py` at the repository's top are the thin entry points langgraph.json
names for `langgraph dev`; an installed package serves the same graphs as `agent_retrieval.graphs.rag:graph`.
"""
