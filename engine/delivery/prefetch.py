"""A consumer's prefetch: references taken off the queue ahead of the receives that hand them
out, so that a consumer working through a backlog writes one DELIVERY batch and waits once per
``prefetch + 1`` messages instead of once per message (Qpid's consumer prefetch; Artemis's
consumer window buffers messages in the client the same way).

A prefetched reference is in delivery for the broker from the moment it is taken: its delivery
count went up and its DELIVERY record was journaled (durable before any receive hands it out),
it counts against the consumer's window, other consumers cannot get it, and
``QueueInfo.delivering_count`` counts it (as Artemis counts messages in a client's buffer).

What the application never received goes back as it was:

- when the consumer closes (or its session or the broker does), its prefetched references
  return to the head of their queue in order, behind the unacked deliveries that return with
  them (consumption order), with the delivery count they had before they were taken and no
  redelivery delay (Artemis cancels a closing consumer's buffered messages with their delivery
  count decremented);
- after a crash they come back like any delivery that was open: redelivered, with the count
  their DELIVERY record says. A redelivered flag on a message the application never saw is
  allowed by JMS ("may have been delivered"); this is why prefetch is off by default
  (``prefetch=0``): with it off, a crash flags only messages a receive returned or was about
  to return.

A reference a Qpid ring removed while it sat in the buffer is passed over (the application
never learns of it, as in Qpid, where the ring takes it from the consumer's credit). One whose
message expired while it sat there is expired when a receive reaches it (its expiry address
gets it, ``engine.routing.deadletter``), not handed out: Artemis's client does the same with expired
messages in its buffer.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Deque, List, Optional, Tuple

from . import settle as ops
from ..routing.core import BrokerCore
from ..routing.deadletter import expire_now
from ..queues.queue import MessageRef, Queue
from mqstore.journal import Ticket


class Prefetch:
    """The references a consumer took ahead, with the ticket of each one's DELIVERY write,
    oldest first.

    Args:
        size: most references taken ahead at a time, beyond those a receive asks for (0: none).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._held: Deque[Tuple[MessageRef, Optional[Ticket]]] = deque()

    def __len__(self) -> int:
        return len(self._held)

    def take(self, broker: BrokerCore, queue: Queue, consumer: Any, wanted: int, room: int
             ) -> Tuple[List[MessageRef], Optional[Ticket]]:
        """Up to ``wanted`` references for a receive (broker lock held): the held ones first,
        then off ``queue`` with up to ``size`` more kept here, in one DELIVERY write; at most
        ``room`` taken off the queue (what the consumer's window leaves besides its unacked
        deliveries and what is held here). Non-destructive queues are never read ahead
        (nothing is taken off them).

        Returns:
            The references in queue order and the ticket to wait on before handing them out
            (``None``: nothing journaled). Tickets complete in journal order, so the last one
            covers the earlier ones.
        """
        refs: List[MessageRef] = []
        ticket: Optional[Ticket] = None
        now = broker.now_ms() if self._held else 0
        expired: List[MessageRef] = []
        while self._held and len(refs) < wanted:
            ref, t = self._held.popleft()
            if not queue.non_destructive and not ops.in_delivery(ref):
                continue
            if ref.msg.expiration and ref.msg.expiration <= now:
                queue.settle(ref)  # out of delivery; expired below, as deliver_many does
                expired.append(ref)
                continue
            refs.append(ref)
            ticket = t or ticket
        if expired:
            expire_now(broker, expired)
        want = wanted - len(refs)
        if want > 0 and room > 0:
            ahead = 0 if queue.non_destructive else self.size
            more, t = ops.deliver_many(broker, queue, consumer, min(want + ahead, room))
            self._held.extend((r, t) for r in more[want:])
            refs += more[:want]
            ticket = t or ticket
        return refs, ticket

    def keep(self, ref: MessageRef, ticket: Optional[Ticket]) -> None:
        """Put ``ref``, taken for a receive that did not hand it out, first (lock held)."""
        self._held.appendleft((ref, ticket))

    def drain(self) -> List[MessageRef]:
        """Empty the buffer (lock held): the references still in delivery, oldest first, each
        with its delivery count back to what it was before it was taken; the caller cancels
        them to their queues (``delivery.cancel``, without redelivery delay). A
        non-destructive queue's (one a cancelled receive kept) only gets its count back:
        nothing was taken off that queue."""
        out = []
        for ref, _t in self._held:
            if ref.queue.non_destructive:
                ref.delivery_count -= 1
            elif ops.in_delivery(ref):
                ref.delivery_count -= 1
                out.append(ref)
        self._held.clear()
        return out
