"""Qpid queue size limits and their policies (Qpid queues "Controlling queue size").

A queue declared with ``max_count`` or ``max_size`` (``QueueConfig``) holds at most that many
messages or body bytes. What it holds is every message routed to it and not yet settled: ready,
acquired and not accepted, scheduled, and paged with its address (Qpid counts every enqueued
message until it is dequeued). A message that would take it past a limit meets the queue's
``PolicyType``:

- ``reject``: ``QueueFullError``, nothing of the send stored;
- ``flow_to_disk``: the message is stored paged (``engine.routing.depage``): its content is on disk
  only until the queue drains, for durable and non-durable messages alike;
- ``ring``: the oldest messages the queue holds (in send order, as Qpid's queue positions),
  ready or in delivery, are removed (journaled as evicted, in the send's own record) until the
  new one fits; one larger than ``max_size`` alone is refused;
- ``ring_strict``: as ``ring``, but when the oldest is in delivery the send is refused.

Scheduled and paged messages count but a ring never removes them: when only they are left to
remove, the send is refused. Exactly at a limit is allowed (Qpid: ``count + 1 > max_count``
is over).

A send is checked whole before anything is placed (``plan``): a send to several queues
(multicast), a ``send_many`` or a transaction fails whole when one message breaks one queue's
limit, and the ring evictions it makes are decided then, in the same order ``make_room``
carries them out while placing. The broker's own moves (dead letters, expiry) are not
checked, as with the address-full policies, but rings still make room for them.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from ..errors import QueueFullError
from ..model import Message, PolicyType, QueueConfig
from .queue import MessageRef, Queue
from .scheduledbuffer import SCHED_PROPERTY, scheduled_time
from mqstore.recovery.schema import AckReason

Removal = Tuple[MessageRef, str]
RINGS = (PolicyType.RING, PolicyType.RING_STRICT)


def over(config: QueueConfig, messages: int, size: int) -> Optional[str]:
    """The limit ``config`` puts below ``messages`` held with ``size`` body bytes
    (``"max_count"`` or ``"max_size"``), or ``None``."""
    if 0 < config.max_count < messages:
        return "max_count"
    if 0 < config.max_size < size:
        return "max_size"
    return None


def _oldest_first(queue: Queue, want: int) -> Tuple[List[MessageRef], bool]:
    """The references a ring may remove, oldest (smallest order key) first, as placement will
    meet them: the ready ones and those in delivery; at least ``want`` of them when the queue
    has that many. Also whether that is all of them. The ready ones are read from the index as
    far as needed; all of them when some were put back at the head out of order."""
    if queue.returned_ahead:
        want = queue.ready_count() + 1
    ready = sorted(queue.ready_refs(want), key=lambda r: r.order)
    complete = len(ready) >= queue.ready_count()
    delivering = sorted(queue.delivering.values(), key=lambda r: r.order)
    if not complete and ready:  # a reference in delivery after the last read may not be next
        delivering = [r for r in delivering if r.order < ready[-1].order]
    out: List[MessageRef] = []
    i = j = 0
    while i < len(ready) or j < len(delivering):
        if j >= len(delivering) or (i < len(ready) and ready[i].order <= delivering[j].order):
            out.append(ready[i])
            i += 1
        else:
            out.append(delivering[j])
            j += 1
    return out, complete


class _Room:
    """One limited queue while a send is planned: what it holds, and (rings) what it can
    remove next."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.config = queue.config
        self.policy = queue.config.effective_policy
        self.messages = queue.message_count()
        self.size = queue.held_bytes
        self.existing: Deque[MessageRef] = deque()  # read as far as needed
        self.complete = False  # ``existing`` holds every removable one left
        self.read = 0  # removable ones read so far
        self.added: Deque[int] = deque()  # body sizes of the send's removable messages

    def fail(self, limit: str, why: str = "") -> QueueFullError:
        return QueueFullError(self.queue.name, limit, self.policy.value, why)

    def add(self, size: int, removable: bool) -> bool:
        """One more message of ``size`` body bytes; ``removable``: it will be ready on the
        queue (not paged nor scheduled). Returns whether the queue pages it (flow_to_disk).

        Raises:
            QueueFullError: the policy refuses it.
        """
        limit = over(self.config, self.messages + 1, self.size + size)
        paged = False
        if limit is not None:
            if self.policy == PolicyType.REJECT:
                raise self.fail(limit)
            if self.policy == PolicyType.FLOW_TO_DISK:
                paged = True
            else:
                self._evict(size)
        self.messages += 1
        self.size += size
        if removable and not paged and self.policy in RINGS:
            self.added.append(size)
        return paged

    def _evict(self, size: int) -> None:
        if self.config.max_size > 0 and size > self.config.max_size:
            raise self.fail("max_size", f": a message of {size} bytes cannot fit a ring of "
                                        f"{self.config.max_size}")
        while True:
            limit = over(self.config, self.messages + 1, self.size + size)
            if limit is None:
                return
            if not self.existing and not self.complete:
                refs, self.complete = _oldest_first(self.queue, max(16, 2 * self.read))
                self.existing = deque(refs[self.read:])
                self.read = len(refs)
                self.complete = self.complete or not self.existing
            if self.existing:
                ref = self.existing.popleft()
                if ref.consumer is not None and self.policy == PolicyType.RING_STRICT:
                    raise self.fail(limit, ": its oldest message is in delivery and not yet "
                                           "accepted (ring_strict)")
                gone = ref.msg.size
            elif self.added:
                gone = self.added.popleft()
            else:
                raise self.fail(limit, ": what it holds is scheduled or paged, which a ring "
                                       "does not remove")
            self.messages -= 1
            self.size -= gone


def _any_limited(routed: Sequence[Any]) -> bool:
    """Whether a queue of ``routed`` has a Qpid limit (each queue list looked at once when
    the messages share it, ``engine.routing.route.route_many``)."""
    last = None
    for (_addr, queues), _msg in routed:
        if queues is not last:
            last = queues
            for q in queues:
                if q.limited:
                    return True
    return False


def plan(routed: Sequence[Tuple[Tuple[Any, List[Queue]], Message]], paged: Sequence[bool],
         now_ms: int) -> List[bool]:
    """Check a send's messages against their queues' limits, in order, as placing them will
    (``make_room``), and say which ones are paged.

    Args:
        routed: ((address, queues), message) per message, in send order. paged: for each,
            whether the address-full policies page it. now_ms: the broker's clock (a message
            due later is scheduled: it counts, a ring does not remove it).

    Returns:
        Per message, whether it is paged: its address pages it, a flow_to_disk queue of it is
        full, or an earlier message of the same address is paged (paging goes on in order).

    Raises:
        QueueFullError: a queue's policy refuses a message; nothing was changed.
    """
    out = list(paged)
    if not _any_limited(routed):
        return out  # the common case: no queue of the send has a limit
    rooms: Dict[int, _Room] = {}
    paging: set = set()
    for i, ((addr, queues), msg) in enumerate(routed):
        size = len(msg.body)
        for q in queues:  # the policies that decide whether it pages come first
            if q.config.limited and q.config.effective_policy not in RINGS:
                room = rooms.get(q.id) or rooms.setdefault(q.id, _Room(q))
                out[i] = room.add(size, False) or out[i]
        at = scheduled_time(msg.scheduled_delivery_time, msg.delivery_delay,
                            msg.properties.get(SCHED_PROPERTY), now_ms)
        if addr.name in paging:
            out[i] = True
        out[i] = out[i] and not at  # a scheduled message waits in its buffer, never paged
        if out[i]:
            paging.add(addr.name)
        for q in queues:
            if q.config.limited and q.config.effective_policy in RINGS:
                room = rooms.get(q.id) or rooms.setdefault(q.id, _Room(q))
                room.add(size, not out[i] and not at)
    return out


def make_room(queue: Queue, size: int, evicted_bytes: int) -> List[Removal]:
    """Before a message of ``size`` body bytes joins ring queue ``queue`` (ready, paged or
    scheduled): remove its oldest messages until it fits, as ``plan`` decided. The ready
    ones are detached at once, those in delivery leave ``queue.delivering`` (their consumer's
    later ack does nothing). ``evicted_bytes``: the bytes of what this placement removed from
    the queue so far (still counted in ``held_bytes`` until forgotten).

    Returns:
        The removals, each with ``AckReason.EVICTED``, for the caller to journal and forget.
    """
    config = queue.config
    if not config.limited or config.effective_policy not in RINGS:
        return []
    out: List[Removal] = []
    messages, held = queue.message_count(), queue.held_bytes - evicted_bytes
    delivering = sorted(queue.delivering.values(), key=lambda r: r.order)
    while over(config, messages + 1, held + size) is not None:
        head = queue.first()
        if head is not None and queue.returned_ahead:  # released ones are not in key order
            head = min(queue.ready, key=lambda r: r.order)
        ref = delivering[0] if delivering and (head is None or
                                               delivering[0].order < head.order) else head
        if ref is None:  # ``plan`` refused this already: nothing to remove
            break
        if ref is head:
            queue.detach(ref)
        else:
            delivering.pop(0)
            queue.delivering.pop(ref.msg.mid, None)
        out.append((ref, AckReason.EVICTED.value))
        messages -= 1
        held -= ref.msg.size
    return out


def count_held_bytes(queue: Queue) -> None:
    """At open: ``queue.held_bytes`` from the index (every reference of the queue, scheduled
    ones too). Reads the whole queue: done for queues with a size limit only."""
    if queue.reader is None:
        return
    total, after, left = 0, None, queue.reader.count(queue.id)
    while left > 0:
        rows = queue.reader.read(queue.id, after, min(1024, left))
        if not rows:
            break
        total += sum(msg.size for msg, _order, _n in rows)
        left -= len(rows)
        after = rows[-1][1]
    ref = None
    while True:
        due = queue.reader.scheduled(queue.id, None, 1024, ref)
        if not due:
            break
        total += sum(msg.size for msg, _r in due)
        ref = due[-1][1]
    queue.held_bytes = total
