"""The compiled fold of MESSAGE records (``recovery._fold``, through ``MessageFold``) leaves
exactly the image the Python fold (``StoreImage.apply``, the reference) leaves: the same stored
bytes in every table, the same counts, queue counts, address sizes and paging states, segment
holds, next id, last LSN and dead records, over journals mixing plain messages with every shape
it must leave to the reference (properties, paged, unknown queues, odd types, extra keys...),
acks, queue deletions and index commits part-way."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mqstore.journal.records as jrecords
import mqstore.recovery.store as rstore
from mqstore.journal import Journal, JournalOptions, Location, SimulatedFileSystem
from mqstore.recovery import _fold  # built by the install (setup.py): failing here means not  # noqa
from mqstore.recovery.checkpoint import committed
from mqstore.recovery.image import StoreImage
from mqstore.recovery.indexstore import MemoryIndex
from mqstore.recovery.messagefold import MessageFold
from mqstore.recovery.schema import RecordKind

OPTS = JournalOptions(segment_size=16384)  # journals of several segments
ADDRESSES = ["a", "b", "adrésse", "x" * 40, "y" * 300]
QUEUES = {1: "a", 2: "a", 3: "b"}
INTS = st.one_of(st.integers(-40, 300), st.integers(-2**63, 2**63 - 1),
                 st.sampled_from([127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32,
                                  2**63 - 1, -1, -32, -33, -128, -129, -32768, -32769, -2**31,
                                  -2**31 - 1, -2**63]))  # msgpack's format boundaries


@st.composite
def message(draw, mid: int) -> Dict[str, Any]:
    """A MESSAGE payload: mostly plain, sometimes a shape the compiled fold must decline."""
    p: Dict[str, Any] = {"mid": mid, "addr": draw(st.sampled_from(ADDRESSES)),
                         "q": draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=3,
                                            unique=True)),
                         "body": draw(st.binary(max_size=300)), "props": {},
                         "ts": draw(INTS), "exp": draw(INTS), "prio": draw(INTS)}
    odd = draw(st.sampled_from(["plain"] * 24 + [
        "props", "paged", "unknown queue", "no queue", "extra key", "ts bool", "no props",
        "props none", "pg false", "few keys", "str body", "big mid"]))
    if odd == "props":
        p["props"] = {"k": draw(INTS)}
    elif odd == "paged":
        p["pg"] = True
    elif odd == "unknown queue":
        p["q"] = p["q"] + [99]
    elif odd == "no queue":
        p["q"] = []
    elif odd == "extra key":
        p["new"] = 1
    elif odd == "ts bool":
        p["ts"] = True
    elif odd == "no props":
        del p["props"]
    elif odd == "props none":
        p["props"] = None
    elif odd == "pg false":
        p["pg"] = False
    elif odd == "few keys":
        p = {"q": p["q"], "mid": mid}
    elif odd == "str body":
        p["body"] = "text"
    elif odd == "big mid":
        p["mid"] = 2**63 + mid
    keys = draw(st.permutations(list(p)))
    return {k: p[k] for k in keys}


@st.composite
def journals(draw) -> List[Tuple[int, Any]]:
    """Records: addresses and queues, then messages, acks, queue deletions and messages
    whose id was seen before."""
    recs: List[Tuple[int, Any]] = []
    for i, name in enumerate(["a", "b"], 100):
        recs.append((RecordKind.ADDRESS_ADD, {"id": i, "name": name, "rt": ["anycast"]}))
    for qid, addr in QUEUES.items():
        recs.append((RecordKind.QUEUE_ADD, {"id": qid, "name": f"q{qid}", "addr": addr,
                                            "rt": "anycast", "cfg": {}}))
    mid, sent = 1000, []
    steps = st.sampled_from(["msg"] * 8 + ["ack", "ack", "delete", "again"])
    for step in draw(st.lists(steps, min_size=3, max_size=60)):
        if step == "msg":
            mid += draw(st.integers(1, 3))
            p = draw(message(mid))
            recs.append((RecordKind.MESSAGE, p))
            sent.append(p)
        elif step == "ack" and sent:
            p = draw(st.sampled_from(sent))
            qs = p.get("q") or [1]
            recs.append((RecordKind.ACK, {"q": draw(st.sampled_from(qs)), "m": p["mid"],
                                          "r": "ack"}))
        elif step == "again" and sent:  # a message id seen before (a hostile journal)
            recs.append((RecordKind.MESSAGE, draw(st.sampled_from(sent))))
        elif step == "delete":
            recs.append((RecordKind.QUEUE_DEL, {"id": draw(st.sampled_from([2, 3]))}))
    return recs


class Sink:
    """Records what the fold reports dead."""

    def __init__(self) -> None:
        self.calls: List[Any] = []

    def mark_dead(self, locations: List[Location]) -> None:
        self.calls.append(("dead", list(locations)))

    def mark_dead_after(self, location: Location, targets: List[Location]) -> None:
        self.calls.append(("after", location, list(targets)))


def fold(j: Journal, compiled: bool, from_lsn: int, every: int) -> Dict[str, Any]:
    """Replay ``j`` into a new image; everything a user of the image can observe."""
    index = MemoryIndex()
    image, sink = StoreImage(index), Sink()

    def commit() -> None:
        index.commit({t.name: t.changes() for t in image.tables.all()})
        committed(image)

    if not compiled:
        rstore.MessageFold = lambda img: MessageFold(img, None)
    try:
        n = rstore.replay(j, image, from_lsn, sink, commit if every else None)
    except rstore.MalformedRecordError as exc:
        return {"error": (exc.offset, exc.lsn)}
    finally:
        rstore.MessageFold = MessageFold
    t = image.tables
    stored = {}
    for tb in t.all():
        stored[tb.name] = dict(index.tables[tb.name])
        stored[tb.name].update((k, v) for k, v in tb.changes().items() if v is not None)
    return {"n": n, "tables": stored,
            "deleted": {tb.name: sorted(k for k, v in tb.changes().items() if v is None)
                        for tb in t.all()},
            "counts": [tb.count for tb in t.all()],
            "queues": {q.id: (q.count, q.paged) for q in image.queues.values()},
            "sizes": image.ledger.sizes, "total": image.ledger.total_bytes,
            "pages": {a: (s.start, s.messages, s.size) for a, s in image.ledger.pages.items()},
            "seglive": image.seglive, "next_id": image.next_id, "last_lsn": image.last_lsn,
            "sink": sink.calls,
            "refs": {q: [(r.mid, r.order) for r in image.refs(q)] for q in image.queues},
            "messages": sorted((m.mid, m.address, m.refcount, m.body_size, m.location)
                               for m in image.messages())}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(recs=journals(), window=st.sampled_from([300, 2000, 8 << 20]),
       every=st.sampled_from([0, 1, 3, 1000]), skip=st.integers(0, 12))
def test_compiled_and_reference_folds_leave_the_same_image(
        monkeypatch: pytest.MonkeyPatch, recs: List[Tuple[int, Any]], window: int, every: int,
        skip: int) -> None:
    fs = SimulatedFileSystem()
    with Journal.open("/j", OPTS, fs=fs) as j:
        for kind, payload in recs:
            last = j.append(int(kind), payload)
        last.wait()
    monkeypatch.setattr(jrecords, "READ_WINDOW", window)  # runs split anywhere
    monkeypatch.setattr(rstore, "EVERY", max(every, 1))
    with Journal.open("/j", OPTS, fs=fs) as j:
        from_lsn = min(skip, len(recs))  # a tail replay starts part-way into a run
        want = fold(j, False, from_lsn, every)
        got = fold(j, True, from_lsn, every)
    assert got == want


def test_plain_messages_go_through_the_compiled_fold(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    with Journal.open(d, JournalOptions()) as j:
        j.append(int(RecordKind.QUEUE_ADD), {"id": 1, "name": "q", "addr": "q",
                                             "rt": "anycast", "cfg": {}})
        for mid in range(10, 20):
            last = j.append(int(RecordKind.MESSAGE), {"mid": mid, "addr": "q", "q": [1],
                                                      "body": b"x", "props": {}, "ts": 1,
                                                      "exp": 0, "prio": 4})
        last.wait()
    with Journal.open(d, JournalOptions()) as j:
        image = StoreImage()
        run = next(j.runs())
        first = run.record(run.frames[0])
        image.apply(first.kind, first.payload, first.location, first.lsn, Sink())
        assert MessageFold(image)(run, 1, 0, 4) == (5, 4)  # stops at its limit
        assert MessageFold(image)(run, 5, 0, 1000) == (11, 6)
        assert [r.mid for r in image.refs(1)] == list(range(10, 20))
        assert image.queues[1].count == 10 and image.next_id == 20
        assert image.ledger.size("q") == (10, 10)
        assert image.message(15).location == Location(*run.record(run.frames[6]).location)


def _plain(mid: int) -> Dict[str, Any]:
    return {"mid": mid, "addr": "a", "q": [1], "body": b"x", "props": {}, "ts": 1, "exp": 0,
            "prio": 4}


@pytest.mark.parametrize("every", [0, 1, 2, 3])
def test_a_message_id_deleted_then_seen_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              every: int) -> None:
    """A hostile journal: message 7 committed, acked, then written again and acked again
    (with ``every`` 3, all three after the commit). The overlay must delete it from the store
    both times, whichever fold took it."""
    recs = [(RecordKind.QUEUE_ADD, {"id": 1, "name": "q1", "addr": "a", "rt": "anycast",
                                    "cfg": {}}),
            (RecordKind.MESSAGE, _plain(7)), (RecordKind.MESSAGE, _plain(8)),
            (RecordKind.ACK, {"q": 1, "m": 7, "r": "ack"}),
            (RecordKind.MESSAGE, _plain(7)), (RecordKind.ACK, {"q": 1, "m": 7, "r": "ack"}),
            (RecordKind.MESSAGE, _plain(9))]
    d = str(tmp_path / "j")
    with Journal.open(d, JournalOptions()) as j:
        for kind, payload in recs:
            last = j.append(int(kind), payload)
        last.wait()
    monkeypatch.setattr(rstore, "EVERY", max(every, 1))
    with Journal.open(d, JournalOptions()) as j:
        want, got = fold(j, False, 0, every), fold(j, True, 0, every)
    assert got == want
    assert [m[0] for m in got["messages"]] == [8, 9]


def test_a_run_over_more_queues_than_the_compiled_fold_counts_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled fold counts references per queue in a table of 64 and flushes it when a
    65th queue comes: 150 queues, messages to one, two or three of them, one run."""
    recs: List[Tuple[int, Any]] = [
        (RecordKind.QUEUE_ADD, {"id": q, "name": f"q{q}", "addr": "a", "rt": "anycast",
                                "cfg": {}}) for q in range(1, 151)]
    for i in range(600):
        queues = sorted({1 + i % 150, 1 + (i * 7) % 150, 1 + (i * 13) % 150})[:1 + i % 3]
        recs.append((RecordKind.MESSAGE, dict(_plain(10_000 + i), q=queues)))
    d = str(tmp_path / "j")
    with Journal.open(d, JournalOptions()) as j:
        for kind, payload in recs:
            last = j.append(int(kind), payload)
        last.wait()
    monkeypatch.setattr(rstore, "EVERY", 1000)
    with Journal.open(d, JournalOptions()) as j:
        want, got = fold(j, False, 0, 0), fold(j, True, 0, 0)
    assert got == want
    assert sum(n for n, _p in got["queues"].values()) == sum(len(p["q"]) for k, p in recs
                                                               if k == RecordKind.MESSAGE)
