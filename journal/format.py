"""The on-disk byte layouts of the journal: segment header, record frame, compaction control file.

This is the one module that defines them; every other module encodes and decodes through it.
All integers are little-endian. Sizes are asserted at import.

Segment header (``SEGMENT_HEADER_SIZE`` = 64 bytes, at offset 0 of every segment file)::

    offset size field
    0      8    magic            b"MQSJSEG\\x01"
    8      2    format version   u16 (FORMAT_VERSION)
    10     2    header size      u16 (64)
    12     4    flags            u32 (bit 0: written by compaction; bit 1: listed in the
                                 segment manifest, so a missing manifest is damage)
    16     8    sequence         u64, segment sequence number (orders segments)
    24     8    generation       u64, random per file; every record in the file repeats it
    32     8    created_ms       u64, creation time, ms since the epoch
    40     8    first_lsn        u64, LSN the segment was started at
    48     8    file_size        u64, bytes the file was created with (preallocated size, or
                                 the exact size of a compaction output); 0 = not recorded.
                                 A shorter file was truncated: no crash makes one
    56     4    reserved         zeros
    60     4    crc              u32, CRC-32C of bytes 0..60

Record frame (``FRAME_HEADER_SIZE`` = 32 bytes + payload + 4-byte CRC), frames follow the header
back to back; a zero ``frame_len`` marks the preallocated, never-written rest of the segment::

    offset size field
    0      4    frame_len        u32, whole frame in bytes, header + payload + crc
    4      1    kind             u8, record kind (1..255); 0 is never valid
    5      1    flags            u8, 0
    6      2    reserved         u16, 0
    8      8    lsn              u64, strictly increasing across the journal
    16     8    generation       u64, the generation of the segment holding the frame
    24     8    synced_lsn       u64, highest LSN known durable when the frame was encoded
    32     n    payload          msgpack bytes
    32+n   4    crc              u32, CRC-32C of bytes 0..32+n

``synced_lsn`` lets recovery tell a torn tail from corruption: a damaged record is proven durable
when a later valid frame says so, and then the damage is corruption, never a tail to drop.

Compaction control file (``compact.ctl``) and segment manifest (``segments.manifest``)::

    0      8    magic            b"MQSJCTL\\x01" (control) or b"MQSJMAN\\x01" (manifest)
    8      4    body length      u32
    12     4    crc              u32, CRC-32C of the body
    16     n    body             msgpack; control: {"inputs": [seq...], "outputs":
                                 [[tmp_name, seq]...]}; manifest: {"live": [seq...],
                                 "retiring": [seq...]} (``journal.manifest``)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

from .crc import crc32c

FORMAT_VERSION = 1

SEGMENT_MAGIC = b"MQSJSEG\x01"
SEGMENT_HEADER = struct.Struct("<8sHHIQQQQQ4s")
SEGMENT_HEADER_SIZE = 64
SEGMENT_FLAG_COMPACTED = 1
SEGMENT_FLAG_LISTED = 2

FRAME_HEADER = struct.Struct("<IBBHQQQ")
FRAME_HEADER_SIZE = 32
FRAME_CRC = struct.Struct("<I")
FRAME_OVERHEAD = FRAME_HEADER_SIZE + FRAME_CRC.size

CONTROL_MAGIC = b"MQSJCTL\x01"
MANIFEST_MAGIC = b"MQSJMAN\x01"
RELOCATION_MAGIC = b"MQSJREL\x01"
CONTROL_HEADER = struct.Struct("<8sII")

assert SEGMENT_HEADER.size + 4 == SEGMENT_HEADER_SIZE
assert FRAME_HEADER.size == FRAME_HEADER_SIZE
assert FRAME_OVERHEAD == 36
assert CONTROL_HEADER.size == 16

_U32 = struct.Struct("<I")


@dataclass(frozen=True)
class SegmentHeader:
    """The decoded header of one segment file.

    Attributes:
        sequence: segment sequence number; segments are read in this order.
        generation: random 64-bit id of this file; frames carrying another id are stale.
        created_ms: creation time, ms since the epoch.
        first_lsn: LSN the segment was started at (the first record's LSN or a lower bound).
        flags: ``SEGMENT_FLAG_COMPACTED`` when written by compaction, ``SEGMENT_FLAG_LISTED``
            when the journal keeps a segment manifest.
        file_size: bytes the file was created with (0: not recorded); a shorter file was
            truncated after it was written.
    """

    sequence: int
    generation: int
    created_ms: int
    first_lsn: int
    flags: int = 0
    file_size: int = 0

    def encode(self) -> bytes:
        """The 64 header bytes, CRC included."""
        body = SEGMENT_HEADER.pack(SEGMENT_MAGIC, FORMAT_VERSION, SEGMENT_HEADER_SIZE, self.flags,
                                   self.sequence, self.generation, self.created_ms,
                                   self.first_lsn, self.file_size, bytes(4))
        return body + _U32.pack(crc32c(body))


def decode_segment_header(data: bytes) -> Optional[SegmentHeader]:
    """Decode a segment header, or return ``None`` when it is not a valid one.

    Args:
        data: at least the first 64 bytes of a segment file.

    Returns:
        The header, or ``None`` if the magic, version, size or CRC is wrong.
    """
    if len(data) < SEGMENT_HEADER_SIZE:
        return None
    body = bytes(data[:SEGMENT_HEADER.size])
    (magic, version, size, flags, seq, gen, created, first_lsn, file_size,
     _r) = SEGMENT_HEADER.unpack(body)
    if magic != SEGMENT_MAGIC or version != FORMAT_VERSION or size != SEGMENT_HEADER_SIZE:
        return None
    if _U32.unpack_from(data, SEGMENT_HEADER.size)[0] != crc32c(body):
        return None
    return SegmentHeader(seq, gen, created, first_lsn, flags, file_size)


def encode_frame(kind: int, lsn: int, generation: int, synced_lsn: int, payload: bytes) -> bytes:
    """Encode one record frame.

    Args:
        kind: record kind, 1..255.
        lsn: the record's log sequence number.
        generation: the generation id of the segment the frame is written to.
        synced_lsn: the highest LSN durable at encoding time.
        payload: msgpack-encoded payload bytes.

    Returns:
        ``len(payload) + FRAME_OVERHEAD`` bytes.
    """
    body = FRAME_HEADER.pack(len(payload) + FRAME_OVERHEAD, kind, 0, 0, lsn, generation,
                             synced_lsn) + payload
    return body + _U32.pack(crc32c(body))


def encode_run_reference(buf: bytearray, records: List[Tuple[int, bytes]], index: int,
                         lsn: int, generation: int, synced_lsn: int, offset: int, limit: int,
                         sequence: int, locations: List[Any], location_type: Any) -> int:
    """Encode ``records[index:]`` (a list of (kind, packed payload bytes) tuples) as consecutive
    frames (the same bytes as ``encode_frame``) into ``buf``, the first at file ``offset`` with
    LSN ``lsn``, while the next frame ends at or before ``limit``; append a
    ``location_type(sequence, offset, length)`` (a tuple subclass) to ``locations`` for each.
    Returns the index of the first record not encoded (one batch of many small records costs
    one call, not one per record). ``encode_run`` is this function, compiled when the
    ``journal._frames`` extension was built (same bytes, return value and locations; about 4x
    faster; tests/journal/test_frames_compiled.py)."""
    head, u32, crc = FRAME_HEADER.pack, _U32.pack, crc32c
    new = tuple.__new__
    end = len(records)
    while index < end:
        kind, payload = records[index]
        flen = len(payload) + FRAME_OVERHEAD
        if offset + flen > limit:
            break
        h = head(flen, kind, 0, 0, lsn, generation, synced_lsn)
        buf += h
        buf += payload
        buf += u32(crc(payload, crc(h)))
        locations.append(new(location_type, (sequence, offset, flen)))
        offset += flen
        lsn += 1
        index += 1
    return index


encode_run: Callable[..., int]
try:  # the compiled encoder (setup.py builds it; optional)
    from ._frames import encode_run
except ImportError:  # pragma: no cover - exercised only where the extension was not built
    encode_run = encode_run_reference


@dataclass(frozen=True)
class FrameHeader:
    """The fixed fields of a frame, as read (not yet CRC-checked)."""

    frame_len: int
    kind: int
    lsn: int
    generation: int
    synced_lsn: int


def peek_frame(buf: bytes, offset: int) -> Optional[FrameHeader]:
    """Read the fixed header fields at ``offset`` without checking the CRC.

    Returns:
        The header, or ``None`` when fewer than 32 bytes remain.
    """
    if offset + FRAME_HEADER_SIZE > len(buf):
        return None
    flen, kind, _f, _r, lsn, gen, synced = FRAME_HEADER.unpack_from(buf, offset)
    return FrameHeader(flen, kind, lsn, gen, synced)


def check_frame(buf: bytes, offset: int, generation: int, max_frame: int) -> Optional[str]:
    """Validate the frame at ``offset`` of ``buf`` fully.

    Args:
        buf: bytes of a segment (or a window of it starting at a record boundary).
        offset: where the frame starts in ``buf``.
        generation: the generation id the frame must carry.
        max_frame: largest acceptable ``frame_len`` in bytes.

    Returns:
        ``None`` when the frame is valid, else the reason it is not (a short phrase).
    """
    if offset + FRAME_HEADER_SIZE > len(buf):
        return "truncated frame header"
    flen, kind, flags, reserved, _lsn, gen, _s = FRAME_HEADER.unpack_from(buf, offset)
    if flen < FRAME_OVERHEAD or flen > max_frame:
        return f"bad frame length {flen}"
    if kind == 0 or flags != 0 or reserved != 0:
        return "bad kind or flags"
    if gen != generation:
        return "generation mismatch (stale or foreign frame)"
    end = offset + flen
    if end > len(buf):
        return "truncated frame"
    stored = _U32.unpack_from(buf, end - 4)[0]
    if crc32c(memoryview(buf)[offset:end - 4]) != stored:
        return "crc mismatch"
    return None


def encode_control(body: bytes, magic: bytes = CONTROL_MAGIC) -> bytes:
    """Frame a control or manifest body (msgpack bytes) with magic, length and CRC."""
    return CONTROL_HEADER.pack(magic, len(body), crc32c(body)) + body


def decode_control(data: bytes, magic: bytes = CONTROL_MAGIC) -> Optional[bytes]:
    """Return the body, or ``None`` when the file is torn or not a file of that ``magic``."""
    if len(data) < CONTROL_HEADER.size:
        return None
    found, length, crc = CONTROL_HEADER.unpack_from(data, 0)
    body = bytes(data[CONTROL_HEADER.size:CONTROL_HEADER.size + length])
    if found != magic or len(body) != length or crc32c(body) != crc:
        return None
    return body
