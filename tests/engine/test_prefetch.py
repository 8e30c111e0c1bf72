"""A consumer's prefetch (``create_consumer(..., prefetch=N)``, ``engine.delivery.prefetch``): a
backlog is read with one DELIVERY write per N + 1 messages, within the window; what the application
never received goes back at close with its delivery count as it was, in consumption order; a
crash brings it back flagged redelivered, never loses it."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import List, Optional, Tuple

import pytest

from tests.waiting import PATIENCE
from mqstore.engine import (Broker, InvalidArgumentError, Message, PolicyType, QueueConfig,
                            RoutingType)
from mqstore.engine.aio import AsyncSession
from mqstore.journal import SimulatedFileSystem
from mqstore.recovery import MemoryIndex


async def until(flag: threading.Event, what: str) -> None:
    """Return once ``flag`` is set, without blocking the event loop; fail the test with
    ``what`` after ``PATIENCE`` s."""
    deadline = time.monotonic() + PATIENCE
    while not flag.is_set():
        if time.monotonic() > deadline:
            raise AssertionError(f"never came: {what}")
        await asyncio.sleep(0.001)


def open_store(fs: SimulatedFileSystem, index: MemoryIndex, first: bool = False,
               **queue: object) -> Broker:
    # (prefetch with persist-delivery-count-before-delivery: one DELIVERY write per prefetch,
    # counts back after a crash; without it, a durable message's delivery writes nothing)
    broker = Broker.open("/s", fs=fs, index=index, persist_delivery_count_before_delivery=True)
    if first:
        broker.create_address("a", [RoutingType.ANYCAST])
        broker.create_queue(QueueConfig("q", "a", **queue))  # type: ignore[arg-type]
    return broker


def backlog(broker: Broker, n: int) -> None:
    with broker.session() as s:
        s.send_many("a", [Message(b"m%d" % i) for i in range(n)])


def browse(broker: Broker) -> List[Tuple[bytes, int]]:
    with broker.session() as s:
        return [(m.message.body, m.delivery_count) for m in s.create_browser("q")]


def slow_fdatasync(fs: SimulatedFileSystem) -> Tuple[threading.Event, threading.Event]:
    """Hold the journal's next fdatasync until the second event is set; the first is set
    once it is held (a state to wait for, instead of a sleep that a loaded machine outlasts)."""
    syncing, go = threading.Event(), threading.Event()

    def hook(op: str) -> None:
        if op == "fdatasync" and not go.is_set():
            syncing.set()
            go.wait(PATIENCE)
    fs.hook = hook
    return syncing, go


def records(broker: Broker) -> int:
    return broker.statistics().journal.records


def test_a_backlog_is_read_with_one_delivery_write_per_prefetch_plus_one() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with open_store(fs, index, first=True) as broker:
        backlog(broker, 10)
        with broker.session() as s:
            c = s.create_consumer("q", window=100, prefetch=4)
            before = records(broker)
            got = [c.receive(1)]
            assert records(broker) == before + 5  # five DELIVERY records, one write
            assert broker.queue_info("q").delivering_count == 5
            got += [c.receive(1) for _ in range(4)]
            assert records(broker) == before + 5  # handed out from the buffer
            got += [c.receive(1)]
            assert records(broker) == before + 10
            assert [d.message.body for d in got] == [b"m%d" % i for i in range(6)]
            assert all(d.delivery_count == 1 for d in got)
            s.ack_many(got)
            assert broker.queue_info("q").message_count == 4


def test_prefetch_stays_within_the_window() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with open_store(fs, index, first=True) as broker:
        backlog(broker, 10)
        with broker.session() as s:
            c = s.create_consumer("q", window=3, prefetch=50)
            a = c.receive(1)
            assert broker.queue_info("q").delivering_count == 3
            b, d = c.receive(1), c.receive(1)
            assert c.receive_nowait() is None  # three held unacked: no credit left
            a.ack()
            e = c.receive(1)
            assert [x.message.body for x in (a, b, d, e)] == [b"m0", b"m1", b"m2", b"m3"]
            assert broker.queue_info("q").delivering_count == 3


def test_receive_many_takes_the_prefetched_ones_first() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with open_store(fs, index, first=True) as broker:
        backlog(broker, 8)
        with broker.session() as s:
            c = s.create_consumer("q", prefetch=3)
            first = c.receive(1)
            rest = c.receive_many(5, 1)
            assert [d.message.body for d in [first] + rest] == [b"m%d" % i for i in range(6)]


def test_closing_returns_what_was_never_received_with_its_count_as_it_was() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with open_store(fs, index, first=True) as broker:
        backlog(broker, 6)
        with broker.session() as s:
            c = s.create_consumer("q", prefetch=5)
            received = [c.receive(1), c.receive(1)]  # m2..m5 wait in the buffer
            assert [d.message.body for d in received] == [b"m0", b"m1"]
            c.close()
            # consumption order: the two received (redelivered), then the four never seen
            assert browse(broker) == [(b"m0", 1), (b"m1", 1), (b"m2", 0), (b"m3", 0),
                                      (b"m4", 0), (b"m5", 0)]
            again = s.create_consumer("q").receive_many(6, 1)
            assert [(d.message.body, d.delivery_count) for d in again] == \
                [(b"m0", 2), (b"m1", 2), (b"m2", 1), (b"m3", 1), (b"m4", 1), (b"m5", 1)]


def test_a_clean_close_of_the_broker_keeps_the_counts_and_the_order() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    broker = open_store(fs, index, first=True)
    backlog(broker, 5)
    s = broker.session()
    c = s.create_consumer("q", prefetch=10)
    assert c.receive(1).message.body == b"m0"
    other = broker.session().create_consumer("q", prefetch=10)
    assert other.receive_nowait() is None  # the first consumer holds all five
    broker.close()
    with open_store(fs, index) as again:
        assert browse(again) == [(b"m0", 1), (b"m1", 0), (b"m2", 0), (b"m3", 0), (b"m4", 0)]


def test_a_crash_brings_prefetched_messages_back_redelivered_never_lost() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    broker = open_store(fs, index, first=True)
    backlog(broker, 6)
    c = broker.session().create_consumer("q", prefetch=3)
    assert c.receive(1).message.body == b"m0"  # m1..m3 prefetched, m4 and m5 on the queue
    crashed_fs, crashed_index = fs.crash(0), index.crash(random.Random(3))
    broker.close()
    with open_store(crashed_fs, crashed_index) as again:
        # the DELIVERY records of all four were durable before m0 was handed out
        assert browse(again) == [(b"m0", 1), (b"m1", 1), (b"m2", 1), (b"m3", 1), (b"m4", 0),
                                 (b"m5", 0)]


def test_a_prefetched_message_a_ring_removed_is_passed_over() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with open_store(fs, index, first=True, max_count=4, policy_type=PolicyType.RING) as broker:
        backlog(broker, 4)
        with broker.session() as s:
            c = s.create_consumer("q", prefetch=3)
            assert c.receive(1).message.body == b"m0"  # m1..m3 in the buffer
            s.send("a", Message(b"m4"))  # the ring removes the oldest: m0, in delivery
            s.send("a", Message(b"m5"))  # then m1, prefetched
            got = [c.receive(1) for _ in range(4)]
            assert [d.message.body for d in got] == [b"m2", b"m3", b"m4", b"m5"]


def test_a_prefetched_message_that_expires_in_the_buffer_is_expired_not_handed_out() -> None:
    now = [1_700_000_000_000]
    fs, index = SimulatedFileSystem(), MemoryIndex()
    broker = Broker.open("/s", fs=fs, index=index, clock=lambda: now[0], expiry_scan_ms=0)
    with broker:
        broker.create_address("a", [RoutingType.ANYCAST])
        broker.create_queue(QueueConfig("q", "a"))
        with broker.session() as s:
            s.send_many("a", [Message(b"m0"), Message(b"m1", expiration=now[0] + 1000),
                              Message(b"m2")])
            c = s.create_consumer("q", prefetch=2)
            assert c.receive(1).message.body == b"m0"  # m1 and m2 in the buffer
            now[0] += 2000
            assert c.receive(1).message.body == b"m2"
            info = broker.queue_info("q")
            assert (info.messages_expired, info.message_count) == (1, 2)  # m0, m2 unacked


def test_asyncio_consumers_prefetch_too() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with open_store(fs, index, first=True) as broker:
        backlog(broker, 20)

        async def main() -> List[bytes]:
            s = AsyncSession(broker.session())
            c = s.create_consumer("q", window=10, prefetch=9)
            out = []
            for i in range(20):
                d = await c.receive(1)
                assert d is not None
                if i == 0:  # one receive took the window's worth
                    assert broker.queue_info("q").delivering_count == 10
                out.append(d.message.body)
                await c.ack(d)
            return out

        before = records(broker)
        assert asyncio.run(main()) == [b"m%d" % i for i in range(20)]
        assert records(broker) == before + 40  # 20 DELIVERY records and 20 ACK records


def test_a_cancelled_asyncio_receive_that_was_waiting_loses_no_message() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with open_store(fs, index, first=True) as broker:

        async def main() -> List[Tuple[bytes, int]]:
            s = AsyncSession(broker.session())
            c = s.create_consumer("q")
            waiting = asyncio.ensure_future(c.receive(PATIENCE))
            while not broker.find_queue("q").waiters:  # it waits for a message
                await asyncio.sleep(0.001)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await s.send("a", Message(b"m0"))  # the cancelled receive must not get it
            d = await c.receive(1)
            assert d is not None
            return [(d.message.body, d.delivery_count)]

        assert asyncio.run(main()) == [(b"m0", 1)]
        assert broker.queue_info("q").delivering_count == 1


def test_an_asyncio_receive_that_timed_out_leaves_the_next_message_to_the_next_receive(
        ) -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with open_store(fs, index, first=True) as broker:

        async def main() -> List[Tuple[Optional[bytes], int]]:
            s = AsyncSession(broker.session())
            c = s.create_consumer("q")
            assert await c.receive(0.05) is None  # nothing came: it stopped waiting
            await s.send("a", Message(b"m0"))  # so it is not handed to that receive
            d = await c.receive(1)
            assert d is not None
            return [(d.message.body, d.delivery_count)]

        assert asyncio.run(main()) == [(b"m0", 1)]
        assert broker.queue_info("q").delivering_count == 1


def test_a_receive_cancelled_during_its_durability_wait_keeps_the_message_for_the_next(
) -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    broker = open_store(fs, index, first=True)
    backlog(broker, 2)

    async def main() -> List[Tuple[bytes, int]]:
        s = AsyncSession(broker.session())
        c = s.create_consumer("q")
        syncing, go = slow_fdatasync(fs)
        taking = asyncio.ensure_future(c.receive(PATIENCE))  # takes m0, waits for its record
        await until(syncing, "the receive's DELIVERY record is being synced")
        taking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await taking
        fs.hook = None
        go.set()
        got = [await c.receive(1), await c.receive(1)]
        out = [(d.message.body, d.delivery_count) for d in got if d is not None]
        c.close()  # nothing held back: both were handed out and go back unacked
        return out

    assert asyncio.run(main()) == [(b"m0", 1), (b"m1", 1)]
    assert browse(broker) == [(b"m0", 1), (b"m1", 1)]
    broker.close()


def test_a_cancelled_receive_on_a_consumer_closed_meanwhile_returns_its_message() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    broker = open_store(fs, index, first=True)
    backlog(broker, 1)

    async def main() -> None:
        s = AsyncSession(broker.session())
        c = s.create_consumer("q")
        syncing, go = slow_fdatasync(fs)
        taking = asyncio.ensure_future(c.receive(PATIENCE))
        await until(syncing, "the receive's DELIVERY record is being synced")
        c.close()
        taking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await taking
        fs.hook = None
        go.set()

    asyncio.run(main())
    assert broker.queue_info("q").delivering_count == 0
    assert browse(broker) == [(b"m0", 0)]  # back, never handed out
    broker.close()


@pytest.mark.parametrize("bad", [-1, "2", 1.5, None])
def test_a_bad_prefetch_is_refused_before_anything_is_made(bad: object) -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with open_store(fs, index, first=True) as broker:
        with broker.session() as s:
            with pytest.raises(InvalidArgumentError):
                s.create_consumer("q", prefetch=bad)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgumentError):
                s.create_subscriber("a", prefetch=bad)  # type: ignore[arg-type]
            assert broker.queue_info("q").consumer_count == 0


@pytest.mark.parametrize("closing", ["consumer", "session", "broker"])
@pytest.mark.parametrize("many", [False, True])
def test_a_receive_in_flight_when_its_consumer_or_broker_closes_raises_illegal_state(
        closing: str, many: bool) -> None:
    """A receive that took a message and waits for its DELIVERY record while its consumer,
    session or broker closes (issue 36 item 7: an untyped KeyError when the broker's close
    had let the message go): IllegalStateError, and the message goes back to the queue head
    with its count as it was, never left in delivery."""
    fs, index = SimulatedFileSystem(), MemoryIndex()
    broker = open_store(fs, index, first=True)
    backlog(broker, 3)
    session = broker.session()
    c = session.create_consumer("q")
    waited, go = threading.Event(), threading.Event()
    real_wait = broker.storage.wait

    def wait_then_hold(ticket):  # type: ignore[no-untyped-def]
        real_wait(ticket)
        if threading.current_thread() is not threading.main_thread():
            waited.set()
            go.wait()
    broker.storage.wait = wait_then_hold  # type: ignore[method-assign]
    raised: List[BaseException] = []

    def receive() -> None:
        try:
            c.receive_many(2, 5) if many else c.receive(5)
        except BaseException as exc:  # noqa: BLE001 - the test looks at what it was
            raised.append(exc)
    t = threading.Thread(target=receive)
    t.start()
    assert waited.wait(60)  # taken and durable, not handed out yet
    {"consumer": c, "session": session, "broker": broker}[closing].close()
    go.set()
    t.join(60)
    assert [type(e).__name__ for e in raised] == ["IllegalStateError"]
    if closing != "broker":
        assert broker.queue_info("q").delivering_count == 0
        assert browse(broker) == [(b"m0", 0), (b"m1", 0), (b"m2", 0)]
        broker.close()
    broker = open_store(fs, index)
    taken = 2 if many else 1
    # never handed out: back with its count as it was; after the broker's close, the reopen
    # ends the delivery as a crash's does (its DELIVERY record was durable: redelivered)
    counts = [1 if closing == "broker" and i < taken else 0 for i in range(3)]
    assert browse(broker) == list(zip([b"m0", b"m1", b"m2"], counts))
    broker.close()
