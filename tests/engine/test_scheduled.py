"""Scheduled messages (seed 000_721345e89d5d1b64.txt §3; Artemis where the seed is silent):
held off the queue until due, then put on its head; durable, recovered, managed.

Every test runs on an injected clock: what is due is decided by it, never by sleeping (the one
test of the scheduler thread waits for an event with a generous timeout, asserting no time).
"""

from __future__ import annotations

import asyncio
import threading
from typing import List

import pytest

from mqstore.engine import (AsyncSession, Broker, Message, MessageNotFoundError,
                            QueueConfig, RoutingType)
from mqstore.engine.errors import InvalidArgumentError
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex

NOON = 1_700_000_000_000  # ms since the epoch: "12:00"
MINUTE = 60_000


class Clock:
    def __init__(self, now: int = NOON) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def open_broker(path: str, clock: Clock, **kwargs) -> Broker:  # type: ignore[no-untyped-def]
    return Broker.open(path, clock=clock, expiry_scan_ms=0, **kwargs)


def drain(broker: Broker, queue: str, ack: bool = True) -> List[bytes]:
    with broker.session() as s:
        c = s.create_consumer(queue)
        out = []
        while True:
            d = c.receive_nowait()
            if d is None:
                return out
            out.append(d.message.body)
            if ack:
                d.ack()


def counts(broker: Broker, queue: str) -> tuple:
    info = broker.queue_info(queue)
    return info.message_count, info.scheduled_count


def test_seed_ring_scenario_counts_at_every_step(tmp_path) -> None:
    """Seed 000 §3: foo with ring-size 3; A scheduled for 12:05 at 12:00; B, C, D at 12:01-03:
    messageCount 1..4 with scheduledCount 1; at 12:05 A is put on the head of the full ring and
    removed; B, C, D stay."""
    clock = Clock()
    with open_broker(str(tmp_path), clock) as b:
        b.create_address("foo")
        b.create_queue(QueueConfig("foo", "foo", ring_size=3))
        with b.session() as s:
            s.send("foo", Message(b"A", scheduled_delivery_time=NOON + 5 * MINUTE))
            assert counts(b, "foo") == (1, 1)
            for i, body in enumerate([b"B", b"C", b"D"], start=1):
                clock.now = NOON + i * MINUTE
                s.send("foo", Message(body))
                assert counts(b, "foo") == (1 + i, 1)
        clock.now = NOON + 5 * MINUTE
        b.deliver_scheduled()  # (the broker's own scheduler thread may take it first)
        info = b.queue_info("foo")
        assert (info.message_count, info.scheduled_count, info.messages_replaced) == (3, 0, 1)
        assert drain(b, "foo") == [b"B", b"C", b"D"]


def test_due_in_scheduled_order_on_the_head(tmp_path) -> None:
    """Due messages go before every waiting message, in due order, FIFO among equal times;
    the ones not due stay scheduled."""
    clock = Clock()
    with open_broker(str(tmp_path), clock) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        with b.session() as s:
            s.send("q", Message(b"w1"))
            for body, at in [(b"s3", 3), (b"s1", 1), (b"s2a", 2), (b"s2b", 2), (b"s9", 9)]:
                s.send("q", Message(body, scheduled_delivery_time=NOON + at * 1000))
            s.send("q", Message(b"w2"))
        assert counts(b, "q") == (7, 5)
        clock.now = NOON + 1000
        b.deliver_scheduled()  # counted by state: the broker's scheduler thread may run first
        assert counts(b, "q") == (7, 4)
        clock.now = NOON + 3000
        b.deliver_scheduled()
        assert counts(b, "q") == (7, 1)
        assert drain(b, "q") == [b"s1", b"s2a", b"s2b", b"s3", b"w1", b"w2"]
        assert drain(b, "q") == []
        clock.now = NOON + 9000
        assert drain(b, "q") == [b"s9"]  # a receive puts what is due on the queue itself


def test_delay_property_and_past_times(tmp_path) -> None:
    """``delivery_delay`` counts from the send; ``_AMQ_SCHED_DELIVERY`` is honoured; a time
    not in the future delivers at once."""
    clock = Clock()
    with open_broker(str(tmp_path), clock) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        with b.session() as s:
            s.send("q", Message(b"delay", delivery_delay=500))
            s.send("q", Message(b"prop", {"_AMQ_SCHED_DELIVERY": NOON + 200}))
            s.send("q", Message(b"past", scheduled_delivery_time=NOON - 1))
        assert counts(b, "q") == (3, 2)
        assert drain(b, "q") == [b"past"]
        clock.now = NOON + 200
        assert drain(b, "q") == [b"prop"]
        clock.now = NOON + 500
        assert drain(b, "q") == [b"delay"]
    with pytest.raises(InvalidArgumentError):
        Message(b"x", scheduled_delivery_time=-1)
    with pytest.raises(InvalidArgumentError):
        Message(b"x", delivery_delay="soon")  # type: ignore[arg-type]


@pytest.mark.parametrize("durable", [True, False])
def test_restart_with_due_and_not_due(tmp_path, durable: bool) -> None:
    """Durable scheduled messages survive a reopen (a rebuild of the index too); a time that
    passed while the store was closed is due at open, in order, before the waiting messages,
    after those that came due before the close. Transient ones are gone with the close."""
    clock = Clock()
    with open_broker(str(tmp_path), clock) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        with b.session() as s:
            s.send("q", Message(b"w1"))
            for body, at in [(b"s2", 2), (b"s1", 1), (b"s3", 3), (b"s5", 5)]:
                s.send("q", Message(body, durable=durable,
                                    scheduled_delivery_time=NOON + at * 1000))
        clock.now = NOON + 1000
        b.deliver_scheduled()
    clock.now = NOON + 3000
    for rebuild in (False, True):
        with open_broker(str(tmp_path), clock, rebuild_index=rebuild) as b:
            if not durable:
                assert counts(b, "q") == (1, 0)
                continue
            assert counts(b, "q") == (5, 1)
            with b.session() as s:
                browsed = [m.message.body for m in s.create_browser("q")]
            assert browsed == [b"s1", b"s2", b"s3", b"w1"]
    if not durable:
        return
    clock.now = NOON + 5000
    with open_broker(str(tmp_path), clock) as b:
        assert drain(b, "q") == [b"s1", b"s2", b"s3", b"s5", b"w1"]
        assert counts(b, "q") == (0, 0)


def test_transaction_schedules_only_at_commit(tmp_path) -> None:
    clock = Clock()
    with open_broker(str(tmp_path), clock) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        with b.session(transacted=True) as tx:
            tx.send("q", Message(b"rolled", delivery_delay=100))
            assert counts(b, "q") == (0, 0)
            tx.rollback()
            clock.now += 1000
            tx.send("q", Message(b"kept", delivery_delay=100))
            tx.commit()
        assert counts(b, "q") == (1, 1)
        clock.now += 99
        assert drain(b, "q") == []
        clock.now += 1
        assert drain(b, "q") == [b"kept"]


def test_multicast_message_stored_once_scheduled_on_each_queue(tmp_path) -> None:
    clock = Clock()
    with open_broker(str(tmp_path), clock) as b:
        b.create_address("t", [RoutingType.MULTICAST])
        b.create_queue(QueueConfig("t1", "t", RoutingType.MULTICAST))
        b.create_queue(QueueConfig("t2", "t", RoutingType.MULTICAST, durable=False))
        with b.session() as s:
            s.send("t", Message(b"m", scheduled_delivery_time=NOON + 10))
        assert counts(b, "t1") == counts(b, "t2") == (1, 1)
        assert b.statistics().messages == 1
        clock.now += 10
        assert drain(b, "t1") == [b"m"] and drain(b, "t2") == [b"m"]
        assert b.statistics().messages == 0


def test_last_value_key_tracked_once_on_the_queue(tmp_path) -> None:
    """A scheduled message replaces nothing while scheduled; when due it replaces the queued
    message with its key (seed 004 §4.9) and is the latest from then on."""
    clock = Clock()
    with open_broker(str(tmp_path), clock) as b:
        b.create_address("p")
        b.create_queue(QueueConfig("p", "p", last_value_key="k"))
        with b.session() as s:
            s.send("p", Message(b"old", {"k": "x"}))
            s.send("p", Message(b"sched", {"k": "x"}, scheduled_delivery_time=NOON + 10))
            assert counts(b, "p") == (2, 1)
            clock.now += 10
            b.deliver_scheduled()
            assert counts(b, "p") == (1, 0)
            s.send("p", Message(b"newest", {"k": "x"}))
        assert drain(b, "p") == [b"newest"]


def test_management_list_deliver_now_remove(tmp_path) -> None:
    clock = Clock()
    with open_broker(str(tmp_path), clock) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        b.create_queue(QueueConfig("mem", "q", durable=False))
        with b.session() as s:
            for i in (3, 1, 2):
                s.send("q::q", Message(b"d%d" % i, scheduled_delivery_time=NOON + i * 100))
                s.send("q::mem", Message(b"m%d" % i, scheduled_delivery_time=NOON + i * 100))
        for queue, prefix in (("q", b"d"), ("mem", b"m")):
            listed = b.scheduled_messages(queue)
            assert [m.message.body for m in listed] == [prefix + b"1", prefix + b"2",
                                                       prefix + b"3"]
            assert [m.scheduled_delivery_time for m in listed] == [NOON + 100, NOON + 200,
                                                                   NOON + 300]
            assert [m.message.body for m in b.scheduled_messages(queue, limit=1)] == \
                [prefix + b"1"]
            ids = {m.message.body: m.message.message_id for m in listed}
            b.deliver_scheduled_message(queue, ids[prefix + b"3"])
            b.remove_scheduled_message(queue, ids[prefix + b"1"])
            with pytest.raises(MessageNotFoundError):
                b.remove_scheduled_message(queue, ids[prefix + b"1"])
            info = b.queue_info(queue)
            assert (info.message_count, info.scheduled_count, info.messages_killed) == (2, 1, 1)
            assert drain(b, queue) == [prefix + b"3"]
        with pytest.raises(MessageNotFoundError):
            b.deliver_scheduled_message("q", 10**9)
    clock.now = NOON + 200
    with open_broker(str(tmp_path), clock) as b:
        assert drain(b, "q") == [b"d2"]  # the removal and the early delivery were journaled


def test_delete_queue_with_scheduled_messages(tmp_path) -> None:
    clock = Clock()
    with open_broker(str(tmp_path), clock) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        b.create_queue(QueueConfig("mem", "q", durable=False))
        with b.session() as s:
            s.send("q", Message(b"x", scheduled_delivery_time=NOON + 10))
            s.send("q", Message(b"y", scheduled_delivery_time=NOON + 10))
        b.delete_queue("q")
        b.delete_queue("mem")
        assert b.statistics().messages == 0
        assert b.address_info("q").number_of_messages == 0
    with open_broker(str(tmp_path), clock, rebuild_index=True) as b:
        assert b.queue_names() == [] and b.statistics().messages == 0


def test_many_scheduled_messages_stay_out_of_ram(tmp_path) -> None:
    """Durable scheduled messages are held by the index: RAM holds none of them, whatever
    their number; when due they page in like a backlog."""
    clock = Clock()
    n = 3000
    with open_broker(str(tmp_path), clock, memory_budget=64 << 10,
                     checkpoint_records=500) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        with b.session() as s:
            for start in range(0, n, 500):
                s.send_many("q", [Message(b"%d" % i, scheduled_delivery_time=NOON + n - i)
                                  for i in range(start, start + 500)])
        stats = b.statistics().memory
        assert stats.references == 0 and counts(b, "q") == (n, n)
        clock.now = NOON + n
        b.deliver_scheduled()  # (the broker's own scheduler thread may take some first)
        assert counts(b, "q") == (n, 0)
        assert b.statistics().memory.references <= 300
        got = drain(b, "q")
        assert got == [b"%d" % i for i in reversed(range(n))]


def test_power_loss_keeps_what_was_durable() -> None:
    """A DUE record lost with the power leaves its messages scheduled: they come due again
    at open, in order; none is lost or duplicated."""
    fs, index, clock = SimulatedFileSystem(), MemoryIndex(), Clock()
    opts = JournalOptions(segment_size=4096)

    def reopen() -> Broker:
        return Broker.open("/s", fs=fs, index=index, journal_options=opts, clock=clock,
                           expiry_scan_ms=0)
    b = reopen()
    b.create_address("q")
    b.create_queue(QueueConfig("q", "q"))
    with b.session() as s:
        s.send("q", Message(b"w"))
        for i in range(5):
            s.send("q", Message(b"s%d" % i, scheduled_delivery_time=NOON + 10 + i))
    clock.now = NOON + 12
    b.deliver_scheduled()  # s0..s2: a durable DUE record
    fs2 = fs.crash(keep=0)
    b.close()
    fs = fs2
    clock.now = NOON + 100
    b = reopen()
    assert drain(b, "q") == [b"s0", b"s1", b"s2", b"s3", b"s4", b"w"]
    b.close()


def test_sleeping_consumer_wakes_when_due(tmp_path) -> None:
    """The scheduler thread puts a message on its queue when due and wakes a consumer
    blocked in receive (real clock: a message due 50 ms after its send)."""
    with Broker.open(str(tmp_path), expiry_scan_ms=0) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        got = []
        with b.session() as s:
            c = s.create_consumer("q")
            t = threading.Thread(target=lambda: got.append(c.receive(timeout=30)))
            t.start()
            with b.session() as p:
                p.send("q", Message(b"later", delivery_delay=50))
            t.join(60)
            assert got and got[0] is not None and got[0].message.body == b"later"
            got[0].ack()


def test_asyncio_consumer_wakes_when_due(tmp_path) -> None:
    async def main() -> bytes:
        with Broker.open(str(tmp_path), expiry_scan_ms=0) as b:
            b.create_address("q")
            b.create_queue(QueueConfig("q", "q"))
            async with AsyncSession(b.session()) as s:
                c = s.create_consumer("q")
                await s.send("q", Message(b"later", delivery_delay=50))
                d = await asyncio.wait_for(c.receive(), 30)
                await c.ack(d)
                return d.message.body
    assert asyncio.run(main()) == b"later"


def retry_settings(**kw) -> dict:  # type: ignore[no-untyped-def]
    from mqstore.engine import AddressSettings
    return {"jobs": AddressSettings(**kw)}


def test_redelivery_delay_with_multiplier_and_cap(tmp_path) -> None:
    """Artemis: delay = redelivery_delay * multiplier ** (delivery count - 1), capped by
    max_redelivery_delay; a released message waits in the scheduled buffer (counted there),
    keeps its delivery count and is not counted as rejected; then dead-lettered after
    max_delivery_attempts."""
    clock = Clock()
    with open_broker(str(tmp_path), clock, address_settings=retry_settings(
            redelivery_delay=1000, redelivery_delay_multiplier=2.0, max_redelivery_delay=3000,
            max_delivery_attempts=5)) as b:
        b.create_address("jobs")
        b.create_queue(QueueConfig("jobs", "jobs"))
        with b.session() as s:
            s.send("jobs", Message(b"job"))
            s.send("jobs", Message(b"other"))
            c = s.create_consumer("jobs", window=1)
            waits, left = [], 2
            for attempt in range(1, 5):
                d = c.receive_nowait()
                assert d is not None and d.message.body == b"job"
                assert d.delivery_count == attempt and d.redelivered == (attempt > 1)
                start = clock.now
                d.release()
                assert counts(b, "jobs") == (left, 1)
                [listed] = b.scheduled_messages("jobs")
                assert listed.delivery_count == attempt
                waits.append(listed.scheduled_delivery_time - start)
                clock.now = listed.scheduled_delivery_time - 1
                other = c.receive_nowait()  # the other message goes first meanwhile
                if other is not None:
                    assert other.message.body == b"other"
                    other.ack()
                    left -= 1
                clock.now += 1
            assert waits == [1000, 2000, 3000, 3000]
            d = c.receive_nowait()
            assert d is not None and d.delivery_count == 5
            d.release()  # the fifth delivery reached max_delivery_attempts: dropped
            info = b.queue_info("jobs")
            assert (info.message_count, info.scheduled_count, info.messages_killed) == (0, 0, 1)


def test_rollback_and_recover_go_through_the_delay_and_survive_a_reopen(tmp_path) -> None:
    clock = Clock()
    settings = retry_settings(redelivery_delay=500)
    with open_broker(str(tmp_path), clock, address_settings=settings) as b:
        b.create_address("jobs")
        b.create_queue(QueueConfig("jobs", "jobs"))
        with b.session() as s:
            s.send("jobs", Message(b"a"))
            s.send("jobs", Message(b"b", durable=False))
        with b.session(transacted=True) as tx:
            c = tx.create_consumer("jobs")
            assert c.receive_nowait().message.body == b"a"
            tx.rollback()
            assert counts(b, "jobs") == (2, 1)
        with b.session() as s:
            c = s.create_consumer("jobs")
            assert c.receive_nowait().message.body == b"b"
            s.recover()
            assert counts(b, "jobs") == (2, 2)
            assert c.receive_nowait() is None
    with open_broker(str(tmp_path), clock, address_settings=settings) as b:
        assert counts(b, "jobs") == (1, 1)  # the transient one is gone with the close
        clock.now += 500
        with b.session() as s:
            d = s.create_consumer("jobs").receive_nowait()
            assert d.message.body == b"a" and d.delivery_count == 2
            d.ack()


def test_release_without_delay_goes_back_to_the_head(tmp_path) -> None:
    clock = Clock()
    with open_broker(str(tmp_path), clock) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        with b.session() as s:
            s.send_many("q", [Message(b"1"), Message(b"2")])
            c = s.create_consumer("q")
            d = c.receive_nowait()
            d.release()
            with pytest.raises(Exception):
                d.ack()
            again = c.receive_nowait()
            assert again.message.body == b"1" and again.delivery_count == 2
            assert b.queue_info("q").messages_killed == 0


def test_redelivery_settings_are_checked() -> None:
    from mqstore.engine import AddressSettings
    for bad in ({"redelivery_delay": -1}, {"redelivery_delay_multiplier": 0},
                {"redelivery_delay_multiplier": float("inf")},
                {"redelivery_delay_multiplier": True}, {"max_redelivery_delay": -2}):
        with pytest.raises(InvalidArgumentError):
            AddressSettings(**bad).validated()


@pytest.mark.parametrize("index_lost", [False, True])
def test_a_crash_returns_a_delivery_to_the_head_of_a_full_ring_as_a_close_does(
        index_lost: bool) -> None:
    """Seed 000 §2 and §3: a scheduled message comes due onto the head of a ring queue of size 1
    while the only other message is in delivery (in an open transaction); a close cancels that
    one back to the head, and the ring, preferring its tail, deletes it. A crash must end the
    delivery the same way: before, the reopened queue put it back at its place in key order,
    behind the message that came due, and the ring deleted that one instead. (With the
    delivery journaled before hand-out: by default a crash leaves no trace of it, and the ring
    holds both until the next send, test_policies.)"""
    fs, index = SimulatedFileSystem(), MemoryIndex()
    now = [1_700_000_000_000]

    def opened(ix: MemoryIndex) -> Broker:
        return Broker.open("/s", fs=fs, index=ix, clock=lambda: now[0], expiry_scan_ms=0,
                           persist_delivery_count_before_delivery=True)

    b = opened(index)
    b.create_address("r")
    b.create_queue(QueueConfig("ring", "r", ring_size=1))
    s = b.session()
    s.send("r", Message(b"scheduled", scheduled_delivery_time=now[0] + 1000))
    s.send("r", Message(b"sent"))
    t = b.session(transacted=True)
    assert t.create_consumer("ring").receive(1).message.body == b"sent"
    now[0] += 1000
    b.deliver_scheduled()
    assert [m.message.body for m in s.create_browser("ring")] == [b"scheduled"]
    crashed = fs.crash(keep=fs.unsynced_count())  # the process dies: what was written stays
    b._opened.release()  # type: ignore[union-attr]
    fs = crashed
    with opened(MemoryIndex() if index_lost else index) as b2:
        assert [m.message.body for m in b2.session().create_browser("ring")] == [b"scheduled"]
