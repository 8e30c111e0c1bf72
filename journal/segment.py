"""Segments: naming, the in-memory table entry, and the validating scan of a segment's frames.

A segment file is named ``{sequence:016d}.seg``; compaction writes ``.seg.compact`` files and
segment creation writes ``.seg.tmp`` files that are renamed into place. ``scan_frames`` walks the
frames of one segment buffer, checking every CRC, and stops at the first zero length (the
preallocated, never-written rest) or the first invalid frame; ``find_valid_frames`` looks for
valid frames after a damaged one, which decides between a torn tail and corruption.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Callable, Iterator, List, NamedTuple, Optional, Tuple

from pyroaring import BitMap64

from .crc import crc32c
from .format import (FRAME_HEADER, FRAME_HEADER_SIZE, FRAME_OVERHEAD, SEGMENT_HEADER_SIZE,
                     FrameHeader, check_frame, peek_frame)

SEGMENT_SUFFIX = ".seg"
TMP_SUFFIX = ".seg.tmp"
COMPACT_SUFFIX = ".seg.compact"


def segment_name(sequence: int, suffix: str = SEGMENT_SUFFIX) -> str:
    """File name of segment ``sequence`` (zero-padded so names sort like sequences)."""
    return f"{sequence:016d}{suffix}"


def parse_segment_name(name: str) -> Optional[int]:
    """The sequence number of a final segment file name, or ``None`` for other files."""
    if not name.endswith(SEGMENT_SUFFIX) or len(name) != 16 + len(SEGMENT_SUFFIX):
        return None
    stem = name[:16]
    return int(stem) if stem.isdigit() else None


class Location(NamedTuple):
    """Where a record lives: segment sequence, byte offset of its frame, frame length in bytes."""

    segment: int
    offset: int
    length: int


class SegmentSummary(NamedTuple):
    """What a sealed segment held when last scanned: enough to trust it at the next open
    without scanning it again (an index keeps these; see ``Journal.catalogue``)."""

    sequence: int
    generation: int
    first_lsn: int
    last_lsn: int
    count: int
    total_bytes: int
    end: int


@dataclass
class SegmentInfo:
    """The journal's in-memory entry for one segment file (mutable; guarded by the journal).

    Attributes:
        sequence, generation, first_lsn, flags: from the header.
        path: the file path.
        handle: open file handle, or -1 while the file is not created yet.
        end: byte offset just past the last record written (or reserved, for the active one).
        written: byte offset up to which the writer has written records (readable data).
        last_lsn: LSN of the last record, ``first_lsn - 1`` when empty.
        count: number of records; total_bytes: their frame bytes.
        dead: offsets of records reported dead (a compressed bitmap: about 2 bytes each);
            dead_bytes: their frame bytes.
        sealed: no more appends go here and its data is durable.
        skips: (start, end) byte ranges skipped by salvage; readers jump over them.
    """

    sequence: int
    generation: int
    first_lsn: int
    path: str
    flags: int = 0
    handle: int = -1
    end: int = SEGMENT_HEADER_SIZE
    written: int = SEGMENT_HEADER_SIZE
    last_lsn: int = 0
    count: int = 0
    total_bytes: int = 0
    dead: BitMap64 = field(default_factory=BitMap64)
    dead_bytes: int = 0
    sealed: bool = False
    skips: List[Tuple[int, int]] = field(default_factory=list)

    def summary(self) -> SegmentSummary:
        """This segment's ``SegmentSummary``."""
        return SegmentSummary(self.sequence, self.generation, self.first_lsn, self.last_lsn,
                              self.count, self.total_bytes, self.end)

    @property
    def live_count(self) -> int:
        """Records not reported dead."""
        return self.count - len(self.dead)

    @property
    def live_bytes(self) -> int:
        """Frame bytes of records not reported dead."""
        return self.total_bytes - self.dead_bytes


class FrameInfo(NamedTuple):
    """A valid frame found by a scan: its file offset and fixed fields."""

    offset: int
    frame_len: int
    kind: int
    lsn: int
    synced_lsn: int


NEED_MORE = "need more bytes"
ZERO_END = "zero length: end of written data"
_HEAD = FRAME_HEADER.unpack_from
_U32 = struct.Struct("<I").unpack_from


def decode_run_reference(buf: bytes, pos: int, end: int, generation: int, max_frame: int,
                         last_lsn: int, base: int = 0) -> Tuple[List[FrameInfo], int, str, int]:
    """Decode the valid frames of ``buf[pos:end]``: the one frame-validation loop.
    ``decode_run`` is this function, compiled when the ``journal._frames`` extension was built
    (same frames, position, status and LSN; tests/journal/test_frames_compiled.py).

    Args:
        buf: bytes holding frames; ``base`` is the file offset of ``buf[0]``.
        pos, end: the range to decode.
        generation, max_frame: what a valid frame must carry and not exceed.
        last_lsn: every LSN must exceed this and the previous frame's.

    Returns:
        (frames with file offsets, position where decoding stopped, status, last LSN); status
        is ``NEED_MORE`` (the next frame is not complete in the range), ``ZERO_END`` (a zero
        length: the never-written rest), or the reason the frame at the stop is invalid.
    """
    frames: List[FrameInfo] = []
    view = memoryview(buf)
    status = NEED_MORE
    while end - pos >= 4:
        flen = _U32(buf, pos)[0]
        if flen == 0:
            status = ZERO_END
            break
        if flen < FRAME_OVERHEAD or flen > max_frame:
            status = f"bad frame length {flen}"
            break
        if end - pos < flen:
            break
        _l, kind, flags, reserved, lsn, gen, synced = _HEAD(buf, pos)
        if kind == 0 or flags or reserved:
            status = "bad kind or flags"
            break
        if gen != generation:
            status = "generation mismatch (stale or foreign frame)"
            break
        if crc32c(view[pos:pos + flen - 4]) != _U32(buf, pos + flen - 4)[0]:
            status = "crc mismatch"
            break
        if lsn <= last_lsn:
            status = f"lsn {lsn} not above previous {last_lsn}"
            break
        frames.append(FrameInfo(base + pos, flen, kind, lsn, synced))
        last_lsn = lsn
        pos += flen
    return frames, pos, status, last_lsn


def _compiled_decode_run() -> Optional[Callable[..., Tuple[List[FrameInfo], int, str, int]]]:
    try:
        from ._frames import decode_run as compiled
    except ImportError:  # built without a compiler: the reference is used
        return None

    def decode_run(buf: bytes, pos: int, end: int, generation: int, max_frame: int,
                   last_lsn: int, base: int = 0) -> Tuple[List[FrameInfo], int, str, int]:
        """``decode_run_reference``, compiled."""
        return compiled(buf, pos, end, generation, max_frame, last_lsn, base, FrameInfo,
                        NEED_MORE, ZERO_END)
    return decode_run


decode_run = _compiled_decode_run() or decode_run_reference


@dataclass
class ScanResult:
    """What ``scan_frames`` found.

    Attributes:
        frames: every valid frame, in order.
        end: offset just past the last valid frame.
        bad_offset: offset of the first invalid frame, or ``None`` if the scan ended cleanly.
        bad_reason: why that frame is invalid.
        nonzero_tail: whether any byte after ``end`` is nonzero (meaningful when clean).
    """

    frames: List[FrameInfo]
    end: int
    bad_offset: Optional[int] = None
    bad_reason: str = ""
    nonzero_tail: bool = False


def scan_frames(buf: bytes, generation: int, max_frame: int,
                start: int = SEGMENT_HEADER_SIZE, min_lsn: int = 0) -> ScanResult:
    """Walk and fully validate the frames of one whole segment held in ``buf``.

    Args:
        buf: the segment's bytes (whole file).
        generation: the segment's generation id.
        max_frame: largest valid frame length in bytes.
        start: offset of the first frame.
        min_lsn: every LSN must exceed this and the previous frame's.

    Returns:
        A ``ScanResult``; a zero ``frame_len`` or the end of ``buf`` ends the scan cleanly, an
        incomplete frame at the end of ``buf`` is a "truncated frame".
    """
    frames, pos, status, _last = decode_run(buf, start, len(buf), generation, max_frame,
                                            min_lsn)
    if status == NEED_MORE:
        if pos < len(buf) and any_nonzero(memoryview(buf)[pos:]):
            return ScanResult(frames, pos, pos, "truncated frame")
        return ScanResult(frames, pos)
    if status != ZERO_END:
        return ScanResult(frames, pos, pos, status)
    tail = memoryview(buf)[pos:]
    return ScanResult(frames, pos, nonzero_tail=any_nonzero(tail))


def any_nonzero(view: memoryview) -> bool:
    """Whether any byte of ``view`` is nonzero (fast for long zero runs)."""
    data = bytes(view)
    return data.count(0) != len(data)


def last_nonzero(buf: bytes, start: int) -> int:
    """Offset just past the last nonzero byte at or after ``start`` (``start`` when none)."""
    stripped = bytes(buf[start:]).rstrip(b"\x00")
    return start + len(stripped)


def find_valid_frames(buf: bytes, generation: int, max_frame: int, after: int
                      ) -> Iterator[Tuple[int, FrameHeader]]:
    """Yield valid frames found anywhere after offset ``after``, by searching the generation id.

    A frame carries its segment's generation at byte 16, so candidate starts are found with
    ``bytes.find`` rather than by trying every offset.
    """
    needle = generation.to_bytes(8, "little")
    pos = buf.find(needle, after + 1 + 16)
    while pos != -1:
        cand = pos - 16
        if cand > after and check_frame(buf, cand, generation, max_frame) is None:
            head = peek_frame(buf, cand)
            assert head is not None
            yield cand, head
        pos = buf.find(needle, pos + 1)


def frame_fits(length: int, segment_size: int) -> bool:
    """Whether a frame of ``length`` bytes can ever fit in an empty segment."""
    return FRAME_OVERHEAD <= length <= segment_size - SEGMENT_HEADER_SIZE


def join(directory: str, name: str) -> str:
    """Path of ``name`` inside ``directory``."""
    return os.path.join(directory, name)


__all__ = ["Location", "SegmentInfo", "ScanResult", "scan_frames", "find_valid_frames",
           "segment_name", "parse_segment_name", "frame_fits", "FRAME_HEADER_SIZE"]


class FrameDecoder:
    """Incremental decoder of a segment's frames: feed bytes in any pieces, get validated frames.

    Gives the same frames, end and error as ``scan_frames`` on the whole buffer, however the
    bytes are split (tested byte by byte).

    Args:
        generation: the segment's generation id.
        max_frame: largest valid frame length in bytes.
        offset: file offset of the first byte fed (normally ``SEGMENT_HEADER_SIZE``).
        min_lsn: every LSN must exceed this and the previous frame's.

    Attributes:
        offset: file offset of the next undecoded byte.
        finished: a zero frame length (the end of the written data) was reached.
        error: (offset, reason) of the first invalid frame, after which nothing is decoded.
    """

    def __init__(self, generation: int, max_frame: int, offset: int = SEGMENT_HEADER_SIZE,
                 min_lsn: int = 0) -> None:
        self._gen = generation
        self._max = max_frame
        self._carry = b""
        self._last = min_lsn
        self.offset = offset
        self.finished = False
        self.error: Optional[Tuple[int, str]] = None

    def feed(self, data: bytes) -> Tuple[List[FrameInfo], bytes]:
        """Add bytes; return the frames they complete and the buffer those frames are in
        (``frame.offset - base`` indexes it, where ``base`` is ``self.base`` before the call)."""
        if self.finished or self.error:
            return [], b""
        buf = self._carry + data if self._carry else data
        self.base = self.offset
        frames, pos, status, self._last = decode_run(buf, 0, len(buf), self._gen, self._max,
                                                     self._last, self.offset)
        self.offset += pos
        if status == ZERO_END:
            self.finished = True
        elif status != NEED_MORE:
            self.error = (self.offset, status)
        self._carry = bytes(buf[pos:]) if status == NEED_MORE else b""
        return frames, buf

    def close(self) -> None:
        """Declare the end of input: leftover bytes that are not zeros are a truncated frame."""
        if not self.finished and self.error is None and any(self._carry):
            self.error = (self.offset, "truncated frame")
