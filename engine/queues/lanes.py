"""Priority lanes: a queue's references in RAM, highest priority first, FIFO within one.

ActiveMQ Artemis keeps a queue's messages in a priority linked list (ten levels, JMS priority
0-9): a consumer gets the oldest message of the highest priority present, and a message put
back (a cancelled or rolled-back delivery) goes to the head of its own level. ``Lanes`` is that
list for ``engine.queues.queue.Queue``: one deque per lane, the lane being the top bits of a
reference's order key (``recovery.entries.lane_of``), so iterating the lanes in turn gives
the references in order-key order, the order the live index keeps them in. It offers the
deque operations the queue uses; a queue whose messages all have one priority has one lane.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import Any, Deque, Dict, Iterable, Iterator, List, Optional

from mqstore.recovery.entries import LANE_SHIFT, lane_in

__all__ = ["Lanes"]


class Lanes:
    """Message references in lanes (``lane_in(ref.order)``), each a deque in arrival order.

    Iteration, ``[0]`` and ``popleft`` go lane by lane from lane 0 (priority 9) up; ``[-1]``
    and ``pop`` take from the last lane. ``remove`` raises ``ValueError`` for a reference it
    does not hold, as ``deque.remove`` does. A reference's lane must not change while it is
    held (its order key's lane bits are fixed when it is placed).
    """

    __slots__ = ("_lanes", "_keys", "_len")

    def __init__(self, refs: Iterable[Any] = ()) -> None:
        self._lanes: Dict[int, Deque[Any]] = {}
        self._keys: List[int] = []  # lanes present, ascending (highest priority first)
        self._len = 0
        for ref in refs:
            self.append(ref)

    def _lane(self, lane: int) -> Deque[Any]:
        got = self._lanes.get(lane)
        if got is None:
            got = self._lanes[lane] = deque()
            bisect.insort(self._keys, lane)
        return got

    def _drop_if_empty(self, lane: int) -> None:
        if not self._lanes[lane]:
            del self._lanes[lane]
            self._keys.remove(lane)

    def append(self, ref: Any) -> None:
        """Put ``ref`` at the tail of its lane."""
        try:
            got = self._lanes[ref.order[0] >> LANE_SHIFT]  # lane_in, inline: every arrival
        except KeyError:
            got = self._lane(lane_in(ref.order))
        got.append(ref)
        self._len += 1

    def appendleft(self, ref: Any) -> None:
        """Put ``ref`` at the head of its lane (Artemis addHead)."""
        self._lane(lane_in(ref.order)).appendleft(ref)
        self._len += 1

    def extend(self, refs: Iterable[Any]) -> None:
        """``append`` each of ``refs`` in turn."""
        for ref in refs:
            self.append(ref)

    def insert_ordered(self, ref: Any) -> None:
        """Put ``ref`` in its lane after the last reference with a smaller order key (from the
        tail: references returned to the head stay ahead of it)."""
        lane = self._lane(lane_in(ref.order))
        i = len(lane)
        while i > 0 and lane[i - 1].order > ref.order:
            i -= 1
        lane.insert(i, ref)
        self._len += 1

    def put_in_order(self, ref: Any) -> None:
        """Put ``ref`` at the head of its lane when it precedes that head (O(1)), else as
        ``insert_ordered``: for a lane held in key order."""
        lane = self._lanes.get(lane_in(ref.order))
        if lane is None or lane[0].order > ref.order:
            self.appendleft(ref)
        else:
            self.insert_ordered(ref)

    def popleft(self) -> Any:
        """Take the head of the first lane. Raises ``IndexError`` when empty."""
        if not self._keys:
            raise IndexError("pop from empty Lanes")
        lane = self._keys[0]
        got = self._lanes[lane]
        ref = got.popleft()
        self._len -= 1
        if not got:
            del self._lanes[lane]
            del self._keys[0]
        return ref

    def pop(self) -> Any:
        """Take the tail of the last lane. Raises ``IndexError`` when empty."""
        if not self._keys:
            raise IndexError("pop from empty Lanes")
        lane = self._keys[-1]
        ref = self._lanes[lane].pop()
        self._len -= 1
        self._drop_if_empty(lane)
        return ref

    def remove(self, ref: Any) -> None:
        """Take ``ref`` out. Raises ``ValueError`` when it is not held."""
        lane = lane_in(ref.order)
        got = self._lanes.get(lane)
        if got is None:
            raise ValueError("reference not in Lanes")
        got.remove(ref)
        self._len -= 1
        self._drop_if_empty(lane)

    def replace(self, old: Any, new: Any) -> None:
        """Put ``new`` in ``old``'s place (``new`` takes ``old``'s order key first). Raises
        ``ValueError`` when ``old`` is not held."""
        lane = self._lanes.get(lane_in(old.order))
        if lane is None:
            raise ValueError("reference not in Lanes")
        lane[lane.index(old)] = new

    def __iter__(self) -> Iterator[Any]:
        for key in list(self._keys):
            yield from self._lanes[key]

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __contains__(self, ref: Any) -> bool:
        got = self._lanes.get(lane_in(ref.order))
        return got is not None and ref in got

    def __getitem__(self, i: int) -> Any:
        """The head (``[0]``) or the last reference (``[-1]``); no other index."""
        if not self._keys or i not in (0, -1):
            raise IndexError("Lanes index out of range (only [0] and [-1])")
        return self._lanes[self._keys[i]][i]

    def first_after(self, cursor: Dict[int, int]) -> Optional[Any]:
        """The first reference, lane by lane, whose arrival number (``seq``) is past its
        lane's entry in ``cursor`` (a non-destructive consumer's place in each lane)."""
        for key in self._keys:
            seen = cursor.get(key, 0)
            for ref in self._lanes[key]:
                if ref.seq > seen:
                    return ref
        return None
