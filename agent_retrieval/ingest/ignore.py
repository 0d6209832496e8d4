"""A folder's .gitignore files, honoured as git reads them, within bounds.

The patterns are the folder author's, not the operator's: each file is read up to MAX_IGNORE_BYTES and at
most MAX_RULES patterns are in force at once, and a path is matched a segment at a time (fnmatch within
a segment, `**` across segments by a table over pattern and path segments), so one check costs at most
pattern segments x path segments steps: no pattern is compiled into a regular expression that could
backtrack over a whole path. Only .gitignore files inside the folder being read count (not those of the
folders above it, nor git's global excludes).
"""

from __future__ import annotations

import fnmatch
import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MAX_IGNORE_BYTES = 64 * 1024  # of one .gitignore: GitHub's longest templates are a few KB
MAX_RULES = 1_000  # in force at once, over a folder and the folders above it inside the one being read


@dataclass(frozen=True)
class Rule:
    """One pattern: its segments ("**" for any number of folders), whether it un-ignores (`!`), and
    whether it names folders only (a trailing `/`)."""

    segments: tuple[str, ...]
    negated: bool
    folders_only: bool


def parse(text: str) -> list[Rule]:
    """The rules of a .gitignore's text, in order."""
    rules = []
    for line in text.splitlines():
        pattern = _without_trailing_spaces(line)
        if not pattern or pattern.startswith("#"):
            continue
        negated = pattern.startswith("!")
        if negated or pattern.startswith(("\\!", "\\#")):
            pattern = pattern[1:]
        folders_only = pattern.endswith("/")
        pattern = pattern.rstrip("/")
        if not pattern:
            continue
        # A slash at the start or in the middle ties the pattern to the .gitignore's folder; without one it
        # matches a name at any depth.
        anchored = "/" in pattern
        segments = tuple(s for s in pattern.lstrip("/").split("/") if s)
        rules.append(Rule(segments if anchored else ("**", *segments), negated, folders_only))
    return rules


def _without_trailing_spaces(line: str) -> str:
    stripped = line.rstrip(" \t\r")
    escaped = stripped.endswith("\\") and len(stripped) < len(line)  # "name\ " keeps its last space
    return stripped[:-1] + " " if escaped else stripped


def matches(rule: Rule, path: tuple[str, ...], folder: bool) -> bool:
    """Whether `rule` names `path` (segments relative to its .gitignore's folder)."""
    if rule.folders_only and not folder:
        return False
    pattern = rule.segments
    # reach[j]: the path's first j segments are matched by the pattern so far
    reach = [True] + [False] * len(path)
    for segment in pattern:
        if segment == "**":
            for j in range(1, len(reach)):
                reach[j] = reach[j] or reach[j - 1]
        else:
            reach = [False] + [reach[j] and fnmatch.fnmatchcase(path[j], segment) for j in range(len(path))]
    return reach[-1]


@dataclass(frozen=True)
class Ignores:
    """The rules in force in one folder: each .gitignore's, outermost first, with where it sits relative to
    the folder being read."""

    levels: tuple[tuple[tuple[str, ...], tuple[Rule, ...]], ...] = ()

    def entering(self, folder: Path, relative: tuple[str, ...]) -> Ignores:
        """The rules in force inside `folder` (at `relative` in the folder being read): these, and its own
        .gitignore's after them."""
        file = folder / ".gitignore"
        try:
            if not file.is_file():
                return self
            with open(file, "rb") as handle:
                text = handle.read(MAX_IGNORE_BYTES + 1)
        except OSError as error:  # an unreadable folder is reported by the walk itself
            log.warning("%s: not read (%s); its patterns are not applied", file, error.strerror)
            return self
        if len(text) > MAX_IGNORE_BYTES:
            log.warning("%s: only its first %d bytes are applied", file, MAX_IGNORE_BYTES)
        rules = parse(text[:MAX_IGNORE_BYTES].decode("utf-8", errors="replace"))
        room = MAX_RULES - sum(len(found) for _, found in self.levels)
        if len(rules) > room:
            log.warning("%s: only %d of its %d patterns are applied", file, max(room, 0), len(rules))
            rules = rules[: max(room, 0)]
        return Ignores((*self.levels, (relative, tuple(rules)))) if rules else self

    def ignored(self, path: tuple[str, ...], folder: bool) -> bool:
        """Whether `path` (segments relative to the folder being read) is ignored: the last rule naming it
        decides, a deeper .gitignore's after an outer one's."""
        verdict = False
        for base, rules in self.levels:
            inside = path[len(base) :]
            for rule in rules:
                if rule.negated == verdict and matches(rule, inside, folder):
                    verdict = not rule.negated
        return verdict
