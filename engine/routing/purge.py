"""Purging a queue: every message on it that no consumer holds is removed (Artemis
``QueueControl.removeAllMessages``, Qpid's queue purge, RabbitMQ's ``queue.purge``).

What goes: the ready messages (in RAM and in the index), the scheduled ones and the paged ones;
messages in delivery stay with their consumers (RabbitMQ and Artemis leave unacknowledged
messages alone too). Each removal is an ACK with reason ``killed`` (counted in
``messages_killed``, as Artemis counts removeMessages), written a chunk at a time in TX
records under the journal's size limit, so a queue of any size is purged in bounded memory,
and a crash part way leaves every message either removed or still on the queue, never both.
"""

from __future__ import annotations

from typing import Optional, Tuple

from .core import BrokerCore
from .orphans import CHUNK, settle_out, take
from ..queues.queue import Queue
from mqstore.journal import Ticket
from mqstore.recovery.schema import AckReason


def purge(broker: BrokerCore, queue: Queue) -> Tuple[Optional[Ticket], int]:
    """Remove every message of ``queue`` not in delivery (broker lock held).

    Returns:
        The ticket of the last record written (``None``: nothing was journaled) and how
        many messages were removed.

    Raises:
        BrokerFailedError: a write failed (the broker fail-stops; the chunks written before
            stand, the rest are on the queue at the next open).
    """
    removed = 0
    ticket: Optional[Ticket] = None
    while True:
        refs = take(queue, CHUNK, delivering=False)
        if not refs:
            return ticket, removed
        got, _copied, dropped = settle_out(broker, queue, refs, None, AckReason.KILLED.value)
        ticket = got or ticket
        removed += dropped


__all__ = ["purge"]
