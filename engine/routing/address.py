"""A runtime address: its routing types, its queues, and its management view (Artemis
AddressControl)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Set

from ..paging.addressfull import AddressSizes
from ..model import AddressInfo, RoutingType
from ..addressing.names import RING_PREFIX
from ..queues.queue import Queue
from ..config.settings import AddressSettings


@dataclass
class Address:
    """A runtime address: id, name, routing types, queues by name, round-robin cursor,
    messages dropped by its DROP policy and whether it is dropping now (logged once)."""

    id: int
    name: str
    routing_types: Set[RoutingType]
    auto_created: bool = False
    durable: bool = True
    queues: Dict[str, Queue] = field(default_factory=dict)
    cursor: int = 0
    dropped: int = 0
    dropping: bool = False
    # message group -> the anycast queue its messages go to (``engine.queues.groups``; RAM only)
    group_queues: Dict[str, str] = field(default_factory=dict)
    # its retroactive ring's queue (``engine.routing.retroactive``)
    ring_name: str = field(init=False)

    def __post_init__(self) -> None:
        self.ring_name = RING_PREFIX + self.name

    def info(self, sizes: AddressSizes, settings: AddressSettings) -> AddressInfo:
        """The management view, with what the address holds (``sizes``) against its
        ``settings``."""
        n, b = sizes.size(self.name)
        pn, pb = sizes.paged(self.name)
        policy = settings.address_full_policy
        return AddressInfo(self.name, tuple(sorted(self.routing_types, key=lambda r: r.value)),
                           tuple(self.queues), self.auto_created, n, b,
                           sizes.paging(self.name), pn, pb, self.dropped,
                           policy.value if policy is not None else "PAGE",
                           _limit(settings.max_size_bytes), _limit(settings.max_size_messages))


def _limit(value: Optional[int]) -> int:
    return -1 if value is None else value
