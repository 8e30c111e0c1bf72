"""Open-time recovery of the log: find the segments, validate every frame, drop a torn tail.

``load_segments`` reads every segment in sequence order and checks every frame (length, kind,
generation, CRC, LSN order) and the file's size against the size its header says it was created
with. In the last segment a damaged frame is a torn tail when nothing proves it durable: neither
a later valid frame (its ``synced_lsn`` covering it) nor the caller's ``proven_lsn`` (an index
checkpoint). The damaged bytes of a torn tail are zeroed and synced (never in read-only mode)
and reported. A damaged frame anywhere else, one proven durable, or a file shorter than it was
created is corruption: ``CorruptJournalError`` names the file, offset and reason, unless
``salvage`` is asked for, which skips the damage and reports every skipped range.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

from . import seeded_bugs
from .errors import CorruptJournalError
from .format import SEGMENT_HEADER_SIZE, decode_segment_header
from .fs import FileSystem
from .segment import (SegmentInfo, SegmentSummary, find_valid_frames, join,
                      last_nonzero, parse_segment_name, scan_frames)

log = logging.getLogger("mqstore.journal")  # the journal layer's logger


@dataclass(frozen=True)
class SkippedRange:
    """Bytes skipped by salvage: ``path``, ``start`` and ``end`` offsets, and why."""

    path: str
    start: int
    end: int
    reason: str


@dataclass(frozen=True)
class OpenReport:
    """What opening the journal found and did.

    Attributes:
        segments: number of segment files.
        records: number of valid records.
        last_lsn: LSN of the newest record (0 for an empty journal).
        torn_bytes: bytes of torn tail dropped (zeroed) in the last segment.
        unproven_records: valid-looking frames after the torn point that no frame proved durable,
            dropped with the tail.
        torn_offset: offset of the torn point in the last segment, or -1.
        skipped: ranges skipped in salvage mode.
        compaction: "" or "rolled forward" or "rolled back" (an interrupted compaction).
        removed_temp_files: leftover temporary files removed.
        elapsed_s: seconds the open took.
        trusted_segments: sealed segments taken from a trusted catalogue without a scan.
    """

    segments: int
    records: int
    last_lsn: int
    torn_bytes: int = 0
    unproven_records: int = 0
    torn_offset: int = -1
    skipped: Tuple[SkippedRange, ...] = ()
    compaction: str = ""
    removed_temp_files: int = 0
    elapsed_s: float = 0.0
    trusted_segments: int = 0


@dataclass
class LoadResult:
    """Internal: the segment table built at open and the facts for ``OpenReport``."""

    segments: List[SegmentInfo]
    torn_bytes: int = 0
    unproven: int = 0
    torn_offset: int = -1
    skipped: List[SkippedRange] = field(default_factory=list)
    records: int = 0
    trusted: int = 0


def list_segment_paths(fs: FileSystem, directory: str,
                       overrides: Optional[Dict[int, str]] = None,
                       excluded: Optional[Set[int]] = None) -> List[Tuple[int, str]]:
    """(sequence, path) of every segment, in sequence order, after compaction overrides."""
    found: Dict[int, str] = {}
    for name in fs.listdir(directory):
        seq = parse_segment_name(name)
        if seq is not None:
            found[seq] = join(directory, name)
    for seq in excluded or ():
        found.pop(seq, None)
    found.update(overrides or {})
    return sorted(found.items())


def load_segments(fs: FileSystem, directory: str, paths: List[Tuple[int, str]], max_frame: int,
                  read_only: bool, salvage: bool,
                  trusted: Optional[Dict[int, SegmentSummary]] = None,
                  proven_lsn: int = 0) -> LoadResult:
    """Validate every segment and build the segment table (handles left open).

    A sealed segment found in ``trusted`` with the same generation, first LSN and a file long
    enough is not scanned: its summary is taken as is (the caller checked it before trusting
    it). The last segment is always scanned. Damage at a point where records up to
    ``proven_lsn`` are not all read yet is corruption, never a torn tail.

    Raises:
        CorruptJournalError: a bad header, a bad frame outside the torn tail, or a torn point
            proven durable; not raised for what ``salvage`` skips.
        OSError: from the seam.
    """
    result = LoadResult(segments=[])
    prev_lsn = 0
    try:
        for index, (seq, path) in enumerate(paths):
            info = _load_one(fs, seq, path, index == len(paths) - 1, prev_lsn, max_frame,
                             read_only, salvage, (trusted or {}).get(seq), result, proven_lsn)
            if info is not None:
                prev_lsn = info.last_lsn
                result.segments.append(info)
    except BaseException:
        for info in result.segments:
            fs.close(info.handle)
        raise
    return result


def _load_one(fs: FileSystem, seq: int, path: str, is_last: bool, prev_lsn: int,
              max_frame: int, read_only: bool, salvage: bool, known: Optional[SegmentSummary],
              result: LoadResult, proven_lsn: int) -> Optional[SegmentInfo]:
    """Load one segment (its handle open), or ``None`` when salvage skips it whole; on an
    error its handle is closed."""
    handle = fs.open(path, read_only=read_only)
    try:
        if known is not None and not is_last and _trust(fs, handle, known, prev_lsn):
            result.records += known.count
            result.trusted += 1
            return SegmentInfo(seq, known.generation, known.first_lsn, path, 0, handle,
                               end=known.end, written=known.end, last_lsn=known.last_lsn,
                               count=known.count, total_bytes=known.total_bytes, sealed=True)
        buf = fs.pread(handle, fs.size(handle), 0)
        header = decode_segment_header(buf)
        if header is None or header.sequence != seq:
            if not salvage:
                raise CorruptJournalError(path, 0, "bad segment header")
            result.skipped.append(SkippedRange(path, 0, len(buf), "bad segment header"))
            fs.close(handle)
            return None
        info = SegmentInfo(seq, header.generation, header.first_lsn, path, header.flags, handle,
                           sealed=not is_last)
        if len(buf) < header.file_size:
            reason = (f"the file is {len(buf)} bytes but was created with {header.file_size}: "
                      f"it was truncated (no crash shortens a segment)")
            if not salvage:
                raise CorruptJournalError(path, len(buf), reason)
            result.skipped.append(SkippedRange(path, len(buf), header.file_size, reason))
        min_lsn = max(prev_lsn, header.first_lsn - 1)
        _scan_segment(fs, info, buf, max_frame, min_lsn, is_last, read_only, salvage, result,
                      proven_lsn)
        info.last_lsn = info.last_lsn or min_lsn
        return info
    except BaseException:
        fs.close(handle)
        raise


def _trust(fs: FileSystem, handle: int, known: SegmentSummary, prev_lsn: int) -> bool:
    header = decode_segment_header(fs.pread(handle, SEGMENT_HEADER_SIZE, 0))
    size = fs.size(handle)
    return (header is not None and header.generation == known.generation and
            header.first_lsn == known.first_lsn and size >= max(known.end, header.file_size) and
            known.first_lsn > prev_lsn and known.last_lsn >= known.first_lsn)


def _scan_segment(fs: FileSystem, info: SegmentInfo, buf: bytes, max_frame: int, min_lsn: int,
                  is_last: bool, read_only: bool, salvage: bool, result: LoadResult,
                  proven_lsn: int) -> None:
    start = SEGMENT_HEADER_SIZE
    while True:
        scan = scan_frames(buf, info.generation, max_frame, start, min_lsn)
        if scan.frames:
            info.count += len(scan.frames)
            info.total_bytes += sum(f.frame_len for f in scan.frames)
            info.last_lsn = min_lsn = scan.frames[-1].lsn
        info.end = info.written = scan.end
        if scan.bad_offset is None and not scan.nonzero_tail:
            break
        bad = scan.bad_offset if scan.bad_offset is not None else scan.end
        reason = scan.bad_reason or "nonzero bytes after the last record"
        later = [(o, h) for o, h in find_valid_frames(buf, info.generation, max_frame, bad)
                 if h.lsn > min_lsn]
        proven = proven_lsn > min_lsn or any(h.synced_lsn > min_lsn for _o, h in later)
        if is_last and not proven:
            _drop_torn_tail(fs, info, buf, bad, len(later), read_only, result)
            break
        if not salvage:
            if proven_lsn > min_lsn and is_last:
                reason += f" (records up to LSN {proven_lsn} are known durable: not a torn tail)"
            raise CorruptJournalError(info.path, bad, reason)
        nxt = later[0][0] if later else last_nonzero(buf, bad)
        result.skipped.append(SkippedRange(info.path, bad, nxt, reason))
        info.skips.append((bad, nxt))
        if not later:
            break
        start = nxt
    result.records += info.count


def _drop_torn_tail(fs: FileSystem, info: SegmentInfo, buf: bytes, bad: int, unproven: int,
                    read_only: bool, result: LoadResult) -> None:
    """Zero the torn bytes from ``bad`` to the last nonzero byte, then fdatasync."""
    end = last_nonzero(buf, bad)
    result.torn_bytes += end - bad
    result.unproven += unproven
    result.torn_offset = bad
    if seeded_bugs.active("no_torn_tail_truncation"):
        info.end = info.written = end  # new records would go after the torn bytes
        return
    if read_only or end <= bad:
        return
    zeros = bytes(min(end - bad, 1 << 20))
    for off in range(bad, end, len(zeros)):
        fs.pwrite(info.handle, zeros[:min(len(zeros), end - off)], off)
    fs.fdatasync(info.handle)


def elapsed_since(start: float) -> float:
    """Seconds since ``start`` (a ``time.monotonic()`` value)."""
    return time.monotonic() - start


def log_open(directory: str, report: OpenReport, read_only: bool = False) -> None:
    """Log what opening the journal in ``directory`` repaired or skipped (``mqstore.journal``:
    WARNING for data dropped or skipped, INFO for an interrupted compaction finished); a
    read-only open changes nothing and says it left the torn tail in place."""
    if report.torn_bytes:
        log.warning("journal %s: %s a torn tail of %d bytes at offset %d of the last segment "
                    "(%d records in it that no sync had proven durable)", directory,
                    "left out (read-only)" if read_only else "dropped", report.torn_bytes,
                    report.torn_offset, report.unproven_records)
    for s in report.skipped:
        log.warning("journal %s: salvage skipped %s bytes %d-%d: %s", directory, s.path,
                    s.start, s.end, s.reason)
    if report.compaction:
        log.info("journal %s: an interrupted compaction was %s", directory, report.compaction)
    if report.removed_temp_files:
        log.info("journal %s: removed %d leftover temporary files", directory,
                 report.removed_temp_files)
