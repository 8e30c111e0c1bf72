"""A queue's paged references: routed to it while its address pages, not on the queue yet.

Seed 000 §4: "paged messages don't count against a ring queue's size because messages are
actually paged at the address level, not the queue level. A paged message is not technically
on a queue although it is reflected in a queue's messageCount." A queue's paged references
come after all its other references in queue order (once an address pages, every message sent
to it pages until none is left), so they join the queue, in order, at its tail
(``engine.depage``).

Journaled ones are held by the index only (the live image knows which references are paged:
``recovery.image.PageState``). Those journaled nowhere (non-durable messages or queues) cannot
be read back from the index; they wait in RAM in order (their RAM is still charged to the
budget: writing them where a restart drops them, Qpid's flow_to_disk, is the next step).
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Deque, Iterator, List, Optional

from engine.paging import IndexReader, MessageCache
from engine.refs import MessageRef, Order, below


class PagedRefs:
    """The paged references of one queue (guarded by the broker lock).

    Args:
        qid: the queue's id. cache: messages held in RAM. reader: the live index (``None``
            for a queue journaled nowhere). start: the order key from which the address's
            journaled messages are paged (``None``: none is).

    Attributes:
        on_disk: journaled paged references, held by the index only.
        in_ram: paged references journaled nowhere, in queue order.
        incoming: paged references waiting for the write that gives them their order keys.
    """

    def __init__(self, qid: int, cache: MessageCache, reader: Optional[IndexReader],
                 start: Callable[[], Optional[Order]]) -> None:
        self.qid = qid
        self.start = start
        self.cache = cache
        self.reader = reader
        self.on_disk = 0
        self.in_ram: Deque[MessageRef] = deque()
        self.incoming: List[MessageRef] = []

    def count(self) -> int:
        """Paged references of the queue."""
        return self.on_disk + len(self.in_ram) + len(self.incoming)

    def add(self, ref: MessageRef) -> None:
        """A reference routed to the queue while its address pages (before its write)."""
        self.incoming.append(ref)
        self.cache.hold(ref.msg)

    def written(self) -> None:
        """The references added since the last call have their order keys: journaled ones
        leave RAM, the others wait in order."""
        for ref in self.incoming:
            if ref.journaled:
                self.on_disk += 1
                self.cache.budget.paged_out += 1
                self.cache.let_go(ref.msg)
            else:
                self.in_ram.append(ref)
        self.incoming = []

    def first(self, queue: object, limit: int, after: Optional[Order] = None
              ) -> List[MessageRef]:
        """Up to ``limit`` of the oldest paged references (after order key ``after`` when
        given), in order, as new references of ``queue`` for those the index holds (not held
        in RAM), merged with those waiting in RAM."""
        rows = []
        start = self.start()
        if self.on_disk > 0 and self.reader is not None and start is not None:
            begin = below(start)
            if after is not None and after > begin:
                begin = (after[0], after[1])
            rows = self.reader.read(self.qid, begin, min(limit, self.on_disk))
        out: List[MessageRef] = []
        mem: Iterator[MessageRef] = (r for r in self.in_ram if after is None or r.order > after)
        pending = next(mem, None)
        for msg, order, delivered in rows:
            while pending is not None and pending.order < order and len(out) < limit:
                out.append(pending)
                pending = next(mem, None)
            if len(out) >= limit:
                break
            out.append(MessageRef(msg, queue, order, delivered, journaled=True))
        while pending is not None and len(out) < limit:
            out.append(pending)
            pending = next(mem, None)
        return out

    def taken(self, ref: MessageRef) -> None:
        """``ref``, one of the oldest (``first``), is no longer paged."""
        if ref.journaled:
            self.on_disk -= 1
        else:
            self.in_ram.popleft()
            self.cache.let_go(ref.msg)  # the queue holds it again as it joins

    def drop(self) -> List[MessageRef]:
        """The queue is deleted: the references held in RAM (the caller releases them)."""
        out = list(self.in_ram) + self.incoming
        self.in_ram = deque()
        self.incoming = []
        self.on_disk = 0
        return out
