"""Routing, delivery, settlement and transactions: the semantic operations on queues.

Every function here runs with the broker lock held and returns the ticket to wait on (outside
the lock) or ``None`` when nothing was journaled.

- Routing (seed 004 §4.2-4.7, §4.13): anycast picks one queue of the address, round-robin;
  multicast every queue (the body stored once, referenced from each); both routing types
  without a prefix: one anycast queue and every multicast queue; a prefix restricts the routing
  type; a fully qualified queue name picks that queue only.
- Delivery: the head of the queue goes to the consumer that asks, or to the consumer waiting
  longest; its delivery count goes up and a DELIVERY record is journaled before it is handed out.
- Cancel and rollback: references go back to the head in the reverse order of consumption,
  keeping their delivery counts (seed 000_721345e89d5d1b64.txt, Messages in Delivery &
  Rollbacks); acked or rejected ones are journaled as ACK records with a reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple

from engine.errors import AddressNotFoundError, QueueNotFoundError, RoutingTypeError
from engine.model import Message, RoutingType, now_ms
from engine.names import Destination
from engine.queue import MessageRef, Queue, StoredMessage
from journal import Ticket
from recovery import schema
from recovery.schema import AckReason, RecordKind

if TYPE_CHECKING:  # pragma: no cover
    from engine.broker import Address, Broker


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


def send(broker: "Broker", dest: Destination, messages: Sequence[Message]) -> Optional[Ticket]:
    """Route and enqueue messages; journal the durable ones in one write (one record each)."""
    plans = []
    records: List[Tuple[RecordKind, Dict[str, Any]]] = []
    now = now_ms()
    for msg in messages:
        addr, queues = route(broker, dest)
        mid = broker.next_id()
        journaled = [q for q in queues if q.durable] if msg.durable else []
        ts = msg.timestamp or now
        if journaled:
            records.append((RecordKind.MESSAGE, schema.message(
                mid, addr.name, [q.id for q in journaled], msg.body, msg.properties, ts,
                msg.expiration, msg.priority)))
        stored = StoredMessage(mid, addr.name, msg.durable, dict(msg.properties), ts,
                               msg.expiration, msg.priority, None if journaled else msg.body)
        plans.append((stored, queues, journaled))
    ticket = broker.write(records) if records else None
    lsn = ticket.lsn - len(records) + 1 if ticket else 0
    touched: Dict[int, Queue] = {}
    for stored, queues, journaled in plans:
        if journaled:
            stored.image = broker.persistence.image.messages.get(stored.mid)
        if queues:
            broker.messages[stored.mid] = stored
        for q in queues:
            on_disk = q in journaled
            order = (lsn, 0) if on_disk else (0, q.mem_seq)
            q.mem_seq += 1
            q.add_tail(MessageRef(stored, q, order, journaled=on_disk))
            touched[q.id] = q
        if journaled:
            lsn += 1
    for q in touched.values():
        serve_waiters(broker, q)
    return ticket


def deliver(broker: "Broker", queue: Queue, consumer: Any) -> Optional[Tuple[MessageRef,
                                                                               Optional[Ticket]]]:
    """Hand the head of ``queue`` to ``consumer``: count the delivery, journal it (durable
    references), move the reference to in-delivery. ``None`` when the queue is empty."""
    ref = queue.take()
    if ref is None:
        return None
    ref.delivery_count += 1
    ref.consumer = consumer
    queue.delivering[ref.msg.mid] = ref
    ticket = None
    if ref.journaled:
        ticket = broker.write([(RecordKind.DELIVERY,
                                schema.delivery(queue.id, ref.msg.mid, ref.delivery_count))])
    return ref, ticket


def deliver_many(broker: "Broker", queue: Queue, consumer: Any, limit: int
                 ) -> Tuple[List[MessageRef], Optional[Ticket]]:
    """Like ``deliver`` for up to ``limit`` references, journaled in one write."""
    refs, records = [], []
    while len(refs) < limit:
        ref = queue.take()
        if ref is None:
            break
        ref.delivery_count += 1
        ref.consumer = consumer
        queue.delivering[ref.msg.mid] = ref
        refs.append(ref)
        if ref.journaled:
            records.append((RecordKind.DELIVERY,
                            schema.delivery(queue.id, ref.msg.mid, ref.delivery_count)))
    return refs, (broker.write(records) if records else None)


def serve_waiters(broker: "Broker", queue: Queue) -> None:
    """Give ready references to consumers blocked in receive, longest waiting first; a waiter
    whose consumer has no credit keeps its place until an ack frees some."""
    kept = []
    while queue.waiters and queue.ready:
        waiter = queue.waiters.popleft()
        if waiter.done or waiter.consumer.closed:
            continue
        if not waiter.consumer.has_credit():
            kept.append(waiter)
            continue
        got = deliver(broker, queue, waiter.consumer)
        assert got is not None
        waiter.give(*got)
    queue.waiters.extendleft(reversed(kept))


def settle(broker: "Broker", refs: Iterable[Tuple[MessageRef, str]],
           journal: bool = True) -> Optional[Ticket]:
    """Remove references for good (acked, rejected...), journaling ACK records with reasons
    (unless ``journal`` is false: their ACKs are already inside a TX record)."""
    records = []
    for ref, reason in refs:
        queue = ref.queue
        queue.settle(ref)
        if reason == AckReason.ACKED.value:
            queue.acknowledged += 1
        elif reason in (AckReason.REJECTED.value, AckReason.KILLED.value):
            queue.killed += 1
        if ref.journaled and journal:
            records.append((RecordKind.ACK, schema.ack(queue.id, ref.msg.mid, reason)))
        broker.drop_message_ref(ref)
    return broker.write(records) if records else None


def cancel(broker: "Broker", refs: Sequence[MessageRef]) -> None:
    """Return references in delivery to the head of their queues, in the reverse order of
    consumption (``refs`` in consumption order); delivery counts are kept."""
    by_queue: Dict[int, List[MessageRef]] = {}
    for ref in refs:
        by_queue.setdefault(ref.queue.id, []).append(ref)
    for qid, group in by_queue.items():
        queue = group[0].queue
        if broker.queues_by_id.get(qid) is not queue:
            continue  # the queue was deleted meanwhile
        queue.return_to_head(group)
        serve_waiters(broker, queue)


def commit(broker: "Broker", sends: Sequence[Tuple[Destination, Message]],
           acks: Sequence[Tuple[MessageRef, str]]) -> Optional[Ticket]:
    """Apply a transaction: every send and ack in one TX record (durable parts), then in
    memory. Routing happens now, at commit."""
    now = now_ms()
    msgs, plans = [], []
    for dest, msg in sends:
        addr, queues = route(broker, dest)
        mid = broker.next_id()
        journaled = [q for q in queues if q.durable] if msg.durable else []
        ts = msg.timestamp or now
        if journaled:
            msgs.append(schema.message(mid, addr.name, [q.id for q in journaled], msg.body,
                                       msg.properties, ts, msg.expiration, msg.priority))
        plans.append((StoredMessage(mid, addr.name, msg.durable, dict(msg.properties), ts,
                                    msg.expiration, msg.priority,
                                    None if journaled else msg.body), queues, journaled,
                      len(msgs) - 1))
    ack_payloads = [schema.ack(ref.queue.id, ref.msg.mid, reason) for ref, reason in acks
                    if ref.journaled]
    ticket = None
    if msgs or ack_payloads:
        ticket = broker.write([(RecordKind.TX, schema.tx(broker.next_id(), msgs, ack_payloads))])
    settle(broker, acks, journal=False)
    touched: Dict[int, Queue] = {}
    for stored, queues, journaled, slot in plans:
        if journaled:
            stored.image = broker.persistence.image.messages.get(stored.mid)
        if queues:
            broker.messages[stored.mid] = stored
        for q in queues:
            on_disk = q in journaled
            order = (ticket.lsn, slot) if on_disk and ticket else (0, q.mem_seq)
            q.mem_seq += 1
            q.add_tail(MessageRef(stored, q, order, journaled=on_disk))
            touched[q.id] = q
    for q in touched.values():
        serve_waiters(broker, q)
    return ticket


def body_of(broker: "Broker", msg: StoredMessage) -> bytes:
    """The message body: in memory, or read from the journal (lock held)."""
    if msg.body is not None:
        return msg.body
    assert msg.image is not None
    return broker._guard(broker.persistence.read_body, msg.image)
