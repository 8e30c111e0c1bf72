"""Rejected and orphaned messages (seed 002 "Rejected and orphaned messages";
``QueueConfig.alternate_address``): a rejected message, and every message still on a queue when
it is deleted, is re-routed to the queue's alternate address, or deleted when none is set;
journaled so that a crash at any point never duplicates or loses one."""

from __future__ import annotations

import random
from typing import List

import pytest

from mqstore.engine import (AddressNotFoundError, Broker, InvalidNameError, Message, QueueConfig,
                            RoutingType)
from mqstore.engine.routing.deadletter import ORIG_ADDRESS, ORIG_QUEUE
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex


def bodies(b: Broker, queue: str) -> List[bytes]:
    with b.session() as s:
        return [m.message.body for m in s.create_browser(queue)]


def setup(b: Broker, alt_type: RoutingType = RoutingType.MULTICAST) -> None:
    b.create_address("alt", {alt_type})
    b.create_queue(QueueConfig("alt1", "alt", alt_type))
    b.create_queue(QueueConfig("alt2", "alt", alt_type))
    b.create_address("a")
    b.create_queue(QueueConfig("q", "a", alternate_address="alt"))


def test_a_rejected_message_goes_to_the_alternate_address_once() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with Broker.open("/s", fs=fs, index=index) as b:
        setup(b)
        assert b.queue_info("q").alternate_address == "alt"
        with b.session() as s:
            s.send_many("a", [Message(b"1", {"k": 7}), Message(b"2")])
            d = s.create_consumer("q").receive(1)
            d.reject()
            got = s.create_consumer("alt1").receive(1)
            assert got.message.body == b"1" and got.message.properties["k"] == 7
            assert got.message.properties[ORIG_QUEUE] == "q"
            assert got.message.properties[ORIG_ADDRESS] == "a"
            got.ack()
        assert bodies(b, "alt2") == [b"1"] and bodies(b, "q") == [b"2"]
        assert b.queue_info("q").messages_killed == 1
    fs = fs.crash(keep=0)  # the removal and the copies were one record
    with Broker.open("/s", fs=fs, index=index.crash(random.Random(3))) as b:
        assert (bodies(b, "q"), bodies(b, "alt1"), bodies(b, "alt2")) == ([b"2"], [], [b"1"])


def test_without_an_alternate_address_rejected_and_orphaned_messages_are_deleted() -> None:
    with Broker.open("/s", fs=SimulatedFileSystem(), index=MemoryIndex()) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a"))
        with b.session() as s:
            s.send_many("a", [Message(b"1"), Message(b"2")])
            s.create_consumer("q").receive(1).reject()
            s.create_consumer("q").close()
        b.delete_queue("q")
        assert b.queue_names() == []


@pytest.mark.parametrize("alt_type", [RoutingType.MULTICAST, RoutingType.ANYCAST])
def test_deleting_re_routes_what_is_left_in_order(alt_type: RoutingType) -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    now = [1_700_000_000_000]
    with Broker.open("/s", fs=fs, index=index, clock=lambda: now[0]) as b:
        setup(b, alt_type)
        with b.session() as s:
            s.send_many("a", [Message(b"%d" % i, durable=i % 3 != 0) for i in range(6)])
            s.send("a", Message(b"later", scheduled_delivery_time=now[0] + 60_000))
            c = s.create_consumer("q")
            c.receive(1).ack()  # "0" is consumed: five ready and one scheduled are left
            c.close()
        b.delete_queue("q")
        assert b.queue_names() == ["alt1", "alt2"]
        got = bodies(b, "alt1") + bodies(b, "alt2")
        if alt_type == RoutingType.MULTICAST:  # every queue of the address gets a copy
            assert bodies(b, "alt1") == bodies(b, "alt2") == [b"1", b"2", b"3", b"4", b"5",
                                                              b"later"]
        else:  # one queue each, round-robin
            assert sorted(got) == [b"1", b"2", b"3", b"4", b"5", b"later"]
    fs = fs.crash(keep=0)
    with Broker.open("/s", fs=fs, index=index) as b:
        kept = bodies(b, "alt1") + bodies(b, "alt2")
        assert sorted(kept) == sorted(x for x in got if x != b"3")  # "3" was not durable


def test_a_crash_at_any_point_of_a_chunked_delete_never_duplicates_or_loses() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    opts = JournalOptions(segment_size=16384, max_record_size=2048)
    sent = [b"m%03d" % i + b"." * 60 for i in range(120)]
    with Broker.open("/s", fs=fs, index=index, journal_options=opts) as b:
        b.create_address("alt")
        b.create_queue(QueueConfig("alt1", "alt"))
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a", alternate_address="alt"))
        with b.session() as s:
            s.send_many("a", [Message(x) for x in sent])
        states = []

        def take(op: str) -> None:  # before each sync: none, all, or a torn part of the new
            if op == "fdatasync":
                n = fs.unsynced_count()
                states.extend(fs.crash(keep=k) for k in sorted({0, n}))
                states.extend(fs.crash(keep=n, tear="sector", rng=random.Random(i))
                              for i in range(4))
        fs.hook = take
        b.delete_queue("q")  # more than one record's worth: moved in several
        fs.hook = None
        states.append(fs.crash(keep=0))  # deleted: durable when delete_queue returned
    assert len(states) >= 5
    seen = set()
    for state in states:
        with Broker.open("/s", fs=state, index=MemoryIndex(), journal_options=opts) as b:
            moved = bodies(b, "alt1")
            left = bodies(b, "q") if "q" in b.queue_names() else []
            assert sorted(moved + left) == sent  # each one exactly once
            assert moved == sent[:len(moved)] and left == sent[len(moved):]
            if "q" not in b.queue_names():
                assert moved == sent
            seen.add(len(moved))
    assert len(seen) >= 3 and 0 in seen and len(sent) in seen  # before, midway and after


def test_declaring_checks_the_alternate_address() -> None:
    with Broker.open("/s", fs=SimulatedFileSystem(), index=MemoryIndex()) as b:
        b.create_address("a")
        with pytest.raises(AddressNotFoundError):
            b.create_queue(QueueConfig("q", "a", alternate_address="nowhere"))
        with pytest.raises(InvalidNameError):
            b.create_queue(QueueConfig("q", "a", alternate_address="bad name"))
        assert b.queue_names() == []


def test_an_auto_delete_queue_gives_what_is_left_to_its_alternate_address() -> None:
    with Broker.open("/s", fs=SimulatedFileSystem(), index=MemoryIndex()) as b:
        b.create_address("alt")
        b.create_queue(QueueConfig("alt1", "alt"))
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a", auto_delete=True, alternate_address="alt"))
        with b.session() as s:
            s.send_many("a", [Message(b"1"), Message(b"2"), Message(b"3")])
            c = s.create_consumer("q")
            c.receive(1).ack()
            c.close()  # the last consumer went: deleted, "2" and "3" orphaned
        assert "q" not in b.queue_names()
        assert bodies(b, "alt1") == [b"2", b"3"]
