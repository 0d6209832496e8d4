"""MyST markdown (Sphinx's markdown: Click's, Jupyter Book's docs) read as its built pages show it.

A directive is a fence whose info string is `{name}` (```` ```{note} ````, `:::{warning}`), with an argument
after the name and options (`:caption: x`) at the top of its body. Code directives (`code-block`, `code`,
`sourcecode`) become plain fences with their language; `literalinclude` and `include` say what they stood for;
admonitions and version notes become their title and their text as prose, so nested directives in them are
read too; `eval-rst` bodies are read as reStructuredText (sphinx.py's directives and roles); directives that
only steer the build (`toctree`, `currentmodule`, `contents`, `index`) are left out; any text-bearing one
(figures, dropdowns, tabs, glossaries) keeps its argument and text; an unknown one stays code, as R Markdown's
and Quarto's ```` ```{r} ```` chunks are. Roles (`` {ref}`Title <target>` ``) read as the words they show, and
reference labels (`(options)=`) are left out. One pass over the lines, each read once; fences close as
CommonMark's do.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from agent_retrieval.ingest import sphinx
from agent_retrieval.ingest.sitemarkup import placeholder

_OPENING = re.compile(r"([ \t]*)(`{3,}|~{3,}|:{3,})(.*)$")
_NAMED = re.compile(r"[ \t]*\{(\w[\w:.+-]{0,79})\}(.*)$")  # what follows a directive's fence (not `{.class}`)
_OPTION = re.compile(r"[ \t]*:[\w-]{1,80}:(?:[ \t].*)?$")
_TARGET = re.compile(r"\([\w.:-]{1,200}\)=[ \t]*$")  # "(options)=": a label for references, not text
_ROLE = re.compile(r"(?<!`)\{([\w:.+-]{1,80})\}`([^`\n]{1,2000})`")
# Sphinx's directives are read as sphinx.py reads them in reStructuredText, from its lists; MyST adds its own.
CODE = sphinx.CODE | {"code", "code-cell"}
# Directives whose body is text; a name not known here is kept as code (R Markdown's and Quarto's ```{r}).
ADMONITIONS = frozenset(
    """
    note warning tip important caution danger attention hint error admonition todo
    figure dropdown tab-set tab-item grid grid-item-card topic sidebar rubric epigraph
    highlights pull-quote margin div container
    """.split()  # noqa: SIM905 - a list of names, as the other sets
)
PROSE = ADMONITIONS | sphinx.CONTENT | sphinx.DESCRIPTIONS
HIDDEN = sphinx.NO_PROSE | {"contents", "raw"}
INCLUDED = {"literalinclude": True, "include": False}  # each name: whether what it takes in is code


@dataclass
class _Open:
    fence: str  # the marks that opened it: a line of the same mark at least as long closes it
    kind: str  # "code": lines kept verbatim; "hidden": dropped; "rst": kept to read as rst; "prose"
    options: bool = True  # still at the top of the body, where `:option: value` lines go
    rst: list[str] | None = None


def read(text: str, rst_reader: Callable[[str], str]) -> str:
    """MyST's directives and roles in `text` as markdown; `rst_reader` renders an `eval-rst` body."""
    out: list[str] = []
    opened: list[_Open] = []
    for line in text.split("\n"):
        top = opened[-1] if opened else None
        if top is not None and _closes(line, top.fence):
            opened.pop()
            if top.kind == "code":
                out.append(_code_fence(top.fence, line))
            elif top.kind == "rst":
                out.append(rst_reader("\n".join(top.rst or [])))
            continue
        if top is not None and top.kind != "prose":
            if top.kind == "code" and not (top.options and _OPTION.match(line)):
                top.options = False
                out.append(line)
            elif top.rst is not None:
                top.rst.append(line)
            continue
        if top is not None and top.options:
            top.options = bool(_OPTION.match(line))
            if top.options:
                continue
        opening = _OPENING.match(line)
        named = _NAMED.match(opening.group(3)) if opening else None
        if opening is None or (named is None and opening.group(2)[0] == ":"):  # ":::" alone is text
            if not _TARGET.match(line):
                out.append(_ROLE.sub(_role, line) if "{" in line else line)
        elif named is None:  # a plain code fence: verbatim to its close
            opened.append(_Open(opening.group(2), "code", options=False))
            out.append(line)
        else:
            indent, fence = opening.group(1), opening.group(2)
            name, argument = named.group(1), named.group(2).strip()
            opened.append(_directive(name, fence))
            out.append(_shown(indent, name, argument, opened[-1]))
    return "\n".join(out)


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence) and not stripped.strip(fence[0])


def _code_fence(fence: str, line: str) -> str:
    """A code block's closing line: as written for a plain fence, a backtick fence for a directive's."""
    return line if fence[0] != ":" else line[: len(line) - len(line.lstrip())] + "```"


def _directive(name: str, fence: str) -> _Open:
    if name in CODE:
        return _Open(fence, "code")
    if name in HIDDEN or name in INCLUDED:
        return _Open(fence, "hidden")
    if name == "eval-rst":
        return _Open(fence, "rst", options=False, rst=[])
    return _Open(
        fence, "prose" if name in PROSE or name in sphinx.VERSIONS else "code", options=name in PROSE
    )


def _shown(indent: str, name: str, argument: str, opened: _Open) -> str:
    """The line a directive's opening becomes."""
    if opened.kind == "code":  # a code directive's language; an unknown directive's name as one
        marks = opened.fence if opened.fence[0] == "`" else "```"
        language = (argument.split()[0] if argument else "") if name in CODE else name
        return indent + marks + language
    if name in INCLUDED:
        return indent + placeholder(argument, code=INCLUDED[name]) if argument else ""
    if opened.kind != "prose":
        return ""
    if name in sphinx.VERSIONS:
        return f"{indent}{sphinx.VERSIONS[name]} {argument}".rstrip() + "."
    if name == "admonition":
        return indent + argument
    if name in sphinx.DESCRIPTIONS:  # an API entry: its signature, a paragraph of its own
        return indent + (sphinx.shown(argument) or name) + "\n"
    if name in sphinx.CONTENT:  # as sphinx.py shows them
        return "" if name in sphinx.UNSHOWN_ARGUMENT else indent + argument
    title = name.split(":")[-1].replace("-", " ").capitalize()
    return f"{indent}{title}: {argument}" if argument else indent + title


def _role(match: re.Match[str]) -> str:
    return sphinx.shown(f":{match.group(1)}:`{match.group(2)}`")
