"""A crash during a compaction leaves an index the next open uses, never one it must rebuild
(issue 36 item 10): between the compaction's swap (old segments deleted) and the checkpoint
after it, the index named records by their old locations; the open found "the index refers to
segment N, which is gone" and replayed the whole journal. The compaction now writes where each
record went (a relocation file) before its commit point, and an open whose index predates it
maps the index through it; the file goes with the next checkpoint."""

from __future__ import annotations

import random
from typing import List, Tuple

import pytest

from mqstore.engine import AddressSettings, Broker, Message, QueueConfig, RoutingType
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex
from tests.recovery.storestate import describe

OPTS = JournalOptions(segment_size=8 * 1024)


def workload(broker: Broker, rng: random.Random) -> None:
    """Enough traffic over small segments that most of them are mostly dead: a message kept
    in every few, the rest acked (records that compaction moves: messages, deliveries, the
    address and queue records, acks still pinned)."""
    with broker.session() as s:
        c = s.create_consumer("q")
        for i in range(300):
            s.send("a", Message(b"%d" % i + b"." * rng.randrange(10, 200),
                                {"k": i % 7}, priority=i % 10))
            if i % 5:
                d = c.receive(0)
                if d is not None and rng.random() < 0.8:
                    d.ack()
        c.close()


def open_store(fs: SimulatedFileSystem, index: MemoryIndex) -> Broker:
    return Broker.open("/s", fs=fs, index=index, journal_options=OPTS, checkpoint_records=0,
                       expiry_scan_ms=0)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_crash_anywhere_in_a_compaction_reopens_with_the_index(seed: int) -> None:
    rng = random.Random(seed)
    fs, index = SimulatedFileSystem(), MemoryIndex()
    broker = open_store(fs, index)
    broker.create_address("a", {RoutingType.ANYCAST})
    broker.create_queue(QueueConfig("q", "a"))
    workload(broker, rng)
    broker.checkpoint()
    want = describe(broker)
    states: List[Tuple[SimulatedFileSystem, MemoryIndex, str]] = []

    def hook(op: str) -> None:  # every file operation of the compaction is a crash point
        n = fs.unsynced_count()
        states.append((fs.crash(n), index.crash(_Latest()), f"{op}, all kept"))
        states.append((fs.crash(0), index.crash(_Latest()), f"{op}, unsynced lost"))
    fs.hook = hook
    report = broker.compact(force=True)
    fs.hook = None
    assert report.compacted and len(states) > 20
    assert not [n for n in fs.listdir("/s/journal") if n.endswith(".reloc")]  # gone with
    broker.close()                                                           # the checkpoint
    rebuilt = []
    for crashed_fs, crashed_index, where in states:
        b = open_store(crashed_fs, crashed_index)
        try:
            if b.recovery_report.rebuilt:
                rebuilt.append(f"{where}: {b.recovery_report.index}")
            assert describe(b) == want, where
            assert not [n for n in crashed_fs.listdir("/s/journal") if n.endswith(".reloc")]
        finally:
            b.close()
        b = open_store(crashed_fs, crashed_index)  # and once more, from what that open left
        try:
            assert b.recovery_report.index == "used"
            assert describe(b) == want, where
        finally:
            b.close()
    assert rebuilt == []


class _Latest(random.Random):
    """``MemoryIndex.crash`` keeps the latest commit when its draw is below one half."""

    def random(self) -> float:
        return 0.0


def test_a_journal_compacted_without_asking_keeps_no_relocation_file() -> None:
    from mqstore.journal import Journal
    fs = SimulatedFileSystem()
    j = Journal.open("/j", OPTS, fs)
    for i in range(100):
        j.append(1, {"n": i, "pad": "x" * 300}).wait()
    j.mark_dead([r.location for r in j.records()][:90])
    assert j.compact(force=True).compacted
    assert not [n for n in fs.listdir("/j") if n.endswith(".reloc")]
    j.close()


def test_check_and_the_next_open_use_an_index_older_than_a_compaction(tmp_path) -> None:
    """On disk: a compaction whose checkpoint never came (the process died first). ``mqstore
    check`` maps the index through the relocation file as the open does (no "stale index"),
    the open uses the index, and its checkpoint removes the file."""
    import os

    from mqstore.tools.check import check_store
    from tests.conftest import _let_go
    d = str(tmp_path / "s")
    b = Broker.open(d, journal_options=OPTS, checkpoint_records=0, expiry_scan_ms=0)
    b.create_address("a", {RoutingType.ANYCAST})
    b.create_queue(QueueConfig("q", "a"))
    workload(b, random.Random(3))
    want = describe(b)
    p = b.storage.persistence
    compact = p.journal.compact

    def dies_before_it(changes: object) -> None:
        raise OSError("the process died first")

    def compact_then_die(*args: object) -> object:  # the checkpoint after it never commits
        report = compact(*args)
        p.index.commit = dies_before_it
        return report
    p.journal.compact = compact_then_die
    assert b.compact(force=True).compacted
    _let_go(b)  # as a killed process leaves it
    relocs = [n for n in os.listdir(os.path.join(d, "journal")) if n.endswith(".reloc")]
    assert len(relocs) == 1
    findings = check_store(d)
    assert [f.message for f in findings if f.level != "ok"] == []
    with Broker.open(d, journal_options=OPTS, expiry_scan_ms=0) as b:
        assert b.recovery_report.index == "used" and describe(b) == want
    assert not [n for n in os.listdir(os.path.join(d, "journal")) if n.endswith(".reloc")]


@pytest.mark.parametrize("persist", [False, True])
def test_a_rebuild_after_compaction_keeps_a_redelivered_message_on_the_head(
        persist: bool) -> None:
    """A message returned with a redelivery delay, come due (on its queue's head, before a
    scheduled one that came due with it), then delivered and returned again: its first
    return is superseded and compacted away. A rebuild then found it off the buffer when
    replaying the due record and left it at its first place (after the scheduled one); it must
    give the order the running broker had."""
    fs, index = SimulatedFileSystem(), MemoryIndex()
    now = [1_700_000_000_000]

    def opened(ix: MemoryIndex) -> Broker:
        return Broker.open("/s", fs=fs, index=ix, clock=lambda: now[0],
                           journal_options=JournalOptions(segment_size=2048),
                           address_settings={"a": AddressSettings(redelivery_delay=1000)},
                           persist_delivery_count_before_delivery=persist)

    b = opened(index)
    b.create_address("a")
    b.create_queue(QueueConfig("q", "a"))
    with b.session() as s:
        s.send("a", Message(b"returned"))
    with b.session(transacted=True) as t:
        assert t.create_consumer("q").receive(1) is not None
        t.rollback()  # back through the scheduled buffer: due in 1 s
        t.send("a", Message(b"scheduled", scheduled_delivery_time=now[0] + 1000))
        t.commit()
    now[0] += 1000
    b.deliver_scheduled()
    d = b.session().create_consumer("q").receive(1)
    assert d is not None and d.message.body == b"returned"
    b.close()  # returns it again: the first return's record is dead
    b = opened(index)
    b.create_address("x")
    b.create_queue(QueueConfig("x", "x"))
    with b.session() as s:  # segments full of dead records, for the compaction to take
        c = s.create_consumer("x")
        for _ in range(60):
            s.send("x", Message(b"." * 100))
            c.receive(1).ack()
    live = [m.message.body for m in b.session().create_browser("q")]
    assert live == [b"returned", b"scheduled"]
    assert b.compact(force=True).compacted
    b.close()
    with opened(MemoryIndex()) as b:  # the index lost: rebuilt from the compacted journal
        assert b.recovery_report.rebuilt
        assert [m.message.body for m in b.session().create_browser("q")] == live
