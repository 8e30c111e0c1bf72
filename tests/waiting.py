"""Waiting for a state, never for a clock: CI and testers run on loaded 2-core machines where a
thread may not run for seconds. A test that needs "the consumer is waiting" waits until the
queue has a waiting receiver, not for 0.2 s."""

from __future__ import annotations

import time
from typing import Any, Callable

PATIENCE = 120.0
"""Seconds before a state that never comes fails the test: a bound for a hung test, no measure
of speed (a loaded machine takes seconds where an idle one takes milliseconds)."""


def wait_for(state: Callable[[], Any], what: str, patience: float = PATIENCE) -> None:
    """Return once ``state()`` is true; fail the test with ``what`` after ``patience`` s."""
    deadline = time.monotonic() + patience
    while not state():
        if time.monotonic() > deadline:
            raise AssertionError(f"never came: {what}")
        time.sleep(0.002)


def receivers_waiting(broker: Any, queue: str, n: int = 1) -> None:
    """Return once ``n`` receives are blocked on ``queue`` (its waiters)."""
    wait_for(lambda: len(broker.find_queue(queue).waiters) >= n,
             f"{n} receive(s) waiting on {queue!r}")
