"""AsciiDoc (Asciidoctor, Antora) as markdown: the words its rendered page shows.

Section titles (`== Setup`) become headings; listing and literal blocks (`----`, `....`, with `[source,ruby]`)
become fences in their language; comments (`//`, `////`), passthrough blocks (`++++`, raw output) and
preprocessor lines (`ifdef::x[]`) go; other blocks' delimiters and attribute lines (`[NOTE]`, `[#id]`,
`[[anchor]]`) go and their content stays; a block title (`.Gemfile`) and an admonition (`TIP: ...`) keep
their words. Inline macros show their text (`link:url[text]`, `xref:page.adoc[text]`, `<<id,text>>`,
`image:x.png[alt]`, `kbd:[Ctrl+C]`, `footnote:[text]`), attribute references take the values the document
sets (`{project-name}`), and `include::file[]` says what it stands for, as other includes do. Code, in a
block or between backticks, is never touched. One pass over the lines, each read a bounded number of times.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_retrieval.ingest import sitemarkup

_HEADING = re.compile(r"(=+)[ \t]+(\S.*?)(?:[ \t]+=+)?[ \t]*$")
# A delimited block's line: four or more of one mark (two for an open block), or a table's `|===`.
_DELIMITER = re.compile(r"(-{4,}|\.{4,}|\+{4,}|/{4,}|={4,}|\*{4,}|_{4,}|--|\|={3,}|`{3,}[\w-]*)[ \t]*$")
_VERBATIM = {"-": "code", ".": "code", "`": "code", "+": "raw", "/": "comment"}
_ATTRIBUTE = re.compile(r":(!?)([\w-]+)(!?):(?:[ \t]+(.*))?$")
_BLOCK_ATTRIBUTES = re.compile(r"\[\[?([^\[\]\n]*)\]\]?[ \t]*$")
_BLOCK_TITLE = re.compile(r"\.([^ \t.].*)$")
_ADMONITIONS = ("NOTE", "TIP", "IMPORTANT", "WARNING", "CAUTION")
_ADMONITION = re.compile(rf"({'|'.join(_ADMONITIONS)}):[ \t]+")  # `TIP: ...`, a paragraph's label
_PREPROCESSOR = re.compile(r"(?:ifdef|ifndef|ifeval|endif)::[^\[\n]*\[[^\]\n]*\][ \t]*$|toc::\[\][ \t]*$")
_INCLUDE = re.compile(r"include::([^\[\n]+)\[[^\]\n]*\][ \t]*$")
_LIST_ITEM = re.compile(r"([ \t]*)(?:\*+|-|\.+)[ \t]+(?=\S)")
_TERM = re.compile(r"(\S.*?)(?::{2,4}|;;)(?:[ \t]+(.*))?$")  # `Purpose::`, `:context:: definition`
_CONTINUATION = re.compile(r"[ \t]\+$")
_CODE_SPAN = re.compile(r"(`[^`\n]+`)")
# What links or shows something, as its text: an inline macro (its name, target and bracketed text; none
# after a backslash, which makes it literal), a URL or an attribute holding one (`{url-org}/x[text^]`) where
# a word starts, or a cross reference (`<<id,text>>`). A target is at most MAX_TARGET characters and a text
# stops at the next bracket: from every possible start, a scan to the line's end was quadratic.
MAX_TARGET = 300
_LINKING = re.compile(
    r"(?<![\\\w])(?P<name>link|mailto|xref|image|kbd|btn|menu|footnote|pass|icon|anchor|indexterm2?):{1,2}"
    rf"(?P<target>[^\s\[\]]{{0,{MAX_TARGET}}})\[(?P<text>[^\[\]\n]*)\]"
    r"|(?<![^\s(])(?P<url>(?:https?://|\{[\w-]+\})[^\s\[\]]*)\[(?P<label>[^\[\]\n]*)\]"
    r"|<<(?P<id>[^,<>\n]+)(?:,[ \t]*(?P<title>[^<>\n]+))?>>"
)
_ROLE = re.compile(r"\[[.#][^\[\]\n]*\]#([^#\n]+)#")  # `[.class]#styled text#`
_ANCHOR = re.compile(r"\[\[[^\[\]\n]*\]\]|\[#[^\[\]\n]*\]")
_REFERENCE = re.compile(r"(?<!\\)\{([\w-]+)\}")
_BUILT_IN = {"nbsp": " ", "sp": " ", "empty": "", "zwsp": "", "amp": "&", "lt": "<", "gt": ">", "quot": '"'}


@dataclass
class _Attributes:
    """The values a document sets, and how much text its references may still add: a reference is replaced
    once and never expanded again, and all of them together add at most the document's own size (a short
    value referenced thousands of times would otherwise make a page many times its file)."""

    budget: int
    values: dict[str, str] = field(default_factory=lambda: dict(_BUILT_IN))

    def resolve(self, found: re.Match[str]) -> str:
        value = self.values.get(found.group(1))
        if value is None or len(value) > self.budget:
            return found.group(0)
        self.budget -= len(value)
        return value


def to_markdown(path: Path, text: str) -> tuple[dict[str, Any], str]:
    """AsciiDoc as metadata (its `description` and `keywords` attributes) and markdown."""
    attributes = _Attributes(budget=len(text))
    metadata: dict[str, Any] = {}
    out: list[str] = []
    verbatim: tuple[str, str] | None = None  # an open listing, comment or passthrough: its closing line, kind
    language = ""  # of the next listing, from `[source,ruby]`
    for line in text.split("\n"):
        if verbatim is not None:
            if line.rstrip() == verbatim[0]:
                out.extend(["```"] if verbatim[1] == "code" else [])
                verbatim = None
            elif verbatim[1] == "code":
                out.append(_included(line, code=True) or line)
            continue
        if delimiter := _DELIMITER.match(line):
            mark = delimiter.group(1)
            kind = _VERBATIM.get(mark[0], "") if mark != "--" else ""
            if kind:
                verbatim = (mark if mark[0] != "`" else "```", kind)
                fence_language = mark.lstrip("`") if mark[0] == "`" else ""
                out.extend([f"```{language or fence_language}"] if kind == "code" else [])
            language = ""
            continue
        if line.startswith("//"):  # a comment line
            continue
        if attribute := _ATTRIBUTE.match(line):
            _set(attribute, attributes, metadata)
            continue
        if block := _BLOCK_ATTRIBUTES.match(line):
            language = _language(block.group(1)) or language
            style = block.group(1).split(",")[0].strip().upper()
            out.extend([f"{style.capitalize()}:"] if style in _ADMONITIONS else [])
            continue
        if _PREPROCESSOR.match(line) or line.strip() == "+":
            continue
        out.append(_included(line, code=False) or _shown(line, attributes))
    if verbatim is not None and verbatim[1] == "code":
        out.append("```")  # a listing left open runs to the end, as Asciidoctor reads it
    return metadata, "\n".join(out)


def _set(attribute: re.Match[str], attributes: _Attributes, metadata: dict[str, Any]) -> None:
    """An attribute entry: `:name: value` sets it, `:name!:` or `:!name:` unsets it."""
    name, value = attribute.group(2), (attribute.group(4) or "").strip()
    if attribute.group(1) or attribute.group(3):
        attributes.values.pop(name, None)
        return
    attributes.values[name] = value
    if name in ("description", "keywords") and value:
        metadata[name] = value


def _language(attributes: str) -> str:
    """A listing's language from its attribute line: `[source,ruby]` or `[,ruby]`."""
    parts = [part.strip() for part in attributes.split(",")]
    return parts[1] if len(parts) > 1 and parts[0] in ("source", "") and parts[1].isidentifier() else ""


def _included(line: str, *, code: bool) -> str | None:
    """An `include::file[]` line as what it stands for ("(Code from file.)" in a listing); else None."""
    found = _INCLUDE.match(line)
    return sitemarkup.placeholder(found.group(1).strip(), code=code) if found else None


def _shown(line: str, attributes: _Attributes) -> str:
    """A line outside blocks as its page shows it: a heading as markdown's, a list item's mark, an
    admonition's label and a term's colons as words, and its inline macros and references outside code."""
    if heading := _HEADING.match(line):
        return "#" * min(len(heading.group(1)), 6) + " " + _inline(heading.group(2), attributes)
    if title := _BLOCK_TITLE.match(line):
        return _inline(title.group(1), attributes)
    if admonition := _ADMONITION.match(line):
        line = f"{admonition.group(1).capitalize()}: {line[admonition.end() :]}"
    elif item := _LIST_ITEM.match(line):
        line = f"{item.group(1)}- {line[item.end() :]}"
    elif (term := _TERM.match(line)) and "`" not in term.group(1):
        line = f"{term.group(1)}: {term.group(2) or ''}".rstrip()
    return _inline(_CONTINUATION.sub("", line), attributes)


def _inline(text: str, attributes: _Attributes) -> str:
    """Text outside code with its references' values, entities decoded and anchors gone; then each link or
    macro that starts outside code as its text (its text may hold code: `xref:cli.adoc[`asciidoctor`]`)."""
    parts = _CODE_SPAN.split(text)  # odd parts are code spans, left as written
    for index in range(0, len(parts), 2):
        part = _REFERENCE.sub(attributes.resolve, _ROLE.sub(r"\1", _ANCHOR.sub("", parts[index])))
        parts[index] = html.unescape(part) if "&" in part else part
    text = "".join(parts)
    return sitemarkup.sub_outside(
        _LINKING, _linked, text, [span.span() for span in _CODE_SPAN.finditer(text)]
    )


def _linked(found: re.Match[str]) -> str:
    if found.group("url") is not None:
        return found.group("label").rstrip("^") or found.group("url")
    if found.group("id") is not None:
        return found.group("title") or found.group("id")
    return _macro(found.group("name"), found.group("target"), found.group("text").strip())


def _macro(name: str, target: str, text: str) -> str:
    if name == "menu":
        return " > ".join([target, *(item.strip() for item in text.split(">") if item.strip())])
    if name in ("image", "icon"):
        return text.split(",")[0].strip()  # the alt text: what a reader of the page is told
    if name in ("anchor", "indexterm"):
        return ""
    return text.rstrip("^") or target  # "^": opens in a new window
