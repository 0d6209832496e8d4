"""The wheel: a real `pip install` of it carries the prompts and the store's SQL inside the package and loads
them from there."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

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
        "import agent_retrieval.core.prompts as p\n"
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


def test_the_public_names_are_typed_and_each_is_exported_once():
    """A lazy __getattr__ gives a type checker Any: agent_retrieval.Retrieval(nonsense=1) type-checked."""
    import ast

    import agent_retrieval
    import agent_retrieval.errors

    tree = ast.parse((ROOT / "agent_retrieval" / "__init__.py").read_text(encoding="utf-8"))
    checked = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    typed = {alias.asname: node.module for node in checked.body for alias in node.names}  # type: ignore[attr-defined]
    assert typed == agent_retrieval._EXPORTS and sorted(typed) == agent_retrieval.__all__
    for name in agent_retrieval.__all__:
        assert getattr(agent_retrieval, name).__module__.startswith("agent_retrieval")
    errors = {name for name, value in vars(agent_retrieval.errors).items() if isinstance(value, type)}
    assert errors <= set(agent_retrieval.__all__)  # every error a caller may catch, from the top
    used = {"SearchRequest", "ChunkSearchRequest", "RetrievalResult", "Hit", "Document", "QueryEmbedding"}
    assert used | {"Embedder", "Store"} <= set(agent_retrieval.__all__)  # what the public signatures take
    # that mypy reads them typed is checked by `make lint` (tests/typing/public_api.py)


def test_contributings_map_names_every_module():
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    table = text.split("## Where things live")[1].split("\n## ")[0]
    folders = dict(re.findall(r"\*\*(\w+)/\*\* \| ([^\n]*)", table))  # a part's row names its modules
    named = set(re.findall(r"`([\w/]+\.py)`", table))
    named |= {f"{folder}/{m}" for folder, row in folders.items() for m in re.findall(r"`([\w/]+\.py)`", row)}
    package = ROOT / "agent_retrieval"
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py")} - {"__init__.py"}
    modules = {m for m in modules if not m.endswith("/__init__.py")}
    assert modules <= named, sorted(modules - named)


# The parts in CONTRIBUTING's order: each imports only its own and earlier ones (hyde is search's, kept at
# the top where the design names it; the core's modules are the package's other top-level ones).
PARTS = ["stores", "providers", "ingest", "search", "planning", "tools", "server", "graphs", "cli"]
PART_OF = {"hyde": "search", "vectorstore": "tools", "evaluation": "cli"}


def _part(module: str) -> int:
    head = module.split(".")[1] if "." in module else ""
    part = PART_OF.get(head, head)
    return PARTS.index(part) + 1 if part in PARTS else 0  # 0: the core


def test_each_part_imports_only_the_core_and_the_parts_before_it():
    package = ROOT / "agent_retrieval"
    upward = []
    for path in package.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if module == "agent_retrieval":  # the package's face names every part
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "agent_retrieval":
                imported = [f"agent_retrieval.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agent_retrieval."):
                imported = [str(node.module)]
            elif isinstance(node, ast.Import):
                imported = [a.name for a in node.names if a.name.startswith("agent_retrieval.")]
            else:
                continue
            upward += [f"{module} -> {name}" for name in imported if _part(name) > _part(module)]
    assert not upward, upward


# The apps: the command line, the server (its auth and the graphs' entry) read the operator's environment.
APPS = {"cli.py", "server/auth.py", "server/graph_parts.py", "server/mcp_server.py"}


def test_only_the_apps_read_the_environment_for_settings():
    """One composition root: below the apps everything takes its Context (or Retrieval) from its caller;
    `Retrieval.from_env` is the library's own door to the same thing."""
    package = ROOT / "agent_retrieval"
    readers = []
    for path in package.rglob("*.py"):
        where = path.relative_to(package).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        doors = {  # the calls inside a `from_env` of its own delegate to Context's
            id(call)
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name == "from_env"
            for call in ast.walk(node)
        }
        readers += [
            f"{where}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "from_env"
            and id(node) not in doors
            and where not in APPS
        ]
    assert not readers, readers


def test_the_top_level_is_the_public_surface_and_every_folder_a_package():
    """At most 12 modules at the top (the public surface and the apps); the rest in parts with an
    __init__.py (mkdocstrings and type checkers do not find namespace packages' modules)."""
    package = ROOT / "agent_retrieval"
    assert len(list(package.glob("*.py"))) <= 12, sorted(p.name for p in package.glob("*.py"))
    folders = {path.parent for path in package.rglob("*.py")}
    assert not [f for f in folders if not (f / "__init__.py").exists()]
