"""Qpid queue size limits (seed 002 "Controlling queue size"; ``QueueConfig.max_count``,
``max_size``, ``policy_type``): each policy at the boundary, by count and by bytes, with
acquired messages, multicast, ``send_many`` and transactions, across a reopen and a crash."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

from mqstore.engine import (Broker, InvalidArgumentError, Message, PolicyType, QueueConfig,
                            QueueFullError, RoutingType)
from mqstore.journal import SimulatedFileSystem
from mqstore.recovery import MemoryIndex


def bodies(b: Broker, queue: str) -> List[bytes]:
    """What a browser sees on ``queue``, in order."""
    with b.session() as s:
        return [m.message.body for m in s.create_browser(queue)]


def declare(b: Broker, name: str = "q", address: str = "a", **kw: object) -> None:
    if address not in b.address_names():
        b.create_address(address, [RoutingType.ANYCAST, RoutingType.MULTICAST])
    b.create_queue(QueueConfig(name, address, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("durable", [True, False])
def test_reject_by_count_exactly_at_the_limit_and_one_over(tmp_path: Path, durable: bool
                                                           ) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        declare(b, max_count=3, policy_type=PolicyType.REJECT, durable=durable)
        with b.session() as s:
            for i in range(3):
                s.send("a", Message(b"m%d" % i, durable=durable))  # the third: at the limit
            with pytest.raises(QueueFullError) as err:
                s.send("a", Message(b"over", durable=durable))
            assert (err.value.queue, err.value.limit, err.value.policy) == \
                ("q", "max_count", "reject")
            assert bodies(b, "q") == [b"m0", b"m1", b"m2"]  # nothing of it was stored
            c = s.create_consumer("q")
            d = c.receive(1)
            with pytest.raises(QueueFullError):  # acquired, not accepted: still counted
                s.send("a", Message(b"over", durable=durable))
            d.ack()
            s.send("a", Message(b"m3", durable=durable))  # accepted: room again
        assert bodies(b, "q") == [b"m1", b"m2", b"m3"]


def test_reject_by_bytes_and_a_message_larger_than_the_limit(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d) as b:
        declare(b, max_size=10, policy_type="reject")
        with b.session() as s:
            s.send_many("a", [Message(b"1234"), Message(b"5678"), Message(b"90")])  # 10 bytes
            with pytest.raises(QueueFullError) as err:
                s.send("a", Message(b"x"))
            assert err.value.limit == "max_size"
            s.send("a", Message(b""))  # an empty body takes no bytes (no count limit)
    with Broker.open(d) as b:  # a reopen counts the bytes again from the index
        info = b.queue_info("q")
        assert (info.max_size, info.max_count, info.policy_type) == (10, -1, "reject")
        with b.session() as s:
            with pytest.raises(QueueFullError):
                s.send("a", Message(b"x"))
            s.create_consumer("q").receive(1).ack()  # 4 bytes leave
            s.send("a", Message(b"abcd"))
            with pytest.raises(QueueFullError):
                s.send("a", Message(b"x"))
        with b.session() as s:
            with pytest.raises(QueueFullError):
                s.send("a", Message(b"y" * 11))  # alone over the limit, even when empty


def test_defaults_flow_to_disk_for_durable_reject_for_non_durable(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        declare(b, "d", max_count=1)
        declare(b, "n", address="b", max_count=1, durable=False)
        declare(b, "u")
        assert b.queue_info("d").policy_type == "flow_to_disk"
        assert b.queue_info("n").policy_type == "reject"
        assert b.queue_info("u").policy_type is None  # no limit, no policy in force
        with pytest.raises(InvalidArgumentError):
            b.create_queue(QueueConfig("bad", "a", max_count=1, policy_type="spill"))
        with pytest.raises(InvalidArgumentError):
            b.create_queue(QueueConfig("bad", "a", max_size=-2))


@pytest.mark.parametrize("durable", [True, False])
def test_flow_to_disk_pages_what_is_over_and_delivers_all_in_order(tmp_path: Path,
                                                                   durable: bool) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d) as b:
        declare(b, max_count=2, policy_type=PolicyType.FLOW_TO_DISK)
        with b.session() as s:
            s.send_many("a", [Message(b"m%d" % i, durable=durable) for i in range(5)])
            info = b.queue_info("q")
            assert info.message_count == 5 and info.paged_count == 3  # content left memory
            assert b.address_info("a").paged_count == 3
            c = s.create_consumer("q")
            got = [c.receive(1) for _ in range(2)]
            assert [g.message.body for g in got] == [b"m0", b"m1"]
            for g in got:
                g.ack()
    with Broker.open(d) as b:
        with b.session() as s:
            c = s.create_consumer("q")
            got = []
            while (g := c.receive(0.1)) is not None:
                got.append(g.message.body)
                g.ack()
        # durable messages come back from the journal; non-durable ones ended with the broker
        assert got == ([b"m2", b"m3", b"m4"] if durable else [])


def test_ring_removes_the_oldest_even_in_delivery_and_its_ack_does_nothing() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with Broker.open("/s", fs=fs, index=index) as b:
        declare(b, max_count=3, policy_type=PolicyType.RING)
        with b.session() as s:
            s.send_many("a", [Message(b"m%d" % i) for i in range(3)])
            c = s.create_consumer("q")
            held = c.receive(1)
            assert held.message.body == b"m0"
            s.send("a", Message(b"m3"))  # m0, acquired and not accepted, is removed
            s.send("a", Message(b"m4"))  # then m1, the oldest ready one
            assert bodies(b, "q") == [b"m2", b"m3", b"m4"]
            info = b.queue_info("q")
            assert (info.message_count, info.delivering_count, info.messages_replaced,
                    info.messages_killed) == (3, 0, 2, 0)
            held.ack()  # the ring removed it already: nothing happens
            assert b.queue_info("q").message_count == 3
    fs = fs.crash(keep=0)  # each removal was journaled with the send that made it
    with Broker.open("/s", fs=fs, index=index) as b:
        assert bodies(b, "q") == [b"m2", b"m3", b"m4"]


def test_ring_by_bytes_removes_as_many_as_needed_and_refuses_a_too_large_one(tmp_path: Path
                                                                            ) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        declare(b, max_size=10, policy_type=PolicyType.RING)
        with b.session() as s:
            s.send_many("a", [Message(b"aaa"), Message(b"bbb"), Message(b"cccc")])  # 10
            s.send("a", Message(b"dddddd"))  # 6 more: aaa and bbb go (4 + 6 = 10)
            assert bodies(b, "q") == [b"cccc", b"dddddd"]
            s.send("a", Message(b"e" * 10))  # exactly the limit: everything else goes
            assert bodies(b, "q") == [b"e" * 10]
            with pytest.raises(QueueFullError) as err:
                s.send("a", Message(b"f" * 11))  # could never fit
            assert err.value.limit == "max_size"
            assert bodies(b, "q") == [b"e" * 10]


def test_ring_strict_removes_ready_ones_but_refuses_when_the_oldest_is_in_delivery(
        tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        declare(b, max_count=2, policy_type=PolicyType.RING_STRICT)
        with b.session() as s:
            s.send_many("a", [Message(b"m0"), Message(b"m1")])
            s.send("a", Message(b"m2"))  # m0 was ready: removed
            assert bodies(b, "q") == [b"m1", b"m2"]
            c = s.create_consumer("q")
            held = c.receive(1)  # m1 is in delivery now
            with pytest.raises(QueueFullError) as err:
                s.send("a", Message(b"m3"))
            assert err.value.policy == "ring_strict"
            assert b.queue_info("q").message_count == 2
            held.ack()
            s.send("a", Message(b"m3"))
            assert bodies(b, "q") == [b"m2", b"m3"]


def test_ring_strict_send_many_may_remove_its_own_earlier_messages(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        declare(b, max_count=2, policy_type=PolicyType.RING_STRICT)
        with b.session() as s:
            s.send_many("a", [Message(b"m%d" % i) for i in range(5)])
            assert bodies(b, "q") == [b"m3", b"m4"]


def test_multicast_send_many_and_transactions_fail_whole(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d) as b:
        b.create_address("t", [RoutingType.MULTICAST])
        b.create_queue(QueueConfig("big", "t", routing_type=RoutingType.MULTICAST))
        b.create_queue(QueueConfig("small", "t", routing_type=RoutingType.MULTICAST,
                                   max_count=2, policy_type=PolicyType.REJECT))
        with b.session() as s:
            s.send_many("t", [Message(b"1"), Message(b"2")])
            with pytest.raises(QueueFullError):  # full on one queue: on none
                s.send("t", Message(b"3"))
            assert b.queue_info("big").message_count == 2
            s.create_consumer("small").receive(1).ack()
            with pytest.raises(QueueFullError):  # the second of the batch would break it
                s.send_many("t", [Message(b"3"), Message(b"4")])
            assert b.queue_info("big").message_count == 2
            assert b.queue_info("small").message_count == 1
        t = b.session(transacted=True)
        t.send("t", Message(b"3"))
        t.send("t", Message(b"4"))  # each fits alone: the commit sees both
        with pytest.raises(QueueFullError):
            t.commit()
        assert b.queue_info("big").message_count == 2
        t.close()
    with Broker.open(d) as b:
        assert b.queue_info("big").message_count == 2
        assert b.queue_info("small").message_count == 1


def test_a_ring_refuses_when_only_scheduled_messages_are_left_to_remove(tmp_path: Path) -> None:
    now = [1_700_000_000_000]
    with Broker.open(str(tmp_path / "s"), clock=lambda: now[0]) as b:
        declare(b, max_count=2, policy_type=PolicyType.RING)
        with b.session() as s:
            later = now[0] + 60_000
            s.send_many("a", [Message(b"s0", scheduled_delivery_time=later),
                              Message(b"s1", scheduled_delivery_time=later)])
            with pytest.raises(QueueFullError):
                s.send("a", Message(b"m"))
            assert b.queue_info("q").scheduled_count == 2


def test_flow_to_disk_on_a_non_durable_queue_uses_the_page_files(tmp_path: Path) -> None:
    with Broker.open(str(tmp_path / "s")) as b:
        declare(b, max_count=2, policy_type=PolicyType.FLOW_TO_DISK, durable=False)
        with b.session() as s:
            s.send_many("a", [Message(b"m%d" % i, durable=False) for i in range(6)])
            assert b.queue_info("q").paged_count == 4
            assert b.statistics().page_files.written >= 4  # content left memory
            c = s.create_consumer("q")
            got = []
            while (d := c.receive(0.05)) is not None:
                got.append(d.message.body)
                d.ack()
        assert got == [b"m%d" % i for i in range(6)]
