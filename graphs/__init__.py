"""The LangGraph entry points that langgraph.json names (Studio serves them with `langgraph dev`).

Each module builds its graph at import without creating any client, model or connection: those are made
per run from the run's `Context`. Shared logic lives in `agent_retrieval`, so each file stands alone.
"""
