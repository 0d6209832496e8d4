"""What a document says reaches the store: loading fidelity on real documentation, and whether the right file
and passage come back for paraphrased questions.

The corpus (benchmarks/fidelity/corpus.json) is documentation this project did not write: hand-written and
generated HTML (texinfo, docbook, asciidoc, Sphinx, MkDocs, doxygen, rustdoc, mdBook, Node's doc tool),
markdown, reStructuredText, plain text, and one or more files of each further format. Each file is loaded
with the library's loaders into a fresh embedded store (local all-MiniLM-L6-v2, HyDE off), then read back
from the store and compared with what an independent reader finds in the file:

- words: the share of the file's main-text words (navigation, menus, tables of contents left out by the
  corpus's XPaths) found in the file's stored chunks, heading paths and title, counted with multiplicity;
- residue: markup left in stored text outside code (backslash escapes, permalink marks, badge and image
  syntax, HTML tags and entities);
- headings: the share of the file's headings found as a heading of the stored text.

The questions were written before the loaders changed. Each is asked of document_retriever (is its file
first?) and chunk_retriever (is the answering passage in the top 3? A passage is its heading path and text, as
the tool shows it: a JSON setting's name is the heading above its description).

    python benchmarks/fidelity.py            # the table for BENCHMARKS.md, results/fidelity.json
    python benchmarks/fidelity.py --only zlib-how --show    # one file's stored text, to read a miss
    python benchmarks/fidelity.py --db /tmp/fidelity.db     # keep the store, to query it afterwards

The files come from Debian packages (listed in the corpus; `apt-get install` them), the Rust toolchain's
docs (`rustup component add rust-docs`), the venv's JupyterLab and one PyPI sdist; a file that is missing
is named and left out.
"""

from __future__ import annotations

import argparse
import collections
import csv
import glob
import io
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from lxml import html as lxml_html

from agent_retrieval import Context, Retrieval, SearchRequest, ingest_paths

ROOT = Path(__file__).resolve().parent
CORPUS = ROOT / "fidelity" / "corpus.json"
RESULTS = ROOT / "results"
PLACES = {
    "doc": "/usr/share/doc",
    "rust": next(iter(sorted(glob.glob(str(Path.home() / ".rustup/toolchains/*/share/doc/rust/html")))), ""),
    "venv": sys.prefix,
    "made": str(RESULTS / "fidelity-made"),
}
# Outside these the independent reader never looks: page chrome, whatever generated it.
CHROME = "//script|//style|//nav|//header|//footer|//aside|//*[@role='navigation']|//*[@role='search']"
BLOCKS = ("p", "div", "li", "dt", "dd", "pre", "td", "th", "tr", "br", "section", "table", "blockquote")
HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
RESIDUE = {
    "escapes": re.compile(r"\\[\\`*_{}\[\]()#+.!|<>-]"),
    "permalinks": re.compile(r"[¶§]"),
    "badges or images": re.compile(r"!\[[^\]]*\]\("),
    "html": re.compile(r"</?(?:div|span|p|a|img|br|table|tr|td|code|pre|em|strong|b|i)\b[^>]*>"),
    "entities": re.compile(r"&(?:amp|lt|gt|quot|nbsp|#\d+|#x[0-9a-f]+);", re.I),
}
FENCED = re.compile(r"```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)", re.S)
CODE = re.compile(FENCED.pattern + r"|`[^`\n]+`", re.S)


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def resolve(path: str) -> Path:
    return Path(path.format(**PLACES))


# --- files -------------------------------------------------------------------------------------------


def make(spec: list[str], target: Path) -> None:
    """Build a corpus file from real text with a well-known converter (pandoc, openpyxl, a PyPI sdist)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    kind, source = spec[0], str(resolve(spec[1]))
    if kind == "pandoc":
        subprocess.run(["pandoc", "--from", "markdown", source, "-o", str(target)], check=True)
    elif kind == "xlsx":
        from openpyxl import Workbook

        book = Workbook()
        sheet = book.active
        sheet.title = Path(source).stem
        with open(source, encoding="utf-8") as rows:
            for row in csv.reader(rows):
                sheet.append(row)
        book.save(target)
    elif kind == "sdist":
        with tempfile.TemporaryDirectory() as folder:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    "-d",
                    folder,
                    source,
                ],
                check=True,
            )
            archive = next(Path(folder).glob("*.tar.gz"))
            shutil.unpack_archive(archive, folder)
            member = next(Path(folder).glob(f"*/{spec[2]}"))
            shutil.copyfile(member, target)


def reference(path: Path, entry: dict[str, Any]) -> tuple[str, list[str]]:
    """The file's main text and headings as an independent reader sees them (not the library's loaders)."""
    suffix = path.suffix.lower()
    if "make" in entry and entry["make"][0] in ("pandoc", "xlsx"):
        return reference(resolve(entry["make"][1]), {})  # what the converter was given
    if suffix in (".html", ".htm"):
        return html_reference(path.read_text(encoding="utf-8", errors="replace"), entry)
    text = path.read_text(encoding="utf-8", errors="replace")
    if suffix in (".md", ".markdown"):
        from markdown_it import MarkdownIt

        text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)  # front matter: metadata, not text
        return html_reference(MarkdownIt("commonmark").enable("table").render(text), {})
    if suffix == ".rst":
        from docutils.core import publish_string

        page = publish_string(text, writer_name="html5", settings_overrides={"report_level": 5})
        return html_reference(page.decode(), {"main": "//main"})
    if suffix == ".csv":
        return " ".join(" ".join(row) for row in csv.reader(io.StringIO(text))), []
    if suffix == ".ipynb":
        cells = json.loads(text)["cells"]
        return "\n".join("".join(cell["source"]) for cell in cells), []
    if suffix == ".json":
        return " ".join(strings(json.loads(text))), []
    return text, []


def strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [part for key, item in value.items() for part in (key, *strings(item))]
    if isinstance(value, list):
        return [part for item in value for part in strings(item)]
    return [str(value)] if isinstance(value, str) else []


def html_reference(page: str, entry: dict[str, Any]) -> tuple[str, list[str]]:
    tree = lxml_html.document_fromstring(page.encode())
    for element in tree.xpath(CHROME + "".join(f"|{x}" for x in entry.get("drop", []))):
        element.drop_tree()
    found = tree.xpath(entry.get("main", "//body"))
    main = found[0] if found else tree
    for element in main.iter(*BLOCKS, *HEADINGS):  # blocks are words apart, whatever the markup
        element.text = "\n" + (element.text or "")
        element.tail = "\n" + (element.tail or "")
    headings = [" ".join(h.text_content().split()) for h in main.iter(*HEADINGS)]
    return main.text_content(), [h for h in headings if words(h)]


# --- measuring ---------------------------------------------------------------------------------------


def fidelity(
    stored: list[tuple[str, str]],
    title: str,
    content: str,
    main: str,
    headings: list[str],
    *,
    literal: bool = False,
) -> dict[str, Any]:
    """`stored` is the file's chunks (heading path, text), `content` its stored document text (where code
    fences are whole: a chunk may begin inside one)."""
    reference_words = collections.Counter(words(main))
    stored_words = collections.Counter(words(title))
    for heading_path, text in stored:
        stored_words.update(words(heading_path + " " + text))
    kept = sum(min(count, stored_words[word]) for word, count in reference_words.items())
    total = sum(reference_words.values())
    prose = CODE.sub(" ", content) + "\n" + "\n".join(sorted({path for path, _ in stored}))
    residue = collections.Counter({name: len(pattern.findall(prose)) for name, pattern in RESIDUE.items()})
    if literal:  # a backslash in code or data is what it says, not markup
        del residue["escapes"]
    stored_headings = {
        " ".join(words(line.lstrip("#"))) for line in FENCED.sub("", content).split("\n") if line[:1] == "#"
    }
    for heading_path, _ in stored:
        stored_headings.update(" ".join(words(part)) for part in heading_path.split(" > "))
    recognised = sum(1 for heading in headings if " ".join(words(heading)) in stored_headings)
    missing = [word for word, count in reference_words.items() if stored_words[word] < count]
    return {
        "words": total,
        "kept": round(100 * kept / total, 1) if total else 0.0,
        "residue": dict(+residue),
        "headings": len(headings),
        "headings_recognised": recognised,
        "missing_sample": missing[:12],
    }


def ask(retrieval: Retrieval, question: dict[str, Any]) -> dict[str, Any]:
    documents = retrieval.search(SearchRequest(query=question["q"], top_k=10), "documents").hits
    chunks = retrieval.search(SearchRequest(query=question["q"], top_k=3), "chunks").hits
    ranked = [hit.document_id for hit in documents]
    answer = " ".join(words(question["answer"]))
    return {
        "file": question["file"],
        "q": question["q"],
        "file_rank": ranked.index(question["file"]) + 1 if question["file"] in ranked else None,
        "passage_top3": any(
            hit.document_id == question["file"]
            and answer in " ".join(words(f"{hit.heading_path}\n{hit.content}"))
            for hit in chunks
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="file keys to measure (default: all)")
    parser.add_argument("--show", action="store_true", help="print each file's stored text")
    parser.add_argument("--db", help="keep the store at this path (replaced if it exists), to query a miss")
    args = parser.parse_args()
    corpus = json.loads(CORPUS.read_text())
    entries = {k: v for k, v in corpus["files"].items() if args.only is None or k in args.only}
    RESULTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        gathered = Path(folder) / "corpus"
        gathered.mkdir()
        present: dict[str, Path] = {}
        for key, entry in entries.items():
            path = resolve(entry["path"])
            if not path.exists() and "make" in entry:
                try:
                    make(entry["make"], path)
                except (OSError, subprocess.CalledProcessError, StopIteration) as error:
                    print(f"{key}: could not be made ({error}); left out", file=sys.stderr)
            if not path.exists():
                print(f"{key}: {path} is missing (install the packages the corpus lists); left out")
                continue
            present[key] = path
            shutil.copyfile(path, gathered / f"{key}{path.suffix}")
        store = Path(args.db) if args.db else Path(folder) / "fidelity.db"
        store.unlink(missing_ok=True)
        context = Context(db_path=str(store), use_hyde=False)
        with Retrieval(context) as retrieval:
            report = ingest_paths([gathered], retrieval=retrieval, progress=True)
            for line in report.skipped_files + [str(u) for u in report.unsupported_files]:
                print("not loaded:", line)
            database = sqlite3.connect(context.store.db_path)
            rows: dict[str, dict[str, Any]] = {}
            for key, path in present.items():
                title_row = database.execute(
                    "SELECT title, content FROM documents WHERE id = ?", (key,)
                ).fetchone()
                stored = database.execute(
                    "SELECT heading_path, content FROM chunks WHERE document_id = ? ORDER BY ordinal", (key,)
                ).fetchall()
                main_text, headings = reference(path, entries[key])
                title, content = title_row or ("", "")
                literal = entries[key]["kind"].split(",")[0] in ("code", "json", "csv", "text")
                row = fidelity(stored, title, content, main_text, headings, literal=literal)
                rows[key] = {"kind": entries[key]["kind"], "loaded": title_row is not None, **row}
                if args.show:
                    print(f"===== {key}\n" + "\n---\n".join(f"[{h}]\n{c}" for h, c in stored))
            questions = [q for q in corpus["questions"] if q["file"] in present]
            answers = [ask(retrieval, q) for q in questions]
    print_table(rows, answers)
    out = RESULTS / ("fidelity.json" if args.only is None else "fidelity-partial.json")
    out.write_text(json.dumps({"files": rows, "questions": answers}, indent=1))
    print(f"\nwritten to {out.relative_to(ROOT.parent)}")


def print_table(rows: dict[str, dict[str, Any]], answers: list[dict[str, Any]]) -> None:
    print("\n| file | kind | main-text words | kept | residue | headings recognised |")
    print("|---|---|---:|---:|---|---:|")
    for key, row in rows.items():
        residue = ", ".join(f"{n} {name}" for name, n in row["residue"].items()) or "none"
        kept = f"{row['kept']:.1f}%" if row["loaded"] else "not loaded"
        headings = f"{row['headings_recognised']}/{row['headings']}" if row["headings"] else "-"
        print(f"| {key} | {row['kind']} | {row['words']:,} | {kept} | {residue} | {headings} |")
    kept = [row["kept"] if row["loaded"] else 0.0 for row in rows.values()]
    print(f"\nfiles: {len(rows)}; words kept: mean {sum(kept) / len(kept):.1f}%, min {min(kept):.1f}%")
    print(f"files with residue: {sum(1 for row in rows.values() if row['residue'])}")
    if answers:
        first = sum(1 for a in answers if a["file_rank"] == 1)
        top3 = sum(1 for a in answers if a["passage_top3"])
        print(
            f"questions: {len(answers)}; right file first {first} ({100 * first / len(answers):.0f}%), "
            f"answering passage in top 3 {top3} ({100 * top3 / len(answers):.0f}%)"
        )
        for a in answers:
            if a["file_rank"] != 1 or not a["passage_top3"]:
                found = f"file rank {a['file_rank']}, passage in top 3: {a['passage_top3']}"
                print(f"  miss: {a['file']}: {found}: {a['q']}")


if __name__ == "__main__":
    main()
