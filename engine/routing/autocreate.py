"""Automatic creation and deletion of addresses and queues (Artemis addressing §4.18, §4.15).

When the address settings allow it: sending to a missing address creates it with the default routing
type (``default-address-routing-type``, MULTICAST unless set), and, for anycast, a queue of the same
name; consuming from a missing queue creates the address and the queue. The destination's parameters
(``orders?exclusive=true``, Artemis addressing §4.9.2, §4.9.6.2, §4.11.1) set the created queue's
attributes; a queue that exists already is used as it is, as Artemis does. An auto-created queue is
deleted once it has no consumers and no messages, an auto-created address once it has no queues.
Every function runs with the broker lock held (it is re-entrant).
"""

from __future__ import annotations

from typing import Optional

from .core import BrokerCore
from ..errors import QueueNotFoundError
from ..model import QueueConfig, RoutingType
from ..addressing.names import Destination
from ..queues.queue import Queue


def for_send(broker: BrokerCore, dest: Destination) -> None:
    """Create what a send to ``dest`` needs, when the settings allow."""
    st = broker.settings.resolve(dest.address)
    addr = broker.addresses.get(dest.address)
    if addr is None:
        if not st.auto_create_addresses:
            return
        rt = dest.routing_type or st.default_address_routing_type or RoutingType.MULTICAST
        broker.create_address(dest.address, {rt}, auto_created=True)
        addr = broker.addresses[dest.address]
    if not st.auto_create_queues:
        return
    if dest.queue is not None:
        if dest.queue not in addr.queues:
            rt = RoutingType.ANYCAST if RoutingType.ANYCAST in addr.routing_types \
                else RoutingType.MULTICAST
            broker.create_queue(QueueConfig(dest.queue, addr.name, rt, auto_created=True,
                                            **dest.queue_settings()))
        return
    wants_anycast = dest.routing_type in (None, RoutingType.ANYCAST)
    has_anycast = any(q.config.routing_type == RoutingType.ANYCAST and
                      q.name != addr.ring_name for q in addr.queues.values())
    if wants_anycast and RoutingType.ANYCAST in addr.routing_types and not has_anycast \
            and addr.name not in broker.queues:
        broker.create_queue(QueueConfig(addr.name, addr.name, RoutingType.ANYCAST,
                                        auto_created=True, **dest.queue_settings()))


def for_consume(broker: BrokerCore, dest: Destination) -> Queue:
    """The queue to consume from for ``dest``: the queue of that name; for an address, the
    queue named as the address, else its first anycast queue; else created when allowed.

    Raises:
        QueueNotFoundError: missing and not auto-creatable.
    """
    name = dest.queue or dest.address
    queue = broker.queues.get(name)
    if queue is not None:
        return queue
    addr = broker.addresses.get(dest.address)
    if dest.queue is None and addr is not None:  # Artemis addressing §4.15, point-to-point:
        # the queue named as the address, else the first anycast queue of the address
        anycast = [q for q in addr.queues.values()  # (not a retroactive address's ring)
                   if q.config.routing_type == RoutingType.ANYCAST and
                   q.name != addr.ring_name]
        if anycast:
            return anycast[0]
    st = broker.settings.resolve(dest.address)
    if not st.auto_create_queues:
        raise QueueNotFoundError(name, dest.address if dest.queue else None)
    addr = broker.addresses.get(dest.address)
    rt = dest.routing_type or st.default_address_routing_type or RoutingType.MULTICAST
    if addr is None:
        if not st.auto_create_addresses:
            raise QueueNotFoundError(name, dest.address)
        broker.create_address(dest.address, {rt}, auto_created=True)
        addr = broker.addresses[dest.address]
    if rt not in addr.routing_types:
        rt = next(iter(sorted(addr.routing_types, key=lambda r: r.value)))
    broker.create_queue(QueueConfig(name, addr.name, rt, auto_created=True,
                                    **dest.queue_settings()))
    return broker.queues[name]


def maybe_delete(broker: BrokerCore, queue: Optional[Queue]) -> None:
    """Delete an auto-created queue left with no consumers and no messages, then its
    auto-created address left with no queues, when the settings say so; delete a Qpid
    auto-delete queue (``QueueConfig.auto_delete``) whose last consumer went, with its messages,
    once nothing of it is in delivery (a transaction's ack waits for its commit or rollback,
    which call this again), and never while the broker closes (a restart deletes no such
    queue). A queue a session owns is left to ``engine.routing.exclusive`` (the owner's close)."""
    if queue is None or broker.queues.get(queue.name) is not queue \
            or queue.name in broker.owners:  # an exclusive queue waits for its owner's close
        return
    if queue.config.auto_delete:
        if queue.had_consumer and idle(broker, queue):
            auto_delete(broker, queue)
        return
    st = broker.settings.resolve(queue.config.address)
    if not (queue.config.auto_created and st.auto_delete_queues):
        return
    if queue.consumers or queue.message_count():
        return
    broker.delete_queue(queue.name)
    addr = broker.addresses.get(queue.config.address)
    if addr is not None and addr.auto_created and not addr.queues \
            and broker.settings.resolve(addr.name).auto_delete_addresses:
        broker.delete_address(addr.name)


def idle(broker: BrokerCore, queue: Queue) -> bool:
    """Whether a Qpid auto-delete queue may go now: no consumer, nothing in delivery, no
    owning session, the broker not closing."""
    return not queue.consumers and not queue.delivering and queue.name not in broker.owners \
        and not broker.closing


def auto_delete(broker: BrokerCore, queue: Queue) -> None:
    """Delete an idle auto-delete queue now, or, with ``auto_delete_delay_ms``
    (``qpid.auto_delete_timeout``), once that much time has passed with it still idle: the
    scheduler runs ``run_due_auto_deletes`` then (a consumer that comes meanwhile cancels it)."""
    delay = queue.config.auto_delete_delay_ms
    if delay <= 0:
        broker.delete_queue(queue.name)
        return
    queue.auto_delete_at = broker.now_ms() + delay
    broker.wake_scheduler()


def run_due_auto_deletes(broker: BrokerCore, now: int) -> int:
    """Delete the auto-delete queues whose delay has passed and that are still idle; return
    how many."""
    done = 0
    for queue in list(broker.queues.values()):
        at = queue.auto_delete_at
        if at is not None and at <= now:
            queue.auto_delete_at = None
            if idle(broker, queue):
                broker.delete_queue(queue.name)
                done += 1
    return done
