"""What Sphinx adds to reStructuredText, read as the text its authors wrote.

docutils alone knows none of Sphinx's directives and roles: a `.. confval::` entry became an error message
(and, dropped, lost its whole description), and a role (`:func:`load``) stayed markup beside a message
saying so. Here Sphinx's directives are read for their words: an entry (a setting, option, function, class
...) is a rubric naming it, its options ("Type: bool", "Default: False") a line, its content as written;
version notes say "Added in version 1.4"; code blocks stay code, an included file is named; tables of
contents and index entries, which hold no prose, are left out. Roles become the text they show. A directive
no one knows keeps its content as text.

Only the names below are registered with docutils (once, process-wide), never a name a document brings.
"""

from __future__ import annotations

import functools
import re
import textwrap
from typing import Any

from agent_retrieval.ingest.sitemarkup import placeholder

_DOMAINS = ("py", "js", "c", "cpp", "rst", "std", "http", "mongodb")
_KINDS = (
    "function", "class", "method", "attribute", "property", "data", "exception", "module", "decorator",
    "decoratormethod", "classmethod", "staticmethod", "type", "member", "macro", "var", "struct", "union",
    "enum", "enumerator", "concept", "namespace", "directive", "role", "option", "alias", "get", "post",
    "put", "delete", "patch",
)  # fmt: skip
DESCRIPTIONS = frozenset(
    {"confval", "option", "envvar", "describe", "object", "program", "cmdoption", "event", "setting"}
    | set(_KINDS)
    | {f"{domain}:{kind}" for domain in _DOMAINS for kind in _KINDS}
    | {"rst:directive:option"}
    | {f"auto{kind}" for kind in ("function", "class", "method", "attribute", "data", "exception", "module")}
)
VERSIONS = {
    "versionadded": "Added in version",
    "versionchanged": "Changed in version",
    "deprecated": "Deprecated since version",
    "versionremoved": "Removed in version",
}
CODE = frozenset(
    {"code-block", "sourcecode", "testcode", "testoutput", "testsetup", "testcleanup", "doctest"}
)  # sphinx.ext.doctest's hold code too
CONTENT = frozenset(
    {"seealso", "only", "hlist", "centered", "glossary", "productionlist", "tab", "tabs", "card"}
)
# Content directives whose argument the page does not show: `only`'s names the builders it is for (html)
UNSHOWN_ARGUMENT = frozenset({"only"})
NO_PROSE = frozenset(
    {"toctree", "index", "currentmodule", "highlight", "tabularcolumns", "autosummary", "default-role",
     "default-domain", "codeauthor", "sectionauthor", "moduleauthor", "graphviz", "inheritance-diagram",
     "todolist", "ifconfig"}
)  # fmt: skip
# A role's visible text: `text <target>` shows "text", `~pkg.mod.name` shows "name", `!name` shows "name".
_NESTED = re.compile(
    r"^([ \t]*)\.\. [\w:-]+::[ \t]*(.*)$"
)  # a directive inside one no one knows: its arguments
ROLE = re.compile(r"(?<![\w`]):(?:[a-z][\w+.-]*:)+`([^`]*)`")


def role_text(match: re.Match[str]) -> str:
    return visible(match.group(1))


def visible(text: str) -> str:
    """What a role's or a reference's text shows."""
    if text.endswith(">") and "<" in text:
        shown = text[: text.rindex("<")].strip()
        if shown:
            return shown
        text = text[text.rindex("<") + 1 : -1]
    text = text.lstrip("!")
    return text[1:].rsplit(".", 1)[-1] if text.startswith("~") else text


def shown(text: str) -> str:
    """Text with every role (`:func:`load``) as the words it shows."""
    return ROLE.sub(role_text, text)


class _AnyOption(dict[str, Any]):
    """An option_spec taking any option as text: a directive's options are its author's words."""

    def __bool__(self) -> bool:  # docutils reads options only where a directive has an option_spec
        return True

    def __missing__(self, name: str) -> Any:
        from docutils.parsers.rst import directives

        return directives.unchanged


@functools.cache
def register() -> None:
    """Sphinx's directives, registered with docutils once (names of this module only)."""
    from docutils import nodes
    from docutils.parsers.rst import Directive, directives

    class Described(Directive):  # type: ignore[misc]  # docutils ships no types
        """An entry: a rubric naming it (its signature), a line of its options, then its content."""

        optional_arguments = 50
        final_argument_whitespace = True
        has_content = True
        option_spec = _AnyOption()

        def run(self) -> list[Any]:
            signature = " / ".join(
                line.strip() for line in " ".join(self.arguments).split("\n") if line.strip()
            )
            result: list[Any] = [nodes.rubric("", shown(signature) or self.name)]
            described = [f"{name.replace('-', ' ').capitalize()}: {shown(str(value)).strip().rstrip('.')}"
                         for name, value in self.options.items() if value]  # fmt: skip
            if described:
                result.append(nodes.paragraph("", ". ".join(described) + "."))
            return result + self._content()

        def _content(self) -> list[Any]:
            holder = nodes.container()
            if self.content:
                self.state.nested_parse(self.content, self.content_offset, holder)
            return list(holder.children)

    class Version(Described):
        def run(self) -> list[Any]:
            version, _, said = " ".join(self.arguments).strip().partition(" ")  # "1.7 Added the option."
            lead = nodes.paragraph("", f"{VERSIONS[self.name]} {version}".strip())
            content = self._content()
            if said.strip():
                words, _ = self.state.inline_text(" ".join(said.split()), self.lineno)
                lead += [nodes.Text(": "), *words]
            elif content and isinstance(content[0], nodes.paragraph):
                content[0].insert(0, nodes.Text(lead.astext() + ": "))
                return content
            else:
                lead += nodes.Text(".")
            return [lead, *content]

    class Content(Described):
        def run(self) -> list[Any]:
            arguments = "" if self.name in UNSHOWN_ARGUMENT else " ".join(self.arguments).strip()
            return ([nodes.paragraph("", shown(arguments))] if arguments else []) + self._content()

    class Code(Described):
        def run(self) -> list[Any]:
            block = nodes.literal_block("", "\n".join(self.content))
            block["classes"] = ["code", *self.arguments[:1]]
            return [block]

    class Included(Described):
        def run(self) -> list[Any]:
            return [nodes.paragraph("", placeholder(" ".join(self.arguments), code=True))]

    class Left(Described):
        def run(self) -> list[Any]:
            return []

    kinds = [
        (DESCRIPTIONS, Described),
        (VERSIONS, Version),
        (CONTENT, Content),
        (CODE, Code),
        (NO_PROSE, Left),
    ]
    readers = {name: reader for names, reader in kinds for name in names} | {"literalinclude": Included}
    for name, reader in readers.items():
        if name not in directives._directive_registry:  # docutils' own (class, role, code ...) stay its own
            directives.register_directive(name, reader)


def unknown_directive_text(message: Any) -> str | None:
    """The words of a directive docutils did not know, from its error message's copy of the source: the
    arguments after `.. name::`, then the content; for an `include` (never run: a document reads no other
    file) a placeholder naming the file; None for any other message."""
    from docutils import nodes

    literal = next(iter(message.findall(nodes.literal_block)), None)
    if literal is None:
        return None
    first, _, rest = literal.astext().partition("\n")
    arguments = first.split("::", 1)[1].strip() if "::" in first else ""
    if '"include" directive disabled' in message.astext():
        return placeholder(arguments, code=False)
    if "Unknown directive type" not in message.astext():
        return None
    # dedented, not stripped: what an extension's directive holds may be code (Click's `click:example`)
    body = textwrap.dedent("\n".join(line for line in rest.split("\n") if not line.strip().startswith(":")))
    lines = [_NESTED.sub(r"\1\2", line) for line in body.split("\n")]
    return shown("\n".join([arguments, *lines]).strip())
