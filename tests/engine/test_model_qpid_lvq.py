"""Qpid last-value queues against a small reference model, with crash-and-reopen (hypothesis).

Seed 002 "Last value queues": multicast address ``p`` holds ``v`` (``last_value_queue``) and
``w`` (``last_value_queue_no_browse``). The model keeps each queue's ready list in queue order,
the deliveries held in consumption order and, per key, the one message a new message with that
key replaces in place (``latest``): acquiring takes a message out of the running, browsing too
on ``v``; a released message loses to a newer one with its key, else is the latest again.

Restarts: each message has the order key the journal gives it (``jpos``): its own, or, when it
replaced a durable message in place and is durable itself, the replaced one's. A reopen (clean,
or after a crash with the index kept or lost) loads the durable messages in that order, the
latest of a key being the last one; deliveries left open by a crash are then returned in
consumption order as a clean close would, and the head is put back in key order. Compaction
runs among the rules, so rebuilds also meet journals without the replaced messages' records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from mqstore.engine import Message, QueueConfig, RoutingType
from mqstore.engine.model import QPID_LVQ_KEY, QpidLvq
from mqstore.journal import JournalOptions
from tests.engine.crashcheck import StoreMachine, model_settings

SMALL_SEGMENTS = JournalOptions(segment_size=2048, max_record_size=1900)
FLAVOURS = {"v": QpidLvq.LVQ, "w": QpidLvq.LVQ_NO_BROWSE}


@dataclass(eq=False)
class Item:
    seq: int
    body: bytes
    key: Optional[str]
    durable: bool
    jpos: Tuple[int, ...] = ()


@dataclass(eq=False)
class Held:
    queue: str
    item: Item
    delivery: object


@dataclass
class Model:
    ready: Dict[str, List[Item]] = field(default_factory=lambda: {q: [] for q in FLAVOURS})
    latest: Dict[str, Dict[str, Item]] = field(default_factory=lambda: {q: {} for q in FLAVOURS})
    held: List[Held] = field(default_factory=list)
    seq: int = 0

    def contains(self, q: str, item: Item) -> bool:
        return any(i is item for i in self.ready[q])

    def returned(self, q: str, item: Item) -> None:
        """A delivery comes back (release, or a close ending it): a newer queued message
        with its key replaces it, else it is the latest again, at the head."""
        if item.key is not None:
            newer = self.latest[q].get(item.key)
            if newer is not None and newer is not item and self.contains(q, newer):
                event("a released message lost to a newer one")
                return
            self.latest[q][item.key] = item
        self.ready[q].insert(0, item)


class QpidLvqMachine(StoreMachine):
    OPTS = SMALL_SEGMENTS

    def __init__(self) -> None:
        super().__init__()
        self.broker.create_address("p", {RoutingType.MULTICAST})
        for q, flavour in FLAVOURS.items():
            self.broker.create_queue(QueueConfig(q, "p", RoutingType.MULTICAST,
                                                 qpid_lvq=flavour))
        self.m = Model()
        self._sessions()

    def _sessions(self) -> None:
        self.session = self.broker.session(block_on_acknowledge=True)
        self.consumers = {q: self.session.create_consumer(q, window=1000) for q in FLAVOURS}

    @rule(keys=st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=3),
          durable=st.booleans())
    def send(self, keys: List[Optional[str]], durable: bool) -> None:
        msgs = []
        for key in keys:
            self.m.seq += 1
            body = b"%d" % self.m.seq
            msgs.append(Message(body, {QPID_LVQ_KEY: key} if key else {}, durable=durable))
            for q in FLAVOURS:
                new = Item(self.m.seq, body, key, durable, (self.m.seq,))
                ready = self.m.ready[q]
                old = self.m.latest[q].get(key) if key is not None else None
                if key is not None:
                    self.m.latest[q][key] = new
                if old is not None and self.m.contains(q, old):
                    ready[next(i for i, x in enumerate(ready) if x is old)] = new
                    if old.durable and durable:  # the record says so: its place after a reopen
                        new.jpos = old.jpos
                    event("replaced in place")
                else:
                    ready.append(new)
        self.session.send_many("p", msgs)

    @rule(queue=st.sampled_from(sorted(FLAVOURS)))
    def receive(self, queue: str) -> None:
        d = self.consumers[queue].receive_nowait()
        ready = self.m.ready[queue]
        if not ready:
            assert d is None
            return
        item = ready.pop(0)
        assert d is not None and d.message.body == item.body, (queue, item.body)
        self.m.held.append(Held(queue, item, d))

    @rule(data=st.data(), release=st.booleans())
    def settle(self, data: st.DataObject, release: bool) -> None:
        if not self.m.held:
            return
        h = data.draw(st.sampled_from(self.m.held))
        self.m.held.remove(h)
        if release:
            h.delivery.release()  # type: ignore[attr-defined]
            self.m.returned(h.queue, h.item)
        else:
            h.delivery.ack()  # type: ignore[attr-defined]

    @rule(queue=st.sampled_from(sorted(FLAVOURS)))
    def browse(self, queue: str) -> None:
        seen = [x.message.body for x in self.session.create_browser(queue)]
        assert seen == [i.body for i in self.m.ready[queue]], queue
        if FLAVOURS[queue] == QpidLvq.LVQ:  # browsing protects what it saw
            latest = self.m.latest[queue]
            for item in self.m.ready[queue]:
                if item.key is not None and latest.get(item.key) is item:
                    del latest[item.key]

    def _reload(self, open_held: List[Held]) -> None:
        """The model after a reopen: durable messages in journal order, the latest of a key
        the last one; ``open_held`` (durable deliveries a crash left open) taken off, then
        returned in consumption order, and the head put back in key order."""
        m = self.m
        for q in FLAVOURS:
            survivors = [i for i in m.ready[q] if i.durable] + \
                [h.item for h in open_held if h.queue == q]
            survivors.sort(key=lambda i: i.jpos)
            m.ready[q] = survivors
            m.latest[q] = {i.key: i for i in survivors if i.key is not None}
        for h in open_held:  # taken off the queue as in delivery
            m.ready[h.queue] = [i for i in m.ready[h.queue] if i is not h.item]
            if h.item.key is not None and m.latest[h.queue].get(h.item.key) is h.item:
                del m.latest[h.queue][h.item.key]
        for h in reversed(open_held):  # returned: the last consumed goes back first
            m.returned(h.queue, h.item)
        for q in FLAVOURS:
            m.ready[q].sort(key=lambda i: i.jpos)
        m.held = []

    @rule()
    def clean_reopen(self) -> None:
        for h in reversed(self.m.held):  # a close returns them in consumption order
            self.m.returned(h.queue, h.item)
        self.m.held = []
        self.broker.close()
        self._reload([])
        self.broker = self.store.open()
        self._sessions()

    @rule(keep_all=st.booleans(), seed=st.integers(0, 2**16), lose_index=st.booleans())
    def crash_and_reopen(self, keep_all: bool, seed: int, lose_index: bool) -> None:
        self._reload([h for h in self.m.held if h.item.durable])
        self.reopen_after_crash(keep_all, seed, lose_index)  # (compaction, from the base:
        self._sessions()  # replaced messages' records go, a rebuild finds the positions)

    @invariant()
    def counts_match(self) -> None:
        for q in FLAVOURS:
            info = self.broker.queue_info(q)
            held = sum(1 for h in self.m.held if h.queue == q)
            assert (info.message_count, info.delivering_count) == \
                (len(self.m.ready[q]) + held, held), (q, info)



QpidLvqMachine.TestCase.settings = model_settings(300, 50)
TestQpidLvqModel = QpidLvqMachine.TestCase
