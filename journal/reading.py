"""Reading a journal back: its segment table (``segments``, ``catalogue``) and its records,
one by location or all in LSN order (a mixin of ``journal.journal.Journal``, which holds the
segment table these read under its lock). Every record is CRC-checked as it is read.
"""

from __future__ import annotations

import threading
from typing import Dict, Iterator, List, Optional

from .errors import CorruptJournalError, JournalError, JournalIOError
from .format import SEGMENT_HEADER_SIZE, check_frame
from .fs import FileSystem
from .options import JournalOptions
from .records import FrameRun, Record, iter_segment_runs
from .segment import Location, SegmentInfo, SegmentSummary


class JournalReading:
    """The segment table and the records, read (see the module docstring); the ``Journal`` sets
    the attributes below."""

    _lock: threading.Lock
    _segments: Dict[int, SegmentInfo]
    _fs: FileSystem
    _dir: str
    _options: JournalOptions

    def segments(self) -> List[SegmentInfo]:
        """The segment table, in sequence order (entries are live objects; do not modify)."""
        with self._lock:
            return sorted(self._segments.values(), key=lambda s: s.sequence)

    def catalogue(self) -> List[SegmentSummary]:
        """Summaries of the sealed segments, for an index to keep and pass back as ``trusted``
        to a later ``open`` (after checking the index itself)."""
        with self._lock:
            return [s.summary() for s in sorted(self._segments.values(), key=lambda s: s.sequence)
                    if s.sealed and s.handle >= 0]

    def read(self, location: Location) -> Record:
        """Read the record at ``location`` (as returned by a completed ticket or iteration).

        Raises:
            JournalError: no segment with that sequence exists (reclaimed, or a stale location).
            CorruptJournalError: the bytes there are not a valid frame (names file and offset).
        """
        info = self._segments.get(location.segment)
        if info is None or info.handle < 0:
            raise JournalError(f"no segment {location.segment} in {self._dir}")
        try:
            data = self._fs.pread(info.handle, location.length, location.offset)
        except OSError as exc:
            raise JournalIOError(info.path, "read", exc) from exc
        reason = check_frame(data, 0, info.generation, self._options.max_frame())
        if reason is None and len(data) != location.length:
            reason = "length does not match the location"
        if reason is not None:
            raise CorruptJournalError(info.path, location.offset, reason)
        return Record.from_frame(data, location)

    def records(self, from_lsn: int = 0, from_location: Optional[Location] = None
                ) -> Iterator[Record]:
        """Yield every record with LSN >= ``from_lsn`` (or from ``from_location`` on), in LSN
        order, each CRC-checked. Records appended during iteration may or may not be seen.

        Raises:
            CorruptJournalError: a record that was valid at open no longer is.
        """
        for run in self.runs(from_lsn, from_location):
            for frame in run.frames:
                if frame.lsn >= from_lsn:
                    yield run.record(frame)

    def runs(self, from_lsn: int = 0, from_location: Optional[Location] = None
             ) -> Iterator[FrameRun]:
        """``records``, as the runs of frames each read returned (``FrameRun``), for readers
        that handle many frames at once. A run may begin with frames below ``from_lsn``: the
        reader skips them.

        Raises:
            CorruptJournalError: a record that was valid at open no longer is.
        """
        with self._lock:
            infos = sorted(self._segments.values(), key=lambda s: s.sequence)
        for info in infos:
            if info.handle < 0 or info.last_lsn < from_lsn:
                continue
            if from_location is not None and info.sequence < from_location.segment:
                continue
            start = SEGMENT_HEADER_SIZE
            if from_location is not None and info.sequence == from_location.segment:
                start = from_location.offset
            yield from iter_segment_runs(self._fs, info, start, self._options.max_frame())
