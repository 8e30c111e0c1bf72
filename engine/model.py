"""The engine's value types: routing types, messages, queue configuration and management views.

Times are ms since the epoch; 0 means "none" for expiration.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from engine.errors import InvalidNameError


class RoutingType(str, enum.Enum):
    """How an address routes: to one of its queues (anycast) or to all (multicast);
    seed 004 §4.2-4.3."""

    ANYCAST = "anycast"
    MULTICAST = "multicast"


def now_ms() -> int:
    """Wall-clock time in ms since the epoch."""
    return int(time.time() * 1000)


@dataclass
class Message:
    """A message to send, or one received.

    Attributes:
        body: the payload bytes (str is encoded as UTF-8).
        properties: application properties; values are str, int, float, bool, bytes or None.
        durable: persistent; journaled when it reaches a durable queue (seed 002, "Durable
            queues").
        priority: 0-9 (JMS), default 4.
        expiration: absolute expiry time in ms since the epoch, 0 for never.
        timestamp: send time in ms since the epoch (set by the broker when 0).
        message_id: assigned by the broker on send.
        address: the address it was sent to (set by the broker).
    """

    body: bytes = b""
    properties: Dict[str, Any] = field(default_factory=dict)
    durable: bool = True
    priority: int = 4
    expiration: int = 0
    timestamp: int = 0
    message_id: int = 0
    address: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.body, str):
            self.body = self.body.encode("utf-8")
        if not isinstance(self.body, (bytes, bytearray, memoryview)):
            raise TypeError(f"message body must be bytes or str, not {type(self.body).__name__}")
        self.body = bytes(self.body)
        if not 0 <= int(self.priority) <= 9:
            raise ValueError(f"priority must be 0-9, not {self.priority}")
        for key, value in self.properties.items():
            if not isinstance(key, str) or not isinstance(value, (str, int, float, bool, bytes,
                                                                  type(None))):
                raise TypeError(f"property {key!r}: keys are str and values str, int, float, "
                                f"bool, bytes or None")


@dataclass(frozen=True)
class QueueConfig:
    """A queue's configuration (Artemis queue attributes). Fields left ``None`` take the
    address settings' defaults when the queue is created (seed 004 §4.17).

    Attributes:
        name: queue name (seed 004 §4.1 rules).
        address: the address it is bound to (must exist unless auto-create allows).
        routing_type: anycast or multicast; must be one the address supports.
        durable: journaled queue; survives reopening with its durable messages.
        max_consumers: -1 for no limit (seed 004 §4.10).
        exclusive: one consumer at a time receives (seed 004 §4.11); stored, enforced later.
        auto_created: created by the broker on demand (auto-deleted when settings allow).
        ring_size: at most this many ready messages, -1 for no limit (seed 000).
        last_value_key: the last-value property (seed 004 §4.9).
        last_value: a last-value queue with the default key ``_AMQ_LVQ_NAME``.
        non_destructive: consuming leaves messages on the queue (seed 004 §4.9.6).
    """

    name: str
    address: str
    routing_type: RoutingType = RoutingType.ANYCAST
    durable: bool = True
    max_consumers: int = -1
    exclusive: Optional[bool] = None
    auto_created: bool = False
    ring_size: Optional[int] = None
    last_value_key: Optional[str] = None
    last_value: bool = False
    non_destructive: Optional[bool] = None

    def to_record(self) -> Dict[str, Any]:
        """The settings journaled in QUEUE_ADD (everything but name, address, routing type)."""
        return {"durable": self.durable, "max_consumers": self.max_consumers,
                "exclusive": bool(self.exclusive), "auto_created": self.auto_created,
                "ring_size": -1 if self.ring_size is None else self.ring_size,
                "last_value_key": self.last_value_key,
                "non_destructive": bool(self.non_destructive)}

    @classmethod
    def from_record(cls, name: str, address: str, routing_type: str,
                    cfg: Mapping[str, Any]) -> "QueueConfig":
        """Rebuild from a QUEUE_ADD or QUEUE_UPDATE record."""
        return cls(name, address, RoutingType(routing_type), bool(cfg.get("durable", True)),
                   int(cfg.get("max_consumers", -1)), bool(cfg.get("exclusive", False)),
                   bool(cfg.get("auto_created", False)), int(cfg.get("ring_size", -1)),
                   cfg.get("last_value_key"), False, bool(cfg.get("non_destructive", False)))


@dataclass(frozen=True)
class QueueInfo:
    """Management view of one queue (Artemis queue control attributes).

    message_count counts messages on the queue including those in delivery; delivering_count
    those handed to consumers and not yet acked; scheduled_count those held for later delivery.
    messages_added / messages_acknowledged / messages_killed / messages_expired count since the
    broker opened (killed: dead-lettered, rejected or evicted from a ring; last-value
    replacements are not counted).
    """

    name: str
    address: str
    routing_type: RoutingType
    durable: bool
    message_count: int
    delivering_count: int
    scheduled_count: int
    consumer_count: int
    messages_added: int
    messages_acknowledged: int
    messages_killed: int
    messages_expired: int
    max_consumers: int
    exclusive: bool
    auto_created: bool
    ring_size: int = -1
    last_value_key: Optional[str] = None
    non_destructive: bool = False


@dataclass(frozen=True)
class AddressInfo:
    """Management view of one address: its routing types and queue names."""

    name: str
    routing_types: Tuple[RoutingType, ...]
    queues: Tuple[str, ...]
    auto_created: bool


@dataclass(frozen=True)
class ReceivedMessage:
    """A message as a consumer or browser sees it.

    Attributes:
        message: the message (body, properties, ids, times).
        delivery_count: times it has been delivered, this delivery included (browsers: so far).
        redelivered: delivered before (delivery_count > 1).
        queue: the queue it came from.
    """

    message: Message
    delivery_count: int
    queue: str

    @property
    def redelivered(self) -> bool:
        """Whether this message was delivered before."""
        return self.delivery_count > 1


def check_queue_config(config: QueueConfig) -> None:
    """Validate a queue configuration.

    Raises:
        InvalidNameError: bad names. ValueError: bad max_consumers.
    """
    from engine.names import check_name
    check_name(config.name)
    check_name(config.address)
    if not isinstance(config.routing_type, RoutingType):
        raise InvalidNameError(str(config.routing_type), "routing type is anycast or multicast")
    if config.max_consumers < -1 or config.max_consumers == 0:
        raise ValueError("max_consumers is -1 (no limit) or at least 1")
    if config.ring_size is not None and config.ring_size < -1:
        raise ValueError("ring_size is -1 (no limit) or >= 0")
    if config.last_value_key is not None and not config.last_value_key:
        raise ValueError("last_value_key is a non-empty property name")
