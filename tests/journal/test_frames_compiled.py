"""The compiled frame encoder (``journal._frames``) writes exactly the bytes, returns exactly
the index and makes exactly the locations of the Python reference (``encode_run_reference``),
and its CRC-32C (the header shared with the Spark scan) is the reference CRC."""

from __future__ import annotations

import enum
from typing import List, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# built by the install (setup.py): failing here means not compiled
from mqstore.journal import _frames as frames
from mqstore.journal import format as fmt
from mqstore.journal.crc import crc32c_reference
from mqstore.journal.segment import Location

U64 = st.integers(0, 2**64 - 1)
records = st.lists(st.tuples(st.integers(1, 255), st.binary(max_size=300)), max_size=20)


def both(prefix: bytes, recs: List[Tuple[int, bytes]], index: int, lsn: int, gen: int,
         synced: int, offset: int, limit: int, seq: int):
    out = []
    for fn in (frames.encode_run, fmt.encode_run_reference):
        buf, locs = bytearray(prefix), []
        upto = fn(buf, recs, index, lsn, gen, synced, offset, limit, seq, locs, Location)
        out.append((bytes(buf), upto, locs, [type(x) for x in locs]))
    return out


def test_the_install_built_it_and_the_journal_uses_it() -> None:
    assert fmt.encode_run is frames.encode_run


@settings(max_examples=400, deadline=None)
@given(prefix=st.binary(max_size=40), recs=records, data=st.data(), gen=U64, synced=U64,
       offset=st.integers(0, 1 << 40), room=st.integers(0, 4000), seq=st.integers(0, 2**63))
def test_same_bytes_index_and_locations(prefix: bytes, recs: List[Tuple[int, bytes]],
                                        data: st.DataObject, gen: int, synced: int,
                                        offset: int, room: int, seq: int) -> None:
    index = data.draw(st.integers(0, len(recs)))
    lsn = data.draw(st.integers(1, 2**64 - 1 - len(recs)))
    got, want = both(prefix, recs, index, lsn, gen, synced, offset, offset + room, seq)
    assert got == want
    buf, upto, locs, _types = got
    for loc in locs:  # and every frame is valid where its location says
        start = len(prefix) + loc.offset - offset
        assert fmt.check_frame(buf, start, gen, 1 << 20) is None


class Kind(enum.IntEnum):
    MESSAGE = 5
    ACK = 6


def test_int_subclass_kinds_encode_as_their_value() -> None:
    """Callers pass enum kinds (the engine's ``RecordKind`` is an ``IntEnum``)."""
    recs = [(Kind.MESSAGE, b"\x80"), (Kind.ACK, b"\x81\xa1q\x02"), (True, b"")]
    got, want = both(b"", recs, 0, 7, 99, 3, 64, 1 << 20, 2)
    assert got == want and got[1] == 3


def test_bad_records_raise_and_change_nothing() -> None:
    for bad in ([(1, "text")], [(256, b"x")], [(1,)], [[1, b"x"]], [(1, bytearray(b"x"))]):
        buf, locs = bytearray(b"keep"), ["keep"]
        with pytest.raises((TypeError, ValueError)):
            frames.encode_run(buf, [(1, b"ok")] + bad, 0, 1, 1, 0, 0, 1 << 20, 1, locs,
                              Location)
        assert buf == b"keep" and locs == ["keep"]


@given(st.binary(max_size=2000))
def test_crc_is_the_reference_crc(data: bytes) -> None:
    assert frames.crc32c(data) == crc32c_reference(data)


def test_the_journal_decodes_with_it() -> None:
    from mqstore.journal import segment
    assert segment.decode_run is not segment.decode_run_reference
    assert segment.decode_run.__doc__ == "``decode_run_reference``, compiled."


damage = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(1, 255)), max_size=3)


@settings(max_examples=500, deadline=None)
@given(recs=records, data=st.data(), gen=U64, synced=U64, flips=damage,
       cut=st.integers(0, 1 << 16), tail=st.sampled_from([b"", b"\x00" * 40, b"\x07\x00"]))
def test_decode_gives_the_reference_frames_position_status_and_lsn(
        recs: List[Tuple[int, bytes]], data: st.DataObject, gen: int, synced: int,
        flips: List[Tuple[int, int]], cut: int, tail: bytes) -> None:
    """Valid runs, runs cut short, bytes flipped anywhere (lengths, kinds, flags, LSNs,
    generations, payloads, CRCs), zero tails, and every argument the callers vary."""
    from mqstore.journal import segment
    lsn = data.draw(st.integers(1, 2**64 - 1 - len(recs)))
    buf = bytearray()
    fmt.encode_run_reference(buf, recs, 0, lsn, gen, synced, 0, 1 << 30, 1, [], Location)
    buf += tail
    for at, mask in flips:
        if buf:
            buf[at % len(buf)] ^= mask
    buf = buf[:cut] if cut < len(buf) else buf
    pos = data.draw(st.integers(0, len(buf)))
    end = data.draw(st.integers(pos, len(buf)))
    max_frame = data.draw(st.sampled_from([36, 100, 1 << 20]))
    last = data.draw(st.sampled_from([0, lsn - 1, lsn, min(lsn + 1, 2**64 - 1)]))  # u64s
    base = data.draw(st.integers(0, 1 << 40))
    for source in (bytes(buf), buf):
        got = segment.decode_run(source, pos, end, gen, max_frame, last, base)
        want = segment.decode_run_reference(source, pos, end, gen, max_frame, last, base)
        assert got == want
        assert [type(f) for f in got[0]] == [segment.FrameInfo] * len(got[0])
