"""Simulated power loss under the broker, through the journal's file-system seam.

A producer/consumer workload runs on a ``SimulatedFileSystem``; crash states are taken between
operations and inside them (the file system's hook, right before its operations: writes,
fdatasyncs, renames, unlinks), each with all unsynced data lost, a prefix kept, or the last write
torn; the index is kept or lost. Half the workloads run with an address that pages. Every state
must reopen and satisfy ``crashcheck.check_store``.

A third of the workloads ack without waiting (``block_on_acknowledge=False``): an ack that
returned is only "maybe" until a later durable send returns (journal order makes it durable by
then); in between a crash may bring the message back, flagged redelivered, never lose it. The
journal's writer then takes crash states while the workload runs on, so what it observed is
read under a lock.

A fifth of the workloads do not persist delivery counts before delivery
(``persist_delivery_count_before_delivery=False``): a crash may then bring a message back with
its count one below what the last receive returned, never lower, and never lose it.

A quarter of the workloads' consumers prefetch (``prefetch=3``): references in delivery that
no receive returned yet, which a crash must bring back (redelivered), never lose.

A third of the workloads send some batches while a receive waits on another thread, with a
crash state at every fdatasync of that send (the disk slowed down there): the waiting receive
is handed the message inside the send, and must not return before it is durable, so every
message a receive returned is still there after any crash unless its ack was asked for.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Dict, List, Set, Tuple

from tests.waiting import PATIENCE, receivers_waiting
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
        self.acking: Set[int] = set()  # every number whose ack was asked for


def verify(fs: SimulatedFileSystem, index: MemoryIndex, obs: Observed, persist: bool) -> None:
    """``persist``: delivery counts were journaled before delivery; else a message's count may
    be one below the last one a receive returned (that delivery was not journaled)."""
    had_index = index.entries("meta") > 0  # (a crash may leave the last commit, or none)
    broker = Broker.open("/s", fs=fs, journal_options=OPTS, index=index, checkpoint_records=25)
    delivered = obs.delivered if persist else {k: n - 1 for k, n in obs.delivered.items()}
    try:
        # the last commit is always usable: reclaim and compaction never outrun it
        assert not had_index or broker.recovery_report.index == "used", \
            broker.recovery_report.index
        check_store(broker, "q", obs.sent, obs.acked, delivered, obs.maybe, obs.acking)
    finally:
        broker.close()


def run(seed: int, steps: int) -> int:
    """One workload; on odd seeds with the smallest RAM budget and an address that pages after
    two messages (paged messages and DEPAGE records in the crash states)."""
    rng = random.Random(seed)  # the workload's steps: the same for a seed in every run
    crashes = random.Random(-1 - seed)  # the crash states' draws (in whichever thread does
    # the file operation: their order follows the threads' timing, the workload's does not)
    fs, index = SimulatedFileSystem(), MemoryIndex()
    paging = {"memory_budget": 4096,
              "address_settings": {"a": AddressSettings(max_size_messages=2)}} if seed % 2 else {}
    persist = seed % 5 != 4
    broker = Broker.open("/s", fs=fs, journal_options=OPTS, index=index, checkpoint_records=25,
                         persist_delivery_count_before_delivery=persist, **paging)
    broker.create_address("a", {RoutingType.ANYCAST})
    broker.create_queue(QueueConfig("q", "a"))
    obs = Observed()
    seen = threading.Lock()  # obs, read by crash states the writer thread may take
    blocking = seed % 3 != 2
    unconfirmed: Set[int] = set()  # acks returned without a wait, not yet covered by one
    states: List[Tuple[SimulatedFileSystem, MemoryIndex, Observed]] = []

    def snapshot() -> Observed:
        o = Observed()
        with seen:
            o.sent, o.acked = list(obs.sent), set(obs.acked)
            o.delivered, o.maybe = dict(obs.delivered), set(obs.maybe)
            o.acking = set(obs.acking)
        return o

    waiting = threading.Event()  # a receive waits on another thread while a send goes

    def hook(op: str) -> None:
        if waiting.is_set() and op == "fdatasync":
            time.sleep(0.005)  # a slow disk: a receive that did not wait would be back by now
        with seen:
            draw = crashes.random()
            n = fs.unsynced_count()
            keep = crashes.choice([0, n, crashes.randrange(0, n + 1)])
            tear = crashes.choice([None, "sector", "garbage"])
            crash_rng = random.Random(crashes.random())
        if draw < 0.08 or (waiting.is_set() and op == "fdatasync"):
            states.append((fs.crash(keep, tear, crash_rng), index.crash(crash_rng),
                           snapshot()))

    fs.hook = hook
    session = broker.session(block_on_acknowledge=blocking)
    # a quarter of the workloads prefetch: messages in delivery the workload never received
    consumer = session.create_consumer("q", prefetch=3 if seed % 4 == 3 else 0)
    held = []
    n = 0
    checked = paged_steps = 0
    def send(batch: List[int]) -> None:
        with seen:
            obs.maybe.update(batch)
            covered = set(unconfirmed)
        session.send_many("a", [Message(b"%d" % k) for k in batch])
        with seen:  # the send's wait covers every ack returned before it
            obs.sent.extend(batch)
            obs.maybe.difference_update(set(batch) | covered)
            obs.acked |= covered
            unconfirmed.difference_update(covered)

    def receive(timeout: float) -> bool:
        d = consumer.receive(timeout)
        if d is not None:
            k = int(d.message.body)
            with seen:
                obs.delivered[k] = d.delivery_count
            held.append((k, d))
        return d is not None

    for _ in range(steps):
        r = rng.random()
        if r < 0.45:
            batch = [n + i for i in range(rng.randrange(1, 4))]
            n += len(batch)
            if seed % 3 == 1 and rng.random() < 0.2:  # to a consumer waiting meanwhile
                while receive(0):
                    pass  # it catches up, then waits
                t = threading.Thread(target=receive, args=(PATIENCE,))
                t.start()
                receivers_waiting(broker, "q")
                waiting.set()
                try:
                    send(batch)
                finally:
                    waiting.clear()
                t.join(PATIENCE)
            else:
                send(batch)
        elif r < 0.75:
            receive(0)
        elif r < 0.92 and held:
            k, d = held.pop(rng.randrange(len(held)))
            with seen:
                obs.maybe.add(k)
                obs.acking.add(k)
            d.ack()
            with seen:
                if blocking:
                    obs.acked.add(k)
                    obs.maybe.discard(k)
                else:
                    unconfirmed.add(k)
        elif r < 0.96:
            session.recover()
            held.clear()
        else:
            broker.compact(force=True)
        while states:
            with seen:
                state = states.pop()
            verify(*state, persist)
            checked += 1
        paged_steps += broker.address_info("a").paging
    fs.hook = None
    broker.close()
    checked += len(states)
    for state in states:  # taken by the writer after the last step
        verify(*state, persist)
    assert paged_steps > steps // 10 if paging else paged_steps == 0
    return checked


def test_power_loss_under_the_broker() -> None:
    total = 0
    seed = 0
    while total < STATES_TARGET:
        try:
            total += run(seed, 150)
        except Exception as exc:  # which workload: run(seed, 150) again to look at it
            raise AssertionError(f"workload seed {seed}: {exc!r}") from exc
        seed += 1
    assert total >= STATES_TARGET
