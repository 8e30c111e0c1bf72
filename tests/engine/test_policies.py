"""Queue policies I: the examples of seeds 000/001 (ring queues) and 004 §4.9 (last-value and
non-destructive queues), §4.17 (address settings and wildcards), §4.18 (auto-create/delete),
dead letters and expiry with an injected clock."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

from mqstore.engine import (AddressNotFoundError, Broker, Message, QueueConfig, QueueNotFoundError,
                            RoutingType)
from mqstore.engine.config.settings import AddressSettings
from mqstore.engine.addressing.wildcards import WildcardSyntax
from mqstore.journal import JournalOptions

OPTS = JournalOptions(segment_size=64 * 1024)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def open_broker(d: Path, **kw) -> Broker:
    return Broker.open(str(d / "s"), journal_options=OPTS, expiry_scan_ms=0, **kw)


@pytest.fixture
def broker(tmp_path: Path):
    b = open_broker(tmp_path)
    yield b
    b.close()


def bodies(b: Broker, queue: str) -> List[str]:
    with b.session() as s:
        return [m.message.body.decode() for m in s.create_browser(queue)]


def send(b: Broker, dest: str, *texts: str, **props) -> None:
    with b.session() as s:
        for t in texts:
            s.send(dest, Message(t, dict(props)))


def ring(b: Broker, name: str = "foo", size: int = 3) -> None:
    b.create_address(name)
    b.create_queue(QueueConfig(name, name, ring_size=size))


# -- ring queues (seed 000_721345e89d5d1b64.txt / 001) ------------------------------------------
def test_ring_keeps_the_last_ring_size_messages(broker: Broker) -> None:
    ring(broker)
    send(broker, "foo", "A", "B", "C")
    assert bodies(broker, "foo") == ["A", "B", "C"]
    send(broker, "foo", "D")
    assert bodies(broker, "foo") == ["B", "C", "D"]
    info = broker.queue_info("foo")
    assert info.ring_size == 3 and info.message_count == 3
    assert (info.messages_replaced, info.messages_killed) == (1, 0)  # Artemis: REPLACED


def test_default_ring_size_from_address_settings(tmp_path: Path) -> None:
    b = open_broker(tmp_path, address_settings={"ring.#": AddressSettings(default_ring_size=3)})
    try:
        b.create_address("ring.orders")
        b.create_queue(QueueConfig("ring.orders", "ring.orders"))
        b.create_address("plain")
        b.create_queue(QueueConfig("plain", "plain"))
        assert b.queue_info("ring.orders").ring_size == 3
        assert b.queue_info("plain").ring_size == -1  # default-ring-size -1: no limit
    finally:
        b.close()


def test_lowering_ring_size_deletes_nothing_eagerly(broker: Broker) -> None:
    ring(broker, size=5)
    send(broker, "foo", "1", "2", "3", "4", "5")
    broker.set_ring_size("foo", 3)
    assert bodies(broker, "foo") == ["1", "2", "3", "4", "5"]
    send(broker, "foo", "6")  # the queue does not grow
    assert bodies(broker, "foo") == ["2", "3", "4", "5", "6"]
    with broker.session() as s:
        c = s.create_consumer("foo")
        c.receive(1).ack()
        c.receive(1).ack()
    send(broker, "foo", "7")  # shrinks by consumption, then holds the new size
    assert bodies(broker, "foo") == ["5", "6", "7"]


def test_messages_in_delivery_are_never_removed_and_rollback_keeps_the_tail(
        broker: Broker) -> None:
    ring(broker)
    with broker.session() as s:
        c = s.create_consumer("foo")
        for name in "ABCD":
            s.send("foo", Message(name))
            assert c.receive(1).message.body.decode() == name
        info = broker.queue_info("foo")
        assert (info.message_count, info.delivering_count) == (4, 4)  # over the ring size
        c.close()  # cancelled back to the head in reverse order: A is the last one added
    assert bodies(broker, "foo") == ["B", "C", "D"]


def test_transaction_rollback_is_treated_the_same(broker: Broker) -> None:
    ring(broker)
    send(broker, "foo", "A", "B", "C", "D")
    assert bodies(broker, "foo") == ["B", "C", "D"]
    with broker.session(transacted=True) as t:
        c = t.create_consumer("foo")
        got = [c.receive(1) for _ in range(3)]
        t.send("foo", Message("E"))
        t.commit()  # E arrives while B, C, D are in delivery: ring counts only ready ones
        assert bodies(broker, "foo") == ["E"]
        for d in got:
            d.ack()
        t.rollback()  # B, C, D back to the head before E: the ring keeps C, D, E
    assert bodies(broker, "foo") == ["C", "D", "E"]


def test_ring_state_and_size_change_survive_reopen(tmp_path: Path) -> None:
    b = open_broker(tmp_path)
    ring(b, size=4)
    send(b, "foo", *"ABCDEF")
    b.set_ring_size("foo", 2)
    b.close()
    b = open_broker(tmp_path)
    try:
        assert b.queue_info("foo").ring_size == 2
        assert bodies(b, "foo") == ["C", "D", "E", "F"]  # nothing re-decided at recovery
        send(b, "foo", "G")
        assert bodies(b, "foo") == ["D", "E", "F", "G"]
    finally:
        b.close()


# -- last-value and non-destructive queues (seed 004 §4.9) --------------------------------------
def test_last_value_queue_example(broker: Broker) -> None:
    broker.create_address("my.address", {RoutingType.MULTICAST})
    broker.create_queue(QueueConfig("prices1", "my.address", RoutingType.MULTICAST,
                                    last_value_key="stock_ticker"))
    with broker.session() as s:
        s.send("my.address", Message("First message with last value property set",
                                     {"stock_ticker": "36.83"}))
        s.send("my.address", Message("Second message with last value property set",
                                     {"stock_ticker": "36.83"}))
        s.send("my.address", Message("no key"))
        s.send("my.address", Message("no key either"))
        got = s.create_consumer("prices1").receive(5)
        assert got.message.body.decode() == "Second message with last value property set"
        got.ack()
    assert bodies(broker, "prices1") == ["no key", "no key either"]  # never replaced
    info = broker.queue_info("prices1")
    assert info.last_value_key == "stock_ticker"
    assert (info.messages_replaced, info.messages_killed, info.messages_acknowledged) == (1, 0, 1)


def test_last_value_true_uses_the_default_key(broker: Broker) -> None:
    broker.create_address("p")
    broker.create_queue(QueueConfig("p", "p", last_value=True))
    assert broker.queue_info("p").last_value_key == "_AMQ_LVQ_NAME"
    with broker.session() as s:
        s.send("p", Message("1", {"_AMQ_LVQ_NAME": "x"}))
        s.send("p", Message("2", {"_AMQ_LVQ_NAME": "x"}))
        s.send("p", Message("3", {"other": "x"}))
    assert bodies(broker, "p") == ["2", "3"]


def test_last_value_defaults_from_wildcard_settings(tmp_path: Path) -> None:
    b = open_broker(tmp_path, address_settings={
        "lastValueQueue": AddressSettings(default_last_value_key="stock_ticker",
                                          default_non_destructive=True),
        "lvq.#": AddressSettings(default_last_value_queue=True)})
    try:
        b.create_address("lastValueQueue")
        b.create_queue(QueueConfig("lastValueQueue", "lastValueQueue"))
        b.create_address("lvq.a")
        b.create_queue(QueueConfig("lvq.a", "lvq.a"))
        info = b.queue_info("lastValueQueue")
        assert info.last_value_key == "stock_ticker" and info.non_destructive
        assert b.queue_info("lvq.a").last_value_key == "_AMQ_LVQ_NAME"
    finally:
        b.close()


def test_non_destructive_consumers_leave_messages(broker: Broker) -> None:
    broker.create_address("nd")
    broker.create_queue(QueueConfig("nd", "nd", non_destructive=True))
    send(broker, "nd", "a", "b")
    with broker.session() as s:
        c1, c2 = s.create_consumer("nd"), s.create_consumer("nd")
        for c in (c1, c2):
            got = [c.receive(1), c.receive(1)]
            assert [d.message.body for d in got] == [b"a", b"b"]
            for d in got:
                d.ack()
            assert c.receive(0.05) is None  # each consumer has seen everything
    assert bodies(broker, "nd") == ["a", "b"]
    assert broker.queue_info("nd").message_count == 2


def test_non_destructive_deliveries_count_as_delivering(broker: Broker) -> None:
    """Issue 15: ``delivering_count`` includes what non-destructive consumers hold unacked
    (Artemis deliveringCount); the messages stay counted once in ``message_count``."""
    broker.create_address("nd")
    broker.create_queue(QueueConfig("nd", "nd", non_destructive=True))
    send(broker, "nd", "a", "b")
    with broker.session() as s:
        c1, c2 = s.create_consumer("nd"), s.create_consumer("nd")
        held = [c1.receive(1), c1.receive(1), c2.receive(1)]
        info = broker.queue_info("nd")
        assert (info.message_count, info.delivering_count) == (2, 3)
        held[0].ack()
        assert broker.queue_info("nd").delivering_count == 2
        c1.close()
        assert broker.queue_info("nd").delivering_count == 1
    assert broker.queue_info("nd").delivering_count == 0


def test_non_destructive_last_value_holds_the_latest_value_per_key(tmp_path: Path) -> None:
    b = open_broker(tmp_path)
    b.create_address("my.address", {RoutingType.MULTICAST})
    b.create_queue(QueueConfig("orders1", "my.address", RoutingType.MULTICAST,
                               last_value_key="stock_ticker", non_destructive=True))
    with b.session() as s:
        for i, tick in enumerate(["A", "B", "A", "C", "B", "A"]):
            s.send("my.address", Message(f"{tick}{i}", {"stock_ticker": tick}))
        c = s.create_consumer("orders1")
        seen = [c.receive(1).message.body.decode() for _ in range(3)]
        assert seen == ["C3", "B4", "A5"]
    b.close()
    b = open_broker(tmp_path)
    try:
        assert bodies(b, "orders1") == ["C3", "B4", "A5"]
        send(b, "my.address", "C6", stock_ticker="C")
        assert bodies(b, "orders1") == ["B4", "A5", "C6"]  # the LVQ index was rebuilt
    finally:
        b.close()


# -- address settings (seed 004 §4.17) ------------------------------------------------------------
def test_settings_overlay_example(broker: Broker) -> None:
    broker.set_address_settings("my.*", AddressSettings(max_delivery_attempts=3,
                                                        default_last_value_queue=True))
    broker.set_address_settings("my.queue", AddressSettings(default_last_value_queue=False))
    got = broker.address_settings("my.queue")
    assert got.max_delivery_attempts == 3 and got.default_last_value_queue is False
    other = broker.address_settings("my.other")
    assert other.max_delivery_attempts == 3 and other.default_last_value_queue is True
    assert broker.address_settings("myqueue").max_delivery_attempts == 10  # whole words only


def test_literal_beats_star_beats_hash(broker: Broker) -> None:
    broker.set_address_settings("#", AddressSettings(expiry_delay=1))
    broker.set_address_settings("news.#", AddressSettings(expiry_delay=2))
    broker.set_address_settings("news.*", AddressSettings(expiry_delay=3))
    broker.set_address_settings("news.europe", AddressSettings(expiry_delay=4))
    assert broker.address_settings("news.europe").expiry_delay == 4
    assert broker.address_settings("news.usa").expiry_delay == 3
    assert broker.address_settings("news.europe.sport").expiry_delay == 2
    assert broker.address_settings("sport").expiry_delay == 1


def test_custom_wildcard_syntax_and_settings_survive_reopen(tmp_path: Path) -> None:
    syntax = WildcardSyntax(delimiter=",", any_words="@", single_word="$")
    b = open_broker(tmp_path, wildcard_syntax=syntax,
                    address_settings={"news,@": AddressSettings(max_delivery_attempts=7)})
    b.set_address_settings("news,$,sport", AddressSettings(max_delivery_attempts=2))
    b.close()
    b = open_broker(tmp_path, wildcard_syntax=syntax)
    try:
        assert b.address_settings("news,europe").max_delivery_attempts == 7
        assert b.address_settings("news,usa,sport").max_delivery_attempts == 2
        b.remove_address_settings("news,$,sport")
        assert b.address_settings("news,usa,sport").max_delivery_attempts == 7
    finally:
        b.close()
    b = open_broker(tmp_path, wildcard_syntax=syntax)
    try:
        assert b.address_settings("news,usa,sport").max_delivery_attempts == 7
    finally:
        b.close()


# -- auto-create and auto-delete (seed 004 §4.18) --------------------------------------------------
def test_auto_create_and_delete(tmp_path: Path) -> None:
    b = open_broker(tmp_path, address_settings={"activemq.#": AddressSettings(
        auto_create_addresses=True, auto_delete_addresses=True, auto_create_queues=True,
        auto_delete_queues=True, default_address_routing_type=RoutingType.ANYCAST)})
    try:
        send(b, "activemq.orders", "o1")
        assert b.queue_info("activemq.orders").auto_created
        assert b.address_info("activemq.orders").routing_types == (RoutingType.ANYCAST,)
        with b.session() as s:
            c = s.create_consumer("activemq.orders")
            c.receive(1).ack()
            c.close()  # no consumers and no messages: deleted, and then its address
        assert "activemq.orders" not in b.queue_names()
        assert "activemq.orders" not in b.address_names()
        with b.session() as s:
            s.create_consumer("activemq.new")  # consuming creates too
            assert "activemq.new" in b.queue_names()
        with pytest.raises(AddressNotFoundError):  # outside the setting: strict
            send(b, "elsewhere", "x")
        with b.session() as s, pytest.raises(QueueNotFoundError):
            s.create_consumer("elsewhere")
    finally:
        b.close()


def test_an_auto_created_queue_whose_last_message_expires_is_deleted(tmp_path: Path) -> None:
    """Seed 004 §4.18: deleted once it has no consumers and no messages, however the last
    message left (issue 11, defect 13)."""
    clock = Clock()
    b = open_broker(tmp_path, clock=clock, address_settings={"auto.#": AddressSettings(
        auto_create_addresses=True, auto_delete_addresses=True, auto_create_queues=True,
        auto_delete_queues=True, default_address_routing_type=RoutingType.ANYCAST)})
    try:
        with b.session() as s:
            s.send("auto.jobs", Message(b"j", expiration=clock.now + 1000))
        assert "auto.jobs" in b.queue_names()
        clock.now += 2000
        assert b.expire_messages() == 1
        assert "auto.jobs" not in b.queue_names()
        assert "auto.jobs" not in b.address_names()
    finally:
        b.close()


# -- dead letters and expiry (seed 004 §4.9.6.4, §4.17) -------------------------------------------
def test_max_delivery_attempts_moves_to_dead_letter_address(broker: Broker) -> None:
    broker.create_address("DLA")
    broker.create_queue(QueueConfig("DLQ", "DLA"))
    broker.set_address_settings("orders", AddressSettings(max_delivery_attempts=2,
                                                          dead_letter_address="DLA"))
    broker.create_address("orders")
    broker.create_queue(QueueConfig("orders", "orders"))
    send(broker, "orders", "poison")
    with broker.session() as s:
        for _ in range(2):
            c = s.create_consumer("orders")
            assert c.receive(1).message.body == b"poison"
            c.close()
        assert s.create_consumer("orders").receive(0.05) is None
        dead = s.create_consumer("DLQ").receive(1)
        assert dead.message.body == b"poison"
        assert dead.message.properties["_AMQ_ORIG_ADDRESS"] == "orders"
        assert dead.message.properties["_AMQ_ORIG_QUEUE"] == "orders"
    assert broker.queue_info("orders").messages_killed == 1


def test_without_dead_letter_address_messages_are_dropped_and_counted(broker: Broker) -> None:
    broker.set_address_settings("q", AddressSettings(max_delivery_attempts=1))
    broker.create_address("q")
    broker.create_queue(QueueConfig("q", "q"))
    send(broker, "q", "x", "y")
    with broker.session() as s:
        c = s.create_consumer("q")
        c.receive(1)
        c.close()
        c = s.create_consumer("q")
        c.receive(1).reject()
    info = broker.queue_info("q")
    assert info.message_count == 0 and info.messages_killed == 2


def test_expiry_with_an_injected_clock(tmp_path: Path) -> None:
    clock = Clock()
    b = open_broker(tmp_path, clock=clock, address_settings={
        "exp.#": AddressSettings(expiry_address="expired", expiry_delay=1000)})
    b.create_address("expired")
    b.create_queue(QueueConfig("expired", "expired"))
    b.create_address("exp.q")
    b.create_queue(QueueConfig("exp.q", "exp.q"))
    with b.session() as s:
        s.send("exp.q", Message("delayed"))                           # gets now + 1000
        s.send("exp.q", Message("own", expiration=clock.now + 5000))  # keeps its own
    b.close()
    b = open_broker(tmp_path, clock=clock)
    try:
        clock.now += 1500
        with b.session() as s:
            d = s.create_consumer("exp.q").receive(0.05)
            assert d.message.body == b"own"  # "delayed" expired on the way
            d.ack()
        assert bodies(b, "expired") == ["delayed"]
        send(b, "exp.q", "late")
        clock.now += 2000
        assert b.expire_messages() == 1
        assert bodies(b, "expired") == ["delayed", "late"]
        assert b.queue_info("exp.q").messages_expired == 2
    finally:
        b.close()


def test_expired_without_expiry_address_is_dropped_and_counted(tmp_path: Path) -> None:
    clock = Clock()
    b = open_broker(tmp_path, clock=clock)
    try:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        with b.session() as s:
            s.send("q", Message("soon", expiration=clock.now + 10))
            s.send("q", Message("never"))
        clock.now += 11
        assert b.expire_messages() == 1
        assert bodies(b, "q") == ["never"]
        assert b.queue_info("q").messages_expired == 1
    finally:
        b.close()


def test_a_decision_made_by_a_rollback_is_durable_when_it_returns() -> None:
    """Found by the model test: a rollback put a message back into a ring of size 0, the ring
    evicted it, and a power cut right after brought it back because rollback() had not waited
    for the eviction's record."""
    from mqstore.journal import SimulatedFileSystem
    from mqstore.recovery import MemoryIndex
    fs, index = SimulatedFileSystem(), MemoryIndex()
    b = Broker.open("/s", fs=fs, index=index, journal_options=OPTS, expiry_scan_ms=0)
    b.create_address("r")
    b.create_queue(QueueConfig("ring", "r", ring_size=3))
    with b.session() as s:
        s.send("r", Message("r1"))
    t = b.session(transacted=True)
    t.create_consumer("ring").receive(1)
    b.set_ring_size("ring", 0)
    t.rollback()  # r1 goes back to the head and is evicted at once
    assert bodies(b, "ring") == []
    crashed = Broker.open("/s", fs=fs.crash(keep=0), index=index.crash(__import__("random")
                                                                       .Random(1)),
                          journal_options=OPTS, expiry_scan_ms=0)
    try:
        assert bodies(crashed, "ring") == []
    finally:
        crashed.close()
    b.close()


@pytest.mark.parametrize("ending", ["close", "kill"])
def test_last_value_state_is_the_same_after_a_crash_as_after_a_close(tmp_path: Path,
                                                                     ending: str) -> None:
    """v1 in delivery, v2 with the same key arrives: reopening ends the delivery as a cancel
    does, so the queue holds [v2] whether the store was closed or killed (issue 11, defect 9)."""
    d = tmp_path / "s"
    b = open_broker(d)
    b.create_address("lvq")
    b.create_queue(QueueConfig("lvq", "lvq", last_value_key="k"))
    s = b.session()
    s.send("lvq", Message(b"v1", {"k": "a"}))
    got = s.create_consumer("lvq").receive(1)
    assert got.message.body == b"v1"
    s.send("lvq", Message(b"v2", {"k": "a"}))
    if ending == "close":
        b.close()
    else:
        b._opened.release()  # what kill -9 leaves: no cancel, no checkpoint
    for _ in range(2):  # and the decision holds at the next open too
        b2 = open_broker(d)
        try:
            assert bodies(b2, "lvq") == ["v2"]
            assert b2.queue_info("lvq").message_count == 1
        finally:
            b2.close()


@pytest.mark.parametrize("ending", ["close", "kill"])
def test_a_ring_ends_its_deliveries_the_same_after_a_crash(tmp_path: Path, ending: str) -> None:
    """Ring size 2: A in delivery, then C joins B. Whether the store is closed (A cancelled)
    or killed, A comes back with no room and goes: [B, C] (seed 000: "keep B, C & D and
    delete A"). (Delivery counts persisted before delivery: after a kill A comes back counted.)"""
    b = open_broker(tmp_path, persist_delivery_count_before_delivery=True)
    ring(b, "r", 2)
    send(b, "r", "A", "B")
    s = b.session()
    assert s.create_consumer("r").receive(1).message.body == b"A"
    send(b, "r", "C")
    b.close() if ending == "close" else b._opened.release()
    for _ in range(2):
        b2 = open_broker(tmp_path, persist_delivery_count_before_delivery=True)
        try:
            assert bodies(b2, "r") == ["B", "C"]
        finally:
            b2.close()


def test_by_default_a_kill_leaves_a_ring_over_its_size_until_the_next_send(tmp_path: Path
                                                                          ) -> None:
    """Artemis's defaults (no delivery journaled before hand-out): after a kill, A, which was in
    delivery when C joined, is an ordinary queued message again, so the ring holds 3 of 2, as
    after a ring-size reduction (seed 000: the queue is not trimmed at once); the next send
    trims it from the head and it grows no more."""
    b = open_broker(tmp_path)
    ring(b, "r", 2)
    send(b, "r", "A", "B")
    s = b.session()
    assert s.create_consumer("r").receive(1).message.body == b"A"
    send(b, "r", "C")
    b._opened.release()
    b2 = open_broker(tmp_path)
    try:
        assert bodies(b2, "r") == ["A", "B", "C"]
        send(b2, "r", "D")
        assert bodies(b2, "r") == ["B", "C", "D"]
    finally:
        b2.close()


@pytest.mark.parametrize("ending", ["close", "kill"])
def test_max_delivery_attempts_apply_the_same_after_a_crash(tmp_path: Path, ending: str) -> None:
    """With delivery counts persisted before delivery, a delivery cut short by a kill counts as
    the one a close ends (Artemis: without it, the count of the last return)."""
    b = open_broker(tmp_path, persist_delivery_count_before_delivery=True)
    b.create_address("DLA")
    b.create_queue(QueueConfig("DLQ", "DLA"))
    b.create_address("jobs")
    b.create_queue(QueueConfig("jobs", "jobs"))
    b.set_address_settings("jobs", AddressSettings(max_delivery_attempts=1,
                                                   dead_letter_address="DLA"))
    send(b, "jobs", "j1", "j2")
    s = b.session()
    assert s.create_consumer("jobs").receive(1).message.body == b"j1"
    b.close() if ending == "close" else b._opened.release()
    b2 = open_broker(tmp_path, persist_delivery_count_before_delivery=True)
    try:
        assert bodies(b2, "jobs") == ["j2"] and bodies(b2, "DLQ") == ["j1"]
    finally:
        b2.close()
