"""What a person at a terminal is told while long work runs: progress bars and one-line notices.

The library never prints on its own: bars appear only where a caller asks for them (`progress=True`), and
notices go to the `agent_retrieval.notices` logger, which the CLI shows on stderr unless --no-progress.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

from tqdm import tqdm  # text bars: tqdm.auto warns in notebooks without ipywidgets

notices = logging.getLogger("agent_retrieval.notices")


def bar(total: int, *, unit: str, desc: str, enabled: bool) -> tqdm:
    """A bar with elapsed time and rate, or a silent one when disabled or when there is nothing to do (a bar
    left standing at 0/N says work is pending when none is)."""
    return tqdm(total=total, unit=unit, desc=desc, disable=not enabled or total == 0, dynamic_ncols=True)


class _AboveTheBars(logging.Handler):
    """Writes each notice on its own line above any bar being drawn, not through the middle of it."""

    def emit(self, record: logging.LogRecord) -> None:
        tqdm.write(self.format(record), file=sys.stderr)


def show_notices(enabled: bool = True) -> None:
    """Print notices on stderr, or stop printing them (the CLI does, by --no-progress)."""
    if not any(isinstance(handler, _AboveTheBars) for handler in notices.handlers):
        notices.addHandler(_AboveTheBars())
        notices.propagate = False
    notices.setLevel(logging.INFO if enabled else logging.WARNING)


@contextlib.contextmanager
def transformers_bars_off() -> Iterator[None]:
    """Transformers' own per-tensor loading bar, off while a model loads: noise beside ours, and deaf to
    --no-progress. Restored afterwards, as the setting is the whole process's."""
    from transformers.utils import logging as transformers_logging

    were_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if were_on:
            transformers_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
