"""The journal's dead marks and pins in the index (version 9: a bitmap per segment, packed
waits): they survive a reopen without costing RAM per record, still keep acks until their
messages' segments go, and a version 8 index (one entry per dead record) is read and rewritten.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any, Dict

from pyroaring import BitMap64

from engine import Broker, Message, QueueConfig
from journal import Journal, JournalOptions
from recovery.checkpoint import META_KEY, PAIR, read_meta, rows
from recovery.entries import ID
from recovery.index import LmdbIndex
from recovery.tables import pack_value, unpack_value

OPTS = JournalOptions(segment_size=16 * 1024)
N = 600


def _liveness(b: Broker) -> Dict[str, int]:
    return b._p.journal.liveness.memory()  # white box: what the bookkeeping holds


def _acked_out_of_order(d: str) -> Dict[str, int]:
    """N messages over many segments, all received and acked in random order; the queue's
    record keeps the first segment, and a second queue's backlog keeps the others."""
    with Broker.open(d, journal_options=OPTS) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        b.create_address("keep")
        b.create_queue(QueueConfig("keep", "keep"))
        with b.session() as s:
            for i in range(N):
                s.send("q", Message(f"m{i}".encode() * 8))
                if i % 10 == 0:
                    s.send("keep", Message(b"k"))
            c = s.create_consumer("q", window=N)
            got = c.receive_many(N, timeout=1)
            assert len(got) == N
            random.Random(3).shuffle(got)
            for i in range(0, N, 50):
                s.ack_many(got[i:i + 50])
        held = _liveness(b)
        assert held["waiting_tombstones"] > N // 2 and held["pinned_tombstones"] == 0
        return held


def test_waiting_acks_survive_a_reopen_and_still_hold_their_messages(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    held = _acked_out_of_order(d)
    seen = []
    for rebuild in (False, True):
        if rebuild:
            shutil.rmtree(os.path.join(d, "index"))
        with Broker.open(d, journal_options=OPTS) as b:
            assert b.recovery_report.rebuilt == rebuild
            assert b.queue_info("q").message_count == 0  # no ack lost, no message back
            assert b.queue_info("keep").message_count == N // 10
            seen.append(_liveness(b))
    assert seen[0] == seen[1]  # the index holds what a replay of the journal finds
    assert seen[0]["waiting_tombstones"] == held["waiting_tombstones"]
    with Broker.open(d, journal_options=OPTS) as b:
        with b.session() as s:
            c = s.create_consumer("keep")
            s.ack_many(c.receive_many(N, timeout=1))
        b.compact(force=True)
        assert _liveness(b)["waiting_tombstones"] < held["waiting_tombstones"]
        after = _liveness(b)
    with Broker.open(d, journal_options=OPTS) as b:
        assert b.recovery_report.index == "used"
        assert b.queue_info("q").message_count == 0
        assert b.queue_info("keep").message_count == 0
        assert _liveness(b) == after


def _as_version_8(index_dir: str, journal_dir: str) -> int:
    """Rewrite a version 9 index's dead marks as version 8 stored them (one ``jdead`` entry
    per dead record, with its frame length); returns how many."""
    with Journal.open(journal_dir, JournalOptions(segment_size=OPTS.segment_size,
                                                  read_only=True)) as j:
        lengths = {(r.location.segment, r.location.offset): r.location.length
                   for r in j.records()}
    idx = LmdbIndex(index_dir)
    try:
        meta: Dict[str, Any] = read_meta(idx)
        changes: Dict[str, Dict[bytes, Any]] = {"jmarks": {}, "jdead": {}, "meta": {}}
        for k, v in rows(idx, "jmarks"):
            seq = ID.unpack(k)[0]
            _dead_bytes, raw = unpack_value("jmarks", k, v)
            changes["jmarks"][k] = None
            for off in BitMap64.deserialize(raw):
                key = PAIR.pack(seq, off)
                changes["jdead"][key] = pack_value(key, lengths.get((seq, off), 64))  # a segment
                # deleted after the last commit: no length to find, and none is read
        meta["version"] = 8
        meta["counts"]["jmarks"] = 0
        meta["counts"]["jdead"] = len(changes["jdead"])
        changes["meta"][META_KEY] = pack_value(META_KEY, meta)
        idx.commit(changes)
        return len(changes["jdead"])
    finally:
        idx.close()


def test_a_version_8_index_is_read_and_its_dead_marks_rewritten(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    _acked_out_of_order(d)
    shutil.copytree(d, str(tmp_path / "v9"))
    with Broker.open(str(tmp_path / "v9"), journal_options=OPTS) as b:
        held = _liveness(b)
    assert _as_version_8(os.path.join(d, "index"), os.path.join(d, "journal")) >= N
    with Broker.open(d, journal_options=OPTS) as b:
        assert b.recovery_report.index == "used"
        assert b.queue_info("q").message_count == 0
        assert _liveness(b) == held
        b.checkpoint()
    idx = LmdbIndex(os.path.join(d, "index"), read_only=True)
    try:
        assert idx.entries("jdead") == 0 and idx.entries("jmarks") > 0
        assert read_meta(idx)["version"] == 9
    finally:
        idx.close()
    with Broker.open(d, journal_options=OPTS) as b:
        assert b.recovery_report.index == "used"
        assert _liveness(b) == held
