"""What the CLI reads from a folder an operator names, and what it prints of it: symlinks out of the folder
are skipped by name (a `deploy-key.txt` linking to a private key must not become a searchable, perhaps
published, document), a parser's own failure (pypdf's decompression and page-tree limits) skips that file by
name and the good file beside it is stored, and names reach the terminal with their control characters
escaped."""

from __future__ import annotations

import io
import re
import zlib
from pathlib import Path

import pytest
from pypdf import PdfWriter
from pypdf.generic import NameObject, StreamObject

from agent_retrieval import cli
from agent_retrieval.ingest.loaders import MAX_PDF_PAGES
from agent_retrieval.providers.embeddings import Embedder
from agent_retrieval.stores import SQLiteStore
from tests.conftest import WordHashEmbeddings

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"


@pytest.fixture(autouse=True)
def word_hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "agent_retrieval.search.retrieval.make_embedder",
        lambda context, **_: Embedder(WordHashEmbeddings(), "test/word-hash"),
    )


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def stored_ids(db: str) -> set[str]:
    with SQLiteStore(db) as store:
        return set(store.documents_from("/"))  # every document loaded from a file (sources are absolute)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nRotate the deploy key every year.\n", encoding="utf-8")
    secret = tmp_path / "home" / ".ssh"
    secret.mkdir(parents=True)
    (secret / "id_rsa").write_text(KEY, encoding="utf-8")
    (docs / "deploy-key.txt").symlink_to(secret / "id_rsa")
    (docs / "passwd.txt").symlink_to("/etc/passwd")
    return docs


def test_a_folders_symlinks_to_files_outside_it_are_skipped_by_name(capsys, tmp_path, folder):
    db = str(tmp_path / "store.db")
    code, out, err = run(capsys, "ingest", "--db", db, "--no-progress", str(folder))
    assert code == 1 and "1 document: 1 written" in out
    for name in ("deploy-key.txt", "passwd.txt"):
        assert f"skipped: {folder / name}: leads outside {folder}" in err
    assert "--follow-symlinks" in err
    assert stored_ids(db) == {"guide"}
    code, out, err = run(capsys, "ingest", "--db", db, "--no-progress", "--follow-symlinks", str(folder))
    assert code == 0 and stored_ids(db) == {"guide", "deploy-key", "passwd"}  # the operator's explicit choice


def bomb_pdf() -> bytes:
    """One page whose content stream inflates from 80 KB to 80 MB: past pypdf's decompression limit."""
    writer = PdfWriter()
    page = writer.add_blank_page(100, 100)
    stream = StreamObject()
    stream._data = zlib.compress(b" " * 80_000_000, 9)
    stream[NameObject("/Filter")] = NameObject("/FlateDecode")
    page[NameObject("/Contents")] = writer._add_object(stream)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def deep_pdf(depth: int) -> bytes:
    """A page under `depth` nested page-tree nodes (pypdf refuses more than 100)."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>"]
    for level in range(depth):
        parent = f" /Parent {level + 1} 0 R" if level else ""
        objects.append(f"<< /Type /Pages /Kids [{level + 3} 0 R] /Count 1{parent} >>")
    objects.append(f"<< /Type /Page /Parent {depth + 1} 0 R /MediaBox [0 0 10 10] >>")
    out, offsets = io.BytesIO(), []
    out.write(b"%PDF-1.4\n")
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n{body}\nendobj\n".encode())
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    out.write("".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode())
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def long_pdf(pages: int) -> bytes:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(10, 10)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_pdf_past_a_parsers_limits_is_skipped_by_name_and_the_good_file_beside_it_is_stored(
    capsys, tmp_path
):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nRotate the deploy key every year.\n", encoding="utf-8")
    (docs / "bomb.pdf").write_bytes(bomb_pdf())
    (docs / "deep.pdf").write_bytes(deep_pdf(150))
    (docs / "long.pdf").write_bytes(long_pdf(MAX_PDF_PAGES + 1))
    db = str(tmp_path / "store.db")
    code, out, err = run(capsys, "ingest", "--db", db, "--no-progress", str(docs))
    assert code == 1 and "Traceback" not in err and "1 document: 1 written" in out
    assert f"skipped: {docs / 'bomb.pdf'}: the PDF has no text layer" in err  # pypdf stopped inflating it
    assert (
        f"skipped: {docs / 'deep.pdf'}: could not be read (LimitReachedError: Maximum page tree depth" in err
    )
    assert f"skipped: {docs / 'long.pdf'}: 2,001 pages, over the 2,000 one PDF may have" in err
    assert stored_ids(db) == {"guide"}


def test_file_names_reach_the_terminal_with_their_control_characters_escaped(capsys, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nRotate the deploy key every year.\n", encoding="utf-8")
    broken = "---\nkey: [unclosed\n---\nBody.\n"  # front matter that is not YAML: a skipped file, named
    (docs / "title\x1b]0;owned\x07.md").write_text(broken, encoding="utf-8")
    (docs / "x\nAll files verified OK.md").write_text(broken, encoding="utf-8")
    (docs / "clear\x1b[2J.md").write_text(broken, encoding="utf-8")
    code, out, err = run(capsys, "ingest", "--db", str(tmp_path / "store.db"), "--no-progress", str(docs))
    assert code == 1 and "\x1b" not in out + err and "\x07" not in err
    assert "All files verified OK" in err and not any(
        line.startswith("All files verified OK") for line in err.splitlines()
    )
    assert "title\\x1b]0;owned\\x07.md" in err and "x\\nAll files verified OK.md" in err
    (docs / "note\x1b[2J.txt").write_text("A note whose name clears the screen.\n", encoding="utf-8")
    run(capsys, "ingest", "--db", str(tmp_path / "store.db"), "--no-progress", str(docs))
    code, out, err = run(capsys, "list", "--db", str(tmp_path / "store.db"))
    assert code == 0 and "\x1b" not in out + err and "note\\x1b[2J" in out


def test_an_ingest_that_skipped_a_binary_file_names_it_and_exits_1_and_names_an_empty_one_too(
    capsys, tmp_path
):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nRotate the deploy key every year.\n", encoding="utf-8")
    (docs / "empty.md").write_bytes(b"")
    (docs / "zeros.md").write_bytes(b"\x00" * 512)
    code, out, err = run(capsys, "ingest", "--db", str(tmp_path / "store.db"), "--no-progress", str(docs))
    assert code == 1 and out.startswith("1 document: 1 written (1 chunk)")
    assert f"no words, passed over: {docs / 'empty.md'}: empty: no words to index" in err
    assert f"skipped: {docs / 'zeros.md'}: holds NUL bytes: a binary file, not text" in err


def test_a_docs_folders_templates_and_stubs_are_passed_over_by_name_and_fail_only_when_strict(
    capsys, tmp_path
):
    """Jekyll's page templates, MkDocs' redirect stubs, a page that only includes another file, an empty
    `__init__.py`: a docs folder always held some, and its ingest always ended with exit 1."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nRotate the deploy key every year.\n", encoding="utf-8")
    (docs / "news.html").write_text(
        "---\nlayout: news\n---\n{% for post in site.posts %}{{ post.title }}{% endfor %}\n"
    )
    (docs / "redirect.md").write_text("---\ntemplate: redirect.html\nlocation: guide/\n---\n")
    (docs / "contributing.rst").write_text(".. include:: ../CONTRIBUTING.rst\n")
    (docs / "__init__.py").write_bytes(b"")
    store = str(tmp_path / "store.db")
    code, out, err = run(capsys, "ingest", "--db", store, "--no-progress", str(docs))
    assert code == 0 and "skipped:" not in err
    assert out.rstrip().endswith("; 4 files with no words of their own passed over")
    assert f"no words, passed over: {docs / 'contributing.rst'}: only takes in ../CONTRIBUTING.rst" in err
    code, out, err = run(capsys, "ingest", "--db", store, "--no-progress", "--strict", str(docs))
    assert code == 1


def test_output_cut_short_by_a_pipe_ends_quietly():
    """`agent-retrieval ... | head -1` ended in a BrokenPipeError traceback."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "agent_retrieval.cli", "db", "init", "--print"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.readline()
        process.stdout.close()  # as `head -1` does once it has its line
        err = process.stderr.read().decode()
        code = process.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipeError" not in err
    assert code in (0, 141)


def test_the_progress_bar_and_the_summary_count_the_same_texts(capsys, tmp_path):
    """The bar counted 633 texts where the summary said 631: rows repeating a text were in neither count."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a", "b"):  # two documents and their chunks, all the same text: embedded once
        text = "---\ntitle: Key rotation\n---\nRotate the deploy key every year.\n"
        (docs / f"{name}.md").write_text(text, encoding="utf-8")
    code, out, _ = run(capsys, "ingest", "--db", str(tmp_path / "store.db"), "--no-progress", str(docs))
    assert code == 0 and "2 documents: 2 written (2 chunks)" in out
    embedded, reused = map(int, re.search(r"(\d+) texts? embedded, (\d+) vectors? reused", out).groups())
    assert (embedded, reused) == (1, 3)  # four rows, as the bar counts: one embedded, three given it
