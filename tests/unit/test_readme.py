"""Every command the README prints works where it is printed: its Python example runs, and each shell command
is run here or by the test (or CI step) named for it, so a new command fails until one runs it."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent_retrieval import cli

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PROGRAMS = ("make", "agent-retrieval", "pip", "langgraph", "mkdocs", "jupyter")

HERE, EVAL = "tests/unit/test_readme.py", "tests/unit/test_evaluation.py"
MCP = "tests/integration/test_mcp_server.py"
# Each command, and where it runs: "ci" (a step of .ci/run), "make:<text>" (the Makefile holds the text: its
# target, or the install recipe running the same line) or a test "file::name".
RUN_BY = {
    "make demo": "tests/unit/test_local_model.py::test_the_demo_command_runs_offline",
    "agent-retrieval demo": "tests/unit/test_local_model.py::test_the_demo_command_runs_offline",
    "make lint": "ci",
    "make docs": "ci",
    "make test": "ci",
    "mkdocs serve": "ci",  # serves what `make docs` builds strictly
    "make test-unit": "make:test-unit:",
    "pip install torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu":
        "make:TORCH := torch==2.13.0\nTORCH_INDEX := https://download.pytorch.org/whl/cpu",
    'pip install -e ".[local]"': 'make:pip install --progress-bar on -e ".[local]"',
    'pip install -e ".[notebooks]"': "make:,notebooks,",
    "jupyter lab notebooks/": "pyproject.toml::--nbmake",  # the suite runs the notebooks top to bottom
    "agent-retrieval ingest docs/": f"{HERE}::test_the_readmes_ingest_and_config_commands_run",
    "agent-retrieval config --markdown": f"{HERE}::test_the_readmes_ingest_and_config_commands_run",
    "agent-retrieval eval": f"{EVAL}::test_the_cli_evaluates_a_scifact_sample_and_a_rerun_embeds_nothing",
    "agent-retrieval mcp": f"{MCP}::test_bad_arguments_get_the_langchain_tools_own_message",
    "langgraph dev": "tests/integration/test_langgraph_server.py::test_rag_answers_on_a_thread_citing_a_hit",
}  # fmt: skip


def readme_commands() -> set[str]:
    """Shell commands in the README: its bash blocks' lines (comments too: "jupyter lab notebooks/") and
    inline code that starts with a program."""
    blocks = re.findall(r"```(\w*)\n(.*?)```", README, re.S)
    candidates = [
        part.strip()
        for language, body in blocks
        if language == "bash"
        for line in body.splitlines()
        for part in re.split(r"#|\(|\)", line)
    ]
    candidates += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", README, flags=re.S))
    return {c for c in candidates if c.split(" ", 1)[0] in PROGRAMS and " " in c}


def test_every_shell_command_in_the_readme_is_run_by_something_named():
    assert readme_commands() == set(RUN_BY), "name what runs each README command in RUN_BY"
    steps = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for command, where in RUN_BY.items():
        if where == "ci":
            target = command.split()[1] if command.startswith("make ") else "docs"
            assert re.search(rf"^make {target}$", steps, re.M), command
        elif where.startswith("make:"):
            assert where.removeprefix("make:") in makefile, command
        else:
            file, name = where.split("::")
            text = (ROOT / file).read_text(encoding="utf-8")
            if file.endswith(".py"):
                tree = ast.parse(text)
                names = {
                    n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                }
                assert name in names, where
            else:
                assert name in text, where


def test_the_readmes_python_example_runs(tmp_path):
    """As a user pastes it: the tools over my_docs.db, an agent from LangChain's factory, a ToolNode."""
    [example] = re.findall(r"```python\n(.*?)```", README, re.S)
    check = "\nprint([tool.name for tool in tools], type(agent).__name__, type(tool_node).__name__)\n"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AGENT_RETRIEVAL_", "OPENAI_", "VOYAGE_"))
    }
    env["OPENAI_API_KEY"] = "sk-not-used"  # the agent's chat model is made, never called
    done = subprocess.run(
        [sys.executable, "-c", example + check], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        done.stdout.split("\n")[-2] == "['document_retriever', 'chunk_retriever'] CompiledStateGraph ToolNode"
    )


def test_the_readmes_ingest_and_config_commands_run(tmp_path, capsys):
    db = str(tmp_path / "docs.db")
    assert cli.main(["ingest", str(ROOT / "docs"), "--db", db, "--no-progress"]) == 0
    assert cli.main(["query", "how do I serve the tools over MCP", "--db", db]) == 0
    assert "mcp.md" in capsys.readouterr().out
    assert cli.main(["config", "--markdown"]) == 0
    assert capsys.readouterr().out.strip() in (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("command", sorted(c for c in RUN_BY if c.startswith("agent-retrieval ")))
def test_each_agent_retrieval_command_the_readme_names_exists(command, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([*command.split()[1:2], "--help"])
    assert done.value.code == 0
