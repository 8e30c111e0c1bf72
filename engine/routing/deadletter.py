"""Dead letters and expiry (Artemis addressing §4.9.6.4, §4.17).

A message leaves its queue for good when it expires (its expiration, or the one expiry-delay
gave it, has passed), when it was delivered max-delivery-attempts times and cancelled again, or
when it is rejected. It then goes to the queue's expiry address or dead-letter address as a new
message (original address and queue in properties ``_AMQ_ORIG_ADDRESS``/``_AMQ_ORIG_QUEUE``,
no expiration), or, with no such address (or one with no queues), it is dropped and counted in
``messages_expired`` or ``messages_killed``. The removal and the copy are one TX record: after a
crash the message is in exactly one place.

Each outcome is logged on ``mqstore.engine`` as Artemis logs it: a move to a dead-letter address
and a drop for want of one (none set, missing, or without queues) at WARNING (AMQ222149,
AMQ222111, AMQ222146), a move to an expiry address at INFO, an expiry with no expiry address set
at DEBUG.
"""

from __future__ import annotations

import logging
from typing import List, Optional, Sequence, Tuple

from .core import BrokerCore
from .autocreate import maybe_delete
from ..model import Message
from ..addressing.names import Destination
from .placement import Placement, body_of, forget
from .route import route
from ..queues.queue import MessageRef, Queue
from mqstore.journal import Ticket
from mqstore.recovery import schema
from mqstore.recovery.schema import AckReason

log = logging.getLogger("mqstore.engine")

ORIG_ADDRESS = "_AMQ_ORIG_ADDRESS"
ORIG_QUEUE = "_AMQ_ORIG_QUEUE"


def copy_of(broker: BrokerCore, ref: MessageRef, queue: Queue) -> Message:
    """The message ``ref`` points to, as a new message to route elsewhere: body, properties
    (with ``_AMQ_ORIG_ADDRESS`` and ``_AMQ_ORIG_QUEUE`` naming where it was), durability,
    priority and timestamp; no expiration (lock held).

    Raises:
        KeyError: its body is not stored any more.
    """
    props = dict(ref.msg.properties)
    props[ORIG_ADDRESS] = ref.msg.address
    props[ORIG_QUEUE] = queue.name
    return Message(body_of(broker, ref.msg), props, ref.msg.durable, ref.msg.priority, 0,
                   ref.msg.timestamp)


def move_out(broker: BrokerCore, items: Sequence[Tuple[MessageRef, str]]) -> Optional[Ticket]:
    """Remove references (not on a ready list any more) for good, copying each to its queue's
    expiry address (reason "expired"), to its alternate address (reason "rejected", when the
    queue has one: Qpid, Qpid queues "Rejected and orphaned messages"), or to its dead-letter
    address (other reasons, and rejected ones without an alternate address) when set."""
    placement = Placement(broker)
    acks = []
    for ref, reason in items:
        queue = ref.queue
        settings = broker.settings.resolve(queue.config.address)
        expired = reason == AckReason.EXPIRED.value
        alternate = reason == AckReason.REJECTED.value and bool(queue.config.alternate_address)
        target = settings.expiry_address if expired else queue.config.alternate_address \
            if alternate else settings.dead_letter_address
        queues = []
        if target and target in broker.addresses and broker.addresses[target].queues:
            copy = copy_of(broker, ref, queue)  # (its body read once there is a queue)
            addr, queues = route(broker, Destination(target), copy)
            if queues:
                placement.add(addr.name, queues, copy)
        _log_outcome(ref, reason, expired, target, bool(queues), target in broker.addresses,
                     alternate)
        if ref.journaled:
            acks.append(schema.ack(queue.id, ref.msg.mid, reason))
    ticket = placement.write(acks, as_tx=True)
    for ref, reason in items:
        forget(broker, ref, reason)
    for queue in {ref.queue.id: ref.queue for ref, _r in items}.values():
        maybe_delete(broker, queue)  # Artemis addressing §4.18: no consumers and no messages left
    return ticket


def _log_outcome(ref: MessageRef, reason: str, expired: bool, target: Optional[str],
                 moved: bool, exists: bool, alternate: bool = False) -> None:
    what = "expiry address" if expired else "alternate address" if alternate else \
        "dead-letter address"
    where = f"message {ref.msg.mid} of queue {ref.queue.name!r} ({reason})"
    if moved:
        (log.info if expired else log.warning)("%s: sent to %s %r", where, what, target)
    elif not target:
        (log.debug if expired else log.warning)("%s: dropped, no %s is set for its address",
                                                where, what)
    else:
        log.warning("%s: dropped, %s %r %s", where, what, target,
                    "has no queues" if exists else "does not exist")


def expire_now(broker: BrokerCore, refs: List[MessageRef]) -> Optional[Ticket]:
    """Expire references already taken off their ready lists."""
    return move_out(broker, [(r, AckReason.EXPIRED.value) for r in refs])


def expire_messages(broker: BrokerCore) -> Tuple[int, Optional[Ticket]]:
    """Expire every ready message whose expiration has passed (lock held).

    Returns:
        How many references expired, and the ticket to wait on.
    """
    now = broker.now_ms()
    due: List[MessageRef] = []
    for queue in list(broker.queues.values()):
        for ref in list(queue.ready):
            if ref.msg.expiration and ref.msg.expiration <= now:
                queue.detach(ref)
                due.append(ref)
    return len(due), (expire_now(broker, due) if due else None)
