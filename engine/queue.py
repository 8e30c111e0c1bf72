"""Runtime queues: message references in order, deliveries in flight, waiting consumers.

A ``Queue`` is a state object; semantics that vary between queue flavours (ring, last-value,
non-destructive...) are small ``QueuePolicy`` objects composed into it, not subclasses. A policy
decides; the broker journals its decision as a fact (an ACK with a reason) so recovery never
re-decides. A queue holds ``MessageRef``s, each pointing to a shared ``StoredMessage``: a
multicast message is stored once and referenced from every queue it was routed to.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Deque, Dict, List, Optional, Protocol, Sequence, Tuple

from engine.model import Message, QueueConfig, QueueInfo, RoutingType
from recovery.image import MessageImage


class StoredMessage:
    """A message held by the broker (shared by its references).

    Attributes:
        mid: message id. address: where it was sent. durable: journaled on durable queues.
        properties, timestamp, expiration (ms since epoch, 0 never), priority.
        body: the bytes, or ``None`` when every queue it reached journals it: then it is
            read from the journal on demand (references separate from bodies; ``kept_body``).
        image: the image entry of a journaled message, else ``None``.
        refcount: references on queues (in-memory ones included).
    """

    __slots__ = ("mid", "address", "durable", "properties", "timestamp", "expiration",
                 "priority", "body", "image", "refcount")

    def __init__(self, mid: int, address: str, durable: bool, properties: Dict[str, Any],
                 timestamp: int, expiration: int, priority: int, body: Optional[bytes],
                 image: Optional[MessageImage] = None) -> None:
        self.mid = mid
        self.address = address
        self.durable = durable
        self.properties = properties
        self.timestamp = timestamp
        self.expiration = expiration
        self.priority = priority
        self.body = body
        self.image = image
        self.refcount = 0

    def to_message(self, body: bytes) -> Message:
        """A user-facing copy with ``body``."""
        return Message(body, dict(self.properties), self.durable, self.priority,
                       self.expiration, self.timestamp, self.mid, self.address)


def kept_body(body: bytes, journaled: Sequence[Any], queues: Sequence[Any]
              ) -> Optional[bytes]:
    """The body a ``StoredMessage`` keeps in memory: ``None`` when every queue reached journals
    the message (the body is read from its record), else ``body``. A queue that does not
    journal it (a non-durable queue, or a non-durable message) may still hold the message after
    the journaled references are settled and the record is reclaimed or compacted away."""
    return None if journaled and len(journaled) == len(queues) else body


class MessageRef:
    """One message on one queue.

    Attributes:
        msg: the shared message. queue: the queue. order: (LSN, slot) of the record that put
        it there (0, seq for in-memory ones). delivery_count: times handed to a consumer.
        consumer: the consumer holding it while in delivery, else ``None``.
        journaled: whether its state is in the journal (durable message on a durable queue).
        seq: arrival number on its queue. in_queue: whether it is on the ready list.
        taken: the broker-wide number of its last delivery (consumption order, as the LSNs
        of the DELIVERY records are).
    """

    __slots__ = ("msg", "queue", "order", "delivery_count", "consumer", "journaled", "seq",
                 "in_queue", "taken")

    def __init__(self, msg: StoredMessage, queue: "Queue", order: Tuple[int, int],
                 delivery_count: int = 0, journaled: bool = False) -> None:
        self.msg = msg
        self.queue = queue
        self.order = order
        self.delivery_count = delivery_count
        self.consumer: Any = None
        self.journaled = journaled
        self.seq = 0          # position in the queue's arrival order (non-destructive cursors)
        self.in_queue = False  # on the ready list
        self.taken = 0


class QueuePolicy(Protocol):
    """A composable queue behaviour (ring size, last value...; ``engine.policies``).

    ``before_add`` runs before a reference joins the tail, ``after_add`` after it joined the
    tail or went back to the head; both return the references to remove with the reason to
    journal. ``removed`` is told of every reference leaving the ready list. ``now_ms`` is
    passed in: policies never read the clock or touch files.
    """

    def before_add(self, queue: "Queue", ref: MessageRef, now_ms: int
                   ) -> List[Tuple[MessageRef, str]]: ...

    def after_add(self, queue: "Queue", ref: MessageRef, now_ms: int
                  ) -> List[Tuple[MessageRef, str]]: ...

    def removed(self, ref: MessageRef) -> None: ...


class Queue:
    """A queue's runtime state (guarded by the broker lock).

    Attributes:
        id: queue id (journal identity). config: its ``QueueConfig``.
        ready: references waiting for a consumer, head first.
        delivering: references handed out and not yet settled, by message id.
        consumers: open consumers. waiters: consumers blocked in receive, longest first.
        policies: composed ``QueuePolicy`` objects, applied in order.
    """

    def __init__(self, qid: int, config: QueueConfig) -> None:
        from engine.policies import build_policies
        self.id = qid
        self.config = config
        self.ready: Deque[MessageRef] = deque()
        self.delivering: Dict[int, MessageRef] = {}
        self.consumers: List[Any] = []
        self.waiters: Deque[Any] = deque()
        self.policies: List[QueuePolicy] = build_policies(config)
        self.added = 0
        self.acknowledged = 0
        self.killed = 0
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

    def message_count(self) -> int:
        """Messages on the queue, in delivery included (Artemis messageCount)."""
        return len(self.ready) + len(self.delivering)

    @property
    def non_destructive(self) -> bool:
        """Whether consuming leaves messages on the queue (seed 004 §4.9.6)."""
        return bool(self.config.non_destructive)

    def add_tail(self, ref: MessageRef, now_ms: int = 0) -> List[Tuple[MessageRef, str]]:
        """Append a new reference at the tail; return what the policies remove for it (the
        caller journals and detaches those)."""
        removals: List[Tuple[MessageRef, str]] = []
        for policy in self.policies:
            removals += self._take_off(policy.before_add(self, ref, now_ms))
        self.mem_seq += 1
        ref.seq = self.mem_seq
        ref.in_queue = True
        self.ready.append(ref)
        ref.msg.refcount += 1
        self.added += 1
        for policy in self.policies:
            removals += self._take_off(policy.after_add(self, ref, now_ms))
        return removals

    def _take_off(self, removals: List[Tuple[MessageRef, str]]
                  ) -> List[Tuple[MessageRef, str]]:
        """Detach what a policy removes at once, so its next decision sees the real queue."""
        for ref, _why in removals:
            self.detach(ref)
        return removals

    def load_tail(self, ref: MessageRef) -> None:
        """Append a recovered reference as it was: policies are not re-run (their decisions
        are in the journal), only their indexes learn of it."""
        self.mem_seq += 1
        ref.seq = self.mem_seq
        ref.in_queue = True
        self.ready.append(ref)
        ref.msg.refcount += 1
        for policy in self.policies:
            if hasattr(policy, "latest"):
                value = policy._value(ref)
                if value is not None:
                    policy.latest[value] = ref

    def sort_ready(self) -> None:
        """Put the ready list in order-key order (the journal order recovery loads in)."""
        self.ready = deque(sorted(self.ready, key=lambda ref: ref.order))

    def take(self) -> Optional[MessageRef]:
        """Pop the head reference, or ``None``."""
        if not self.ready:
            return None
        ref = self.ready.popleft()
        ref.in_queue = False
        return ref

    def peek_after(self, seq: int) -> Optional[MessageRef]:
        """The first ready reference that arrived after ``seq`` (non-destructive cursors)."""
        for ref in self.ready:
            if ref.seq > seq:
                return ref
        return None

    def detach(self, ref: MessageRef) -> None:
        """Take a reference off the ready list (a policy or expiry removed it)."""
        if ref.in_queue:
            self.ready.remove(ref)
            ref.in_queue = False
        for policy in self.policies:
            policy.removed(ref)

    def return_to_head(self, refs: List[MessageRef], now_ms: int = 0
                       ) -> List[Tuple[MessageRef, str]]:
        """Put cancelled or rolled-back references back at the head, in the reverse order of
        their consumption, so they come out again in the order consumed (seed
        000_721345e89d5d1b64.txt, Messages in Delivery & Rollbacks). Returns what the
        policies remove (a ring keeps the tail: the reference just put back goes)."""
        removals: List[Tuple[MessageRef, str]] = []
        for ref in reversed(refs):
            self.delivering.pop(ref.msg.mid, None)
            ref.consumer = None
            dropped = []
            for policy in self.policies:
                if hasattr(policy, "returned"):
                    dropped += policy.returned(ref)
            if dropped:
                removals += dropped
                continue
            ref.in_queue = True
            self.ready.appendleft(ref)
            for policy in self.policies:
                removals += self._take_off(policy.after_add(self, ref, now_ms))
        return removals

    def settle(self, ref: MessageRef) -> None:
        """Remove a reference in delivery for good (acked, rejected...); the broker then
        drops the message's reference count."""
        self.delivering.pop(ref.msg.mid, None)
        ref.consumer = None

    def info(self) -> QueueInfo:
        """The management view."""
        c = self.config
        return QueueInfo(c.name, c.address, RoutingType(c.routing_type), c.durable,
                         self.message_count(), len(self.delivering), 0, len(self.consumers),
                         self.added, self.acknowledged, self.killed, self.expired,
                         c.max_consumers, bool(c.exclusive), c.auto_created,
                         -1 if c.ring_size is None else c.ring_size, c.last_value_key,
                         bool(c.non_destructive))
