"""A queue's scheduled buffer (Artemis ring queues §3): messages sent for later
delivery wait here, off the queue, until they are due.

A durable reference (a durable message on a durable queue) is held by the live index's
``sched`` table, in due order (``recovery.image``): RAM holds none of them, only the earliest
due time, so a million scheduled messages cost RAM for none of them. A reference journaled
nowhere waits in a heap in RAM, held in the message cache (charged to the budget) like any
reference in RAM. ``due`` hands out both kinds, merged in due order (equal times in send
order); ``engine.scheduling.due`` puts them on the head of the queue.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, List, Optional, Tuple

from ..paging.memory import IndexReader, MessageCache
from .refs import MessageRef

_numbers = itertools.count(1).__next__
SCHED_PROPERTY = "_AMQ_SCHED_DELIVERY"  # Artemis: the scheduled delivery time, ms since epoch


def scheduled_time(at: int, delay: int, property_at: object, now: int) -> int:
    """When a message sent at ``now`` is due (ms since the epoch), or 0 when it is not
    scheduled: ``at`` when set, else the Artemis property ``_AMQ_SCHED_DELIVERY`` (an int)
    when given, else ``now + delay`` when ``delay`` > 0. A time not after ``now`` is not
    scheduled (Artemis delivers it at once)."""
    when = at
    if not when and type(property_at) is int and property_at > 0:
        when = property_at
    if not when and delay > 0:
        when = now + delay
    return when if when > now else 0


class ScheduledBuffer:
    """The scheduled references of one queue (guarded by the broker lock).

    Args:
        queue: the queue (the ``MessageRef``s built here point to it).
        cache: the broker's message cache.
        reader: reads the durable part from the live index (``None``: a queue journaled
            nowhere, whose buffer is all in RAM).
    """

    def __init__(self, queue: Any, cache: MessageCache, reader: Optional[IndexReader]) -> None:
        self.queue = queue
        self.cache = cache
        self.reader = reader
        self.heap: List[Tuple[int, int, MessageRef]] = []  # (due ms, number, reference)
        self._first: Optional[int] = None  # earliest due time of the durable part
        self._known = reader is None

    def count(self) -> int:
        """Scheduled references (Artemis scheduledCount)."""
        durable = self.reader.scheduled_count(self.queue.id) if self.reader is not None else 0
        return durable + len(self.heap)

    def add(self, ref: MessageRef, at: int) -> None:
        """Hold ``ref`` (journaled nowhere) until ``at`` ms since the epoch."""
        self.cache.hold(ref.msg)
        heapq.heappush(self.heap, (at, _numbers(), ref))

    def added_durable(self, at: int) -> None:
        """A durable reference due at ``at`` joined the index's part."""
        if self._known and (self._first is None or at < self._first):
            self._first = at

    def next_due(self) -> Optional[int]:
        """The earliest due time (ms since the epoch), or ``None`` when empty."""
        if not self._known:  # read once after each change (a receive asks every time)
            assert self.reader is not None
            first = self.reader.scheduled(self.queue.id, None, 1) \
                if self.reader.scheduled_count(self.queue.id) else []
            self._first = first[0][1].at if first else None
            self._known = True
        mem = self.heap[0][0] if self.heap else None
        if mem is None or (self._first is not None and self._first <= mem):
            return self._first
        return mem

    def due(self, now: int, limit: int) -> List[Tuple[int, MessageRef]]:
        """Take up to ``limit`` references due at ``now`` ms at the latest, in due order
        (equal times in order-key order): ``(due time, reference)`` each, its message held in
        the cache. Durable ones stay in the index until the caller's DUE record is folded."""
        out: List[Tuple[int, MessageRef]] = []
        if self.reader is not None and self.reader.scheduled_count(self.queue.id):
            for msg, r in self.reader.scheduled(self.queue.id, now, limit):
                ref = MessageRef(msg, self.queue, r.order, r.delivery_count, journaled=True)
                self.cache.hold(msg)
                out.append((r.at, ref))
            self._known = False
        popped = 0
        while self.heap and self.heap[0][0] <= now and popped < limit:
            at, _n, ref = heapq.heappop(self.heap)
            out.append((at, ref))
            popped += 1
        out.sort(key=lambda item: (item[0], item[1].order))
        keep, back = out[:limit], out[limit:]
        for at, ref in back:  # over the limit: the transient ones wait again
            if ref.journaled:
                self.cache.let_go(ref.msg, gone=False)
            else:
                heapq.heappush(self.heap, (at, _numbers(), ref))
        return keep

    def take(self, mid: int) -> Optional[Tuple[int, MessageRef]]:
        """Take message ``mid``'s reference out of the buffer (management), its message held
        in the cache: ``(due time, reference)``, or ``None`` when it is not scheduled here."""
        for i, (at, _n, ref) in enumerate(self.heap):
            if ref.msg.mid == mid:
                self.heap.pop(i)
                heapq.heapify(self.heap)
                return at, ref
        if self.reader is None:
            return None
        found = self.reader.scheduled_ref(self.queue.id, mid)
        if found is None:
            return None
        msg, r = found
        self.cache.hold(msg)
        self._known = False
        return r.at, MessageRef(msg, self.queue, r.order, r.delivery_count, journaled=True)

    def listing(self, limit: int) -> List[Tuple[int, MessageRef]]:
        """Up to ``limit`` scheduled references in due order, ``(due time, reference)``
        each, taken out of nothing (management's list; messages not held)."""
        out: List[Tuple[int, MessageRef]] = []
        if self.reader is not None:
            for msg, r in self.reader.scheduled(self.queue.id, None, limit):
                out.append((r.at, MessageRef(msg, self.queue, r.order, r.delivery_count,
                                             journaled=True)))
        out += [(at, ref) for at, _n, ref in heapq.nsmallest(limit, self.heap)]
        out.sort(key=lambda item: (item[0], item[1].order))
        return out[:limit]

    def changed(self) -> None:
        """The durable part changed other than by ``added_durable`` (read it again)."""
        if self.reader is not None:
            self._known = False

    def drop(self) -> List[MessageRef]:
        """Empty the RAM part (the queue is deleted): the references it held."""
        refs = [ref for _at, _n, ref in self.heap]
        self.heap = []
        return refs


__all__ = ["SCHED_PROPERTY", "ScheduledBuffer", "scheduled_time"]
