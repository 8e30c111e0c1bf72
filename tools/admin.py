"""qpid-config-style administration of a closed store: ``mqstore add queue`` and
``mqstore del queue`` (Qpid queues; Qpid's ``qpid-config add queue`` / ``del queue``).

Each command first checks what it was asked against the store opened read-only (a refused
command changes no byte), then opens the store as the embedding application would (recovery
runs, the store's lock is taken: a store open in another process is refused), makes the one
change through the broker API, and closes it. A queue added to a closed store is durable: a
transient one would be gone when the command exits.
"""

from __future__ import annotations

from typing import Optional

import click

from mqstore.journal import MqStoreError
from .commands import STORE, console, fail


def _check_add(directory: str, name: str, address: str, routing_type: str,
               alternate: Optional[str] = None) -> None:
    """Refuse, before anything is written, what ``create_address``/``create_queue`` would.

    Raises:
        InvalidNameError, AlreadyExistsError, RoutingTypeError, AddressNotFoundError (the
        alternate address); MqStoreError: the store cannot be read.
    """
    from mqstore.engine.errors import AddressNotFoundError, AlreadyExistsError, RoutingTypeError
    from mqstore.engine.addressing.names import check_name
    from .offline import OfflineStore

    check_name(name, wildcards=True)  # a queue may be bound to a wildcard address (news.#)
    check_name(address, wildcards=True)
    with OfflineStore(directory) as store:
        if any(q.name == name for q in store.image.queues.values()):
            raise AlreadyExistsError("queue", name)
        addr = next((a for a in store.image.addresses.values() if a.name == address), None)
        if addr is not None and routing_type not in addr.routing_types:
            raise RoutingTypeError(f"address {address!r} does not support {routing_type}")
        if alternate and alternate != address and \
                not any(a.name == alternate for a in store.image.addresses.values()):
            raise AddressNotFoundError(alternate)


def _check_del(directory: str, name: str, if_empty: bool) -> None:
    """Refuse, before anything is written, what ``delete_queue`` would on a closed store.

    Raises:
        QueueNotFoundError, QueueNotEmptyError; MqStoreError: the store cannot be read.
    """
    from mqstore.engine.errors import QueueNotEmptyError, QueueNotFoundError
    from .offline import OfflineStore

    with OfflineStore(directory) as store:
        queue = next((q for q in store.image.queues.values() if q.name == name), None)
        if queue is None:
            raise QueueNotFoundError(name)
        if if_empty and queue.count + queue.scheduled:
            raise QueueNotEmptyError(name, queue.count + queue.scheduled)


def register_admin(main: click.Group) -> None:
    """Add the ``add`` and ``del`` groups to the ``mqstore`` group."""

    @main.group("add")
    def add() -> None:
        """Add a queue to a closed store (qpid-config add)."""

    @main.group("del")
    def delete() -> None:
        """Delete a queue of a closed store (qpid-config del)."""

    @add.command("queue")
    @STORE
    @click.argument("name")
    @click.option("--address", help="The address to bind it to (default: NAME); created when "
                                    "missing, with the queue's routing type. A wildcard "
                                    "expression (news.#, news.*.sport) takes what is sent to "
                                    "every address it matches.")
    @click.option("--routing-type", type=click.Choice(["anycast", "multicast"]),
                  default="anycast", show_default=True)
    @click.option("--durable", is_flag=True, default=True, show_default=True,
                  help="Journaled: always so for a queue added to a closed store.")
    @click.option("--ring-size", type=click.IntRange(min=-1), default=None,
                  help="At most this many ready messages, the oldest removed (Artemis ring "
                       "queue; -1: no limit).")
    @click.option("--last-value-key", default=None,
                  help="Property whose value a newer message replaces an older one by "
                       "(Artemis last-value queue).")
    @click.option("--non-destructive", is_flag=True, help="Consuming leaves messages on it.")
    @click.option("--max-consumers", type=click.IntRange(min=-1), default=-1, show_default=True)
    @click.option("--cluster-durable", is_flag=True,
                  help="Journal non-durable messages too while this node is the last of its "
                       "cluster (Qpid qpid.persist_last_node).")
    @click.option("--max-queue-size", type=click.IntRange(min=0), default=0,
                  help="Most body bytes the queue holds (Qpid qpid.max_size; 0: no limit).")
    @click.option("--max-queue-count", type=click.IntRange(min=0), default=0,
                  help="Most messages the queue holds (Qpid qpid.max_count; 0: no limit).")
    @click.option("--policy-type", type=click.Choice(["reject", "flow_to_disk", "ring",
                                                      "ring_strict"]), default=None,
                  help="What a send past a limit does (Qpid qpid.policy_type; default "
                       "flow_to_disk, as for any durable queue).")
    @click.option("--last-value-queue", is_flag=True,
                  help="A Qpid last-value queue keyed by the qpid.LVQ_key property: a newer "
                       "message replaces the queued one in place unless it was acquired or "
                       "browsed (qpid.last_value_queue).")
    @click.option("--last-value-queue-no-browse", is_flag=True,
                  help="As --last-value-queue, but browsing protects nothing "
                       "(qpid.last_value_queue_no_browse).")
    @click.option("--alternate-address", default=None,
                  help="Where rejected messages, and those left on the queue when it is "
                       "deleted, go (Qpid's alternate exchange); it must exist.")
    @click.option("--filter", "filter_", default=None,
                  help="An Artemis filter expression (JMS selector syntax, e.g. "
                       "\"color = 'red'\"): only messages it matches enter the queue.")
    def add_queue(directory: str, name: str, address: Optional[str], routing_type: str,
                  durable: bool, ring_size: Optional[int], last_value_key: Optional[str],
                  non_destructive: bool, max_consumers: int, cluster_durable: bool,
                  max_queue_size: int, max_queue_count: int, policy_type: Optional[str],
                  last_value_queue: bool, last_value_queue_no_browse: bool,
                  alternate_address: Optional[str], filter_: Optional[str]) -> None:
        """Add queue NAME to the store in DIRECTORY."""
        from mqstore.engine import Broker, PolicyType, QueueConfig, RoutingType
        from mqstore.engine.model import QpidLvq

        from mqstore.engine.config.settings import check_queue_config

        if last_value_queue and last_value_queue_no_browse:
            raise click.UsageError("give --last-value-queue or --last-value-queue-no-browse, "
                                   "not both")
        qpid_lvq = QpidLvq.LVQ_NO_BROWSE if last_value_queue_no_browse else \
            QpidLvq.LVQ if last_value_queue else None

        rt = RoutingType(routing_type)
        address = address or name
        try:
            config = QueueConfig(
                name, address, rt, durable=True, max_consumers=max_consumers,
                ring_size=ring_size, last_value_key=last_value_key,
                non_destructive=non_destructive or None, persist_last_node=cluster_durable,
                max_count=max_queue_count or -1, max_size=max_queue_size or -1,
                policy_type=PolicyType(policy_type) if policy_type else None,
                qpid_lvq=qpid_lvq, alternate_address=alternate_address, filter=filter_)
            check_queue_config(config)  # what create_queue refuses, before the store opens
            _check_add(directory, name, address, routing_type, alternate_address)
            with Broker.open(directory, expiry_scan_ms=0) as broker:
                created = address not in broker.address_names()
                if created:
                    broker.create_address(address, {rt})
                broker.create_queue(config)
        except MqStoreError as exc:
            fail(exc)
        made = f" (address {address!r} created)" if created else ""
        console.print(f"added queue {name!r} on address {address!r}, {routing_type}, "
                      f"durable{made}")

    @delete.command("queue")
    @STORE
    @click.argument("name")
    @click.option("--if-empty", is_flag=True,
                  help="Refuse when the queue holds messages (Qpid ifEmpty).")
    @click.option("--if-unused", is_flag=True,
                  help="Refuse when the queue has consumers (Qpid ifUnused; a closed store has "
                       "none).")
    def del_queue(directory: str, name: str, if_empty: bool, if_unused: bool) -> None:
        """Delete queue NAME and its messages from the store in DIRECTORY; it stays listed by
        ``mqstore queues DIRECTORY --deleted``."""
        from mqstore.engine import Broker

        try:
            _check_del(directory, name, if_empty)
            with Broker.open(directory, expiry_scan_ms=0) as broker:
                info = broker.queue_info(name)
                broker.delete_queue(name, if_empty=if_empty, if_unused=if_unused)
        except MqStoreError as exc:
            fail(exc)
        held, alt = info.message_count, info.alternate_address
        console.print(f"deleted queue {name!r}; its {held:,} message(s) "
                      + (f"went to alternate address {alt!r}" if alt else "were deleted"))
