"""Consumer selectors on a queue: each selecting consumer's target list (ActiveMQ massive queues).

A consumer created with a selector (``Session.create_consumer(queue, selector=...)``) receives
only the messages its filter expression matches (``engine.filters.expression``), oldest of the
highest priority first; the others stay on the queue for other consumers, as an Artemis consumer
with a filter leaves what it does not match in place. Seed 003_918a368c90474e3e.txt asks that a
consumer with a selector on a massive queue not scan the backlog again for every delivery: it
keeps a target list of the messages that matched it. Here a ``Selection`` is that list, in
two parts that follow the queue's own split between RAM and the live index
(``engine.queues.queue.Queue``):

- ``targets``: the references in RAM that match, in queue order. A reference is offered to
  every selection when it enters RAM (it arrives, is read back from the index, comes back
  from a delivery, comes due, replaces another in place); an entry whose reference left the
  queue since (taken by another consumer, removed by a policy, paged out) is dropped when met.
- ``scanned``: per priority lane, the order key up to which the references the index holds
  after the queue's horizon were examined; rows up to it are not read again. A reference
  that goes back to the index behind that point (paged out, returned behind the horizon) and
  matches moves it back to just before itself.

So each reference is tested against a selector once per trip into RAM or past the scan
point, not once per delivery: the cost of a delivery does not grow with the backlog the
selector skips. Not journaled: consumers do not survive a restart.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol, Set, Tuple

from ..filters.expression import Filter
from .lanes import Lanes
from ..paging.memory import IndexReader, StoredMessage
from .refs import MessageRef, Order, below, lane_in

__all__ = ["Selection"]

Row = Tuple[StoredMessage, Order, int]


class Queue(Protocol):
    """What a selection reads of its queue (``engine.queues.queue.Queue``, which imports this
    module): its parts in RAM, the index after its horizon, what it holds elsewhere."""

    id: int
    ready: Lanes
    tail: Lanes
    horizon: Optional[Order]
    on_disk: int
    reader: Optional[IndexReader]
    delivering: Dict[int, MessageRef]
    ahead: Set[int]
    paged: Any
    selections: List[Any]

    @property
    def non_destructive(self) -> bool: ...

    def refill(self) -> None: ...

    def take_ref(self, ref: MessageRef) -> None: ...

    def take_row(self, msg: StoredMessage, order: Order, delivered: int) -> MessageRef: ...
SCAN_CHUNK = 256  # most index rows read at once while looking for a match
MIN_CHUNK = 16
PRUNE_AT = 256  # targets kept before entries that left the queue are dropped in one pass


class Selection:
    """One selecting consumer's view of its queue (guarded by the broker lock).

    Attributes:
        filter: the compiled selector.
        targets: matching references in RAM, in queue order (some may have left the queue).
        scanned: lane -> order key of the last index row examined in that lane.
    """

    __slots__ = ("filter", "targets", "scanned", "_limit", "_chunk")

    def __init__(self, flt: Filter) -> None:
        self.filter = flt
        self.targets = Lanes()
        self.scanned: Dict[int, Order] = {}
        self._limit = PRUNE_AT
        self._chunk = MIN_CHUNK  # rows to read at once: about how far the last match was

    def attach(self, queue: Queue) -> None:
        """Start on ``queue``: its references in RAM are examined now, the index's as
        needed."""
        for part in (queue.ready, queue.tail):
            for ref in part:
                if self.filter.matches(ref.msg):
                    self.targets.append(ref)
        queue.selections.append(self)

    def detach(self, queue: Queue) -> None:
        """Stop (the consumer closed)."""
        if self in queue.selections:
            queue.selections.remove(self)

    # -- what the queue tells it ---------------------------------------------------------------
    def entered(self, ref: MessageRef, at_head: bool) -> None:
        """``ref`` came into RAM on the queue: at the head of its lane (``at_head``: it came
        back from a delivery, Artemis addHead) or in key order."""
        if self.filter.matches(ref.msg):
            if at_head:
                self.targets.appendleft(ref)
            else:
                self.targets.insert_ordered(ref)
            if len(self.targets) > self._limit:
                self._prune()

    def _prune(self) -> None:
        """Drop the entries whose references left the queue (taken by other consumers,
        removed, paged out), so the list stays within twice what is live (amortized)."""
        self.targets = Lanes(ref for ref in self.targets if ref.in_queue)
        self._limit = max(PRUNE_AT, 2 * len(self.targets))

    def to_index(self, ref: MessageRef) -> None:
        """``ref`` went to the index (left RAM): if the scan passed its place and it matches,
        the scan goes back to just before it."""
        lane = lane_in(ref.order)
        mark = self.scanned.get(lane)
        if mark is not None and ref.order <= mark and self.filter.matches(ref.msg):
            self.scanned[lane] = below(ref.order)

    # -- taking --------------------------------------------------------------------------------
    def take(self, queue: Queue) -> Optional[MessageRef]:
        """Take the first reference of ``queue`` the selector matches, in queue order, off the
        queue (the caller puts it in delivery); ``None`` when none is ready. The queue's head
        is read into RAM first when it is empty, as for any consumer."""
        if not queue.ready:
            queue.refill()
        ref = self._first_target()
        if queue.horizon is not None and queue.on_disk > 0 and queue.reader is not None and \
                (ref is None or ref.order > queue.horizon):
            row = self._scan(queue, None if ref is None else ref.order)
            if row is not None:
                return queue.take_row(*row)
        if ref is None:
            return None
        self.targets.popleft()
        queue.take_ref(ref)
        return ref

    def _first_target(self) -> Optional[MessageRef]:
        targets = self.targets
        while targets:
            ref = targets[0]
            if ref.in_queue:
                return ref
            targets.popleft()
        return None

    def _scan(self, queue: Queue, bound: Optional[Order]) -> Optional[Row]:
        """The first index row after the horizon that the selector matches and nobody holds,
        before ``bound`` when given; rows examined move ``scanned`` on."""
        assert queue.reader is not None and queue.horizon is not None
        paged_from = queue.paged.start()
        pos: Order = queue.horizon
        examined = 0
        while True:
            lane = lane_in(pos)
            mark = self.scanned.get(lane)
            if mark is not None and mark > pos:
                pos = mark
            want = self._chunk  # (rows past a match are read again by the next scan)
            rows = queue.reader.read(queue.id, (pos[0], pos[1]), want)
            crossed = False
            for row in rows:
                order = row[1]
                if (bound is not None and order >= bound) or \
                        (paged_from is not None and order >= paged_from):
                    return None
                if lane_in(order) != lane:  # the next lane: its own scan point applies
                    pos = below(order)
                    crossed = True
                    break
                pos = order
                self.scanned[lane] = order
                examined += 1
                mid = row[0].mid
                if mid in queue.delivering or mid in queue.ahead:
                    continue
                if self.filter.matches(row[0]):
                    self._chunk = max(MIN_CHUNK, min(SCAN_CHUNK, examined))
                    return row
            if not crossed and len(rows) < want:
                return None
            self._chunk = min(SCAN_CHUNK, self._chunk * 2)  # no match yet: read further


def offer(selections: List[Selection], ref: MessageRef, at_head: bool = False) -> None:
    """Tell every selection that ``ref`` came into RAM."""
    for sel in selections:
        sel.entered(ref, at_head)


def to_index(selections: List[Selection], ref: MessageRef) -> None:
    """Tell every selection that ``ref`` went back to the index."""
    for sel in selections:
        sel.to_index(ref)
