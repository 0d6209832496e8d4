"""Syncing a folder after edits, renames and deletions: what is embedded again, and what is left.

The first N SciFact abstracts (default 1,000) are written as markdown files (`# title`, then the abstract)
into a temporary folder and ingested with all-MiniLM-L6-v2. Then 5% of the files are edited (a sentence
appended), 5% renamed and 5% deleted, and `ingest_paths(..., prune=True)` syncs the store. The store must
then hold exactly the live files, having embedded only the edited files' texts.

    python benchmarks/sync.py [--files N]   # table on stdout, JSON in benchmarks/results/
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path

from agent_retrieval import Context, Retrieval, ingest_paths
from agent_retrieval.evaluation import load_beir

ROOT = Path(__file__).resolve().parent
DATASET = ROOT.parent.parent / "shared" / "datasets" / "scifact"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000, help="files in the folder (default 1000)")
    parser.add_argument("--dataset", type=Path, default=DATASET, help="a BEIR folder (default: SciFact)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sync-bench-") as tmp:
        folder = Path(tmp) / "docs"
        folder.mkdir()
        for n, doc in enumerate(itertools.islice(load_beir(args.dataset).documents(), args.files)):
            (folder / f"{n:05d}.md").write_text(f"# {doc.title}\n\n{doc.content}\n", encoding="utf-8")
        files = sorted(folder.iterdir())
        share = max(1, len(files) // 20)
        edited, renamed, deleted = files[:share], files[share : 2 * share], files[2 * share : 3 * share]
        with Retrieval(Context(db_path=str(Path(tmp) / "store.db"))) as retrieval:
            retrieval.embedder.embed_query("warm up")  # model load is not syncing
            started = time.perf_counter()
            first = ingest_paths([folder], retrieval=retrieval, progress=True)
            first_seconds = time.perf_counter() - started

            for file in edited:
                file.write_text(file.read_text(encoding="utf-8") + "\nThis sentence was added.\n", "utf-8")
            for file in renamed:
                file.rename(file.with_name("renamed-" + file.name))
            for file in deleted:
                file.unlink()
            started = time.perf_counter()
            synced = ingest_paths([folder], retrieval=retrieval, prune=True, progress=True)
            sync_seconds = time.perf_counter() - started

            live = sorted(path.stem for path in folder.iterdir())
            held = sorted(retrieval.store.document_states([*live, *(f.stem for f in deleted + renamed)]))
            stats = retrieval.store.stats()
    result = {
        "files": len(files),
        "edited": len(edited),
        "renamed": len(renamed),
        "deleted": len(deleted),
        "first_ingest": {"seconds": round(first_seconds, 1), "texts_embedded": first.embedded},
        "sync": {
            "seconds": round(sync_seconds, 1),
            "texts_embedded": synced.embedded,
            "vectors_reused": synced.reused,
            "documents_written": synced.written,
            "reported_renamed": len(synced.renamed),
            "reported_removed": len(synced.removed),
        },
        "store_documents": stats.documents,
        "store_holds_exactly_the_live_files": held == live,
    }
    (ROOT / "results").mkdir(exist_ok=True)
    (ROOT / "results" / "sync.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
