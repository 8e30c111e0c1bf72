"""Records as read back from the journal, and the windowed reader of one segment's frames.

A ``Record`` carries the raw msgpack payload; ``payload`` decodes it with limits derived from the
record's own size, so a damaged or hostile record cannot blow up into far more memory than its
bytes (msgpack turns one byte into up to about 70 bytes of Python objects; REFERENCE.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import msgpack

from journal.errors import CorruptJournalError, InvalidRecordError, JournalIOError
from journal.format import FRAME_HEADER, FRAME_HEADER_SIZE, check_frame
from journal.fs import FileSystem
from journal.segment import Location, SegmentInfo

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


@dataclass(frozen=True)
class Record:
    """One record read from the journal.

    Attributes:
        lsn: log sequence number.
        kind: record kind (1..255).
        data: the msgpack payload bytes.
        location: (segment, offset, length) of its frame.
        synced_lsn: the highest LSN durable when this record was written.
    """

    lsn: int
    kind: int
    data: bytes
    location: Location
    synced_lsn: int = 0

    @property
    def payload(self) -> Any:
        """The decoded payload (see ``unpack_payload``)."""
        return unpack_payload(self.data)

    @classmethod
    def from_frame(cls, frame: bytes, location: Location) -> "Record":
        """Build from a frame already validated by ``check_frame``."""
        flen, kind, _f, _r, lsn, _gen, synced = FRAME_HEADER.unpack_from(frame, 0)
        return cls(lsn, kind, bytes(frame[FRAME_HEADER_SIZE:flen - 4]), location, synced)


def iter_segment_records(fs: FileSystem, info: SegmentInfo, start: int, max_frame: int
                         ) -> Iterator[Record]:
    """Yield the CRC-checked records of one segment from byte ``start`` up to ``info.written``.

    Raises:
        CorruptJournalError: a frame in the written range is invalid.
        JournalIOError: reading failed.
    """
    end = info.written
    off = start
    buf = b""
    base = off
    while off < end:
        if off + FRAME_HEADER_SIZE > base + len(buf):
            buf, base = _read(fs, info, off, max(READ_WINDOW, FRAME_HEADER_SIZE), end), off
        flen = FRAME_HEADER.unpack_from(buf, off - base)[0] if len(buf) >= off - base + 4 else 0
        if flen == 0:
            return
        if off + flen > base + len(buf):
            buf, base = _read(fs, info, off, max(READ_WINDOW, flen), end), off
        reason = check_frame(buf, off - base, info.generation, max_frame)
        if reason is not None:
            raise CorruptJournalError(info.path, off, reason)
        rel = off - base
        yield Record.from_frame(buf[rel:rel + flen], Location(info.sequence, off, flen))
        off += flen


def _read(fs: FileSystem, info: SegmentInfo, offset: int, size: int, end: int) -> bytes:
    try:
        return fs.pread(info.handle, min(size, end - offset), offset)
    except OSError as exc:
        raise JournalIOError(info.path, "read", exc) from exc
