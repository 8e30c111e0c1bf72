"""What the semantic modules need of the broker (``BrokerCore``), so that none imports it.

``engine.routing.placement``, ``engine.delivery.settle``, ``engine.routing.deadletter``,
``engine.routing.autocreate``, ``engine.delivery.restart``, ``engine.routing.restore`` and
``engine.session`` work on one open broker: its lock, its addresses and queues, its storage (append
and fold, then wait), the address-full state and the RAM budget. They are typed against this
protocol; ``engine.broker.Broker`` implements it and is the only module that imports them all.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Protocol

from .address import Address
from ..paging.addressfull import AddressSizes, Room
from ..model import QueueConfig, QueueInfo
from ..paging.pagefile import PageFile
from ..paging.memory import IndexReader, MemoryBudget, MessageCache
from ..queues.deleted import DeletedQueues
from ..queues.queue import MessageRef, Queue
from ..config.settings import SettingsRepository
from ..storage.manager import StorageManager
from ..addressing.wildcards import WildcardIndex


class BrokerCore(Protocol):
    """One open broker, as the semantic modules see it (every member guarded by ``lock``).

    Attributes:
        lock: the broker lock (re-entrant). addresses, queues, queues_by_id: by name and id.
        settings: address settings. sizes: what addresses hold. room: senders waiting for
            room. budget: the RAM budget. pages: page files (``None`` in tools).
        persistence: the journal, image and index. sessions: open sessions.
        deliveries: deliveries handed out since open (their consumption order).
        closing: ``close`` has begun (it ends consumers, which must delete no queue).
        owners: queue name -> the session that declared it exclusive (``engine.routing.exclusive``).
        wildcards: the wildcard addresses and what they match (``engine.addressing.wildcards``).
        storage: writes (append and fold), waits, fresh ids and the fail-stop state
            (``engine.storage.manager.StorageManager``).
        persist_delivery_count: journal a DELIVERY record before every hand-out (Artemis's
            persist-delivery-count-before-delivery; ``engine.delivery.settle.deliver_many``).
        cache: the messages in RAM. reader: reads durable queues' references from the index.
        last_node: last-node mode (``engine.routing.lastnode.LastNode``). deleted: the
            deleted queues listed (``engine.queues.deleted``). recovery_report: what the
            open found (warnings are added to it).
    """

    lock: threading.RLock
    addresses: Dict[str, Address]
    queues: Dict[str, Queue]
    queues_by_id: Dict[int, Queue]
    settings: SettingsRepository
    sizes: AddressSizes
    room: Room
    budget: MemoryBudget
    pages: Optional[PageFile]
    sessions: List[Any]
    deliveries: int
    closing: bool
    owners: Dict[str, Any]
    wildcards: WildcardIndex
    storage: StorageManager
    persist_delivery_count: bool
    cache: MessageCache
    reader: IndexReader
    last_node: Any
    deleted: DeletedQueues
    recovery_report: Any

    def now_ms(self) -> int: ...

    def read_body(self, mid: int) -> bytes: ...

    def serve(self, queue: Queue) -> None: ...

    def wake_scheduler(self) -> None: ...

    def drop_message_ref(self, ref: MessageRef) -> None: ...

    def find_queue(self, name: str) -> Queue: ...

    def referenced_queue(self, name: str) -> Queue: ...

    def create_address(self, name: str, routing_types: Any = ..., auto_created: bool = ...
                       ) -> Any: ...

    def delete_address(self, name: str) -> None: ...

    def create_queue(self, config: QueueConfig) -> QueueInfo: ...

    def delete_queue(self, name: str, if_empty: bool = False, if_unused: bool = False
                     ) -> None: ...
