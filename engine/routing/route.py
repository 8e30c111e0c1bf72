"""Routing (Artemis addressing §4.2-4.7, §4.13, §4.17): the address and the queues one message
sent to a destination goes to. Anycast picks one queue of the address, round-robin (a message
group's queue for a grouped message); multicast every queue (the body stored once, referenced
from each); both routing types without a prefix: one anycast queue and every multicast one; a
prefix restricts the routing type; a fully qualified queue name picks that queue only. A queue
whose filter does not match the message is left out. Placement on the queues is
``engine.routing.placement``'s.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from .core import BrokerCore
from ..errors import (AddressNotFoundError, InvalidArgumentError, QueueNotFoundError,
                      RoutingTypeError)
from ..queues.groups import group_of
from ..model import Message, RoutingType
from ..addressing.names import Destination
from ..queues.queue import Queue


def route(broker: BrokerCore, dest: Destination, msg: Optional[Message] = None,
          advance: bool = True) -> Tuple[Any, List[Queue]]:
    """The address and the queues one message to ``dest`` goes to (``advance=False`` only
    validates: the anycast round-robin cursor does not move). With ``msg``, a queue whose
    filter does not match it is left out (Artemis: a binding's filter decides whether the
    message enters its queue; an anycast address goes round-robin among the queues that
    match), and ``msg.address`` becomes the address (what ``AMQAddress`` reads).

    The queues of every wildcard address that matches the address count as its own (Artemis
    addressing §4.17; Artemis's wildcard routing): a multicast one takes a copy, an anycast one
    joins the round-robin. A fully qualified name picks its queue only.

    Raises:
        AddressNotFoundError, QueueNotFoundError, RoutingTypeError. InvalidArgumentError: the
        address is a wildcard expression (``check_sendable``).
    """
    addr = broker.addresses.get(dest.address)
    if addr is None:
        raise AddressNotFoundError(dest.address)
    check_sendable(broker, addr.name)
    if msg is not None:
        msg.address = addr.name
    if dest.queue is not None:
        queue = addr.queues.get(dest.queue)
        if queue is None:
            raise QueueNotFoundError(dest.queue, dest.address)
        return addr, [queue] if _takes(queue, msg) else []
    wanted = {dest.routing_type} if dest.routing_type else addr.routing_types
    if not wanted & addr.routing_types:
        raise RoutingTypeError(f"address {addr.name!r} does not support "
                               f"{dest.routing_type.value if dest.routing_type else '?'}")
    ring = addr.queues.get(addr.ring_name)  # a retroactive address's internal ring
    queues = [q for q in addr.queues.values() if q is not ring]
    for name in broker.wildcards.matching(addr.name):  # bound to a wildcard that matches it
        wild = broker.addresses[name]
        queues += [q for q in wild.queues.values() if q.name != wild.ring_name]
    out = [q for q in queues if q.config.routing_type == RoutingType.MULTICAST
           and RoutingType.MULTICAST in wanted and _takes(q, msg)]
    anycast = [q for q in queues if q.config.routing_type == RoutingType.ANYCAST]
    if RoutingType.ANYCAST in wanted and anycast:
        chosen = _anycast_pick(addr, anycast, msg, advance)
        if chosen is not None:
            out.insert(0, chosen)
    if ring is not None and _takes(ring, msg):
        out.append(ring)  # it keeps a copy of everything sent (``engine.routing.retroactive``)
    return addr, out


def route_many(broker: BrokerCore, dest: Destination, messages: Sequence[Message]
               ) -> List[Tuple[Any, List[Queue]]]:
    """``route`` of each of ``messages`` (a batch to one destination), in order; the round-robin
    cursor moves for each. Routed once for them all when the route cannot depend on the
    message or on its place in the batch (``_fixed``); they then share the one result, whose
    queue list nobody may change.

    Raises:
        As ``route``, before any cursor moves.
    """
    if not messages:
        return []
    first = route(broker, dest, messages[0])
    if len(messages) == 1:
        return [first]
    addr = first[0]
    if _fixed(broker, addr, dest):
        name = addr.name
        for msg in messages:
            msg.address = name
        return [first] * len(messages)
    return [first] + [route(broker, dest, msg) for msg in messages[1:]]


def _fixed(broker: BrokerCore, addr: Any, dest: Destination) -> bool:
    """Whether ``route(broker, dest, msg)`` is the same for every message: no queue it may
    pick has a filter, and at most one anycast queue is there to pick from (no round-robin, no
    message groups to follow)."""
    if dest.queue is not None:
        queue = addr.queues.get(dest.queue)
        return queue is not None and queue.filter is None
    queues = list(addr.queues.values())
    for name in broker.wildcards.matching(addr.name):
        queues += broker.addresses[name].queues.values()
    anycast = 0
    for q in queues:
        if q.filter is not None:
            return False
        anycast += q.config.routing_type == RoutingType.ANYCAST
    return anycast <= 1


def check_sendable(broker: BrokerCore, address: str) -> None:
    """Refuse a send to a wildcard expression: a message goes to one address, and a wildcard
    address only gathers what is sent to the addresses it matches (Artemis never routes to a
    wildcard address).

    Raises:
        InvalidArgumentError: ``address`` is a wildcard expression in the broker's syntax.
    """
    if broker.wildcards.is_wild(address):
        raise InvalidArgumentError("address", f"{address!r} is a wildcard expression: send to "
                                   f"one of the addresses it matches (consumers and queues "
                                   f"bound to it receive what is sent there)")


def _anycast_pick(addr: Any, anycast: List[Queue], msg: Optional[Message], advance: bool
                  ) -> Optional[Queue]:
    """The anycast queue a message goes to: its group's queue (``engine.queues.groups``: a group's
    messages go to one queue), else the next from the round-robin cursor on that takes it;
    ``None`` when none does."""
    if len(anycast) == 1:
        return anycast[0] if _takes(anycast[0], msg) else None
    group = None if msg is None else group_of(msg)
    owner = addr.group_queues.get(group) if group is not None else None
    pinned = next((q for q in anycast if q.name == owner), None) if owner else None
    if pinned is not None and _takes(pinned, msg):
        return pinned
    for step in range(len(anycast)):
        i = (addr.cursor + step) % len(anycast)
        if _takes(anycast[i], msg):
            if advance:
                addr.cursor = i + 1
                if group is not None:
                    addr.group_queues[group] = anycast[i].name
            return anycast[i]
    return None


def _takes(queue: Queue, msg: Optional[Message]) -> bool:
    """Whether ``queue``'s filter lets ``msg`` in (always, without a filter or a message)."""
    return queue.filter is None or msg is None or queue.filter.matches(msg)
