"""Runtime queues: message references in order, deliveries in flight, waiting consumers.

A ``Queue`` is a state object; semantics that vary between queue flavours (ring, last-value,
non-destructive...) are small ``QueuePolicy`` objects composed into it, not subclasses. A policy
decides; the broker journals its decision as a fact (an ACK with a reason) so recovery never
re-decides. A queue holds ``MessageRef``s, each pointing to a shared ``StoredMessage``: a
multicast message is stored once and referenced from every queue it was routed to.

References in RAM sit in priority lanes (``engine.queues.lanes``); paging out and reading back
from the index (refill, browse) are the ``engine.queues.backlog`` mixin's.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

from ..filters.expression import stored_filter
from .groups import Groups
from .lanes import Lanes
from ..model import QueueConfig, QueueInfo
from .paged import PagedRefs
from ..paging.pagefile import PageFile
from ..paging.memory import IndexReader, MessageCache, StoredMessage
from .backlog import QueueBacklog
from .refs import MessageRef, Order, kept_body, lane_in
from .scheduledbuffer import ScheduledBuffer
from .selection import offer, to_index
from mqstore.recovery.schema import AckReason

__all__ = ["MessageRef", "Order", "Queue", "StoredMessage", "kept_body"]


class Queue(QueueBacklog):
    """A queue's runtime state (guarded by the broker lock).

    A durable queue's references live in the live index; RAM holds its head (``ready``), refilled
    from the index in queue order as it drains, under the broker's RAM budget (issue 12, ActiveMQ
    massive queues). While a queue pages (``horizon`` set), every journaled reference with an order
    key up to ``horizon`` is in RAM and the ``on_disk`` ones after it are read back in order;
    references that arrive meanwhile wait in ``tail`` until their write, then leave RAM (journaled
    ones) or stay there in order (those not journaled). Last-value and non-destructive queues keep
    every reference in RAM (their policies and cursors look at the whole queue).

    Attributes:
        id: queue id (journal identity). config: its ``QueueConfig``.
        ready: the references at the head, in RAM, waiting for a consumer.
        tail: references that arrived while the queue pages, in RAM for now.
        on_disk: ready references held only by the index.
        horizon: ``None`` while every reference is in RAM; else the order key up to which
            every journaled ready reference is.
        delivering: references handed out and not yet settled, by message id.
        consumers: open consumers. waiters: consumers blocked in receive, longest first.
        policies: composed ``engine.queues.policies.QueuePolicy`` objects, applied in order.
        held_bytes: body bytes of what it holds, paged and scheduled included (Qpid max_size;
            counted at open for limited queues only, ``engine.queues.limits``).
    """

    def __init__(self, qid: int, config: QueueConfig, cache: MessageCache,
                 reader: Optional[IndexReader] = None,
                 policies: Sequence[Any] = (),
                 page_start: Callable[[], Optional[Order]] = lambda: None,
                 pages: Optional[PageFile] = None) -> None:
        self.id = qid
        self.config = config
        # what may enter (``engine.routing.route.route``); checked by ``create_queue`` before it
        # was journaled, so only a store written by another version gets an UnusableFilter
        self.filter = stored_filter(config.filter)
        self.cache = cache
        self.reader = reader
        self.ready = Lanes()
        self.tail = Lanes()
        self.on_disk = 0
        self.horizon: Optional[Order] = None
        self.delivering: Dict[int, MessageRef] = {}
        self.consumers: List[Any] = []
        self.selections: List[Any] = []  # consumers' selectors (``engine.queues.selection``)
        self.groups = Groups()  # message groups' consumers (``engine.queues.groups``)
        self.had_consumer = False  # since the broker opened (Qpid auto-delete waits for one)
        self.auto_delete_at: Optional[int] = None  # ms: a delayed Qpid auto-delete is due
        self.waiters: Deque[Any] = deque()
        self.policies: List[Any] = list(policies)  # engine.queues.policies.QueuePolicy
        self.paged = PagedRefs(qid, cache, reader, page_start, pages)
        self.scheduled = ScheduledBuffer(self, cache, reader)
        # last-node mode on a persist_last_node queue (engine.routing.lastnode)
        self.persisting = False
        self.returned_ahead = False  # references returned to the head: ``ready`` not in order
        # message ids of journaled references returned to the head whose order key is past
        # the horizon (it went below them while they were handed out: a head key paged out):
        # the index still has them there, and reads from it must pass over them
        self.ahead: set = set()
        self.held_bytes = 0  # what Qpid's max_size bounds (``engine.queues.limits``)
        self.limited = config.limited  # Qpid max_count / max_size set
        # references that replaced another in place since the last write, with that one
        # (Qpid last-value queues): the write gives each the other's order key
        self.in_place: List[Tuple[MessageRef, MessageRef]] = []
        self.added = 0
        self.acknowledged = 0
        self.killed = 0
        self.replaced = 0
        self.expired = 0
        self.mem_seq = 0

    @property
    def name(self) -> str:
        """The queue name."""
        return self.config.name

    @property
    def durable(self) -> bool:
        """Whether the queue is journaled."""
        return self.config.durable

    @property
    def pageable(self) -> bool:
        """Whether references may leave RAM (durable; not last-value of either kind nor
        non-destructive)."""
        return self.config.durable and self.reader is not None and \
            not self.config.last_value_key and not self.config.non_destructive and \
            self.config.qpid_lvq is None

    def message_count(self) -> int:
        """Messages on the queue, in delivery, paged and scheduled ones included (Artemis
        messageCount; Artemis ring queues §3-4: paged and scheduled messages are reflected in
        it)."""
        return self.ready_count() + len(self.delivering) + self.paged.count() + \
            self.scheduled.count()

    def ready_count(self) -> int:
        """Messages waiting for a consumer on the queue (what a ring size bounds, Artemis ring
        queues: paged ones are not on it yet)."""
        return len(self.ready) + self.on_disk + len(self.tail)

    @property
    def non_destructive(self) -> bool:
        """Whether consuming leaves messages on the queue (Artemis addressing §4.9.6)."""
        return bool(self.config.non_destructive)

    # -- joining ------------------------------------------------------------------------------
    def open_from_index(self) -> None:
        """At open: the index holds the queue's references. A pageable queue reads its head
        when first needed; another one reads them all now (in queue order)."""
        assert self.reader is not None
        self.paged.on_disk = self.reader.paged(self.id)
        count = self.reader.count(self.id) - self.paged.on_disk
        if count == 0:
            return
        if self.pageable:
            self.on_disk = count
            self.horizon = (0, 0)
            return
        after = None
        while count > 0:  # the paged ones come after these
            rows = self.reader.read(self.id, after, min(1024, count))
            for msg, order, delivered in rows:
                self.load_tail(MessageRef(msg, self, order, delivered, journaled=True))
            count -= len(rows)
            if not rows:
                return
            after = rows[-1][1]

    def add_tail(self, ref: MessageRef, now_ms: int = 0, arrival: bool = True
                 ) -> List[Tuple[MessageRef, str]]:
        """Append a new reference at the tail; return what the policies remove for it (the
        caller journals and detaches those). ``arrival`` false: a paged reference joining,
        counted in ``added`` when it was routed."""
        removals: List[Tuple[MessageRef, str]] = []
        if arrival and self.config.qpid_lvq is not None:
            old = self.policies[0].in_place(self, ref)  # type: ignore[attr-defined]
            if old is not None:
                self._swap(old, ref)
                self.added += 1
                return [(old, AckReason.REPLACED.value)]
        for policy in self.policies:
            removals += self._take_off(policy.before_add(self, ref, now_ms))
        self._enter(ref)
        self.added += arrival
        for policy in self.policies:
            removals += self._take_off(policy.after_add(self, ref, now_ms))
        return removals

    def _swap(self, old: MessageRef, ref: MessageRef) -> None:
        """``ref`` takes ``old``'s place, arrival number and order key (Qpid last value)."""
        where = self.ready if old in self.ready else self.tail
        where.replace(old, ref)
        old.in_queue = False
        ref.in_queue = True
        ref.seq = old.seq
        ref.order = old.order
        self.cache.hold(ref.msg)
        self.in_place.append((ref, old))
        if self.selections:
            offer(self.selections, ref)

    def browsed(self, ref: MessageRef) -> None:
        """A browser saw ``ref`` (a Qpid last-value queue protects it from replacement)."""
        for policy in self.policies:
            if hasattr(policy, "browsed"):
                policy.browsed(ref)

    def add_paged(self, ref: MessageRef) -> None:
        """Take a reference routed while the address pages: it waits with the queue's paged
        ones (policies see it when it joins the queue, ``engine.routing.depage``)."""
        self.added += 1
        self.mem_seq += 1
        ref.seq = self.mem_seq  # an order key for one journaled nowhere (``Placement``)
        self.paged.add(ref)

    def admit_due(self, ref: MessageRef, now_ms: int, joining: int
                  ) -> List[Tuple[MessageRef, str]]:
        """A scheduled reference came due; ``joining`` more came due before it in the same step and
        will join first. Returns what the policies remove for it: ``ref`` itself when the queue is a
        full ring (Artemis ring queues §3: "the scheduled message A will be removed"), else what a
        last-value key replaces (the key is tracked from now on, Artemis addressing §4.9). The
        caller then gives it its order key and calls ``join_due``."""
        for policy in self.policies:
            size = getattr(policy, "size", None)
            if size is not None and self.ready_count() + joining >= size:
                return [(ref, AckReason.EVICTED.value)]
        removals: List[Tuple[MessageRef, str]] = []
        for policy in self.policies:
            if hasattr(policy, "latest"):
                removals += self._take_off(policy.before_add(self, ref, now_ms))
        return removals

    def join_due(self, ref: MessageRef) -> None:
        """Put a reference that came due (its message already held, its order key a head
        key: ``recovery.image.head_order``) on the head of the queue: after those that came
        due before it, before every message that was waiting (after the last reference with
        a smaller order key: a message returned to the head stays ahead of it)."""
        self.mem_seq += 1
        ref.seq = self.mem_seq
        if self.horizon is not None and ref.order > self.horizon:
            if ref.journaled:  # behind the horizon: the index has it in order
                self.on_disk += 1
                self.cache.let_go(ref.msg)
                if self.selections:
                    to_index(self.selections, ref)
                return
            into = self.tail
        else:
            into = self.ready
        ref.in_queue = True
        into.insert_ordered(ref)  # after those that came due before; messages returned to
        # the head stay ahead of it
        if self.selections:
            offer(self.selections, ref)

    def _enter(self, ref: MessageRef, into: Optional[Lanes] = None) -> None:
        """A reference comes into RAM on ``into``: arrival number, held in the cache.
        ``None``: where a joining one goes, the head, or, while the queue pages, the tail
        unless it is in a lane before the horizon's (a higher priority: not read back from
        the index, it stays on the head)."""
        if into is None:
            into = self.ready if self.horizon is None or ref.order < self.horizon else self.tail
        self.mem_seq += 1
        ref.seq = self.mem_seq
        ref.in_queue = True
        into.append(ref)
        self.cache.hold(ref.msg)
        if self.selections:
            offer(self.selections, ref)

    def _take_off(self, removals: List[Tuple[MessageRef, str]]
                  ) -> List[Tuple[MessageRef, str]]:
        """Detach what a policy removes at once, so its next decision sees the real queue."""
        for ref, _why in removals:
            self.detach(ref)
        return removals

    def load_tail(self, ref: MessageRef) -> None:
        """Append a recovered or restored reference as it was: policies are not re-run (their
        decisions are in the journal), only their indexes learn of it."""
        self._enter(ref)
        for policy in self.policies:
            if hasattr(policy, "latest"):
                value = policy._value(ref)
                if value is not None:
                    policy.latest[value] = ref

    def sort_ready(self) -> None:
        """Put the ready list in order-key order (the journal order recovery loads in)."""
        self.ready = Lanes(sorted(self.ready, key=lambda ref: ref.order))


    def first(self) -> Optional[MessageRef]:
        """The oldest ready reference (read from the index when the head is empty)."""
        if not self.ready:
            self.refill()
        return self.ready[0] if self.ready else None

    # -- leaving ------------------------------------------------------------------------------
    def take(self) -> Optional[MessageRef]:
        """Pop the head reference, or ``None``."""
        try:
            ref = self.ready.popleft()
        except IndexError:  # the head is empty: read it in from the index
            self.refill()
            if not self.ready:
                return None
            ref = self.ready.popleft()
        ref.in_queue = False  # (still ``ahead`` if it was: its row stays until it is settled)
        return ref

    def take_ref(self, ref: MessageRef) -> None:
        """Take ``ref`` (ready, in RAM) off the queue wherever it is (a selector chose it)."""
        try:
            self.ready.remove(ref)
        except ValueError:
            self.tail.remove(ref)
        ref.in_queue = False

    def take_row(self, msg: StoredMessage, order: Order, delivered: int) -> MessageRef:
        """Take the reference the index holds at ``order`` (after the horizon; a selector
        chose it): it leaves the queue's count; its row stays in the index, passed over while
        it is in delivery, until it is settled or comes back."""
        self.cache.hold(msg)
        self.on_disk -= 1
        return MessageRef(msg, self, order, delivered, journaled=True)

    def peek_after(self, cursor: Dict[int, int]) -> Optional[MessageRef]:
        """The next ready reference for a non-destructive consumer whose place in each
        priority lane is ``cursor`` (lane -> arrival number of the last one it got): the
        first of the highest priority it has not seen, as an Artemis consumer's iterator over
        the queue's priority list goes back to a higher priority when one arrives."""
        return self.ready.first_after(cursor)

    def detach(self, ref: MessageRef) -> None:
        """Take a reference off the ready list (a policy or expiry removed it)."""
        if ref.in_queue:
            try:
                self.ready.remove(ref)
            except ValueError:
                self.tail.remove(ref)
            ref.in_queue = False
        if self.ahead:
            self.ahead.discard(ref.msg.mid)
        for policy in self.policies:
            policy.removed(ref)

    def release(self, ref: MessageRef) -> None:
        """A reference left the queue for good: RAM lets it go."""
        self.cache.let_go(ref.msg)

    def return_to_head(self, refs: List[MessageRef], now_ms: int = 0
                       ) -> List[Tuple[MessageRef, str]]:
        """Put cancelled or rolled-back references back at the head, in the reverse order of
        their consumption, so they come out again in the order consumed (seed
        000_721345e89d5d1b64.txt, Messages in Delivery & Rollbacks). Returns what the
        policies remove (a ring keeps the tail: the reference just put back goes)."""
        removals: List[Tuple[MessageRef, str]] = []
        delivering = self.delivering
        for ref in reversed(refs):
            mid = ref.msg.mid
            if self.ahead:
                self.ahead.discard(mid)
            dropped = []
            for policy in self.policies:
                if hasattr(policy, "returned"):
                    dropped += policy.returned(ref)
            if not dropped and self.horizon is not None and \
                    lane_in(ref.order) > lane_in(self.horizon):
                # its priority's head is not in RAM: read the queue's head in first, so it goes
                # before what came onto that head meanwhile (a scheduled message come due), as
                # at a close; at an open, the index holds every other reference of the queue.
                # It is still in delivery: the refill passes over it, never reading it back
                # from the index (where it still is) as well as putting it back here
                self.refill()
            delivering.pop(mid, None)
            ref.consumer = None
            if dropped:
                removals += dropped
                continue
            if self.horizon is not None and lane_in(ref.order) > lane_in(self.horizon):
                self._behind_horizon(ref)  # still beyond what RAM holds: its place in key order
            else:
                ref.in_queue = True
                self.ready.appendleft(ref)  # the head of its priority (Artemis addHead)
                self.returned_ahead = True
                if ref.journaled and self.horizon is not None and ref.order > self.horizon:
                    self.ahead.add(ref.msg.mid)
                if self.selections:
                    offer(self.selections, ref, at_head=True)
            for policy in self.policies:
                removals += self._take_off(policy.after_add(self, ref, now_ms))
        return removals

    def settle(self, ref: MessageRef) -> None:
        """Remove a reference in delivery for good (acked, rejected...); the broker then
        drops the message's reference count."""
        delivering, mid = self.delivering, ref.msg.mid
        if mid in delivering:
            del delivering[mid]
        ref.consumer = None
        if self.ahead:
            self.ahead.discard(ref.msg.mid)

    def info(self) -> QueueInfo:
        """The management view. On a non-destructive queue, ``delivering_count`` counts the
        deliveries its consumers hold unacked (the messages stay on the queue), as Artemis's
        deliveringCount does."""
        delivering = len(self.delivering) if not self.non_destructive else \
            sum(len(c.unacked) for c in self.consumers)
        return QueueInfo.of(self.config, self.message_count(), delivering,
                            self.scheduled.count(), len(self.consumers), self.added,
                            self.acknowledged, self.killed, self.expired, self.paged.count(),
                            self.replaced)
