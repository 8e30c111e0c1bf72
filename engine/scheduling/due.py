"""Scheduled messages coming due (Artemis ring queues §3; Artemis where the seed is
silent), lock held.

A message sent with a scheduled delivery time waits in its queues' scheduled buffers
(``engine.queues.scheduledbuffer``), counted in ``message_count`` and ``scheduled_count`` but not on
the
queue: a ring size is not enforced against it. When due, it is put on the **head** of the
queue: before every message waiting there, after those that came due before it (a message
returned to the head by a cancel or rollback stays ahead of it), so scheduled messages are
delivered in scheduled order, FIFO among equal times (Artemis puts each batch
that comes due in front of the earlier ones; mqstore keeps scheduled order, which is also the
order a reopen puts them in). On a full ring queue the message that comes due is the one
removed at that moment; a last-value key is tracked only from then on.

Coming due is journaled as a fact: one DUE record per step (``recovery.schema``) lists the
durable references that joined the head, in order, with the ACKs of what the queue's policies
removed, so recovery re-decides nothing: a reference is scheduled until its DUE record, and a
time that passed while the store was closed comes due at open, in order.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from ..routing.core import BrokerCore
from ..routing.placement import forget
from ..queues.queue import MessageRef, Queue
from ..queues.refs import lane_of, pending, placement_number, with_lsn
from mqstore.journal import Ticket
from mqstore.recovery import schema
from mqstore.recovery.image import HEAD_SHIFT, head_order
from mqstore.recovery.schema import AckReason, RecordKind

STEP = 4096  # references one DUE record puts on a queue's head at most (< 2**HEAD_SHIFT)

Removal = Tuple[MessageRef, str]


def redelivery_delay(settings: Any, delivery_count: int) -> int:
    """The ms a message delivered ``delivery_count`` times waits before its next delivery
    when it comes back unsettled (Artemis QueueImpl: redelivery_delay * multiplier **
    (delivery count - 1), at most max_redelivery_delay, which defaults to 10 x
    redelivery_delay); 0 when the address settings give no delay."""
    base = settings.redelivery_delay or 0
    if base <= 0:
        return 0
    cap = settings.max_redelivery_delay
    if cap is None or cap < 0:
        cap = base * 10
    multiplier = settings.redelivery_delay_multiplier or 1.0
    try:
        delay = base * multiplier ** max(delivery_count - 1, 0)
    except OverflowError:
        return int(cap)
    return int(min(delay, cap))


def promote_due(broker: BrokerCore, queue: Queue, now: int, steps: int = 1
                ) -> Tuple[int, Optional[Ticket]]:
    """Put ``queue``'s scheduled references due at ``now`` ms on its head, ``STEP`` per
    journal write, at most ``steps`` writes (the rest waits for the next call: a receive, the
    scheduler thread, which lets the lock go between steps), then serve its waiting
    consumers.

    Returns:
        (references that came due, the ticket of the last write or ``None``).
    """
    count, ticket = 0, None
    for _step in range(steps):
        nxt = queue.scheduled.next_due()
        if nxt is None or nxt > now:
            break
        items = queue.scheduled.due(now, STEP)
        if not items:
            break
        ticket = place_due(broker, queue, [ref for _at, ref in items], now) or ticket
        count += len(items)
    return count, ticket


def place_due(broker: BrokerCore, queue: Queue, refs: List[MessageRef], now: int
              ) -> Optional[Ticket]:
    """Put ``refs`` (taken out of ``queue``'s scheduled buffer, in due order, their messages
    held) on the head of ``queue``: the policies decide, one DUE record journals the durable
    ones and the removals, then they join and waiting consumers are served."""
    removals: List[Removal] = []
    joining = 0
    evicted = set()
    for ref in refs:
        out = queue.admit_due(ref, now, joining)
        removals += out
        if any(r is ref for r, _why in out):
            evicted.add(id(ref))
        else:
            joining += 1
    journaled = [r for r in refs if r.journaled]
    ticket = None
    if journaled or any(r.journaled for r, _why in removals):
        acks = [schema.ack(r.queue.id, r.msg.mid, why) for r, why in removals if r.journaled]
        ticket = broker.storage.write([(RecordKind.DUE, schema.due(
            queue.id, [r.msg.mid for r in journaled], acks))])
    lsn = ticket.lsn if ticket is not None else broker.storage.last_lsn()
    prev = (0, (lsn << HEAD_SHIFT) - 1) if ticket is not None else \
        (0, (lsn << HEAD_SHIFT) | ((1 << HEAD_SHIFT) - 1))
    i = 0
    for ref in refs:  # one journaled nowhere sorts after the journaled one before it
        lane = lane_of(ref.msg.priority)  # the head of its priority's lane (Artemis)
        if ref.journaled:
            ref.order = prev = head_order(lsn, i, lane)
            i += 1
        else:
            ref.order = with_lsn(pending(lane), (prev[0], prev[1], placement_number()))
        if id(ref) not in evicted:
            queue.join_due(ref)
    queue.scheduled.changed()
    for ref, why in removals:
        forget(broker, ref, why)
    queue.written()
    broker.serve(queue)
    return ticket


def remove_scheduled(broker: BrokerCore, queue: Queue, mid: int) -> Optional[Ticket]:
    """Remove message ``mid`` from ``queue``'s scheduled buffer (Artemis
    removeMessage: counted as killed).

    Returns:
        The ticket to wait on; ``None`` when nothing was journaled.

    Raises:
        KeyError: ``mid`` is not scheduled on ``queue``.
    """
    found = queue.scheduled.take(mid)
    if found is None:
        raise KeyError(mid)
    _at, ref = found
    ticket = None
    if ref.journaled:
        ticket = broker.storage.write([(RecordKind.ACK, schema.ack(queue.id, mid,
                                                           AckReason.KILLED.value))])
    forget(broker, ref, AckReason.KILLED.value)
    return ticket


def deliver_now(broker: BrokerCore, queue: Queue, mid: int) -> Optional[Ticket]:
    """Put message ``mid`` of ``queue``'s scheduled buffer on its head now (Artemis
    deliverScheduledMessage).

    Raises:
        KeyError: ``mid`` is not scheduled on ``queue``.
    """
    found = queue.scheduled.take(mid)
    if found is None:
        raise KeyError(mid)
    return place_due(broker, queue, [found[1]], broker.now_ms())


__all__ = ["STEP", "deliver_now", "place_due", "promote_due", "remove_scheduled"]
