"""Frame and header codecs: round trips, incremental decoding, every bit flip and truncation."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.journal.crc import crc32c, crc32c_reference
from mqstore.journal.format import (FRAME_OVERHEAD, SEGMENT_HEADER_SIZE, SegmentHeader,
                                    decode_segment_header, encode_frame)
from mqstore.journal.records import Record, unpack_payload
from mqstore.journal.segment import FrameDecoder, Location, scan_frames

GEN = 0x1122334455667788
MAX = 1 << 16

payloads = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.text(max_size=40)
    | st.binary(max_size=200) | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=5),
    max_leaves=20)


def segment(records: list, gen: int = GEN) -> bytes:
    header = SegmentHeader(7, gen, 1234, 1).encode()
    frames = b"".join(encode_frame(k, i + 1, gen, i, msgpack.packb(p, use_bin_type=True))
                      for i, (k, p) in enumerate(records))
    return header + frames + bytes(64)


@given(st.integers(1, 255), st.integers(1, 2**63), payloads)
def test_frame_round_trip(kind: int, lsn: int, payload: object) -> None:
    data = msgpack.packb(payload, use_bin_type=True)
    frame = encode_frame(kind, lsn, GEN, lsn - 1, data)
    assert len(frame) == len(data) + FRAME_OVERHEAD
    buf = SegmentHeader(1, GEN, 0, 1).encode() + frame
    scan = scan_frames(buf, GEN, MAX)
    assert scan.bad_offset is None and len(scan.frames) == 1
    info = scan.frames[0]
    rec = Record.from_frame(frame, Location(1, info.offset, info.frame_len))
    assert (rec.kind, rec.lsn, rec.synced_lsn) == (kind, lsn, lsn - 1)
    assert rec.payload == payload


def test_header_round_trip_and_damage() -> None:
    header = SegmentHeader(42, GEN, 99, 1000, 1)
    raw = header.encode()
    assert len(raw) == SEGMENT_HEADER_SIZE
    assert decode_segment_header(raw) == header
    for i in range(len(raw) * 8):
        bad = bytearray(raw)
        bad[i // 8] ^= 1 << (i % 8)
        assert decode_segment_header(bytes(bad)) is None


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(1, 255), payloads), min_size=1, max_size=12),
       st.data())
def test_decoding_whole_and_byte_by_byte_agree(records: list, data: st.DataObject) -> None:
    buf = segment(records)
    whole = scan_frames(buf, GEN, MAX)
    # cut the segment anywhere: the incremental decoder must agree with the one-buffer scan
    cut = data.draw(st.integers(SEGMENT_HEADER_SIZE, len(buf)))
    part = buf[:cut]
    one = scan_frames(part, GEN, MAX)
    dec = FrameDecoder(GEN, MAX)
    got = []
    for i in range(SEGMENT_HEADER_SIZE, len(part)):
        got += dec.feed(part[i:i + 1])[0]
    dec.close()
    assert got == one.frames
    assert (dec.error[0] if dec.error else None) == one.bad_offset
    assert len(whole.frames) == len(records)


def test_every_bit_flip_is_detected() -> None:
    buf = segment([(1, {"a": 1}), (2, b"xyz" * 5), (3, "text")])
    clean = scan_frames(buf, GEN, MAX)
    frames_end = clean.end
    good = {(f.offset, f.lsn) for f in clean.frames}
    for i in range(SEGMENT_HEADER_SIZE * 8, frames_end * 8):
        bad = bytearray(buf)
        bad[i // 8] ^= 1 << (i % 8)
        scan = scan_frames(bytes(bad), GEN, MAX)
        # no frame covering the flipped byte is ever accepted
        for f in scan.frames:
            assert not f.offset <= i // 8 < f.offset + f.frame_len
            assert (f.offset, f.lsn) in good
        assert scan.bad_offset is not None or scan.nonzero_tail or len(scan.frames) < 3


def test_every_truncation_is_detected() -> None:
    buf = segment([(1, list(range(10))), (2, b"\x00" * 40), (3, {"k": "v"})])
    clean = scan_frames(buf, GEN, MAX)
    ends = {f.offset + f.frame_len for f in clean.frames}
    for cut in range(SEGMENT_HEADER_SIZE, clean.end):
        scan = scan_frames(buf[:cut], GEN, MAX)
        assert all(f.offset + f.frame_len <= cut for f in scan.frames)
        if cut not in ends and cut != SEGMENT_HEADER_SIZE:
            assert scan.bad_offset is not None, cut


def test_stale_generation_is_rejected() -> None:
    buf = bytearray(segment([(1, "old")], gen=GEN))
    scan = scan_frames(bytes(buf), GEN + 1, MAX)
    assert scan.frames == [] and scan.bad_offset == SEGMENT_HEADER_SIZE


@given(st.binary(max_size=3000), st.integers(0, 2**32 - 1))
def test_crc_fast_path_equals_crcmod_reference(data: bytes, seed: int) -> None:
    assert crc32c(data) == crc32c_reference(data)
    assert crc32c(data, seed) == crc32c_reference(data, seed)


@given(st.integers(1, 255), st.integers(1, 2**63), st.binary(max_size=500))
def test_every_frame_layout_crc_matches_reference(kind: int, lsn: int, data: bytes) -> None:
    frame = encode_frame(kind, lsn, GEN, 0, data)
    stored = int.from_bytes(frame[-4:], "little")
    assert stored == crc32c_reference(frame[:-4])


def test_payload_decoding_is_bounded() -> None:
    # a 5-byte array header claiming 2**32-1 elements must be refused, not allocated
    from mqstore.journal.errors import InvalidRecordError
    with pytest.raises(InvalidRecordError):
        unpack_payload(b"\xdd\xff\xff\xff\xff")
