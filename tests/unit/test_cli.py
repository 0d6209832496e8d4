"""The agent-retrieval command: each subcommand end to end on a temp store, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent_retrieval import cli
from agent_retrieval.embeddings import Embedder
from tests.conftest import WordHashEmbeddings


@pytest.fixture(autouse=True)
def word_hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI builds its embedder from the Context; here it gets the fast test one."""
    monkeypatch.setattr(
        "agent_retrieval.retrieval.make_embedder",
        lambda context: Embedder(WordHashEmbeddings(), "test/word-hash"),
    )


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "fees.md").write_text(
        "---\ntitle: Fee Schedule\ncategory: policy\nyear: 2023\n---\n# Fee Schedule\n\n"
        "## Lettings\nA tenant-find service costs £1,450.\n\n## Sales\n"
        "Sales commission is 1.2% of the price.\n",
        encoding="utf-8",
    )
    (folder / "banda.md").write_text(
        "---\ntitle: 14 Banda Lane\ncategory: property\n---\nThe tenancy deposit of £2,100 is protected.\n",
        encoding="utf-8",
    )
    return folder


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_ingest_query_stats_reembed(capsys, tmp_path, corpus):
    db = str(tmp_path / "cli.db")
    code, out, _ = run(capsys, "ingest", "--db", db, "--no-progress", str(corpus))
    assert code == 0 and "2 documents: 2 written" in out
    code, out, _ = run(capsys, "ingest", "--db", db, "--no-progress", str(corpus))
    assert code == 0 and "0 written" in out and "0 texts embedded" in out

    code, out, _ = run(capsys, "query", "--db", db, "tenancy deposit", "-k", "2")
    assert code == 0 and 'id="banda#0"' in out and "found_by=" in out
    code, out, _ = run(
        capsys,
        "query",
        "--db",
        db,
        "commission",
        "--json",
        "-f",
        "category=policy",
        "-f",
        "year=2023",
        "-f",
        "year=2024",
    )
    result = json.loads(out)
    assert code == 0 and result["hits"] and all(h["document_id"] == "fees" for h in result["hits"])
    code, out, _ = run(capsys, "query", "--db", db, "x", "-t", "summarize", "-d", "fees", "--json")
    assert [h["ordinal"] for h in json.loads(out)["hits"]] == [0, 1]
    code, out, _ = run(capsys, "query", "--db", db, "deposit", "--level", "documents")
    assert code == 0 and 'id="banda"' in out

    code, out, _ = run(capsys, "stats", "--db", db, "--json")
    stats = json.loads(out)
    assert (stats["documents"], stats["chunks"], stats["embedding_model"]) == (2, 3, "test/word-hash")
    code, out, _ = run(capsys, "stats", "--db", db)
    assert "chunks missing embeddings" in out
    code, out, _ = run(capsys, "reembed", "--db", db, "--no-progress")
    assert code == 0 and "0 texts embedded" in out


def test_ingest_skips_files_it_cannot_load_names_each_and_exits_1(capsys, tmp_path, corpus):
    (corpus / "laughs.md").write_text("---\na: &a [x, x]\nb: [*a, *a]\n---\nBody.\n", encoding="utf-8")
    (corpus / "gone.md").symlink_to(corpus / "nowhere.md")
    code, out, err = run(capsys, "ingest", "--db", str(tmp_path / "cli.db"), "--no-progress", str(corpus))
    assert code == 1
    assert out.startswith("2 documents: 2 written") and out.endswith("; 2 files skipped\n")
    assert err.splitlines() == [
        (
            f"skipped: {corpus / 'gone.md'}: does not exist (deleted or moved while loading, or a symlink to "
            "nothing); nothing of it was loaded"
        ),
        (
            f"skipped: {corpus / 'laughs.md'}:2: front matter uses a YAML anchor or alias (&name or *name); "
            "write each value out in full (aliases can expand a few bytes into gigabytes)"
        ),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["query", "deposit", "-k", "0"], "top_k: must be a whole number between 1 and 50 (got 0)"),
        (["query", "deposit", "-t", "fuzzy"], "query_type"),
        (["query", "deposit", "-f", "nonsense"], "--filter 'nonsense': expected KEY=VALUE"),
        (["query", "deposit", "-d", "ghost"], "document_ids: 1 unknown id(s): 'ghost'"),
        (
            ["query", "deposit", "--level", "documents", "-d", "x"],
            "--document-id works with --level chunks only",
        ),
        (["query", "   "], "query: must not be empty"),
        (["ingest", "/no/such/folder"], "no such file or folder"),
    ],
)
def test_bad_input_exits_2_with_one_readable_line(capsys, tmp_path, args, message):
    code, _out, err = run(capsys, *args[:1], "--db", str(tmp_path / "e.db"), *args[1:])
    assert code == 2
    assert message in err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_config_masks_secrets(capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-print-me")
    code, out, _ = run(capsys, "config")
    assert code == 0 and "use_hyde" in out and "$HYDE_NUM_DOCS" in out
    assert "sk-never-print-me" not in out


def test_help_everywhere():
    for args in ([], ["ingest"], ["query"], ["stats"], ["reembed"], ["config"], ["demo"]):
        done = subprocess.run(
            [sys.executable, "-m", "agent_retrieval.cli", *args, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and "usage: agent-retrieval" in done.stdout


def test_ingest_public_on_the_embedded_store_is_refused_before_anything_is_written(capsys, tmp_path, corpus):
    db = str(tmp_path / "cli.db")
    code, _, err = run(capsys, "ingest", "--db", db, "--no-progress", "--public", str(corpus))
    assert code == 2 and "Postgres or Supabase" in err and "public" in err and "Traceback" not in err
    code, out, _ = run(capsys, "stats", "--db", db, "--json")
    assert json.loads(out)["documents"] == 0
