"""What a LangGraph server or an MCP server runs: authentication, identity and the graphs' parts."""
