"""`agent-retrieval query` end to end, as a person runs it: process start to printed result, warm file cache.

The real command runs N times (default 10) per local runtime on the embedded demo store (built first if
missing), after one untimed warm-up run each; the same run measures both runtimes, so their ratio compares
like with like. ONNX Runtime's model is exported into the user's cache by the warm-up if it is not there.

    python benchmarks/cli.py [--runs N]   # table on stdout, JSON in benchmarks/results/
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
QUERY = "how long does the landlord have to protect the deposit?"


def run(db: Path, runtime: str) -> float:
    env = {**os.environ, "AGENT_RETRIEVAL_LOCAL_RUNTIME": runtime, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "agent_retrieval.cli", "query", QUERY, "--db", str(db), "--no-progress"]
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per runtime (default 10)")
    args = parser.parse_args(argv)
    (ROOT / "results").mkdir(exist_ok=True)
    db = ROOT / "results" / "cli-demo.db"
    if not db.exists():
        subprocess.run([sys.executable, "-m", "agent_retrieval.cli", "demo", "--db", str(db)], check=True)
    result: dict = {"query": QUERY, "runs": args.runs, "load_average": os.getloadavg()[0]}
    for runtime in ("onnx", "torch"):
        run(db, runtime)  # warm-up: file cache, and the ONNX export if it is not cached yet
        seconds = sorted(run(db, runtime) for _ in range(args.runs))
        result[runtime] = {"p50_s": round(statistics.median(seconds), 3), "max_s": round(seconds[-1], 3)}
    result["torch_over_onnx"] = round(result["torch"]["p50_s"] / result["onnx"]["p50_s"], 2)
    (ROOT / "results" / "cli.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
