"""Retroactive addresses (issue 15; seed 004 §4.14): ``retroactive_message_count`` keeps the
last N messages sent to an address in an internal ring queue, visible and purgeable through
management; a queue created later receives them first, in order; lowering the count follows
the ring-size rule; everything survives a restart and a crash."""

from __future__ import annotations

import random
from pathlib import Path
from typing import List, Tuple

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from mqstore.engine import (AddressSettings, Broker, InvalidArgumentError, Message, QueueConfig,
                            RoutingType)
from mqstore.journal import SimulatedFileSystem
from mqstore.recovery import MemoryIndex
from tests.engine.crashcheck import StoreMachine, model_settings

RING = "$.artemis.internal.retroactive.orders"


def bodies(b: Broker, queue: str) -> List[bytes]:
    with b.session() as s:
        return [m.message.body for m in s.create_browser(queue)]


def send(b: Broker, *items: bytes, address: str = "orders") -> None:
    with b.session() as s:
        for body in items:
            s.send(address, Message(body))


def test_a_later_queue_gets_the_last_messages_first(tmp_path: Path) -> None:
    settings = {"orders": AddressSettings(retroactive_message_count=3)}
    with Broker.open(str(tmp_path / "s"), address_settings=settings) as b:
        b.create_address("orders", {RoutingType.MULTICAST})
        send(b, b"1", b"2", b"3", b"4")  # no queue yet: only the ring keeps them
        assert b.queue_names() == [RING]
        info = b.queue_info(RING)
        assert (info.message_count, info.ring_size, info.messages_replaced) == (3, 3, 1)
        b.create_queue(QueueConfig("late", "orders", RoutingType.MULTICAST))
        send(b, b"5")
        assert bodies(b, "late") == [b"2", b"3", b"4", b"5"]
        b.create_queue(QueueConfig("later", "orders", RoutingType.MULTICAST))
        assert bodies(b, "later") == [b"3", b"4", b"5"]
        assert b.queue_info("later").messages_added == 3


def test_an_anycast_address_keeps_its_ring_out_of_the_round_robin(tmp_path: Path) -> None:
    settings = {"orders": AddressSettings(retroactive_message_count=5)}
    with Broker.open(str(tmp_path / "s"), address_settings=settings) as b:
        b.create_address("orders")  # anycast only
        b.create_queue(QueueConfig("q1", "orders"))
        b.create_queue(QueueConfig("q2", "orders"))
        send(b, b"a", b"b", b"c", b"d")
        assert (bodies(b, "q1"), bodies(b, "q2")) == ([b"a", b"c"], [b"b", b"d"])
        assert bodies(b, RING) == [b"a", b"b", b"c", b"d"]
        with b.session() as s:  # a consumer on the address binds to its first queue
            assert s.create_consumer("orders").receive(0).message.body == b"a"


def test_the_ring_is_managed_like_any_ring_queue(tmp_path: Path) -> None:
    """Purge it through management; lowering the count deletes nothing at once (seed 000's
    ring-size rule): the ring shrinks as new messages arrive."""
    with Broker.open(str(tmp_path / "s")) as b:
        b.create_address("orders", {RoutingType.MULTICAST})
        assert b.queue_names() == []
        b.set_address_settings("orders", AddressSettings(retroactive_message_count=4))
        send(b, b"1", b"2", b"3", b"4")
        b.set_address_settings("orders", AddressSettings(retroactive_message_count=2))
        assert b.queue_info(RING).ring_size == 2 and bodies(b, RING) == [b"1", b"2", b"3",
                                                                          b"4"]
        send(b, b"5")  # the ring does not grow: the oldest goes, the size stays above 2
        assert bodies(b, RING) == [b"2", b"3", b"4", b"5"]
        assert b.purge_queue(RING) == 4
        assert bodies(b, RING) == []
        send(b, b"6", b"7", b"8")
        assert bodies(b, RING) == [b"7", b"8"]
        with pytest.raises(InvalidArgumentError):
            AddressSettings(retroactive_message_count=-1).validated()


@pytest.mark.parametrize("lose_index", [False, True])
def test_the_ring_and_its_messages_survive_a_crash(lose_index: bool) -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    settings = {"orders": AddressSettings(retroactive_message_count=2)}
    b = Broker.open("/s", fs=fs, index=index, address_settings=settings)
    b.create_address("orders", {RoutingType.MULTICAST})
    send(b, b"1", b"2", b"3")
    crashed = fs.crash(keep=0)
    index = MemoryIndex() if lose_index else index.crash(random.Random(3))
    with Broker.open("/s", fs=crashed, index=index, address_settings=settings) as b2:
        assert bodies(b2, RING) == [b"2", b"3"]
        b2.create_queue(QueueConfig("late", "orders", RoutingType.MULTICAST))
        assert bodies(b2, "late") == [b"2", b"3"]


class RetroactiveMachine(StoreMachine):
    """The ring against a model: the last ``COUNT`` messages sent, durable or not; a crash
    keeps its durable ones (evictions are journaled); a queue created later starts with what
    the ring holds, in order."""

    COUNT = 3

    def __init__(self) -> None:
        super().__init__()
        self.broker.create_address("orders", {RoutingType.MULTICAST})
        self.broker.set_address_settings(
            "orders", AddressSettings(retroactive_message_count=self.COUNT))
        self.ring: List[Tuple[bytes, bool]] = []
        self.seq = 0

    @rule(durable=st.booleans())
    def send(self, durable: bool) -> None:
        self.seq += 1
        body = b"%d" % self.seq
        with self.broker.session() as s:
            s.send("orders", Message(body, durable=durable))
        self.ring = (self.ring + [(body, durable)])[-self.COUNT:]

    @rule()
    def late_queue(self) -> None:
        self.broker.create_queue(QueueConfig("late", "orders", RoutingType.MULTICAST))
        assert bodies(self.broker, "late") == [b for b, _d in self.ring]
        self.broker.delete_queue("late")

    @rule(keep_all=st.booleans(), seed=st.integers(0, 2**16), lose_index=st.booleans())
    def crash_and_reopen(self, keep_all: bool, seed: int, lose_index: bool) -> None:
        self.ring = [x for x in self.ring if x[1]]
        self.reopen_after_crash(keep_all, seed, lose_index)

    @invariant()
    def ring_matches(self) -> None:
        assert bodies(self.broker, RING) == [b for b, _d in self.ring]


RetroactiveMachine.TestCase.settings = model_settings(150, 40)
TestRetroactiveModel = RetroactiveMachine.TestCase
