"""The LMDB index is a cache of the journal: deleting, corrupting or rolling it back gives the
same recovered state as the fast path."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

from mqstore.engine import Broker, Message, QueueConfig, RoutingType
from mqstore.journal import JournalOptions
from tests.recovery.storestate import describe

ROOT = str(Path(__file__).resolve().parents[2])
OPTS = JournalOptions(segment_size=16 * 1024)


def build(d: str, rounds: int = 3, seed: int = 1) -> None:
    rng = random.Random(seed)
    # (deliveries journaled as they are handed out: a journal with every kind of record)
    b = Broker.open(d, journal_options=OPTS, checkpoint_records=0,
                    persist_delivery_count_before_delivery=True)
    if not b.address_names():
        b.create_address("orders", {RoutingType.ANYCAST})
        b.create_address("events", {RoutingType.MULTICAST})
        b.create_queue(QueueConfig("orders", "orders"))
        b.create_queue(QueueConfig("audit", "events", RoutingType.MULTICAST))
        b.create_queue(QueueConfig("billing", "events", RoutingType.MULTICAST))
    for r in range(rounds):
        with b.session() as s:
            s.send_many("orders", [Message(f"o{r}-{i}", {"i": i, "r": r}, priority=i % 10)
                                   for i in range(60)])
            s.send_many("events", [Message(f"e{r}-{i}", {"kind": "evt"}) for i in range(40)])
            c = s.create_consumer("orders")
            got = [c.receive(1) for _ in range(30)]
            for d in got[:20]:
                d.ack()
            c.close()  # 10 come back redelivered
            a = s.create_consumer("audit")
            for _ in range(25):
                a.receive(1).ack()
        with b.session(transacted=True) as t:
            t.send("orders", Message(f"tx{r}"))
            bc = t.create_consumer("billing")
            for _ in range(5):
                bc.receive(1).ack()
            t.commit()
        if rng.random() < 0.5:
            b.checkpoint()
    b.close()


def state_in_child(d: str) -> Dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "tests.recovery.storestate", d], cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    return json.loads(out.stdout)


def test_fast_path_and_rebuild_agree(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    build(d)
    with Broker.open(d, journal_options=OPTS) as b:
        assert b.recovery_report.index == "used"
        fast = describe(b)
    assert fast["queues"]["orders"]["count"] > 100
    assert any(m[1] == 1 for m in fast["queues"]["orders"]["messages"])  # redelivered ones
    shutil.rmtree(os.path.join(d, "index"))
    with Broker.open(d, journal_options=OPTS) as b:
        assert b.recovery_report.rebuilt
        assert describe(b) == fast
    with Broker.open(d, journal_options=OPTS) as b:  # the rebuild wrote a fresh checkpoint
        assert b.recovery_report.index == "used"
        assert describe(b) == fast


def test_corrupt_index_is_detected_and_rebuilt(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    build(d)
    fast = state_in_child(d)["state"]
    data = Path(d, "index", "data.mdb")
    pristine = data.read_bytes()
    rng = random.Random(7)
    outcomes = {"used": 0, "rebuilt": 0}
    for trial in range(12):
        raw = bytearray(pristine)
        for _ in range(8):
            pos = rng.randrange(len(raw))
            raw[pos] ^= 1 << rng.randrange(8)
        data.write_bytes(bytes(raw))
        got = state_in_child(d)
        assert got["state"] == fast, f"trial {trial}: wrong state with index {got['index']}"
        outcomes["used" if got["index"] == "used" else "rebuilt"] += 1
    assert outcomes["rebuilt"] > 0


def test_stale_index_from_an_older_checkpoint(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    build(d, rounds=2)
    old = str(tmp_path / "old-index")
    shutil.copytree(os.path.join(d, "index"), old)
    build(d, rounds=4, seed=2)  # more traffic, checkpoints, reclaimed segments
    with Broker.open(d, journal_options=OPTS) as b:
        latest = describe(b)
    shutil.rmtree(os.path.join(d, "index"))
    shutil.copytree(old, os.path.join(d, "index"))
    with Broker.open(d, journal_options=OPTS) as b:
        assert describe(b) == latest, b.recovery_report.index


def test_compaction_then_both_recovery_paths(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    build(d, rounds=6)
    with Broker.open(d, journal_options=OPTS) as b:
        before = describe(b)
        with b.session() as s:  # make most of the journal dead, then compact
            c = s.create_consumer("orders")
            while (m := c.receive(0.05)) is not None:
                m.ack()
        report = b.compact(force=True)
        assert report.compacted and report.records_copied > 0
        after = describe(b)
    assert after["queues"]["orders"]["count"] == 0
    assert after["queues"]["audit"] == before["queues"]["audit"]
    with Broker.open(d, journal_options=OPTS) as b:
        assert b.recovery_report.index == "used" and describe(b) == after
    shutil.rmtree(os.path.join(d, "index"))
    with Broker.open(d, journal_options=OPTS) as b:
        assert b.recovery_report.rebuilt and describe(b) == after


def test_queue_counts_written_as_they_change_keep_the_index_trusted(tmp_path: Path) -> None:
    """A commit writes the entries of the queues whose counts changed (not every queue's,
    issue 12): after sends to one queue, acks on another, or both, every reopen still trusts
    the index (a stale count would fail its check and force a rebuild) and counts are right."""
    d = str(tmp_path / "s")
    names = [f"q{i:03d}" for i in range(60)]
    with Broker.open(d, checkpoint_records=0) as b:
        for name in names:
            b.create_address(name)
            b.create_queue(QueueConfig(name, name))
        with b.session() as s:
            for name in names:
                s.send(name, Message(b"first"))
            s.send_many("q042", [Message(b"second"), Message(b"third")])
    for step in ("send", "ack", "both"):
        with Broker.open(d, checkpoint_records=0) as b:
            assert b.recovery_report.index == "used", (step, b.recovery_report.index)
            with b.session() as s:
                if step in ("send", "both"):
                    s.send_many("q007", [Message(b"more"), Message(b"more")])
                if step in ("ack", "both"):
                    c = s.create_consumer("q042")
                    c.receive(1).ack()
                    c.close()
    with Broker.open(d) as b:
        assert b.recovery_report.index == "used"
        counts = {n: b.queue_info(n).message_count for n in names}
    assert counts == {n: 5 if n == "q007" else 1 for n in names}


def test_counts_of_a_replayed_tail_are_written_by_the_next_commit(tmp_path: Path) -> None:
    """Messages sent after the last index commit, then kill -9: the open replays them (plain
    ones through the compiled fold), the next commit writes their queues' counts, and the
    open after that trusts the index."""
    d = str(tmp_path / "s")
    with Broker.open(d, checkpoint_records=0) as b:
        for name in ("a", "b"):
            b.create_address(name)
            b.create_queue(QueueConfig(name, name))
    code = ("import os, sys\nfrom mqstore.engine import Broker, Message\n"
            "b = Broker.open(sys.argv[1], checkpoint_records=0)\n"
            "with b.session() as s:\n    s.send_many('a', [Message(b'x') for _ in range(5)])\n"
            "os.kill(os.getpid(), 9)\n")
    subprocess.run([sys.executable, "-c", code, d], cwd=ROOT,
                   env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    with Broker.open(d, checkpoint_records=0) as b:
        assert b.recovery_report.replayed_records == 5
        assert b.queue_info("a").message_count == 5
    with Broker.open(d) as b:
        assert b.recovery_report.index == "used", b.recovery_report.index
        assert b.queue_info("a").message_count == 5 and b.queue_info("b").message_count == 0


def test_compaction_of_a_store_larger_than_a_read_chunk(tmp_path: Path) -> None:
    """Relocation streams the index's references and messages in chunks (4,096 entries) while
    it rewrites the moved ones: every moved message is found again, with its body, by the
    index and by a rebuild."""
    d = str(tmp_path / "s")
    with Broker.open(d, journal_options=OPTS, checkpoint_records=0) as b:
        for name in ("keep", "drop"):
            b.create_address(name)
            b.create_queue(QueueConfig(name, name))
        with b.session() as s:
            for i in range(0, 25_000, 500):  # keep's messages spread over every segment
                s.send_many("keep", [Message(b"k%d" % (i + j)) for j in range(100)])
                s.send_many("drop", [Message(b"d") for _ in range(400)])
        b.checkpoint()  # everything committed: relocation reads it back from LMDB
        with b.session() as s:
            c = s.create_consumer("drop", window=1000)
            while batch := c.receive_many(500, timeout=0.05):
                s.ack_many(batch)
        report = b.compact(force=True)
        assert report.compacted and report.records_copied >= 5000
    want = [b"k%d" % (i + j) for i in range(0, 25_000, 500) for j in range(100)]

    def bodies(b: Broker) -> list:
        with b.session() as s:
            return [m.message.body for m in s.create_browser("keep")]

    with Broker.open(d, journal_options=OPTS) as b:
        assert b.recovery_report.index == "used" and bodies(b) == want
    shutil.rmtree(os.path.join(d, "index"))
    with Broker.open(d, journal_options=OPTS) as b:
        assert b.recovery_report.rebuilt and bodies(b) == want
