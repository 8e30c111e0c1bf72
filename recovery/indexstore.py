"""Index stores: where the live index's tables are committed (``IndexStore``), and the one
kept in memory (``MemoryIndex``: tests under a simulated file system, offline replays).

``MemoryIndex.crash()`` keeps the last commit or nothing, which is what a power cut can leave of
a cache. ``recovery.index.LmdbIndex`` is the one on disk.
"""

from __future__ import annotations

import bisect
import random
from abc import ABC, abstractmethod
from typing import Dict, List, Optional, Tuple

TABLES = ("meta", "addr", "queue", "settings", "msg", "qref", "busy", "tx", "jdead", "jpin",
          "sched", "moved", "jmarks", "jwait")

Row = Tuple[bytes, bytes]
Changes = Dict[str, Dict[bytes, Optional[bytes]]]


class IndexStore(ABC):
    """Where the index's tables are committed (bytes keys and values per named table)."""

    discarded = ""  # why an existing index was found damaged and not used ("" when it was not)
    commits = 0     # commits since open
    written = 0     # entries written or deleted by those commits

    @abstractmethod
    def get(self, table: str, key: bytes) -> Optional[bytes]:
        """The committed value, or ``None``.

        Raises:
            IndexInvalidError: the store cannot be read.
        """

    @abstractmethod
    def range(self, table: str, start: bytes, stop: Optional[bytes],
              limit: Optional[int] = None) -> List[Row]:
        """Committed ``(key, value)`` with ``start <= key < stop`` in key order, up to
        ``limit`` (all when ``None``).

        Raises:
            IndexInvalidError: the store cannot be read.
        """

    @abstractmethod
    def entries(self, table: str) -> int:
        """How many entries ``table`` holds (O(1))."""

    @abstractmethod
    def commit(self, changes: Changes) -> None:
        """Apply ``changes`` (``None`` values delete) atomically and durably.

        Raises:
            IndexInvalidError: the write failed; nothing of it is applied.
        """

    @abstractmethod
    def destroy(self) -> None:
        """Remove every table (before a rebuild)."""

    def close(self) -> None:
        """Release resources."""

    def mark_damaged(self, reason: str) -> None:
        """Damage was found while the store was open: the next writable open rebuilds the
        index from the journal instead of using it."""
        self.discarded = reason

    def _count(self, changes: Changes) -> None:
        self.commits += 1
        self.written += sum(len(rows) for rows in changes.values())


class MemoryIndex(IndexStore):
    """An index kept in memory, with what a crash can roll back to (tests, offline replays)."""

    def __init__(self) -> None:
        self.tables: Dict[str, Dict[bytes, bytes]] = {name: {} for name in TABLES}
        self._sorted: Dict[str, Optional[List[bytes]]] = {}

    def get(self, table: str, key: bytes) -> Optional[bytes]:
        return self.tables[table].get(key)

    def range(self, table: str, start: bytes, stop: Optional[bytes],
              limit: Optional[int] = None) -> List[Row]:
        keys = self._sorted.get(table)
        if keys is None:
            keys = self._sorted[table] = sorted(self.tables[table])
        rows = self.tables[table]
        out: List[Row] = []
        for key in keys[bisect.bisect_left(keys, start):]:
            if stop is not None and key >= stop:
                break
            out.append((key, rows[key]))
            if limit is not None and len(out) >= limit:
                break
        return out

    def entries(self, table: str) -> int:
        return len(self.tables[table])

    def commit(self, changes: Changes) -> None:
        for name, rows in changes.items():
            table = self.tables[name]
            for key, value in rows.items():
                if value is None:
                    table.pop(key, None)
                else:
                    table[key] = value
            if rows:
                self._sorted[name] = None
        self._count(changes)

    def destroy(self) -> None:
        self.tables = {name: {} for name in TABLES}
        self._sorted = {}
        self.discarded = ""

    def crash(self, rng: random.Random) -> "MemoryIndex":
        """What a power cut may leave: the latest commit (LMDB commits are synced, and the
        reclaim horizon moves only after the commit) or nothing (a lost or damaged index)."""
        out = MemoryIndex()
        if rng.random() < 0.5:
            out.tables = {name: dict(rows) for name, rows in self.tables.items()}
        return out
