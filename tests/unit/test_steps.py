"""steps.py: one piece of logic, driven sync (blocking calls, no event loop) or async, under one bound."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from agent_retrieval.core.steps import Call, Together, arun, bounded, run, single


def _faced(tag: str, delay: float = 0.0) -> Call[str]:
    def sync() -> str:
        time.sleep(delay)
        return f"sync {tag}"

    async def async_() -> str:
        await asyncio.sleep(delay)
        return f"async {tag}"

    return Call(sync, async_)


def _logic(delay: float):
    """Two calls, the second bounded at 0.2 s: what a failure means is the logic's to say."""
    first = yield _faced("first")
    try:
        second = yield bounded(_faced("second", delay), 0.2)
    except TimeoutError:
        second = "gave up"
    return first, second


async def test_each_driver_makes_the_calls_in_its_own_form_under_the_same_bound():
    assert run(_logic(0.0)) == ("sync first", "sync second")
    assert await arun(_logic(0.0)) == ("async first", "async second")
    for started, outcome in (
        (time.monotonic(), run(_logic(2.0))),
        (time.monotonic(), await arun(_logic(2.0))),
    ):
        assert outcome[1] == "gave up" and time.monotonic() - started < 1.5


def test_a_branch_queued_past_the_deadline_never_starts():
    began = threading.Event()

    def slow() -> str:
        time.sleep(0.5)
        return "slow"

    def queued() -> str:
        began.set()
        return "queued"

    async def unused() -> str:
        raise AssertionError("the sync driver awaited")

    def logic():
        return (
            yield Together(
                [single(Call(slow, unused)), single(Call(queued, unused))], 0.1, ThreadPoolExecutor(1)
            )
        )

    late, never = run(logic())
    assert not late.finished and not never.finished
    time.sleep(0.6)
    assert not began.is_set()
