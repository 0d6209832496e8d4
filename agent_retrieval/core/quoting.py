"""Untrusted text (what a document's author wrote, or a user typed) made safe to place in a prompt's markup.

Retrieved text reaches a model only inside tags such as <passage>, and nothing in it may open or close
a tag. The rule, used for every field (text, title, heading path, metadata, ids):

- Look-alikes are normalised first: NFKC (fullwidth ＜／passage＞ becomes </passage>), every character
  Unicode names angle-shaped that NFKC leaves alone (❬ ❭ « » ≺ ≻ 《 》 ...) becomes '<' or '>' as it
  points, and invisible characters (zero-width, bidi and other format characters, controls, lone
  surrogates) are removed, so nothing hides inside a tag or poses as one.
- Then '<' is written &lt;, and '&' is written &amp; where it would otherwise read as a character
  reference: '&lt;' in a prompt is then always our escape, never the author's. Only '<' can start a
  tag, so '>' and other '&' stay as written: code (`a >= 0`, `&&`), heading paths ("Fees > Referral")
  and names ("Q&A") read, and are copied back by models, unchanged.
- In attribute values '"' is written &quot; and whitespace runs become one space.

Ids are shown exactly instead, because models pass them back (citations, document_ids): a character
the rule above would change or drop, and '[' or ']' (which would break a [citation]), is written as a
character reference such as &#x200B;, so `unquote_id` recovers the id exactly.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# What Unicode names angle-shaped: angle brackets and quotation marks in every style, the bare less-than,
# much-less-than and precedes signs, arrowhead modifier letters. Letters of scripts that merely resemble
# '<' (Canadian syllabics ᐸ) are left alone: they are someone's text. This is angle_lookalikes()'s output,
# kept here so that no process scans Unicode to start; a test checks it against the Python's Unicode data.
_ANGLE_NAME = re.compile(
    r"ANGLE (?:BRACKET|QUOTATION MARK)"
    r"|^(?:SMALL |FULLWIDTH |MUCH |VERY MUCH |DOUBLE NESTED |TRIPLE NESTED )?(?:LESS|GREATER)-THAN(?: SIGN)?$"
    r"|^(?:DOUBLE )?(?:PRECEDES|SUCCEEDS)$"
    r"|^MODIFIER LETTER (?:LOW )?(?:LEFT|RIGHT) ARROWHEAD$"
)
_POINTING_LEFT = (
    "\u00ab\u02c2\u02f1\u2039\u226a\u227a\u22d8\u2329\u276c\u276e\u2770\u27e8"
    "\u27ea\u2991\u29fc\u2aa1\u2abb\u2af7\u3008\u300a\ufe3d\ufe3f\ufe64\uff1c"
)
_POINTING_RIGHT = (
    "\u00bb\u02c3\u02f2\u203a\u226b\u227b\u22d9\u232a\u276d\u276f\u2771\u27e9"
    "\u27eb\u2992\u29fd\u2aa2\u2abc\u2af8\u3009\u300b\ufe3e\ufe40\ufe65\uff1e"
)
_ANGLES = str.maketrans(dict.fromkeys(_POINTING_LEFT, "<") | dict.fromkeys(_POINTING_RIGHT, ">"))


def angle_lookalikes() -> tuple[str, str]:
    """The characters Unicode names angle-shaped, pointing left and pointing right, from unicodedata."""
    left: list[str] = []
    right: list[str] = []
    for code in range(0x80, sys.maxunicode + 1):
        name = unicodedata.name(chr(code), "")
        if _ANGLE_NAME.search(name):
            (left if re.search("LEFT|LESS|PRECEDES", name) else right).append(chr(code))
    return "".join(left), "".join(right)


# Invisible code points that are not format or control characters (Unicode's Default_Ignorable_Code_Point,
# less those categories): Hangul fillers, variation selectors, the combining grapheme joiner ...
_IGNORABLE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
_NEWLINES = re.compile(r"\r\n?")
_ESCAPE = re.compile(r"<|&(?=#?\w+;)")
_REFERENCE = re.compile(r"&(?:(lt|amp|quot)|#x([0-9A-Fa-f]{1,6}));")
_NAMED = {"lt": "<", "amp": "&", "quot": '"'}


def clean(text: str) -> str:
    """`text` with look-alikes normalised (NFKC, then angle look-alikes) and invisible characters removed."""
    text = _NEWLINES.sub("\n", text)
    if text.isascii():
        return _visible(text)
    # Invisible characters go before NFKC too: one between a letter and its accent would keep them apart.
    text = unicodedata.normalize("NFKC", _visible(text))
    return _visible(text.translate(_ANGLES))


def _visible(text: str) -> str:
    """`text` without its invisible characters. Each distinct character is judged once: a passage has a
    few dozen, and judging each of its thousands of characters was most of formatting a tool's answer."""
    hidden = [ord(char) for char in set(text) if _invisible(char)]
    return text.translate(dict.fromkeys(hidden)) if hidden else text


@functools.lru_cache(maxsize=8192)
def _invisible(char: str) -> bool:
    # Format characters (zero-width, bidi controls, tag characters), controls other than line breaks
    # and tabs, and lone surrogates (which no model API can even encode).
    category = unicodedata.category(char)
    return (
        category in ("Cf", "Cs")
        or (category == "Cc" and char not in "\n\t")
        or _IGNORABLE.match(char) is not None
    )


def quote(text: str) -> str:
    """Untrusted text as the body of a tag: cleaned, and unable to open or close any tag."""
    return _ESCAPE.sub(lambda m: "&lt;" if m.group() == "<" else "&amp;", clean(text))


def quote_attribute(text: str) -> str:
    """Untrusted text as an attribute value (between double quotes), on one line."""
    return " ".join(quote(text).split()).replace('"', "&quot;")


def quote_id(value: str) -> str:
    """An id as an attribute value that reads as the id and turns back into it exactly (`unquote_id`)."""
    shown = _quote_id(value, _shown_as_is)
    if not unicodedata.is_normalized("NFKC", shown):
        # Characters fine alone that NFKC would join (a letter and a separate accent, Hangul jamo) would
        # look like another id: rare enough to show every non-ASCII character as a reference instead.
        shown = _quote_id(value, lambda char: char.isascii() and _shown_as_is(char))
    return shown


def _quote_id(value: str, shown_as_is: Callable[[str], bool]) -> str:
    out = []
    for i, char in enumerate(value):
        if char == "<":
            out.append("&lt;")
        elif char == "&":
            out.append("&amp;" if _ESCAPE.match(value, i) else "&")
        elif char == '"':
            out.append("&quot;")
        elif char in "[]" or not shown_as_is(char):
            out.append(f"&#x{ord(char):X};")
        else:
            out.append(char)
    return "".join(out)


@functools.lru_cache(maxsize=8192)
def _shown_as_is(char: str) -> bool:
    return char == " " or (char.isprintable() and clean(char) == char)


def unquote(text: str) -> str:
    """The text our escapes stand for (a model's reply may copy them): &lt;, &amp;, &quot; and &#x...;."""

    def character(match: re.Match[str]) -> str:
        name, code = match.groups()
        if name:
            return _NAMED[name]
        return chr(int(code, 16)) if int(code, 16) <= 0x10FFFF else match.group()

    return _REFERENCE.sub(character, text)


def unquote_id(text: str) -> str:
    """The id that `quote_id` showed as `text`; any other text (an id as stored) is returned unchanged."""
    if "&" not in text:
        return text
    decoded = unquote(text)
    return decoded if quote_id(decoded) == text else text


def quote_json(value: Any) -> str:
    """A JSON value (metadata) as the body of a tag: its keys and strings cleaned before it is written out,
    so no look-alike can pose as JSON syntax either."""
    return quote(json.dumps(_cleaned(value), ensure_ascii=False, sort_keys=True, default=str))


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, Mapping):
        return {clean(str(key)): _cleaned(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_cleaned(item) for item in value]
    return value


def element(tag: str, body: str, **attributes: str | None) -> str:
    """<tag ...>, the body on its own lines, </tag>. The body and the attribute values must already be
    quoted (or be markup made here); an attribute that could end early is refused as a programming error."""
    shown = {name: value for name, value in attributes.items() if value is not None}
    if any('"' in value or "<" in value for value in shown.values()):
        raise ValueError(f"unquoted attribute value in <{tag}>: quote it first")
    attrs = "".join(f' {name}="{value}"' for name, value in shown.items())
    return f"<{tag}{attrs}>\n{body}\n</{tag}>"


def passage(
    text: str,
    *,
    id: str,
    document: str | None = None,
    source: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    **details: str,
) -> str:
    """One retrieved text as a <passage>: `id` and `document` shown exactly (citable), `source` (title or
    heading path) and `details` as attributes, metadata as JSON in <metadata>, every field quoted."""
    body = quote(text)
    if metadata:
        body = element("metadata", quote_json(metadata)) + "\n" + body
    return element(
        "passage",
        body,
        id=quote_id(id),
        document=None if document is None else quote_id(document),
        source=None if source is None else quote_attribute(source),
        **{name: quote_attribute(value) for name, value in details.items()},
    )


def passages(blocks: Iterable[str]) -> str:
    """<passage> blocks inside one <passages> block."""
    return element("passages", "\n".join(blocks))
