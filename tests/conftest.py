"""Test hygiene for the whole suite: brokers a test leaves open are let go when it ends.

Crash tests abandon brokers on purpose (a simulated power loss, a kill -9 stand-in): nothing
closes them, and each would keep its threads (a journal writer, a scheduler, an expiry
reaper) and its index's memory map for the rest of the run, making every later fork (the
index probe at each open) and wakeup slower. After each test, every broker opened during it
and still open is let go as a dead process's would be: its threads stopped, its index and
journal files closed, its lock dropped. Nothing is checkpointed and no consumer is closed.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterator

import pytest

from mqstore.compiled import build, pure_requested, stale_sources
from mqstore.engine.broker import Broker


def pytest_report_header() -> str:
    """Which build the run tests: ``compiled`` (mypyc) or ``pure`` (``MQSTORE_PURE=1``, or an
    install without a compiler)."""
    return f"mqstore build: {build()}"


def pytest_configure(config: pytest.Config) -> None:
    stale = [] if pure_requested() else stale_sources()
    if stale:  # the compiled module would run, not the edited source
        pytest.exit(f"edited since they were compiled: {', '.join(stale)}; run `make install` "
                    "(or `make test`), or MQSTORE_PURE=1 to test the Python source", returncode=4)

_opened: "weakref.WeakSet[Any]" = weakref.WeakSet()
_init = Broker.__init__


def _tracked_init(self: Any, *args: Any, **kwargs: Any) -> None:
    _init(self, *args, **kwargs)
    _opened.add(self)


Broker.__init__ = _tracked_init  # type: ignore[method-assign]


def _let_go(b: Any) -> None:
    """Stop an abandoned broker's threads and close its files, writing nothing of its own."""
    if b.storage.closed:
        return
    b.storage.closed = True  # its scheduler and reaper see a closed broker and stop
    b._stop_reaper.set()
    b.scheduler.wake()
    for close in (getattr(b.pages, "close", None),
                  b._opened.release if b._opened is not None else None):
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - a crashed file system, a failed journal
                pass


@pytest.fixture(autouse=True)
def _abandoned_brokers() -> Iterator[None]:
    before = set(map(id, _opened))
    yield
    for b in list(_opened):
        if id(b) not in before:
            _let_go(b)
