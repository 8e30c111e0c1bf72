"""Subscription queues (Artemis addressing §4.6, §4.15): a topic subscriber gets its own copy of
what is sent to a multicast address, on a queue of its own.

- A durable subscription is a durable multicast queue named from the client id and the
  subscription name (``client_id.name``; the address when no name is given, as Artemis addressing
  §4.15's protocol managers do), or the subscription name alone when it is shared. It keeps
  what is sent while no subscriber is attached, survives restarts, and is deleted by
  ``Session.unsubscribe``. A non-shared one takes one consumer at a time (max-consumers 1,
  Artemis addressing §4.6 "non-shared").
- A non-durable subscription is a temporary multicast queue (a random name, or the shared
  subscription's name), not journaled, deleted when its last consumer goes.
- A selector becomes the subscription queue's filter (Artemis puts a topic subscriber's
  selector on its queue): what does not match is never copied to it. Subscribing again to a
  durable subscription with another address or selector replaces it (its messages go), as
  JMS says, unless a consumer is attached to it.

Every function runs with the broker lock held.
"""

from __future__ import annotations

import uuid
from typing import Optional

from . import autocreate
from .core import BrokerCore
from ..errors import (AddressNotFoundError, IllegalStateError, InvalidArgumentError,
                     QueueInUseError, QueueNotFoundError, RoutingTypeError)
from ..model import QueueConfig, RoutingType
from ..addressing.names import Destination, check_name
from ..queues.queue import Queue
from ..addressing.wildcards import DEFAULT_SYNTAX, WildcardSyntax

__all__ = ["subscribe", "subscription_name", "unsubscribe"]


def subscription_name(client_id: Optional[str], address: str, name: Optional[str],
                      durable: bool, shared: bool, syntax: WildcardSyntax = DEFAULT_SYNTAX
                      ) -> str:
    """The queue name of a subscription (``check_name``'s rules apply to it).

    Raises:
        InvalidArgumentError: a durable non-shared subscription without a client id, a
            shared one without a name.
    """
    if shared:
        if not name:
            raise InvalidArgumentError("subscription", "a shared subscription needs a name")
        return check_name(name, syntax, wildcards=True)
    if durable:
        if not client_id:
            raise InvalidArgumentError("subscription", "a durable subscription that is not "
                                       "shared is named from the client id: open the session "
                                       "from broker.connection(client_id=...)")
        return check_name(f"{client_id}.{name or address}", syntax, wildcards=True)
    # a temporary subscription queue (Artemis addressing §4.15), in words of the broker's syntax
    return f"{address}{syntax.delimiter}{uuid.uuid4()}"


def subscribe(broker: BrokerCore, client_id: Optional[str], address: str, name: Optional[str],
              durable: bool, shared: bool, selector: Optional[str]) -> Queue:
    """The subscription queue for these arguments: the existing one, or a new one (the
    address auto-created, multicast, when the settings allow).

    Raises:
        AddressNotFoundError: no such address (and no auto-create). RoutingTypeError: the
            address is not multicast. QueueInUseError: a durable subscription of that name is
            attached to with another address or selector. As ``subscription_name`` and
            ``Broker.create_queue``.
    """
    syntax = broker.settings.syntax
    check_name(address, syntax, wildcards=True)  # ``news.#``: what every match receives
    qname = subscription_name(client_id, address, name, durable, shared, syntax)
    autocreate.for_send(broker, Destination(address, None, RoutingType.MULTICAST))
    addr = broker.addresses.get(address)
    if addr is None:
        raise AddressNotFoundError(address)
    if RoutingType.MULTICAST not in addr.routing_types:
        raise RoutingTypeError(f"address {address!r} is not multicast: a subscription needs "
                               f"a multicast address (Artemis addressing §4.3)")
    existing = broker.queues.get(qname)
    if existing is not None:
        same = existing.config.address == address and \
            (existing.config.filter or None) == (selector or None)
        if same:
            return existing
        if existing.consumers:  # JMS: an active subscription cannot change
            raise QueueInUseError(qname, len(existing.consumers))
        broker.delete_queue(qname)  # JMS: a changed subscription is a new one
    broker.create_queue(QueueConfig(qname, address, RoutingType.MULTICAST, durable=durable,
                                    max_consumers=-1 if shared else 1,
                                    auto_delete=not durable, filter=selector or None))
    return broker.queues[qname]


def unsubscribe(broker: BrokerCore, client_id: Optional[str], name: str) -> None:
    """Delete durable subscription ``name`` (``client_id.name``, else the shared ``name``) with
    its messages.

    Raises:
        QueueNotFoundError: no such subscription. QueueInUseError: a consumer is attached
            (JMS: unsubscribing an active subscription is an error). IllegalStateError: the
            queue is not a subscription queue (not multicast).
    """
    for qname in ([f"{client_id}.{name}"] if client_id else []) + [name]:
        queue = broker.queues.get(qname)
        if queue is None:
            continue
        if queue.config.routing_type != RoutingType.MULTICAST:
            raise IllegalStateError(f"queue {qname!r} is not a subscription queue")
        if queue.consumers:
            raise QueueInUseError(qname, len(queue.consumers))
        broker.delete_queue(qname)
        return
    raise QueueNotFoundError(name)
