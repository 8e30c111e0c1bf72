"""Subscription queues (issue 15; seed 004 §4.6, §4.15): a topic subscriber gets its own copy on
a queue of its own; durable subscriptions keep messages while no subscriber is attached and
survive restarts and crashes until unsubscribed; temporary ones go with their consumer; a
point-to-point consumer finds the address's queue, else its first anycast queue."""

from __future__ import annotations

import random
from pathlib import Path
from typing import List

import pytest

from mqstore.engine import (Broker, InvalidArgumentError, Message, QueueConfig, QueueInUseError,
                            QueueNotFoundError, ResourceLimitError, RoutingType, RoutingTypeError)
from mqstore.journal import SimulatedFileSystem
from mqstore.recovery import MemoryIndex


def bodies(consumer: object) -> List[bytes]:
    out = []
    while (d := consumer.receive(0)) is not None:  # type: ignore[attr-defined]
        out.append(d.message.body)
        d.ack()
    return out


def news(b: Broker) -> None:
    b.create_address("news", {RoutingType.MULTICAST})


def test_each_subscriber_gets_its_own_copy_from_when_it_subscribed(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b, b.session() as s:
        news(b)
        s.send("news", Message(b"before"))  # no subscriber yet: nobody keeps it
        one = s.create_subscriber("news")
        two = s.create_consumer("multicast://news")  # a topic consumer: a subscription too
        s.send("news", Message(b"a"))
        s.send("news", Message(b"b"))
        assert bodies(one) == [b"a", b"b"] and bodies(two) == [b"a", b"b"]
        temporary = [q for q in b.queue_names() if q.startswith("news.")]
        assert len(temporary) == 2
        assert not b.queue_info(temporary[0]).durable
        one.close()
        two.close()
        assert b.queue_names() == []  # temporary subscription queues go with their consumer


def test_a_durable_subscription_keeps_messages_across_restarts(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d) as b:
        news(b)
        with b.connection(client_id="client456") as conn:
            s = conn.session()
            sub = s.create_subscriber("news", "sport", durable=True)
            info = b.queue_info("client456.sport")
            assert (info.durable, info.routing_type, info.max_consumers) == \
                (True, RoutingType.MULTICAST, 1)
            with pytest.raises(ResourceLimitError):  # non-shared: one subscriber at a time
                s.create_subscriber("news", "sport", durable=True)
            sub.close()
        with b.session() as s:
            s.send("news", Message(b"while away"))
    with Broker.open(d) as b:
        with b.connection(client_id="client456") as conn:
            s = conn.session()
            sub = s.create_subscriber("news", "sport", durable=True)
            assert bodies(sub) == [b"while away"]
            with pytest.raises(QueueInUseError):
                s.unsubscribe("sport")
            sub.close()
            s.unsubscribe("sport")
            assert "client456.sport" not in b.queue_names()
            with pytest.raises(QueueNotFoundError):
                s.unsubscribe("sport")


def test_durable_subscriptions_survive_a_crash_temporary_ones_do_not() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    b = Broker.open("/s", fs=fs, index=index)
    news(b)
    conn = b.connection(client_id="c")
    s = conn.session()
    s.create_subscriber("news", "d", durable=True)
    s.create_subscriber("news")
    s.send("news", Message(b"x"))
    crashed = fs.crash(keep=0)
    for lost in (False, True):  # the index as it was, or rebuilt from the journal
        with Broker.open("/s", fs=crashed, index=MemoryIndex() if lost else
                         index.crash(random.Random(1))) as b2:
            assert b2.queue_names() == ["c.d"]
            assert b2.queue_info("c.d").message_count == 1
        crashed, index = crashed.crash(keep=0), MemoryIndex()


def test_a_shared_subscription_shares_its_messages(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b, b.session() as s:
        news(b)
        first = s.create_subscriber("news", "workers", shared=True, durable=True)
        second = s.create_subscriber("news", "workers", shared=True, durable=True)
        other = s.create_subscriber("news")
        for i in range(4):
            s.send("news", Message(b"%d" % i))
        got = [first.receive(0).message.body, second.receive(0).message.body,
               first.receive(0).message.body, second.receive(0).message.body]
        assert sorted(got) == [b"0", b"1", b"2", b"3"]
        assert len(bodies(other)) == 4
        assert b.queue_info("workers").max_consumers == -1


def test_a_selector_is_the_subscription_queues_filter(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b, b.connection(client_id="c") as conn:
        news(b)
        s = conn.session()
        sub = s.create_subscriber("news", "s", durable=True, selector="topic = 'sport'")
        for topic in ("sport", "politics", "sport"):
            s.send("news", Message(topic.encode(), {"topic": topic}))
        assert b.queue_info("c.s").message_count == 2  # the others were never copied
        with pytest.raises(QueueInUseError):  # a changed subscription while it is in use
            s.create_subscriber("news", "s", durable=True, selector="topic = 'politics'")
        sub.close()
        sub = s.create_subscriber("news", "s", durable=True, selector="topic = 'politics'")
        assert b.queue_info("c.s").message_count == 0  # JMS: a new subscription
        s.send("news", Message(b"politics", {"topic": "politics"}))
        assert bodies(sub) == [b"politics"]


def test_bad_subscriptions_create_nothing(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b, b.session() as s:
        news(b)
        b.create_address("jobs")  # anycast
        with pytest.raises(InvalidArgumentError):
            s.create_subscriber("news", "x", durable=True)  # no client id
        with pytest.raises(InvalidArgumentError):
            s.create_subscriber("news", shared=True)  # a shared one needs a name
        with pytest.raises(InvalidArgumentError):
            s.create_subscriber("news", selector="a =")
        with pytest.raises(RoutingTypeError):
            s.create_subscriber("jobs")
        assert b.queue_names() == []


def test_point_to_point_finds_the_first_anycast_queue(tmp_path: Path) -> None:
    """Seed 004 §4.15: a consumer on an address binds to the queue named as the address,
    else to its first anycast queue."""
    with Broker.open(str(tmp_path / "s")) as b, b.session() as s:
        b.create_address("sharded")
        for q in ("q1", "q2"):
            b.create_queue(QueueConfig(q, "sharded"))
        s.send("sharded::q1", Message(b"one"))
        assert bodies(s.create_consumer("sharded")) == [b"one"]
        assert b.queue_info("q1").consumer_count == 1
