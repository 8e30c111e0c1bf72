"""Message priority (issue 15): a queue delivers the oldest message of the highest priority
present, FIFO within a priority, as ActiveMQ Artemis does; the order survives restarts and
index rebuilds, holds across a queue larger than its RAM head, and applies to paged messages
once they join their queue."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Dict, List

from mqstore.engine import AddressSettings, Broker, Message, QueueConfig, RoutingType
from mqstore.engine.paging.memory import MIN_BUDGET


def bodies(b: Broker, queue: str = "q") -> List[bytes]:
    with b.session() as s:
        return [m.message.body for m in s.create_browser(queue)]


def received(b: Broker, n: int, queue: str = "q") -> List[bytes]:
    with b.session() as s:
        c = s.create_consumer(queue, window=1000)
        out = [d.message.body for d in c.receive_many(n, timeout=0)]
        s.recover()
        return out


def declare(b: Broker, **config: object) -> None:
    b.create_address("a")
    b.create_queue(QueueConfig("q", "a", **config))  # type: ignore[arg-type]


def send(b: Broker, *pairs: object) -> None:
    with b.session() as s:
        for body, prio in zip(pairs[::2], pairs[1::2]):
            s.send("a", Message(body, priority=prio))  # type: ignore[arg-type]


def test_highest_priority_first_fifo_within_one(tmp_path: Path) -> None:
    for durable in (True, False):
        with Broker.open(str(tmp_path / str(durable))) as b:
            declare(b, durable=durable)
            send(b, b"low1", 0, b"mid1", 4, b"top1", 9, b"low2", 0, b"mid2", 4, b"top2", 9)
            want = [b"top1", b"top2", b"mid1", b"mid2", b"low1", b"low2"]
            assert bodies(b) == want
            assert received(b, 6) == want


def test_the_order_survives_a_restart_and_an_index_rebuild(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d) as b:
        declare(b)
        send(b, b"a", 4, b"b", 0, b"c", 9, b"d", 4, b"e", 7)
    want = [b"c", b"e", b"a", b"d", b"b"]
    with Broker.open(d) as b:
        assert bodies(b) == want
    shutil.rmtree(os.path.join(d, "index"))
    with Broker.open(d) as b:
        assert b.recovery_report.rebuilt
        assert received(b, 5) == want


def test_priority_holds_across_a_queue_larger_than_its_ram_head(tmp_path: Path) -> None:
    """The smallest RAM budget: the queue keeps two references in RAM and reads the rest from
    the index, which keeps them by priority too: a late urgent message is not stuck behind
    the backlog."""
    with Broker.open(str(tmp_path / "s"), memory_budget=MIN_BUDGET) as b:
        declare(b)
        with b.session() as s:
            s.send_many("a", [Message(b"old%d" % i, priority=0) for i in range(40)])
            s.send("a", Message(b"urgent", priority=9))
            s.send_many("a", [Message(b"normal%d" % i) for i in range(40)])
        assert b.statistics().memory.paged_out > 0
        want = [b"urgent"] + [b"normal%d" % i for i in range(40)] + \
            [b"old%d" % i for i in range(40)]
        assert bodies(b) == want
        with b.session() as s:
            c = s.create_consumer("q", window=1000)
            got = []
            while len(got) < 81:
                d = c.receive(1)
                assert d is not None
                got.append(d.message.body)
                d.ack()
        assert got == want


def test_a_returned_delivery_goes_back_to_the_head_of_its_priority(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        declare(b)
        send(b, b"top", 9, b"mid1", 4, b"mid2", 4, b"low", 0)
        with b.session() as s:
            c = s.create_consumer("q", window=10)
            top, mid1 = c.receive(1), c.receive(1)
            assert top is not None and mid1 is not None
            mid1.release()
            assert bodies(b) == [b"mid1", b"mid2", b"low"]
            top.release()
            assert bodies(b) == [b"top", b"mid1", b"mid2", b"low"]
            d = c.receive(1)
            assert d is not None and d.message.body == b"top" and d.redelivered


def test_a_scheduled_message_comes_due_at_the_head_of_its_priority(tmp_path: Path) -> None:
    """Artemis puts a scheduled message that comes due at the head of its priority level."""
    now = [1_700_000_000_000]
    with Broker.open(str(tmp_path / "s"), clock=lambda: now[0]) as b:
        declare(b)
        with b.session() as s:
            s.send("a", Message(b"x", priority=4))
            s.send("a", Message(b"y", priority=4))
            s.send("a", Message(b"due4", priority=4, scheduled_delivery_time=now[0] + 1000))
            s.send("a", Message(b"due0", priority=0, scheduled_delivery_time=now[0] + 1000))
            s.send("a", Message(b"z", priority=0))
        now[0] += 2000
        assert received(b, 5) == [b"due4", b"x", b"y", b"due0", b"z"]


def test_paged_messages_wait_then_join_by_priority(tmp_path: Path) -> None:
    """An address that pages after two messages: what is on the queue goes first, by
    priority; paged messages come after it, in the order sent, and are ordered by priority
    among themselves once they join the queue (Artemis applies priority to messages in
    memory and depages in page order)."""
    settings = {"a": AddressSettings(max_size_messages=2)}
    with Broker.open(str(tmp_path / "s"), address_settings=settings) as b:
        declare(b)
        send(b, b"a", 0, b"b", 4, b"c", 0, b"d", 9)  # c and d are paged
        assert b.address_info("a").paged_count == 2
        assert received(b, 4) == [b"b", b"a", b"d", b"c"]
    settings = {"a": AddressSettings()}
    with Broker.open(str(tmp_path / "t"), address_settings=settings) as b:
        declare(b)
        send(b, b"a", 0, b"b", 4, b"c", 0, b"d", 9)
        assert received(b, 4) == [b"d", b"b", b"a", b"c"]


def test_depaged_messages_keep_their_priority_after_a_restart(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    settings = {"a": AddressSettings(max_size_messages=1)}
    with Broker.open(d, address_settings=settings) as b:
        declare(b)
        send(b, b"first", 4, b"p0", 0, b"p9", 9, b"p4", 4)
        with b.session() as s:
            c = s.create_consumer("q", window=10)
            d1 = c.receive(1)
            assert d1 is not None and d1.message.body == b"first"
            d1.ack()
            d2 = c.receive(1)  # the paged three joined the queue
            assert d2 is not None and d2.message.body == b"p9"
    with Broker.open(d, address_settings=settings) as b:
        assert b.address_info("a").paged_count == 0
        assert bodies(b) == [b"p9", b"p4", b"p0"]
    shutil.rmtree(os.path.join(d, "index"))
    with Broker.open(d, address_settings=settings) as b:
        assert bodies(b) == [b"p9", b"p4", b"p0"]


def test_a_non_destructive_consumer_sees_a_higher_priority_next(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("a", {RoutingType.MULTICAST})
        b.create_queue(QueueConfig("q", "a", RoutingType.MULTICAST, non_destructive=True))
        with b.session() as s:
            c = s.create_consumer("q")
            s.send("a", Message(b"low", priority=0))
            s.send("a", Message(b"mid", priority=4))
            first = c.receive(1)
            assert first is not None and first.message.body == b"mid"
            s.send("a", Message(b"top", priority=9))
            got = [c.receive(1), c.receive(1)]
            assert [d.message.body for d in got if d is not None] == [b"top", b"low"]
            assert c.receive_nowait() is None
        assert bodies(b) == [b"top", b"mid", b"low"]


def _returns_while_paging(tmp_path: Path, settings: Dict[str, object], twice: bool = False
                          ) -> List[bytes]:
    """A queue reading its lower priority from the index (the smallest RAM budget) whose
    selecting consumer took two references of that priority from there; more of a higher
    priority sent; then the two returned (``recover``), which makes the queue read its head in
    from the index (``twice``: the first of them was taken and returned once before). Returns the messages a browser then sees (body prefixes, sorted), after
    checking that receiving everything gives each of them once."""
    b = Broker.open(str(tmp_path / "s"), memory_budget=MIN_BUDGET, expiry_scan_ms=0)
    declare(b)
    if settings:
        b.set_address_settings("a", AddressSettings(**settings))  # type: ignore[arg-type]
    s = b.session()
    s.create_consumer("q", window=1000)
    red = s.create_consumer("q", window=1000, selector="color = 'red'")

    sent = [0]

    def send_many(priorities: List[int], durable: bool = True) -> None:
        first, sent[0] = sent[0] + 1, sent[0] + len(priorities)
        s.send_many("a", [Message(b"%d:" % i + b"x" * 150, {"color": "red" if i % 3 == 0
                                                            else "blue"},
                                  durable=durable, priority=p)
                          for i, p in enumerate(priorities, start=first)])
        bodies(b)  # a browser looks, as between the steps of the model that found this

    send_many([0, 0], durable=False)
    send_many([0, 0, 0, 0, 4])
    if twice:
        assert [d.message.body[:2] for d in red.receive_many(1, timeout=0)] == [b"3:"]
        s.recover()
    assert [d.message.body[:2] for d in red.receive_many(2, timeout=0)] == [b"3:", b"6:"]
    bodies(b)
    send_many([4, 4])
    s.recover()
    seen = sorted(x.split(b":")[0] for x in bodies(b))
    s.close()
    got = []
    with b.session() as s2:
        c = s2.create_consumer("q", window=1000)
        while (d := c.receive(timeout=0)) is not None:
            got.append(d.message.body.split(b":")[0])
            d.ack()
    b.close()
    assert sorted(got) == seen, (got, seen)
    return seen


def test_references_returned_while_the_queue_reads_its_head_from_the_index_come_back_once(
        tmp_path: Path) -> None:
    """A returned reference is still in the index: the read that brings the queue's head in
    as it goes back must not bring it in a second time (it was delivered twice)."""
    assert _returns_while_paging(tmp_path, {}) == [b"%d" % i for i in range(1, 10)]
