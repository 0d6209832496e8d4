"""The prompts in prompts/, loaded from the installed package or, in a source checkout, the repository."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

_PACKAGE = Path(__file__).parent.parent
_PACKAGED = _PACKAGE / "prompts"  # where the wheel puts them
_SOURCE = _PACKAGE.parent / "prompts"  # a source checkout or editable install


@functools.cache
def load_prompt(name: str) -> str:
    """The text of prompts/<name>.md."""
    for folder in (_PACKAGED, _SOURCE):
        path = folder / f"{name}.md"
        if path.is_file():
            return path.read_text(encoding="utf-8").strip()
    raise FileNotFoundError(f"prompt {name!r} not found in {_PACKAGED} or {_SOURCE}")


def prompt_version(name: str) -> str:
    """A short hash of a prompt: it changes whenever the prompt's wording does."""
    return hashlib.sha256(load_prompt(name).encode()).hexdigest()[:12]


def prompt_files() -> list[Path]:
    """Every prompt file, from the folder load_prompt reads first."""
    for folder in (_PACKAGED, _SOURCE):
        if folder.is_dir():
            return sorted(folder.glob("*.md"))
    return []
