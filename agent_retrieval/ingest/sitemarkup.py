"""What static-site generators add to markdown, read as the words a reader of the built page sees.

MkDocs Material's admonitions (`!!! note "Title"`, `??? tip`, `!!! info inline end "Title"`, `/// warning |
Title` ... `///`), content tabs (`=== "Tab"`), icons (`:octicons-tag-16:`) and snippet placeholders
(`{* ../docs_src/x.py hl[6] *}`, `--8<-- "file"`); Hugo's shortcodes (`{{< name "value" >}}`, `{{% name %}}`;
those that show code become fences); Liquid, Jinja, Eleventy and GitBook tags and variables
(`{% include x %}`, `{{ site.repository }}`, `{% comment %}` notes; `{% tab title="Python" %}` keeps its
title); Docusaurus' admonitions (`:::tip Title` ... `:::`) and Quarto's callouts; MDX imports, exports and
comments and JSX wrappers (`<Tabs>`, `<TabItem value="npm" label="npm">`: a component's title, label or
caption stays); attribute lists, Python-Markdown's and kramdown's (`## Setup { #setup .wide }`,
`[Go](#){ .md-button }`, `{: #v4-4-1}`); mkdocstrings' API references (`::: pydantic.BaseModel` and the
options under it); mdBook's includes (`{{#include listings/main.rs:here}}`); wiki links (`[[note|text]]`);
HTML tags and entities.
Wrappers and names go; titles, readable parameters and the text inside stay; a placeholder says what it
stood for. Code, fenced or inline, is never touched (the caller passes only prose), and each pattern stops
at the next mark that could open another, so a line is read a bounded number of times.
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# a type, then modifiers such as `inline end` or `annotate`, then the title
# (a title runs to the line's last quote: `!!! note "on the "jsonable" nature"`)
_ADMONITION = re.compile(
    r"[ \t]*(?:!!!|\?\?\?\+?)[ \t]*([\w-]+)(?:[ \t]+[\w-]+)*[ \t]*(?:\"([^\n]*)\")?[ \t]*$"
)
_COLON_FENCE = re.compile(r"[ \t]*:{3,}[ \t]*([\w-]*)(.*)$")  # Docusaurus: `:::tip Title` or `:::tip[Title]`
_CALLOUT = re.compile(r"\.callout-(\w+)")
_BLOCK_FENCE = re.compile(r"[ \t]*/{3,}[ \t]*([\w-]*)[ \t]*(?:\|[ \t]*(.*))?$")  # nested blocks: more "/"
_TAB = re.compile(r"[ \t]*===\+?[ \t]+\"([^\"\n]*)\"[ \t]*$")
_MDX = re.compile(
    r"(?:import[ \t][^\n]*[ \t]from[ \t]|import[ \t]+['\"]|export[ \t]+(?:default|const|function)\b)"
)
# A JSX component's tag alone on its line, and the title or label it shows (`title={`A "quoted" title`}`)
# (a quoted value may hold code with its own brackets: `caption="... an `Option<i32>`"`)
_COMPONENT = re.compile(
    r"[ \t]*<[A-Z][\w.]*(?:[ \t](?:\"[^\"\n]*\"|'[^'\n]*'|`[^`\n]*`|[^<>\"'`\n])*)?>[ \t]*$"
)
_SHOWN_ATTRIBUTE = re.compile(r"\b(?:title|label|caption)=\{?(?:`([^`\n]*)`|\"([^\"\n]*)\"|'([^'\n]*)')")
# MDX's comment (`{/* Keep this in step with ... */}`), on a line of its own or inside one; each try stops at
# the next opening, so a line of openings is read once
_MDX_COMMENT = re.compile(r"\{/\*(?:[^*{\n]|\*(?!/\})|\{(?!/\*))*\*/\}")
_SNIPPET = re.compile(r"\{\*([^*\n]*)\*\}|--8<--[ \t]*\"([^\"\n]*)\"")
# mdBook: a file's text (or the part an anchor or a line range names) in place of `{{#include path:anchor}}`;
# `{{#title ...}}` sets the page's title and shows nothing.
_BOOK_INCLUDE = re.compile(
    r"\{\{#(?:include|rustdoc_include|playground)[ \t]+([^\s{}:]+)[^{}\n]*\}\}|\{\{#title[^{}\n]*\}\}"
)
# mkdocstrings: `::: pydantic.BaseModel` stands for that object's reference, generated from its source; a
# dotted or underscored name tells it from an admonition (`::: tip`)
_API_REFERENCE = re.compile(r"([ \t]*):::[ \t]+([A-Za-z_]\w*(?:\.\w+)*)[ \t]*$")
_OPTION = re.compile(r"[ \t]*(?:-[ \t]+)?(\w+):")  # a key of the options under it
_MEMBER = re.compile(r"[ \t]*-[ \t]+(\w+)[ \t]*$")
_SHORTCODE = re.compile(r"\{\{([<%])([^<>%\n]*)[>%]\}\}")
# A date format's "%s" may be inside; a tag stops at the next "{%", so a line of them is read once, not once
# for each.
_TEMPLATE_TAG = re.compile(r"\{%-?(?:[^%{\n]|%(?!\})|\{(?!%))*%\}")
_COMMENT_MARK = re.compile(r"\{%-?[ \t]*(end)?comment[ \t]*-?%\}")
# A wiki link (Foam, Obsidian, MkDocs' roamlinks): `[[note]]`, `[[note|shown text]]`, an embed `![[x.png]]`
_WIKILINK = re.compile(r"!?\[\[([^\[\]|\n]+)(?:\|([^\[\]\n]*))?\]\]")
_EMPTY_LINK = re.compile(r"\[([^\[\]\n]*)\]\(\)")
_TEMPLATE_VARIABLE = re.compile(r"\{\{-?[ \t][^{}\n]*\}\}")  # `{{ site.x | relative_url }}`, not `{{<`
# not after `_`, `^`, `\` or a letter, where braces are TeX's (`\sum_{c=1}`)
_ATTRIBUTES = re.compile(r"(?<![\w\\^])\{(?::[^{}\n]*|[ \t]*(?:[#.][\w-]|[\w-]+=)[^{}\n]*)\}")
_ICON = re.compile(r":(?:octicons|material|fontawesome|simple)-[\w-]+:")
_PLACEHOLDER = re.compile(r"\((?:Code|Included) from ([^\n]*?)\.\)")  # as `placeholder` writes them
_QUOTED = re.compile(r"\"([^\"\n]*)\"")
_HTML_CODE = re.compile(r"<code(?:[ \t][^<>\n]*)?>([^<>`\n]*)</code>")  # shown as code, as a code span is
_TAG = re.compile(r"<!--[^<>\n]*-->|</?[A-Za-z][\w.:-]*(?:[ \t][^<>\n]*)?/?>")
# FastAPI's and Typer's docs fence a terminal's output inside `<div class="termy">`, and their script shows
# each line as HTML: Rich's colours are `<font color=...>` and `<b>` tags there, and quotes `&quot;`.
_DIV = re.compile(r"[ \t]*<div[ \t][^<>\n]*>[ \t]*$")
_CLASSES = re.compile(r"\bclass=\"([^\"\n]*)\"")
_TERMINAL_TAG = re.compile(r"</?(?:font|b|i|u|em|strong|span)\b[^<>\n]*>|<br[ \t]*/?>")
SHORTCODE_LINES = 20  # of one shortcode's parameters written a line each
# Front matter that is the author's text, and how a page shows it.
LEAD_FIELDS = ("description", "summary", "subtitle", "abstract", "excerpt", "lead")
WORD_FIELDS = ("keywords", "tags")


# Hugo's shortcodes that show code: their lines are code, fenced (`{{< highlight go >}}` -> "```go").
_CODE_SHORTCODE = re.compile(
    r"[ \t]*\{\{[<%][ \t]*(/?)[ \t]*(code-toggle|highlight|code)\b([^<>%\n]*)[>%]\}\}[ \t]*$"
)


def code_fence(line: str) -> list[str] | None:
    """A line that opens or closes one of Hugo's code shortcodes, as a markdown fence (led by the file it
    names, which the built page shows as the example's caption); else None."""
    found = _CODE_SHORTCODE.match(line)
    if found is None:
        return None
    if found.group(1):
        return ["```"]
    words = found.group(3).split()
    language = words[0] if found.group(2) == "highlight" and words and "=" not in words[0] else ""
    fence = "```" + language.strip("\"'")
    file = next((word[5:].strip("\"'") for word in words if word.startswith("file=")), "")
    return [f"`{file}`:", "", fence] if file else [fence]


def without_mdx_comments(lines: Iterable[tuple[str, bool]]) -> Iterator[tuple[str, bool]]:
    """Lines (each with whether it is code) without MDX's comments, which a page never shows: one within a
    line, or from a `{/*` to the `*/}` of a later line. A line holding inline code is left as written (it may
    show the syntax: `{/* a note */}`)."""
    inside = False
    for line, code in lines:
        if inside:  # every line up to the closing mark is the comment's, code or not
            end = line.find("*/}")
            if end == -1:
                continue
            line, inside = line[end + 3 :], False
        if code or "`" in line:
            yield line, code
            continue
        line = _MDX_COMMENT.sub("", line) if "{/*" in line else line
        if (start := line.find("{/*")) != -1:
            line, inside = line[:start], True
        yield line, code


def api_references(lines: Iterable[tuple[str, bool]]) -> Iterator[tuple[str, bool]]:
    """Lines (each with whether it is code) with each mkdocstrings reference (`::: pydantic.BaseModel` and the
    options indented under it) as what the page here can show of it: the object's name and the members its
    options list. The reference itself is generated from the source, which the page does not hold."""
    indent: int | None = None  # an open reference's; its options are the lines indented deeper
    members: list[str] = []
    key = ""  # the option the lines below belong to
    for line, code in lines:
        if indent is not None:
            if not code and (not line.strip() or len(line) - len(line.lstrip()) > indent):
                if (member := _MEMBER.match(line)) and key == "members":
                    members.append(member.group(1))
                elif option := _OPTION.match(line):
                    key = option.group(1)
                continue
            yield from _members(members)
            indent = None
        found = None if code else _API_REFERENCE.match(line)
        if found and ("." in found.group(2) or "_" in found.group(2)):
            indent, members, key = len(found.group(1)), [], ""
            yield f"{found.group(1)}API reference: `{found.group(2)}`.", False
            continue
        yield line, code
    if indent is not None:
        yield from _members(members)


def _members(names: list[str]) -> Iterator[tuple[str, bool]]:
    if names:
        yield "", False
        yield "Members: " + ", ".join(f"`{name}`" for name in names) + ".", False
    yield "", False


def book_includes(line: str, *, code: bool) -> str:
    """`line` with mdBook's include directives as what they stand for ("(Code from listings/main.rs.)")."""
    if "{{#" not in line:
        return line
    return _BOOK_INCLUDE.sub(
        lambda found: placeholder(found.group(1), code=code) if found.group(1) else "", line
    )


def prose_lines(lines: Iterable[tuple[str, bool]]) -> list[str]:
    """Lines (each with whether it is code) as the line pass reads them: Hugo's code shortcodes as fences,
    a shortcode written over several lines (`{{< img` ... `>}}`, up to SHORTCODE_LINES) on one, and a
    template variable or tag wrapped onto the next line (`({{ site.repository` / `}}/issues/1)`) on one."""
    read = list(lines)
    out: list[str] = []
    opened: int | None = None  # where a shortcode still open was started, in `out`
    joined = 0
    for index, (line, code) in enumerate(read):
        if opened is not None and not code and joined < SHORTCODE_LINES:
            out[opened] += " " + line.strip()
            joined += 1
            if _closes(line):
                opened = None
            continue
        fence = None if code else code_fence(line)
        out.extend(fence or [line])
        following = read[index + 1] if index + 1 < len(read) else ("", True)
        left_open = not code and fence is None and _left_open(line, following)
        opened, joined = (len(out) - 1, 0) if left_open else (None, 0)
    return out


def _left_open(line: str, following: tuple[str, bool]) -> bool:
    """Whether `line` opens a shortcode it does not close, or a template variable or tag that the following
    line (prose) closes."""
    if max(line.rfind("{{<"), line.rfind("{{%")) > max(line.rfind(">}}"), line.rfind("%}}")):
        return True
    text, code = following
    wrapped = max(line.rfind("{{"), line.rfind("{%")) > max(line.rfind("}}"), line.rfind("%}"))
    return wrapped and not code and _closes(text)


def _closes(line: str) -> bool:
    return "}}" in line or "%}" in line


def block_line(line: str) -> str | None:
    """A line that is a generator's block mark, as the words it shows (None: nothing); the line itself
    when it is not one."""
    if opened := _ADMONITION.match(line):
        return opened.group(2) if opened.group(2) is not None else opened.group(1).capitalize()
    if fence := _BLOCK_FENCE.match(line):
        title = (fence.group(2) or "").strip()
        return title or (fence.group(1).capitalize() if fence.group(1) else None)
    if tab := _TAB.match(line):
        return tab.group(1)
    if colons := _COLON_FENCE.match(line):
        title = colons.group(2).strip().removeprefix("[").removesuffix("]").strip()
        kind = colons.group(1).removeprefix("callout-")  # Quarto's `::: callout-note` shows "Note"
        if title.startswith("{"):  # pandoc's attributes: a callout's title, else its kind (`{.callout-tip}`)
            callout = _CALLOUT.search(title)
            title, kind = _shown_title(title), kind or (callout.group(1) if callout else "")
        return title or (kind.capitalize() if kind else None)
    if _MDX.match(line):
        return None
    if _COMPONENT.match(line):
        return _shown_title(line) or None
    return line


def _shown_title(markup: str) -> str:
    """The title, label or caption a component, tag or attribute list gives, as its page shows it; else ""."""
    shown = _SHOWN_ATTRIBUTE.search(markup)
    return next(filter(None, shown.groups()), "") if shown else ""


def inline_words(text: str) -> str:
    """Prose (no code) without placeholders, shortcodes, template tags, HTML or JSX tags and entities."""
    text = _SNIPPET.sub(_placeholder, book_includes(text, code=False))
    text = _SHORTCODE.sub(_shortcode, text)
    text = _EMPTY_LINK.sub(r"\1", without_template_tags(text))  # a link to `{{ site.x }}` keeps its text
    text = _WIKILINK.sub(lambda link: (link.group(2) or link.group(1)).strip(), text)  # its text, or its note
    text = _ATTRIBUTES.sub("", text)
    text = _ICON.sub("", text)
    return _decoded(_TAG.sub("", _HTML_CODE.sub(r"`\1`", text)))


def _decoded(text: str) -> str:
    """Entities as the page shows them, a non-breaking space as a space."""
    return html.unescape(text).replace("\xa0", " ") if "&" in text else text


def opens_terminal(line: str) -> bool:
    """Whether `line` is a `<div>` of class "termy" alone (its classes read once: a pattern looking for the
    class among the others re-read the line from each)."""
    if not _DIV.match(line):
        return False
    classes = _CLASSES.search(line)
    return classes is not None and "termy" in classes.group(1).split()


def terminal_text(line: str) -> str:
    """A terminal block's line as the page shows it: its formatting tags gone and entities decoded (a
    `<NAME>` placeholder is no formatting tag and stays)."""
    return _decoded(_TERMINAL_TAG.sub("", line))


def without_template_tags(text: str) -> str:
    """Text without Liquid, Jinja and Eleventy tags and variables, which a built page never shows (but for a
    title a tag gives), nor the template author's notes between `{% comment %}` and `{% endcomment %}`."""
    return _TEMPLATE_VARIABLE.sub("", _TEMPLATE_TAG.sub(_tag_title, _without_comments(text)))


def _tag_title(tag: re.Match[str]) -> str:
    """What a tag shows: the title it gives (GitBook's `{% tab title="Python" %}` and `{% code title="app.js"
    %}` head a tab or an example), else nothing."""
    return _shown_title(tag.group(0))


def _without_comments(text: str) -> str:
    """`text` without its Liquid comments, each from its opening to the next closing mark (one left open
    stays, as Liquid refuses it). The marks are found in one pass and paired in another: a lazy pattern
    from each opening to its closing reads the rest of the text once per opening."""
    if "comment" not in text:
        return text
    kept: list[str] = []
    position, opened = 0, None
    for mark in _COMMENT_MARK.finditer(text):
        if mark.group(1) is None and opened is None:
            opened = mark.start()
        elif mark.group(1) is not None and opened is not None:
            kept.append(text[position:opened])
            position, opened = mark.end(), None
    return "".join(kept) + text[position:]


def without_attributes(heading: str) -> str:
    """A heading line without the attribute list that ends it ("Setup { #setup .wide }" -> "Setup")."""
    kept = heading.rstrip()
    start = kept.rfind("{")
    if kept.endswith("}") and start != -1 and kept[start + 1 : -1].strip()[:1] in ("#", "."):
        return kept[:start].rstrip()
    return heading


def front_matter_text(metadata: dict[str, Any]) -> str:
    """What a page's front matter says to its readers: its description (or summary ...), an API entry's
    syntax, then its keywords and tags, as lines to open the page's text."""
    lines = [str(metadata[key]).strip() for key in LEAD_FIELDS if isinstance(metadata.get(key), str)]
    lines += _api_entry(metadata)
    for key in WORD_FIELDS:
        words = metadata.get(key)
        if isinstance(words, list) and (
            shown := [str(w) for w in words if isinstance(w, str | int) and w != ""]
        ):
            lines.append(f"{key.capitalize()}: {', '.join(shown)}.")
    return "\n\n".join(line for line in lines if line)


def _api_entry(metadata: dict[str, Any]) -> list[str]:
    """An API entry's syntax, return type and other names, where front matter holds `signatures` (at the top,
    in `params`, or in a mapping of `params` such as Hugo's `functions_and_methods`), as its page shows them.
    Only beside `signatures` are `aliases` a function's other names (at the top they are redirects)."""
    params = metadata.get("params")
    places = [metadata, *([params, *params.values()] if isinstance(params, dict) else [])]
    for place in places:
        if isinstance(place, dict) and "signatures" in place:
            shown = (("Syntax", "signatures"), ("Returns", "returnType"), ("Aliases", "aliases"))
            return [
                f"{label}: {'; '.join(f'`{value}`' for value in values)}."
                for label, key in shown
                if (values := _strings(place.get(key)))
            ]
    return []


def _strings(value: Any) -> list[str]:
    values = value if isinstance(value, list) else [value]
    return [str(v).strip() for v in values if isinstance(v, str | int | float) and str(v).strip()]


def placeholder(source: str, *, code: bool) -> str:
    """What a built page shows in place of a file it takes in: "(Code from x.py.)", "(Included from x.)"."""
    return f"({'Code' if code else 'Included'} from {source}.)"


def taken_in(text: str) -> tuple[list[str], str]:
    """The files a text's placeholders name, and the text without them."""
    return [found.group(1) for found in _PLACEHOLDER.finditer(text)], _PLACEHOLDER.sub("", text)


def _placeholder(match: re.Match[str]) -> str:
    if match.group(2) is not None:
        return placeholder(match.group(2), code=False)
    parts = match.group(1).split()
    return placeholder(parts[0], code=True) if parts else ""


def shortcodes_outside(line: str, spans: list[tuple[int, int]]) -> str:
    """`line` with each shortcode that opens outside its code `spans` (start and end, in order) read as its
    words: a parameter holding inline code (`caption="Click `Edit`"`) would otherwise split the shortcode
    between prose and code, and leave its marks. One inside code stays as written."""
    return sub_outside(_SHORTCODE, _shortcode, line, spans)


def sub_outside(
    pattern: re.Pattern[str], read: Callable[[re.Match[str]], str], line: str, spans: list[tuple[int, int]]
) -> str:
    """`line` with each match of `pattern` that opens outside its code `spans` (start and end, in order)
    replaced by `read` of it; one opening inside code stays as written. A match may run on into code (a
    link whose text is a code span)."""
    starts = [start for start, _ in spans]

    def outside(match: re.Match[str]) -> str:
        at = bisect.bisect_right(starts, match.start()) - 1  # the last span opening at or before it
        return match.group(0) if at >= 0 and match.start() < spans[at][1] else read(match)

    return pattern.sub(outside, line)


def _shortcode(match: re.Match[str]) -> str:
    inside = match.group(2).strip()
    if inside.startswith("/"):
        return ""
    return " ".join(value for value in _QUOTED.findall(inside) if value.strip())
