"""Records as read back from the journal, and the windowed reader of one segment's frames.

A ``Record`` carries the raw msgpack payload; ``payload`` decodes it with limits derived from the
record's own size, so a damaged or hostile record cannot blow up into far more memory than its
bytes (msgpack turns one byte into up to about 70 bytes of Python objects; REFERENCE.md).
"""

from __future__ import annotations

from typing import Any, Iterator, List, NamedTuple

import msgpack

from .errors import CorruptJournalError, InvalidRecordError, JournalIOError
from .format import FRAME_HEADER, FRAME_HEADER_SIZE
from .fs import FileSystem
from .segment import FrameDecoder, FrameInfo, Location, SegmentInfo

READ_WINDOW = 8 << 20


def unpack_payload(data: bytes) -> Any:
    """Decode msgpack ``data`` with every container and string length capped by its size.

    Raises:
        InvalidRecordError: the bytes are not one valid msgpack value.
    """
    n = max(len(data), 1)
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, max_str_len=n,
                               max_bin_len=n, max_array_len=n, max_map_len=n, max_ext_len=n)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise InvalidRecordError(f"payload is not valid msgpack: {exc}") from exc


class Record:
    """One record read from the journal (immutable by convention; ``__slots__`` for speed).

    Attributes:
        lsn: log sequence number.
        kind: record kind (1..255).
        data: the msgpack payload bytes.
        location: (segment, offset, length) of its frame.
        synced_lsn: the highest LSN durable when this record was written.
    """

    __slots__ = ("lsn", "kind", "data", "location", "synced_lsn")

    def __init__(self, lsn: int, kind: int, data: bytes, location: Location,
                 synced_lsn: int = 0) -> None:
        self.lsn = lsn
        self.kind = kind
        self.data = data
        self.location = location
        self.synced_lsn = synced_lsn

    def __repr__(self) -> str:
        return (f"Record(lsn={self.lsn}, kind={self.kind}, location={self.location}, "
                f"{len(self.data)} payload bytes)")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Record) and (self.lsn, self.kind, self.data, self.location) == \
            (other.lsn, other.kind, other.data, other.location)

    __hash__ = None  # type: ignore[assignment]

    @property
    def payload(self) -> Any:
        """The decoded payload (see ``unpack_payload``)."""
        return unpack_payload(self.data)

    @classmethod
    def from_frame(cls, frame: bytes, location: Location) -> "Record":
        """Build from a frame already validated by ``check_frame``."""
        flen, kind, _f, _r, lsn, _gen, synced = FRAME_HEADER.unpack_from(frame, 0)
        return cls(lsn, kind, bytes(frame[FRAME_HEADER_SIZE:flen - 4]), location, synced)


class FrameRun(NamedTuple):
    """Consecutive CRC-checked frames of one segment, as one read returned them.

    Attributes:
        sequence: the segment's sequence number.
        buf: the bytes read; the frame at file offset ``o`` starts at ``buf[o - base]``.
        base: file offset of ``buf[0]``.
        frames: the frames (``FrameInfo``: file offset, frame length, kind, LSN, synced LSN),
            in LSN order.
    """

    sequence: int
    buf: bytes
    base: int
    frames: List[FrameInfo]

    def record(self, frame: FrameInfo) -> Record:
        """``frame`` (one of ``frames``) as a ``Record``."""
        rel = frame.offset - self.base
        return Record(frame.lsn, frame.kind,
                      self.buf[rel + FRAME_HEADER_SIZE:rel + frame.frame_len - 4],
                      Location(self.sequence, frame.offset, frame.frame_len), frame.synced_lsn)


def iter_segment_records(fs: FileSystem, info: SegmentInfo, start: int, max_frame: int
                         ) -> Iterator[Record]:
    """Yield the CRC-checked records of one segment from byte ``start`` up to ``info.written``,
    reading ``READ_WINDOW`` bytes at a time and jumping over ranges skipped by salvage.

    Raises:
        CorruptJournalError: a frame in the written range is invalid (names file and offset).
        JournalIOError: reading failed.
    """
    for run in iter_segment_runs(fs, info, start, max_frame):
        for f in run.frames:
            yield run.record(f)


def iter_segment_runs(fs: FileSystem, info: SegmentInfo, start: int, max_frame: int
                      ) -> Iterator[FrameRun]:
    """``iter_segment_records``, one ``FrameRun`` per read (up to ``READ_WINDOW`` bytes):
    for readers that handle many frames at once (the compiled fold at open).

    Raises:
        CorruptJournalError, JournalIOError: as ``iter_segment_records``.
    """
    bounds = [start]
    for skip_start, skip_end in info.skips:
        if skip_end > start:
            bounds += [max(skip_start, start), skip_end]
    bounds.append(info.written)
    for a, b in zip(bounds[::2], bounds[1::2]):
        yield from _iter_extent(fs, info, a, b, max_frame)


def _iter_extent(fs: FileSystem, info: SegmentInfo, start: int, end: int, max_frame: int
                 ) -> Iterator[FrameRun]:
    decoder = FrameDecoder(info.generation, max_frame, start)
    off = start
    while off < end and not decoder.finished:
        try:
            chunk = fs.pread(info.handle, min(READ_WINDOW, end - off), off)
        except OSError as exc:
            raise JournalIOError(info.path, "read", exc) from exc
        if not chunk:
            break
        off += len(chunk)
        base = decoder.offset
        frames, buf = decoder.feed(chunk)
        if frames:
            yield FrameRun(info.sequence, buf, base, frames)
        if decoder.error:
            break
    decoder.close()
    if decoder.error:
        raise CorruptJournalError(info.path, *decoder.error)
