"""Message references: one message on one queue (``MessageRef``), and their order keys.

A multicast message is stored once (``engine.paging.memory.StoredMessage``) and referenced from
every queue it was routed to; each reference carries what is per queue: its order key, its delivery
count, the consumer holding it.
"""

from __future__ import annotations

import itertools
from typing import Any, Optional, Sequence, Tuple

from ..paging.memory import StoredMessage
from mqstore.recovery.entries import LANE_SHIFT, LSN_MASK, below, in_lane, lane_in, lane_of, lsn_in

__all__ = ["LANE_SHIFT", "MessageRef", "Order", "PENDING", "below", "in_lane", "is_pending", "kept_body",
           "lane_in", "lane_of", "lsn_in", "pending", "placement_number", "with_lsn"]

Order = Tuple[int, ...]


PENDING = [(lane << LANE_SHIFT | LSN_MASK, 0) for lane in range(16)]
"""``PENDING[lane]`` is ``pending(lane)`` (for the placement of every message, without a call)."""


def pending(lane: int) -> Order:
    """The order key of a reference in ``lane`` until its record has an LSN: after every
    key of its lane, before the next lane's."""
    return PENDING[lane]


def is_pending(order: Order) -> bool:
    """Whether ``order`` is a ``pending`` key."""
    return lsn_in(order) == LSN_MASK


def with_lsn(lane_of_key: Order, key: Order) -> Order:
    """``key`` (an order key in any lane, or one without lane bits) in the lane of
    ``lane_of_key``."""
    return (lane_in(lane_of_key) << LANE_SHIFT | lsn_in(key),) + tuple(key[1:])

placement_number = itertools.count(1).__next__
"""A number per message placed, increasing: the last part of the order key of a reference
that is not journaled, the same on every queue the message reaches."""


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
        msg: the shared message. queue: the queue. order: (lane | LSN, slot) of the record
        that put it there, the lane being its message's priority lane
        (``recovery.entries.lane_of``; for one not journaled: the key of the journaled one
        before it, in its own lane, then its message's ``placement_number``, so they sort
        together; ``pending(lane)`` until written).
        delivery_count: times handed to a consumer.
        consumer: the consumer holding it while in delivery, else ``None``.
        journaled: whether its state is in the journal (durable message on a durable queue).
        seq: arrival number on its queue. in_queue: whether it is on the ready list.
        taken: the broker-wide number of its last delivery (consumption order, as the LSNs
        of the DELIVERY records are).
    """

    __slots__ = ("msg", "queue", "order", "delivery_count", "consumer", "journaled", "seq",
                 "in_queue", "taken")

    def __init__(self, msg: StoredMessage, queue: Any, order: Order,
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
