"""A small bundled corpus for the demo: an estate agency's documents, worded unlike its users' questions."""

from __future__ import annotations

import json
from pathlib import Path

_HERE = Path(__file__).parent


def corpus_dir() -> Path:
    """Folder of the demo's markdown documents."""
    return _HERE / "corpus"


def schemas_dir() -> Path:
    """Folder of a SaaS business's table schemas (markdown, one table each) for the codegen graph."""
    return _HERE / "schemas"


def questions() -> list[dict[str, str]]:
    """The demo questions, each with the document that answers it and why the wording differs."""
    return json.loads((_HERE / "questions.json").read_text(encoding="utf-8"))
