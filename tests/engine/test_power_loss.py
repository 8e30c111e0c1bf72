"""Simulated power loss under the broker, through the journal's file-system seam.

A producer/consumer workload runs on a ``SimulatedFileSystem``; crash states are taken between
operations and inside them (the file system's hook, right before its operations: writes,
fdatasyncs, renames, unlinks), each with all unsynced data lost, a prefix kept, or the last write
torn; the index is kept or lost. Half the workloads run with an address that pages. Every state
must reopen and satisfy ``crashcheck.check_store``.
"""

from __future__ import annotations

import random
from typing import Dict, List, Set, Tuple

from mqstore.engine import AddressSettings, Broker, Message, QueueConfig, RoutingType
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex
from tests.engine.crashcheck import check_store

OPTS = JournalOptions(segment_size=4096, max_record_size=2048)
STATES_TARGET = 2000


class Observed:
    def __init__(self) -> None:
        self.sent: List[int] = []
        self.acked: Set[int] = set()
        self.delivered: Dict[int, int] = {}
        self.maybe: Set[int] = set()


def verify(fs: SimulatedFileSystem, index: MemoryIndex, obs: Observed) -> None:
    broker = Broker.open("/s", fs=fs, journal_options=OPTS, index=index, checkpoint_records=25)
    try:
        check_store(broker, "q", obs.sent, obs.acked, obs.delivered, obs.maybe)
    finally:
        broker.close()


def run(seed: int, steps: int) -> int:
    """One workload; on odd seeds with the smallest RAM budget and an address that pages after
    two messages (paged messages and DEPAGE records in the crash states)."""
    rng = random.Random(seed)
    fs, index = SimulatedFileSystem(), MemoryIndex()
    paging = {"memory_budget": 4096,
              "address_settings": {"a": AddressSettings(max_size_messages=2)}} if seed % 2 else {}
    broker = Broker.open("/s", fs=fs, journal_options=OPTS, index=index, checkpoint_records=25,
                         **paging)
    broker.create_address("a", {RoutingType.ANYCAST})
    broker.create_queue(QueueConfig("q", "a"))
    obs = Observed()
    states: List[Tuple[SimulatedFileSystem, MemoryIndex, Observed]] = []

    def snapshot() -> Observed:
        o = Observed()
        o.sent, o.acked = list(obs.sent), set(obs.acked)
        o.delivered, o.maybe = dict(obs.delivered), set(obs.maybe)
        return o

    def hook(op: str) -> None:
        if rng.random() < 0.08:
            n = fs.unsynced_count()
            keep = rng.choice([0, n, rng.randrange(0, n + 1)])
            states.append((fs.crash(keep, rng.choice([None, "sector", "garbage"]), rng),
                           index.crash(rng), snapshot()))

    fs.hook = hook
    session = broker.session()
    consumer = session.create_consumer("q")
    held = []
    n = 0
    checked = paged_steps = 0
    for _ in range(steps):
        r = rng.random()
        if r < 0.45:
            batch = [n + i for i in range(rng.randrange(1, 4))]
            n += len(batch)
            obs.maybe.update(batch)
            session.send_many("a", [Message(b"%d" % k) for k in batch])
            obs.sent.extend(batch)
            obs.maybe.difference_update(batch)
        elif r < 0.75:
            d = consumer.receive_nowait()
            if d is not None:
                k = int(d.message.body)
                obs.delivered[k] = d.delivery_count
                held.append((k, d))
        elif r < 0.92 and held:
            k, d = held.pop(rng.randrange(len(held)))
            obs.maybe.add(k)
            d.ack()
            obs.acked.add(k)
            obs.maybe.discard(k)
        elif r < 0.96:
            session.recover()
            held.clear()
        else:
            broker.compact(force=True)
        while states:
            verify(*states.pop())
            checked += 1
        paged_steps += broker.address_info("a").paging
    fs.hook = None
    broker.close()
    assert paged_steps > steps // 10 if paging else paged_steps == 0
    return checked


def test_power_loss_under_the_broker() -> None:
    total = 0
    seed = 0
    while total < STATES_TARGET:
        total += run(seed, 150)
        seed += 1
    assert total >= STATES_TARGET
