"""Process-wide settings touched once or under one lock: torch's thread count."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest


def test_torch_threads_are_switched_by_one_encode_at_a_time_and_always_restored():
    torch = pytest.importorskip("torch")
    from agent_retrieval.embeddings import _torch_threads

    configured = torch.get_num_threads()
    inside = 0
    seen: list[tuple[int, bool]] = []
    lock = threading.Lock()

    def encode(count: int | None) -> None:
        nonlocal inside
        with _torch_threads(count):
            with lock:
                inside += 1
            time.sleep(0.005)
            seen.append((inside, torch.get_num_threads() == (count or configured)))
            with lock:
                inside -= 1

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(encode, [1, None] * 20))
    assert set(seen) == {(1, True)}  # no encode overlapped another, and each ran on the threads it asked for
    assert torch.get_num_threads() == configured
