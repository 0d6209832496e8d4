"""Real documents of each generator and format reach the store whole: tests/data/real (LICENSES.md there)."""

from __future__ import annotations

import collections
import io
import re
import sys
import tracemalloc
import zipfile
from pathlib import Path

import pytest
from lxml import html as lxml_html

from agent_retrieval.errors import InvalidRequest
from agent_retrieval.ingest import chunk_document, formats
from agent_retrieval.ingest.loaders import (
    SUPPORTED_SUFFIXES,
    _first_heading,
    load_documents,
    load_file,
    tidy_markdown,
)

REAL = Path(__file__).resolve().parents[1] / "data" / "real"


def words(text: str) -> collections.Counter[str]:
    return collections.Counter(re.findall(r"\w+", text.lower()))


def page_words(page: Path, main: str) -> collections.Counter[str]:
    """The words of a page's main text as lxml reads them, the page's navigation left out by hand."""
    tree = lxml_html.parse(str(page)).getroot()
    for chrome in tree.xpath("//script|//style|//nav|//table[@class='nav']|//div[@class='toc']"):
        chrome.drop_tree()
    for block in tree.iter("p", "div", "li", "pre", "td", "th", "dt", "dd", "h1", "h2", "h3", "h4", "br"):
        block.tail = "\n" + (block.tail or "")
        block.text = "\n" + (block.text or "")
    return words(tree.xpath(main)[0].text_content())


def kept(reference: collections.Counter[str], stored: str) -> float:
    have = words(stored)
    return sum(min(n, have[w]) for w, n in reference.items()) / sum(reference.values())


@pytest.mark.parametrize(
    ("page", "main"),
    [
        ("zlib-how.html", "//body"),  # hand-written: prose between <pre> blocks, outside any <p>
        ("libffi-closures.html", "//div[@class='section']"),  # texinfo
        ("valgrind-quick-start.html", "//body"),  # docbook
        ("node-path.html", "//div[@id='apicontent']"),  # Node's doc tool
        ("rust-E0382.html", "//main"),  # mdBook
    ],
)
def test_html_keeps_every_word_of_a_real_pages_main_text(page, main):
    doc = load_file(REAL / page, "page")[0]
    assert kept(page_words(REAL / page, main), doc.content) >= 0.98
    assert not re.search(
        r"[¶§]|\\[_*#]|<(?:div|span|a)\b", doc.content
    )  # no permalink marks, escapes or tags


def test_html_keeps_the_prose_after_code_and_a_preprocessor_line_stays_code():
    doc = load_file(REAL / "zlib-how.html", "zlib-how")[0]
    assert "buffers sizes on the order of 128K or 256K bytes should be used" in " ".join(doc.content.split())
    chunks = chunk_document(doc)
    assert not any("define" in c.heading_path or c.heading_path.endswith("else") for c in chunks)
    assert "#  define SET_BINARY_MODE(file) setmode(fileno(file), O_BINARY)" in doc.content
    fenced = re.findall(r"```[^\n]*\n(.*?)\n```", doc.content, re.S)
    assert any("#  define SET_BINARY_MODE" in block for block in fenced)
    assert "Z_OK" in doc.content and "Z\\_OK" not in doc.content


def test_html_headings_of_generated_pages_become_sections_without_their_marks():
    paths = {c.heading_path for c in chunk_document(load_file(REAL / "node-path.html", "path")[0])}
    assert "Path | Node.js v20.20.2 Documentation > Path > Windows vs. POSIX" in paths
    assert all("#" not in path for path in paths)
    quick = {c.heading_path for c in chunk_document(load_file(REAL / "valgrind-quick-start.html", "q")[0])}
    assert any(path.endswith("5. Caveats") for path in quick)  # docbook's headings sit in title divs


def test_markdown_badges_leave_the_stored_text_and_setext_titles_name_the_file():
    readme = load_file(REAL / "git-readme.md", "git")[0]
    assert readme.title == "Git - fast, scalable, distributed revision control system"
    assert "![" not in readme.content and "badge.svg" not in readme.content
    testing = load_file(REAL / "zstd-testing.md", "zstd")[0]
    assert {c.heading_path for c in chunk_document(testing)} >= {
        "Testing > Short Tests",
        "Testing > Long Tests",
    }


def test_plain_text_underlined_headings_become_sections_and_a_rule_under_prose_does_not():
    spec = load_file(REAL / "dpkg-triggers.txt", "dpkg-triggers")[0]
    assert spec.title == "TRIGGERS"
    answer = next(c for c in chunk_document(spec) if "It is not defined in what order" in c.content)
    assert answer.heading_path == "TRIGGERS > Timing guarantees, races, etc."
    ruled = "Notes\n\nA long paragraph whose last line is followed by a rule\n-----\n\nMore text.\n"
    assert formats.text_to_markdown(Path("n.txt"), ruled)[1] == ruled


def test_a_word_document_keeps_its_headings_lists_and_text():
    doc = load_file(REAL / "systemd-porting.docx", "porting")[0]
    assert doc.title == "Porting systemd To New Distributions"
    assert "### Compilation options" in doc.content and "- -Drootprefix=" in doc.content
    source = (REAL / "systemd-porting.docx").stat().st_size and doc.content
    assert "-fstack-protector-strong" in source


def test_a_presentation_keeps_each_slides_title_and_text():
    doc = load_file(REAL / "pyyaml-readme.pptx", "pyyaml")[0]
    assert doc.content.startswith("## PyYAML")
    assert "If you don’t trust the input YAML stream, you should use:" in doc.content
    assert ">>> yaml.safe_load(stream)" in doc.content


def test_a_spreadsheet_and_a_csv_file_stay_tables_whose_every_block_has_its_header():
    sheet = load_file(REAL / "debian-releases.xlsx", "debian")[0].content
    assert sheet.startswith("## debian\n\n| version | codename | series | created | release | eol |")
    assert (
        "| 12 | Bookworm | bookworm | 2021-08-14 | 2023-06-10 | 2026-07-11 | 2028-06-30 | 2033-06-30 |"
        in sheet
    )
    table = load_file(REAL / "ubuntu-releases.csv", "ubuntu")[0]
    blocks = table.content.split("\n\n")
    assert len(blocks) > 1 and all(block.startswith("| version | codename |") for block in blocks)
    assert "| 20.04 LTS | Focal Fossa | focal |" not in table.content  # past the 25 lines kept
    assert "| 8.04 LTS | Hardy Heron | hardy |" in table.content


def test_a_notebook_keeps_markdown_and_code_and_leaves_outputs_out():
    doc = load_file(REAL / "nbconvert-test.ipynb", "nb")[0]
    assert doc.title == "nbconvert latex test"
    assert "## Printed Using Python" in doc.content and 'print("hello")' in doc.content
    assert "image/png" not in doc.content and "iVBOR" not in doc.content  # an output's embedded image


def test_json_becomes_an_outline_titled_by_its_title():
    doc = load_file(REAL / "jupyterlab-notebook-settings.json", "settings")[0]
    assert doc.title == "Notebook"
    assert "# properties" in doc.content and "## scrollPastEnd" in doc.content
    assert "title: Scroll past last cell" in doc.content


@pytest.mark.parametrize(
    ("name", "sections"),
    [
        (
            "textwrap.py",
            ["class TextWrapper:", "def dedent(text):", "def indent(text, prefix, predicate=None):"],
        ),
        ("git-https-client.go", ["type Client struct {", "func (c *Client) Run() error {"]),
        ("gzlog.h", []),  # a header of declarations: one section, fenced
        ("hstore-upgrade.sql", ["DO LANGUAGE plpgsql"]),
    ],
)
def test_source_code_is_split_at_its_definitions_and_stays_code(name, sections):
    doc = load_file(REAL / name, "code")[0]
    assert doc.title == name and doc.metadata["language"]
    headings = [c.heading_path.removeprefix(f"{name} > ") for c in chunk_document(doc)]
    for section in sections:
        assert section in headings
    assert (REAL / name).read_text().strip("\n").split("\n")[0] in doc.content
    assert not any("#" in h for h in headings if h != name)  # a comment line in code is not a heading


def test_a_format_whose_extra_is_missing_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "docx", None)  # as if python-docx were not installed
    with pytest.raises(
        InvalidRequest, match=r"needs the 'docx' extra: pip install 'agent-retrieval\[docx\]'"
    ):
        load_file(REAL / "systemd-porting.docx", "porting")


def test_an_office_file_that_unzips_past_the_bound_is_refused_by_name(tmp_path, monkeypatch):
    bomb = tmp_path / "bomb.docx"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", "0" * 2_000_000)
    monkeypatch.setattr(formats, "MAX_UNPACKED_BYTES", 1_000_000)
    with pytest.raises(InvalidRequest, match=r"bomb.docx: unpacks to .* split it"):
        load_file(bomb, "bomb")
    broken = tmp_path / "broken.xlsx"
    broken.write_bytes(b"not a zip")
    skipped: list[str] = []
    assert list(load_documents([tmp_path], skipped=skipped)) == []
    assert any("broken.xlsx: not a readable .xlsx file" in line for line in skipped)


def _claiming(archive: bytes, name: str, size: int) -> bytes:
    """`archive` with its local and central headers claiming `size` unpacked bytes for member `name`."""
    data = bytearray(archive)
    claimed = size.to_bytes(4, "little")
    for signature, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        start = data.index(signature)
        while name.encode() not in data[start : start + 120]:
            start = data.index(signature, start + 4)
        data[start + at : start + at + 4] = claimed
    return bytes(data)


@pytest.mark.parametrize("claimed", [100, 2**32 - 1], ids=["understated", "overstated"])
def test_an_office_part_is_counted_as_it_unpacks_whatever_its_zip_claims(tmp_path, monkeypatch, claimed):
    """Who sets it: a document's author, in the zip's directory. What bounds it: the bytes counted as each
    part unpacks (MAX_UNPACKED_BYTES in all), so memory stays near the bound whatever the directory says."""
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", "<w:t>" + "0" * 40_000_000 + "</w:t>")
    liar = tmp_path / "liar.docx"
    liar.write_bytes(_claiming(packed.getvalue(), "word/document.xml", claimed))
    monkeypatch.setattr(formats, "MAX_UNPACKED_BYTES", 1_000_000)
    pytest.importorskip("docx")  # imported before tracing: a first import's own memory is not the file's
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRequest, match=r"liar\.docx: (unpacks to over|not a readable)"):
            load_file(liar, "liar")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5 * 1_000_000 + len(packed.getvalue()) * 3  # the bound and the file's own bytes, not 40 MB


def test_every_format_is_supported_in_a_folder(tmp_path):
    for file in REAL.iterdir():
        if file.suffix != ".md" or file.name != "LICENSES.md":
            (tmp_path / file.name).write_bytes(file.read_bytes())
    skipped: list[str] = []
    unsupported: list[Path] = []
    loaded = list(load_documents([tmp_path], skipped=skipped, unsupported=unsupported))
    assert not unsupported
    assert skipped == [  # a page that only includes another file is no document: said by name
        f"{tmp_path / 'pytest-contributing.rst'}: only takes in ../../CONTRIBUTING.rst (a document never "
        "reads another file): ingest that file itself"
    ]
    assert {Path(p).suffix for p in (d.source for d in loaded)} >= {
        ".html",
        ".md",
        ".mdx",
        ".docx",
        ".pptx",
        ".xlsx",
        ".csv",
        ".ipynb",
        ".json",
        ".py",
        ".go",
        ".h",
        ".sql",
    }
    assert set(formats.CODE_LANGUAGES) <= set(SUPPORTED_SUFFIXES)


def test_a_projects_dependency_folders_are_not_its_documents(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\nHow to deploy.\n")
    (tmp_path / "node_modules" / "left-pad").mkdir(parents=True)
    (tmp_path / "node_modules" / "left-pad" / "index.js").write_text("function leftPad(s) { return s }\n")
    (tmp_path / "venv" / "lib").mkdir(parents=True)
    (tmp_path / "venv" / "lib" / "site.py").write_text("def main():\n    pass\n")
    assert [d.id for d in load_documents([tmp_path])] == ["docs/guide"]
    assert [d.id for d in load_documents([tmp_path / "node_modules"])] == ["left-pad/index"]  # named: read


def test_one_rule_tells_code_from_prose_for_sections_titles_and_escapes():
    """A fence closes only at a fence as long as its opening: a ```` block showing a ``` example stays code
    whole (tidy_markdown closed it at the inner ``` and unescaped the example's lines)."""
    text = "````md\n```\n\\# not a heading: Z\\_OK\n```\n````\n\n# Real title\n\nZ\\_OK in prose"
    tidied = tidy_markdown(text)
    assert "\\# not a heading: Z\\_OK" in tidied and tidied.endswith("Z_OK in prose")
    assert _first_heading(tidied) == "Real title"
    assert [h for h, _ in formats.markdown_sections(text)] == [[], ["Real title"]]


# --- Sphinx as its authors meant it ------------------------------------------------------------------------


def test_sphinx_entries_keep_their_name_options_and_description_and_roles_show_their_text():
    """A real Sphinx page (its opening and the figure-numbering settings): each `confval` keeps its name as
    a heading, its type and default, its description and version note; roles read as the words they show;
    no docutils message is stored."""
    [page] = load_file(REAL / "sphinx-configuration.rst", "configuration")
    text = page.content
    assert "### numfig\n\nType: bool. Default: False." in text
    assert "figures, tables and code-blocks are automatically numbered" in text
    assert "Added in version 1.3." in text
    assert "The configuration directory must contain a file named conf.py." in text
    assert "'code-block': 'Listing %s'," in text  # the code-block stays code, verbatim
    assert not re.search(r"\((?:INFO|WARNING|ERROR|SEVERE)/\d\)|:\w+:`|\.\. \w+::", text)
    headings = {chunk.heading_path for chunk in chunk_document(page)}
    assert "Configuration > Options for figure numbering > numfig" in headings  # an entry is a section


def test_code_inside_a_definition_list_stays_fenced_code():
    """A real Sphinx FAQ entry: a term whose definition holds a code-block. Flattened, the template tags
    and HTML read as prose, without their lines' indentation."""
    [page] = load_file(REAL / "sphinx-faq-analytics.rst", "faq")
    text = page.content
    assert "Google Analytics\n\nYou can use a custom `layout.html` template, like this:" in text
    assert '```html+jinja\n{% extends "!layout.html" %}\n\n{%- block extrahead %}' in text
    assert "  _gaq.push(['_trackPageview']);\n</script>\n{% endblock %}\n```" in text
    assert "See sphinx-wiki, a project by Kevin Dunn." in text


def test_myst_directives_and_roles_read_as_the_built_page_shows_them():
    """A real page of Click's MyST docs: roles show their words, `eval-rst` is read as reStructuredText (an
    extension's example keeps its code's indentation), notes and version notes are text, the table of
    contents and the reference label are left out, and no MyST mark is stored."""
    [page] = load_file(REAL / "click-options.md", "options")
    text = page.content
    assert (
        "accomplished with the option\ndecorator. At runtime the decorator invokes the Option class" in text
    )
    assert "distinct from positional arguments." in text
    assert "def echo(string_to_echo):\n    click.echo(string_to_echo)" in text
    assert "Added in version 4.0." in text
    assert "Note\nMulti-character short option names are not supported." in text
    assert not re.search(r"```\{|\{\w+\}`|\(options\)=|:depth:|currentmodule", text)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("page.rst", "Page\n====\n\n.. literalinclude:: ../src/app.py\n   :lines: 1-9\n"),
        ("page.md", "# Page\n\n```{literalinclude} ../src/app.py\n:lines: 1-9\n```\n"),
        ("page.md", "# Page\n\n{* ../src/app.py hl[3] *}\n"),
    ],
)
def test_a_file_taken_in_when_the_page_is_built_is_named_in_its_place(tmp_path, name, text):
    page = tmp_path / name
    page.write_text(text, encoding="utf-8")
    assert "(Code from ../src/app.py.)" in load_file(page, "page")[0].content


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("page.rst",
         "Page\n====\n\n.. testcode::\n\n   print(add(1, 2))\n\n"
         ".. only:: html\n\n   Shown on the web page.\n\n"
         ".. py:function:: add(a, b)\n\n   Adds two numbers.\n\n.. autosummary::\n\n   add\n"),
        ("page.md",
         "# Page\n\n```{testcode}\nprint(add(1, 2))\n```\n\n```{only} html\nShown on the web page.\n```\n\n"
         "```{py:function} add(a, b)\nAdds two numbers.\n```\n\n```{autosummary}\nadd\n```\n"),
    ],
)  # fmt: skip
def test_sphinx_directives_read_alike_in_restructuredtext_and_myst(tmp_path, name, text):
    """One list of Sphinx's directives for both: doctest's code is code, `only`'s body is shown without its
    builder tag, an API entry shows its signature and text, and an autosummary table is left out."""
    page = tmp_path / name
    page.write_text(text, encoding="utf-8")
    content = load_file(page, "page")[0].content
    assert re.search(r"```\w*\nprint\(add\(1, 2\)\)\n```", content)
    assert "Shown on the web page." in content and "html" not in content
    assert "add(a, b)" in content and "Adds two numbers." in content
    assert "autosummary" not in content and "\nadd\n" not in content


def test_a_fence_named_by_a_directive_myst_does_not_know_stays_code(tmp_path):
    """R Markdown's and Quarto's chunks look like MyST directives: their code must not become prose."""
    page = tmp_path / "analysis.md"
    page.write_text(
        "# Analysis\n\n```{r} echo=FALSE\nx <- c(1, 2)\n```\n\nThe mean is 1.5.\n", encoding="utf-8"
    )
    assert "```r\nx <- c(1, 2)\n```" in load_file(page, "analysis")[0].content


def test_a_directive_docutils_does_not_know_keeps_its_words_and_no_message_is_stored(tmp_path):
    page = tmp_path / "page.rst"
    page.write_text(
        "Page\n====\n\n.. frobnicate:: the widget\n   :level: 3\n\n"
        "   Frobnicating turns the widget twice.\n\n"
        "See :madeup:`Widgets <widgets>` and :py:func:`~pkg.mod.turn`.\n",
        encoding="utf-8",
    )
    text = load_file(page, "page")[0].content
    assert "the widget" in text and "Frobnicating turns the widget twice." in text
    assert "See Widgets and turn." in text
    assert "frobnicate" not in text and "Unknown directive" not in text and "/3)" not in text


def test_directives_nested_in_an_unknown_one_keep_their_words_at_any_depth(tmp_path):
    """Its body is dedented, not stripped (it may be code), so a directive inside it is met indented."""
    page = tmp_path / "page.rst"
    page.write_text(
        "Page\n====\n\n.. frobnicate:: the widget\n\n   .. tab:: Python\n\n      .. note:: Careful here.\n\n"
        "         Body text.\n",
        encoding="utf-8",
    )
    text = load_file(page, "page")[0].content
    assert "Python" in text and "Careful here." in text and "Body text." in text
    assert ".. " not in text


# --- static sites: front matter is the author's text, markup goes and its words stay ----------------------


def test_front_matter_that_speaks_to_readers_opens_the_text_and_a_page_of_it_alone_is_a_document():
    """Hugo's function pages define the function in `description`; its section pages are front matter only."""
    [function] = load_file(REAL / "hugo-trimsuffix.md", "trimsuffix")
    assert function.title == "strings.TrimSuffix"
    assert function.content.startswith(
        "Returns the given string, removing the suffix from the end of the string."
    )
    assert "```go-html-template" in function.content  # the example stays code
    # the syntax and return type its page shows; the redirects in `aliases` are addresses, not text
    assert "Syntax: `strings.TrimSuffix SUFFIX STRING`.\n\nReturns: `string`." in function.content
    assert "/functions/strings.trimsuffix" not in function.content
    [section] = load_file(REAL / "hugo-crypto-index.md", "crypto")
    assert section.content == "Use these functions to create cryptographic hashes."
    assert section.metadata["description"] == section.content  # and still a filterable field


@pytest.mark.parametrize(
    ("name", "kept", "gone"),
    [
        ("jest-architecture.md", ["If you are interested in learning more about how Jest works"],
         ["import LiteYouTubeEmbed", "<LiteYouTubeEmbed"]),
        ("typer-click.md", ["Note\n\nThis is historical information", "Typer used to depend on"], ["///"]),
        ("typer-app-dir.md",
         ["(Code from docs_src/app_dir/tutorial001_py310.py.)", "Config file doesn't exist yet"],
         ["{*", '<div class="termy">']),
        ("typer-exceptions.md",  # a terminal's output, which the site's script shows as HTML
         ["\u256d\u2500", "Traceback (most recent call last)", "/home/user/code/superapp/main.py:8 in main",
          'TypeError: can only concatenate str (not "int") to str', "```console\n$ uv run python main.py"],
         ["<font", "<b>", "&quot;"]),
        ("hugo-sigmoid.md", ["Zion National Park", "Sigmoid"], ["{{<", ">}}", "src="]),
        ("hugo-comments.md",
         ["Disqus comments require you set a single value", "`hugo`:\n\n```\n[services.disqus]\nshortname"],
         ["{{<", "{{</", ">}}"]),
        ("jekyll-history.md",
         ["## 4.4.1 / 2025-01-29", "Restore globbed path behavior", "([#9762](/issues/9762))"],
         ["{:", "{{", "}}"]),
        ("material-buttons.md",
         ["[Subscribe to our newsletter][Demo]\n", "\n[Send ][Demo]",
          "``` markdown title=\"Button\"\n[Subscribe to our newsletter](#){ .md-button }"],  # code as written
         ["[Demo]{ .md-button", "[Send :fontawesome-solid-paper-plane:][Demo]"]),
        ("material-inline-admonitions.md",
         [" inline end\n\nLorem ipsum\n", '    ``` markdown\n    !!! info inline end "Lorem ipsum"\n'],
         [":octicons-arrow-right-16:",
          '!!! info inline end "Lorem ipsum"\n\n        Lorem ipsum dolor sit amet, consectetur adipiscing']),
        ("material-content-tabs.md",  # an example of fences indented in tabs stays one example, as written
         ['``` title="Content tabs with code blocks"\n=== "C"\n\n    ``` c\n    #include <stdio.h>\n',
          '=== "C++"\n\n    ``` c++\n    #include <iostream>\n', "```\n\n\n\nC\n\n    ``` c\n"],
         ["#include \n"]),
        ("redux-thunks.mdx",  # a component's title, written as a template string in braces
         ['Detailed Explanation: Thunks, Connect, and "Container Components"\n\nHistorically'],
         ["<DetailedExplanation", "title={"]),
        ("jekyll-section-nav.html", ["Back", "Next"],  # an include: its labels, not its Liquid or its notes
         ["{%", "%}", "{{", "Map grabs the tutorials sections", "lets find where we are"]),
        ("jekyll-conf.md", ["JekyllConf", "## Featured"], ["{%", "%s%N", "{{"]),  # a date format in a tag
        ("jekyll-release.markdown",  # a link's target is a variable wrapped onto the next line
         ["invalid commands ([#1338](/issues/1338)).", "[strange excerpt bug in v1.1.0](/issues/1321), I'm"],
         ["{{", "}}", "site.repository"]),
        ("jekyll-tags-note.md",  # HTML code in markdown stays code; a link to a variable keeps its text
         ["place `{% raw %}` and\n    `{% endraw %}` tags around your code", "your own tags using plugins."],
         ["<code>", "{&#37;", "[plugins]("]),
        ("docsy-figure.md",  # a shortcode whose caption holds inline code
         ["docsy-diagrams.svg Mouse over the above image and click the `Edit` button!"],
         ["{{<", ">}}", "caption="]),
        ("redux-writing-tests.mdx",
         ["What You'll Learn\n\n- Recommended practices", "Info\n\nFor background on why",
          "import userReducer from '../features/users/userSlice'"],
         [":::"]),
        ("pydantic-base-model.md",  # mkdocstrings: the object referenced and the members its options list
         ["attributes.\n\nAPI reference: `pydantic.BaseModel`.\n\nMembers: `__init__`, `model_config`,",
          "`model_validate_strings`.\n\nAPI reference: `pydantic.create_model`."],
         [":::", "options:", "show_root_heading", "# explicit members list", "\n.BaseModel"]),
        ("pydantic-json-schema-notes.md",  # a title holding quotes runs to the line's last quote
         ['on the "jsonable" nature of JSON schema\n    Regarding'], ["!!!"]),
        ("rust-book-match.md",  # mdBook: a listing's caption, and the file its code is taken from
         ["A function that uses a `match` expression on an `Option<i32>`\n\n```rust\n"
          "(Code from ../listings/ch06-enums-and-pattern-matching/listing-06-05/src/main.rs.)\n```"],
         ["<Listing", "caption=", "{{#", ":here"]),
        ("gitbook-fiber-hooks.md",  # GitBook: a tab's and an example's title stay, the tags go
         ["Signature\n```go\nfunc (app *App) OnRoute(", "OnName Example\n```go\npackage main"],
         ["{%", "%}", "title="]),
        ("ts-eslint-pull-requests.mdx",  # an MDX comment is the author's note, never shown
         ["Must be one of the following:\n\n\n\n- `docs` - if you only change documentation"],
         ["{/*", "Keep this synchronized"]),
        ("foam-daily-notes.md",  # a wiki link shows its text, else the note it names
         ["See templates for more information.", "see CLI daily command."], ["[[", "]]"]),
        ("quartodoc-content.qmd",  # Quarto: pandoc's fenced divs (`::: {.column}`) are layout, not directives
         ["default option set.", "**Manual**\n\n```yaml\nquartodoc:\n",
          "we are telling quartodoc to not include"],
         [":::", "{.column", "```.column"]),
        ("quartodoc-callouts.qmd",  # a callout shows its title, else its kind
         ["Guide pages on each linking style\n\nHere are some examples",
          "Note\nThe code for the filter can be found"],
         [":::", "{.callout", "```.callout"]),
        ("attrs-api.rst",  # the default role's `text <target>` is a link where Sphinx's default_role is set
         ["the `attr` namespace is documented on a separate page."], ["<api-attr>"]),
        ("asciidoctor-extensions.adoc",  # a description list, cross references, a link an attribute holds
         ["# Extensions\n", "Asciidoctor provides an extension API that offers",
          "## Available extension points", "Preprocessor:\nProcesses the raw source lines",
          "See block-processor.adoc and compound-block-processor.adoc.",
          "Processes the Asciidoctor::Document (AST)", "(e.g., `btn:[Save]`)",  # code stays as written
          "examples in the Asciidoctor extensions lab."],
         ["xref:", "{url-", ":url-ext-lab:", "[.class]", "^]", "Preprocessor::"]),
        ("asciidoctor-api.adoc",
         ["(via AsciidoctorJ) and JavaScript (via Asciidoctor.js)", "then the `asciidoctor` CLI should",
          "## When to use the API", "```ruby\nrequire 'asciidoctor'\n"],
         ["xref:", "[#when-to-use]", "----", "[,ruby]"]),
        ("asciidoctor-include-processor.adoc",  # a literal block holding a listing; a TIP holding one
         ["Tip: Asciidoctor supports including content from a URI",
          "```asciidoc\n:source-highlighter: coderay\n\n.Gemfile\n[,ruby]\n----\n",
          "Tip:\nAs mentioned above", "```ruby\nAsciidoctor::Extensions.register do\n"],
         ["....", "====", "[TIP]", "TIP:"]),
    ],
)  # fmt: skip
def test_static_site_markup_is_read_as_the_words_a_reader_sees(name, kept, gone):
    [page] = load_file(REAL / name, name)
    for words in kept:
        assert words in page.content, words
    for markup in gone:
        assert markup not in page.content, markup


def test_a_page_opening_at_a_second_level_heading_is_titled_by_it(tmp_path):
    """An mdBook section's page starts at "##"; a page with a top-level heading further on is titled by it."""
    [section] = load_file(REAL / "rust-book-match.md", "ch06-02-match")
    assert section.title == "The `match` Control Flow Construct"
    page = tmp_path / "later.md"
    page.write_text("Some words first.\n\n## Aside\n\nMore.\n\n# The Title\n\nText.\n")
    assert load_file(page, "later")[0].title == "The Title"
    page.write_text("Some words first.\n\n## Aside\n\nMore.\n")
    assert load_file(page, "later")[0].title == "later"


def test_files_that_differ_only_in_suffix_are_two_documents(tmp_path):
    """pytest's docs keep `pythoncollection.py` beside the `pythoncollection.rst` that shows it: one id for
    both kept only the later file."""
    (tmp_path / "example").mkdir()
    (tmp_path / "example" / "collect.rst").write_text("Collecting\n==========\n\nHow tests are found.\n")
    (tmp_path / "example" / "collect.py").write_text("def test_found():\n    assert True\n")
    (tmp_path / "alone.md").write_text("# Alone\n\nNo sibling.\n")
    ids = sorted(d.id for d in load_documents([tmp_path]))
    assert ids == ["alone", "example/collect.py", "example/collect.rst"]


def test_tex_braces_and_code_in_a_quote_are_not_read_as_markup(tmp_path):
    """Hugo's docs: a formula's `_{c=1}` is no attribute list, and a template in a quoted fence stays code."""
    page = tmp_path / "math.md"
    page.write_text(
        "# Math\n\n$$\nKL = \\sum_{c=1}^{M} y_c\n$$\n\n"
        '> ```go-html-template {file="layouts/baseof.html"}\n> {{ if .IsNode }}\n> ```\n\nAfter.\n'
    )
    [document] = load_documents([page])
    assert "\\sum_{c=1}^{M}" in document.content
    assert '{file="layouts/baseof.html"}\n> {{ if .IsNode }}' in document.content


def test_an_html_page_template_keeps_its_front_matter_and_none_of_its_tags():
    """Jekyll's and Eleventy's pages: YAML front matter, then HTML full of Liquid that no reader sees."""
    [page] = load_file(REAL / "jekyll-showcase.html", "showcase")
    assert (page.title, page.content) == (
        "Showcase",
        "Jekyll powers many company websites; here are a few nice ones:",
    )
    assert page.metadata["permalink"] == "/showcase/"


def test_a_shortcode_shown_as_inline_code_stays_as_written(tmp_path):
    """Hugo's docs show shortcodes in inline code; only one that opens outside code is read as its words."""
    page = tmp_path / "figure.md"
    shown, used = '`{{< figure src="a.png" >}}`', '{{< figure caption="in `b`" >}}'
    page.write_text(f"# Figure\n\nWrite {shown}, as {used} shows.\n")
    [document] = load_file(page, "figure")
    assert document.content.endswith('Write `{{< figure src="a.png" >}}`, as in `b` shows.')


def test_asciidoc_attributes_and_includes_cost_no_more_than_the_page(tmp_path):
    """An attribute's value replaces its references once, and all of them add at most the file's size; an
    include says what it stands for (and a page of includes alone is refused, naming them)."""
    page = tmp_path / "big.adoc"
    page.write_text(
        f"= Big\n:v: {'x' * 500}\n\n{'{v} ' * 2000}\n\ninclude::partial$setup.adoc[]\n\n"
        "[,ruby]\n----\ninclude::example$main.rb[tags=run]\n----\n"
    )
    [document] = load_file(page, "big")
    assert len(document.content) <= 2 * page.stat().st_size
    assert document.content.count("x" * 500) > 0 and "{v}" in document.content
    assert "(Included from partial$setup.adoc.)" in document.content
    assert "```ruby\n(Code from example$main.rb.)\n```" in document.content
    only = tmp_path / "only.adoc"
    only.write_text("include::partial$man.adoc[]\n")
    with pytest.raises(InvalidRequest, match=r"only takes in partial\$man.adoc"):
        load_file(only, "only")


def test_restructuredtext_in_a_txt_file_is_read_as_restructuredtext(tmp_path):
    """Django's docs, and rst2beamer's manual here, keep their reStructuredText in .txt files; plain text
    stays plain, and text docutils cannot read stays as written."""
    [manual] = load_file(REAL / "rst2beamer-manual.txt", "manual")
    assert manual.content.startswith("# The rst2beamer manual\n\nThis manual is disgracefully incomplete.")
    assert "### In brief\n\nrst2beamer is a docutils script" in manual.content
    assert ".. warning::" not in manual.content and "~~~~" not in manual.content
    [plain] = load_file(REAL / "dpkg-triggers.txt", "triggers")
    assert plain.content.startswith("# TRIGGERS\n\n## Introduction\n\nA dpkg trigger is a facility")


def test_an_mdx_comment_over_several_lines_goes_and_one_shown_as_code_stays(tmp_path):
    page = tmp_path / "page.mdx"
    page.write_text(
        "# Page\n\nBefore {/* a note */} after.\n\n"
        "{/*\nTODO: rewrite this section\nand its `example`\n*/}\n\n"
        "Write a comment as `{/* note */}`.\n\n```jsx\n{/* in code */}\n```\n"
    )
    [document] = load_file(page, "page")
    assert "Before  after." in document.content and "TODO" not in document.content
    assert "`example`" not in document.content  # a comment's line holding code is still the comment's
    assert "Write a comment as `{/* note */}`." in document.content and "{/* in code */}" in document.content
