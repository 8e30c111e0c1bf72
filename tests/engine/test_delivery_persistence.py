"""``Broker.open(persist_delivery_count_before_delivery=False)`` (Artemis's
persist-delivery-count-before-delivery, off): a delivery of a durable message writes nothing and
waits for nothing; its count is journaled when it comes back unsettled; after a crash a message
handed out and not acked is back with the count of its last return, never lost; a message whose
own record is not durable yet is still never handed out before it is."""

from __future__ import annotations

import random
import threading
import time
from typing import List, Optional, Tuple

import pytest

from tests.waiting import PATIENCE, receivers_waiting
from mqstore.engine import Broker, InvalidArgumentError, Message, QueueConfig
from mqstore.engine.consumer import Delivery
from mqstore.journal import SimulatedFileSystem
from mqstore.recovery import MemoryIndex


def open_store(fs: SimulatedFileSystem, index: MemoryIndex, first: bool = False,
               persist: bool = False) -> Broker:
    broker = Broker.open("/s", fs=fs, index=index,
                         persist_delivery_count_before_delivery=persist)
    if first:
        broker.create_address("a")
        broker.create_queue(QueueConfig("q", "a"))
    return broker


def browse(broker: Broker) -> List[Tuple[bytes, int]]:
    with broker.session() as s:
        return [(m.message.body, m.delivery_count) for m in s.create_browser("q")]


def records(broker: Broker) -> int:
    return broker.statistics().journal.records


def received_while_sent(broker: Broker, fs: SimulatedFileSystem, message: Message,
                        selector: Optional[str] = None
                        ) -> Tuple[Optional[Delivery], int, int]:
    """A consumer of ``q`` waits in receive while ``message`` is sent to ``a`` with every
    fdatasync slowed down to 0.3 s: what it received, the durable LSN when its receive
    returned, and the LSN of the message's record."""
    got: List[Tuple[Optional[Delivery], int]] = []

    def consume() -> None:
        d = broker.session().create_consumer("q", selector=selector).receive(PATIENCE)
        got.append((d, broker.statistics().journal.durable_lsn))

    t = threading.Thread(target=consume)
    t.start()
    receivers_waiting(broker, "q")
    message_lsn = broker.statistics().journal.next_lsn
    fs.hook = lambda op: time.sleep(0.3) if op == "fdatasync" else None
    try:
        broker.session().send("a", message)
    finally:
        fs.hook = None
    t.join(PATIENCE)
    assert got, "the consumer received nothing"
    return got[0][0], got[0][1], message_lsn


@pytest.mark.parametrize("persist", [True, False])
def test_a_delivery_writes_a_record_only_when_counts_are_persisted(persist: bool) -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with open_store(fs, index, first=True, persist=persist) as broker:
        with broker.session() as s:
            s.send("a", Message(b"m0"))
            before = records(broker)
            d = s.create_consumer("q").receive(1)
            assert d is not None and d.delivery_count == 1 and not d.redelivered
            assert records(broker) == before + (1 if persist else 0)
            d.ack()
            assert broker.queue_info("q").message_count == 0


@pytest.mark.parametrize("persist", [True, False])
def test_after_a_crash_an_open_delivery_is_back_with_the_count_of_its_last_return(
        persist: bool) -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    broker = open_store(fs, index, first=True, persist=persist)
    s = broker.session()
    s.send_many("a", [Message(b"m0"), Message(b"m1")])
    c = s.create_consumer("q")
    first = c.receive(1)
    assert first is not None and first.message.body == b"m0"
    first.release()  # back unsettled: its count (1) is journaled either way
    got = c.receive_many(2, 1)
    assert [(d.message.body, d.delivery_count) for d in got] == [(b"m0", 2), (b"m1", 1)]
    crashed = fs.crash(0), index.crash(random.Random(5))
    broker.close()
    with open_store(*crashed, persist=persist) as again:
        # counted: the deliveries themselves; not counted: only the return of m0
        assert browse(again) == ([(b"m0", 2), (b"m1", 1)] if persist else
                                 [(b"m0", 1), (b"m1", 0)])
        got = again.session().create_consumer("q").receive_many(2, 1)
        # m1 was seen once: only a persisted count flags it redelivered after the crash
        assert [(d.message.body, d.delivery_count, d.redelivered) for d in got] == \
            [(b"m0", 3 if persist else 2, True), (b"m1", 2 if persist else 1, persist)]


def test_an_ack_after_an_unjournaled_delivery_is_durable_and_reclaims_the_message() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    broker = open_store(fs, index, first=True)
    with broker.session(block_on_acknowledge=True) as s:  # (durable once ack_many returns)
        s.send_many("a", [Message(b"m%d" % i) for i in range(3)])
        c = s.create_consumer("q")
        s.ack_many(c.receive_many(2, 1))
    crashed = fs.crash(0), index.crash(random.Random(6))
    broker.close()
    with open_store(*crashed) as again:
        assert browse(again) == [(b"m2", 0)]


@pytest.mark.parametrize("persist", [True, False])
def test_a_message_not_yet_durable_is_handed_out_only_once_it_is(persist: bool) -> None:
    """A consumer waiting in receive is given a message while its send is still inside the
    lock, before the send's fdatasync: the receive must still wait for that fdatasync (here
    slowed down to 0.3 s) before it returns. With the option off it waits for the send's own
    write and journals no DELIVERY record."""
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with open_store(fs, index, first=True, persist=persist) as broker:
        before = records(broker)
        d, durable_then, message_lsn = received_while_sent(broker, fs, Message(b"fresh"))
        assert d is not None and d.message.body == b"fresh"
        assert durable_then >= message_lsn  # durable before the receive returned
        assert records(broker) == before + (2 if persist else 1)


@pytest.mark.parametrize("bad", [0, "no", 1.0])
def test_a_flag_that_is_not_a_bool_is_refused_before_the_directory_is_touched(
        tmp_path, bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        Broker.open(str(tmp_path / "s"),
                    persist_delivery_count_before_delivery=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("name, text", [
    ("broker.xml", "<core><persist-delivery-count-before-delivery>false"
                   "</persist-delivery-count-before-delivery></core>"),
    ("mqstore.toml", "persist-delivery-count-before-delivery = false\n")])
def test_the_configuration_file_says_it_and_the_arguments_must_agree(
        tmp_path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with Broker.open(str(tmp_path / "s"), config=str(path)) as broker:
        broker.create_address("a")
        broker.create_queue(QueueConfig("q", "a"))
        with broker.session() as s:
            s.send("a", Message(b"m0"))
            before = records(broker)
            assert s.create_consumer("q").receive(1) is not None
            assert records(broker) == before  # no DELIVERY record: the file's false applies
    with pytest.raises(InvalidArgumentError, match="persist_delivery_count_before_delivery"):
        Broker.open(str(tmp_path / "s"), config=str(path),
                    persist_delivery_count_before_delivery=True)


def test_a_last_value_replacement_in_place_is_handed_out_only_once_durable() -> None:
    """On a Qpid last-value queue a durable message that replaces a non-durable one takes its
    place and order key, whose LSN is older than the new message's record: that key must not
    pass for proof that the record is durable."""
    from mqstore.engine.model import QPID_LVQ_KEY, QpidLvq
    fs, index = SimulatedFileSystem(), MemoryIndex()
    with Broker.open("/s", fs=fs, index=index,
                     persist_delivery_count_before_delivery=False) as broker:
        broker.create_address("a")
        broker.create_queue(QueueConfig("q", "a", qpid_lvq=QpidLvq.LVQ))
        with broker.session() as s:
            s.send("a", Message(b"old", {QPID_LVQ_KEY: "k", "v": 1}, durable=False))
            s.send("a", Message(b"x"))  # the durable LSN moves past the old one's key
        d, durable_then, message_lsn = received_while_sent(
            broker, fs, Message(b"new", {QPID_LVQ_KEY: "k", "v": 2}), "v = 2")  # not "old"
        assert d is not None and d.message.body == b"new"
        assert durable_then >= message_lsn  # durable before the receive returned
