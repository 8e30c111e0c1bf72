"""Routing, placement, delivery, settlement and transactions: the semantic operations on queues.

Every function here runs with the broker lock held and returns the ticket to wait on (outside
the lock) or ``None`` when nothing was journaled.

- Routing (seed 004 §4.2-4.7, §4.13): anycast picks one queue of the address, round-robin;
  multicast every queue (the body stored once, referenced from each); both routing types
  without a prefix: one anycast queue and every multicast queue; a prefix restricts the routing
  type; a fully qualified queue name picks that queue only.
- Placement: references join queues through the queues' policies (ring, last value); what a
  policy removes is journaled as an ACK with its reason in the same TX record as the send, so a
  decision and its cause are durable together or not at all.
- Delivery: the head goes to the consumer that asks, or to the consumer waiting longest; its
  delivery count goes up and a DELIVERY record is journaled before it is handed out. Expired
  messages met on the way are expired (``engine.deadletter``). Non-destructive queues hand out
  the next message after the consumer's cursor and keep it.
- Cancel and rollback: references go back to the head in the reverse order of consumption with
  their delivery counts (seed 000, Messages in Delivery & Rollbacks); one that reached
  max-delivery-attempts is dead-lettered instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple

from engine.addressfull import Admission, admit
from engine.errors import AddressNotFoundError, QueueNotFoundError, RoutingTypeError
from engine.model import Message, RoutingType
from engine.depage import depage
from engine.names import Destination
from engine.queue import PENDING, MessageRef, Queue, StoredMessage, kept_body
import msgpack

from journal import RecordTooLargeError, Ticket
from journal.format import FRAME_OVERHEAD
from recovery import schema
from recovery.schema import AckReason, RecordKind

if TYPE_CHECKING:  # pragma: no cover
    from engine.address import Address
    from engine.broker import Broker

Removal = Tuple[MessageRef, str]


def route(broker: "Broker", dest: Destination, advance: bool = True
          ) -> Tuple["Address", List[Queue]]:
    """The address and the queues one message to ``dest`` goes to (``advance=False`` only
    validates: the anycast round-robin cursor does not move).

    Raises:
        AddressNotFoundError, QueueNotFoundError, RoutingTypeError.
    """
    addr = broker.addresses.get(dest.address)
    if addr is None:
        raise AddressNotFoundError(dest.address)
    if dest.queue is not None:
        queue = addr.queues.get(dest.queue)
        if queue is None:
            raise QueueNotFoundError(dest.queue, dest.address)
        return addr, [queue]
    wanted = {dest.routing_type} if dest.routing_type else addr.routing_types
    if not wanted & addr.routing_types:
        raise RoutingTypeError(f"address {addr.name!r} does not support "
                               f"{dest.routing_type.value if dest.routing_type else '?'}")
    queues = list(addr.queues.values())
    out = [q for q in queues if q.config.routing_type == RoutingType.MULTICAST
           and RoutingType.MULTICAST in wanted]
    anycast = [q for q in queues if q.config.routing_type == RoutingType.ANYCAST]
    if RoutingType.ANYCAST in wanted and anycast:
        out.insert(0, anycast[addr.cursor % len(anycast)])
        addr.cursor += 1 if advance else 0
    return addr, out


class Placement:
    """Messages being placed on queues in one journal write (internal to this module).

    ``add`` routes one message and puts its references on the queues (policies decide
    removals); ``write`` journals everything in one write (MESSAGE records, or one TX record
    when there are policy removals or ``acks``) and fixes the references' order keys.
    """

    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self.now = broker.now_ms()
        self.payloads: List[Dict[str, Any]] = []
        self.placed: List[Tuple[StoredMessage, List[MessageRef], int]] = []
        self.removals: List[Removal] = []
        self.touched: Dict[int, Queue] = {}
        self.base_lsn = broker.persistence.journal.next_lsn - 1

    def add(self, address: str, queues: List[Queue], msg: Message, paged: bool = False
            ) -> None:
        """Route one message to ``queues``; ``paged``: its address pages it (the references
        wait with the queues' paged ones, policies not applied yet)."""
        broker = self.broker
        paged = paged or broker.sizes.paging(address)  # paging goes on until none is left
        settings = broker.settings.resolve(address)
        expiration = msg.expiration
        if not expiration and settings.expiry_delay and settings.expiry_delay > 0:
            expiration = self.now + settings.expiry_delay  # seed 004 §4.9.6.4
        mid = broker.next_id()
        journaled = [q for q in queues if q.durable] if msg.durable else []
        ts = msg.timestamp or self.now
        slot = -1
        if journaled:
            slot = len(self.payloads)
            self.payloads.append(schema.message(mid, address, [q.id for q in journaled],
                                                msg.body, msg.properties, ts, expiration,
                                                msg.priority, paged))
        stored = StoredMessage(mid, address, msg.durable, dict(msg.properties), ts, expiration,
                               msg.priority, kept_body(msg.body, journaled, queues),
                               bool(journaled), len(msg.body))
        if queues and not journaled:
            broker.sizes.add_transient(stored, paged)
        refs = []
        for q in queues:
            ref = MessageRef(stored, q, PENDING, journaled=q in journaled)
            if paged:
                q.add_paged(ref)
            else:
                self.removals += q.add_tail(ref, self.now)
            refs.append(ref)
            self.touched[q.id] = q
        self.placed.append((stored, refs, slot))

    def write(self, acks: Sequence[Dict[str, Any]] = (), as_tx: bool = False
              ) -> Optional[Ticket]:
        broker = self.broker
        removal_acks = [schema.ack(r.queue.id, r.msg.mid, why) for r, why in self.removals
                        if r.journaled]
        all_acks = list(acks) + removal_acks
        ticket = None
        if as_tx or all_acks:
            if self.payloads or all_acks:
                ticket = broker.write([(RecordKind.TX, schema.tx(broker.next_id(),
                                                                 self.payloads, all_acks))])
            lsn_of = (lambda slot: (ticket.lsn, slot)) if ticket else None
        else:
            if self.payloads:
                ticket = broker.write([(RecordKind.MESSAGE, p) for p in self.payloads])
            first = ticket.lsn - len(self.payloads) + 1 if ticket else 0
            lsn_of = (lambda slot: (first + slot, 0)) if ticket else None
        prev: Tuple[int, ...] = (self.base_lsn, 1 << 62)
        for _stored, refs, slot in self.placed:
            if slot >= 0 and lsn_of is not None:
                prev = lsn_of(slot)
            for ref in refs:  # one not journaled sorts after the journaled one before it
                ref.order = prev if ref.journaled and lsn_of else (prev[0], prev[1], ref.seq)
        for q in self.touched.values():
            q.written()
        for ref, why in self.removals:
            forget(broker, ref, why)
        for q in self.touched.values():
            serve_waiters(broker, q)
        return ticket


Routed = Tuple[Tuple["Address", List[Queue]], Message]


def admission(broker: "Broker", routed: Sequence[Routed], block: bool = True,
              count: bool = True) -> Admission:
    """The address-full policies applied to routed messages (``engine.addressfull.admit``);
    dropped ones are counted on their addresses (unless ``count`` is false: a look only).
    ``block`` false: a BLOCK address accepts (a transaction waited for room at its sends).

    Raises:
        AddressFullError: a FAIL address is full; nothing was changed.
    """
    out = admit(broker.sizes, broker.settings.resolve, broker.sizes.paging, routed,
                lambda item: item[0][0].name, lambda item: len(item[1].body),
                lambda item: bool(item[0][1]), block)
    for address in out.dropped if count else ():
        broker.addresses[address].dropped += 1
    return out


def must_wait(broker: "Broker", dest: Destination, messages: Sequence[Message]) -> bool:
    """Whether a transaction's sends to ``dest`` must wait for room (a full BLOCK address);
    changes nothing.

    Raises:
        The routing errors; AddressFullError: a full FAIL address.
    """
    routed = [(route(broker, dest, advance=False), msg) for msg in messages]
    return bool(admission(broker, routed, count=False).blocked)


def send(broker: "Broker", dest: Destination, messages: Sequence[Message]
         ) -> Tuple[Optional[Ticket], List[Message]]:
    """Route and place messages; journal the durable ones, in as few writes as the record
    size limit allows (tickets complete in order, so the last one covers them all). The
    address-full policies apply first: dropped messages are counted, paged ones wait with
    their queues' paged references.

    Returns:
        The ticket to wait on, and the messages (in order) that wait for room on a full
        BLOCK address: not placed, the caller sends them once it has room.

    Raises:
        AddressNotFoundError, QueueNotFoundError, RoutingTypeError, RecordTooLargeError (one
            message exceeds the journal's record size), AddressFullError (a FAIL address is
            full): before anything is placed.
    """
    routed = [(route(broker, dest), msg) for msg in messages]
    for (addr, queues), msg in routed:
        fitting_bound(addr.name, len(queues), msg, broker.persistence.journal.options.max_frame())
    admitted = admission(broker, routed)
    ticket = None
    for chunk in _chunks(broker, list(zip(admitted.accepted, admitted.paged, strict=True))):
        placement = Placement(broker)
        for ((addr, queues), msg), paged in chunk:
            placement.add(addr.name, queues, msg, paged)
        ticket = placement.write() or ticket
    return ticket, [msg for _route, msg in admitted.blocked]


# bytes a MESSAGE payload adds beyond its body, address, properties and queue ids (keys, times,
# ids), and an ACK payload a policy may add for it (ring eviction, last-value replacement)
MESSAGE_OVERHEAD = 128
ACK_BOUND = 64


def record_bound(address: str, queues: int, msg: Message) -> int:
    """An upper bound of the bytes ``msg`` adds to the record that journals it (from the size
    ``Message.checked`` measured, when it was taken through it)."""
    size = msg.checked_size
    if size is None:
        size = len(msg.body) + len(msgpack.packb(msg.properties, use_bin_type=True))
    return size + len(address) * 4 + 9 * queues + MESSAGE_OVERHEAD + ACK_BOUND


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


def _chunks(broker: "Broker", items: List[Tuple[Routed, bool]]
            ) -> List[List[Tuple[Routed, bool]]]:
    limit = broker.persistence.journal.options.max_frame()
    chunks: List[List[Tuple[Routed, bool]]] = [[]]
    size = 0
    for item in items:
        ((addr, queues), msg), _paged = item
        n = fitting_bound(addr.name, len(queues), msg, limit)
        if size + n + FRAME_OVERHEAD > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += n
    return chunks


def forget(broker: "Broker", ref: MessageRef, why: str) -> None:
    """Account for a reference a policy or the broker removed (its ACK is journaled by the
    caller): counters, the message's reference count."""
    queue = ref.queue
    queue.detach(ref)
    queue.delivering.pop(ref.msg.mid, None)
    if why in (AckReason.EVICTED.value, AckReason.KILLED.value, AckReason.REJECTED.value):
        queue.killed += 1
    elif why == AckReason.EXPIRED.value:
        queue.expired += 1
    elif why == AckReason.ACKED.value:
        queue.acknowledged += 1
    broker.drop_message_ref(ref)


def deliver(broker: "Broker", queue: Queue, consumer: Any) -> Optional[Tuple[MessageRef,
                                                                               Optional[Ticket]]]:
    """Hand the next message of ``queue`` to ``consumer``: count the delivery, journal it,
    move it to in-delivery (destructive queues). ``None`` when nothing is available."""
    refs, ticket = deliver_many(broker, queue, consumer, 1)
    return (refs[0], ticket) if refs else None


def deliver_many(broker: "Broker", queue: Queue, consumer: Any, limit: int
                 ) -> Tuple[List[MessageRef], Optional[Ticket]]:
    """Like ``deliver`` for up to ``limit`` references, journaled in one write."""
    from engine.deadletter import expire_now
    now = broker.now_ms()
    refs: List[MessageRef] = []
    records = []
    expired: List[MessageRef] = []
    while len(refs) < limit:
        if queue.non_destructive:
            ref = queue.peek_after(consumer.cursor)
            if ref is None:
                if depage_for(broker, queue):
                    continue
                break
            consumer.cursor = ref.seq
        else:
            ref = queue.take()
            if ref is None:
                if depage_for(broker, queue):
                    continue
                break
        if ref.msg.expiration and ref.msg.expiration <= now:
            if queue.non_destructive:
                queue.detach(ref)
            expired.append(ref)
            continue
        ref.delivery_count += 1
        if queue.non_destructive:
            refs.append(ref)
            continue
        ref.consumer = consumer
        queue.delivering[ref.msg.mid] = ref
        broker.deliveries += 1
        ref.taken = broker.deliveries
        refs.append(ref)
        if ref.journaled:
            records.append((RecordKind.DELIVERY,
                            schema.delivery(queue.id, ref.msg.mid, ref.delivery_count)))
    if expired:
        expire_now(broker, expired)
    return refs, (broker.write(records) if records else None)


def depage_for(broker: "Broker", queue: Queue) -> bool:
    """``queue`` has nothing left but paged references: its address moves its oldest paged
    messages onto their queues (``engine.depage``). False when it had none."""
    if not queue.paged.count():
        return False
    addr = broker.addresses.get(queue.config.address)
    if addr is None:
        return False
    removals, _ticket, touched = depage(broker, addr, broker.budget.refill_size())
    for ref, why in removals:
        forget(broker, ref, why)
    for q in touched:
        if q is not queue:
            serve_waiters(broker, q)
    return bool(touched)


def serve_waiters(broker: "Broker", queue: Queue) -> None:
    """Give available messages to consumers blocked in receive, longest waiting first; a
    waiter whose consumer has no credit keeps its place until an ack frees some."""
    kept = []
    while queue.waiters and (queue.ready_count() or queue.paged.count()):
        waiter = queue.waiters.popleft()
        if waiter.done or waiter.consumer.closed:
            continue
        if not waiter.consumer.has_credit():
            kept.append(waiter)
            continue
        got = deliver(broker, queue, waiter.consumer)
        if got is None:
            kept.append(waiter)
            break
        waiter.give(*got)
    queue.waiters.extendleft(reversed(kept))


def settle(broker: "Broker", refs: Iterable[Removal], journal: bool = True) -> Optional[Ticket]:
    """Remove references in delivery for good (acked...), journaling ACK records with reasons
    (unless ``journal`` is false: their ACKs are already inside a TX record). References of
    non-destructive queues stay on the queue."""
    records = []
    for ref, reason in refs:
        queue = ref.queue
        if queue.non_destructive:
            continue
        queue.settle(ref)
        if ref.journaled and journal:
            records.append((RecordKind.ACK, schema.ack(queue.id, ref.msg.mid, reason)))
        forget(broker, ref, reason)
    return broker.write(records) if records else None


def cancel(broker: "Broker", refs: Sequence[MessageRef]) -> Optional[Ticket]:
    """Return references in delivery to the head of their queues, in the reverse order of
    consumption (``refs`` in consumption order), delivery counts kept; those that reached
    max-delivery-attempts are dead-lettered; what policies remove is journaled, and so is each
    return (a DELIVERY record marked returned), so a reopen knows which deliveries were open."""
    from engine.deadletter import move_out
    now = broker.now_ms()
    by_queue: Dict[int, List[MessageRef]] = {}
    for ref in refs:
        by_queue.setdefault(ref.queue.id, []).append(ref)
    dead: List[Removal] = []
    removals: List[Removal] = []
    returned: List[MessageRef] = []
    for qid, group in by_queue.items():
        queue = group[0].queue
        if broker.queues_by_id.get(qid) is not queue or queue.non_destructive:
            continue  # deleted meanwhile, or nothing was taken off the queue
        limit = broker.settings.resolve(queue.config.address).max_delivery_attempts
        back = []
        for ref in group:
            if limit is not None and limit >= 0 and ref.delivery_count >= limit:
                queue.delivering.pop(ref.msg.mid, None)
                ref.consumer = None
                dead.append((ref, AckReason.KILLED.value))
            else:
                back.append(ref)
        removals += queue.return_to_head(back, now)
        returned += back
    removed = {id(r) for r, _why in removals}
    records = [(RecordKind.ACK, schema.ack(r.queue.id, r.msg.mid, why))
               for r, why in removals if r.journaled]
    records += [(RecordKind.DELIVERY, schema.delivery(r.queue.id, r.msg.mid, r.delivery_count,
                                                      returned=True))
                for r in returned if r.journaled and id(r) not in removed]
    ticket = broker.write(records) if records else None
    for ref, why in removals:
        forget(broker, ref, why)
    if dead:
        ticket = move_out(broker, dead) or ticket
    for qid in by_queue:
        queue = broker.queues_by_id.get(qid)
        if queue is not None:
            queue.written()  # what came back may be more than the head holds
            serve_waiters(broker, queue)
    return ticket


def commit(broker: "Broker", sends: Sequence[Tuple[Destination, Message]],
           acks: Sequence[Removal]) -> Optional[Ticket]:
    """Apply a transaction: every send and ack, and what policies decide for the sends, in one
    TX record (durable parts), then in memory. Routing happens now, at commit.

    Raises:
        AddressNotFoundError, QueueNotFoundError, RoutingTypeError, RecordTooLargeError (the
            transaction does not fit one record), AddressFullError (a FAIL address is full;
            DROP drops, PAGE pages, BLOCK waited at the send): nothing of the transaction is
            applied.
    """
    routed = [(route(broker, dest), msg) for dest, msg in sends]
    size = sum(record_bound(addr.name, len(queues), msg) for (addr, queues), msg in routed)
    size += ACK_BOUND * len(acks)
    limit = broker.persistence.journal.options.max_frame()
    if size + FRAME_OVERHEAD > limit:
        raise RecordTooLargeError(size + FRAME_OVERHEAD, limit)
    admitted = admission(broker, routed, block=False)
    placement = Placement(broker)
    for ((addr, queues), msg), paged in zip(admitted.accepted, admitted.paged, strict=True):
        placement.add(addr.name, queues, msg, paged)
    ack_payloads = [schema.ack(ref.queue.id, ref.msg.mid, reason) for ref, reason in acks
                    if ref.journaled and not ref.queue.non_destructive]
    ticket = placement.write(ack_payloads, as_tx=True)
    settle(broker, acks, journal=False)
    return ticket


def body_of(broker: "Broker", msg: StoredMessage) -> bytes:
    """The message body: in memory, or read from the journal (lock held).

    Raises:
        KeyError: the message is not stored any more (settled meanwhile).
    """
    if msg.body is not None:
        return msg.body
    return broker._guard(broker.persistence.read_body, msg.mid)
