"""Delivery, settlement and transactions: the semantic operations on queues.

Every function here runs with the broker lock held and returns the ticket to wait on (outside
the lock) or ``None`` when nothing was journaled. Routing and placement are
``engine.routing.placement``'s.

- Delivery: the head goes to the consumer that asks, or to the consumer waiting longest; its
  delivery count goes up and a DELIVERY record is journaled before it is handed out (unless
  the broker does not persist delivery counts before delivery, ``Broker.open``'s
  ``persist_delivery_count_before_delivery``: then it is handed out once the message's own
  record is durable, with no record). A
  consumer with a selector gets the first message its selector matches instead
  (``engine.queues.selection``); the others stay for other consumers. Expired
  messages met on the way are expired (``engine.routing.deadletter``). Non-destructive queues hand
  out the next message after the consumer's cursor and keep it. A queue with nothing left but
  paged messages takes its address's oldest ones first (``engine.routing.depage``).
- Cancel and rollback: references go back to the head in the reverse order of consumption with
  their delivery counts (Artemis ring queues, Messages in Delivery & Rollbacks); one that reached
  max-delivery-attempts is dead-lettered instead.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ..routing.core import BrokerCore
from ..routing.deadletter import expire_now, move_out
from ..routing.depage import depage
from ..routing.exclusive import not_local
from ..queues.groups import take_for
from ..model import Message
from ..addressing.names import Destination
from ..routing.placement import (ACK_BOUND, Placement, Removal, admission, chunks, forget,
                                 record_bound, record_bounds)
from ..routing.route import route, route_many
from ..queues.queue import MessageRef, Queue
from ..queues.refs import lane_in, lsn_in
from ..scheduling.due import promote_due, redelivery_delay
from mqstore.journal import RecordTooLargeError, Ticket
from mqstore.journal.format import FRAME_OVERHEAD
from mqstore.recovery import schema
from mqstore.recovery.entries import LSN_MASK
from mqstore.recovery.moves import is_head_order
from mqstore.recovery.schema import AckReason, RecordKind


def send(broker: BrokerCore, dest: Destination, messages: Sequence[Message],
         sender: Optional[Any] = None) -> Tuple[Optional[Ticket], List[Message]]:
    """Route and place messages; journal the durable ones, in as few writes as the record
    size limit allows (tickets complete in order, so the last one covers them all). The
    address-full policies apply first: dropped messages are counted, paged ones wait with
    their queues' paged references.

    ``sender``: the sending session, for no-local queues (``engine.routing.exclusive.not_local``).

    Returns:
        The ticket to wait on, and the messages (in order) that wait for room on a full
        BLOCK address: not placed, the caller sends them once it has room.

    Raises:
        AddressNotFoundError, QueueNotFoundError, RoutingTypeError, RecordTooLargeError (one
            message exceeds the journal's record size), QueueFullError (a queue's Qpid size
            limit), AddressFullError (a FAIL address is
            full): before anything is placed.
    """
    routes = route_many(broker, dest, messages)
    if sender is not None and broker.owners:  # (``not_local`` has nothing to look at else)
        routes = [(addr, not_local(broker, queues, sender)) for addr, queues in routes]
    routed = list(zip(routes, messages))
    record_bounds(routed, broker.storage.max_frame())
    admitted = admission(broker, routed)
    ticket = None
    for chunk in chunks(broker, list(zip(admitted.accepted, admitted.paged, strict=True))):
        placement = Placement(broker)
        for ((addr, queues), msg), paged in chunk:
            placement.add(addr.name, queues, msg, paged)
        ticket = placement.write() or ticket
    return ticket, [msg for _route, msg in admitted.blocked]


def _route_from(broker: BrokerCore, dest: Destination, msg: Message, sender: Optional[Any]
                ) -> Tuple[Any, List[Queue]]:
    """``route`` (queue filters applied), without the no-local queues ``sender``'s
    connection owns."""
    addr, queues = route(broker, dest, msg)
    return addr, not_local(broker, queues, sender)


def deliver(broker: BrokerCore, queue: Queue, consumer: Any) -> Optional[Tuple[MessageRef,
                                                                               Optional[Ticket]]]:
    """Hand the next message of ``queue`` to ``consumer``: count the delivery, journal it,
    move it to in-delivery (destructive queues). ``None`` when nothing is available."""
    refs, ticket = deliver_many(broker, queue, consumer, 1)
    return (refs[0], ticket) if refs else None


def may_receive(queue: Queue, consumer: Any) -> bool:
    """Whether ``consumer`` may be given messages of ``queue``: on an exclusive queue (seed
    004 §4.11, Artemis) only its first open consumer is; when that one closes, the next in
    the order they attached is."""
    return not queue.config.exclusive or bool(queue.consumers and
                                                queue.consumers[0] is consumer)


def deliver_many(broker: BrokerCore, queue: Queue, consumer: Any, limit: int
                 ) -> Tuple[List[MessageRef], Optional[Ticket]]:
    """Like ``deliver`` for up to ``limit`` references, journaled in one write. Scheduled
    messages due now join the head first (``engine.scheduling.due``), one step of them once those
    that came due before are consumed: later ones would join behind those anyway. Nothing for
    a consumer that may not receive (``may_receive``)."""
    if queue.config.exclusive and not may_receive(queue, consumer):
        return [], None
    now = broker.now_ms()
    nxt = queue.scheduled.next_due()
    if nxt is not None and nxt <= now:
        head = None if queue.non_destructive else queue.first()
        if head is None or not is_head_order(head.order):
            promote_due(broker, queue, now)
    refs: List[MessageRef] = []
    records = []
    expired: List[MessageRef] = []
    # without persist-delivery-count-before-delivery, a reference is handed out with no
    # record: at once when its record is durable already (its order key's LSN at most the
    # durable one), else after the fsync of the write that journaled it (``unsynced``). A
    # head key (LSN 0) does not say which record it is, so its delivery is journaled; so is
    # every delivery on a Qpid last-value queue, where a replacement in place has the order
    # key of the message it replaced, not its own record's
    persist = broker.persist_delivery_count or queue.config.qpid_lvq is not None
    durable = broker.storage.durable_lsn()
    unsynced: List[MessageRef] = []
    non_destructive = queue.non_destructive
    groups = queue.groups
    plain = consumer.selection is None  # (then the head, while no group is owned: _take)
    taken = 0
    while taken < limit:
        if non_destructive:
            ref = queue.peek_after(consumer.cursor)
            if ref is None:
                if depage_for(broker, queue):
                    continue
                break
            consumer.cursor[lane_in(ref.order)] = ref.seq
            if consumer.selection is not None and \
                    not consumer.selection.filter.matches(ref.msg):
                continue  # passed over for good: a message's properties do not change
        else:
            ref = queue.take() if plain and not groups.owners else _take(queue, consumer)
            if ref is None:
                if depage_for(broker, queue):
                    continue
                break
        msg = ref.msg
        if msg.expiration and msg.expiration <= now:
            if non_destructive:
                queue.detach(ref)
            expired.append(ref)
            continue
        ref.delivery_count += 1
        taken += 1
        if non_destructive:
            queue.browsed(ref)  # a Qpid last-value queue keeps it from replacement
            refs.append(ref)
            continue
        ref.consumer = consumer
        if msg.properties:  # (a group is a property)
            groups.took(msg, consumer)
        queue.delivering[msg.mid] = ref
        broker.deliveries += 1
        ref.taken = broker.deliveries
        refs.append(ref)
        if not ref.journaled:
            continue
        lsn = ref.order[0] & LSN_MASK  # lsn_in
        if persist or lsn == 0:
            records.append(_delivery_record(ref))
        elif lsn > durable:
            unsynced.append(ref)
    if expired:
        expire_now(broker, expired)
    return refs, _delivery_ticket(broker, records, unsynced)


# the kinds as plain ints, read once (the journal checks an int's range without a call)
_ACK, _DELIVERY = int(RecordKind.ACK), int(RecordKind.DELIVERY)


def _delivery_record(ref: MessageRef) -> Tuple[int, Dict[str, Any]]:
    return _DELIVERY, schema.delivery(ref.queue.id, ref.msg.mid, ref.delivery_count)


def _delivery_ticket(broker: BrokerCore, records: List[Tuple[int, Dict[str, Any]]],
                     unsynced: List[MessageRef]) -> Optional[Ticket]:
    """The ticket a delivery waits on before hand-out: its DELIVERY records' write, which
    also covers every earlier record; else the write covering the messages handed out whose
    records are not durable yet (journaled after all if no write covers them)."""
    if unsynced and not records:
        covering = broker.storage.covering(max(lsn_in(r.order) for r in unsynced))
        if covering is not None:
            return covering
        records = [_delivery_record(r) for r in unsynced]
    return broker.storage.write(records) if records else None


def _take(queue: Queue, consumer: Any) -> Optional[MessageRef]:
    """The next reference ``consumer`` may take off ``queue``: the head; with a selector,
    the first it matches (``engine.queues.selection``); while some message group is owned, the
    first whose group is free or the consumer's (``engine.queues.groups``)."""
    selection = consumer.selection
    if queue.groups.owners:  # pass over the groups other consumers own
        return take_for(queue, queue.groups, consumer,
                        None if selection is None else selection.filter)
    return queue.take() if selection is None else selection.take(queue)


def depage_for(broker: BrokerCore, queue: Queue) -> bool:
    """``queue`` has nothing left but paged references: its address moves its oldest paged
    messages onto their queues (``engine.routing.depage``). False when it had none."""
    if not queue.paged.count():
        return False
    addr = broker.addresses.get(queue.config.address)
    if addr is None:
        return False
    removals, _ticket, touched = depage(broker, addr, queue, broker.budget.refill_size())
    for ref, why in removals:
        forget(broker, ref, why)
    for q in touched:
        if q is not queue:
            serve_waiters(broker, q)
    return bool(touched)


def serve_waiters(broker: BrokerCore, queue: Queue) -> None:
    """Give available messages to consumers blocked in receive, longest waiting first; a
    waiter whose consumer has no credit, or may not receive (an exclusive queue's other
    consumers), keeps its place."""
    if not queue.waiters:  # (most calls: nobody waits)
        return
    kept = []
    while queue.waiters and (queue.ready_count() or queue.paged.count()):
        waiter = queue.waiters.popleft()
        if waiter.done or waiter.consumer.closed:
            continue
        if not waiter.consumer.has_credit() or not may_receive(queue, waiter.consumer):
            kept.append(waiter)
            continue
        got = deliver(broker, queue, waiter.consumer)
        if got is None:
            kept.append(waiter)
            if waiter.consumer.selection is None and not queue.groups.owners:
                break
            continue  # its selector or groups leave it nothing; another waiter may differ
        waiter.give(*got)
    queue.waiters.extendleft(reversed(kept))


def in_delivery(ref: MessageRef) -> bool:
    """Whether ``ref`` is still in delivery on its queue: false once a Qpid ring removed it
    (``engine.queues.limits``; settling or releasing it then does nothing, as in Qpid)."""
    return ref.queue.delivering.get(ref.msg.mid) is ref


def settle(broker: BrokerCore, refs: Iterable[Removal], journal: bool = True) -> Optional[Ticket]:
    """Remove references in delivery for good (acked...), journaling ACK records with reasons
    (unless ``journal`` is false: their ACKs are already inside a TX record). References of
    non-destructive queues stay on the queue; those a ring removed meanwhile are gone
    already."""
    records = []
    for ref, reason in refs:
        queue = ref.queue
        mid = ref.msg.mid
        # in_delivery, inline (once per message settled)
        delivering = queue.delivering
        if queue.config.non_destructive or mid not in delivering or delivering[mid] is not ref:
            continue
        queue.settle(ref)
        if ref.journaled and journal:
            records.append((_ACK, {"q": queue.id, "m": mid, "r": reason}))  # schema.ack
        forget(broker, ref, reason)
    return broker.storage.write(records) if records else None


def cancel(broker: BrokerCore, refs: Sequence[MessageRef], delayed: bool = True
           ) -> Optional[Ticket]:
    """Return references in delivery to the head of their queues, in the reverse order of
    consumption (``refs`` in consumption order), delivery counts kept; those that reached
    max-delivery-attempts are dead-lettered; what policies remove is journaled, and so is each
    return (a DELIVERY record marked returned), so a reopen knows which deliveries were open.
    Where the address settings give a ``redelivery_delay`` (and ``delayed``: not when the
    broker closes or reopens), a reference goes back through its queue's scheduled buffer
    instead, due after that delay (Artemis redelivery delay, ``engine.scheduling.due``)."""
    now = broker.now_ms()
    by_queue: Dict[int, List[MessageRef]] = {}
    for ref in refs:
        if ref.queue.non_destructive or in_delivery(ref):
            by_queue.setdefault(ref.queue.id, []).append(ref)
    dead: List[Removal] = []
    removals: List[Removal] = []
    returned: List[MessageRef] = []
    later: List[Tuple[MessageRef, int]] = []
    for qid, group in by_queue.items():
        queue = broker.queues_by_id.get(qid)
        if queue is None or queue is not group[0].queue or queue.non_destructive:
            continue  # deleted meanwhile, or nothing was taken off the queue
        settings = broker.settings.resolve(queue.config.address)
        limit = settings.max_delivery_attempts
        back, leaving = [], []
        for ref in group:
            delay = redelivery_delay(settings, ref.delivery_count) if delayed else 0
            if limit is not None and limit >= 0 and ref.delivery_count >= limit:
                dead.append((ref, AckReason.KILLED.value))
                leaving.append(ref)
            elif delay > 0:
                later.append((ref, now + delay))
                leaving.append(ref)
            else:
                back.append(ref)
        # those leaving stay in delivery until the others are back: a refill the returns make
        # passes over them, never reading one back from the index (where it still is) into RAM
        removals += queue.return_to_head(back, now)
        for ref in leaving:
            queue.delivering.pop(ref.msg.mid, None)
            ref.consumer = None
        returned += back
    removed = {id(r) for r, _why in removals}
    records = [(RecordKind.ACK, schema.ack(r.queue.id, r.msg.mid, why))
               for r, why in removals if r.journaled]
    records += [(RecordKind.DELIVERY, schema.delivery(r.queue.id, r.msg.mid, r.delivery_count,
                                                      returned=True))
                for r in returned if r.journaled and id(r) not in removed]
    records += [(RecordKind.DELIVERY, schema.delivery(r.queue.id, r.msg.mid, r.delivery_count,
                                                      returned=True, at=at))
                for r, at in later if r.journaled]
    ticket = broker.storage.write(records) if records else None
    for ref, why in removals:
        forget(broker, ref, why)
    for ref, at in later:  # into the scheduled buffer: the index's part, or RAM's
        ref.queue.cache.let_go(ref.msg, gone=False)
        if ref.journaled:
            ref.queue.scheduled.added_durable(at)
        else:
            ref.queue.scheduled.add(ref, at)
    if later:
        broker.wake_scheduler()
    if dead:
        ticket = move_out(broker, dead) or ticket
    for qid in by_queue:
        queue = broker.queues_by_id.get(qid)
        if queue is not None:
            queue.written()  # what came back may be more than the head holds
            serve_waiters(broker, queue)
    return ticket


def commit(broker: BrokerCore, sends: Sequence[Tuple[Destination, Message]],
           acks: Sequence[Removal], sender: Optional[Any] = None) -> Optional[Ticket]:
    """Apply a transaction: every send and ack, and what policies decide for the sends, in one
    TX record (durable parts), then in memory. Routing happens now, at commit (``sender``: the
    committing session, for no-local queues).

    Raises:
        AddressNotFoundError, QueueNotFoundError, RoutingTypeError, RecordTooLargeError (the
            transaction does not fit one record), AddressFullError (a FAIL address is full;
            DROP drops, PAGE pages, BLOCK waited at the send): nothing of the transaction is
            applied.
    """
    routed = [(_route_from(broker, dest, msg, sender), msg) for dest, msg in sends]
    size = sum(record_bound(addr.name, len(queues), msg) for (addr, queues), msg in routed)
    size += ACK_BOUND * len(acks)
    limit = broker.storage.max_frame()
    if size + FRAME_OVERHEAD > limit:
        raise RecordTooLargeError(size + FRAME_OVERHEAD, limit)
    admitted = admission(broker, routed, block=False)
    placement = Placement(broker)
    for ((addr, queues), msg), paged in zip(admitted.accepted, admitted.paged, strict=True):
        placement.add(addr.name, queues, msg, paged)
    ack_payloads = [schema.ack(ref.queue.id, ref.msg.mid, reason) for ref, reason in acks
                    if ref.journaled and not ref.queue.non_destructive and in_delivery(ref)]
    ticket = placement.write(ack_payloads, as_tx=True)
    settle(broker, acks, journal=False)
    return ticket


