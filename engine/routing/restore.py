"""Restoring exported messages exactly as they were (``mqstore import``).

Each message goes back to the queues it was on with its delivery count on each; policies are
not run and expiry-delay is not applied, because their decisions were taken when the message
was first sent (and are part of the exported state). One journal write for a whole batch.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from .core import BrokerCore
from ..errors import AddressNotFoundError, QueueNotFoundError
from ..queues.paged import spill
from .placement import fitting_bound
from ..queues.queue import MessageRef, StoredMessage, kept_body
from ..queues.refs import lane_of, pending, placement_number, with_lsn
from ..values import TIME_MAX, check_int
from mqstore.recovery import schema
from mqstore.recovery.image import head_order
from mqstore.recovery.schema import RecordKind


def restore_messages(broker: BrokerCore, items: Sequence[Tuple[Any, ...]]) -> None:
    """Put messages back exactly as exported (for ``mqstore import``): each item is an
    address, the delivery count on each queue it is on (queue name -> count), the message
    (timestamp and expiration kept) and, optionally, the queues whose scheduled buffer it
    waits in (queue name -> due time, ms since the epoch; a durable one is journaled as a
    DELIVERY record that returned it through the buffer) and the queues on whose head it
    came due (queue names: journaled through the buffer and a DUE record, so it stays before
    messages that come due later, ``engine.scheduling.due``). Policies are not run and
    expiry-delay is not applied: their decisions were taken when the messages were first
    sent. One write and one wait for all items.

    Raises:
        AddressNotFoundError, QueueNotFoundError (also a queue of another address than the
        message's or a wildcard address matching it, or a scheduled queue the message is not
        on), InvalidArgumentError (a message field, a
        delivery count not an int >= 0, a due time not an int > 0), RecordTooLargeError:
        nothing restored.
    """
    items = [(item[0], dict(item[1]), item[2].checked(),
              dict(item[3]) if len(item) > 3 else {}, list(item[4]) if len(item) > 4 else [])
             for item in items]
    limit = broker.storage.max_frame()
    with broker.lock:
        broker.storage.check_open()
        plans = []
        for address, counts, msg, scheduled, head in items:
            if address not in broker.addresses:
                raise AddressNotFoundError(address)
            queues = [broker.find_queue(q) for q in counts]
            for q in queues:
                check_int(f"delivery count on {q.name!r}", counts[q.name], 0, TIME_MAX)
                if q.config.address != address and \
                        q.config.address not in broker.wildcards.matching(address):
                    raise QueueNotFoundError(q.name, address)  # (nor a wildcard's matching it)
            for name, at in scheduled.items():
                if name not in counts:
                    raise QueueNotFoundError(name, address)
                check_int(f"scheduled time on {name!r}", at, 1, TIME_MAX)
            for name in head:
                if name not in counts or name in scheduled:
                    raise QueueNotFoundError(name, address)
            fitting_bound(address, len(queues), msg, limit)
            plans.append((address, queues, counts, msg, scheduled, head))
        records: List[tuple] = []
        placed = []
        heads: Dict[int, List[int]] = {}  # queue id -> message ids to put on its head
        for address, queues, counts, msg, scheduled, head in plans:
            mid = broker.storage.next_id()
            on_disk = [q for q in queues if q.durable] if msg.durable else []
            pg = broker.sizes.paging(address)
            if on_disk:
                records.append((RecordKind.MESSAGE, schema.message(
                    mid, address, [q.id for q in on_disk], msg.body, msg.properties,
                    msg.timestamp, msg.expiration, msg.priority, pg)))
                records += [(RecordKind.DELIVERY,  # a count, not a delivery in flight
                             schema.delivery(q.id, mid, counts[q.name], returned=True,
                                             at=scheduled.get(q.name, 1 if q.name in head
                                                              else 0)))
                            for q in on_disk if counts[q.name] > 0 or q.name in scheduled
                            or q.name in head]
                for q in on_disk:
                    if q.name in head:
                        heads.setdefault(q.id, []).append(mid)
            placed.append((mid, address, queues, counts, msg, on_disk, len(records),
                           scheduled, head, pg))
        first_due = len(records)
        records += [(RecordKind.DUE, schema.due(qid, mids, [])) for qid, mids in heads.items()]
        ticket = broker.storage.write(records) if records else None
        base = ticket.lsn - len(records) + 1 if ticket else 0
        index = 0
        prev: Tuple[int, ...] = (broker.storage.last_lsn() - len(records), 1 << 62)
        due_lsn = {qid: base + first_due + i for i, qid in enumerate(heads)}
        for mid, address, queues, counts, msg, on_disk, upto, scheduled, head, pg in placed:
            stored = StoredMessage(mid, address, msg.durable, dict(msg.properties),
                                   msg.timestamp, msg.expiration, msg.priority,
                                   kept_body(msg.body, on_disk, queues), bool(on_disk),
                                   len(msg.body))
            paged = broker.sizes.paging(address)  # what pages now pages until none is left
            if queues and not on_disk:
                broker.sizes.add_transient(stored, paged)
            if on_disk:
                prev = (base + index, 0)
            number = placement_number()
            transient = []
            for q in queues:
                at = scheduled.get(q.name, 0)
                here = q.config.address == address  # else a wildcard's copy: never paged
                lane = lane_of(msg.priority, pg and here)
                q.held_bytes += len(msg.body)
                if at and q in on_disk:  # the index holds it in the queue's buffer
                    q.scheduled.added_durable(at)
                    continue
                ref = MessageRef(stored, q, with_lsn(pending(lane), prev), counts[q.name],
                                 journaled=q in on_disk)
                if ref.journaled and q.name in head:  # on the head, as the DUE record says
                    ref.order = head_order(due_lsn[q.id], heads[q.id].index(mid),
                                           lane_of(msg.priority))
                    q.cache.hold(stored)
                    q.join_due(ref)
                    continue
                if not ref.journaled:
                    ref.order = with_lsn(ref.order, (prev[0], prev[1], number))
                    transient += [] if at or not here else [ref]
                if at:
                    q.scheduled.add(ref, at)
                elif paged and here:
                    q.add_paged(ref)
                else:
                    q.load_tail(ref)
            if paged:
                spill(broker.pages, stored, transient)
            index = upto
        touched = {q.id: q for _m, _a, qs, *_r in placed for q in qs}.values()
        for q in touched:
            q.written()
            broker.serve(q)
    broker.storage.wait(ticket)
    broker.wake_scheduler()

