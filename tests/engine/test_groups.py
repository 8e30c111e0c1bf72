"""Message groups (issue 15; seed 004 §4.8, Artemis message grouping): a group's messages go to
one consumer of a queue, in order, while it lives, and to one queue of a sharded anycast
address; the next consumer takes a group over when its owner closes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import List, Tuple

import pytest

from tests.waiting import PATIENCE, receivers_waiting
from mqstore.engine import Broker, InvalidArgumentError, Message, QueueConfig
from mqstore.engine.paging.memory import MIN_BUDGET


def ids(deliveries: List[object]) -> List[Tuple[str, int]]:
    return [(d.message.group_id, d.message.properties["n"])  # type: ignore[attr-defined]
            for d in deliveries]


def send(b: Broker, groups: str, address: str = "a", start: int = 0) -> None:
    with b.session() as s:
        s.send_many(address, [Message(b"", {"n": start + i}, group_id=None if g == "-" else g)
                              for i, g in enumerate(groups)])


def setup(b: Broker) -> None:
    b.create_address("a")
    b.create_queue(QueueConfig("q", "a"))


def test_a_group_sticks_to_the_consumer_that_got_it_first(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b, b.session() as s:
        setup(b)
        send(b, "AABB-AC")
        one, two = s.create_consumer("q"), s.create_consumer("q")
        assert ids([one.receive(0)]) == [("A", 0)]
        assert ids(two.receive_many(10, timeout=0)) == [("B", 2), ("B", 3), (None, 4), ("C", 6)]
        assert ids(one.receive_many(10, timeout=0)) == [("A", 1), ("A", 5)]
        send(b, "CA", start=7)
        assert ids(one.receive_many(10, timeout=0)) == [("A", 8)]
        assert ids(two.receive_many(10, timeout=0)) == [("C", 7)]


def test_the_next_consumer_takes_over_a_closed_owners_groups(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b, b.session() as s:
        setup(b)
        send(b, "AAB")
        one, two = s.create_consumer("q"), s.create_consumer("q")
        held = one.receive_many(2, timeout=0)
        assert ids(held) == [("A", 0), ("A", 1)]
        got: list = []
        waiter = threading.Thread(target=lambda: got.extend(two.receive_many(5,
                                                                             timeout=PATIENCE)))
        assert ids(two.receive_many(5, timeout=0)) == [("B", 2)]
        waiter.start()
        receivers_waiting(b, "q")
        one.close()  # its unacked messages come back; group A is free
        waiter.join(PATIENCE)
        assert [(g, n, d.delivery_count) for (g, n), d in zip(ids(got), got)] == \
            [("A", 0, 2), ("A", 1, 2)]


def test_a_sharded_address_sends_a_group_to_one_queue(tmp_path: Path) -> None:
    """Seed 004 §4.8: anycast address ``sharded`` with q1, q2, q3; messages without a group
    go round-robin, a group's messages to the queue its first one went to."""
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("sharded")
        for q in ("q1", "q2", "q3"):
            b.create_queue(QueueConfig(q, "sharded"))
        send(b, "XY---XXYZ", address="sharded")
        where = {}
        with b.session() as s:
            for q in ("q1", "q2", "q3"):
                for m in s.create_browser(q):
                    where.setdefault(m.message.group_id, set()).add(q)
        assert all(len(qs) == 1 for g, qs in where.items() if g is not None)
        assert where[None] == {"q1", "q2", "q3"}  # round-robin for the others
        assert sum(b.queue_info(q).message_count for q in ("q1", "q2", "q3")) == 9


def test_group_ids_come_from_the_field_or_the_properties(tmp_path: Path) -> None:
    assert Message(b"", {"_AMQ_GROUP_ID": "g"}).group_id == "g"
    with Broker.open(str(tmp_path / "s")) as b, b.session() as s:
        setup(b)
        s.send("a", Message(b"", {"n": 0, "JMSXGroupID": "J"}))
        s.send("a", Message(b"", {"n": 1}, group_id="G"))
        s.send("a", Message(b"", {"n": 2, "JMSXGroupID": "J"}))
        one, two = s.create_consumer("q"), s.create_consumer("q")
        first = one.receive(0)
        assert first.message.properties["JMSXGroupID"] == "J"
        assert ids(two.receive_many(5, timeout=0)) == [("G", 1)]
        assert [d.message.properties["n"] for d in one.receive_many(5, timeout=0)] == [2]
        for bad in (5, ""):
            with pytest.raises(InvalidArgumentError):
                s.send("a", Message(b"", group_id=bad))  # type: ignore[arg-type]


def test_groups_on_a_paging_queue_and_after_a_restart(tmp_path: Path) -> None:
    """A backlog larger than the RAM head: each group's messages reach one consumer, in
    order; after a restart the groups are assigned again and the order holds."""
    d = str(tmp_path / "s")
    groups = "ABCD"
    with Broker.open(d, memory_budget=MIN_BUDGET) as b:
        setup(b)
        for start in range(0, 2000, 500):
            send(b, "".join(groups[i % 4] for i in range(500)), start=start)
        assert b.queues["q"].horizon is not None
        with b.session() as s:
            one, two = s.create_consumer("q", window=400), s.create_consumer("q", window=400)
            got1, got2 = one.receive_many(1, timeout=0), two.receive_many(1, timeout=0)
            got1 += one.receive_many(1, timeout=0)  # a free group goes to whoever asks
            got2 += two.receive_many(1, timeout=0)
            got1 += one.receive_many(99, timeout=0)
            got2 += two.receive_many(99, timeout=0)
            assert {g for g, _n in ids(got1)} == {"A", "C"}
            assert {g for g, _n in ids(got2)} == {"B", "D"}
            assert len(got1) == len(got2) == 101
            for got in (got1, got2):
                for g in groups:
                    ns = [n for gg, n in ids(got) if gg == g]
                    assert ns == sorted(ns)
            s.ack_many(got1 + got2)
    with Broker.open(d, memory_budget=MIN_BUDGET) as b, b.session() as s:
        assert b.queue_info("q").message_count == 2000 - 202
        c = s.create_consumer("q", window=2000)
        rest = ids(c.receive_many(2000, timeout=0))
        assert len(rest) == 2000 - 202
        for g in groups:
            ns = [n for gg, n in rest if gg == g]
            assert ns == sorted(ns)


def test_a_selector_and_groups_together(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b, b.session() as s:
        setup(b)
        with b.session() as s2:
            for i, (g, color) in enumerate([("A", "red"), ("B", "red"), ("A", "blue"),
                                            ("B", "blue")]):
                s2.send("a", Message(b"", {"n": i, "color": color}, group_id=g))
        plain = s.create_consumer("q")
        reds = s.create_consumer("q", selector="color = 'red'")
        assert ids([plain.receive(0)]) == [("A", 0)]
        assert ids(reds.receive_many(5, timeout=0)) == [("B", 1)]  # A is the other's
        assert ids(plain.receive_many(5, timeout=0)) == [("A", 2)]  # B is the other's
