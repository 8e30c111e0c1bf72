"""Qpid last-value queues (seed 002 "Last value queues"; ``QueueConfig.qpid_lvq``): a message
whose ``qpid.LVQ_key`` matches a queued one's replaces it in place, unless that one was acquired
or (``last_value_queue``) browsed; the positions survive a crash and an index rebuild."""

from __future__ import annotations

import random
from typing import List, Optional

import pytest

from mqstore.engine import Broker, InvalidArgumentError, Message, QueueConfig
from mqstore.engine.model import QPID_LVQ_KEY, QpidLvq
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex


def m(body: bytes, key: Optional[str] = None, durable: bool = True) -> Message:
    return Message(body, {QPID_LVQ_KEY: key} if key else {}, durable=durable)


def bodies(b: Broker, queue: str = "q") -> List[bytes]:
    with b.session() as s:
        return [x.message.body for x in s.create_browser(queue)]


def consume_all(b: Broker, queue: str = "q") -> List[bytes]:
    out = []
    with b.session() as s:
        c = s.create_consumer(queue)
        while (d := c.receive(0.05)) is not None:
            out.append(d.message.body)
            d.ack()
    return out


def open_with(flavour: QpidLvq, fs: SimulatedFileSystem, index: MemoryIndex) -> Broker:
    b = Broker.open("/s", fs=fs, index=index)
    if "q" not in b.queue_names():
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a", qpid_lvq=flavour))
    return b


@pytest.mark.parametrize("flavour", list(QpidLvq))
def test_a_new_value_takes_the_old_ones_place(flavour: QpidLvq) -> None:
    with open_with(flavour, SimulatedFileSystem(), MemoryIndex()) as b:
        assert b.queue_info("q").qpid_lvq == flavour.value
        with b.session() as s:
            s.send_many("a", [m(b"A1", "A"), m(b"B1", "B"), m(b"C1", "C"), m(b"n1")])
            s.send("a", m(b"B2", "B"))
            s.send_many("a", [m(b"C2", "C"), m(b"C3", "C"), m(b"n2")])  # C3 replaces C2
        assert consume_all(b) == [b"A1", b"B2", b"C3", b"n1", b"n2"]  # no key: never replaced
        info = b.queue_info("q")
        assert (info.messages_added, info.messages_replaced, info.messages_killed) == (8, 3, 0)


@pytest.mark.parametrize("flavour", list(QpidLvq))
def test_an_acquired_message_is_not_replaced_and_loses_to_a_newer_one_when_released(
        flavour: QpidLvq) -> None:
    with open_with(flavour, SimulatedFileSystem(), MemoryIndex()) as b:
        with b.session() as s:
            s.send_many("a", [m(b"A1", "A"), m(b"B1", "B")])
            held = s.create_consumer("q").receive(1)
            assert held.message.body == b"A1"
            s.send("a", m(b"A2", "A"))  # A1 is acquired: A2 joins the tail
            assert b.queue_info("q").message_count == 3
            held.release()  # a newer A is queued: the released one is replaced
            assert b.queue_info("q").message_count == 2
        assert consume_all(b) == [b"B1", b"A2"]
    with open_with(flavour, SimulatedFileSystem(), MemoryIndex()) as b:
        with b.session() as s:
            s.send("a", m(b"A1", "A"))
            held = s.create_consumer("q").receive(1)
            held.release()  # nothing newer: back on the queue, and replaceable again
            s.send("a", m(b"A2", "A"))
        assert consume_all(b) == [b"A2"]


def test_browsing_protects_unless_no_browse() -> None:
    with open_with(QpidLvq.LVQ, SimulatedFileSystem(), MemoryIndex()) as b:
        with b.session() as s:
            s.send_many("a", [m(b"A1", "A"), m(b"B1", "B"), m(b"C1", "C")])
            assert bodies(b) == [b"A1", b"B1", b"C1"]  # every one browsed
            s.send("a", m(b"B2", "B"))  # B1 was browsed: B2 joins the tail
            s.send("a", m(b"B3", "B"))  # B2 was not accessed: replaced in place
            assert bodies(b) == [b"A1", b"B1", b"C1", b"B3"]
        assert consume_all(b) == [b"A1", b"B1", b"C1", b"B3"]
    with open_with(QpidLvq.LVQ_NO_BROWSE, SimulatedFileSystem(), MemoryIndex()) as b:
        with b.session() as s:
            s.send_many("a", [m(b"A1", "A"), m(b"B1", "B")])
            assert bodies(b) == [b"A1", b"B1"]
            s.send("a", m(b"B2", "B"))  # browsing protects nothing: replaced in place
            assert bodies(b) == [b"A1", b"B2"]


@pytest.mark.parametrize("lose_index", [False, True])
def test_positions_survive_a_crash_and_an_index_rebuild(lose_index: bool) -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with open_with(QpidLvq.LVQ_NO_BROWSE, fs, index) as b:
        with b.session() as s:
            s.send_many("a", [m(b"A1", "A"), m(b"B1", "B"), m(b"C1", "C")])
            b.checkpoint()
            s.send("a", m(b"A2", "A"))  # in place of A1
            s.send_many("a", [m(b"C2", "C"), m(b"C3", "C")])  # in place of C1, then of C2
            s.send("a", m(b"B2", "B", durable=False))  # in place of B1, not journaled
        expect = bodies(b)
        assert expect == [b"A2", b"B2", b"C3"]
    fs = fs.crash(keep=0)
    index = MemoryIndex() if lose_index else index.crash(random.Random(1))
    with open_with(QpidLvq.LVQ_NO_BROWSE, fs, index) as b:
        # B2 was not durable; its replacement of B1 was: B1 is gone with it
        assert bodies(b) == [b"A2", b"C3"]
        with b.session() as s:
            s.send("a", m(b"A3", "A"))  # the recovered queue still replaces in place
        assert consume_all(b) == [b"A3", b"C3"]
    with open_with(QpidLvq.LVQ_NO_BROWSE, fs, index) as b:
        assert bodies(b) == []


def test_declaring_refuses_what_does_not_combine() -> None:
    with Broker.open("/s", fs=SimulatedFileSystem(), index=MemoryIndex()) as b:
        b.create_address("a")
        for bad in (QueueConfig("x", "a", qpid_lvq="lvq"),  # type: ignore[arg-type]
                    QueueConfig("x", "a", qpid_lvq=QpidLvq.LVQ, last_value_key="k"),
                    QueueConfig("x", "a", qpid_lvq=QpidLvq.LVQ, max_count=3),
                    QueueConfig("x", "a", last_value_key="k", max_size=10)):
            with pytest.raises(InvalidArgumentError):
                b.create_queue(bad)
        assert b.queue_names() == []
        b.create_queue(QueueConfig("x", "a", qpid_lvq="last_value_queue"))  # type: ignore
        assert b.queue_info("x").qpid_lvq == "last_value_queue"


def test_positions_survive_compaction_and_a_rebuild_without_the_replaced_records() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    opts = JournalOptions(segment_size=4096, max_record_size=2000)
    with Broker.open("/s", fs=fs, index=index, journal_options=opts) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a", qpid_lvq=QpidLvq.LVQ_NO_BROWSE))
        with b.session() as s:
            s.send_many("a", [m(b"A1" + b"." * 300, "A"), m(b"B1", "B"), m(b"C1", "C")])
            for i in range(2, 30):  # A replaced again and again: its old records die
                s.send("a", m(b"A%d" % i + b"." * 300, "A"))
        assert [x[:3] for x in bodies(b)] == [b"A29", b"B1", b"C1"]
        report = b.compact(force=True)
        assert report.compacted
    with Broker.open("/s", fs=fs, index=MemoryIndex(), journal_options=opts) as b:
        assert [x[:3] for x in bodies(b)] == [b"A29", b"B1", b"C1"]  # rebuilt from the journal


def test_a_scheduled_message_coming_due_replaces_the_queued_one_of_its_key() -> None:
    now = [1_700_000_000_000]
    with Broker.open("/s", fs=SimulatedFileSystem(), index=MemoryIndex(),
                     clock=lambda: now[0]) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a", qpid_lvq=QpidLvq.LVQ_NO_BROWSE))
        with b.session() as s:
            s.send_many("a", [m(b"A1", "A"), m(b"B1", "B")])
            later = m(b"A2", "A")
            later.scheduled_delivery_time = now[0] + 1000
            s.send("a", later)
            assert bodies(b) == [b"A1", b"B1"]
            now[0] += 1000
            b.deliver_scheduled()  # due: it goes on the head, and A1 is replaced
        assert consume_all(b) == [b"A2", b"B1"]


@pytest.mark.parametrize("lose_index", [False, True])
def test_a_replacement_of_one_that_took_a_non_durable_ones_place_keeps_its_index_position(
        lose_index: bool) -> None:
    """A durable message that replaced a non-durable one sits at that one's place in RAM but at
    its own record's in the index. The next replacement's record must say the index's place:
    once compaction drops the records in between, a reopen only has that to go by (the RAM's
    key made both chains claim one place, and the second went to the tail)."""
    fs, index = SimulatedFileSystem(), MemoryIndex()
    opts = JournalOptions(segment_size=2048, max_record_size=1900)
    pad = b"." * 150  # records of several hundred bytes: the journal spans segments

    def send(s: object, *items: tuple) -> None:
        s.send_many("a", [m(b"%d" % n + pad, k, durable=d)  # type: ignore[attr-defined]
                          for n, k, d in items])

    def seen(b: Broker) -> List[bytes]:
        return [x.rstrip(b".") for x in bodies(b)]

    b = Broker.open("/s", fs=fs, index=index, journal_options=opts)
    b.create_address("a")
    b.create_queue(QueueConfig("q", "a", qpid_lvq=QpidLvq.LVQ))
    with b.session() as s:
        send(s, (1, "a", False), (2, "c", False))
        send(s, (3, "a", True), (4, "a", True), (5, "c", True))  # 3, 5: their own places
        send(s, (6, "c", True))
        send(s, (7, "a", True), (8, "a", True), (9, "a", True))
        send(s, (10, "a", True), (11, "a", True), (12, "a", True))
    assert seen(b) == [b"12", b"6"]
    assert b.compact(force=True).compacted  # the records of 3-5 and 7-9 go
    crashed = fs.crash(0), index.crash(random.Random(1))
    b.close()
    if lose_index:
        crashed = crashed[0], MemoryIndex()
    with Broker.open("/s", fs=crashed[0], index=crashed[1], journal_options=opts) as again:
        assert seen(again) == [b"12", b"6"]  # 12 at 3's place, 6 at 5's
