"""Settling acked references in one step: the ACK records in one journal write, then each
queue they left served and, when it was auto-created and is now empty, deleted
(``Session.ack_many``, and the acks of one event-loop iteration, ``engine.loopbatch``)."""

from __future__ import annotations

from typing import List, Optional, Sequence

from . import settle as ops
from ..routing import autocreate
from ..routing.core import BrokerCore
from ..queues.queue import MessageRef, Queue
from mqstore.journal import Ticket
from mqstore.recovery.schema import AckReason

ACKED = AckReason.ACKED.value  # (read once: an enum member's value costs calls)


def settle_acked(broker: BrokerCore, refs: Sequence[MessageRef]) -> Optional[Ticket]:
    """Remove ``refs`` (each in delivery, its delivery already marked settled by its session)
    from their queues for good with reason ``acked``, journaling their ACK records in one write
    (lock held). A reference no longer in delivery (a Qpid ring removed it meanwhile) is passed
    over, as ``settle.settle`` does. Then every queue they left serves its waiting consumers and
    is deleted when auto-delete says so (``routing.autocreate.maybe_delete``).

    Returns the write's ticket (``None``: nothing journaled), not waited for.

    Raises:
        BrokerFailedError, JournalError: as ``settle.settle``; the references stay in delivery.
    """
    queues: List[Queue] = []
    for ref in refs:
        if ref.queue not in queues:  # (a batch's deliveries come from one queue or few)
            queues.append(ref.queue)
    ticket = ops.settle(broker, [(ref, ACKED) for ref in refs])
    for queue in queues:
        ops.serve_waiters(broker, queue)
        autocreate.maybe_delete(broker, queue)
    return ticket
