"""What the journal's parts need of one open journal (``JournalCore``), so that none imports it.

``journal.liveness`` (dead records, segment reclaim), ``journal.staging`` (placing appends),
``journal.writer`` (the group-commit writer thread) and ``journal.compaction`` work on the
state of one open journal: its lock and conditions, its segment table and active segment, the
batch being filled, the LSN counters, the failure state and the file-system seam. They are typed
against this protocol; ``journal.journal.Journal`` implements it and is the only module that
imports them all. The members keep their leading underscore: they are the journal's internals,
shared inside this package, not part of ``Journal``'s public interface.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Protocol

from .fs import FileSystem
from .manifest import SegmentManifest
from .options import JournalOptions
from .segment import SegmentInfo
from .tickets import Batch


class JournalCore(Protocol):
    """One open journal, as its parts see it.

    Attributes:
        _lock: guards every member below. _work: the writer thread waits on it for records.
        _space: appenders wait on it while ``max_pending_bytes`` are pending.
        _segments: the segment table by sequence. _active: the segment appends go to.
        _open: the batch being filled (records appended, not yet written). _taken: the newest
            batch taken out of ``_open`` to be written (complete once it is durable).
        _next_lsn, _durable_lsn: the next LSN to give, the last LSN known durable.
        _failure: the error that fail-stopped the journal (``None`` while healthy).
        _stopping: close has begun. _writer_idle: the writer thread waits for work.
        _lead: flushes a batch in the calling thread (leader-based group commit), if any.
        _fs, _dir, _options: the file-system seam, the journal directory, the options.
        manifest: the segment manifest (``None`` on read-only opens of old journals).
        liveness: the journal's ``journal.liveness.Liveness``.
        relocation_files: names of the relocation files there (``journal.relocations``).
    """

    _lock: threading.Lock
    _work: threading.Condition
    _space: threading.Condition
    _segments: Dict[int, SegmentInfo]
    _active: SegmentInfo
    _open: Batch
    _taken: Optional[Batch]
    _next_lsn: int
    _durable_lsn: int
    _failure: Optional[BaseException]
    _stopping: bool
    _writer_idle: bool
    _lead: Optional[Callable[[Batch], None]]
    _fs: FileSystem
    _dir: str
    _options: JournalOptions
    manifest: Optional[SegmentManifest]
    relocation_files: List[str]
    liveness: Any  # journal.liveness.Liveness, which is typed against this protocol

    def _admit(self) -> None:
        """Slow path of an append (lock held): refuse when not writable, wait for space."""

    def _roll(self) -> SegmentInfo:
        """Start the next segment as the active one (lock held)."""

    def _wake_writer(self) -> None:
        """Notify the idle writer thread (lock held)."""

    def _check_writable(self) -> None:
        """Raise the journal error that refuses a write now, if any."""

    def _mark_durable(self, lsn: int) -> None:
        """Everything up to ``lsn`` is durable."""

    def _fail(self, exc: OSError, batch: Batch) -> None:
        """Fail-stop: complete ``batch`` and every later one with the error."""


__all__ = ["JournalCore"]
