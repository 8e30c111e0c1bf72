"""The broker's management API (Artemis ``ActiveMQServerControl``'s address, queue and
address-settings operations, ``QueueControl``'s scheduled-message ones): a mixin of
``engine.broker.Broker``, the facade, which provides the state these methods lock and change.
Each method checks its input, takes the broker lock for the change and waits for durability
outside it; the steps themselves are ``engine.routing.declare``'s, ``engine.scheduling``'s and
``engine.routing``'s.
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, Iterable, List

from .config.settings import AddressSettings, SettingsRepository
from .control import QueueControl
from .model import AddressInfo, DeletedQueue, QueueConfig, QueueInfo, RoutingType, \
    ScheduledMessage
from .queues.deleted import DeletedQueues
from .queues.queue import Queue
from .routing import declare
from .routing.deadletter import expire_messages
from .routing.lastnode import set_cluster_nodes
from .routing.purge import purge
from .scheduling.due import deliver_now, remove_scheduled
from .scheduling.timer import Scheduler
from .storage.manager import StorageManager


class BrokerManagement:
    """Addresses, queues, address settings and scheduled messages, managed (see the module
    docstring). The ``Broker`` sets the attributes below."""

    lock: threading.RLock
    storage: StorageManager
    settings: SettingsRepository
    scheduler: Scheduler
    deleted: DeletedQueues
    queues: Dict[str, Queue]
    referenced_queue: Callable[[str], Queue]

    def wake_scheduler(self) -> None:
        """A message was scheduled: the scheduler thread looks at the due times again."""
        self.scheduler.wake()

    def deliver_scheduled(self) -> int:
        """Put every scheduled message due now (the broker's clock) on the head of its queue and
        hand it to waiting consumers (Artemis ring queues §3; ``engine.scheduling.due``), then run
        the delayed auto-deletes that are due (``QueueConfig.auto_delete_delay_ms``). The broker
        does
        this itself: on a timer, at each receive and at open; call it after moving an injected
        ``clock`` forward.

        Returns:
            How many scheduled messages this call put on their queues (a full ring queue
            removes those at once); the broker's scheduler thread may have put some there
            first, so look at ``queue_info`` for what is still scheduled.

        Raises:
            BrokerFailedError: the journal failed (fail-stop). IllegalStateError: closed.
        """
        return self.scheduler.deliver_due()

    def scheduled_messages(self, queue: str, limit: int = 100) -> List[ScheduledMessage]:
        """Up to ``limit`` messages of ``queue``'s scheduled buffer, in due order (Artemis
        listScheduledMessages).

        Raises:
            QueueNotFoundError. InvalidArgumentError: limit not an int >= 0.
            BrokerFailedError: a body could not be read.
        """
        return self.scheduler.listing(queue, limit)

    def deliver_scheduled_message(self, queue: str, message_id: int) -> None:
        """Put scheduled message ``message_id`` of ``queue`` on its head now (Artemis
        deliverScheduledMessage); it is then delivered like one that came due.

        Raises:
            QueueNotFoundError. MessageNotFoundError: it is not in the queue's scheduled
            buffer; nothing changed.
        """
        self.scheduler.step(queue, message_id, deliver_now)

    def remove_scheduled_message(self, queue: str, message_id: int) -> None:
        """Remove scheduled message ``message_id`` from ``queue`` (Artemis removeMessage:
        counted in ``messages_killed``; journaled).

        Raises:
            QueueNotFoundError. MessageNotFoundError: it is not in the queue's scheduled
            buffer; nothing changed.
        """
        self.scheduler.step(queue, message_id, remove_scheduled)

    def purge_queue(self, name: str) -> int:
        """Remove every message of queue ``name`` (a name, ``address::queue`` or ``::queue``)
        that no consumer holds: ready, scheduled and paged ones; those in delivery stay
        (Artemis removeAllMessages, Qpid purge, RabbitMQ queue.purge; ``engine.routing.purge``).
        Counted in ``messages_killed``; journaled before it returns.

        Returns:
            How many messages were removed.

        Raises:
            QueueNotFoundError, InvalidNameError: nothing removed. BrokerFailedError.
        """
        with self.lock:
            self.storage.check_open()
            ticket, removed = purge(self, self.referenced_queue(name))
        self.storage.wait(ticket)
        return removed

    def queue_control(self, name: str) -> QueueControl:
        """Management of queue ``name`` (a name, ``address::queue`` or ``::queue``): remove
        or move messages by filter or id (Artemis QueueControl; ``engine.control``).

        Raises:
            QueueNotFoundError, InvalidNameError.
        """
        return QueueControl(self, name)

    def expire_messages(self) -> int:
        """Expire every ready message whose expiration has passed now (moved to the expiry
        address, or dropped and counted in ``messages_expired``).

        Returns:
            How many messages expired.
        """
        with self.lock:
            self.storage.check_open()
            count, ticket = expire_messages(self)
        self.storage.wait(ticket)
        return count

    # -- address settings ---------------------------------------------------------------------
    def set_address_settings(self, match: str, settings: AddressSettings) -> None:
        """Add or replace the address-settings entry for wildcard ``match`` (journaled).

        Raises:
            InvalidArgumentError: a bad pattern (Artemis addressing §4.17: words, ``#`` at the end)
                or a value of the wrong type or range; nothing changed.
        """
        declare.set_address_settings(self, match, settings)

    def remove_address_settings(self, match: str) -> None:
        """Remove the entry for ``match`` (journaled). No error when there is none."""
        declare.remove_address_settings(self, match)

    def address_settings(self, address: str) -> AddressSettings:
        """The effective settings of ``address`` (every matching entry overlaid)."""
        with self.lock:
            return self.settings.resolve(address)

    def set_ring_size(self, queue: str, ring_size: int) -> QueueInfo:
        """Change a queue's ring size at run time (Artemis ring queues: lowering it deletes nothing
        now; new messages keep the queue from growing until it shrinks by consumption).

        Raises:
            QueueNotFoundError. InvalidArgumentError: ring_size not an int in -1..2**63-1.
        """
        return declare.set_ring_size(self, queue, ring_size)

    def set_cluster_nodes(self, nodes: int) -> None:
        """Tell the broker how many nodes of the embedding application's cluster are alive
        (this one included). When the count falls to 1 from more than one, the broker enters
        last-node mode: non-durable messages on ``persist_last_node`` queues are journaled,
        those already there at once (Qpid queues, Qpid cluster-durable queues); a count above 1
        ends the mode. A store that started alone (first count 1) never enters it.

        Raises:
            InvalidArgumentError: nodes not an int >= 1. BrokerFailedError, IllegalStateError.
        """
        set_cluster_nodes(self, nodes)

    # -- addresses and queues -----------------------------------------------------------------
    def create_address(self, name: str,
                       routing_types: Iterable[RoutingType] = (RoutingType.ANYCAST,),
                       auto_created: bool = False) -> AddressInfo:
        """Create an address (journaled; Artemis addressing §4.2-4.5). A wildcard expression in the
        broker's syntax (``news.#``, ``news.*.sport``) makes a wildcard address: its queues take
        what is sent to every address it matches (Artemis addressing §4.17; nothing is sent to it
        directly, as in Artemis).

        Raises:
            InvalidNameError: bad name (004 §4.1). AlreadyExistsError. RoutingTypeError: no
            routing type given. InvalidArgumentError: not RoutingType values.
        """
        return declare.create_address(self, name, routing_types, auto_created)

    def delete_address(self, name: str) -> None:
        """Delete an address that has no queues.

        Raises:
            AddressNotFoundError. ResourceLimitError: it still has queues.
        """
        declare.delete_address(self, name)

    def create_queue(self, config: QueueConfig) -> QueueInfo:
        """Create a queue on an existing address (journaled when durable).

        Raises:
            InvalidNameError, InvalidArgumentError: bad configuration. AddressNotFoundError.
            AlreadyExistsError: a queue of that name exists (queue names are broker-wide).
            RoutingTypeError: the address does not support the queue's routing type.
            AddressNotFoundError: also when its ``alternate_address`` does not exist.
        """
        return declare.create_queue(self, config)

    def delete_queue(self, name: str, if_empty: bool = False, if_unused: bool = False) -> None:
        """Delete a queue and its messages (Qpid queues "Deleting Queues"; Artemis destroyQueue).
        The queue stays listed in ``deleted_queues()`` with the time of deletion. Messages
        still on it go to its ``alternate_address`` when it has one (``engine.routing.orphans``: a
        crash meanwhile leaves each either moved or still on the queue), else are deleted.

        Args:
            if_empty: refuse when it holds messages (on it, in delivery or scheduled).
            if_unused: refuse when it has consumers (Qpid ifUnused). mqstore refuses that
                without the flag too: close the consumers first.

        Raises:
            QueueNotFoundError. QueueInUseError: it has consumers. QueueNotEmptyError: asked
            ``if_empty`` and it holds messages. InvalidArgumentError: a flag not a bool.
            ExclusiveQueueError: a session declared it exclusive (that session deletes it,
            ``Session.delete_queue``). Nothing is deleted after any of them.
        """
        declare.delete_queue(self, name, if_empty, if_unused)

    def deleted_queues(self) -> List[DeletedQueue]:
        """The newest 100 deleted queues, oldest first, with the time each was deleted (seed
        002: the management object of a deleted queue remains). Durable queues' entries
        survive restarts."""
        with self.lock:
            return self.deleted.list()
