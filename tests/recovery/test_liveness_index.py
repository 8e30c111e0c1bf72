"""The journal's dead marks and pins in the index (since version 9: a bitmap per segment,
packed waits): they survive a reopen without costing RAM per record, still keep acks until
their messages' segments go, and an index of an older layout is rebuilt from the journal.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any, Dict


from mqstore.engine import Broker, Message, QueueConfig
from mqstore.journal import JournalOptions
from mqstore.recovery.checkpoint import META_KEY, read_meta
from mqstore.recovery.index import LmdbIndex
from mqstore.recovery.tables import pack_value

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
        with b.session(block_on_acknowledge=True) as s:  # (the acks' facts applied on return)
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


def _set_version(index_dir: str, version: int) -> None:
    """Mark a written index as an older layout version (nothing else changes)."""
    idx = LmdbIndex(index_dir)
    try:
        meta: Dict[str, Any] = read_meta(idx)
        meta["version"] = version
        idx.commit({"meta": {META_KEY: pack_value(META_KEY, meta)}})
    finally:
        idx.close()


def test_an_index_of_an_older_layout_is_rebuilt_and_the_store_is_the_same(tmp_path: Path
                                                                           ) -> None:
    """Version 9 kept no priority in its order keys, version 8 one dead mark per record: such
    an index is rebuilt from the journal at the first open, with the same store and
    bookkeeping, and used again after."""
    d = str(tmp_path / "s")
    _acked_out_of_order(d)
    with Broker.open(d, journal_options=OPTS) as b:
        held = _liveness(b)
        counts = b.recovery_report.counts
    for version in (8, 9):
        _set_version(os.path.join(d, "index"), version)
        with Broker.open(d, journal_options=OPTS) as b:
            assert b.recovery_report.rebuilt, b.recovery_report.index
            assert b.recovery_report.counts == counts
            assert b.queue_info("q").message_count == 0
            assert b.queue_info("keep").message_count == N // 10
            assert _liveness(b) == held
        with Broker.open(d, journal_options=OPTS) as b:
            assert b.recovery_report.index == "used"

