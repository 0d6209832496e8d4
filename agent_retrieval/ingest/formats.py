"""File formats as markdown: what each kind of file says, with its headings as markdown headings (the chunker
splits there and names each chunk's section), code fenced and tables as tables.

Every reader takes a file's bytes or text as untrusted input and returns (metadata, markdown); a file that
cannot be read raises InvalidRequest naming it. Formats past HTML and reStructuredText need an optional
extra, named with its pip command when missing.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from agent_retrieval.errors import InvalidRequest
from agent_retrieval.ingest import sphinx
from agent_retrieval.models import MAX_NESTING, nesting_depth

MAX_UNPACKED_BYTES = 512 * 2**20  # of an office file's parts once unzipped: a few KB can unzip to gigabytes
MAX_TABLE_CELLS = 1_000_000  # of a spreadsheet or CSV file
TABLE_BLOCK_CHARS = 800  # a table is written in blocks of rows about this long, each under its header row

# --- markdown sections ---------------------------------------------------------------------------------

# A code fence's opening run, after its indent. Indented or quoted too: MkDocs and Docusaurus nest fences in
# tabs, admonitions, list items and quotes, where their examples stay code.
FENCE = re.compile(r"^([ \t>]*)(`{3,}|~{3,})")
# Only the opening marks are a pattern: the closing run ("## Title ##") is cut off in code, as a pattern
# that also finds it backtracks over a long run of spaces (cubic time on one line).
_ATX_OPENING = re.compile(r" {0,3}(#{1,6})[ \t]")


def fenced(lines: Iterable[str]) -> Iterator[tuple[str, bool]]:
    """Each line with whether it is code: inside a fenced block, its fences included. As CommonMark reads
    them, a block closes at a line of the same mark at least as long as its opening run, with nothing after
    it and indented at most 3 more than the opening (or at the end of the text): an example that shows a
    fence indented inside a tab (Material's docs) stays inside the example."""
    fence, indent = "", 0
    for line in lines:
        if fence:
            found = FENCE.match(line)
            if (
                found
                and found.group(2).startswith(fence)
                and not line[found.end() :].strip()
                and _width(found.group(1)) <= indent + 3
            ):
                fence = ""
            yield line, True
        elif opening := FENCE.match(line):
            fence, indent = opening.group(2), _width(opening.group(1))
            yield line, True
        else:
            yield line, False


def _width(indent: str) -> int:
    return len(indent.expandtabs(4))


def atx_heading(line: str) -> tuple[int, str] | None:
    """A "#" heading line's level and words ("## Setup ##" -> (2, "Setup")), or None for another line."""
    opening = _ATX_OPENING.match(line)
    if opening is None:
        return None
    words = line[opening.end() :].strip(" \t")
    unclosed = words.rstrip("#")
    if not unclosed or unclosed[-1] in " \t":  # a closing run of "#" stands apart from the words
        words = unclosed.rstrip(" \t")
    return len(opening.group(1)), words


def markdown_sections(text: str) -> list[tuple[list[str], str]]:
    """A markdown text's sections, each (the headings above it, h1 to h3; its text as written), split at
    "#", "##" and "###" headings outside code fences. LangChain's MarkdownHeaderTextSplitter strips every
    line and drops blank ones, so code lost its indentation and the size splitter after it found no
    paragraph to cut at; here a section keeps both."""
    sections: list[tuple[list[str], str]] = []
    headings: list[str] = []
    lines: list[str] = []

    def close() -> None:
        body = "\n".join(lines).strip("\n")
        if body.strip():
            sections.append(([heading for heading in headings if heading], body))
        lines.clear()

    for line, code in fenced(text.split("\n")):
        heading = None if code else atx_heading(line)
        if heading and heading[0] <= 3:
            close()
            level, words = heading
            headings = [*headings[: level - 1], *[""] * (level - 1 - len(headings)), words]
            continue
        lines.append(line)
    close()
    return sections


# --- HTML --------------------------------------------------------------------------------------------

# What a documentation page wraps around its text, whatever generated it: scripts, menus, search boxes,
# sidebars, tables of contents, breadcrumbs and the navigation bars of docbook, texinfo, Sphinx and MkDocs.
_NOT_TEXT = ("script", "style", "noscript", "template", "nav", "aside", "button", "form", "svg", "iframe")
_NOT_TEXT_ROLES = ("navigation", "search", "banner", "contentinfo", "complementary")
_NOT_TEXT_CLASSES = frozenset(
    {
        "toc", "sidebar", "sphinxsidebar", "breadcrumb", "breadcrumbs", "navheader", "navfooter",
        "nav-panel", "navbar", "related", "headerlink", "skip-link", "skip-to-content",
    }
)  # fmt: skip
# What a permalink shows (Sphinx "¶", MkDocs and Node "#", rustdoc "§"): an anchor, not words of the text.
_PERMALINK_TEXT = frozenset({"", "¶", "#", "§", "🔗", "link"})
_CODE_LANGUAGE = re.compile(r"(?:language|lang|highlight)-([\w+#-]+)")


def html_to_markdown(path: Path, html: str) -> tuple[dict[str, Any], str]:
    """A page's title and all of its main text as markdown. The main text is the page's `<main>` (or
    role="main", or its one `<article>`, else its body) without what surrounds text on a documentation page
    (menus, sidebars, tables of contents, page headers and footers, permalink marks); everything else in it
    is kept, prose between blocks included. Headings stay headings, `<pre>` is fenced code (a `#define`
    in it stays code), tables stay tables, images become their alt text."""
    from lxml import etree
    from lxml import html as lxml_html

    html = re.sub(r"^\s*<\?xml[^>]*>", "", html)  # lxml refuses text that declares its own encoding
    if not html.strip():  # a template page whose tags were all it held
        return {}, ""
    try:
        tree = lxml_html.document_fromstring(html)
    except (etree.ParserError, ValueError) as error:
        raise InvalidRequest(f"{path}: not readable HTML ({error})") from None
    metadata = _titled(" ".join((tree.findtext(".//title") or "").split()))
    for element in list(tree.iter(etree.Element)):
        if element.getparent() is not None and _not_text(element):
            element.drop_tree()
    for image in tree.iter("img"):
        image.tail = (image.get("alt") or "") + (image.tail or "")
    mains, articles = tree.xpath("//main|//*[@role='main']"), tree.xpath("//article")
    main = mains[0] if mains else articles[0] if len(articles) == 1 else tree.find("body")
    if main is None:
        return metadata, ""
    converter = _converter()(
        heading_style="ATX",
        wrap=True,  # white space collapsed by markdownify's linear pattern (its other is quadratic) ...
        wrap_width=None,  # ... and paragraphs left unwrapped
        strip_pre=None,  # code blocks trimmed by _converter's convert_pre
        bullets="-",
        escape_underscores=False,
        escape_asterisks=False,
        strip=["a", "img"],
        code_language_callback=_code_language,
        bs4_options="lxml",
    )
    markdown = converter.convert(etree.tostring(main, encoding="unicode", method="html"))
    markdown = markdown.replace("\xa0", " ")  # a no-break space is a space to search
    return metadata, re.sub(r"\n{3,}", "\n\n", markdown).strip()


@functools.cache
def _converter() -> Any:
    from markdownify import MarkdownConverter

    class Converter(MarkdownConverter):
        """markdownify, trimming code blocks in linear time: its own pattern for that is quadratic in a run
        of spaces inside the block."""

        def convert_pre(self, el: Any, text: str, parent_tags: Any) -> str:
            lead = len(text) - len(text.lstrip(" \n"))
            text = text[text.rfind("\n", 0, lead) + 1 :].rstrip(" \n")  # blank lines around, not indents
            return str(super().convert_pre(el, text, parent_tags))  # type: ignore[misc]  # untyped library

    return Converter


def _not_text(element: Any) -> bool:
    tag = element.tag if isinstance(element.tag, str) else ""
    if tag in _NOT_TEXT or element.get("role") in _NOT_TEXT_ROLES:
        return True
    if tag in ("header", "footer"):  # the page's, not an article's own
        return not element.xpath("ancestor::main|ancestor::article|ancestor::*[@role='main']")
    if tag == "table" and element.get("class") == "nav":  # docbook's previous/next bar
        return True
    if tag == "a" and (element.get("href") or "").startswith("#"):
        return element.text_content().strip() in _PERMALINK_TEXT
    classes = set((element.get("class") or "").split())
    return bool(classes & _NOT_TEXT_CLASSES) or element.get("id") in ("toc", "sidebar")


def _code_language(element: Any) -> str:
    """A `<pre>` block's language, from its class or its `<code>`'s ("language-c", "highlight-python")."""
    classes = " ".join(str(node.get("class") or "") for node in [element, *element.find_all("code")])
    found = _CODE_LANGUAGE.search(classes)
    return found.group(1) if found and found.group(1) not in ("default", "none", "text") else ""


# --- reStructuredText ----------------------------------------------------------------------------------


# docutils takes quadratic time on some input (thousands of comments or lists in a row: 480 KB took four
# minutes), so it is stopped after a time linear in the text's size: RST_SECONDS plus RST_SECONDS_PER_CHAR a
# character of the reading thread's own CPU time. The slowest real page, a 43 KB list-table, needs 30 us a
# character under the watch: the budget is two and a half times that.
RST_SECONDS = 1.0
RST_SECONDS_PER_CHAR = 50e-6


def rst_to_markdown(path: Path, text: str) -> tuple[dict[str, Any], str]:
    """reStructuredText as metadata and markdown (see _read_rst), within a time linear in its size."""
    from agent_retrieval.ingest import worker

    _docutils_loaded()
    seconds = RST_SECONDS + RST_SECONDS_PER_CHAR * len(text)
    try:
        return worker.run_within(_read_rst, (path, text), seconds, modules=("docutils.",))
    except worker.Overtime:
        raise InvalidRequest(
            f"{path}: docutils could not read this reStructuredText within {seconds:.1f} s (its parser "
            "slows on long runs of comments, lists or directives in a row); split the file"
        ) from None


@functools.cache
def _docutils_loaded() -> None:
    """docutils imports its parser, languages and transforms at its first document and each directive's
    module at its first use, ten times a page's reading: done once per process before any clock starts, so
    a deadline measures the text."""
    from docutils.parsers.rst.directives import (  # noqa: F401  # every module its directives live in
        admonitions,
        body,
        images,
        misc,
        parts,
        references,
        tables,
    )

    _read_rst(Path("first.rst"), "Title\n=====\n\nA paragraph.\n")


def _read_rst(path: Path, text: str) -> tuple[dict[str, Any], str]:
    """reStructuredText as metadata and markdown. The field list that opens a document (`:author:`,
    `:tags:`) is its metadata, as front matter is a markdown file's; section titles become headings by
    nesting (# for the outermost), lists stay lists and literal blocks fences, the rest is plain text.
    Directives that would read other files or pass raw markup through are off: a document is untrusted,
    and `.. include:: /etc/passwd` must not read anything."""
    from docutils import nodes
    from docutils.core import publish_doctree

    sphinx.register()

    settings = {
        # No configuration file either (./docutils.conf, ~/.docutils, $DOCUTILSCONFIG): a cloned folder's own
        # could turn file reading back on, or name a file for docutils to write (record_dependencies).
        "_disable_config": True,
        "file_insertion_enabled": False,
        "raw_enabled": False,
        "doctitle_xform": False,  # the first title stays a heading, like the others
        # Code stays text in a fence: no Pygments, whose lexers a page's first code block would import and
        # compile inside the page's deadline (and whose tokens are dropped anyway).
        "syntax_highlight": "none",
        "report_level": 5,
        "halt_level": 5,
        "warning_stream": io.StringIO(),
        "input_encoding": "unicode",
    }
    try:
        tree = publish_doctree(text, source_path=str(path), settings_overrides=settings)
    except Exception as error:  # docutils raises many kinds; any of them means the file cannot be read
        raise InvalidRequest(f"{path}: not readable reStructuredText ({type(error).__name__})") from None
    for message in list(tree.findall(nodes.system_message)):  # docutils' own words, never the author's
        words = sphinx.unknown_directive_text(message)
        _swap(message, [nodes.paragraph("", words)] if words else [])
    for problem in list(tree.findall(nodes.problematic)):  # markup docutils could not resolve: a role
        _swap(problem, [nodes.Text(sphinx.shown(problem.astext()))])

    def block(node: Any) -> str:
        if isinstance(node, nodes.bullet_list | nodes.enumerated_list):
            items = []
            for number, item in enumerate(node.children, start=1):
                marker = f"{number}. " if isinstance(node, nodes.enumerated_list) else "- "
                body = "\n".join(block(part) for part in item.children)
                items.append(marker + body.replace("\n", "\n" + " " * len(marker)))
            return "\n".join(items)
        if isinstance(node, nodes.literal_block):
            language = next((c for c in node.get("classes", []) if c != "code"), "")
            return f"```{language}\n{node.astext()}\n```"
        if isinstance(node, nodes.Element) and not all(
            isinstance(child, nodes.Inline | nodes.Text) for child in node.children
        ):  # a container (a definition list, a quote, an entry's content): its blocks, code still fenced
            return "\n\n".join(text for child in node.children if (text := block(child).strip()))
        return inline(node)

    def inline(node: Any) -> str:
        """Running text, its ``literals`` as markdown code spans (as a markdown source writes them)."""
        if isinstance(node, nodes.literal):
            text = node.astext()
            ticks = "``" if "`" in text else "`"
            return f"{ticks}{text}{ticks}" if text.strip() else text
        if isinstance(node, nodes.title_reference):  # `text <target>` in the default role: a link where
            return sphinx.visible(node.astext())  # Sphinx's default_role is set (attrs' "any")
        if isinstance(node, nodes.Element):
            return "".join(inline(child) for child in node.children)
        return str(node.astext())

    metadata: dict[str, Any] = {}
    parts: list[str] = []

    def walk(node: Any, depth: int) -> None:
        for child in node.children:
            if isinstance(child, nodes.docinfo):  # bibliographic fields (author, date) and any others
                for field in child.children:
                    named = isinstance(field, nodes.field)
                    name = field[0].astext() if named else field.tagname
                    metadata[name] = (field[1] if named else field).astext().strip()
            elif isinstance(child, nodes.section):
                title = child.next_node(nodes.title)
                parts.append("#" * min(depth, 6) + " " + (title.astext() if title else ""))
                walk(child, depth + 1)
            elif isinstance(child, nodes.rubric):  # a described entry's name (sphinx.py), or a rubric
                parts.append("#" * min(depth, 6) + " " + child.astext())
            elif not isinstance(child, nodes.title | nodes.comment):
                parts.append(block(child))

    try:
        walk(tree, 1)
    except RecursionError:  # docutils nests what it was given; past Python's stack, say so
        raise InvalidRequest(f"{path}: nested too deeply to read; flatten its lists or quotes") from None
    return metadata, "\n\n".join(part.strip() for part in parts if part.strip())


def _swap(node: Any, replacements: list[Any]) -> None:
    """`node` replaced in its parent by `replacements` (docutils' replace_self refuses a node with ids)."""
    parent = node.parent
    if parent is None:
        return
    at = parent.index(node)
    parent.remove(node)
    for offset, replacement in enumerate(replacements):
        parent.insert(at + offset, replacement)


# --- office files (optional extras) -------------------------------------------------------------------


def _extra(path: Path, module: str, extra: str) -> Any:
    """`module` imported, or a clear refusal naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise InvalidRequest(
            f"{path}: reading {path.suffix.lower()} files needs the '{extra}' extra: "
            f"pip install 'agent-retrieval[{extra}]'"
        ) from None


def _unzipped(path: Path, data: bytes) -> io.BytesIO:
    """An office file as a zip whose every part was unpacked here within MAX_UNPACKED_BYTES in all, counted
    as it is read: the sizes a zip's directory claims are the author's word, and a part claiming 100 bytes
    can unpack to gigabytes. The reader gets the parts as unpacked (stored, not compressed again)."""
    unpacked = io.BytesIO()
    budget = MAX_UNPACKED_BYTES
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive, zipfile.ZipFile(unpacked, "w") as copy:
            for member in archive.infolist():
                if member.is_dir():
                    continue
                with archive.open(member) as part:
                    content = part.read(budget + 1)
                budget -= len(content)
                if budget < 0:
                    raise InvalidRequest(
                        f"{path}: unpacks to over the {MAX_UNPACKED_BYTES // 2**20} MB an office file may; "
                        "split it into parts"
                    )
                copy.writestr(member.filename, content)
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError, EOFError, OSError) as error:
        # a damaged part, a compression zipfile lacks, an encrypted part, a truncated archive
        raise InvalidRequest(
            f"{path}: not a readable {path.suffix.lower()} file ({_zip_problem(error)})"
        ) from None
    unpacked.seek(0)
    return unpacked


def _zip_problem(error: BaseException) -> str:
    if isinstance(error, zipfile.BadZipFile) and "File is not a zip file" in str(error):
        return "not a zip archive"
    return f"a damaged or unsupported zip archive: {type(error).__name__}"


def docx_to_markdown(path: Path, data: bytes) -> tuple[dict[str, Any], str]:
    """A Word document's body in reading order: headings by their level ("Heading 2" -> ##), the title
    style as #, list paragraphs as items, tables as tables. Headers, footers and comments are left out."""
    docx = _extra(path, "docx", "docx")
    from docx.table import Table

    document = docx.Document(_unzipped(path, data))
    below_title = any(p.style is not None and p.style.name == "Title" for p in document.paragraphs)
    parts: list[str] = []
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            parts.append(_table([[_cell_text(cell._tc) for cell in row.cells] for row in block.rows]))
            continue
        text = " ".join(_word_text(block._p).split())
        if not text:
            continue
        style = (block.style.name if block.style is not None else "") or ""
        level = re.fullmatch(r"Heading (\d)", style)
        if style == "Title":
            parts.append(f"# {text}")
        elif level:
            parts.append("#" * min(int(level.group(1)) + below_title, 6) + " " + text)
        elif style.startswith("List") or (block._p.pPr is not None and block._p.pPr.numPr is not None):
            parts.append(f"- {text}")
        else:
            parts.append(text)
    return _titled(document.core_properties.title), _joined(parts)


# What each part of a Word paragraph's runs reads as (None: its own text).
_WORD_TEXT = {"t": None, "tab": "\t", "ptab": "\t", "br": "\n", "cr": "\n", "noBreakHyphen": "-"}


def _word_text(paragraph: Any) -> str:
    """A Word paragraph's text, read in one pass over its parts: python-docx asks XPath for a union of these
    tags, which takes quadratic time in a paragraph of thousands of line breaks."""
    from docx.oxml.ns import qn

    reads = {qn(f"w:{tag}"): text for tag, text in _WORD_TEXT.items()}
    return "".join(reads[part.tag] or part.text or "" for part in paragraph.iter(*reads))


def _cell_text(cell: Any) -> str:
    from docx.oxml.ns import qn

    return "\n".join(_word_text(paragraph) for paragraph in cell.iter(qn("w:p")))


def pptx_to_markdown(path: Path, data: bytes) -> tuple[dict[str, Any], str]:
    """A presentation slide by slide: each slide's title as a heading, its text and tables in reading
    order, and its speaker notes."""
    pptx = _extra(path, "pptx", "pptx")
    presentation = pptx.Presentation(_unzipped(path, data))
    parts: list[str] = []
    for number, slide in enumerate(presentation.slides, start=1):
        heading = slide.shapes.title.text_frame.text if slide.shapes.title is not None else ""
        parts.append(f"## {' '.join(heading.split()) or f'Slide {number}'}")
        for shape in sorted(slide.shapes, key=lambda s: (s.top or 0, s.left or 0)):
            if shape == slide.shapes.title:
                continue
            if shape.has_text_frame:
                for paragraph in shape.text_frame.paragraphs:
                    text = " ".join("".join(run.text for run in paragraph.runs).split())
                    if text:
                        parts.append("  " * paragraph.level + f"- {text}" if paragraph.level else text)
            elif shape.has_table:
                parts.append(_table([[cell.text for cell in row.cells] for row in shape.table.rows]))
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text.strip()
            if notes:
                parts.append(f"Notes: {notes}")
    return _titled(presentation.core_properties.title), _joined(parts)


def xlsx_to_markdown(path: Path, data: bytes) -> tuple[dict[str, Any], str]:
    """A workbook sheet by sheet: each sheet's name as a heading and its rows as a table (the values
    formulas last computed, not the formulas)."""
    openpyxl = _extra(path, "openpyxl", "xlsx")
    book = openpyxl.load_workbook(_unzipped(path, data), read_only=True, data_only=True)
    parts: list[str] = []
    cells = 0
    try:
        for sheet in book.worksheets:
            rows = []
            for row in sheet.iter_rows(values_only=True):
                cells += len(row)
                if cells > MAX_TABLE_CELLS:
                    raise InvalidRequest(
                        f"{path}: more than {MAX_TABLE_CELLS:,} cells; split the workbook into parts"
                    )
                if any(value not in (None, "") for value in row):
                    rows.append(["" if value is None else str(value) for value in row])
            if rows:
                parts += [f"## {sheet.title}", _table(rows)]
    finally:
        book.close()
    return _titled(book.properties.title if book.properties else None), _joined(parts)


# --- text formats --------------------------------------------------------------------------------------

# A plain-text heading as specs, READMEs and RFC-style notes write it: a short line underlined by "=" or "-"
# as long as it (within a fifth), after a blank line. Looser than that, a rule under a paragraph's last line
# would become a heading.
_UNDERLINED = re.compile(r"(?:^|(?<=\n\n))([^\s#][^\n]{0,79})\n(=+|-+)[ \t]*$", re.MULTILINE)


# reStructuredText's own marks: a directive, a link target or footnote, a role. Django's docs, and others,
# keep their reStructuredText in .txt files (Sphinx's source_suffix).
_RST_MARK = re.compile(r"^\.\. (?:[\w:-]+::|_[^\n:]+:|\[#?\w*\])|(?<![\w`]):[a-z][\w:.-]*:`[^`\n]+`", re.M)


def text_to_markdown(path: Path, text: str) -> tuple[dict[str, Any], str]:
    """Plain text as written, its underlined headings made "#" (top) and "##" headings, so the chunker
    splits there and each passage knows its section; text holding reStructuredText's marks is read as
    reStructuredText (as written when docutils cannot read it)."""
    if _RST_MARK.search(text):
        with contextlib.suppress(InvalidRequest):
            return rst_to_markdown(path, text)

    def heading(match: re.Match[str]) -> str:
        title, rule = match.group(1).rstrip(), match.group(2)
        if abs(len(rule) - len(title)) > max(2, len(title) // 5):
            return match.group(0)
        return f"{'#' if rule[0] == '=' else '##'} {title}"

    return {}, _UNDERLINED.sub(heading, text)


def csv_to_markdown(path: Path, text: str) -> tuple[dict[str, Any], str]:
    """A CSV or TSV file as a table, its first row the header (the delimiter found by csv.Sniffer)."""
    try:
        dialect: Any = csv.Sniffer().sniff(text[:20_000], delimiters=",;\t|")
    except csv.Error:
        dialect = "excel-tab" if path.suffix.lower() == ".tsv" else "excel"
    rows: list[list[str]] = []
    cells = 0
    try:
        for row in csv.reader(io.StringIO(text), dialect):
            cells += len(row)
            if cells > MAX_TABLE_CELLS:
                raise InvalidRequest(
                    f"{path}: more than {MAX_TABLE_CELLS:,} cells; split the file into parts"
                )
            if any(cell.strip() for cell in row):
                rows.append(row)
    except csv.Error as error:
        raise InvalidRequest(f"{path}: not readable CSV ({error})") from None
    return {}, _table(rows)


def ipynb_to_markdown(path: Path, text: str) -> tuple[dict[str, Any], str]:
    """A Jupyter notebook's markdown cells as they are and its code cells fenced in the kernel's language;
    outputs are left out (they are results, often large, rarely prose)."""
    try:
        notebook = json.loads(text)
        cells = notebook["cells"]
        if not isinstance(cells, list):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise InvalidRequest(f"{path}: not a Jupyter notebook (no 'cells' list in its JSON)") from None
    info = notebook.get("metadata") or {}
    language = str(
        (info.get("language_info") or {}).get("name") or (info.get("kernelspec") or {}).get("language") or ""
    )
    parts: list[str] = []
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        if not source.strip():
            continue
        if cell.get("cell_type") == "code":
            parts.append(f"```{language}\n{source.strip()}\n```")
        elif cell.get("cell_type") == "markdown":
            parts.append(source.strip())
    return _titled(str(info.get("title") or "")), _joined(parts)


def json_to_markdown(path: Path, text: str) -> tuple[dict[str, Any], str]:
    """A JSON file as an outline: an object's keys holding objects or lists become headings (three levels,
    then nested items), scalar values lines of "key: value"."""
    try:
        value = json.loads(text)
        deep = nesting_depth(value) > MAX_NESTING
    except RecursionError:
        deep = True
    except ValueError as error:
        raise InvalidRequest(f"{path}: not valid JSON ({error})") from None
    if deep:
        raise InvalidRequest(f"{path}: nested more than {MAX_NESTING} levels deep; flatten it")
    lines: list[str] = []
    _outline(value, 1, lines)
    named = next((value[key] for key in ("title", "name") if isinstance(value, dict) and key in value), None)
    return _titled(named if isinstance(named, str) else None), "\n".join(lines).strip()


def _outline(value: Any, depth: int, lines: list[str]) -> None:
    indent = "  " * max(depth - 4, 0)
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                lines.append(f"\n{'#' * depth} {key}\n" if depth <= 3 else f"{indent}- {key}:")
                _outline(item, depth + 1, lines)
            else:
                lines.append(f"{indent}- {key}: {_scalar(item)}" if depth > 3 else f"{key}: {_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict | list):
                _outline(item, depth + 1 if depth > 3 else depth, lines)
                lines.append("")
            else:
                lines.append(f"{indent}- {_scalar(item)}")
    else:
        lines.append(_scalar(value))


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


# --- source code ---------------------------------------------------------------------------------------

# Suffix -> (the fence's language, langchain-text-splitters' Language for its definition separators).
CODE_LANGUAGES: dict[str, tuple[str, str | None]] = {
    ".py": ("python", "python"), ".js": ("javascript", "js"), ".mjs": ("javascript", "js"),
    ".jsx": ("javascript", "js"), ".ts": ("typescript", "ts"), ".tsx": ("typescript", "ts"),
    ".go": ("go", "go"), ".java": ("java", "java"), ".kt": ("kotlin", "kotlin"), ".rs": ("rust", "rust"),
    ".c": ("c", "c"), ".h": ("c", "c"), ".cc": ("cpp", "cpp"), ".cpp": ("cpp", "cpp"), ".hpp": ("cpp", "cpp"),
    ".cs": ("csharp", "csharp"), ".rb": ("ruby", "ruby"), ".php": ("php", "php"),
    ".swift": ("swift", "swift"), ".scala": ("scala", "scala"), ".lua": ("lua", "lua"),
    ".sh": ("bash", None), ".bash": ("bash", None),
    ".sql": ("sql", None),
}  # fmt: skip
# Where a language's top-level definitions begin, for the languages langchain-text-splitters has no list for.
_DEFINITIONS = {
    "bash": re.compile(r"^(?:function\s+)?[\w-]+\s*\(\)\s*\{?|^function\s+[\w-]+", re.M),
    "sql": re.compile(
        r"^(?:create|alter|drop|insert|update|delete|select|with|grant|revoke|comment|do)\b", re.I | re.M
    ),
}
_CONTROL_FLOW = frozenset({"if", "for", "while", "switch", "case", "do", "loop", "match", "else", "try"})


def code_to_markdown(path: Path, text: str) -> tuple[dict[str, Any], str]:
    """A source file split at its top-level definitions (functions, classes, types; statements for SQL),
    each a section headed by its first line and fenced in its language, so a search finds the function
    and a chunk holds whole ones where they fit. What comes before the first definition (imports, the
    module's docstring) opens the file."""
    fence_language, splitter_language = CODE_LANGUAGES[path.suffix.lower()]
    starts = sorted({match.start() for match in _definition_starts(text, fence_language, splitter_language)})
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    fence = "~~~~" if "```" in text else "```"
    parts: list[str] = []
    for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
        piece = text[start:end].strip("\n")
        if not piece.strip():
            continue
        first = piece.lstrip().split("\n", 1)[0].strip()
        if start > 0 or _is_definition(first, fence_language, splitter_language):
            parts.append(f"## {first[:120]}")
        parts.append(f"{fence}{fence_language}\n{piece}\n{fence}")
    return {"language": fence_language}, "\n\n".join(parts)


def _definition_starts(
    text: str, fence_language: str, splitter_language: str | None
) -> Iterable[re.Match[str]]:
    if splitter_language is None:
        return _DEFINITIONS[fence_language].finditer(text)
    return re.finditer(f"^(?:{'|'.join(map(re.escape, _keywords(splitter_language)))})\\b", text, re.M)


def _is_definition(line: str, fence_language: str, splitter_language: str | None) -> bool:
    if splitter_language is None:
        return bool(_DEFINITIONS[fence_language].match(line))
    return line.split(" ", 1)[0] in _keywords(splitter_language)


def _keywords(language: str) -> Sequence[str]:
    """The keywords that open a top-level definition in `language`: langchain-text-splitters' separators
    that start a line, without control flow."""
    from langchain_text_splitters import Language, RecursiveCharacterTextSplitter

    separators = RecursiveCharacterTextSplitter.get_separators_for_language(Language(language))
    words = [s[1:].strip() for s in separators if s.startswith("\n") and s[1:2].isalpha()]
    return [word for word in words if word and word.split()[0] not in _CONTROL_FLOW]


# --- shared --------------------------------------------------------------------------------------------


def _table(rows: Sequence[Sequence[str]]) -> str:
    """Rows as markdown tables, the first row the header: in blocks of about TABLE_BLOCK_CHARS, each under
    the header again, so every chunk of a long table says what its columns are."""
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    cells = [[_cell(value) for value in [*row, *[""] * (width - len(row))]] for row in rows]
    header = "| " + " | ".join(cells[0]) + " |\n|" + "---|" * width
    blocks, block, size = [], [header], 0
    for row in cells[1:]:
        line = "| " + " | ".join(row) + " |"
        if size and size + len(line) > TABLE_BLOCK_CHARS:
            blocks.append("\n".join(block))
            block, size = [header], 0
        block.append(line)
        size += len(line)
    blocks.append("\n".join(block))
    return "\n\n".join(blocks)


def _cell(value: str) -> str:
    return " ".join(str(value).split()).replace("|", "\\|")


def _titled(title: str | None) -> dict[str, Any]:
    """A format's own title as metadata (none if it has none: then the loader titles the file)."""
    title = (title or "").strip()
    return {"title": title} if title else {}


def _joined(parts: Iterable[str]) -> str:
    return "\n\n".join(part for part in parts if part.strip())
