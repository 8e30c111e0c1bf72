"""The compiled scan (``tools.spark._scan``) gives exactly the rows of the Python reference scan,
whatever the payloads (shapes it decodes, shapes it hands back to Python) and the damage."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.journal.format import SegmentHeader, encode_frame
from mqstore.recovery.schema import RecordKind
from mqstore.tools.spark import columns
from mqstore.tools.spark.columns import EntryColumns, queue_names_in

GEN = 0x1234_5678_9ABC_DEF0
NAMES = {2: "sub2", 3: "sub3", 7: ""}

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                    st.text(max_size=8), st.binary(max_size=8),
                    st.floats(allow_nan=False))
values = st.one_of(scalars, st.lists(scalars, max_size=3),
                   st.dictionaries(st.text(max_size=4), scalars, max_size=3))


def segment(records: Sequence[Tuple[int, bytes]]) -> bytearray:
    """A segment buffer: header, then the frames of (kind, raw payload), then zeros."""
    buf = bytearray(SegmentHeader(1, GEN, 0, 1, 0).encode())
    for lsn, (kind, payload) in enumerate(records, start=1):
        buf += encode_frame(kind, lsn, GEN, 0, payload)
    return buf + bytes(256)


def rows(buf: bytes, compiled: bool, **kw: Any) -> List[tuple]:
    cols = EntryColumns(NAMES, compiled=compiled, **kw)
    cols.scan(1, bytes(buf), GEN, 64, len(buf), 0, 1 << 20)
    got = cols.take()
    return list(zip(*(got[n] for n in columns.NAMES)))


def same(buf: bytes, **kw: Any) -> List[tuple]:
    got, want = rows(buf, True, **kw), rows(buf, False, **kw)
    assert got == want
    return got


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def typical() -> List[Tuple[int, bytes]]:
    msg = {"mid": 10, "addr": "orders", "q": [2, 3, 99], "body": b"hello",
           "props": {"customer": "c1", "n": 5, "raw": b"\x00\xff", "ok": True, "none": None},
           "ts": 1_700_000_000_000, "exp": 0, "prio": 4}
    return [(int(RecordKind.QUEUE_ADD), pack({"id": 2, "name": "sub2", "addr": "orders"})),
            (int(RecordKind.MESSAGE), pack(msg)),
            (int(RecordKind.MESSAGE), pack({"mid": 11, "q": [], "body": b""})),
            (int(RecordKind.ACK), pack({"q": 2, "m": 10, "r": "acked"})),
            (int(RecordKind.ACK), pack({"q": 7, "m": 10, "r": 3})),
            (int(RecordKind.ACK), pack({"q": 3, "m": 10, "r": b"x"})),  # Python renders it
            (int(RecordKind.DELIVERY), pack({"q": 3, "m": 10, "n": 2})),
            (int(RecordKind.TX), pack({"acks": [{"q": 2, "m": 11, "r": "expired"}], "tx": 9,
                                       "msgs": [msg, {"mid": 12, "q": [3], "body": b"b"}]})),
            (int(RecordKind.SETTINGS), pack({"match": "#", "settings": {"ring": 5}})),
            (int(RecordKind.MESSAGE), pack({"mid": 13, "props": {"f": 1.5}, "body": b""})),
            (int(RecordKind.MESSAGE), pack({"mid": 14, "addr": "a"}) + b"\xc0"),  # extra data
            (int(RecordKind.MESSAGE), b"\x81\xa4addr\xa2\xff\xfe"),  # invalid UTF-8
            (int(RecordKind.MESSAGE), pack({"mid": 15, "q": [2], "body": b"z", "x": [1, {}]}))]


def test_the_extension_is_built_by_the_install() -> None:
    assert columns._compiled_scan is not None


def test_typical_and_odd_payloads_give_the_reference_rows() -> None:
    buf = segment(typical())
    got = same(buf)
    assert len(got) == 15 and sum(1 for r in got if r[16] is False) == 2  # two damaged rows
    same(buf, with_body=True)
    same(buf, kinds=["ACK", "QUEUE_ADD"])
    same(buf, kinds=["MESSAGE"], lsn_min=3, lsn_max=9)


def test_damage_anywhere_gives_the_reference_rows() -> None:
    clean = segment(typical())
    for pos in range(64, len(clean) - 200, 7):
        flipped = bytearray(clean)
        flipped[pos] ^= 0x41
        same(flipped)
    for cut in range(64, len(clean) - 256, 11):
        same(clean[:cut] + bytes(300))
    same(clean[:-256] + bytes(40) + b"garbage" + bytes(20))


def test_queue_names_walk_matches_the_reference() -> None:
    clean = segment(typical())
    for pos in range(64, len(clean) - 200, 5):
        flipped = bytearray(clean)
        flipped[pos] ^= 0x10
        assert queue_names_in(bytes(flipped), compiled=True) == \
            queue_names_in(bytes(flipped), compiled=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([5, 6, 7, 8, 11]),
                          st.one_of(values, st.dictionaries(st.sampled_from(
                              ["mid", "addr", "q", "body", "props", "ts", "exp", "m", "r", "n",
                               "tx", "msgs", "acks", "upto", "other"]), values,
                                                max_size=6))),
                min_size=1, max_size=6),
       st.one_of(st.none(), st.sampled_from(["MESSAGE", "ACK", "DELIVERY"])))
def test_any_payload_shape_gives_the_reference_rows(records: List[Tuple[int, Any]],
                                                    kind: Optional[str]) -> None:
    """Whatever a CRC-valid payload holds, the scan never fails: a shape it cannot read is one
    damaged row for its record (a Spark job over a journal from a buggy writer still runs)."""
    buf = segment([(k, pack(p)) for k, p in records])
    want = rows(buf, False, kinds=[kind] if kind else None)
    assert rows(buf, True, kinds=[kind] if kind else None) == want
    lsns = {r[2] for r in want}
    for r in want:
        if r[16] is False:  # a damaged record has only its damaged row
            assert r[17].startswith("payload") and sum(1 for x in want if x[2] == r[2]) == 1
    if kind is None:  # every record but a TX (one row per message and ack) gives a row
        assert {lsn for lsn, (k, _p) in enumerate(records, start=1) if k != 8} <= lsns


def test_a_payload_that_is_not_a_map_is_one_damaged_row() -> None:
    buf = segment([(int(RecordKind.MESSAGE), pack([1, 2])),
                   (int(RecordKind.TX), pack({"tx": 1, "msgs": [{"mid": 1}], "acks": "x"})),
                   (int(RecordKind.ACK), pack({"q": 2, "m": 1}))])
    got = same(buf)
    assert [(r[2], r[3], r[16]) for r in got] == [(1, "MESSAGE", False), (2, "TX", False),
                                                 (3, "ACK", True)]
    assert got[0][17].startswith("payload has an unexpected shape")


def test_a_depage_record_is_a_row_with_its_address_and_its_acks() -> None:
    """DEPAGE (paged messages joined their queues): one row naming the address, and one ACK
    row per reference the queues' policies removed as they joined."""
    buf = segment([(int(RecordKind.DEPAGE), pack({"addr": "orders", "upto": [5, 0], "acks": [
        {"q": 2, "m": 10, "r": "evicted"}, {"q": 3, "m": 11, "r": "replaced"}]}))])
    got = same(buf)
    assert [(r[3], r[6]) for r in got] == [("DEPAGE", "orders"), ("ACK", None), ("ACK", None)]
    assert [r[7] for r in got[1:]] == ["sub2", "sub3"]
