"""Documentation sets as their users have them: whole real doc trees, one per toolchain, in one store, and the
questions their users ask.

The trees (benchmarks/docsets/, each with its licence; sources.json gives the repository, commit and the
part taken) are a Sphinx project's reStructuredText with its domain directives, an MkDocs Material site, a
Docusaurus site and a Hugo site's front matter and shortcodes. questions.json holds 64 questions, 16 a set,
written before the loaders changed, each with the file that answers it and a phrase of the answer as the
page shows it. Everything is ingested as a user would (`ingest_paths` on the folder, default settings,
local embedder, HyDE off), then:

- right file @1/@3/@10: where document_retriever ranks the question's file;
- answering file @1/@3: where it ranks the first file that states the answer: the question's own, or one of
  its `also` files. Those were judged by pooling, as TREC judges runs: every file ranked above the
  question's own on 2026-11-29 was read, and kept only with a quote of it that states the answer, which
  this script checks is in the file (so a judgment cannot outlive the text it rests on). Files never ranked
  above were not judged, so this is a floor;
- answering passage @3: the file's passage holding the phrase among chunk_retriever's first three;
- words kept: the share of each file's words (its front matter values and text, markup names left out by an
  independent reader below) found in what the store holds of it;
- residue: markup left in stored text outside code (docutils messages, attribute lists, admonition, tab
  and `:::` fences, icons, snippet and include placeholders, shortcodes, template tags and variables, MDX
  imports and JSX, roles, directives, entities);
- ingest: wall time, texts (documents and chunks) per second, and the process's peak memory.

    python benchmarks/docsets.py                  # the table for BENCHMARKS.md, results/docsets.json
    python benchmarks/docsets.py --sets typer --show-misses
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_retrieval import Context, Retrieval, SearchRequest, ingest_paths

ROOT = Path(__file__).resolve().parent
DOCSETS = ROOT / "docsets"
RESULTS = ROOT / "results"
# A fence's opening or closing run: indented or quoted too (code in a list item or a note).
FENCE = re.compile(r"([ \t>]*)(`{3,}|~{3,})(.*)")
INLINE_CODE = re.compile(r"`[^`\n]+`")


def prose_of(text: str) -> str:
    """`text` without its code: fenced blocks (each closed as CommonMark closes it: the same mark at least as
    long, nothing after it, indented at most 3 more than the opening) and inline code."""
    kept, fence, indent = [], "", 0
    for line in text.split("\n"):
        found = FENCE.match(line)
        if fence:
            closes = found and found.group(2).startswith(fence) and not found.group(3).strip()
            if closes and len(found.group(1).expandtabs(4)) <= indent + 3:
                fence = ""
        elif found:
            fence, indent = found.group(2), len(found.group(1).expandtabs(4))
        else:
            kept.append(INLINE_CODE.sub(" ", line))
    return "\n".join(kept)


RESIDUE = {
    "docutils messages": re.compile(r"\((?:DEBUG|INFO|WARNING|ERROR|SEVERE)/\d\)"),
    # Python-Markdown's and kramdown's: `## Setup { #setup }`, `[Go](#){ .md-button }`, `{: #v4-4-1}`
    "attribute lists": re.compile(r"\{:[^{}\n]*\}|\{\s*[#.][\w-][^{}\n]*\}"),
    "admonition or tab fences": re.compile(r"^ *(?:///|!!!|\?\?\?\+?|===|:::) ?", re.M),
    "icons": re.compile(r":(?:octicons|material|fontawesome|simple)-[\w-]+:"),
    "snippet placeholders": re.compile(r"\{\*.*?\*\}|--8<--"),
    "shortcodes": re.compile(r"\{\{[<%]|[>%]\}\}"),
    "template tags": re.compile(r"\{%-?|-?%\}|\{\{-? "),
    # a component is PascalCase and stands alone: not a type's parameters (`jest.Mock<T>`) or a placeholder
    # (`-d <MAXDEPTH>`)
    # an import names what it takes in `from` or a quoted path (prose may start a line with "import"); MDX's
    # comments open with `{/*`
    "MDX imports or JSX": re.compile(
        r"\{/\*|^(?:import .* from |import ['\"]|export (?:default|const|function)\b).*$"
        r"|(?<![\w.])</?[A-Z][a-z]\w*[ />]",
        re.M,
    ),
    "roles": re.compile(r"(?<![\w`]):[a-z][\w-]*(?::[a-z][\w-]*)?:`"),
    "directives": re.compile(r"^\s*\.\. [\w:-]+::", re.M),
    "entities": re.compile(r"&(?:[a-z]+|#\d+|#x[0-9a-f]+);", re.I),
}
# What the independent reader leaves out of a source file: markup names and targets, never the author's
# words (front matter values, directive arguments and content, role text, shortcode parameters are kept).
MARKUP = [
    re.compile(r"^[ \t]*(?:- )?\w[\w-]*:(?=\s)", re.M),  # front matter keys (nested too), field-list keys
    re.compile(r"^[ \t]*(?:```|~~~).*$", re.M),  # code fences with their language and attributes
    re.compile(r"^[ \t]*\.\. _[^\n]*$|^[ \t]*__ \S+$|`__?(?!\w)", re.M),  # rst targets and reference marks
    re.compile(r"\]\([^)\n]*\)|^\[[^\]\n]+\]:\s*\S+", re.M),  # link targets and reference definitions
    re.compile(r"</?[A-Za-z][^>\n]*>"),  # HTML and JSX tags
    re.compile(r"\{\{[<%]\s*/?\s*[\w/.-]*|[>%]\}\}"),  # shortcode delimiters and names
    re.compile(r"\.\. [\w:-]+::"),  # directive names
    re.compile(r":[a-z][\w-]*(?::[a-z][\w-]*)?:(?=`)"),  # role names
    re.compile(r"^ *:[\w-]+:", re.M),  # directive options
    re.compile(r"\{\s*#[\w-]+[^}\n]*\}"),  # heading attribute lists
    re.compile(r"&(?:[a-z]+|#\d+);", re.I),  # entities
]


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def reference_words(path: Path) -> collections.Counter[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    for pattern in MARKUP:
        text = pattern.sub(" ", text)
    return collections.Counter(words(text))


def ingest(sets: list[str], db: Path) -> tuple[dict[str, Any], Retrieval]:
    context = Context(db_path=str(db), use_hyde=False)
    retrieval = Retrieval(context)
    retrieval.embedder.embed_query("warm up")  # loading the model is not ingesting
    start = time.perf_counter()
    report = ingest_paths(
        [DOCSETS], retrieval=retrieval, progress=True, include=[f"{name}/*" for name in sets]
    )
    seconds = time.perf_counter() - start
    texts = report.embedded + report.reused
    return {
        "files_stored": report.written,
        "chunks": report.chunks,
        "skipped": report.skipped_files,
        "unsupported": len(report.unsupported_files),
        "seconds": round(seconds, 1),
        "texts_per_second": round(texts / seconds, 1) if seconds else 0.0,
        "peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }, retrieval


Stored = dict[str, tuple[str, str]]  # a file's title and whole stored text (where code fences are whole)


def stored_files(db: Path) -> tuple[dict[str, str], dict[str, list[tuple[str, str]]], Stored]:
    """Each document id's file (relative to DOCSETS); each file's chunks (heading path, text); and its title
    and stored text."""
    database = sqlite3.connect(db)
    files = {
        doc_id: Path(source).resolve().relative_to(DOCSETS).as_posix()
        for doc_id, source in database.execute("SELECT id, source FROM documents")
    }
    documents = {
        files[doc_id]: (title, content)
        for doc_id, title, content in database.execute("SELECT id, title, content FROM documents")
    }
    chunks: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
    for doc_id, heading_path, content in database.execute(
        "SELECT document_id, heading_path, content FROM chunks ORDER BY document_id, ordinal"
    ):
        chunks[files[doc_id]].append((heading_path, content))
    database.close()
    return files, chunks, documents


def answering_files(question: dict[str, Any]) -> dict[str, str]:
    """Each file that states the answer, with the words that do: the question's own file and its phrase, then
    each `also` file judged to state it and its quote, checked to be in the file."""
    found = {f"{question['set']}/{question['file']}": " ".join(words(question["answer"]))}
    for judged in question.get("also", []):
        path = DOCSETS / question["set"] / judged["file"]
        if " ".join(judged["quote"].split()) not in " ".join(path.read_text(encoding="utf-8").split()):
            raise SystemExit(f"{path}: the quote judging it an answer to {question['q']!r} is not in it")
        found[f"{question['set']}/{judged['file']}"] = " ".join(words(judged["quote"]))
    return found


def ask(retrieval: Retrieval, files: dict[str, str], question: dict[str, Any]) -> dict[str, Any]:
    wanted = f"{question['set']}/{question['file']}"
    documents = retrieval.search(SearchRequest(query=question["q"], top_k=10), "documents").hits
    chunks = retrieval.search(SearchRequest(query=question["q"], top_k=3), "chunks").hits
    ranked = [files.get(hit.document_id) for hit in documents]
    answering = answering_files(question)
    passages = [
        (files.get(hit.document_id), " ".join(words(f"{hit.heading_path}\n{hit.content}"))) for hit in chunks
    ]
    return {
        **question,
        "file_rank": ranked.index(wanted) + 1 if wanted in ranked else None,
        "first": ranked[0] if ranked else None,
        "passage_top3": any(file == wanted and answering[wanted] in text for file, text in passages),
        "answer_rank": min((rank for rank, file in enumerate(ranked, 1) if file in answering), default=None),
        "answer_passage_top3": any(file in answering and answering[file] in text for file, text in passages),
    }


def fidelity(sets: list[str], chunks: dict[str, list[tuple[str, str]]], documents: Stored) -> dict[str, Any]:
    """Per set: words kept (with multiplicity, over all its files) and residue counts in stored text outside
    code, heading paths included."""
    sources = {s["name"]: tuple(s["suffixes"]) for s in json.loads((DOCSETS / "sources.json").read_text())}
    out: dict[str, Any] = {}
    for name in sets:
        kept = total = 0
        residue: collections.Counter[str] = collections.Counter()
        for path in sorted((DOCSETS / name).rglob("*")):
            if path.suffix not in sources[name]:
                continue
            relative = path.relative_to(DOCSETS).as_posix()
            title, content = documents.get(relative, ("", ""))
            stored = collections.Counter(words(title))
            for heading_path, text in chunks.get(relative, []):
                stored.update(words(f"{heading_path} {text}"))
            headings = "\n".join(sorted({heading_path for heading_path, _ in chunks.get(relative, [])}))
            prose = prose_of(content) + "\n" + headings
            residue.update({kind: len(pattern.findall(prose)) for kind, pattern in RESIDUE.items()})
            reference = reference_words(path)
            kept += sum(min(count, stored[word]) for word, count in reference.items())
            total += sum(reference.values())
        share = round(100 * kept / total, 1) if total else 0.0
        out[name] = {"words": total, "kept": share, "residue": dict(+residue)}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sources = json.loads((DOCSETS / "sources.json").read_text())
    parser.add_argument("--sets", nargs="*", default=[s["name"] for s in sources], help="which sets to load")
    parser.add_argument(
        "--show-misses", action="store_true", help="print each question whose file is not first"
    )
    parser.add_argument(
        "--db", type=Path, help="keep the store here; if it exists, ask it again without ingesting"
    )
    args = parser.parse_args(argv)
    questions = [q for q in json.loads((DOCSETS / "questions.json").read_text()) if q["set"] in args.sets]
    with tempfile.TemporaryDirectory() as folder:
        db = args.db or Path(folder) / "docsets.db"
        if db.exists():
            ingested, retrieval = {}, Retrieval(Context(db_path=str(db), use_hyde=False))
        else:
            ingested, retrieval = ingest(args.sets, db)
        with retrieval:
            files, chunks, documents = stored_files(db)
            answers = [ask(retrieval, files, q) for q in questions]
        kept = fidelity(args.sets, chunks, documents)
    result = {"ingest": ingested, "sets": kept, "questions": answers, "summary": summary(args.sets, answers)}
    print_table(result, {s["name"]: s["toolchain"] for s in sources})
    if args.show_misses:
        for answer in answers:
            if answer["file_rank"] != 1 or not answer["passage_top3"]:
                print(
                    f"- {answer['q']!r}: {answer['set']}/{answer['file']} at {answer['file_rank']}, "
                    f"first {answer['first']}, passage {'yes' if answer['passage_top3'] else 'no'}"
                )
    if ingested:  # a re-asked store has no ingest figures: the results file keeps a whole run
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "docsets.json").write_text(json.dumps(result, indent=1))
    return result


def summary(sets: list[str], answers: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    def rates(group: list[dict[str, Any]]) -> dict[str, float]:
        def share(hits: int) -> float:
            return round(100 * hits / len(group), 1) if group else 0.0

        def within(rank: str, k: int) -> float:  # ranks are of the first 10, or None
            return share(sum(a[rank] is not None and a[rank] <= k for a in group))

        return {
            "questions": len(group),
            "file@1": within("file_rank", 1),
            "file@3": within("file_rank", 3),
            "file@10": within("file_rank", 10),
            "passage@3": share(sum(a["passage_top3"] for a in group)),
            "answer@1": within("answer_rank", 1),
            "answer@3": within("answer_rank", 3),
            "answer passage@3": share(sum(a["answer_passage_top3"] for a in group)),
        }

    return {**{name: rates([a for a in answers if a["set"] == name]) for name in sets}, "all": rates(answers)}


def print_table(result: dict[str, Any], toolchains: dict[str, str]) -> None:
    print(
        "\n| set | toolchain | questions | file @1 | @3 | @10 | passage @3 | answering file @1 | @3 "
        "| passage @3 | words kept | residue |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, rates in result["summary"].items():
        kept = result["sets"].get(name)
        residue = (", ".join(f"{n} {kind}" for kind, n in kept["residue"].items()) or "none") if kept else ""
        words_kept = f"{kept['kept']:.1f}%" if kept else ""
        measures = ("file@1", "file@3", "file@10", "passage@3", "answer@1", "answer@3", "answer passage@3")
        found = " | ".join(f"{rates[k]:.1f}%" for k in measures)
        toolchain = toolchains.get(name, "all")
        print(f"| {name} | {toolchain} | {rates['questions']} | {found} | {words_kept} | {residue} |")
    ingested = result["ingest"]
    if not ingested:
        return
    print(
        f"\ningest: {ingested['files_stored']:,} files stored ({ingested['chunks']:,} chunks), "
        f"{len(ingested['skipped'])} skipped, {ingested['unsupported']} of other types; "
        f"{ingested['seconds']} s, {ingested['texts_per_second']} texts/s, "
        f"peak memory {ingested['peak_memory_mb']:,} MB"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
