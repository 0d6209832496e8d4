"""The worst document a caller may send: as long as one call allows, made of what once took minutes to read
(a heading line of spaces, a line of image openings, a line of backticks, anchor ids), then prose to embed."""

from __future__ import annotations


def worst_document(characters: int = 1_000_000) -> str:
    hostile = ["# a" + " " * 200_000 + "b", "![" * 100_000, "`" * 100_000, "{#" * 50_000]
    prose = " ".join(f"Valve {n} opens at {n % 60} bar." for n in range(characters // 20))
    return "\n".join([*hostile, prose])[:characters]
