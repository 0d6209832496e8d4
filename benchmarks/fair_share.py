"""One caller's big writes against another caller's question, through a real `langgraph dev`.

A signed-in user of one tenant starts four indexer runs of a 1,000,000-character document each (the local
ONNX embedder, the embedded store); three seconds later a user of another tenant asks the rag graph a
question. We report how long that question took, and what each write did, for `langgraph dev`'s one run
slot and for four (`--n-jobs-per-worker 4`, as a deployment has ten).

    python -m benchmarks.fair_share                 # both, about 10 minutes on 2 cores
    python -m benchmarks.fair_share --jobs 4
"""

from __future__ import annotations

import argparse
import random
import secrets
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.langgraph_server import serve

WRITES, CHARACTERS = 4, 1_000_000
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda"]


def text(size: int, seed: int) -> str:
    """`size` characters of distinct words in paragraphs, so every chunk is a text of its own to embed."""
    rng, out, length = random.Random(seed), [], 0
    while length < size:
        word = f"{rng.choice(WORDS)}{rng.randint(0, 999)}" + ("\n\n" if rng.random() < 0.05 else "")
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def measure(jobs: int, writes: int = WRITES, characters: int = CHARACTERS) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp())
    settings = {
        "AGENT_RETRIEVAL_DB": str(folder / "store.db"),
        "SUPABASE_JWT_SECRET": secrets.token_urlsafe(32),
    }
    question = {"messages": [{"role": "user", "content": "what does the policy say about deposits"}]}
    with serve(folder, settings, jobs=jobs) as server:
        with server.signed_in("bob", "globex", timeout=3600) as bob:
            bob.runs.wait(None, "rag", input=question)  # the model loaded, the store made
        done: list[dict[str, Any]] = []

        def write(number: int) -> None:
            with server.signed_in("mallory", "acme", timeout=3600) as mallory:
                started = time.monotonic()
                document = {"title": f"Minutes {number}", "content": text(characters, number)}
                try:
                    out = mallory.runs.wait(None, "indexer", input={"documents": [document]})
                except Exception as error:  # the run itself failed: a result to report, not a lost thread
                    done.append({"seconds": time.monotonic() - started, "failed": str(error)})
                    return
                done.append({"seconds": time.monotonic() - started, **out["report"], "errors": out["errors"]})

        threads = [threading.Thread(target=write, args=(n,)) for n in range(writes)]
        for thread in threads:
            thread.start()
        time.sleep(3)
        with server.signed_in("bob", "globex", timeout=3600) as bob:
            started = time.monotonic()
            bob.runs.wait(None, "rag", input=question)
            asked = time.monotonic() - started
        for thread in threads:
            thread.join()
    return {"jobs": jobs, "question_seconds": asked, "writes": sorted(done, key=lambda w: w["seconds"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, action="append", help="run slots (default: 1 and 4)")
    for jobs in parser.parse_args().jobs or [1, 4]:
        result = measure(jobs)
        print(f"\n{jobs} run slot(s): the other tenant's question took {result['question_seconds']:.1f} s")
        for w in result["writes"]:
            if "failed" in w:
                outcome = f"the run failed: {w['failed']}"
            else:
                outcome = "; ".join(w["errors"]) or f"{w['written']} written, {w['embedded']} texts embedded"
            print(f"  write finished after {w['seconds']:.1f} s: {outcome}")


if __name__ == "__main__":
    main()
