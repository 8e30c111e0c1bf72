"""Queue management by filter or message id (Artemis ``QueueControl``): remove messages, move
them to another queue (for example back from a dead-letter queue).

Only messages no consumer holds are touched, as Artemis's ``removeMessages`` and
``moveMessages`` leave deliveries alone: ready ones (in RAM and in the live index), scheduled
ones and paged ones (with a filter, the queue's address first moves its paged messages onto
their queues, so the filter sees them in order). Ready messages are found with a selector's
target list (``engine.queues.selection``), so one call reads the backlog once. The work goes a chunk
at a time, each chunk one TX record of the copies and the removals, so a crash part way
leaves every message in exactly one place: removed or moved, or still on its queue.

A moved message is a new message on the target queue (a new id), with ``_AMQ_ORIG_ADDRESS``
and ``_AMQ_ORIG_QUEUE`` naming where it was; it goes to that queue only, whatever the target
address's other queues and the target queue's filter (Artemis moves to the queue's binding).
The original leaves its queue with reason ``moved``, counted in ``messages_acknowledged`` as
Artemis counts moved messages; a removed one with reason ``killed``, counted in
``messages_killed``.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from .routing.core import BrokerCore
from .delivery.settle import depage_for
from .errors import InvalidArgumentError
from .filters.expression import Filter, parse_filter
from .model import QueueInfo
from .routing.orphans import CHUNK, settle_out, take
from .queues.queue import MessageRef, Queue
from .queues.selection import Selection
from .values import TIME_MAX, check_int
from mqstore.journal import Ticket
from mqstore.recovery.schema import AckReason

__all__ = ["QueueControl"]


class QueueControl:
    """Management of one queue (Artemis ``QueueControl``). Get it with
    ``Broker.queue_control(name)``; it refers to the queue by name, so it stays usable while
    the queue exists.

    Filters are Artemis filter expressions (``engine.filters.expression``); a message id is the
    ``message_id`` a consumer or browser sees.
    """

    def __init__(self, broker: BrokerCore, name: str) -> None:
        self._broker = broker
        self._name = name
        with broker.lock:
            broker.storage.check_open()
            broker.referenced_queue(name)  # raises QueueNotFoundError now

    @property
    def name(self) -> str:
        """The queue reference it was made with."""
        return self._name

    def info(self) -> QueueInfo:
        """The queue's management view (``Broker.queue_info``)."""
        with self._broker.lock:
            return self._broker.referenced_queue(self._name).info()

    def remove_messages(self, filter: Optional[str] = None) -> int:
        """Remove the messages the filter matches (all with ``None``) that no consumer holds
        (Artemis ``removeMessages``; ``removeAllMessages`` without a filter, as
        ``Broker.purge_queue``). Journaled before it returns.

        Returns:
            How many were removed.

        Raises:
            FilterSyntaxError (an ``InvalidArgumentError``): a bad filter; nothing removed.
            QueueNotFoundError: the queue is gone. BrokerFailedError: a write failed (what
            was written before stands).
        """
        return self._run(parse_filter(filter), None)

    def remove_message(self, message_id: int) -> bool:
        """Remove message ``message_id`` from the queue unless a consumer holds it (Artemis
        ``removeMessage``). Returns whether it was removed.

        Raises:
            InvalidArgumentError: ``message_id`` not an int >= 1. As ``remove_messages``.
        """
        return self._run(_by_id(message_id), None) > 0

    def move_messages(self, to_queue: str, filter: Optional[str] = None) -> int:
        """Move the messages the filter matches (all with ``None``) that no consumer holds to
        queue ``to_queue`` (a name, ``address::queue`` or ``::queue``), in queue order
        (Artemis ``moveMessages``). Journaled before it returns.

        Returns:
            How many were moved.

        Raises:
            FilterSyntaxError: a bad filter. QueueNotFoundError: either queue is missing.
            InvalidArgumentError: ``to_queue`` is this queue. Nothing moved then.
            BrokerFailedError.
        """
        return self._run(parse_filter(filter), to_queue)

    def move_message(self, message_id: int, to_queue: str) -> bool:
        """Move message ``message_id`` to queue ``to_queue`` unless a consumer holds it
        (Artemis ``moveMessage``). Returns whether it was moved.

        Raises:
            InvalidArgumentError: ``message_id`` not an int >= 1. As ``move_messages``.
        """
        return self._run(_by_id(message_id), to_queue) > 0

    def _run(self, flt: Optional[Filter], to_queue: Optional[str]) -> int:
        broker = self._broker
        with broker.lock:
            broker.storage.check_open()
            queue = broker.referenced_queue(self._name)
            target = None
            if to_queue is not None:
                target = broker.referenced_queue(to_queue)
                if target is queue:
                    raise InvalidArgumentError("to_queue", f"{to_queue!r} is the queue the "
                                               f"messages are on")
            ticket, count = _settle_all(broker, queue, flt, target)
        broker.storage.wait(ticket)
        return count


def _by_id(message_id: int) -> Filter:
    check_int("message_id", message_id, 1, TIME_MAX)
    got = parse_filter(f"AMQUserID = {int(message_id)}")
    assert got is not None
    return got


def _settle_all(broker: BrokerCore, queue: Queue, flt: Optional[Filter],
                target: Optional[Queue]) -> Tuple[Optional[Ticket], int]:
    """Remove (``target`` ``None``) or move every matching message not in delivery, a chunk
    at a time (lock held)."""
    ticket: Optional[Ticket] = None
    count = 0
    reason = AckReason.KILLED.value if target is None else AckReason.MOVED.value
    if flt is None:
        while refs := take(queue, CHUNK, delivering=False):
            before = count
            ticket, count = _settle(broker, queue, refs, target, reason, ticket, count)
            if count == before:  # only messages too large to move are left (back on it)
                break
        return ticket, count
    while queue.paged.count() and depage_for(broker, queue):
        pass  # paged ones join the queue first: the filter sees them in queue order
    for _at, ref in queue.scheduled.listing(queue.scheduled.count()):
        if flt.matches(ref.msg):
            got = queue.scheduled.take(ref.msg.mid)
            if got is not None:
                ticket, count = _settle(broker, queue, [got[1]], target, reason, ticket,
                                        count)
    sel = Selection(flt)
    if not queue.non_destructive:
        sel.attach(queue)
    try:
        while True:
            refs = _take_matching(queue, sel, CHUNK)
            if not refs:
                return ticket, count
            before = count
            ticket, count = _settle(broker, queue, refs, target, reason, ticket, count)
            if count == before:  # (as above)
                return ticket, count
    finally:
        sel.detach(queue)


def _take_matching(queue: Queue, sel: Selection, limit: int) -> List[MessageRef]:
    if queue.non_destructive:  # every reference in RAM: in queue order
        out = [ref for ref in queue.ready if sel.filter.matches(ref.msg)][:limit]
        for ref in out:
            queue.take_ref(ref)
        return out
    out = []
    while len(out) < limit:
        ref = sel.take(queue)
        if ref is None:
            break
        out.append(ref)
    return out


def _settle(broker: BrokerCore, queue: Queue, refs: List[MessageRef], target: Optional[Queue],
            reason: str, ticket: Optional[Ticket], count: int) -> Tuple[Optional[Ticket], int]:
    """Move ``refs`` to ``target`` or remove them (``engine.routing.orphans.settle_out``); the last
    ticket and the running count of those moved or removed."""
    got, copied, dropped = settle_out(broker, queue, refs, target, reason)
    return got or ticket, count + (copied if target is not None else dropped)
