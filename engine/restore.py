"""Restoring exported messages exactly as they were (``mqstore import``).

Each message goes back to the queues it was on with its delivery count on each; policies are
not run and expiry-delay is not applied, because their decisions were taken when the message
was first sent (and are part of the exported state). One journal write for a whole batch.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from engine.core import BrokerCore
from engine.errors import AddressNotFoundError, QueueNotFoundError
from engine.model import Message
from engine.pagedrefs import spill
from engine.placement import fitting_bound
from engine.queue import MessageRef, StoredMessage, kept_body
from engine.refs import placement_number
from engine.values import TIME_MAX, check_int
from recovery import schema
from recovery.schema import RecordKind


def restore_messages(broker: BrokerCore,
                     items: Sequence[Tuple[str, Dict[str, int], Message]]) -> None:
    """Put messages back exactly as exported (for ``mqstore import``): each item is an
    address, the delivery count on each queue it is on (queue name -> count), and the
    message (timestamp and expiration kept). Policies are not run and expiry-delay is not
    applied: their decisions were taken when the messages were first sent. One write and
    one wait for all items.

    Raises:
        AddressNotFoundError, QueueNotFoundError (also a queue of another address),
        InvalidArgumentError (a message field, or a delivery count not an int >= 0),
        RecordTooLargeError: nothing restored.
    """
    items = [(address, dict(counts), msg.checked()) for address, counts, msg in items]
    limit = broker.persistence.journal.options.max_frame()
    with broker.lock:
        broker.check_open()
        plans = []
        for address, counts, msg in items:
            if address not in broker.addresses:
                raise AddressNotFoundError(address)
            queues = [broker.find_queue(q) for q in counts]
            for q in queues:
                check_int(f"delivery count on {q.name!r}", counts[q.name], 0, TIME_MAX)
                if q.config.address != address:
                    raise QueueNotFoundError(q.name, address)
            fitting_bound(address, len(queues), msg, limit)
            plans.append((address, queues, counts, msg))
        records: List[tuple] = []
        placed = []
        for address, queues, counts, msg in plans:
            mid = broker.next_id()
            on_disk = [q for q in queues if q.durable] if msg.durable else []
            if on_disk:
                records.append((RecordKind.MESSAGE, schema.message(
                    mid, address, [q.id for q in on_disk], msg.body, msg.properties,
                    msg.timestamp, msg.expiration, msg.priority,
                    broker.sizes.paging(address))))
                records += [(RecordKind.DELIVERY,  # a count, not a delivery in flight
                             schema.delivery(q.id, mid, counts[q.name], returned=True))
                            for q in on_disk if counts[q.name] > 0]
            placed.append((mid, address, queues, counts, msg, on_disk, len(records)))
        ticket = broker.write(records) if records else None
        base = ticket.lsn - len(records) + 1 if ticket else 0
        index = 0
        prev: Tuple[int, ...] = (broker.persistence.journal.next_lsn - 1 - len(records), 1 << 62)
        for mid, address, queues, counts, msg, on_disk, upto in placed:
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
                ref = MessageRef(stored, q, prev, counts[q.name], journaled=q in on_disk)
                if not ref.journaled:
                    ref.order = (prev[0], prev[1], number)
                    transient.append(ref)
                if paged:
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
    broker.wait(ticket)

