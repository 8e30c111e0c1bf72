"""What an AMQP link's source or target names, read as Artemis reads it.

- A client's sender link (its *target*) sends to an address: ``orders``, ``anycast://orders``,
  ``multicast://orders`` or the FQQN ``orders::q1``. A target capability ``queue`` or ``topic``
  picks anycast or multicast when the address has no prefix. A null target address is the
  anonymous relay: each message's ``to`` names its address.
- A client's receiver link (its *source*) consumes from a queue or subscribes to an address:
  an FQQN or ``anycast://name`` or the capability ``queue`` consumes from that queue;
  ``multicast://name`` or the capability ``topic`` subscribes to the address. With neither,
  Artemis's rule: a queue of that name is consumed from, else the address is subscribed to.
  A subscription is durable when the source is (terminus durability not ``none``, or expiry
  policy ``never``): its queue is ``<container-id>.<link-name>`` (Artemis's), or the link
  name alone with the ``shared`` capability (and then several links share it); else it lives
  as long as the link. The ``apache.org:selector-filter:string`` filter is the selector.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from proton import Terminus

SELECTOR = "apache.org:selector-filter:string"
ANYCAST, MULTICAST = "anycast://", "multicast://"


def capabilities(terminus: Terminus) -> List[str]:
    """The capabilities a peer put on ``terminus`` (symbols, as str)."""
    data = terminus.capabilities
    if data is None:
        return []
    data.rewind()
    if not data.next():
        return []
    value: Any = data.get_object()
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)] if value is not None else []


def selector(terminus: Terminus) -> Optional[str]:
    """The selector of ``terminus``'s filter set (``apache.org:selector-filter:string``,
    under any key), or ``None``."""
    data = terminus.filter
    if data is None:
        return None
    data.rewind()
    if not data.next():
        return None
    filters = data.get_object()
    if not isinstance(filters, dict):
        return None
    for key, value in filters.items():
        descriptor = getattr(value, "descriptor", None)
        if str(descriptor) == SELECTOR or str(key) in (SELECTOR, "jms-selector"):
            return str(getattr(value, "value", value))
    return None


def target_destination(address: Optional[str], caps: List[str]) -> Optional[str]:
    """The destination a client's sender link sends to (``Session.send``'s), or ``None`` for
    the anonymous relay."""
    if not address:
        return None
    if address.startswith((ANYCAST, MULTICAST)) or "::" in address:
        return address
    if "topic" in caps:
        return MULTICAST + address
    if "queue" in caps:
        return ANYCAST + address
    return address


@dataclass(frozen=True)
class SourcePlan:
    """What a client's receiver link consumes from.

    Attributes:
        queue: a queue name or FQQN to consume from, or ``None`` for a subscription.
        address: the address subscribed to (``queue`` is ``None``).
        subscription: the subscription's name (durable or shared ones), else ``None``.
        durable, shared: as ``Session.create_subscriber``'s.
        fallback: no prefix and no capability said which: consume from a queue of this name
            when there is one, else subscribe (Artemis's rule).
        selector: the filter's selector or ``None``.
    """

    queue: Optional[str]
    address: Optional[str]
    subscription: Optional[str]
    durable: bool
    shared: bool
    fallback: bool
    selector: Optional[str]


def source_plan(terminus: Terminus, link_name: str) -> SourcePlan:
    """The ``SourcePlan`` of a client's receiver link's source."""
    address = terminus.address or ""
    caps = capabilities(terminus)
    chosen = selector(terminus)
    durable = terminus.durability != Terminus.NONDURABLE or \
        terminus.expiry_policy == Terminus.EXPIRE_NEVER
    shared = "shared" in caps
    subscription = link_name if (durable or shared) else None
    if "::" in address or address.startswith(ANYCAST):
        return SourcePlan(address, None, None, False, False, False, chosen)
    if address.startswith(MULTICAST):
        return SourcePlan(None, address[len(MULTICAST):], subscription, durable, shared, False,
                          chosen)
    if "topic" in caps:
        return SourcePlan(None, address, subscription, durable, shared, False, chosen)
    if "queue" in caps:
        return SourcePlan(address, None, None, False, False, False, chosen)
    return SourcePlan(address, address, subscription, durable, shared, True, chosen)
