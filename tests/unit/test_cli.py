"""The agent-retrieval command: each subcommand end to end on a temp store, and one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent_retrieval import cli
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.stores import SQLiteStore
from tests.conftest import WordHashEmbeddings

REAL = Path(__file__).parent.parent / "data" / "real"


@pytest.fixture(autouse=True)
def word_hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI builds its embedder from the Context; here it gets the fast test one."""
    monkeypatch.setattr(
        "agent_retrieval.search.retrieval.make_embedder",
        lambda context, **_: Embedder(WordHashEmbeddings(), "test/word-hash"),
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
    assert out.startswith("2 documents: 2 written") and out.endswith(
        "; 2 files not ingested (listed above)\n"
    )
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
    db = tmp_path / "e.db"
    SQLiteStore(db).close()  # an empty store: the query is what is wrong
    code, _out, err = run(capsys, *args[:1], "--db", str(db), *args[1:])
    assert code == 2
    assert message in err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_config_masks_secrets(capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-print-me")
    code, out, _ = run(capsys, "config")
    assert code == 0 and "use_hyde" in out and "$AGENT_RETRIEVAL_HYDE_NUM_DOCS" in out
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


@pytest.mark.parametrize("command", [["query", "deposit"], ["stats"], ["reembed"]])
def test_reading_a_store_that_does_not_exist_is_an_error_and_creates_nothing(capsys, tmp_path, command):
    db = tmp_path / "misspelt.db"
    code, out, err = run(capsys, command[0], "--db", str(db), *command[1:])
    assert code == 2 and out == ""
    assert err == (
        f"error: no store at {db}: ingest into it first (`agent-retrieval ingest PATH --db {db}`), or name "
        "an existing store with --db or $AGENT_RETRIEVAL_DB\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_ingest_into_a_folder_that_does_not_exist_is_refused_and_creates_nothing(capsys, tmp_path, corpus):
    db = tmp_path / "no" / "such" / "x.db"
    code, _out, err = run(capsys, "ingest", "--db", str(db), "--no-progress", str(corpus))
    assert code == 2 and f"the folder {db.parent} does not exist" in err
    assert not (tmp_path / "no").exists()


def test_files_of_other_types_are_named_by_type_and_the_rest_ingested(capsys, tmp_path, corpus):
    for name in ("guide.rtf", *(f"img{i}.png" for i in range(5))):
        (corpus / name).write_text("x", encoding="utf-8")
    (corpus / ".git").mkdir()
    (corpus / ".git" / "HEAD.md").write_text("# not a document\n", encoding="utf-8")
    code, out, err = run(capsys, "ingest", "--db", str(tmp_path / "t.db"), "--no-progress", str(corpus))
    assert code == 0  # a docs folder holds images: its ordinary contents, not a failure
    assert out.startswith("2 documents: 2 written") and "6 files of other types passed over" in out
    assert err.splitlines() == [
        "not a supported type, passed over: 5 .png files "
        f"({corpus / 'img0.png'}, {corpus / 'img1.png'}, {corpus / 'img2.png'} and 2 more)",
        f"not a supported type, passed over: 1 .rtf file ({corpus / 'guide.rtf'})",
    ]
    strict, _, _ = run(
        capsys, "ingest", "--db", str(tmp_path / "t.db"), "--no-progress", "--strict", str(corpus)
    )
    assert strict == 1  # for a CI check that every file is read
    excluded, out, err = run(
        capsys, "ingest", "--db", str(tmp_path / "t.db"), "--no-progress", "--exclude", "*.png", "--exclude",
        "*.rtf", str(corpus),
    )  # fmt: skip
    assert excluded == 0 and "other types" not in out and not err  # the patterns reach every file


def test_what_a_folders_gitignore_names_is_left_out_unless_asked(capsys, tmp_path, corpus):
    (corpus / ".gitignore").write_text("drafts/\n*.tmp.md\n!keep.tmp.md\n", encoding="utf-8")
    (corpus / "guides").mkdir()
    (corpus / "guides" / ".gitignore").write_text("/local.md\n", encoding="utf-8")
    for name in ("drafts/plan.md", "notes.tmp.md", "keep.tmp.md", "guides/local.md", "guides/drafts/x.md"):
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_text(f"# {name}\n\nSome text of {name}.\n", encoding="utf-8")
    db = str(tmp_path / "t.db")
    code, out, _ = run(capsys, "ingest", "--db", db, "--no-progress", str(corpus))
    assert code == 0 and out.startswith("3 documents: 3 written")  # the corpus's two, and keep.tmp.md
    code, out, err = run(capsys, "ingest", "--db", db, "--no-progress", "--dry-run", str(corpus))
    left = sorted(line.split(" (")[0].removeprefix("left out: ") for line in err.splitlines())
    assert left == sorted(
        str(corpus / n) for n in ("drafts", "notes.tmp.md", "guides/local.md", "guides/drafts")
    )
    assert code == 0 and "4 build folders, tool files or .gitignore entries left out" in out
    code, out, err = run(capsys, "ingest", "--db", db, "--no-progress", "--no-gitignore", str(corpus))
    assert code == 0 and out.startswith("7 documents: 4 written")  # the four .gitignore named


def test_build_folders_and_sphinx_conf_are_left_out_and_a_dry_run_names_them(capsys, tmp_path, corpus):
    for built in ("_build/html/index.md", "site/index.md", "docs/conf.py"):
        (corpus / built).parent.mkdir(parents=True, exist_ok=True)
        (corpus / built).write_text("# Built\n\nA copy of the pages, or code.\n", encoding="utf-8")
    # VitePress' docs folder: TypeScript settings are JSON with comments, which failed every ingest
    (corpus / "docs" / "tsconfig.json").write_text('{\n  // for the theme\n  "include": ["."]\n}\n')
    (corpus / "docs" / "package.json").write_text('{"name": "docs", "scripts": {"build": "vitepress"}}')
    db = str(tmp_path / "t.db")
    code, _, _ = run(capsys, "ingest", "--db", db, "--no-progress", str(corpus))
    assert code == 0
    code, out, err = run(capsys, "ingest", "--db", db, "--no-progress", "--dry-run", str(corpus))
    assert code == 0 and "5 build folders, tool files or .gitignore entries left out" in out
    left = sorted(line.split(" (")[0].removeprefix("left out: ") for line in err.splitlines())
    tools = ("_build", "site", "docs/conf.py", "docs/tsconfig.json", "docs/package.json")
    assert left == sorted(str(corpus / name) for name in tools)
    code, out, _ = run(capsys, "list", "--db", db)
    assert "Built" not in out


def test_a_folder_with_nothing_to_ingest_is_an_error_naming_the_supported_types(capsys, tmp_path):
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "notes.rtf").write_text("x", encoding="utf-8")
    code, _out, err = run(capsys, "ingest", "--db", str(tmp_path / "t.db"), str(tmp_path / "only"))
    assert code == 2
    assert "error: nothing to ingest in" in err and ".md, .markdown, .mdx" in err and ".txt, " in err


def test_no_progress_silences_every_bar_and_notice(capsys, tmp_path, corpus):
    code, _out, err = run(capsys, "ingest", "--db", str(tmp_path / "q.db"), "--no-progress", str(corpus))
    assert code == 0 and err == ""


def test_progress_counts_texts_and_the_model_loading_notice_is_one_line(
    capsys, tmp_path, corpus, monkeypatch
):
    from agent_retrieval.core.progress import notices

    def loading(context, **_):
        notices.info("loading the embedding model test ...")
        return Embedder(WordHashEmbeddings(), "test/word-hash")

    monkeypatch.setattr("agent_retrieval.search.retrieval.make_embedder", loading)
    code, _out, err = run(capsys, "ingest", "--db", str(tmp_path / "p.db"), str(corpus))
    assert code == 0
    assert "loading the embedding model test ...\n" in err
    assert "5/5 [" in err and "text/s" in err  # 2 documents and 3 chunks: texts, not batches
    assert "read: 100%" in err and "2/2 [" in err and "file/s" in err  # the files as they are parsed


def test_version_is_the_package_version(capsys):
    from agent_retrieval import __version__

    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out == f"agent-retrieval {__version__}\n"


def test_delete_removes_the_named_documents_and_names_the_unknown(capsys, tmp_path, corpus):
    db = str(tmp_path / "d.db")
    run(capsys, "ingest", "--db", db, "--no-progress", str(corpus))
    code, out, err = run(capsys, "delete", "--db", db, "fees", "ghost")
    assert (code, out) == (1, "1 document deleted\n")
    assert err == "not in the store (nothing deleted for them): 'ghost'\n"
    code, out, _ = run(capsys, "query", "--db", db, "commission", "--level", "documents")
    assert 'id="fees"' not in out and run(capsys, "delete", "--db", db, "banda")[0] == 0


def test_ingest_prune_reports_renamed_and_removed_files(capsys, tmp_path, corpus):
    db = str(tmp_path / "p.db")
    run(capsys, "ingest", "--db", db, "--no-progress", str(corpus))
    (corpus / "fees.md").rename(corpus / "fee-schedule.md")
    (corpus / "banda.md").unlink()
    code, out, err = run(capsys, "ingest", "--db", db, "--no-progress", "--prune", str(corpus))
    assert code == 0 and out.endswith("; 1 renamed; 1 removed\n")
    assert err.splitlines() == ["renamed: fees -> fee-schedule", "removed: banda (its file is gone)"]


def test_a_front_matter_id_names_a_page_within_its_folder_and_moves_with_it(capsys, tmp_path):
    """Docusaurus reads `id: issues` as the page's name in its folder: typescript-eslint's contributing and
    maintenance guides both say it, and one replaced the other in the store."""
    docs = tmp_path / "docs"
    for folder in ("contributing", "maintenance"):
        (docs / folder).mkdir(parents=True)
        shutil.copy(REAL / f"ts-eslint-{folder}-issues.mdx", docs / folder / "Issues.mdx")
    db = str(tmp_path / "i.db")
    run(capsys, "ingest", "--db", db, "--no-progress", str(docs / "maintenance"))
    code, out, err = run(capsys, "ingest", "--db", db, "--no-progress", str(docs))
    assert code == 0 and err.splitlines() == ["renamed: issues -> maintenance/issues"], err
    code, out, err = run(capsys, "ingest", "--db", db, "--no-progress", str(docs / "maintenance"))
    assert (code, err) == (0, "") and out.startswith("1 document: 0 written"), out  # the outer id kept
    _, listed, _ = run(capsys, "list", "--db", db)
    assert [line.split()[0] for line in listed.splitlines()] == ["contributing/issues", "maintenance/issues"]


def test_a_renamed_file_titled_by_its_name_is_followed_not_removed(capsys, tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "boiler-repairs.txt").write_text("The landlord pays for boiler repairs within 14 days.\n")
    (notes / "setup.py").write_text("# build settings\nimport setuptools\n\ndef build():\n    return 1\n")
    db = str(tmp_path / "r.db")
    run(capsys, "ingest", "--db", db, "--no-progress", str(notes))
    (notes / "boiler-repairs.txt").rename(notes / "heating.txt")
    (notes / "setup.py").rename(notes / "build.py")
    code, out, err = run(capsys, "ingest", "--db", db, "--no-progress", "--prune", str(notes))
    assert code == 0 and out.endswith("; 2 renamed\n"), out
    assert sorted(err.splitlines()) == ["renamed: boiler-repairs -> heating", "renamed: setup -> build"]
    _, listed, _ = run(capsys, "query", "--db", db, "landlord boiler", "--level", "documents")
    assert (
        listed.startswith('1 document for "landlord boiler"')
        and '<passage id="heating" source="heating"' in listed
    )


def test_list_shows_each_document_with_its_file_and_delete_prefix_removes_a_folders(capsys, tmp_path):
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "setup.md").write_text("# Setup\n\nInstall the boiler controller first.\n")
    (docs / "guides" / "repairs.md").write_text("# Repairs\n\nThe landlord pays for boiler repairs.\n")
    (docs / "fees.md").write_text("# Fees\n\nCommission is disclosed in writing.\n")
    db = str(tmp_path / "l.db")
    run(capsys, "ingest", "--db", db, "--no-progress", str(docs))
    code, out, err = run(capsys, "list", "--db", db)
    rows = [line.split("\t") for line in out.splitlines()]
    assert code == 0 and err == "3 documents\n"
    assert [row[0] for row in rows] == ["fees", "guides/repairs", "guides/setup"]
    assert rows[1][1:2] == ["1"] and rows[1][3:] == ["Repairs", str(docs / "guides" / "repairs.md")]
    code, out, _ = run(capsys, "list", "--db", db, "--prefix", "guides/", "--json")
    assert [doc["id"] for doc in json.loads(out)] == ["guides/repairs", "guides/setup"]
    assert run(capsys, "list", "--db", db, "--limit", "1")[2] == "1 document or more; --limit shows others\n"
    assert run(capsys, "list", "--db", db, "--limit", "0")[0] == 2
    code, out, _ = run(
        capsys, "query", "--db", db, "who pays for boiler repairs", "--level", "chunks", "-k", "1"
    )
    assert out.endswith(f"\nfiles:\n  guides/repairs: {docs / 'guides' / 'repairs.md'}\n")
    assert run(capsys, "delete", "--db", db, "--prefix", "guides/")[:2] == (0, "2 documents deleted\n")
    assert run(capsys, "list", "--db", db)[1].split("\t")[0] == "fees"
    code, _, err = run(capsys, "delete", "--db", db, "--prefix", "guides/")
    assert code == 1 and "no document id starts with 'guides/'" in err
    code, _, err = run(capsys, "delete", "--db", db, "--prefix", "")
    assert code == 2 and "would delete every document" in err


def test_a_dry_run_says_what_an_ingest_would_do_and_changes_nothing(capsys, tmp_path, corpus):
    db = str(tmp_path / "dry.db")
    code, _, err = run(capsys, "ingest", "--db", db, "--dry-run", str(corpus))
    assert code == 2 and "no store at" in err and not (tmp_path / "dry.db").exists()
    (corpus / "gifts.md").write_text("# Gifts\n\nGifts over 20 pounds are declared.\n")
    (corpus / "hours.md").write_text("# Hours\n\nThe office opens at nine.\n")
    run(capsys, "ingest", "--db", db, "--no-progress", str(corpus))
    (corpus / "fees.md").rename(corpus / "fee-schedule.md")
    (corpus / "banda.md").unlink()
    (corpus / "gifts.md").write_text("# Gifts\n\nGifts over 50 pounds are declared.\n")  # hours.md as it was
    before = run(capsys, "list", "--db", db)[1]
    code, out, err = run(capsys, "ingest", "--db", db, "--no-progress", "--prune", "--dry-run", str(corpus))
    assert code == 0 and out.startswith("dry run, nothing changed: ")
    assert out.endswith("2 to write, 1 unchanged; 1 to rename; 1 to remove\n"), out
    assert err.splitlines() == [
        "would be renamed: fees -> fee-schedule",
        "would be removed: banda (its file is gone)",
    ]
    assert run(capsys, "list", "--db", db)[1] == before


def test_ask_answers_with_the_rag_graph_and_lists_the_cited_sources(capsys, tmp_path, corpus):
    db = str(tmp_path / "a.db")
    run(capsys, "ingest", "--db", db, "--no-progress", str(corpus))
    code, out, err = run(capsys, "ask", "--db", db, "--no-progress", "How much is the tenancy deposit?")
    assert code == 0
    answer, sources = out.split("\nSources:\n")
    assert "[banda#0]" in answer and "  [banda#0] 14 Banda Lane\n" in sources
    assert "note: no chat model configured: heuristic plan" in err

    code, out, _ = run(capsys, "ask", "--db", db, "--json", "How much is the tenancy deposit?")
    state = json.loads(out)
    assert code == 0 and state["citations"] and set(state["citations"]) <= {h["id"] for h in state["hits"]}


def test_ask_refuses_an_empty_question_and_a_missing_store(capsys, tmp_path, corpus):
    db = str(tmp_path / "a.db")
    run(capsys, "ingest", "--db", db, "--no-progress", str(corpus))
    assert run(capsys, "ask", "--db", db, "   ")[:2] == (2, "")
    code, _, err = run(capsys, "ask", "--db", str(tmp_path / "none.db"), "deposit?")
    assert code == 2 and err.startswith("error: no store at")


def test_the_demos_studio_hint_says_what_to_install_where_the_server_is_missing(monkeypatch):
    import importlib.util

    assert cli._studio_hint("x.db").endswith(": AGENT_RETRIEVAL_DB=x.db langgraph dev")  # the test env has it
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert (
        "pip install 'agent-retrieval[studio]', then AGENT_RETRIEVAL_DB=x.db langgraph dev"
        in cli._studio_hint("x.db")
    )
