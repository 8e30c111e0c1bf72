"""Artemis exclusive queues (seed 004 §4.11) and max-consumers (§4.10): one consumer at a time
receives, the next takes over when it closes; max-consumers -1, 1, N and 0."""

from __future__ import annotations

import threading
from typing import List

import pytest

from tests.waiting import PATIENCE, receivers_waiting
from mqstore.engine import (AddressSettings, Broker, Message, QueueConfig, ResourceLimitError,
                            RoutingType)
from mqstore.journal import SimulatedFileSystem
from mqstore.recovery import MemoryIndex


def open_broker(**kw: object) -> Broker:
    return Broker.open("/s", fs=SimulatedFileSystem(), index=MemoryIndex(), **kw)  # type: ignore


def test_only_the_first_consumer_receives_and_the_next_takes_over() -> None:
    with open_broker() as b:
        b.create_address("orders")
        b.create_queue(QueueConfig("orders1", "orders", exclusive=True))
        assert b.queue_info("orders1").exclusive
        with b.session() as s:
            s.send_many("orders", [Message(b"%d" % i) for i in range(4)])
            first, second = s.create_consumer("orders1"), s.create_consumer("orders1")
            assert second.receive_nowait() is None  # the first one gets them all
            assert second.receive_many(10, timeout=0) == []
            got = [first.receive(1) for _ in range(2)]
            assert [d.message.body for d in got] == [b"0", b"1"]
            got[0].ack()
            first.close()  # "1" was not acked: it goes back, to the next consumer
            rest = second.receive_many(10, timeout=0)
            assert [d.message.body for d in rest] == [b"1", b"2", b"3"]
            assert rest[0].redelivered


def test_a_waiting_consumer_is_served_when_the_exclusive_one_closes() -> None:
    with open_broker() as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a", exclusive=True))
        with b.session() as s:
            first = s.create_consumer("q")
            with b.session() as s2:
                second = s2.create_consumer("q")
                got: List[object] = []
                t = threading.Thread(target=lambda: got.append(second.receive(PATIENCE)))
                t.start()
                receivers_waiting(b, "q")
                s.send("a", Message(b"x"))
                d = first.receive(1)
                assert d is not None and d.message.body == b"x"
                d.release()  # back on the queue; the first one is still the exclusive one
                assert t.is_alive()
                first.close()  # the second one takes over, and is woken
                t.join(PATIENCE)
                assert not t.is_alive() and got[0] is not None
                assert got[0].message.body == b"x"  # type: ignore[attr-defined]


def test_default_exclusive_queue_and_a_reopen_keep_it_exclusive(tmp_path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d, address_settings={"jobs.#": AddressSettings(
            default_exclusive_queue=True)}) as b:
        b.create_address("jobs.a")
        b.create_queue(QueueConfig("jobs.a", "jobs.a"))
        assert b.queue_info("jobs.a").exclusive
    with Broker.open(d) as b:
        assert b.queue_info("jobs.a").exclusive
        with b.session() as s:
            s.send("jobs.a", Message(b"1"))
            c1, c2 = s.create_consumer("jobs.a"), s.create_consumer("jobs.a")
            assert c2.receive_nowait() is None and c1.receive_nowait() is not None


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_max_consumers_minus_one_one_n_and_zero(limit: int) -> None:
    with open_broker() as b:
        b.create_address("a", {RoutingType.ANYCAST})
        b.create_queue(QueueConfig("q", "a", max_consumers=limit))
        b.create_queue(QueueConfig("free", "a", max_consumers=-1))
        with b.session() as s:
            held = [s.create_consumer("q") for _ in range(limit)]
            with pytest.raises(ResourceLimitError) as err:
                s.create_consumer("q")
            assert "'q'" in str(err.value) and "'a'" in str(err.value)  # queue and address
            assert b.queue_info("q").consumer_count == limit
            if held:
                held[0].close()
                s.create_consumer("q")  # room again
            assert len([s.create_consumer("free") for _ in range(10)]) == 10
