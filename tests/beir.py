"""Writing a small BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) for tests of what reads one."""

from __future__ import annotations

import json
from pathlib import Path


def write_beir(folder: Path, corpus: list[dict], queries: list[dict], qrels: list[str]) -> Path:
    """BEIR rows for `corpus` and `queries` (`_id`, `title`, `text`); `qrels` lines "query\\tdoc\\tscore"."""
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\n" for q in qrels)
    )
    return folder
