"""Message priority (Artemis: a consumer gets the oldest message of the highest priority
present) against a small model, with crash-and-reopen.

Queue ``q`` receives messages of priorities 0, 4 and 9, durable or not, one at a time or in
batches. The model keeps the queue as a list in delivery order: a new message goes after
every message of its priority or higher; a released or cancelled one goes back to the head
of its priority (in the reverse order of consumption, so they come out again in the order
consumed). A purge (``purge_queue``) removes what no consumer holds. A crash keeps the
durable messages, the ones held come back, and the queue is in
key order again: by priority, then as sent. The paging variant has the smallest RAM budget,
so the queue keeps a head of two references and reads the rest back from the index in
priority order.
"""

from __future__ import annotations

import itertools
import random
from typing import Dict, List, Set, Tuple

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from engine import Broker, Message, QueueConfig
from journal import JournalOptions, SimulatedFileSystem
from recovery import MemoryIndex

OPTS = JournalOptions(segment_size=4096, max_record_size=2000)
PRIORITIES = st.sampled_from([0, 4, 4, 9])
Item = Tuple[int, int, bytes, bool]  # (seq, priority, body, durable)


def place(ready: List[Item], item: Item) -> None:
    """After every message of its priority or higher."""
    i = len(ready)
    while i > 0 and ready[i - 1][1] < item[1]:
        i -= 1
    ready.insert(i, item)


def put_back(ready: List[Item], item: Item) -> None:
    """At the head of its priority."""
    i = 0
    while i < len(ready) and ready[i][1] > item[1]:
        i += 1
    ready.insert(i, item)


class PriorityMachine(RuleBasedStateMachine):
    BUDGET = 64 << 20

    def __init__(self) -> None:
        super().__init__()
        self.fs, self.index = SimulatedFileSystem(), MemoryIndex()
        self.broker = self._open()
        self.broker.create_address("a")
        self.broker.create_queue(QueueConfig("q", "a"))
        self.ready: List[Item] = []
        self.held: List[Tuple[Item, object]] = []
        self.returned: Set[int] = set()  # seqs released or cancelled since the last reopen
        self.dc: Dict[int, int] = {}  # deliveries per seq (10: dropped when it comes back)
        self.seq = 0
        self._attach()

    EXACT = True  # returned messages at the head of their priority, exactly

    def _check(self, seen: List[bytes], expected: List[Item]) -> None:
        """``seen`` (bodies, in the broker's order) is ``expected``: exactly, or, when the
        queue reads lower priorities from the index (paging), a returned message may be back
        at its place in send order instead of at the head of its priority: then by priority,
        the same messages, and those never returned in the model's order."""
        want = [x[2] for x in expected]
        if self.EXACT:
            assert seen == want
            return
        by_body = {x[2]: x for x in expected}
        assert sorted(seen) == sorted(want)
        prios = [by_body[b][1] for b in seen]
        assert prios == sorted(prios, reverse=True), prios
        assert [b for b in seen if by_body[b][0] not in self.returned] == \
            [b for b in want if by_body[b][0] not in self.returned]

    def _open(self) -> Broker:
        return Broker.open("/s", fs=self.fs, index=self.index, journal_options=OPTS,
                           checkpoint_records=25, memory_budget=self.BUDGET)

    def _attach(self) -> None:
        self.session = self.broker.session()
        self.consumer = self.session.create_consumer("q", window=1000)

    def _item(self, priority: int, durable: bool) -> Item:
        self.seq += 1
        # bodies of ~150 bytes: a few dozen fill a segment, so compaction has work
        return (self.seq, priority, b"%d:" % self.seq + b"x" * 150, durable)

    @rule(priority=PRIORITIES, durable=st.booleans())
    def send(self, priority: int, durable: bool) -> None:
        item = self._item(priority, durable)
        self.session.send("a", Message(item[2], durable=durable, priority=priority))
        place(self.ready, item)

    @rule(priorities=st.lists(PRIORITIES, min_size=2, max_size=6), durable=st.booleans())
    def send_many(self, priorities: List[int], durable: bool) -> None:
        items = [self._item(p, durable) for p in priorities]
        self.session.send_many("a", [Message(i[2], durable=durable, priority=i[1])
                                     for i in items])
        for item in items:
            place(self.ready, item)

    @rule(n=st.integers(1, 3))
    def receive(self, n: int) -> None:
        got = self.consumer.receive_many(n, timeout=0)
        bodies = [d.message.body for d in got]
        assert len(got) == min(n, len(self.ready))
        rest = [x for x in self.ready if x[2] not in set(bodies)]
        self._check(bodies + [x[2] for x in rest], self.ready)  # a valid head of the queue
        by_body = {x[2]: x for x in self.ready}
        want = [by_body[b] for b in bodies]
        assert [d.message.priority for d in got] == [i[1] for i in want]
        self.ready = rest
        for item, d in zip(want, got):
            self.dc[item[0]] = self.dc.get(item[0], 0) + 1
            assert d.delivery_count == self.dc[item[0]]
        self.held += list(zip(want, got))
        if len({i[1] for i in want}) > 1:
            event("a receive crossed priorities")

    @rule(data=st.data(), release=st.booleans())
    def settle(self, data: st.DataObject, release: bool) -> None:
        if not self.held:
            return
        h = data.draw(st.sampled_from(self.held))
        self.held.remove(h)
        if release:
            h[1].release()  # type: ignore[attr-defined]
            self._put_back(h[0])
        else:
            h[1].ack()  # type: ignore[attr-defined]

    @rule()
    def recover(self) -> None:
        """Every delivery back to the head of its priority, in the order consumed."""
        for item, _d in reversed(self.held):
            self._put_back(item)
        self.held = []
        self.session.recover()

    def _put_back(self, item: Item) -> None:
        """Back to the head of its priority, or dropped after its tenth delivery (the default
        max_delivery_attempts, no dead-letter address)."""
        if self.dc.get(item[0], 0) >= 10:
            event("dropped after max delivery attempts")
            return
        put_back(self.ready, item)
        self.returned.add(item[0])

    @rule()
    def purge(self) -> None:
        """Everything no consumer holds goes; what consumers hold stays theirs."""
        assert self.broker.purge_queue("q") == len(self.ready)
        self.ready = []

    @rule()
    def checkpoint(self) -> None:
        self.broker.checkpoint()

    @rule()
    def compact(self) -> None:
        """Records rewritten keep their LSNs, so order keys (priority lanes) stay."""
        if self.broker.compact(force=True).compacted:
            event("compaction ran")

    @rule(keep_all=st.booleans(), seed=st.integers(0, 2**16), lose_index=st.booleans())
    def crash_and_reopen(self, keep_all: bool, seed: int, lose_index: bool) -> None:
        crashed = self.fs.crash(keep=self.fs.unsynced_count() if keep_all else 0)
        index = MemoryIndex() if lose_index else self.index.crash(random.Random(seed))
        back = [item for item, _d in self.held if self.dc.get(item[0], 0) < 10]  # (else
        kept = [x for x in self.ready + back if x[3]]  # dropped as their return is)
        self.ready = sorted(kept, key=lambda x: (-x[1], x[0]))
        self.held = []
        self.returned = set()  # a reopen reads the queue in key order again
        self.broker.close()
        self.fs, self.index = crashed, index
        self.broker = self._open()
        self._attach()

    @invariant()
    def queue_matches(self) -> None:
        info = self.broker.queue_info("q")
        assert (info.message_count, info.delivering_count) == \
            (len(self.ready) + len(self.held), len(self.held))
        with self.broker.session() as s:
            seen = list(itertools.islice((m.message.body for m in s.create_browser("q")),
                                         len(self.ready) + 1))
        self._check(seen, self.ready)


class PagingPriorityMachine(PriorityMachine):
    """The smallest RAM budget: a head of two references, the rest read from the index."""

    BUDGET = 4096
    EXACT = False

    @invariant()
    def pages(self) -> None:
        if self.broker.statistics().memory.paged_in:
            event("paged in")


for machine in (PriorityMachine, PagingPriorityMachine):
    machine.TestCase.settings = settings(
        max_examples=300, stateful_step_count=50, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestPriorityModel = PriorityMachine.TestCase
TestPagingPriorityModel = PagingPriorityMachine.TestCase
