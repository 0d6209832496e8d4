"""The wheel: a real `pip install` of it carries the prompts and the store's SQL inside the package and loads
them from there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_installed_wheel_loads_its_packaged_prompts(tmp_path: Path):
    dist, site = tmp_path / "dist", tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(ROOT),
        ],
        check=True,
        timeout=300,
    )
    wheel = next(dist.glob("agent_retrieval-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    prompts = sorted(p.name for p in (ROOT / "prompts").glob("*.md"))
    assert prompts and all(f"agent_retrieval/prompts/{name}" in names for name in prompts)
    assert any(n.endswith("demo/questions.json") for n in names)
    sql = sorted(p.name for p in (ROOT / "agent_retrieval" / "stores" / "sql").glob("*.sql"))
    assert sql and all(f"agent_retrieval/stores/sql/{name}" in names for name in sql)
    assert any(n.endswith("entry_points.txt") for n in names)
    assert "agent_retrieval/py.typed" in names  # type checkers read the package's own annotations

    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        timeout=300,
    )
    probe = (
        "import agent_retrieval.prompts as p\n"
        "print(p.__file__)\n"
        "print((p._SOURCE / 'hyde.md').exists())\n"
        "print(p.load_prompt('hyde') == open(p._PACKAGED / 'hyde.md', encoding='utf-8').read().strip())\n"
        "from agent_retrieval import demo; print(len(demo.questions()))\n"
        "from agent_retrieval.stores.rpc import render_sql; print('match_chunks' in render_sql('s', 8))\n"
        "from agent_retrieval.graphs import agent, codegen, indexer, rag\n"
        "print(rag.graph.name, agent.graph.name, codegen.graph.name, indexer.graph.name)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split("\n")
    assert out[0].startswith(str(site))  # the installed copy, not the source checkout
    assert out[1] == "False"  # no repository prompts/ beside it: the packaged ones were read
    assert out[2] == "True"
    assert int(out[3]) >= 8
    assert out[4] == "True"  # the SQL renders from the installed files
    assert out[5] == "rag agent codegen indexer"  # pip users have the graphs too


def test_the_public_names_are_typed_and_each_is_exported_once(tmp_path: Path):
    """A lazy __getattr__ gives a type checker Any: agent_retrieval.Retrieval(nonsense=1) type-checked."""
    import ast

    import agent_retrieval

    tree = ast.parse((ROOT / "agent_retrieval" / "__init__.py").read_text(encoding="utf-8"))
    checked = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    typed = {alias.asname: node.module for node in checked.body for alias in node.names}  # type: ignore[attr-defined]
    assert typed == agent_retrieval._EXPORTS and sorted(typed) == agent_retrieval.__all__
    for name in agent_retrieval.__all__:
        assert getattr(agent_retrieval, name).__module__.startswith("agent_retrieval")

    mypy_api = pytest.importorskip("mypy.api")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import agent_retrieval\n"
        "agent_retrieval.Retrieval(nonsense=1)\n"
        "reveal_type(agent_retrieval.Context)\n",
        encoding="utf-8",
    )
    # The project's settings and cache (`make lint` fills it): the package is read from the cache, not again.
    out, _err, status = mypy_api.run(["--cache-dir", str(ROOT / ".mypy_cache"), str(probe)])
    assert status == 1 and 'Unexpected keyword argument "nonsense"' in out, out
    assert 'Revealed type is "def (*' in out and "agent_retrieval.context.Context" in out, out


def test_contributings_map_names_every_module():
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w/]+(?:\.py)?/?)`", text.split("## Where things live")[1].split("\n## ")[0]))
    modules = {p.name for p in (ROOT / "agent_retrieval").glob("*.py")} - {"__init__.py"}
    assert modules <= named, sorted(modules - named)
