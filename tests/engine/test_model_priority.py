"""Message priority (Artemis: a consumer gets the oldest message of the highest priority
present) against a small model, with crash-and-reopen.

Queue ``q`` receives messages of priorities 0, 4 and 9, durable or not, one at a time or in
batches. The model keeps the queue as a list in delivery order: a new message goes after
every message of its priority or higher; a released or cancelled one goes back to the head
of its priority (in the reverse order of consumption, so they come out again in the order
consumed). A second consumer has a selector (``color = 'red'``; every third message is red):
it gets the first red message of that order, and leaves the others for the first consumer
(seed 003's target lists; Artemis consumer filters). Address ``f`` has two queues with filters
(``color = 'red'``, ``color = 'blue'``): each message reaches the one it matches, and the
filters, journaled with the queues, apply again after every crash. A purge (``purge_queue``)
removes what no consumer holds. A crash keeps the durable messages, the ones held come back,
and the queue is in
key order again: by priority, then as sent. The paging variant has the smallest RAM budget,
so the queue keeps a head of two references and reads the rest back from the index in
priority order.
"""

from __future__ import annotations

import itertools
from typing import Dict, List, Set, Tuple

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from mqstore.engine import Message, QueueConfig
from tests.engine.crashcheck import StoreMachine, model_settings

PRIORITIES = st.sampled_from([0, 4, 4, 9])
Item = Tuple[int, int, bytes, bool]  # (seq, priority, body, durable)


FILTERED = {"fr": "red", "fb": "blue"}  # address "f": queue -> the color its filter takes


def red(item: Item) -> bool:
    """Whether the message is red (what the selecting consumer takes)."""
    return item[0] % 3 == 0


def props(item: Item) -> Dict[str, str]:
    return {"color": "red" if red(item) else "blue"}


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


class PriorityMachine(StoreMachine):
    def __init__(self) -> None:
        super().__init__()
        self.broker.create_address("a")
        self.broker.create_queue(QueueConfig("q", "a"))
        self.broker.create_address("f")
        for name, color in FILTERED.items():
            self.broker.create_queue(QueueConfig(name, "f", filter=f"color = '{color}'"))
        self.filtered: Dict[str, List[Item]] = {name: [] for name in FILTERED}
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

    def _attach(self) -> None:
        self.session = self.broker.session(block_on_acknowledge=True)
        self.consumer = self.session.create_consumer("q", window=1000)
        self.red = self.session.create_consumer("q", window=1000, selector="color = 'red'")

    def _item(self, priority: int, durable: bool) -> Item:
        self.seq += 1
        # bodies of ~150 bytes: a few dozen fill a segment, so compaction has work
        return (self.seq, priority, b"%d:" % self.seq + b"x" * 150, durable)

    @rule(priority=PRIORITIES, durable=st.booleans())
    def send(self, priority: int, durable: bool) -> None:
        item = self._item(priority, durable)
        self.session.send("a", Message(item[2], props(item), durable=durable,
                                       priority=priority))
        place(self.ready, item)

    @rule(priorities=st.lists(PRIORITIES, min_size=2, max_size=6), durable=st.booleans())
    def send_many(self, priorities: List[int], durable: bool) -> None:
        items = [self._item(p, durable) for p in priorities]
        self.session.send_many("a", [Message(i[2], props(i), durable=durable, priority=i[1])
                                     for i in items])
        for item in items:
            place(self.ready, item)

    @rule(priority=PRIORITIES, durable=st.booleans())
    def send_filtered(self, priority: int, durable: bool) -> None:
        item = self._item(priority, durable)
        self.session.send("f", Message(item[2], props(item), durable=durable,
                                       priority=priority))
        place(self.filtered["fr" if red(item) else "fb"], item)

    @rule(queue=st.sampled_from(sorted(FILTERED)))
    def receive_filtered(self, queue: str) -> None:
        c = self.session.create_consumer(queue)
        d = c.receive(0)
        want = self.filtered[queue]
        assert (d is None) == (not want)
        if d is not None:
            assert d.message.body == want.pop(0)[2]
            d.ack()
        c.close()

    @rule(n=st.integers(1, 3))
    def receive(self, n: int) -> None:
        self._receive(self.consumer, n, self.ready)

    @rule(n=st.integers(1, 3))
    def receive_red(self, n: int) -> None:
        """The selecting consumer: the first red ones, the others stay."""
        self._receive(self.red, n, [x for x in self.ready if red(x)])

    def _receive(self, consumer: object, n: int, pool: List[Item]) -> None:
        got = consumer.receive_many(n, timeout=0)  # type: ignore[attr-defined]
        bodies = [d.message.body for d in got]
        assert len(got) == min(n, len(pool))
        rest = [x for x in pool if x[2] not in set(bodies)]
        self._check(bodies + [x[2] for x in rest], pool)  # a valid head of the pool
        by_body = {x[2]: x for x in pool}
        want = [by_body[b] for b in bodies]
        assert [d.message.priority for d in got] == [i[1] for i in want]
        self.ready = [x for x in self.ready if x[2] not in set(bodies)]
        if consumer is self.red and got:
            event("a selector received")
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

    @rule(keep_all=st.booleans(), seed=st.integers(0, 2**16), lose_index=st.booleans())
    def crash_and_reopen(self, keep_all: bool, seed: int, lose_index: bool) -> None:
        back = [item for item, _d in self.held if self.dc.get(item[0], 0) < 10]  # (else
        kept = [x for x in self.ready + back if x[3]]  # dropped as their return is)
        self.ready = sorted(kept, key=lambda x: (-x[1], x[0]))
        self.filtered = {name: [x for x in items if x[3]]
                         for name, items in self.filtered.items()}
        self.held = []
        self.returned = set()  # a reopen reads the queue in key order again
        self.reopen_after_crash(keep_all, seed, lose_index)
        self._attach()

    @invariant()
    def queue_matches(self) -> None:
        info = self.broker.queue_info("q")
        assert (info.message_count, info.delivering_count) == \
            (len(self.ready) + len(self.held), len(self.held))
        with self.broker.session(block_on_acknowledge=True) as s:
            seen = list(itertools.islice((m.message.body for m in s.create_browser("q")),
                                         len(self.ready) + 1))
        self._check(seen, self.ready)
        with self.broker.session(block_on_acknowledge=True) as s:
            for name, items in self.filtered.items():
                assert [m.message.body for m in s.create_browser(name)] == [x[2] for x in items]



class PagingPriorityMachine(PriorityMachine):
    """The smallest RAM budget: a head of two references, the rest read from the index."""

    BUDGET = 4096
    EXACT = False

    @invariant()
    def pages(self) -> None:
        if self.broker.statistics().memory.paged_in:
            event("paged in")


for machine in (PriorityMachine, PagingPriorityMachine):
    machine.TestCase.settings = model_settings(300, 50)
TestPriorityModel = PriorityMachine.TestCase
TestPagingPriorityModel = PagingPriorityMachine.TestCase
