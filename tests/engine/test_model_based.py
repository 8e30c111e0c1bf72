"""The broker against a small reference model, with crash-and-reopen (hypothesis).

Topology: address ``a`` (anycast) with durable queues ``a1``, ``a2`` (round-robin); address ``t``
(multicast) with a durable queue ``t1`` and a non-durable queue ``t2``. The model tracks each
queue's messages (send sequence, durability, delivery count), the deliveries held by consumers in
consumption order, and an open transaction. A crash (simulated power loss, the index lost or
kept) keeps exactly what was reported durable: durable messages on durable queues, in their
original order, delivery counts as journaled; reopening then ends the held deliveries as a
clean close does (back through the queues' policies: a full ring drops what comes back).

Scheduled sends (seed 000 §3) wait in the model's per-queue scheduled lists until the injected
clock passes their time; ``advance_clock`` then puts the due ones on the head of their queue:
after those that came due before, before every waiting message, in due order (FIFO among equal
times); a full ring removes the one coming due. Order keys (``Item.order``) say where a message
sits after a reopen: ``(0, step, i)`` for the i-th message of a due step, ``(1, seq)`` for the
others. Address ``a`` has a redelivery delay (``REDELIVERY``): what comes back unsettled from
``a1``/``a2`` (release, consumer close, recover, rollback; not a close or reopen of the broker)
waits in the scheduled list for that delay, grown by the multiplier per delivery and capped.

Two options are drawn per example: persist-delivery-count-before-delivery (off: a crash brings
a message handed out from a durable record back with the count of its last return), and the
non-transacted consumers' prefetch (``engine.delivery.prefetch``). Prefetched messages are held
deliveries marked ``buffered``: in delivery, counted, and removable by a Qpid ring like any
other; a receive hands them out first; a consumer close or a clean close puts them back with
their counts as before; a crash ends them as it ends the deliveries handed out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule)
import pytest

from mqstore.engine import (AddressSettings, Broker, IllegalStateError, Message, PolicyType,
                            QueueConfig, QueueFullError, QueueNotEmptyError, RoutingType)
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex
from mqstore.recovery.entries import KEEP_DELETED

OPTS = JournalOptions(segment_size=2048, max_record_size=1900)
T0 = 1_700_000_000_000  # the injected clock's start, ms since the epoch
DELAYED = ("a1", "a2")  # address "a" has a redelivery delay: (delay, multiplier, cap) in ms
REDELIVERY = (1000, 2.0, 2500)
A_SETTINGS = dict(redelivery_delay=REDELIVERY[0], redelivery_delay_multiplier=REDELIVERY[1],
                  max_redelivery_delay=REDELIVERY[2])
# Qpid size limits (seed 002 "Controlling queue size"): multicast address "l" holds a queue
# of each refusing or removing policy, "f" a flow_to_disk queue (its paging would page "l")
LIMITS: Dict[str, Dict[str, object]] = {
    "lr": dict(max_count=3, policy_type=PolicyType.REJECT),
    "lb": dict(max_size=8, policy_type=PolicyType.REJECT),
    "lg": dict(max_count=3, policy_type=PolicyType.RING),
    "ls": dict(max_count=2, policy_type=PolicyType.RING_STRICT),
    "lf": dict(max_count=2, policy_type=PolicyType.FLOW_TO_DISK)}
QUEUES = ("a1", "a2", "t1", "t2", "ring") + tuple(LIMITS)  # queues the generic rules use
# the index tables read while the broker runs or at an open's fold (the small ones, addresses,
# queues and settings, are read only by an open's checks)
RUNTIME_TABLES = ("msg", "qref", "busy", "tx", "sched", "moved", "jmarks", "jwait", "jpin")
ALL = QUEUES + ("lvq",)                         # lvq: last-value + non-destructive


@dataclass
class Item:
    seq: int
    body: bytes
    durable: bool
    dc: int = 0
    key: Optional[str] = None
    order: Tuple[int, ...] = ()

    def sort_key(self) -> Tuple[int, ...]:
        return self.order or (1, self.seq)


@dataclass
class Held:
    queue: str
    item: Item
    delivery: object
    tx: bool = False
    acked_in_tx: bool = False
    gone: bool = False  # a Qpid ring removed it while in delivery: settling does nothing
    journaled: bool = True  # its delivery count was journaled before it was handed out
    buffered: bool = False  # taken ahead into its consumer's prefetch, not handed out yet


@dataclass
class Model:
    queues: Dict[str, List[Item]] = field(default_factory=lambda: {q: [] for q in ALL})
    held: List[Held] = field(default_factory=list)
    ring_size: int = 3
    cursor: int = 0
    seq: int = 0
    tx_sends: List[tuple] = field(default_factory=list)
    scheduled: Dict[str, List[Tuple[int, Item]]] = field(
        default_factory=lambda: {q: [] for q in ALL})
    steps: int = 0  # due steps so far (the middle part of a due message's order key)
    nodes: Optional[int] = None  # what set_cluster_nodes last said
    last_node: bool = False      # in last-node mode: a1 journals non-durable messages
    scratch: int = 0             # messages on queue "x", deleted and declared again
    scratch_durable: bool = True
    scratch_auto: bool = False   # queue "x" is a Qpid auto-delete queue
    deleted: List[Tuple[str, int, bool]] = field(default_factory=list)  # deleted_queues()


def setup(broker: Broker, first: bool) -> None:
    if first:
        broker.create_address("a", {RoutingType.ANYCAST})
        broker.create_address("t", {RoutingType.MULTICAST})
        for q in ("a1", "a2"):  # a1 stores non-durable messages on the last node (seed 002)
            broker.create_queue(QueueConfig(q, "a", RoutingType.ANYCAST,
                                            persist_last_node=q == "a1"))
        broker.create_queue(QueueConfig("t1", "t", RoutingType.MULTICAST))
        broker.create_address("r", {RoutingType.ANYCAST})
        broker.create_queue(QueueConfig("ring", "r", ring_size=3))
        broker.create_address("p", {RoutingType.MULTICAST})
        broker.create_queue(QueueConfig("lvq", "p", RoutingType.MULTICAST, last_value_key="k",
                                        non_destructive=True))
        broker.create_address("x", {RoutingType.ANYCAST})
        broker.create_queue(QueueConfig("x", "x"))
        broker.create_address("l", {RoutingType.MULTICAST})
        broker.create_address("f", {RoutingType.MULTICAST})
        for q, limits in LIMITS.items():
            broker.create_queue(QueueConfig(q, "f" if q == "lf" else "l",
                                            RoutingType.MULTICAST, **limits))  # type: ignore
    broker.create_queue(QueueConfig("t2", "t", RoutingType.MULTICAST, durable=False))


class BrokerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fs = SimulatedFileSystem()
        self.index = MemoryIndex()
        self.damaged = False  # an index value was damaged (damage_index) and not yet rebuilt
        self.now = T0
        self.broker = self._open()
        setup(self.broker, True)
        self.model = Model()
        self._open_sessions()

    BUDGET = 64 << 20  # the default: nothing pages at these sizes

    persist = True  # persist_delivery_count_before_delivery (drawn: choose_options)
    prefetch = 0  # the non-transacted consumers' prefetch (drawn: choose_options)

    def _open(self) -> Broker:
        return Broker.open("/s", fs=self.fs, journal_options=OPTS, index=self.index,
                           checkpoint_records=40, memory_budget=self.BUDGET,
                           clock=lambda: self.now,
                           address_settings={"a": AddressSettings(**A_SETTINGS)},
                           persist_delivery_count_before_delivery=self.persist)

    @initialize(persist=st.booleans(), prefetch=st.sampled_from([0, 0, 2]))
    def choose_options(self, persist: bool, prefetch: int) -> None:
        """Without persist-delivery-count-before-delivery, a delivery of a message whose
        record is durable (every one here but those a due step put on a head) journals
        nothing: a crash brings it back with the count of its last return.

        With a prefetch (``engine.delivery.prefetch``), a receive on an empty buffer takes up to
        ``prefetch`` more messages ahead: each in delivery with its count up (journaled as a
        receive's would be), handed out by the next receives; a consumer close (or a clean
        close of the broker) puts them back with their counts as before, no redelivery
        delay; a crash ends them as it ends the deliveries handed out."""
        self.prefetch = prefetch
        if not persist:
            self.persist = False
            self.broker.close()
            self.broker = self._open()
            setup(self.broker, False)  # the non-durable queue again
        elif prefetch:
            self.session.close()
            self.txs.close()
        else:
            return
        self._open_sessions()

    def _open_sessions(self) -> None:
        self.session = self.broker.session(block_on_acknowledge=True)
        self.txs = self.broker.session(transacted=True)
        self.consumers = {q: self.session.create_consumer(q, prefetch=self.prefetch)
                          for q in QUEUES}
        self.tx_consumers = {q: self.txs.create_consumer(q) for q in QUEUES}

    # -- sending ------------------------------------------------------------------------------
    def _route(self, address: str) -> List[str]:
        if address == "a":
            q = ("a1", "a2")[self.model.cursor % 2]
            self.model.cursor += 1
            return [q]
        return ["t1", "t2"]

    def _durable(self, queue: str, durable: bool) -> bool:
        return durable or (queue == "a1" and self.model.last_node)

    def _enqueue(self, address: str, body: bytes, durable: bool) -> None:
        for q in self._route(address):
            self.model.queues[q].append(Item(self.model.seq, body, self._durable(q, durable)))

    @rule(address=st.sampled_from(["a", "t"]), durable=st.booleans())
    def send(self, address: str, durable: bool) -> None:
        self.model.seq += 1
        body = b"m%d" % self.model.seq
        self.session.send(address, Message(body, durable=durable))
        self._enqueue(address, body, durable)

    @rule(address=st.sampled_from(["a", "t", "r"]), durable=st.booleans(),
          delay=st.sampled_from([1000, 1000, 2000, 3000]), by_property=st.booleans())
    def send_scheduled(self, address: str, durable: bool, delay: int, by_property: bool
                       ) -> None:
        self.model.seq += 1
        body = b"s%d" % self.model.seq
        at = self.now + delay
        msg = Message(body, {"_AMQ_SCHED_DELIVERY": at}, durable=durable) if by_property \
            else Message(body, durable=durable, scheduled_delivery_time=at)
        self.session.send(address, msg)
        for q in (["ring"] if address == "r" else self._route(address)):
            self.model.scheduled[q].append((at, Item(self.model.seq, body,
                                                     self._durable(q, durable))))

    @rule(ms=st.sampled_from([500, 1000, 2500]))
    def advance_clock(self, ms: int) -> None:
        self.now += ms
        self.broker.deliver_scheduled()
        m = self.model
        for q, waiting in m.scheduled.items():
            due = sorted([x for x in waiting if x[0] <= self.now],
                         key=lambda x: (x[0], x[1].sort_key()))
            if not due:
                continue
            m.scheduled[q] = [x for x in waiting if x[0] > self.now]
            m.steps += 1
            items = m.queues[q]
            for i, (_at, item) in enumerate(due):
                item.order = (0, m.steps, i)
                if q == "ring" and len(items) >= m.ring_size:
                    event("a full ring removed a message coming due")
                    continue  # a full ring removes the message coming due (seed 000 §3)
                if items:
                    event("a message came due before waiting ones")
                pos = len(items)  # after the last one with a smaller key
                while pos > 0 and items[pos - 1].sort_key() > item.order:
                    pos -= 1
                items.insert(pos, item)

    FORCING = True  # the last-node rule runs (not where non-durable messages page to files)

    @precondition(lambda self: self.FORCING)
    @rule(nodes=st.sampled_from([1, 1, 2, 3]))
    def set_cluster_nodes(self, nodes: int) -> None:
        """Last-node mode (seed 002): entering it journals a1's non-durable messages (on the
        queue, held, scheduled), each at the journal's end, which is its place in the queue
        from then on: those on the queue move to its tail."""
        m = self.model
        self.broker.set_cluster_nodes(nodes)
        entering = nodes == 1 and m.nodes is not None and m.nodes > 1 and not m.last_node
        if nodes > 1:
            m.last_node = False
        m.nodes = nodes
        if not entering:
            return
        m.last_node = True
        event("last-node mode entered")
        moved = [i for i in m.queues["a1"] if not i.durable]
        m.queues["a1"] = [i for i in m.queues["a1"] if i.durable] + moved  # to the tail
        for h in m.held:  # forcing journals a DELIVERY record for each one in delivery
            if h.queue == "a1" and not h.item.durable:
                h.journaled = True
        forced = moved + [h.item for h in m.held if h.queue == "a1" and not h.item.durable] + \
            [i for _at, i in sorted(m.scheduled["a1"], key=lambda x: (x[0], x[1].sort_key()))
             if not i.durable]
        for item in forced:
            m.seq += 1
            item.seq, item.order, item.durable = m.seq, (), True
        if forced:
            event("last-node mode forced messages")

    @rule(queue=st.sampled_from(["a1", "a2", "t1"]), durable=st.booleans())
    def send_fqqn(self, queue: str, durable: bool) -> None:
        self.model.seq += 1
        body = b"f%d" % self.model.seq
        address = "a" if queue.startswith("a") else "t"
        self.session.send(f"{address}::{queue}", Message(body, durable=durable))
        self.model.queues[queue].append(Item(self.model.seq, body,
                                             self._durable(queue, durable)))

    def _ring_add_tail(self, item: Item) -> None:
        q = self.model.queues["ring"]
        q.append(item)
        if len(q) > self.model.ring_size:
            q.pop(0)

    @rule(durable=st.booleans())
    def send_ring(self, durable: bool) -> None:
        self.model.seq += 1
        body = b"r%d" % self.model.seq
        self.session.send("r", Message(body, durable=durable))
        self._ring_add_tail(Item(self.model.seq, body, durable))

    @rule(size=st.integers(0, 4))
    def set_ring_size(self, size: int) -> None:
        self.broker.set_ring_size("ring", size)
        self.model.ring_size = size

    @rule(dest=st.sampled_from(["l", "l::lg", "l::lg", "l::ls", "l::ls", "l::lb", "l::lr", "f"]),
          durable=st.booleans(), extra=st.integers(0, 3))
    def send_limited(self, dest: str, durable: bool, extra: int) -> None:
        """Qpid limits: a send breaking one queue's limit fails whole (multicast); rings
        remove their oldest (ring: in delivery too, ring_strict: refuses then)."""
        m = self.model
        m.seq += 1
        body = b"q%d" % m.seq + b"." * extra
        targets = [dest.split("::")[1]] if "::" in dest else \
            (["lf"] if dest == "f" else ["lr", "lb", "lg", "ls"])
        evictions: List[Tuple[str, object]] = []
        refused = False
        for q in targets:
            got = self._make_room(q, len(body))
            if got is None:
                refused = True
                break
            evictions += got
        if refused:
            with pytest.raises(QueueFullError):
                self.session.send(dest, Message(body, durable=durable))
            event("a Qpid limit refused a send")
            return
        self.session.send(dest, Message(body, durable=durable))
        for q, x in evictions:
            event("a Qpid ring removed a message " +
                  ("in delivery" if isinstance(x, Held) else "ready"))
            if isinstance(x, Held):
                x.gone = True
            else:
                m.queues[q].remove(x)  # type: ignore[arg-type]
        for q in targets:
            m.queues[q].append(Item(m.seq, body, durable))

    @rule(queue=st.sampled_from(["lg", "ls", "lr", "lb"]), tx=st.booleans())
    def receive_limited(self, queue: str, tx: bool) -> None:
        self._receive(queue, tx)  # more often: rings then meet messages in delivery

    def _make_room(self, q: str, size: int) -> Optional[List[Tuple[str, object]]]:
        """What queue ``q``'s policy does with one more message of ``size`` bytes: the
        messages a ring removes, or ``None`` when it refuses."""
        limits = LIMITS[q]
        items = self.model.queues[q]
        held = [h for h in self.model.held if h.queue == q and not h.gone]
        n = len(items) + len(held)
        b = sum(len(i.body) for i in items) + sum(len(h.item.body) for h in held)

        def over(n: int, b: int) -> bool:
            return n > int(limits.get("max_count", -1)) > 0 or \
                b > int(limits.get("max_size", -1)) > 0
        if not over(n + 1, b + size) or limits["policy_type"] == PolicyType.FLOW_TO_DISK:
            return []
        if limits["policy_type"] == PolicyType.REJECT:
            return None
        strict = limits["policy_type"] == PolicyType.RING_STRICT
        oldest = sorted([(i.sort_key(), i) for i in items] +
                        [(h.item.sort_key(), h) for h in held], key=lambda x: x[0])
        out: List[Tuple[str, object]] = []
        while over(n + 1, b + size):
            if not oldest:
                return None
            _key, x = oldest.pop(0)
            if isinstance(x, Held) and strict:
                return None
            out.append((q, x))
            n -= 1
            b -= len(x.item.body if isinstance(x, Held) else x.body)  # type: ignore
        return out

    @rule(key=st.sampled_from(["a", "b", "c", None]), durable=st.booleans())
    def send_lvq(self, key: Optional[str], durable: bool) -> None:
        self.model.seq += 1
        body = b"p%d" % self.model.seq
        props = {"k": key} if key is not None else {}
        self.session.send("p", Message(body, props, durable=durable))
        q = self.model.queues["lvq"]
        if key is not None:
            q[:] = [i for i in q if i.key != key]
        q.append(Item(self.model.seq, body, durable, key=key))

    # a transaction's sends are journaled in one record, and OPTS keeps records under 1900
    # bytes: about eight sends fit the bound a commit checks (a larger one is refused whole,
    # tests/engine/test_broker.py), so the model stays below it
    @precondition(lambda self: len(self.model.tx_sends) < 6)
    @rule(address=st.sampled_from(["a", "t"]), delay=st.sampled_from([0, 0, 1000]))
    def tx_send(self, address: str, delay: int) -> None:
        self.model.seq += 1
        body = b"x%d" % self.model.seq
        self.txs.send(address, Message(body, delivery_delay=delay))
        self.model.tx_sends.append((address, body, self.model.seq, delay))

    # -- receiving and settling ---------------------------------------------------------------
    def _receive(self, queue: str, tx: bool) -> None:
        consumer = (self.tx_consumers if tx else self.consumers)[queue]
        d = consumer.receive_nowait()
        m = self.model
        # the non-transacted consumer's buffer first (a transacted one does not prefetch)
        for h in [h for h in m.held if h.buffered and h.queue == queue and not tx]:
            if h.gone:  # a Qpid ring removed it from the buffer: passed over
                m.held.remove(h)
                continue
            h.buffered, h.delivery = False, d  # its place in m.held stays: the take order
            event("a receive handed out a prefetched message")
            self._check_delivery(queue, h.item, d)
            return
        items = m.queues[queue]
        if not items:
            assert d is None
            return
        taken = items[:1 + (0 if tx else self.prefetch)]
        del items[:len(taken)]
        for n, item in enumerate(taken):
            item.dc += 1
            # a head key (a due step's) says nothing of the record's durability: journaled
            journaled = self.persist or item.order[:1] == (0,)
            m.held.append(Held(queue, item, d if n == 0 else None, tx, journaled=journaled,
                               buffered=n > 0))
        if len(taken) > 1:
            event("a receive prefetched")
        self._check_delivery(queue, taken[0], d)

    @staticmethod
    def _check_delivery(queue: str, item: Item, d: object) -> None:
        assert d is not None, f"expected {item.body!r} on {queue}"
        assert d.message.body == item.body  # type: ignore[attr-defined]
        assert d.delivery_count == item.dc  # type: ignore[attr-defined]
        assert d.redelivered == (item.dc > 1)  # type: ignore[attr-defined]

    @rule(queue=st.sampled_from(QUEUES))
    def receive(self, queue: str) -> None:
        self._receive(queue, False)

    @rule(queue=st.sampled_from(QUEUES))
    def tx_receive(self, queue: str) -> None:
        self._receive(queue, True)

    @rule(data=st.data(), reject=st.booleans())
    def settle(self, data: st.DataObject, reject: bool) -> None:
        open_ = [h for h in self.model.held if not h.acked_in_tx and not h.buffered]
        if not open_:
            return
        h = data.draw(st.sampled_from(open_))
        (h.delivery.reject if reject else h.delivery.ack)()  # type: ignore[attr-defined]
        if h.tx:
            h.acked_in_tx = True
        else:
            self.model.held.remove(h)
        try:
            h.delivery.ack()  # type: ignore[attr-defined]
            raise AssertionError("a settled delivery must not be settled again")
        except IllegalStateError:
            pass

    def _return(self, held: List[Held], delayed: bool = True) -> None:
        for h in reversed(held):
            self.model.held.remove(h)
            if h.gone:  # a ring removed it: nothing comes back
                continue
            if delayed and h.queue in DELAYED:  # through the scheduled buffer
                wait = min(REDELIVERY[0] * REDELIVERY[1] ** (h.item.dc - 1), REDELIVERY[2])
                if h.item.durable and h.queue != "t2":
                    h.item.order = ()  # the index keeps it under its message's order key
                self.model.scheduled[h.queue].append((self.now + int(wait), h.item))
                continue
            q = self.model.queues[h.queue]
            q.insert(0, h.item)
            if h.queue == "ring" and len(q) > self.model.ring_size:
                q.pop(0)  # the ring keeps the tail: the one just put back goes

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        open_ = [h for h in self.model.held if not h.acked_in_tx and not h.buffered]
        if not open_:
            return
        h = data.draw(st.sampled_from(open_))
        h.delivery.release()  # type: ignore[attr-defined]
        self._return([h])

    @rule(queue=st.sampled_from(QUEUES))
    def close_consumer(self, queue: str) -> None:
        # what it prefetched goes back first, counts as before and no delay; the unacked
        # deliveries end up in front of them
        self._return(self._unbuffered([h for h in self.model.held if h.queue == queue]),
                     delayed=False)
        self._return([h for h in self.model.held if h.queue == queue and not h.tx])
        self.consumers[queue].close()
        self.consumers[queue] = self.session.create_consumer(queue, prefetch=self.prefetch)

    @staticmethod
    def _unbuffered(held: List[Held]) -> List[Held]:
        """The prefetched ones of ``held``, their delivery counts back to before their take."""
        out = [h for h in held if h.buffered]
        for h in out:
            h.item.dc -= 1
        return out

    @rule()
    def recover_session(self) -> None:
        self._return([h for h in self.model.held if not h.tx and not h.buffered])
        self.session.recover()

    @rule()
    def commit(self) -> None:
        self.txs.commit()
        for address, body, _seq, delay in self.model.tx_sends:
            self.model.seq += 1  # journal order is commit order
            for q in self._route(address):
                item = Item(self.model.seq, body, True)
                if delay:  # the delay runs from the commit (the send takes effect then)
                    self.model.scheduled[q].append((self.now + delay, item))
                else:
                    self.model.queues[q].append(item)
        self.model.tx_sends = []
        for h in [h for h in self.model.held if h.tx and h.acked_in_tx]:
            self.model.held.remove(h)

    @rule()
    def rollback(self) -> None:
        self.txs.rollback()
        self.model.tx_sends = []
        self._return([h for h in self.model.held if h.tx])

    # -- storage ------------------------------------------------------------------------------
    @rule()
    def send_scratch(self) -> None:
        self.session.send("x", Message(b"x"))
        self.model.scratch += 1

    @rule(if_empty=st.booleans(), durable=st.booleans(), auto=st.booleans())
    def delete_scratch(self, if_empty: bool, durable: bool, auto: bool) -> None:
        # seed 002 "Deleting Queues": the ifEmpty check, then the queue stays listed with
        # its deletion time; declared again at once, durable or not, auto-delete or not
        m = self.model
        if if_empty and m.scratch:
            with pytest.raises(QueueNotEmptyError):
                self.broker.delete_queue("x", if_empty=True)
            return
        self.broker.delete_queue("x", if_empty=if_empty)
        self._scratch_deleted(durable, auto)

    def _scratch_deleted(self, durable: bool, auto: bool) -> None:
        m = self.model
        event(f"queue x deleted ({'durable' if m.scratch_durable else 'not durable'})")
        m.deleted.append(("x", self.now, m.scratch_durable))
        self.broker.create_queue(QueueConfig("x", "x", durable=durable, auto_delete=auto))
        m.scratch, m.scratch_durable, m.scratch_auto = 0, durable, auto

    @rule(take=st.integers(0, 3), durable=st.booleans(), auto=st.booleans())
    def consume_scratch(self, take: int, durable: bool, auto: bool) -> None:
        # a consumer comes, acks some, goes: an auto-delete queue goes with it (seed 002)
        c = self.session.create_consumer("x")
        got = c.receive_many(take, timeout=0) if take else []
        assert len(got) == min(take, self.model.scratch)
        if got:
            self.session.ack_many(got)
        self.model.scratch -= len(got)
        c.close()
        if self.model.scratch_auto:
            event("auto-delete queue x deleted by its last consumer")
            self._scratch_deleted(durable, auto)

    @rule()
    def checkpoint(self) -> None:
        self.broker.checkpoint()

    @rule(data=st.data())
    def damage_index(self, data: st.DataObject) -> None:
        """A committed value of the index changes under the running broker (a flipped bit on
        its disk): nothing a client sees changes. The broker rebuilds the index from the
        journal when it reads the value (issue 36), or a commit overwrites it, or an open
        finds it; never a fail-stop."""
        tables = [t for t in RUNTIME_TABLES if self.index.tables[t]]
        if not tables:
            return
        name = data.draw(st.sampled_from(tables))
        rows = self.index.tables[name]
        key = data.draw(st.sampled_from(sorted(rows)))
        value = bytearray(rows[key])
        bit = data.draw(st.integers(0, len(value) * 8 - 1))
        value[bit // 8] ^= 1 << (bit % 8)
        rows[key] = bytes(value)
        self.damaged = True
        event(f"an index value damaged ({name})")

    @rule()
    def compact(self) -> None:
        report = self.broker.compact(force=True)
        event(f"compaction ran: {report.compacted}")

    @rule()
    def clean_reopen(self) -> None:
        # a clean close cancels what consumers hold, through the queues' policies, all at
        # once in consumption order; prefetched ones with their counts as before
        self._unbuffered(self.model.held)
        self._return(list(self.model.held), delayed=False)
        self.broker.close()
        self.broker = self._open()
        self._after_restart()

    @rule(keep_all=st.booleans(), seed=st.integers(0, 2**16))
    def crash_and_reopen(self, keep_all: bool, seed: int) -> None:
        rng = random.Random(seed)
        event(f"crash with {sum(len(v) for v in self.model.queues.values()) // 5 * 5}+ queued")
        if any(self.model.scheduled.values()):
            event("crash with scheduled messages")
        if any(i.order for q in ALL for i in self.model.queues[q]):
            event("crash with messages that came due on a queue")
        crashed = self.fs.crash(keep=self.fs.unsynced_count() if keep_all else 0)
        index = self.index.crash(rng)
        # what survives is what was durable; reopening then ends the deliveries that were
        # open exactly as a clean close does (policies, in consumption order)
        m = self.model
        m.held = [h for h in m.held if h.item.durable and h.queue != "t2"]
        for q in ALL:
            m.queues[q] = [i for i in m.queues[q] if i.durable and q != "t2"]
            m.scheduled[q] = [x for x in m.scheduled[q] if x[1].durable and q != "t2"]
        if any(h.buffered for h in m.held):
            event("crash with prefetched messages")
        if any(not h.journaled for h in m.held):
            event("crash with a delivery whose count was not journaled")
        for h in [h for h in m.held if not h.journaled]:  # on its queue as journaled: the
            m.held.remove(h)  # count of its last return, and no policy meets it
            if not h.gone:
                h.item.dc -= 1
                m.queues[h.queue].append(h.item)
        self._return(list(m.held), delayed=False)
        self.broker.close()
        self.fs, self.index = crashed, index
        had_index = index.entries("meta") > 0
        self.broker = self._open()
        # the last index commit is always usable: reclaim never outruns it (issue 36)
        assert not had_index or self.damaged or \
            self.broker.recovery_report.index == "used", self.broker.recovery_report.index
        if self.broker.recovery_report.rebuilt:
            self.damaged = False
        self._after_restart()

    def _after_restart(self) -> None:
        m = self.model
        m.nodes, m.last_node = None, False  # a store starts alone
        # a deletion is durable when delete_queue returns, for durable queues; a non-durable
        # queue and its entry are gone with the process
        m.deleted = [d for d in m.deleted if d[2]]
        if not m.scratch_durable:
            self.broker.create_queue(QueueConfig("x", "x"))
            m.scratch, m.scratch_durable, m.scratch_auto = 0, True, False
        for h in m.held:
            m.queues[h.queue].append(h.item)
        m.held = []
        m.tx_sends = []
        m.cursor = 0
        for q in ALL:
            keep = [i for i in m.queues[q] if i.durable and q != "t2"]
            m.queues[q] = sorted(keep, key=lambda i: i.sort_key())
            m.scheduled[q] = [x for x in m.scheduled[q] if x[1].durable and q != "t2"]
        setup(self.broker, False)
        self._open_sessions()

    # -- checks -------------------------------------------------------------------------------
    @invariant()
    def counts_match(self) -> None:
        info = self.broker.queue_info("lvq")
        assert (info.message_count, info.delivering_count) == (len(self.model.queues["lvq"]), 0)
        assert self.broker.queue_info("ring").ring_size == self.model.ring_size
        for q in QUEUES:
            info = self.broker.queue_info(q)
            held = sum(1 for h in self.model.held if h.queue == q and not h.gone)
            waiting = len(self.model.scheduled[q])
            assert info.delivering_count == held, (q, info)
            assert info.scheduled_count == waiting, (q, info)
            assert info.message_count == len(self.model.queues[q]) + held + waiting, (q, info)

    @invariant()
    def deleted_match(self) -> None:
        got = [(d.name, d.deleted_at, d.durable) for d in self.broker.deleted_queues()]
        assert got == self.model.deleted[-KEEP_DELETED:]
        assert self.broker.queue_info("x").message_count == self.model.scratch

    @precondition(lambda self: True)
    @invariant()
    def browse_matches(self) -> None:
        for q in ("a1", "t1", "ring", "lvq", "lb", "lg", "ls", "lf"):
            seen = [(m.message.body, m.delivery_count) for m in self.session.create_browser(q)]
            assert seen == [(i.body, i.dc) for i in self.model.queues[q]], q

    def teardown(self) -> None:
        self.broker.close()


BrokerMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestBrokerModel = BrokerMachine.TestCase


class PagingBrokerMachine(BrokerMachine):
    """The same rules and model with the smallest RAM budget: every durable queue keeps a
    head of two references and reads the rest back from the index, so paging out, refills,
    browsing past the head and index commits between them happen on most steps."""

    BUDGET = 4096

    @invariant()
    def pages(self) -> None:
        stats = self.broker.statistics().memory
        scratch = 2 if self.model.scratch_durable else self.model.scratch  # queue "x"
        assert stats.references <= 2 * (4 + len(LIMITS)) + scratch + len(self.model.held) + \
            len(self.model.queues["lvq"]) + len(self.model.queues["t2"]) + \
            sum(1 for q in ("a1", "a2", "t1", "ring") + tuple(LIMITS)
                for i in self.model.queues[q] if not i.durable) + \
            sum(1 for q in QUEUES for _at, i in self.model.scheduled[q]
                if not i.durable or q == "t2"), stats
        if stats.paged_out:
            event("paged out")
        if stats.paged_in:
            event("paged in")


PagingBrokerMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestPagingBrokerModel = PagingBrokerMachine.TestCase


class AddressPagingMachine(BrokerMachine):
    """The same rules and model with the smallest RAM budget and tiny address limits (PAGE):
    addresses ``a`` and ``t`` page after two messages, so sends page, receives depage (two at a
    time), paging starts and ends, and crashes hit an address mid-paging on most runs. Paging
    changes no order or count a client sees on these queues."""

    BUDGET = 4096
    FORCING = False  # paged non-durable messages sit in page files, which are not forced

    def _open(self) -> Broker:
        return Broker.open("/s", fs=self.fs, journal_options=OPTS, index=self.index,
                           checkpoint_records=40, memory_budget=self.BUDGET,
                           address_settings={"a": AddressSettings(max_size_messages=2,
                                                                  **A_SETTINGS),
                                             "t": AddressSettings(max_size_bytes=8)},
                           clock=lambda: self.now,
                           persist_delivery_count_before_delivery=self.persist)

    @invariant()
    def paging_adds_up(self) -> None:
        queues = {"a": ("a1", "a2"), "t": ("t1", "t2")}
        for address in ("a", "t"):
            info = self.broker.address_info(address)
            assert info.paging == (info.paged_count > 0), info
            held = {i.seq for q in queues[address] for i in self.model.queues[q]} | \
                {h.item.seq for h in self.model.held if h.queue in queues[address]} | \
                {i.seq for q in queues[address] for _at, i in self.model.scheduled[q]}
            assert info.number_of_messages + info.paged_count == len(held), info
            if info.paging:
                event(f"{address} pages")
        for q in ("a1", "a2", "t1", "t2"):
            info = self.broker.queue_info(q)
            assert info.paged_count <= info.message_count, info
            if info.paged_count:
                event("a queue holds paged messages")


AddressPagingMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestAddressPagingModel = AddressPagingMachine.TestCase
