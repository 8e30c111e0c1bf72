"""The settle path's waits: acks that do not wait for their fsync (``block_on_acknowledge=False``,
Artemis's blockOnAcknowledge) and ``receive_many``'s one wait.

What a user sees: a non-blocking ack (the default) takes the message off its queue at once; a
crash before its group commit brings the message back (never loses it); once any later
wait on the broker returns (a durable send), the ack is durable and the message stays gone.
"""

from __future__ import annotations

import asyncio
import random
import threading
from typing import List, Optional, Tuple

import pytest

from tests.waiting import PATIENCE, receivers_waiting, wait_for
from mqstore.engine import Broker, InvalidArgumentError, Message, QueueConfig
from mqstore.engine.aio import AsyncSession
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex

OPTS = JournalOptions(segment_size=1 << 16)


def open_store(fs: SimulatedFileSystem, index: MemoryIndex, first: bool = False,
               persist: bool = False) -> Broker:
    broker = Broker.open("/s", fs=fs, index=index, journal_options=OPTS,
                         persist_delivery_count_before_delivery=persist)
    if first:
        broker.create_address("a")
        broker.create_queue(QueueConfig("q", "a"))
    return broker


def bodies(broker: Broker) -> List[tuple]:
    with broker.session() as s:
        return [(m.message.body, m.delivery_count) for m in s.create_browser("q")]


def test_a_flag_that_is_not_a_bool_is_refused(tmp_path) -> None:
    with Broker.open(str(tmp_path / "s")) as broker:
        for bad in ("no", 0, None):
            with pytest.raises(InvalidArgumentError):
                broker.session(block_on_acknowledge=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            broker.connection().session(block_on_acknowledge="yes")  # type: ignore[arg-type]
        assert broker.sessions == []


@pytest.mark.parametrize("persist", [False, True])
def test_a_crash_before_the_acks_group_commit_brings_the_message_back(persist: bool) -> None:
    """Never lost; with persist-delivery-count-before-delivery (not the default) the count of
    its delivery was durable before hand-out, so it comes back flagged redelivered; without,
    with the count of its last return (none here: 0, as Artemis)."""
    fs, index = SimulatedFileSystem(), MemoryIndex()
    broker = open_store(fs, index, first=True, persist=persist)
    session = broker.session(block_on_acknowledge=False)
    session.send("a", Message(b"m0"))
    d = session.create_consumer("q").receive(5)
    assert d is not None and d.delivery_count == 1
    crashed: List[Tuple[SimulatedFileSystem, MemoryIndex]] = []
    fs.hook = lambda op: crashed.append((fs.crash(0), index.crash(random.Random(1)))) \
        if op == "fdatasync" and not crashed else None
    d.ack()  # returns without waiting; the writer's fsync of the ack is where the crash is
    assert broker.queue_info("q").message_count == 0  # gone from the queue at once
    wait_for(lambda: crashed, "the journal's writer syncs the ack")
    fs.hook = None
    broker.close()
    assert crashed, "the journal's writer never synced the ack"
    reopened = open_store(*crashed[0], persist=persist)
    try:
        assert bodies(reopened) == [(b"m0", 1 if persist else 0)]  # back
    finally:
        reopened.close()


def test_a_later_durable_send_makes_an_earlier_ack_durable() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    broker = open_store(fs, index, first=True)
    session = broker.session(block_on_acknowledge=False)
    session.send_many("a", [Message(b"m0"), Message(b"m1")])
    consumer = session.create_consumer("q")
    got = consumer.receive_many(2, 5)
    session.ack_many(got[:1])
    got[1].ack()
    other = broker.session()  # another session's durable send: one wait covers both acks
    other.send("a", Message(b"m2"))
    state = fs.crash(0), index.crash(random.Random(2))  # everything not synced is lost
    broker.close()
    reopened = open_store(*state)
    try:
        assert bodies(reopened) == [(b"m2", 0)]
    finally:
        reopened.close()


def test_acks_that_do_not_wait_still_free_their_records_once_durable(tmp_path) -> None:
    """An application that only acks (no send, no wait) still gets its journal space back: an
    ack applies what the earlier acks made dead once they are durable (their messages' records
    die, so the segments they fill can go)."""
    with Broker.open(str(tmp_path / "s"), journal_options=JournalOptions(segment_size=4096),
                     checkpoint_records=0) as broker:
        broker.create_address("a")
        broker.create_queue(QueueConfig("q", "a"))
        session = broker.session()  # the default: acks do not wait
        session.send_many("a", [Message(b"x" * 200) for _ in range(60)])
        journal = broker.storage.persistence.journal
        got = session.create_consumer("q").receive_many(60, 5)
        assert len(got) == 60
        session.ack_many(got[:59])
        acked_lsn = journal.statistics().next_lsn - 1
        wait_for(lambda: journal.statistics().durable_lsn >= acked_lsn,
                 "the journal's writer syncs the acks")
        live_before = journal.statistics().live_records
        got[59].ack()  # applies what the first acks made dead
        assert journal.statistics().live_records < live_before - 50


def test_asyncio_acks_without_waiting_and_a_clean_close_keeps_them(tmp_path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d) as broker:
        broker.create_address("a")
        broker.create_queue(QueueConfig("q", "a"))

        async def main() -> None:
            s = AsyncSession(broker.session(block_on_acknowledge=False))
            for i in range(20):
                await s.send("a", Message(b"%d" % i))
            c = s.create_consumer("q")
            for _ in range(20):
                got = await c.receive(5)
                assert got is not None
                await c.ack(got)
            assert broker.queue_info("q").message_count == 0
        asyncio.run(main())
    with Broker.open(d) as broker:
        assert broker.queue_info("q").message_count == 0


def test_receive_many_waiting_takes_the_rest_that_arrived_with_the_first(tmp_path) -> None:
    with Broker.open(str(tmp_path / "s")) as broker:
        broker.create_address("a")
        broker.create_queue(QueueConfig("q", "a"))
        consumer = broker.session().create_consumer("q", window=3)
        sender = broker.session()
        got: List[Optional[list]] = []
        t = threading.Thread(target=lambda: got.append(consumer.receive_many(10, PATIENCE)))
        t.start()
        receivers_waiting(broker, "q")
        sender.send_many("a", [Message(b"%d" % i) for i in range(5)])
        t.join(PATIENCE)
        deliveries = got[0]
        assert deliveries is not None
        # the window bounds the batch: the first one that woke it counts in it
        assert [x.message.body for x in deliveries][:1] == [b"0"]
        assert 1 <= len(deliveries) <= 3
        more = consumer.receive_many(10, 0)
        assert len(deliveries) + len(more) == 3  # never past the window
        assert [x.message.body for x in deliveries + more] == [b"0", b"1", b"2"]
