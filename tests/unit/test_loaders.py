"""The loaders users expect: an HTML page's main content (not its navigation, table of contents or footer,
nor the permalinks in its headings), reStructuredText with its sections as headings, and folders filtered by
include and exclude patterns."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent_retrieval.context import Context
from agent_retrieval.ingest import chunk_document, ingest
from agent_retrieval.ingest.loaders import load_documents, load_file
from agent_retrieval.models import ChunkSearchRequest, Document
from agent_retrieval.search.retrieval import Retrieval

HTML = Path(__file__).resolve().parents[1] / "data" / "html"


@pytest.mark.parametrize(
    ("page", "kept", "dropped"),
    [
        (
            "sphinx.html",
            ["# Configuring DNS\n", "## Records to create\n", "192.0.2.10", "## Choosing a TTL\n"],
            ["Navigation", "Table of Contents", "Quick search", "Created using Sphinx", "¶", "next: Mail"],
        ),
        (
            "mkdocs.html",
            ["# Backups\n", "## Backup schedule\n", "02:00 UTC", "## Backup retention\n", "35 days"],
            ["Monitoring", "Table of contents", "Made with Material", "Search", "schedule#", "Backups#"],
        ),
        (  # a hand-made site: a menu, an "On this page" sidebar, related links and a footer
            "generic-site.html",
            ["# Refunds and returns\n", "## Return window\n", "14 days", "| Bicycles | 10% of the price |"],
            ["Servicing", "On this page", "Related pages", "Warranty claims", "Quay Street", "Careers"],
        ),
    ],
)
def test_html_keeps_the_main_content_with_its_headings(page, kept, dropped):
    doc = load_file(HTML / page, page.removesuffix(".html"))[0]
    assert doc.title
    for text in kept:
        assert text in doc.content + "\n", text
    for text in dropped:
        assert text not in doc.content, text
    assert all("¶" not in c.heading_path and not c.heading_path.endswith("#") for c in chunk_document(doc))


def test_a_dns_question_finds_the_section_not_the_table_of_contents(tmp_path, embedder):
    context = Context(db_path=str(tmp_path / "html.db"))
    with Retrieval(context, embedder=embedder) as retrieval:
        ingest(load_documents([HTML]), retrieval.store, embedder, context, progress=False)
        request = ChunkSearchRequest(query="which DNS records should I create for the domain?", top_k=1)
        top = retrieval.search(request, "chunks").hits[0]
    assert top.heading_path.endswith("Records to create") and "CNAME record for www" in top.content


def test_rst_sections_become_headings_by_nesting(tmp_path):
    page = tmp_path / "deploy.rst"
    page.write_text(
        "Deploying\n=========\n\nHow releases ship.\n\nStaging\n-------\n\nPush to *staging* first.\n\n"
        "Smoke tests\n~~~~~~~~~~~\n\nRun ``make smoke``.\n\nProduction\n----------\n\nTag the release.\n",
        encoding="utf-8",
    )
    doc = load_documents([page]).__next__()
    assert doc.title == "Deploying" and doc.id == "deploy"
    paths = [c.heading_path for c in chunk_document(doc)]
    assert paths == [
        "Deploying",
        "Deploying > Staging",
        "Deploying > Staging > Smoke tests",
        "Deploying > Production",
    ]
    assert "Run `make smoke`." in doc.content


def test_rst_field_lists_are_metadata_and_lists_and_code_keep_their_shape(tmp_path):
    page = tmp_path / "release.rst"
    page.write_text(
        ":author: Ann Lee\n:tags: deploy, release\n\nReleasing\n=========\n\n"
        "- build the wheel\n- tag it\n\n  - sign the tag\n\n1. push\n2. announce\n\n"
        ".. code-block:: bash\n\n   make release\n",
        encoding="utf-8",
    )
    doc = next(load_documents([page]))
    assert doc.metadata == {"author": "Ann Lee", "tags": "deploy, release"}
    assert doc.content == (
        "# Releasing\n\n- build the wheel\n- tag it\n  - sign the tag\n\n1. push\n2. announce\n\n"
        "```bash\nmake release\n```"
    )


def test_markdown_heading_anchors_are_not_part_of_the_heading_path():
    doc = Document(id="d", title="Guide", content="# Guide\n\n## Setup {#setup}\n\nInstall it.\n")
    assert [c.heading_path for c in chunk_document(doc)] == ["Guide > Setup"]


def test_include_and_exclude_select_a_folders_files(tmp_path):
    for name in ("guides/start.md", "guides/drafts/next.md", "api/ref.rst", "notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("# T\n\nText.\n", encoding="utf-8")
    ids = lambda **patterns: sorted(d.id for d in load_documents([tmp_path], **patterns))  # noqa: E731
    assert ids() == ["api/ref", "guides/drafts/next", "guides/start", "notes"]
    assert ids(include=["guides/*"]) == ["guides/drafts/next", "guides/start"]
    assert ids(include=["guides/*"], exclude=["*/drafts/*"]) == ["guides/start"]
    assert ids(exclude=["*.rst", "*.txt"]) == ["guides/drafts/next", "guides/start"]
    assert [d.id for d in load_documents([tmp_path / "notes.txt"], include=["*.md"])] == ["notes"]


def test_the_cli_takes_include_and_exclude(tmp_path, capsys, monkeypatch):
    from agent_retrieval import cli
    from agent_retrieval.providers.embeddings import Embedder
    from tests.conftest import WordHashEmbeddings

    monkeypatch.setattr(
        "agent_retrieval.search.retrieval.make_embedder",
        lambda context, **_: Embedder(WordHashEmbeddings(), "test/w"),
    )
    shutil.copytree(HTML, tmp_path / "site")
    db = str(tmp_path / "s.db")
    code = cli.main(["ingest", "--db", db, "--no-progress", "--exclude", "[mg]*", str(tmp_path / "site")])
    assert code == 0 and capsys.readouterr().out.startswith("1 document: 1 written")


# --- nothing empty becomes a document; text in any encoding; binary refused -------------------------------


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("empty.md", b"", "empty: no words to index"),
        ("blank.txt", b" \n\t\n   \n", "empty: no words to index"),
        ("marks.md", b"---\ndraft: true\n---\n# \n\n***\n", "empty: no words to index"),
        ("nul.md", b"\x00" * 64, "holds NUL bytes: a binary file, not text"),
        ("controls.txt", bytes(range(1, 32)) * 8, "control characters: a binary file, not text"),
        (
            "image.html",
            bytes.fromhex("89504e470d0a1a0a") + bytes(range(128, 256)) * 8,
            "a binary file, not text",
        ),
    ],
)
def test_a_file_with_nothing_to_index_is_skipped_by_name(tmp_path, name, data, reason):
    (tmp_path / name).write_bytes(data)
    (tmp_path / "real.md").write_text("# Real\n\nThe deposit is protected.\n", encoding="utf-8")
    skipped: list[str] = []
    loaded = list(load_documents([tmp_path], skipped=skipped))
    assert [d.id for d in loaded] == ["real"]
    assert len(skipped) == 1 and skipped[0].startswith(f"{tmp_path / name}: ") and reason in skipped[0]


def test_no_search_returns_a_hit_without_words(tmp_path, embedder):
    """A document given in code with nothing in it is not stored: empty hits once came first for a query."""
    context = Context(db_path=str(tmp_path / "store.db"))
    blank = [Document("blank", "Blank", "   \n "), Document("dots", "Dots", "... --- ***")]
    with Retrieval(context, embedder=embedder) as retrieval:
        report = ingest(
            [*blank, Document("fees", "Fees", "A letting fee of 6%.")],
            retrieval.store,
            embedder,
            context,
            progress=False,
        )
        hits = retrieval.search(ChunkSearchRequest(query="Blank Dots letting fee", top_k=10), "chunks").hits
    assert (
        report.written == 1
        and [e.split(": skipped: ")[1] for e in report.errors] == ["empty: no words to index"] * 2
    )
    assert [h.document_id for h in hits] == ["fees"] and all(h.content.strip() for h in hits)


@pytest.mark.parametrize(
    ("encoded", "encoding"),
    [
        ("Café crème, naïve façade, déjà vu: le garçon était très sûr.".encode("latin-1"), "cp1252"),
        ("Smart “quotes” and – dashes cost €5.".encode("cp1252"), "cp1252"),
        ("Привет, мир! Это документация по установке программы.".encode("cp1251"), "cp1251"),
        ("Zażółć gęślą jaźń. Dokumentacja instalacji programu.".encode("cp1250"), "cp1250"),
        ("Text with a byte order mark.".encode("utf-16"), "utf-16"),
        ("Plain UTF-8, with é and 日本.".encode(), "utf-8"),
    ],
)
def test_text_in_a_legacy_encoding_is_read_and_its_encoding_kept(tmp_path, encoded, encoding):
    (tmp_path / "notes.md").write_bytes(b"# Notes\n\n" if encoding != "utf-16" else b"")
    with (tmp_path / "notes.md").open("ab") as file:
        file.write(encoded)
    (document,) = load_documents([tmp_path / "notes.md"])
    assert document.metadata.get("encoding", "utf-8") == encoding
    words = encoded.decode(encoding).split()
    assert all(word in document.content for word in words), document.content


# --- markdown as its writer meant it ------------------------------------------------------------------------


def test_setext_headings_title_a_file_and_split_it_into_sections(tmp_path):
    text = (
        "Deploy guide\n============\n\nHow to ship.\n\nRolling back\n------------\n\n"
        "Run `deploy --undo` within an hour.\n\nA paragraph\nthen a list:\n\n- item\n---\n"
    )
    (tmp_path / "guide.md").write_text(text, encoding="utf-8")
    (document,) = load_documents([tmp_path / "guide.md"])
    assert document.title == "Deploy guide"
    paths = [c.heading_path for c in chunk_document(document)]
    assert paths[:2] == ["Deploy guide", "Deploy guide > Rolling back"]
    assert "- item\n---" in document.content  # a rule after a list is a rule, not a heading


def test_a_title_is_the_headings_words_without_its_badges(tmp_path):
    badges = "[![build](https://ci.example/badge.svg)](https://ci.example) ![cov](https://cov.example/c.svg)"
    (tmp_path / "README.md").write_text(f"# Quokka tools {badges}\n\nTools for quokkas.\n", encoding="utf-8")
    (tmp_path / "logo.md").write_text("# [![logo](logo.png)](https://q.example)\n\n# Real title\n\nText.\n")
    assert [d.title for d in load_documents([tmp_path])] == ["Quokka tools", "Real title"]  # README, logo


def test_escapes_and_permalink_marks_leave_the_text_but_code_is_kept_as_written(tmp_path):
    text = (
        "# Return codes ¶\n\nZ\\_OK means success; 2 \\* 3 is six.\n\n\\# is not a heading here.\n\n"
        "```c\n#  define Z\\_OK 0\n```\n\nIn code: `Z\\_OK`.\n"
    )
    (tmp_path / "codes.md").write_text(text, encoding="utf-8")
    (document,) = load_documents([tmp_path / "codes.md"])
    assert document.title == "Return codes" and "¶" not in document.content
    assert "Z_OK means success; 2 * 3 is six." in document.content
    assert "\\# is not a heading here." in document.content  # an escape that keeps a line from being markup
    assert "#  define Z\\_OK 0" in document.content and "`Z\\_OK`" in document.content
    assert [c.heading_path for c in chunk_document(document)] == ["Return codes"]
