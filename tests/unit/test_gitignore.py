"""A folder's .gitignore, read as git reads it and matched in bounded time (ingest/ignore.py)."""

from __future__ import annotations

import pytest

from agent_retrieval.ingest import ignore
from agent_retrieval.ingest.ignore import Ignores, matches, parse

# pattern, path, is it a folder, ignored? (git check-ignore's answers)
CASES = [
    ("*.log", "debug.log", False, True),
    ("*.log", "logs/debug.log", False, True),  # no slash: a name at any depth
    ("/todo.md", "todo.md", False, True),
    ("/todo.md", "docs/todo.md", False, False),  # a leading slash anchors it to the .gitignore's folder
    ("docs/*.md", "docs/a.md", False, True),
    ("docs/*.md", "docs/sub/a.md", False, False),  # * stays inside a segment
    ("docs/**/a.md", "docs/a.md", False, True),  # ** is zero folders or more
    ("docs/**/a.md", "docs/x/y/a.md", False, True),
    ("**/build", "x/y/build", True, True),
    ("build/", "build", True, True),
    ("build/", "build", False, False),  # a trailing slash names folders only
    ("drafts/**", "drafts/a/b.md", False, True),
    ("a?c.md", "abc.md", False, True),
    ("[ab]x.md", "bx.md", False, True),
    ("\\#notes.md", "#notes.md", False, True),
    ("trailing.md   ", "trailing.md", False, True),
    ("# a comment", "# a comment", False, False),
]


@pytest.mark.parametrize(("pattern", "path", "folder", "expected"), CASES)
def test_patterns_match_as_git_matches_them(pattern, path, folder, expected):
    rules = parse(pattern)
    assert any(matches(rule, tuple(path.split("/")), folder) for rule in rules) is expected


def test_the_last_rule_naming_a_path_decides_and_a_deeper_file_comes_after(tmp_path):
    (tmp_path / ".gitignore").write_text("*.md\n!keep.md\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".gitignore").write_text("keep.md\n", encoding="utf-8")
    top = Ignores().entering(tmp_path, ())
    sub = top.entering(tmp_path / "sub", ("sub",))
    assert top.ignored(("a.md",), False) and not top.ignored(("keep.md",), False)
    assert sub.ignored(("sub", "keep.md"), False) and not top.ignored(("sub", "keep.md"), False)


def test_a_hostile_gitignore_costs_no_more_than_its_bounds(tmp_path, monkeypatch):
    """Patterns are the folder author's: a regular expression made of `**/` runs and starred segments would
    backtrack over a long path; here a check tries each segment of a pattern against each segment of the
    path at most once, and what is read is bounded."""
    monkeypatch.setattr(ignore, "MAX_RULES", 50)
    hostile = "/".join(["**"] * 40 + ["*a*a*a*a*a*a*a*a*a*a*b"])
    (tmp_path / ".gitignore").write_text(
        (hostile + "\n") * 200 + "x" * (2 * ignore.MAX_IGNORE_BYTES), "utf-8"
    )
    rules = Ignores().entering(tmp_path, ())
    assert sum(len(found) for _, found in rules.levels) == 50
    tried = []
    monkeypatch.setattr(ignore.fnmatch, "fnmatchcase", lambda name, pattern: tried.append(name) or False)
    path = tuple(["a" * 200] * 60)
    assert not rules.ignored(path, False)
    assert len(tried) <= 50 * len(path)  # one starred segment per rule, against each path segment once
