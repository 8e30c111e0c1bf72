"""Declaring and deleting addresses, queues and address settings (Artemis addressing §4.2-4.5,
§4.17; Artemis ``createQueue``/``destroyQueue``; Qpid queues "Deleting Queues").

Each step checks its input before anything is written, journals the change under the broker
lock (in LSN order), changes the broker's state, and waits for durability outside the lock.
``engine.broker.Broker``'s management methods are these steps with their docstrings; the
semantic modules (auto-create, subscriptions) reach them through ``BrokerCore``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Optional, Tuple

from ..config.settings import (AddressSettings, check_match, check_queue_config,
                               checked_settings, resolve_queue_config)
from ..errors import (AddressNotFoundError, AlreadyExistsError, ExclusiveQueueError,
                      QueueInUseError, QueueNotEmptyError, QueueNotFoundError,
                      ResourceLimitError, RoutingTypeError)
from ..model import (AddressInfo, DeletedQueue, QueueConfig, QueueInfo, RoutingType,
                     parse_routing_types)
from ..addressing.names import check_name
from ..addressing.wildcards import matches
from ..queues.limits import count_held_bytes
from ..queues.policies import build_policies
from ..queues.queue import Queue
from ..values import TIME_MAX, check_bool, check_int
from ..filters.expression import UnusableFilter, warn_unusable_filter
from . import retroactive
from .address import Address
from .core import BrokerCore
from .orphans import move_orphans
from mqstore.recovery import StoreImage, schema
from mqstore.recovery.schema import RecordKind


def new_queue(broker: BrokerCore, qid: int, config: QueueConfig) -> Queue:
    """A runtime queue sharing the broker's RAM budget, page files and index reader (not
    attached yet: ``attach_queue``)."""
    image = broker.storage.persistence.image

    def page_start() -> Optional[Tuple[int, ...]]:
        state = image.ledger.pages.get(config.address)
        return None if state is None else state.start
    queue = Queue(qid, config, broker.cache, broker.reader if config.durable else None,
                  build_policies(config), page_start, broker.pages)
    queue.persisting = config.persist_last_node and broker.last_node.active
    return queue


def attach_queue(broker: BrokerCore, queue: Queue) -> None:
    """Make ``queue`` one of the broker's, and of its address's (lock held)."""
    broker.queues[queue.name] = queue
    broker.queues_by_id[queue.id] = queue
    addr = broker.addresses.get(queue.config.address)
    if addr is not None:
        addr.queues[queue.name] = queue


def load(broker: BrokerCore, image: StoreImage) -> None:
    """At open: addresses and queues from the image; messages stay in the index (a pageable
    queue reads its head when first needed). A journaled filter that no longer compiles is
    named in the recovery report's warnings."""
    for a in image.addresses.values():
        broker.addresses[a.name] = Address(a.id, a.name,
                                           {RoutingType(r) for r in a.routing_types},
                                           a.auto_created)
        broker.wildcards.added(a.name)
    for qi in image.queues.values():
        config = QueueConfig.from_record(qi.name, qi.address, qi.routing_type, qi.config)
        queue = new_queue(broker, qi.id, config)
        if isinstance(queue.filter, UnusableFilter):
            warn_unusable_filter(broker.recovery_report, queue.name, queue.filter)
        attach_queue(broker, queue)
        queue.open_from_index()
        if config.max_size > 0:  # what a Qpid max_size counts (``engine.queues.limits``)
            count_held_bytes(queue)


def create_address(broker: BrokerCore, name: str, routing_types: Iterable[RoutingType],
                   auto_created: bool) -> AddressInfo:
    """``Broker.create_address``."""
    check_name(name, broker.settings.syntax, wildcards=True)
    rts = parse_routing_types(routing_types)
    check_bool("auto_created", auto_created)
    if not rts:
        raise RoutingTypeError("an address needs at least one routing type (004 §4)")
    with broker.lock:
        broker.storage.check_open()
        if name in broker.addresses:
            raise AlreadyExistsError("address", name)
        aid = broker.storage.next_id()
        ticket = broker.storage.write([(RecordKind.ADDRESS_ADD, schema.address_add(
            aid, name, [r.value for r in rts], auto_created))])
        addr = broker.addresses[name] = Address(aid, name, rts, auto_created)
        broker.wildcards.added(name)
    broker.storage.wait(ticket)
    retroactive.ensure(broker, name)  # Artemis addressing §4.14: its ring, when asked for
    with broker.lock:
        return addr.info(broker.sizes, broker.settings.resolve(name))


def delete_address(broker: BrokerCore, name: str) -> None:
    """``Broker.delete_address``."""
    with broker.lock:
        broker.storage.check_open()
        addr = broker.addresses.get(name)
        if addr is None:
            raise AddressNotFoundError(name)
        if addr.queues:
            raise ResourceLimitError(f"address {name!r} still has queues "
                                     f"{sorted(addr.queues)}; delete them first")
        ticket = broker.storage.write([(RecordKind.ADDRESS_DEL, schema.by_id(addr.id))])
        del broker.addresses[name]
        broker.wildcards.removed(name)
    broker.storage.wait(ticket)


def create_queue(broker: BrokerCore, config: QueueConfig) -> QueueInfo:
    """``Broker.create_queue``."""
    check_queue_config(config, broker.settings.syntax)
    with broker.lock:
        broker.storage.check_open()
        config = resolve_queue_config(broker.settings.resolve(config.address), config)
        addr = broker.addresses.get(config.address)
        if addr is None:
            raise AddressNotFoundError(config.address)
        if config.name in broker.queues:
            raise AlreadyExistsError("queue", config.name)
        if config.routing_type not in addr.routing_types:
            raise RoutingTypeError(f"address {addr.name!r} does not support "
                                   f"{config.routing_type.value}")
        if config.alternate_address and config.alternate_address not in broker.addresses:
            raise AddressNotFoundError(config.alternate_address)
        queue = new_queue(broker, broker.storage.next_id(), config)
        ticket = None
        if config.durable:
            ticket = broker.storage.write([(RecordKind.QUEUE_ADD, schema.queue_add(
                queue.id, config.name, config.address, config.routing_type.value,
                config.to_record()))])
        attach_queue(broker, queue)
    broker.storage.wait(ticket)
    if not retroactive.is_ring(config.name):
        retroactive.copy_to(broker, queue)  # a retroactive address's last messages first
    return queue.info()


def delete_queue(broker: BrokerCore, name: str, if_empty: bool, if_unused: bool) -> None:
    """``Broker.delete_queue``."""
    check_bool("if_empty", if_empty)
    check_bool("if_unused", if_unused)
    with broker.lock:
        broker.storage.check_open()
        queue = broker.queues.get(name)
        if queue is None:
            raise QueueNotFoundError(name)
        if name in broker.owners:  # its owner deletes it through Session.delete_queue
            raise ExclusiveQueueError(name, ended=False)
        if queue.consumers:
            raise QueueInUseError(name, len(queue.consumers))
        held = queue.info().message_count if if_empty else 0
        if held:
            raise QueueNotEmptyError(name, held)
        ticket = move_orphans(broker, queue)  # to its alternate address (Qpid queues)
        now = broker.now_ms()
        cfg = queue.config
        if queue.durable:
            ticket = broker.storage.write([(RecordKind.QUEUE_DEL, schema.queue_deleted(
                queue.id, name, cfg.address, cfg.routing_type.value, now))])
        for ref in list(queue.ready) + list(queue.tail) + list(queue.delivering.values()) \
                + queue.paged.drop() + queue.scheduled.drop():
            broker.drop_message_ref(ref)
        del broker.queues[name]
        del broker.queues_by_id[queue.id]
        addr = broker.addresses.get(cfg.address)
        if addr is not None:
            addr.queues.pop(name, None)
        broker.deleted.add(DeletedQueue(name, cfg.address, cfg.routing_type, queue.durable,
                                        now))
    broker.storage.wait(ticket)


def set_ring_size(broker: BrokerCore, name: str, ring_size: int) -> QueueInfo:
    """``Broker.set_ring_size``."""
    check_int("ring_size", ring_size, -1, TIME_MAX)
    with broker.lock:
        broker.storage.check_open()
        q = broker.find_queue(name)
        config = replace(q.config, ring_size=ring_size)
        ticket = None
        if q.durable:
            ticket = broker.storage.write([(RecordKind.QUEUE_UPDATE,
                                            schema.queue_update(q.id, config.to_record()))])
        q.config = config
        lvq = [p for p in q.policies if hasattr(p, "latest")]
        q.policies = lvq + [p for p in build_policies(config) if not hasattr(p, "latest")]
    broker.storage.wait(ticket)
    return q.info()


def set_address_settings(broker: BrokerCore, match: str, settings: AddressSettings) -> None:
    """``Broker.set_address_settings``."""
    match = check_match(match, broker.settings.syntax)
    settings = checked_settings(settings)
    with broker.lock:
        broker.storage.check_open()
        ticket = broker.storage.write([(RecordKind.SETTINGS,
                                        schema.settings(match, settings.to_record()))])
        broker.settings.set(match, settings)
        touched = [a for a in broker.addresses if matches(match, a, broker.settings.syntax)]
    broker.storage.wait(ticket)
    for address in touched:  # a retroactive count given or changed (Artemis addressing §4.14)
        retroactive.ensure(broker, address)


def remove_address_settings(broker: BrokerCore, match: str) -> None:
    """``Broker.remove_address_settings``."""
    with broker.lock:
        broker.storage.check_open()
        if match not in broker.settings.entries:
            return
        ticket = broker.storage.write([(RecordKind.SETTINGS, schema.settings(match, None))])
        broker.settings.set(match, None)
    broker.storage.wait(ticket)
