"""A small bundled corpus for the demo: an estate agency's documents, worded unlike its users' questions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_HERE = Path(__file__).parent


def corpus_dir() -> Path:
    """Folder of the demo's markdown documents."""
    return _HERE / "corpus"


def schemas_dir() -> Path:
    """Folder of a SaaS business's table schemas (markdown, one table each) for the codegen graph."""
    return _HERE / "schemas"


def questions() -> list[dict[str, Any]]:
    """The demo questions, each with the document and sections that answer it and why the wording differs."""
    questions: list[dict[str, Any]] = json.loads((_HERE / "questions.json").read_text(encoding="utf-8"))
    return questions


def answers(question: dict[str, Any], hit: dict[str, Any]) -> bool:
    """Whether a chunk hit (as a tool's artifact holds it) lies in a section that answers the question."""
    heading_path = hit.get("heading_path") or ""
    return hit["document_id"] == question["expected_document"] and any(
        section in heading_path.split(" > ") for section in question["answering_sections"]
    )
