"""Orphaned messages: what is left on a queue when it is deleted (Qpid queues "Rejected and
orphaned messages").

A queue declared with an ``alternate_address`` (Qpid's alternate exchange) gives every message
still on it when it is deleted (in delivery in an open transaction, ready, scheduled, paged) to
that address, routed as a send to it is (anycast: one queue, round-robin; multicast: every
queue), as a new message with the original address and queue in ``_AMQ_ORIG_ADDRESS`` /
``_AMQ_ORIG_QUEUE``. Without one, or when the address is gone or has no queues, they are
deleted with the queue.

The move goes a chunk at a time, each chunk one TX record holding the copies and the removals
(reason ``orphaned``), so a queue of any size moves in bounded memory and records under the
journal's size limit, and a crash at any point leaves every message in exactly one place: moved,
or still on the queue, which a crash before the QUEUE_DEL record leaves in place (delete it
again). The queue leaves its address first, so a copy never comes back to it.
"""

from __future__ import annotations

import logging
from typing import List, Optional, Tuple, Union

from .core import BrokerCore
from .deadletter import copy_of
from ..model import Message
from ..addressing.names import Destination
from .placement import ACK_BOUND, Placement, forget, record_bound
from .route import route
from ..queues.queue import MessageRef, Queue
from ..values import TIME_MAX
from mqstore.journal import Ticket
from mqstore.journal.format import FRAME_OVERHEAD
from mqstore.recovery import schema
from mqstore.recovery.schema import AckReason

log = logging.getLogger("mqstore.engine")

CHUNK = 256  # references taken off the queue at a time
ORPHANED = AckReason.ORPHANED.value


def move_orphans(broker: BrokerCore, queue: Queue) -> Optional[Ticket]:
    """Give every message left on ``queue`` (being deleted; no consumers; lock held) to its
    alternate address, or drop it when there is none to take it. Does nothing without an
    alternate address: the deletion drops them.

    Returns:
        The ticket of the last record written (``None``: nothing was).

    Raises:
        BrokerFailedError: a write failed (the broker fail-stops; the records written before
            stand, the rest of the messages are still on the queue at the next open).
    """
    target = queue.config.alternate_address
    if not target:
        return None
    addr = broker.addresses.get(queue.config.address)
    if addr is not None:
        addr.queues.pop(queue.name, None)  # a copy routed there must not come back to it
    ticket: Optional[Ticket] = None
    moved = dropped = 0
    while True:
        refs = take(queue, CHUNK)
        if not refs:
            break
        got, n, d = settle_out(broker, queue, refs, target, ORPHANED)
        ticket = got or ticket
        moved, dropped = moved + n, dropped + d
    if moved or dropped:
        log.info("queue %r deleted: %d message(s) left on it went to alternate address %r, "
                 "%d dropped (no queue there to take them)", queue.name, moved, target,
                 dropped)
    return ticket


def take(queue: Queue, limit: int, delivering: bool = True) -> List[MessageRef]:
    """Up to ``limit`` references off ``queue`` in queue order, each held in RAM: those in
    delivery (a transaction's acks not committed; only when ``delivering``), the ready ones,
    the scheduled ones, then the paged ones."""
    out = sorted(queue.delivering.values(), key=lambda r: r.order)[:limit] if delivering \
        else []
    for ref in out:
        del queue.delivering[ref.msg.mid]
        ref.consumer = None
    while len(out) < limit:
        ref = queue.take()
        if ref is None:
            break
        out.append(ref)
    if len(out) < limit and queue.scheduled.count():
        out += [ref for _at, ref in queue.scheduled.due(TIME_MAX, limit - len(out))]
    if len(out) < limit and queue.paged.count():
        for ref in queue.paged.first(queue, limit - len(out)):
            queue.paged.taken(ref)
            queue.cache.hold(ref.msg)
            out.append(ref)
    return out


Target = Union[str, Queue, None]  # an address (routed as a send), one queue, or nowhere


def settle_out(broker: BrokerCore, queue: Queue, refs: List[MessageRef], target: Target,
               reason: str) -> Tuple[Optional[Ticket], int, int]:
    """Copy ``refs`` (taken off ``queue``) to ``target`` (an address name: routed there as a
    send is; a ``Queue``: to that queue only, whatever its filter, as Artemis moves to a
    binding; ``None``: nowhere) and remove them with ``reason``, in TX records under the
    journal's size limit (lock held). A copy too large for a record with its origin
    properties is logged, and dropped when going to an address (the queue is going away);
    a move to a queue leaves it on ``queue`` instead (back at the head). Returns the last
    ticket, how many were copied and how many dropped."""
    limit = broker.storage.max_frame()
    ticket: Optional[Ticket] = None
    batch: List[Tuple[MessageRef, Optional[Message], str]] = []
    kept: List[MessageRef] = []
    size = moved = dropped = 0
    into = _queues_of(broker, target)
    for ref in refs:
        copy = None
        if into:
            copy = copy_of(broker, ref, queue)
        n = ACK_BOUND
        if copy is not None:
            n += record_bound(into[0].config.address, len(into), copy)
            if n + FRAME_OVERHEAD > limit:  # the copy alone is too large for a record
                log.warning("message %d of queue %r: too large to copy to %r with its "
                            "origin; %s", ref.msg.mid, queue.name, _name(target),
                            "left where it is" if isinstance(target, Queue) else "dropped")
                if isinstance(target, Queue):
                    kept.append(ref)
                    continue
                copy, n = None, ACK_BOUND
        if batch and size + n + FRAME_OVERHEAD > limit:
            ticket = _write(broker, queue, batch, target) or ticket
            batch, size = [], 0
        batch.append((ref, copy, reason))
        size += n
        moved += copy is not None
        dropped += copy is None
    # what a policy removes as those kept come back (a full ring) goes with the last chunk
    batch += [(ref, None, why) for ref, why in queue.return_to_head(kept)]
    if batch:
        ticket = _write(broker, queue, batch, target) or ticket
    return ticket, moved, dropped


def _queues_of(broker: BrokerCore, target: Target) -> List[Queue]:
    """The queues a copy to ``target`` may reach (none: it is dropped)."""
    if isinstance(target, Queue):
        return [target]
    addr = broker.addresses.get(target) if target is not None else None
    return list(addr.queues.values()) if addr is not None else []


def _name(target: Target) -> Optional[str]:
    return target.name if isinstance(target, Queue) else target


def _write(broker: BrokerCore, queue: Queue,
           batch: List[Tuple[MessageRef, Optional[Message], str]], target: Target
           ) -> Optional[Ticket]:
    placement = Placement(broker)
    acks = []
    for ref, copy, reason in batch:
        if copy is not None and isinstance(target, Queue):
            placement.add(target.config.address, [target], copy)
        elif copy is not None and target is not None:
            addr, queues = route(broker, Destination(target), copy)
            placement.add(addr.name, queues, copy)
        if ref.journaled:
            acks.append(schema.ack(queue.id, ref.msg.mid, reason))
    ticket = placement.write(acks, as_tx=True)
    for ref, _copy, reason in batch:
        forget(broker, ref, reason)
    if isinstance(target, Queue):
        broker.serve(target)
    return ticket
