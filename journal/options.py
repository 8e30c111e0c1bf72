"""The journal's settings and its statistics snapshot."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidOptionError
from .format import FRAME_OVERHEAD, SEGMENT_HEADER_SIZE


@dataclass(frozen=True)
class JournalOptions:
    """Settings of one journal.

    Attributes:
        segment_size: bytes per segment file (default 64 MiB).
        max_record_size: largest frame in bytes (capped at segment_size - 64).
        sync_policy: ``"sync"`` (group commit; a ticket completes after the fdatasync covering
            it) or ``"async"`` (a ticket completes after the write; the OS decides when data
            reaches the disk, so a power loss can drop the newest records but never damages
            earlier ones: recovery truncates at the first torn record).
        batch_bytes: flush a batch once this many bytes are pending (default 1 MiB).
        max_delay_ms: how long the writer gathers a batch before flushing (default 0: flush at
            once; batches still form while the previous fdatasync runs).
        max_pending_bytes: appenders block while this many bytes wait for the writer.
        preallocate: write zeros over each new segment before use.
        preallocate_ahead: with ``preallocate``, zero-fill the next segment's file a chunk
            after each batch, so a roll does not stall appenders (Artemis opens its next
            journal file ahead of need the same way); ``journal.pool``.
        compact_min_files: compact only with more sealed segments than this (Artemis: 10).
        compact_live_ratio: compact only when live bytes / bytes is below this (Artemis: 0.3).
        read_only: open without the lock, truncation, or any write.
        salvage: skip damaged records instead of refusing to open (reported in ``OpenReport``).
    """

    segment_size: int = 64 << 20
    max_record_size: int = 16 << 20
    sync_policy: str = "sync"
    batch_bytes: int = 1 << 20
    max_delay_ms: float = 0.0
    max_pending_bytes: int = 64 << 20
    preallocate: bool = True
    preallocate_ahead: bool = True
    compact_min_files: int = 10
    compact_live_ratio: float = 0.3
    read_only: bool = False
    salvage: bool = False

    def __post_init__(self) -> None:
        """Check every setting's type and range (a bad one could write a store that cannot
        be read back).

        Raises:
            InvalidOptionError: names the setting.
        """
        ints = {"segment_size": (1024, 1 << 40), "max_record_size": (FRAME_OVERHEAD + 1,
                                                                     1 << 40),
                "batch_bytes": (1, 1 << 40), "max_pending_bytes": (1, 1 << 50),
                "compact_min_files": (0, 1 << 20)}
        for name, (lo, hi) in ints.items():
            value = getattr(self, name)
            if value.__class__ is bool or not isinstance(value, int) or not lo <= value <= hi:
                raise InvalidOptionError(name, f"an int in {lo}..{hi}, not {value!r}")
        for name in ("preallocate", "preallocate_ahead", "read_only", "salvage"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidOptionError(name, f"True or False, not {getattr(self, name)!r}")
        if self.sync_policy not in ("sync", "async"):
            raise InvalidOptionError("sync_policy", f"'sync' or 'async', not "
                                                    f"{self.sync_policy!r}")
        for name, hi in (("max_delay_ms", 60_000.0), ("compact_live_ratio", 1.0)):
            value = getattr(self, name)
            if value.__class__ is bool or not isinstance(value, (int, float)) or \
                    not 0 <= value <= hi:
                raise InvalidOptionError(name, f"a number in 0..{hi}, not {value!r}")

    def max_frame(self) -> int:
        """Largest acceptable frame length in bytes."""
        return min(self.max_record_size, self.segment_size - SEGMENT_HEADER_SIZE)


@dataclass(frozen=True)
class JournalStatistics:
    """A snapshot of the journal's counters (sizes in bytes)."""

    segments: int
    records: int
    live_records: int
    total_bytes: int
    live_bytes: int
    next_lsn: int
    durable_lsn: int
    batches: int
    records_flushed: int
    fsyncs: int
    failed: bool
