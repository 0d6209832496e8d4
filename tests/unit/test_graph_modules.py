"""What every graph in langgraph.json promises the LangGraph server: it imports without building anything,
and its async nodes never block the event loop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from blockbuster import blockbuster_ctx

from agent_retrieval.context import Context
from agent_retrieval.graphs import agent, rag
from agent_retrieval.server.graph_parts import GraphParts

REPO = Path(__file__).resolve().parents[2]
GRAPHS = json.loads((REPO / "langgraph.json").read_text())["graphs"]


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_importing_a_graph_file_creates_no_client_model_or_store(name, tmp_path):
    path, attribute = GRAPHS[name].split(":")
    script = (
        "import importlib.util, sys\n"
        # as the server loads it
        "spec = importlib.util.spec_from_file_location('graph_module', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec); sys.modules['graph_module'] = module\n"
        "spec.loader.exec_module(module)\n"
        "heavy = {'sentence_transformers', 'torch', 'openai', 'voyageai', 'supabase', 'psycopg'}\n"
        f"print(module.{attribute}.name, sorted(heavy & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(REPO / path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(maxsplit=1) == [name, "[]\n"]
    assert list(tmp_path.iterdir()) == []  # no store file was created


@pytest.mark.parametrize("module", [rag, agent])
async def test_offline_runs_never_block_the_event_loop(module, retrieval):
    question = "How long does the landlord have to protect the deposit?"
    with blockbuster_ctx():  # raises on any blocking call (file, socket, SQLite) made on the event loop
        out = await module.build(GraphParts(retrieval=retrieval)).ainvoke(
            {"messages": [("user", question)]}, context=Context(db_path=retrieval.context.store.db_path)
        )
    assert "[" in out["messages"][-1].content  # it got as far as a cited answer
