"""Retroactive addresses (Artemis addressing §4.14): an address whose settings give
``retroactive_message_count`` N keeps the last N messages sent to it in an internal ring queue,
and a queue created on it later receives those messages first, in order.

The ring is an ordinary durable queue named ``$.artemis.internal.retroactive.<address>`` (journaled,
listed, counted in the address's size, purgeable through management, as the seed says) with
``ring_size`` N. Routing gives it a copy of every message sent to the address (anycast or
multicast), besides the address's own queues, and never counts it as one of them (an anycast address
does not round-robin to it). When the count changes at run time the ring's size follows by the
ring-size rule (Artemis ring queues: lowering it deletes nothing now). A count of 0 creates no ring;
an existing ring stays until it is deleted.

A queue created on the address gets a copy of each message in the ring, in order, as new
messages (new ids) written after its QUEUE_ADD record; a crash between the two leaves the
queue without them (the ring still holds them).
"""

from __future__ import annotations

from typing import List, Optional

from .core import BrokerCore
from ..model import Message, QueueConfig, RoutingType
from ..addressing.names import RING_PREFIX
from .placement import Placement, body_of, fitting_bound
from ..queues.queue import Queue

__all__ = ["RING_PREFIX", "copy_to", "ensure", "is_ring", "ring_of"]

CHUNK = 256


def ring_name(address: str) -> str:
    """The name of ``address``'s internal ring queue."""
    return RING_PREFIX + address


def is_ring(name: str) -> bool:
    """Whether queue ``name`` is a retroactive address's internal ring."""
    return name.startswith(RING_PREFIX)


def ring_of(broker: BrokerCore, address: str) -> Optional[Queue]:
    """``address``'s ring queue, or ``None``."""
    queue = broker.queues.get(ring_name(address))
    return queue if queue is not None and queue.config.address == address else None


def ensure(broker: BrokerCore, address: str) -> None:
    """Give ``address`` the ring its settings ask for (lock taken): created when the count is
    above 0 and there is none, resized when the count changed. A wildcard address gets none:
    nothing is sent to it (what its queues take is kept by the rings of the addresses sent
    to, and Artemis gives a queue the ring of its own address only)."""
    with broker.lock:
        addr = broker.addresses.get(address)
        if addr is None or broker.wildcards.is_wild(address):
            return
        count = broker.settings.resolve(address).retroactive_message_count or 0
        ring = ring_of(broker, address)
        if ring is None and count > 0:
            rt = RoutingType.MULTICAST if RoutingType.MULTICAST in addr.routing_types \
                else RoutingType.ANYCAST
            broker.create_queue(QueueConfig(ring_name(address), address, rt, durable=True,
                                            ring_size=count))
        elif ring is not None and count > 0 and ring.config.ring_size != count:
            broker.set_ring_size(ring.name, count)


def copy_to(broker: BrokerCore, queue: Queue) -> None:
    """Give a queue just created on a retroactive address the ring's messages, in order, as
    new messages (journaled; lock taken)."""
    with broker.lock:
        ring = ring_of(broker, queue.config.address)
        if ring is None or ring is queue or broker.queues.get(queue.name) is not queue:
            return
        copies: List[Message] = []
        for ref in ring.browse(None, ring.ready_count() + ring.paged.count()):
            msg = ref.msg
            try:
                body = body_of(broker, msg)
            except KeyError:
                continue  # settled meanwhile
            copies.append(Message(body, dict(msg.properties), msg.durable, msg.priority,
                                  msg.expiration, msg.timestamp))
        limit = broker.storage.max_frame()
        ticket = None
        for start in range(0, len(copies), CHUNK):
            placement = Placement(broker)
            size = 0
            for copy in copies[start:start + CHUNK]:
                n = fitting_bound(queue.config.address, 1, copy, limit)
                if size and size + n > limit:
                    ticket = placement.write() or ticket
                    placement, size = Placement(broker), 0
                placement.add(queue.config.address, [queue], copy)
                size += n
            ticket = placement.write() or ticket
        broker.serve(queue)
    broker.storage.wait(ticket)
