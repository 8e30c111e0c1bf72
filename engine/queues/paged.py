"""A queue's paged references: routed to it while its address pages, not on the queue yet.

Seed 000 §4: "paged messages don't count against a ring queue's size because messages are
actually paged at the address level, not the queue level. A paged message is not technically
on a queue although it is reflected in a queue's messageCount." A queue's paged references
come after all its other references in queue order (once an address pages, every message sent
to it pages until none is left), so they join the queue, in order, at its tail
(``engine.routing.depage``).

They leave RAM: journaled ones are held by the index only (the live image knows which
references are paged: ``recovery.ledger``); those journaled nowhere (non-durable messages or
queues) go to the broker's page files (``engine.paging.pagefile``; Qpid's flow_to_disk), which a
restart drops with them. Only when a page file write fails does one wait in RAM.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple

from ..paging.pagefile import PageCursor, PagedEntry, PageFile
from ..paging.memory import IndexReader, MessageCache, StoredMessage
from .refs import MessageRef, Order, below


class PagedRefs:
    """The paged references of one queue (guarded by the broker lock).

    Args:
        qid: the queue's id. cache: messages held in RAM. reader: the live index (``None``
            for a queue journaled nowhere). start: the order key from which the address's
            journaled messages are paged (``None``: none is). pages: the broker's page
            files (``None``: references journaled nowhere stay in RAM).

    Attributes:
        on_disk: journaled paged references, held by the index only.
        cursor: where the queue reads the page files, and how many of its references are
            there.
        in_ram: paged references journaled nowhere that a page file could not take, in order.
        incoming: paged references waiting for the write that gives them their order keys.
    """

    def __init__(self, qid: int, cache: MessageCache, reader: Optional[IndexReader],
                 start: Callable[[], Optional[Order]], pages: Optional[PageFile] = None
                 ) -> None:
        self.qid = qid
        self.start = start
        self.cache = cache
        self.reader = reader
        self.pages = pages
        self.on_disk = 0
        self.cursor = PageCursor()
        self.in_ram: Deque[MessageRef] = deque()
        self.incoming: List[MessageRef] = []
        self._read: Dict[int, PagedEntry] = {}
        # where a browser's last chunk stopped: (its last order key, the queue's cursor then,
        # page, offset, entries of the queue passed from that cursor)
        self._resume: Optional[Tuple[Order, Tuple[int, int], int, int, int]] = None

    def count(self) -> int:
        """Paged references of the queue."""
        return self.on_disk + self.cursor.ahead + len(self.in_ram) + len(self.incoming)

    def add(self, ref: MessageRef) -> None:
        """A reference routed to the queue while its address pages (before its write)."""
        self.incoming.append(ref)
        self.cache.hold(ref.msg)

    def written(self) -> None:
        """The references added since the last call have their order keys: journaled ones
        leave RAM, the others wait in order (unless ``spill`` moved them to a page file)."""
        for ref in self.incoming:
            if ref.journaled:
                self.on_disk += 1
                self.cache.budget.paged_out += 1
                self.cache.let_go(ref.msg)
            else:
                self.in_ram.append(ref)
        self.incoming = []

    def spilled(self, ref: MessageRef) -> None:
        """``ref`` (not journaled, still incoming) was written to a page file: it leaves
        RAM."""
        self.incoming.remove(ref)
        self.cursor.ahead += 1
        self.cache.budget.paged_out += 1
        self.cache.let_go(ref.msg, gone=False)

    def first(self, queue: object, limit: int, after: Optional[Order] = None
              ) -> List[MessageRef]:
        """Up to ``limit`` of the oldest paged references (after order key ``after`` when
        given), in order, as new references of ``queue`` (not held in RAM yet), read from the
        index (from the address's paging start on) and the page files, merged with those
        waiting in RAM."""
        self._read = {}
        out: List[MessageRef] = []
        start = self.start()
        if self.on_disk > 0 and self.reader is not None and start is not None:
            begin = below(start)
            if after is not None and after > begin:
                begin = (after[0], after[1])
            out += [MessageRef(msg, queue, order, delivered, journaled=True) for msg, order,
                    delivered in self.reader.read(self.qid, begin, min(limit, self.on_disk))]
        if self.cursor.ahead and self.pages is not None:
            cursor, passed = self.cursor, 0
            here = (self.cursor.page, self.cursor.offset)
            if after is not None and self._resume is not None and \
                    self._resume[:2] == (after, here):
                # a browser's next chunk, the queue's cursor unmoved: go on where it stopped
                _after, _here, page, offset, passed = self._resume
                cursor = PageCursor(page, offset, self.cursor.ahead - passed)
            entries = self.pages.read(self.qid, cursor, limit, after)
            if not entries and after is None:  # the rest of its count did not read back
                self.cursor.ahead -= self.pages.lost_between(self.qid, self.cursor.page)
            for e in entries:
                ref = MessageRef(e.msg, queue, e.order)
                self._read[id(ref)] = e
                out.append(ref)
            if entries:
                last = entries[-1]
                self._resume = (last.order, here, last.after[0], last.after[1],
                                passed + last.seen)
        out += [r for r in self.in_ram if after is None or r.order > after][:limit]
        out.sort(key=lambda r: r.order)
        return out[:limit]

    def taken(self, ref: MessageRef) -> None:
        """``ref``, one of the oldest (``first``, in order), is no longer paged."""
        entry = self._read.pop(id(ref), None)
        if entry is not None:
            assert self.pages is not None
            was = self.cursor.page
            self.cursor.page, self.cursor.offset = entry.after
            self.cursor.ahead -= 1
            self.pages.passed(entry, self.qid)
            if entry.page > was:  # entries of it in the pages it read past did not read back
                self.cursor.ahead -= self.pages.lost_between(self.qid, was, entry.page)
        elif ref.journaled:
            self.on_disk -= 1
        else:
            self.in_ram.popleft()
            self.cache.let_go(ref.msg)  # the queue holds it again as it joins

    def drop(self) -> List[MessageRef]:
        """The queue is deleted: the references held in RAM (the caller releases them); those
        in page files are passed, and a message no queue has paged any more is gone."""
        if self.cursor.ahead and self.pages is not None:
            for e in self.pages.read(self.qid, self.cursor, self.cursor.ahead):
                if self.pages.passed(e, self.qid, taken=False) and e.msg.refcount == 0:
                    self.cache.forget(e.msg)
            self.pages.lost_between(self.qid, self.cursor.page)  # what did not read back
        out = list(self.in_ram) + self.incoming
        self.in_ram = deque()
        self.incoming = []
        self.on_disk = 0
        self.cursor = PageCursor()
        return out


def spill(pages: Optional[PageFile], msg: StoredMessage, refs: Sequence[MessageRef]) -> None:
    """Write a paged message's references that are journaled nowhere (just written, so their
    order keys are known) to the page files, so they leave RAM; on a failed write they stay."""
    if pages is None or not refs or msg.body is None:
        return
    # RAM holds other references to it (copies on wildcard addresses' queues, never paged):
    # the page file must say it still has it paged when those go
    elsewhere = msg.refcount > len(refs)
    if pages.append(msg, msg.body, [(r.queue.id, r.order) for r in refs], elsewhere) is None:
        return
    for ref in refs:
        ref.queue.paged.spilled(ref)
