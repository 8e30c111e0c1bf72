"""The image's entries and where they live in the index: addresses, queues, messages,
references and TX records as values, their keys, their encodings, and ``ImageTables``, the large
tables of one image over an index store (``recovery.tables``). Layouts: ``recovery.checkpoint``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from mqstore.journal import Location
from .tables import OrderedTable, SortedTable, Table

Order = Tuple[int, int]  # (lane and LSN of the record that added the reference, slot in it)

# A reference's order key is its place in its queue: ``(lane << LANE_SHIFT | LSN, slot)``. The
# lane comes first, so a queue read in key order gives the highest priority first and, within a
# priority, the order the messages were sent in (ActiveMQ Artemis: a consumer gets the oldest
# message of the highest priority present). Lane ``9 - priority`` for JMS priorities 0-9;
# ``PAGED_LANE`` for a message paged at its address: after every lane, in the order sent, as
# Artemis depages (Artemis ring queues §4: paged messages come after all the others on a queue).
LANE_SHIFT = 58
LSN_MASK = (1 << LANE_SHIFT) - 1
DEFAULT_LANE = 5  # priority 4, the JMS default
PAGED_LANE = 15


def lane_of(priority: int, paged: bool = False) -> int:
    """The lane of a message of JMS ``priority`` (0-9; out of range: clamped), or
    ``PAGED_LANE`` when its address pages it."""
    if paged:
        return PAGED_LANE
    return 9 - priority if priority.__class__ is int and 0 <= priority <= 9 else \
        9 - min(max(int(priority), 0), 9)


def lane_in(order: Tuple[int, ...]) -> int:
    """The lane of order key ``order``."""
    return order[0] >> LANE_SHIFT


def lsn_in(order: Tuple[int, ...]) -> int:
    """The LSN part of order key ``order`` (0 for a head key, ``recovery.moves.head_order``)."""
    return order[0] & LSN_MASK


def in_lane(lane: int, lsn: int) -> int:
    """The first part of an order key: ``lsn`` in ``lane``."""
    return lane << LANE_SHIFT | lsn


def below(order: Tuple[int, ...]) -> Order:
    """The greatest journal order key less than ``order``."""
    lsn, slot = order[0], order[1]
    return (lsn, slot - 1) if slot > 0 else (lsn - 1, (1 << 62))

ID = struct.Struct(">Q")
PAIR = struct.Struct(">QQ")
TRIPLE = struct.Struct(">QQQ")
QUAD = struct.Struct(">QQQQ")


@dataclass
class AddressImage:
    """A durable address: id, name, routing types ("anycast"/"multicast"), auto-created flag."""

    id: int
    name: str
    routing_types: Tuple[str, ...]
    auto_created: bool
    location: Location


@dataclass
class RefImage:
    """A message reference on a durable queue: message id, order key, delivery count (times it
    was handed to a consumer), the DELIVERY record holding that count, whether that record
    left it in delivery (handed out, not settled nor returned), and ``at``: when it is in the
    queue's scheduled buffer, the time it is due (ms since the epoch; 0: on the queue).

    A reference is in the ``qref`` table under its order key, or, while scheduled, in the
    ``sched`` table under its due time and order key. The order key is its message's
    (``MessageImage.order``) unless it was moved (scheduled, or put on the head of its queue
    when due: order key ``(0, n)``); the ``moved`` table then says where it is.
    """

    mid: int
    order: Order
    delivery_count: int = 0
    delivery_location: Optional[Location] = None
    in_delivery: bool = False
    at: int = 0


@dataclass
class QueueImage:
    """A durable queue, its configuration, how many references it holds (``count``) and how
    many of those are paged (``paged``: their address pages them, ``PageState``); ``count``
    does not include the ``scheduled`` ones (in its scheduled buffer, not on the queue yet)."""

    id: int
    name: str
    address: str
    routing_type: str
    config: Dict[str, Any]
    location: Location
    update_location: Optional[Location] = None
    count: int = 0
    paged: int = 0
    scheduled: int = 0


KEEP_DELETED = 100  # deleted durable queues listed for management, newest kept


@dataclass
class DeletedQueueImage:
    """A durable queue that was deleted, kept for management (Qpid queues "Deleting Queues": the
    management object remains, with the time of deletion). Its QUEUE_DEL record stays live
    while it is listed, so a rebuild from the journal lists it too.

    Attributes:
        id, name, address, routing_type: the queue's.
        deleted_at: ms since the epoch (the broker's clock at deletion).
        location: the QUEUE_DEL record. queue_location: the queue's QUEUE_ADD record (the
            tombstone pins it once the entry goes), ``None`` when unknown.
    """

    id: int
    name: str
    address: str
    routing_type: str
    deleted_at: int
    location: Location
    queue_location: Optional[Location] = None

    def to_meta(self) -> List[Any]:
        """The entry as the index's meta entry lists it."""
        return [self.id, self.name, self.address, self.routing_type, self.deleted_at,
                list(self.location), None if self.queue_location is None
                else list(self.queue_location)]

    @classmethod
    def from_meta(cls, row: List[Any]) -> "DeletedQueueImage":
        """Read back ``to_meta``'s form."""
        return cls(int(row[0]), row[1], row[2], row[3], int(row[4]), Location(*row[5]),
                   None if row[6] is None else Location(*row[6]))


@dataclass
class PageState:
    """An address that pages (Artemis ring queues §4): every message of it with an order key from
    ``start`` on is paged (held on disk only, not yet on its queues), ``messages`` of them with
    ``size`` body bytes. Paging starts with the first message journaled as paged and ends when
    no paged message is left."""

    start: Order
    messages: int = 0
    size: int = 0


@dataclass
class MessageImage:
    """A durable message: where its body is (record location; ``slot`` >= 0 inside a TX record),
    its metadata, how many references it still has, and the LSN of its record (``order``)."""

    mid: int
    address: str
    location: Location
    slot: int
    properties: Dict[str, Any]
    timestamp: int
    expiration: int
    priority: int
    body_size: int
    refcount: int
    lsn: int = 0
    lane: int = DEFAULT_LANE

    @property
    def order(self) -> Order:
        """The order key its references have (``lane_of`` its priority, or paged)."""
        return (self.lane << LANE_SHIFT | self.lsn, max(self.slot, 0))


@dataclass
class TxImage:
    """A TX record still needed: messages of it still referenced, and what its acks cancel."""

    remaining: int
    ack_targets: List[Location]


def _loc(loc: Optional[Location]) -> Optional[List[int]]:
    return None if loc is None else list(loc)


def _unloc(raw: Optional[List[int]]) -> Optional[Location]:
    return None if raw is None else Location(*raw)


def _enc_msg(m: MessageImage) -> List[Any]:
    return [m.mid, m.address, list(m.location), m.slot, m.properties, m.timestamp,
            m.expiration, m.priority, m.body_size, m.refcount, m.lsn, m.lane]


def _dec_msg(v: List[Any]) -> MessageImage:
    mid, addr, loc, slot, props, ts, exp, prio, size, refs, lsn, lane = v
    return MessageImage(mid, addr, Location(*loc), slot, props, ts, exp, prio, size, refs, lsn,
                        lane)


def _enc_ref(r: RefImage) -> List[Any]:
    if r.delivery_count == 0 and r.delivery_location is None and not r.in_delivery \
            and not r.at:
        return [r.mid, r.order[0], r.order[1]]  # never handed out: the common case, short
    out = [r.mid, r.order[0], r.order[1], r.delivery_count, _loc(r.delivery_location),
           r.in_delivery]
    if r.at:
        out.append(r.at)
    return out


def _dec_ref(v: List[Any]) -> RefImage:
    if len(v) == 3:
        return RefImage(v[0], (v[1], v[2]))
    mid, lsn, slot, count, dloc, busy = v[:6]
    return RefImage(mid, (lsn, slot), count, _unloc(dloc), bool(busy),
                    int(v[6]) if len(v) > 6 else 0)


def _enc_tx(t: TxImage) -> List[Any]:
    return [t.remaining, [list(x) for x in t.ack_targets]]


def _dec_tx(v: List[Any]) -> TxImage:
    return TxImage(v[0], [Location(*x) for x in v[1]])


def ref_key(qid: int, mid: int) -> bytes:
    """Key of a reference in the ``busy`` table."""
    return PAIR.pack(qid, mid)


def order_key(qid: int, order: Order) -> bytes:
    """Key of a reference in its queue's order (the ``qref`` table, which holds the
    references: a queue's are read in order by range, one by message id through the
    message's order key)."""
    return TRIPLE.pack(qid, order[0], order[1])


def sched_key(qid: int, at: int, order: Order) -> bytes:
    """Key of a scheduled reference (the ``sched`` table: a queue's scheduled buffer in due
    order, equal times in order-key order)."""
    return QUAD.pack(qid, at, order[0], order[1])


def tx_key(loc: Location) -> bytes:
    """Key of a TX record entry (segment, offset)."""
    return PAIR.pack(loc.segment, loc.offset)


class ImageTables:
    """The image's large tables over one index store (``recovery.index.IndexStore``)."""

    def __init__(self, store: Any, counts: Optional[Mapping[str, int]] = None) -> None:
        counts = counts or {}
        self.msg = Table(store, "msg", _enc_msg, _dec_msg, counts.get("msg", 0))
        self.qref = OrderedTable(store, "qref", _enc_ref, _dec_ref, counts.get("qref", 0))
        self.busy = Table(store, "busy", count=counts.get("busy", 0))
        self.tx = Table(store, "tx", _enc_tx, _dec_tx, counts.get("tx", 0))
        self.sched = SortedTable(store, "sched", _enc_ref, _dec_ref, counts.get("sched", 0))
        self.moved = Table(store, "moved", count=counts.get("moved", 0))

    def all(self) -> List[Table]:
        """Every table, in a fixed order."""
        return [self.msg, self.qref, self.busy, self.tx, self.sched, self.moved]
