"""Deliberate bugs behind a test switch, to prove the crash tests can catch them.

A crash harness has teeth only if it fails on a broken journal (ARCHITECTURE.md, Tests). The
names in ``ENABLED`` switch on one known-bad behaviour each; production code never enables any.
Tests use ``enabled("name")`` as a context manager.

- ``no_dir_fsync``: a new segment's directory entry is not fsynced.
- ``no_torn_tail_truncation``: recovery leaves a torn tail on disk and appends after it.
- ``ack_before_fsync``: the writer reports a batch durable before its fdatasync.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Set

KNOWN = frozenset({"no_dir_fsync", "no_torn_tail_truncation", "ack_before_fsync"})
ENABLED: Set[str] = set()


def active(name: str) -> bool:
    """Whether the seeded bug ``name`` is switched on (only ever in tests)."""
    return name in ENABLED


@contextlib.contextmanager
def enabled(name: str) -> Iterator[None]:
    """Switch on seeded bug ``name`` for the duration of a ``with`` block."""
    if name not in KNOWN:
        raise ValueError(f"unknown seeded bug {name!r}; known: {sorted(KNOWN)}")
    ENABLED.add(name)
    try:
        yield
    finally:
        ENABLED.discard(name)
