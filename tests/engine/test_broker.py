"""The broker's public behaviour, seed by seed (004 §4.1-4.7, §4.10, §4.13; 000 rollbacks)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import List

import pytest

from tests.waiting import PATIENCE, receivers_waiting
from mqstore.engine import (AddressNotFoundError, AlreadyExistsError, AsyncSession, Broker,
                            IllegalStateError, InvalidNameError, Message, QueueConfig,
                            QueueNotFoundError, ResourceLimitError, RoutingType, RoutingTypeError)
from mqstore.journal import JournalOptions
from mqstore.recovery.schema import RecordKind

OPTS = JournalOptions(segment_size=64 * 1024)


@pytest.fixture
def broker(tmp_path: Path):
    b = Broker.open(str(tmp_path / "s"), journal_options=OPTS)
    yield b
    b.close()


def reopen(b: Broker) -> Broker:
    d = b.storage.persistence.journal.directory.rsplit("/journal", 1)[0]
    b.close()
    return Broker.open(d, journal_options=OPTS)


def bodies(b: Broker, queue: str) -> List[bytes]:
    with b.session() as s:
        return [m.message.body for m in s.create_browser(queue)]


def kinds(b: Broker) -> List[int]:
    return [r.kind for r in b.storage.persistence.journal.records()]


@pytest.mark.parametrize("name", ["", "a b", "a&b", "a::b", "a,b", "a?b", "a>b", "a#", "a.b*",
                                  "a.#b", "x" * 256])
def test_naming_rules(broker: Broker, name: str) -> None:
    with pytest.raises(InvalidNameError):
        broker.create_address(name)
    assert broker.address_names() == []
    assert kinds(broker) == []


def test_bad_input_changes_nothing(broker: Broker) -> None:
    broker.create_address("a")
    broker.create_queue(QueueConfig("q", "a"))
    before = kinds(broker)
    with pytest.raises(AlreadyExistsError):
        broker.create_address("a")
    with pytest.raises(AlreadyExistsError):
        broker.create_queue(QueueConfig("q", "a"))
    with pytest.raises(AddressNotFoundError):
        broker.create_queue(QueueConfig("q2", "nope"))
    with pytest.raises(RoutingTypeError):
        broker.create_queue(QueueConfig("q3", "a", RoutingType.MULTICAST))
    with pytest.raises(RoutingTypeError):
        broker.create_address("b", routing_types=())
    with broker.session() as s:
        with pytest.raises(AddressNotFoundError):
            s.send("nope", Message(b"x"))
        with pytest.raises(QueueNotFoundError):
            s.send("a::nope", Message(b"x"))
        with pytest.raises(QueueNotFoundError):
            s.create_consumer("nope")
        with pytest.raises(RoutingTypeError):
            s.send("multicast://a", Message(b"x"))
    with pytest.raises(TypeError):
        Message(b"x", properties={"k": object()})
    assert kinds(broker) == before
    assert broker.queue_info("q").message_count == 0


def test_anycast_round_robin_across_queues(broker: Broker) -> None:
    broker.create_address("orders")
    for q in ("q1", "q2"):
        broker.create_queue(QueueConfig(q, "orders"))
    with broker.session() as s:
        for i in range(6):
            s.send("orders", Message(b"%d" % i))
    assert bodies(broker, "q1") == [b"0", b"2", b"4"]
    assert bodies(broker, "q2") == [b"1", b"3", b"5"]


def test_multicast_stores_the_body_once_and_frees_it_with_the_last_ack(broker: Broker) -> None:
    broker.create_address("news", {RoutingType.MULTICAST})
    for q in ("s1", "s2", "s3"):
        broker.create_queue(QueueConfig(q, "news", RoutingType.MULTICAST))
    with broker.session(block_on_acknowledge=True) as s:  # (dead once the acks are durable)
        s.send("news", Message(b"hello"))
        assert kinds(broker).count(RecordKind.MESSAGE) == 1
        for q in ("s1", "s2", "s3"):
            assert bodies(broker, q) == [b"hello"]
        for q in ("s1", "s2"):
            s.create_consumer(q).receive(1).ack()
        journal = broker.storage.persistence.journal
        assert journal.statistics().live_records > 0
        live_before = journal.statistics().live_records
        s.create_consumer("s3").receive(1).ack()
    # the message record and the deliveries are dead now (acks stay until it is reclaimed)
    assert journal.statistics().live_records < live_before


def test_prefixes_and_fqqn(broker: Broker) -> None:
    broker.create_address("foo", {RoutingType.ANYCAST, RoutingType.MULTICAST})
    broker.create_queue(QueueConfig("any1", "foo", RoutingType.ANYCAST))
    broker.create_queue(QueueConfig("any2", "foo", RoutingType.ANYCAST))
    broker.create_queue(QueueConfig("multi", "foo", RoutingType.MULTICAST))
    with broker.session() as s:
        s.send("foo", Message(b"both"))           # one anycast queue and every multicast one
        s.send("anycast://foo", Message(b"any"))
        s.send("multicast://foo", Message(b"multi"))
        s.send("foo::any2", Message(b"fq"))
        assert [m.message.body for m in s.create_browser("foo::multi")] == [b"both", b"multi"]
        with pytest.raises(QueueNotFoundError):
            s.create_consumer("bar::multi")
    assert bodies(broker, "any1") == [b"both"]
    assert bodies(broker, "any2") == [b"any", b"fq"]
    # management and consumers take a queue as a name, address::queue or ::queue
    for name in ("any2", "foo::any2", "::any2"):
        info = broker.queue_info(name)
        assert (info.name, info.message_count) == ("any2", 2)
    with pytest.raises(QueueNotFoundError):
        broker.queue_info("bar::any2")
    with pytest.raises(InvalidNameError):
        broker.queue_info("::")
    with broker.session() as s:
        d = s.create_consumer("::any2").receive(1)
        assert d is not None and d.message.body == b"any"
        d.ack()
        assert [m.message.body for m in s.create_browser("::any1")] == [b"both"]
        with pytest.raises(QueueNotFoundError):
            s.create_consumer("::nope")


def test_durability_rules_across_reopen(broker: Broker) -> None:
    broker.create_address("t", {RoutingType.MULTICAST})
    broker.create_queue(QueueConfig("keep", "t", RoutingType.MULTICAST))
    broker.create_queue(QueueConfig("temp", "t", RoutingType.MULTICAST, durable=False))
    with broker.session() as s:
        s.send("t", Message(b"durable"))
        s.send("t", Message(b"volatile", durable=False))
    assert bodies(broker, "temp") == [b"durable", b"volatile"]
    broker = reopen(broker)
    try:
        assert broker.queue_names() == ["keep"]
        assert bodies(broker, "keep") == [b"durable"]
    finally:
        broker.close()


def test_a_non_durable_queue_keeps_a_message_whose_record_was_compacted_away(
        broker: Broker) -> None:
    """Found by the model-based test: once the durable queue's reference is acked, the record
    is dead to the journal, but the non-durable queue still holds the message."""
    broker.create_address("t", {RoutingType.MULTICAST})
    broker.create_queue(QueueConfig("keep", "t", RoutingType.MULTICAST))
    broker.create_queue(QueueConfig("temp", "t", RoutingType.MULTICAST, durable=False))
    with broker.session() as s:
        s.send("t", Message(b"durable"))
        s.create_consumer("keep").receive(1).ack()
        for _ in range(80):  # seal the segment that holds the record
            s.send("t::keep", Message(bytes(1024)))
        keep = s.create_consumer("keep")
        for _ in range(10):  # other records through the broker's small cache of decoded ones
            keep.receive(1).ack()
        broker.checkpoint()
        assert broker.compact(force=True).compacted
        assert s.create_consumer("temp").receive(1).message.body == b"durable"


def test_cancelled_messages_return_in_order_flagged_redelivered(broker: Broker) -> None:
    broker.create_address("foo")
    broker.create_queue(QueueConfig("foo", "foo"))
    with broker.session() as s:
        s.send_many("foo", [Message(x) for x in (b"A", b"B", b"C", b"D", b"E")])
        c = s.create_consumer("foo")
        got = [c.receive(1) for _ in range(4)]
        info = broker.queue_info("foo")
        assert (info.message_count, info.delivering_count) == (5, 4)  # seed 000 example
        c.close()
        with pytest.raises(IllegalStateError):
            got[0].ack()
        assert bodies(broker, "foo") == [b"A", b"B", b"C", b"D", b"E"]
        c2 = s.create_consumer("foo")
        again = c2.receive(1)
        assert again.message.body == b"A" and again.redelivered and again.delivery_count == 2
    broker = reopen(broker)
    try:
        with broker.session() as s:
            d = s.create_consumer("foo").receive(1)
            assert d.message.body == b"A" and d.delivery_count == 3
            assert bodies(broker, "foo") == [b"B", b"C", b"D", b"E"]
    finally:
        broker.close()


def test_reject_is_not_redelivered_and_double_ack_fails(broker: Broker) -> None:
    broker.create_address("q")
    broker.create_queue(QueueConfig("q", "q"))
    with broker.session() as s:
        s.send_many("q", [Message(b"1"), Message(b"2")])
        c = s.create_consumer("q")
        d = c.receive(1)
        d.reject()
        with pytest.raises(IllegalStateError):
            d.ack()
        c.close()
        assert bodies(broker, "q") == [b"2"]
        info = broker.queue_info("q")
        assert info.messages_killed == 1 and info.messages_acknowledged == 0


def test_window_bounds_deliveries(broker: Broker) -> None:
    broker.create_address("q")
    broker.create_queue(QueueConfig("q", "q"))
    with broker.session() as s:
        s.send_many("q", [Message(b"%d" % i) for i in range(5)])
        c = s.create_consumer("q", window=2)
        a, b = c.receive_nowait(), c.receive_nowait()
        assert a and b and c.receive_nowait() is None
        a.ack()
        assert c.receive_nowait().message.body == b"2"


def test_transactions_commit_and_rollback(broker: Broker) -> None:
    broker.create_address("q")
    broker.create_queue(QueueConfig("q", "q"))
    with broker.session() as s:
        s.send_many("q", [Message(b"old1"), Message(b"old2")])
    with broker.session(transacted=True) as t:
        t.send("q", Message(b"new"))
        assert bodies(broker, "q") == [b"old1", b"old2"]
        c = t.create_consumer("q")
        d = c.receive(1)
        d.ack()
        t.rollback()
        assert bodies(broker, "q") == [b"old1", b"old2"]
        t.send("q", Message(b"new2"))
        d = c.receive(1)
        assert d.redelivered
        d.ack()
        before = kinds(broker).count(RecordKind.TX)
        t.commit()
        assert kinds(broker).count(RecordKind.TX) == before + 1  # one commit record
        assert bodies(broker, "q") == [b"old2", b"new2"]
    with broker.session() as s:
        with pytest.raises(IllegalStateError):
            s.commit()
    broker = reopen(broker)
    try:
        assert bodies(broker, "q") == [b"old2", b"new2"]
    finally:
        broker.close()


def test_management_and_deletes(broker: Broker) -> None:
    broker.create_address("a")
    broker.create_queue(QueueConfig("q", "a", max_consumers=1))
    with broker.session() as s:
        s.send_many("a", [Message(b"1"), Message(b"2")])
        c = s.create_consumer("q")
        with pytest.raises(ResourceLimitError):
            s.create_consumer("q")
        c.receive(1).ack()
        info = broker.queue_info("q")
        assert (info.message_count, info.consumer_count, info.messages_added,
                info.messages_acknowledged, info.durable) == (1, 1, 2, 1, True)
        assert broker.address_info("a").queues == ("q",)
        with pytest.raises(ResourceLimitError):
            broker.delete_queue("q")
        with pytest.raises(ResourceLimitError):
            broker.delete_address("a")
        c.close()
    broker.delete_queue("q")
    broker.delete_address("a")
    broker = reopen(broker)
    try:
        assert broker.queue_names() == [] and broker.address_names() == []
    finally:
        broker.close()


def test_closed_objects_refuse_work(tmp_path: Path) -> None:
    b = Broker.open(str(tmp_path / "s"), journal_options=OPTS)
    b.create_address("a")
    b.create_queue(QueueConfig("a", "a"))
    s = b.session()
    s.close()
    with pytest.raises(IllegalStateError):
        s.send("a", Message(b"x"))
    late = b.session()  # still open when the broker closes: refused as closed, not failed
    b.close()
    with pytest.raises(IllegalStateError):
        late.send("a", Message(b"late"))
    with pytest.raises(IllegalStateError):
        b.checkpoint()
    with pytest.raises(IllegalStateError):
        b.create_address("b")
    with pytest.raises(IllegalStateError):
        b.session()


def test_waiting_consumers_are_served_round_robin(broker: Broker) -> None:
    broker.create_address("q")
    broker.create_queue(QueueConfig("q", "q"))
    got: dict = {0: [], 1: []}
    s = broker.session()
    consumers = [s.create_consumer("q"), s.create_consumer("q")]

    def run(i: int) -> None:
        d = consumers[i].receive(5)
        got[i].append(d.message.body)
        d.ack()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    threads[0].start()
    while len(broker.find_queue("q").waiters) < 1:
        time.sleep(0.001)
    threads[1].start()
    while len(broker.find_queue("q").waiters) < 2:
        time.sleep(0.001)
    with broker.session() as p:
        p.send("q", Message(b"0"))
        p.send("q", Message(b"1"))
    for t in threads:
        t.join()
    assert got[0][0] == b"0" and got[1][0] == b"1"
    s.close()


def test_asyncio_facade_shares_group_commit(broker: Broker) -> None:
    broker.create_address("q")
    broker.create_queue(QueueConfig("q", "q"))

    async def main() -> List[bytes]:
        s = AsyncSession(broker.session())
        await asyncio.gather(*(s.send("q", Message(b"%d" % i)) for i in range(200)))
        c = s.create_consumer("q")
        out = []
        for _ in range(200):
            d = await c.receive(1)
            await c.ack(d)
            out.append(d.message.body)
        assert await c.receive(0.05) is None
        s.close()
        return out

    stats_before = broker.storage.persistence.journal.statistics()
    out = asyncio.run(main())
    assert sorted(out) == sorted(b"%d" % i for i in range(200))
    stats = broker.storage.persistence.journal.statistics()
    assert stats.batches - stats_before.batches < 600  # 200 sends shared fsyncs


@pytest.mark.parametrize("sender", ["task", "thread"])
def test_an_asyncio_receive_waiting_is_woken_by_a_send_from_a_task_or_a_thread(
        broker: Broker, sender: str) -> None:
    """The waiting receive is handed the message inside the send's lock: from a task of its own
    loop, or from a plain thread, which must wake the loop (it has no timer to wake it: the
    receive has no timeout)."""
    broker.create_address("q")
    broker.create_queue(QueueConfig("q", "q"))
    result: List[bytes] = []

    async def main() -> None:
        s = AsyncSession(broker.session())
        c = s.create_consumer("q")
        waiting = asyncio.ensure_future(c.receive())
        while not broker.find_queue("q").waiters:  # the receive is registered and waits
            await asyncio.sleep(0.001)
        if sender == "task":
            await s.send("q", Message(b"m"))
        else:
            def later() -> None:  # the loop may be asleep in its selector: a wake is needed
                broker.session().send("q", Message(b"m"))
            threading.Thread(target=later).start()
        d = await waiting
        await c.ack(d)
        s.close()
        result.append(d.message.body)

    loop_thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    loop_thread.start()
    loop_thread.join(PATIENCE)  # a lost wake leaves the loop asleep for good
    assert result == [b"m"]
    assert broker.queue_info("q").message_count == 0


def test_a_full_window_waits_for_an_ack(broker: Broker) -> None:
    broker.create_address("q")
    broker.create_queue(QueueConfig("q", "q"))
    with broker.session() as s:
        s.send_many("q", [Message(b"1"), Message(b"2")])
        c = s.create_consumer("q", window=1)
        first = c.receive(1)
        result = []
        t = threading.Thread(target=lambda: result.append(c.receive(PATIENCE)))
        t.start()
        receivers_waiting(broker, "q")  # blocked: no credit, while a message is ready
        assert not result and broker.queue_info("q").message_count == 2
        first.ack()
        t.join(PATIENCE)
        assert result and result[0].message.body == b"2"


def test_store_files_are_private(tmp_path: Path) -> None:
    import stat
    d = tmp_path / "s"
    with Broker.open(str(d), journal_options=OPTS) as b:
        b.create_address("a")
    for p in [d] + [x for x in d.rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))


def test_a_transaction_too_large_for_one_record_is_refused_whole(tmp_path: Path) -> None:
    """A commit journals one TX record; when its sends cannot fit one, the commit raises
    before anything is applied and the transaction stays open."""
    from mqstore.journal import RecordTooLargeError
    opts = JournalOptions(segment_size=4096, max_record_size=1900)
    with Broker.open(str(tmp_path / "s"), journal_options=opts, expiry_scan_ms=0) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        with b.session(transacted=True) as tx:
            for i in range(12):
                tx.send("q", Message(b"%d" % i))
            with pytest.raises(RecordTooLargeError):
                tx.commit()
            assert b.queue_info("q").message_count == 0
            tx.rollback()
            tx.send("q", Message(b"fits"))
            tx.commit()
        assert b.queue_info("q").message_count == 1
