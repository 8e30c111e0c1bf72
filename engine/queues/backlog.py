"""A queue's backlog in the live index: paging references out of RAM, reading them back in queue
order (refill), and reading past the head for browsers and management (ActiveMQ massive
queues, seed 003: a queue's RAM holds its head under one budget; the rest stays in the index).

``QueueBacklog`` is a mixin of ``engine.queues.queue.Queue`` (kept apart to keep each module to
one subject): while a queue pages (``horizon`` set), every journaled reference with an order key
up to ``horizon`` is in RAM and the ``on_disk`` ones after it are read back in order;
references that arrive meanwhile wait in ``tail`` until their write, then leave RAM (journaled
ones) or stay there in order (those not journaled).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

from ..paging.memory import IndexReader, MessageCache, StoredMessage
from .lanes import Lanes
from .paged import PagedRefs
from .refs import MessageRef, Order, below
from .selection import offer, to_index


class QueueBacklog:
    """Paging and reading back a queue's references (see the module docstring); the
    ``Queue`` sets the attributes below."""

    id: int
    cache: MessageCache
    reader: Optional[IndexReader]
    ready: Lanes
    tail: Lanes
    on_disk: int
    horizon: Optional[Order]
    delivering: Dict[int, MessageRef]
    selections: List[Any]
    paged: PagedRefs
    returned_ahead: bool
    ahead: set

    @property
    def pageable(self) -> bool:  # Queue's
        raise NotImplementedError

    def _enter(self, ref: MessageRef, into: Optional[Lanes] = None) -> None: ...  # Queue's

    def detach(self, ref: MessageRef) -> None: ...  # Queue's

    def ready_count(self) -> int:  # Queue's
        raise NotImplementedError

    def written(self) -> None:
        """After the write that gave new references their order keys: while the queue pages,
        those that arrived meanwhile leave RAM (journaled) or stay in order (not journaled);
        then, when the RAM budget is exceeded or the head holds more than ``head_max``
        references, the newest journaled references at the tail leave RAM and the queue
        starts paging."""
        budget = self.cache.budget
        self.paged.written()
        if self.horizon is not None:
            kept = Lanes()
            for ref in self.tail:
                if ref.journaled:
                    self._page_out(ref)
                else:
                    kept.append(ref)
            self.tail = kept
        while self.pageable and len(self.ready) > budget.min_head and \
                (budget.over() or len(self.ready) > budget.head_max):
            ref = self._pop_newest()
            if ref is None:
                break
            if ref.journaled:
                self._page_out(ref)
                bound = below(ref.order)
            else:  # it cannot leave RAM: it waits in the tail, behind what went to the index
                self.tail.put_in_order(ref)  # (in key order: one a selector took from the
                # tail may have come back to the head)
                bound = (ref.order[0], ref.order[1])
            self.horizon = bound if self.horizon is None else min(self.horizon, bound)

    def _pop_newest(self) -> Optional[MessageRef]:
        """Take the last ready reference off the ready list to page it out, when it has the
        greatest order key there (the index gives back what follows the horizon in key
        order). References returned to the head (cancel, rollback) come out in the order
        they went back, not in key order: until the list was empty again, the last one may
        not be the newest, and then nothing leaves (RAM holds those already charged)."""
        if self.returned_ahead and any(r.order > self.ready[-1].order for r in self.ready):
            return None
        return self.ready.pop()

    def page_out_head(self) -> None:
        """Send every journaled reference at the head back to the index (at open, after the
        deliveries a crash left open came back: the index has them in queue order)."""
        if not self.pageable or not self.ready:
            return
        kept = Lanes(ref for ref in self.ready if not ref.journaled)
        out = [ref for ref in self.ready if ref.journaled]
        for ref in out:
            self._page_out(ref)
        self.ready = kept
        if out:  # the index is read from before the first of them again (a refill during
            # the returns, for a ring's eviction, may have moved the horizon past them)
            low = below(min(ref.order for ref in out))
            self.horizon = low if self.horizon is None else min(self.horizon, low)

    def _page_out(self, ref: MessageRef) -> None:
        ref.in_queue = False
        if self.ahead:  # the index gives it back in its place from now on
            self.ahead.discard(ref.msg.mid)
        self.on_disk += 1
        self.cache.budget.paged_out += 1
        self.cache.let_go(ref.msg)
        if self.selections:
            to_index(self.selections, ref)

    def refill(self) -> None:
        """Read the next references from the index into the head (budget allowing), merged
        in order with those not journaled that wait in ``tail``; once the index has no more,
        the queue stops paging."""
        if not self.ready:
            self.returned_ahead = False
        if self.horizon is None or self.reader is None:
            return
        budget = self.cache.budget
        want = max(1, min(budget.refill_size(), budget.head_max - len(self.ready),
                          max(self.on_disk, 1)))
        rows = self._read(self.horizon, want) if self.on_disk > 0 else []
        loaded = 0
        for ref, from_index in self._merged(rows, self.tail):
            if from_index:
                self._enter(ref, self.ready)
                loaded += 1
            else:
                self.ready.append(ref)
        if rows:
            self.horizon = rows[-1][1]
        self.on_disk = self.on_disk - loaded if rows else 0
        self.cache.budget.paged_in += loaded
        if self.on_disk <= 0:  # the index has nothing more on the queue (paged ones aside)
            self.ready.extend(self.tail)
            self.tail = Lanes()
            self.horizon = None
            self.on_disk = 0
            self.ahead = set()

    def take_recovered(self, mid: int, order: Order, delivered: int) -> Optional[MessageRef]:
        """At open: put the reference to ``mid`` that a crash left in delivery back in
        delivery (from the head, or read from the index), so it can be cancelled as a close
        would have; ``None`` when the queue does not hold it."""
        if not self.pageable:
            ref = next((r for r in self.ready if r.msg.mid == mid), None)
            if ref is not None:
                self.detach(ref)
                self.delivering[mid] = ref
            return ref
        assert self.reader is not None
        msg = self.reader.message(mid)
        if msg is None:
            return None
        ref = MessageRef(msg, self, order, delivered, journaled=True)
        self.cache.hold(msg)
        self.on_disk -= 1
        self.delivering[mid] = ref
        return ref

    def ready_refs(self, want: int) -> List[MessageRef]:
        """Ready references in queue order, all of them or at least ``want``: the head in
        RAM, then the index's (read now, not held in RAM) merged with the tail."""
        out = self._browse_queue(None, want)
        if len(out) < want and len(out) < self.ready_count():  # the index had fewer: the tail
            out = self._browse_queue(None, self.on_disk + 1)
        return out

    def _behind_horizon(self, ref: MessageRef) -> None:
        """A reference comes back to a lane the queue reads from the index (lower priority
        than the horizon's): it goes back to its place in key order, the index's for a
        journaled one (read back from there), the tail's for another."""
        if ref.journaled:
            self.on_disk += 1
            self.cache.let_go(ref.msg)
            if self.selections:
                to_index(self.selections, ref)
        else:
            ref.in_queue = True
            self.tail.insert_ordered(ref)
            if self.selections:
                offer(self.selections, ref)

    def browse(self, after: Optional[Order], limit: int) -> List[MessageRef]:
        """References for a browser, in queue order: those on the queue, then the paged
        ones (Artemis browsers see paged messages too). With ``after`` ``None``: the whole
        head in RAM, then up to ``limit`` more; else up to ``limit`` after order key
        ``after``. References read from the index are not held in RAM. Empty when there are
        no more."""
        out = self._browse_queue(after, limit)
        if len(out) < limit and self.paged.count():
            last = out[-1].order if out else after
            out += self.paged.first(self, limit - len(out), last)
        return out

    def _browse_queue(self, after: Optional[Order], limit: int) -> List[MessageRef]:
        head = list(self.ready) if after is None else []
        if self.horizon is None or self.reader is None:
            return head + list(self.tail) if after is None else []
        start = self.horizon if after is None or after < self.horizon else after
        rows = self._read((start[0], start[1]), limit)
        paged_from = self.paged.start()
        if paged_from is not None:
            rows = [r for r in rows if r[1] < paged_from]
        tail = Lanes(r for r in self.tail if after is None or r.order > after)
        out = [ref for ref, _from_index in self._merged(rows, tail)]
        if len(rows) < limit:
            out += tail
        return head + out

    def _read(self, after: Order, want: int) -> List[Tuple[StoredMessage, Order, int]]:
        """Up to ``want`` rows of the queue from the index after order key ``after``, and more
        while every row read is one ``_merged`` passes over (in delivery, or returned ahead):
        a higher priority's references can take the horizon below lower-priority ones that
        were read and handed out already."""
        assert self.reader is not None
        rows = self.reader.read(self.id, after, want)
        out = rows
        while len(rows) == want and all(r[0].mid in self.delivering or r[0].mid in self.ahead
                                        for r in rows):
            rows = self.reader.read(self.id, rows[-1][1], want)
            out = out + rows
        return out

    def _merged(self, rows: List[Tuple[StoredMessage, Order, int]], tail: Lanes
                ) -> Iterator[Tuple[MessageRef, bool]]:
        """References read from the index (new objects, flagged True) merged in order with
        those of ``tail`` that come before each (taken off ``tail``); a reference in delivery
        is left out (its head went back to the index while it was handed out)."""
        for msg, order, delivered in rows:
            while tail and tail[0].order < order:
                yield tail.popleft(), False
            if msg.mid not in self.delivering and msg.mid not in self.ahead:
                yield MessageRef(msg, self, order, delivered, journaled=True), True
