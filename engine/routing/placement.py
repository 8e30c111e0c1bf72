"""Placement: how a routed message joins its queues (lock held). Where it goes is
``engine.routing.route``'s.

- Address-full policies (Artemis ring queues §4, ``engine.paging.addressfull``) decide first: drop,
  fail,
  wait for room, or page.
- Placement: references join queues through the queues' policies (ring, last value); what a
  policy removes is journaled as an ACK with its reason in the same TX record as the send, so a
  decision and its cause are durable together or not at all. Paged references wait with their
  queues' paged ones (``engine.queues.paged``).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import msgpack

from ..paging.addressfull import Admission, admit
from .core import BrokerCore
from ..model import Message
from ..addressing.names import Destination
from .route import route
from ..queues.paged import spill
from ..queues.queue import MessageRef, Queue, StoredMessage
from ..queues.limits import make_room, plan
from ..queues.refs import PENDING, is_pending, placement_number, with_lsn
from ..queues.scheduledbuffer import SCHED_PROPERTY, scheduled_time
from mqstore.journal import RecordTooLargeError, Ticket
from mqstore.journal.format import FRAME_OVERHEAD
from mqstore.recovery import schema
from mqstore.recovery.entries import LSN_MASK, PAGED_LANE
from mqstore.recovery.schema import AckReason, RecordKind

log = logging.getLogger("mqstore.engine")

Removal = Tuple[MessageRef, str]

_MESSAGE = int(RecordKind.MESSAGE)  # (a plain int: the journal checks it without a call)
LANE_BITS = ~LSN_MASK  # an order key's lane, in its first part
WRITE_PATH_BODY = 64 << 10  # bodies up to this size stay in RAM with their message once written


class Placement:
    """Messages being placed on queues in one journal write (internal to this module).

    ``add`` routes one message and puts its references on the queues (policies decide
    removals); ``write`` journals everything in one write (MESSAGE records, or one TX record
    when there are policy removals or ``acks``) and fixes the references' order keys.
    """

    def __init__(self, broker: BrokerCore) -> None:
        self.broker = broker
        self.now = broker.now_ms()
        self.payloads: List[Dict[str, Any]] = []
        self.slots = 0  # len(payloads)
        # (message, its references (each in its lane, ``pending``), its slot or -1)
        self.placed: List[Tuple[StoredMessage, List[MessageRef], int]] = []
        self.spill: List[Tuple[StoredMessage, List[MessageRef]]] = []
        self.removals: List[Removal] = []
        self.touched: Dict[int, Queue] = {}
        self.base_lsn = broker.storage.last_lsn()
        self.scheduled = False  # a message went to a scheduled buffer
        self.evicted: Dict[int, int] = {}  # queue id -> body bytes removed, not forgotten yet
        # what the last message's address and queues gave, for the next one of the batch
        # (most batches go to one address): its expiry delay, whether it pages, its queues
        # that journal a durable message
        self._address: Optional[str] = None
        self._expiry_delay = 0
        self._pages = False
        self._queues: Optional[List[Queue]] = None
        self._journaling: List[Queue] = []
        self._journaling_ids: List[int] = []
        self._all_journal = False  # every queue journals a durable message

    def add(self, address: str, queues: List[Queue], msg: Message, paged: bool = False
            ) -> None:
        """Route one message to ``queues``; ``paged``: its address pages it (the references
        wait with the queues' paged ones, policies not applied yet). A copy on a wildcard
        address's queue is never paged: Artemis pages a reference in its queue's address,
        and a wildcard address holds nothing of its own (a message counts at the address it
        was sent to); a durable one waits in the index all the same."""
        broker = self.broker
        # the common case (no schedule, no properties) without a call: a batch's every message
        # comes here (issue 38)
        at = scheduled_time(msg.scheduled_delivery_time, msg.delivery_delay,
                            msg.properties.get(SCHED_PROPERTY), self.now) \
            if msg.scheduled_delivery_time or msg.delivery_delay or msg.properties else 0
        if address is not self._address:
            self._address = address
            self._pages = broker.sizes.paging(address)
            delay = broker.settings.resolve(address).expiry_delay
            self._expiry_delay = delay if delay and delay > 0 else 0
        # paging goes on until none is left; a scheduled message waits in the index anyway
        paged = (paged or self._pages) and not at
        expiration = msg.expiration
        if not expiration and self._expiry_delay:
            expiration = self.now + self._expiry_delay  # Artemis addressing §4.9.6.4
        mid = broker.storage.next_id()
        if queues is not self._queues:
            self._queues = queues
            self._journaling = [q for q in queues if q.config.durable]
            self._journaling_ids = [q.id for q in self._journaling]
            self._all_journal = len(self._journaling) == len(queues)
        if msg.durable:
            journaled, every = self._journaling, self._all_journal
            ids = self._journaling_ids  # (shared by the payloads: nobody changes it)
        else:
            journaled = [q for q in self._journaling if q.persisting]
            every = len(journaled) == len(queues)
            ids = [q.id for q in journaled]
        ts = msg.timestamp or self.now
        slot = -1
        body = msg.body
        size = len(body)
        properties = msg.properties
        if journaled:
            slot = self.slots
            self.slots += 1
            self.payloads.append(schema.message(mid, address, ids, body, properties, ts,
                                                expiration, msg.priority, paged, at))
        kept = body if not journaled or not every else None  # kept_body
        budget = broker.budget
        if kept is None and size <= WRITE_PATH_BODY and budget.used <= budget.limit:  # over()
            kept = body  # the write path's copy, charged to the budget while in RAM: a
            # consumer gets it without reading and decoding the record back
        stored = StoredMessage(mid, address, msg.durable, dict(properties) if properties else {},
                               ts, expiration, msg.priority, kept, bool(journaled), size)
        if queues and not journaled:
            broker.sizes.add_transient(stored, paged)
            self._address = None  # it may page the address now
        refs = []
        paged_refs = []  # journaled nowhere and paged: for the page files
        plain = 9 - msg.priority  # lane_of (a checked message's priority is 0-9)
        lane = PAGED_LANE if paged else plain  # its place among its queues' (Artemis priority)
        for q in queues:
            here = paged and q.config.address == address  # else a wildcard's copy
            self.touched[q.id] = q
            if q.limited:  # a Qpid ring makes room first (``engine.queues.limits``)
                self._removed(make_room(q, size, self.evicted.get(q.id, 0)))
            q.held_bytes += size
            if at and q in journaled:  # the index holds it: nothing in RAM
                q.scheduled.added_durable(at)
                q.added += 1
                self.scheduled = True
                continue
            ref = MessageRef(stored, q, PENDING[lane if here else plain], 0, q in journaled)
            if at:
                q.scheduled.add(ref, at)
                q.added += 1
                self.scheduled = True
            elif here:
                q.add_paged(ref)
                if not ref.journaled:
                    paged_refs.append(ref)
            else:
                removed = q.add_tail(ref, self.now)
                if removed:
                    self._removed(removed)
                if q.in_place and q.in_place[-1][0] is ref and ref.journaled and \
                        q.in_place[-1][1].journaled:  # the record says so (Qpid LVQ)
                    self.payloads[slot].setdefault("ip", []).append(
                        in_place_entry(q, q.in_place[-1][1]))
            refs.append(ref)
        self.placed.append((stored, refs, slot))
        if paged_refs:
            self.spill.append((stored, paged_refs))

    def _removed(self, removals: List[Removal]) -> None:
        self.removals += removals
        for ref, _why in removals:
            self.evicted[ref.queue.id] = self.evicted.get(ref.queue.id, 0) + ref.msg.size

    def write(self, acks: Sequence[Dict[str, Any]] = (), as_tx: bool = False
              ) -> Optional[Ticket]:
        broker = self.broker
        removal_acks = [schema.ack(r.queue.id, r.msg.mid, why) for r, why in self.removals
                        if r.journaled]
        all_acks = list(acks) + removal_acks
        ticket = None
        in_tx = as_tx or bool(all_acks)
        if in_tx:
            if self.payloads or all_acks:
                ticket = broker.storage.write([(RecordKind.TX, schema.tx(broker.storage.next_id(),
                                                                 self.payloads, all_acks))])
        elif self.payloads:
            ticket = broker.storage.write([(_MESSAGE, p) for p in self.payloads])
        # each journaled reference's order key: its lane, its record's LSN and its slot in it
        # (a TX record's messages share its LSN); one journaled nowhere sorts after the
        # journaled one before it, by its placement number
        first = 0 if ticket is None else ticket.lsn if in_tx else \
            ticket.lsn - len(self.payloads) + 1
        prev: Tuple[int, ...] = (self.base_lsn, 1 << 62)
        for _stored, refs, slot in self.placed:
            if slot >= 0 and first:
                prev = (first, slot) if in_tx else (first + slot, 0)
            number = 0
            for ref in refs:  # in its lane (the key's top bits), which stays
                if ref.journaled and first:
                    ref.order = (ref.order[0] & LANE_BITS | prev[0], prev[1])
                else:
                    number = number or placement_number()
                    ref.order = with_lsn(ref.order, (prev[0], prev[1], number))
        for q in self.touched.values():  # Qpid last-value replacements in place
            for ref, old in q.in_place:
                ref.order = old.order
            q.in_place = []
        for stored, refs in self.spill:  # paged and journaled nowhere: to a page file
            spill(broker.pages, stored, refs)
        for q in self.touched.values():
            q.written()
        for ref, why in self.removals:
            forget(broker, ref, why)
        for q in self.touched.values():
            broker.serve(q)
        if self.scheduled:
            broker.wake_scheduler()
        return ticket


Routed = Tuple[Tuple[Any, List[Queue]], Message]  # ((address, queues), message)


def admission(broker: BrokerCore, routed: Sequence[Routed], block: bool = True,
              count: bool = True) -> Admission:
    """The address-full policies applied to routed messages (``engine.paging.addressfull.admit``);
    dropped ones are counted on their addresses (unless ``count`` is false: a look only), and
    an address that starts dropping is logged once at WARNING on ``mqstore.engine`` (Artemis
    AMQ222039), again only after it accepted a message. ``block`` false: a BLOCK address
    accepts (a transaction waited for room at its sends).

    Raises:
        AddressFullError: a FAIL address is full; QueueFullError: a queue's Qpid size limit
            refuses a message (``engine.queues.limits.plan``, which also pages what a
            flow_to_disk queue cannot hold); nothing was changed.
    """
    out = admit(broker.sizes, broker.settings.resolve, broker.sizes.paging, routed,
                [where[0].name for where, _msg in routed], lambda item: len(item[1].body),
                [bool(where[1]) for where, _msg in routed], block)
    out.paged = plan(out.accepted, out.paged, broker.now_ms())  # Qpid queue limits
    if not count:
        return out
    for address in out.dropped:
        addr = broker.addresses[address]
        if not addr.dropping:
            addr.dropping = True
            n, b = broker.sizes.size(address)
            log.warning("messages sent to address %r are being dropped (DROP policy): it holds "
                        "%d messages, %d bytes", address, n, b)
        addr.dropped += 1
    for (addr, queues), _msg in out.accepted:
        if queues:
            addr.dropping = False
    return out


def must_wait(broker: BrokerCore, dest: Destination, messages: Sequence[Message]) -> bool:
    """Whether a transaction's sends to ``dest`` must wait for room (a full BLOCK address);
    changes nothing.

    Raises:
        The routing errors; AddressFullError: a full FAIL address.
    """
    routed = [(route(broker, dest, msg, advance=False), msg) for msg in messages]
    return bool(admission(broker, routed, count=False).blocked)


# bytes a MESSAGE payload adds beyond its body, address, properties and queue ids (keys, times,
# ids), and an ACK payload a policy may add for it (ring eviction, last-value replacement)
MESSAGE_OVERHEAD = 128
ACK_BOUND = 64


def _route_bound(address: str, queues: int) -> int:
    """What a message's route adds to ``record_bound``, whatever the message."""
    return len(address) * 4 + 9 * queues + MESSAGE_OVERHEAD + ACK_BOUND


def _message_bound(msg: Message) -> int:
    """What the message itself adds to ``record_bound``: its body and packed properties (the
    size ``Message.checked`` measured, when it was taken through it)."""
    size = msg.checked_size
    if size is None:
        size = len(msg.body) + len(msgpack.packb(msg.properties, use_bin_type=True))
    return size


def record_bound(address: str, queues: int, msg: Message) -> int:
    """An upper bound of the bytes ``msg`` adds to the record that journals it."""
    return _message_bound(msg) + _route_bound(address, queues)


def fitting_bound(address: str, queues: int, msg: Message, limit: int) -> int:
    """``record_bound`` of ``msg``, checked against ``limit``, the journal's largest record
    (``JournalOptions.max_frame()``) in bytes.

    Raises:
        RecordTooLargeError: the message alone cannot be journaled; nothing was changed.
    """
    n = record_bound(address, queues, msg)
    if n + FRAME_OVERHEAD > limit:
        raise RecordTooLargeError(n + FRAME_OVERHEAD, limit)
    return n


def record_bounds(routed: Sequence[Routed], limit: int) -> List[int]:
    """``fitting_bound`` of each routed message, in order, computed once per route for a
    batch that shares one (``route_many``).

    Raises:
        RecordTooLargeError: a message alone cannot be journaled; nothing was changed.
    """
    out = [0] * len(routed)
    last = None
    fixed = 0
    for i, (where, msg) in enumerate(routed):
        if where is not last:
            last = where
            fixed = _route_bound(where[0].name, len(where[1]))
        size = msg.checked_size  # (_message_bound, without the call for a checked message)
        n = fixed + (size if size is not None else _message_bound(msg))
        if n + FRAME_OVERHEAD > limit:
            raise RecordTooLargeError(n + FRAME_OVERHEAD, limit)
        out[i] = n
    return out


def chunks(broker: BrokerCore, items: List[Tuple[Routed, bool]]
            ) -> List[List[Tuple[Routed, bool]]]:
    """``items`` (routed messages with their paged flags) cut into runs whose records fit
    one journal write each (``JournalOptions.max_frame()``), in order."""
    limit = broker.storage.max_frame()
    bounds = record_bounds([routed for routed, _paged in items], limit)
    out: List[List[Tuple[Routed, bool]]] = []
    start, size = 0, 0
    for i, n in enumerate(bounds):
        if size + n + FRAME_OVERHEAD > limit and i > start:
            out.append(items[start:i])
            start, size = i, 0
        size += n
    out.append(items[start:])
    return out


def in_place_entry(queue: Queue, old: MessageRef) -> List[int]:
    """What a MESSAGE payload's ``"ip"`` list says of a Qpid last-value replacement in place
    on ``queue``: the replaced message's id, and its order key in the index when it has one
    already (its record may be gone when the journal is replayed); one placed by the same
    record has none yet, and replay finds it there. The index's key, not the one in RAM: a
    message that replaced one journaled nowhere sits at that one's place in RAM, but at its
    own record's in the index (and after a reopen).

    Raises:
        BrokerFailedError: the index entry read is damaged (``IndexReader.order_of``).
    """
    if is_pending(old.order) or queue.reader is None:
        return [queue.id, old.msg.mid]
    order = queue.reader.order_of(queue.id, old.msg.mid)
    return [queue.id, old.msg.mid] if order is None else \
        [queue.id, old.msg.mid, order[0], order[1]]


# the reasons as plain strings, read once: an enum member's ``.value`` costs two Python calls
# per lookup, and ``forget`` runs once per message settled (issue 38)
_ACKED, _MOVED, _EVICTED, _REPLACED, _KILLED, _REJECTED, _EXPIRED = (
    r.value for r in (AckReason.ACKED, AckReason.MOVED, AckReason.EVICTED, AckReason.REPLACED,
                      AckReason.KILLED, AckReason.REJECTED, AckReason.EXPIRED))


def forget(broker: BrokerCore, ref: MessageRef, why: str) -> None:
    """Account for a reference a policy or the broker removed (its ACK is journaled by the
    caller): counters, the message's reference count."""
    queue = ref.queue
    if ref.in_queue or queue.ahead or queue.policies:  # (else detach has nothing to do)
        queue.detach(ref)
    delivering, mid = queue.delivering, ref.msg.mid
    if mid in delivering:
        del delivering[mid]
    queue.held_bytes -= ref.msg.size
    if why == _ACKED or why == _MOVED:  # (Artemis counts a move as an ack)
        queue.acknowledged += 1
    elif why == _EVICTED or why == _REPLACED:  # a ring, a last value
        queue.replaced += 1
    elif why == _KILLED or why == _REJECTED:
        queue.killed += 1
    elif why == _EXPIRED:
        queue.expired += 1
    queue.cache.let_go(ref.msg)  # queue.release (what broker.drop_message_ref does)


def body_of(broker: BrokerCore, msg: StoredMessage) -> bytes:
    """The message body: in memory, or read from the journal (lock held).

    Raises:
        KeyError: the message is not stored any more (settled meanwhile).
    """
    if msg.body is not None:
        return msg.body
    return broker.read_body(msg.mid)
