"""The engine's value types: routing types, messages, queue configuration and management views.

Times are ms since the epoch; 0 means "none" for expiration.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Mapping, Optional, Set, Tuple

from .errors import InvalidArgumentError
from .values import (TIME_MAX, check_body, check_bool, check_int, check_properties,
                     packed_properties)


class RoutingType(str, enum.Enum):
    """How an address routes: to one of its queues (anycast) or to all (multicast);
    Artemis addressing §4.2-4.3."""

    ANYCAST = "anycast"
    MULTICAST = "multicast"


class PolicyType(str, enum.Enum):
    """What a Qpid queue does with a send that would take it over its ``max_count`` or
    ``max_size`` (Qpid queues "Controlling queue size", Qpid ``qpid.policy_type``).

    - ``REJECT``: the publisher gets ``QueueFullError``, nothing of the send is stored
      (default for non-durable queues).
    - ``FLOW_TO_DISK``: the message is stored but its content leaves memory: it is paged with
      its address (``engine.routing.depage``) and joins the queue as the queue drains (default for
      durable queues).
    - ``RING``: the oldest messages on the queue are removed to make room, even one a consumer
      has acquired and not accepted (its later ack does nothing).
    - ``RING_STRICT``: as ``RING``, but a message in delivery is never removed: when the
      oldest is, the publisher gets ``QueueFullError`` and nothing is stored.
    """

    REJECT = "reject"
    FLOW_TO_DISK = "flow_to_disk"
    RING = "ring"
    RING_STRICT = "ring_strict"


QPID_LVQ_KEY = "qpid.LVQ_key"  # the header whose value keys a Qpid last-value queue
GROUP_ID = "_AMQ_GROUP_ID"  # the property holding a message's group (Artemis)


class QpidLvq(str, enum.Enum):
    """A Qpid last-value queue's flavour (Qpid queues "Last value queues"; the queue-declare
    arguments ``qpid.last_value_queue`` and ``qpid.last_value_queue_no_browse``). A message
    whose ``qpid.LVQ_key`` property equals a queued message's replaces it in place (it takes
    its position), unless that one was acquired (``LVQ_NO_BROWSE``), or acquired or browsed
    (``LVQ``): then the new one joins the tail, and the next one with that key replaces the
    new one. A message without the property is queued normally, never replaced.
    """

    LVQ = "last_value_queue"
    LVQ_NO_BROWSE = "last_value_queue_no_browse"


def parse_routing_types(values: Iterable[object]) -> Set[RoutingType]:
    """The routing types named by ``values`` (``RoutingType`` members or their values).

    Raises:
        InvalidArgumentError: a value that is neither anycast nor multicast.
    """
    try:
        return {RoutingType(r) for r in values}
    except (TypeError, ValueError):
        raise InvalidArgumentError("routing_types", f"{values!r}: each is RoutingType.ANYCAST "
                                                    f"or MULTICAST") from None


def now_ms() -> int:
    """Wall-clock time in ms since the epoch."""
    return int(time.time() * 1000)


def _group_in(properties: Dict[str, Any]) -> Optional[str]:
    """The message group a property map names (``_AMQ_GROUP_ID``, a non-empty str), or
    ``None``."""
    got = properties.get(GROUP_ID)
    return got if isinstance(got, str) and got else None


@dataclass
class Message:
    """A message to send, or one received.

    Attributes:
        body: the payload bytes (str is encoded as UTF-8).
        properties: application properties; values are str, int (-2**63..2**64-1), float,
            bool, bytes or None.
        durable: persistent; journaled when it reaches a durable queue (Qpid queues, "Durable
            queues").
        priority: 0-9 (JMS), default 4; a queue delivers higher priorities first, FIFO
            within one (Artemis; ``engine.queues.lanes``).
        expiration: absolute expiry time in ms since the epoch, 0 for never.
        timestamp: send time in ms since the epoch (set by the broker when 0).
        scheduled_delivery_time: when to deliver it, ms since the epoch (0: at once); until
            then it waits in its queues' scheduled buffers (Artemis ring queues §3). The Artemis
            property ``_AMQ_SCHED_DELIVERY`` (an int, ms since the epoch) is honoured when this is
            0.
        delivery_delay: ms to wait before delivering it (0: none; JMS 2 deliveryDelay), when
            no scheduled time is given. A time not in the future delivers at once.
        group_id: its message group (Artemis addressing §4.8, ``engine.queues.groups``): kept as the
            ``_AMQ_GROUP_ID`` property, which sets it too (or ``JMSXGroupID``); ``None``: none.
        message_id: assigned by the broker on send.
        address: the address it was sent to (set by the broker).
        checked_size: body and packed properties in bytes, set on the copy ``checked`` takes
            (the record size bound uses it); ``None`` otherwise.
    """

    body: bytes = b""
    properties: Dict[str, Any] = field(default_factory=dict)
    durable: bool = True
    priority: int = 4
    expiration: int = 0
    timestamp: int = 0
    message_id: int = 0
    address: str = ""
    scheduled_delivery_time: int = 0
    delivery_delay: int = 0
    group_id: Optional[str] = None
    checked_size: Optional[int] = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # the common case (bytes, no properties, plain fields) with plain tests, no calls:
        # every message sent is built here (issue 38)
        if self.body.__class__ is not bytes:
            self.body = check_body(self.body)
        props = self.properties
        if props or props.__class__ is not dict:
            self.properties = props = check_properties(props, deep=False)
            if self.group_id is None:
                self.group_id = _group_in(props)
        else:
            self.properties = {}
        self._check_fields()

    def _check_fields(self) -> None:
        p, e, t = self.priority, self.expiration, self.timestamp
        if self.durable.__class__ is bool and p.__class__ is int and 0 <= p <= 9 and \
                e.__class__ is int and 0 <= e <= TIME_MAX and t.__class__ is int and \
                0 <= t <= TIME_MAX and self.scheduled_delivery_time == 0 == self.delivery_delay \
                and self.scheduled_delivery_time.__class__ is int is self.delivery_delay.__class__:
            return  # the common case, in one test
        check_bool("durable", self.durable)
        check_int("priority", self.priority, 0, 9)
        check_int("expiration", self.expiration, 0, TIME_MAX)
        check_int("timestamp", self.timestamp, 0, TIME_MAX)
        check_int("scheduled_delivery_time", self.scheduled_delivery_time, 0, TIME_MAX)
        check_int("delivery_delay", self.delivery_delay, 0, TIME_MAX)

    @classmethod
    def stored(cls, body: bytes, properties: Dict[str, Any], durable: bool, priority: int,
               expiration: int, timestamp: int, message_id: int, address: str) -> "Message":
        """A message as the store hands it out (received, browsed): built from values the
        send checked (``checked``) without checking them again; ``properties`` becomes the
        message's own (pass a copy)."""
        msg = cls.__new__(cls)
        msg.__dict__ = {"body": body, "properties": properties, "durable": durable,
                        "priority": priority, "expiration": expiration,
                        "timestamp": timestamp, "message_id": message_id, "address": address,
                        "scheduled_delivery_time": 0, "delivery_delay": 0,
                        "group_id": _group_in(properties) if properties else None,
                        "checked_size": None}
        return msg

    def checked(self) -> "Message":
        """A private, validated copy of this message, taken when it is sent: fields changed
        after construction are checked again, and changes after the send cannot reach what is
        journaled (issue 11: a record that cannot be read back is never written).

        Raises:
            InvalidArgumentError: a field of the wrong type or out of range (body not bytes or
                str, a property value not str/int/float/bool/bytes/None or an int outside
                msgpack's range, priority not 0-9, a time not 0..2**63-1 ms); nothing sent.
        """
        copy = Message.__new__(Message)
        copy.__dict__ = dict(self.__dict__)
        body = self.body
        if body.__class__ is not bytes:
            copy.body = body = check_body(body)
        props = self.properties
        if self.group_id is not None:
            if not isinstance(self.group_id, str) or not self.group_id:
                raise InvalidArgumentError("group_id", f"{self.group_id!r}: a group id is a "
                                           f"non-empty str")
            props = {**props, GROUP_ID: self.group_id}
        if props or props.__class__ is not dict:
            copy.properties, size = packed_properties(props)
        else:
            copy.properties, size = {}, 1  # msgpack's empty map: one byte
        copy._check_fields()
        copy.checked_size = len(body) + size
        return copy


@dataclass(frozen=True)
class QueueConfig:
    """A queue's configuration (Artemis queue attributes). Fields left ``None`` take the
    address settings' defaults when the queue is created (Artemis addressing §4.17).

    Attributes:
        name: queue name (Artemis addressing §4.1 rules).
        address: the address it is bound to (must exist unless auto-create allows).
        routing_type: anycast or multicast; must be one the address supports.
        durable: journaled queue; survives reopening with its durable messages.
        max_consumers: most consumers attached at once (Artemis addressing §4.10): -1 no limit, 1 a
            non-shared queue, 0 none may attach.
        exclusive: one consumer at a time receives (Artemis addressing §4.11, Artemis): the first
            open one in the order they attached; when it closes, the next. Not Qpid's exclusive
            ownership (``Session.declare_queue(..., exclusive=True)``).
        auto_created: created by the broker on demand (auto-deleted when settings allow).
        ring_size: at most this many ready messages, -1 for no limit (Artemis ring queues).
        last_value_key: the last-value property (Artemis addressing §4.9).
        last_value: a last-value queue with the default key ``_AMQ_LVQ_NAME``.
        non_destructive: consuming leaves messages on the queue (Artemis addressing §4.9.6).
        persist_last_node: when the embedding application reports that this node is the last
            one of its cluster (``Broker.set_cluster_nodes``), non-durable messages on the
            queue are journaled too (Qpid queues: ``qpid.persist_last_node``, qpid-config
            ``--cluster-durable``); durable queues only.
        auto_delete: Qpid auto-delete (Qpid queues "Automatically deleted queues"): once it has
            had a consumer, the queue is deleted, with its messages, when its last consumer
            goes and nothing of it is in delivery (it stays listed by ``deleted_queues()``).
            Closing the broker or a crash never deletes it: after a reopen it waits for a
            consumer to come and go again. Separate from Artemis's auto-delete of
            auto-created queues.
        auto_delete_delay_ms: with ``auto_delete``, wait this long (ms, by the broker's clock)
            before deleting; a consumer that comes meanwhile keeps the queue (Qpid
            ``qpid.auto_delete_timeout``). 0: at once.
        no_local: Qpid no-local: while a session owns the queue (declared it exclusive), what
            sessions of the owner's connection send does not reach it (``engine.connection``).
        max_count: Qpid ``qpid.max_count``: most messages the queue holds (ready, in
            delivery, scheduled; not those paged with its address); -1 or 0: no limit (Qpid
            reads 0 as none).
        max_size: Qpid ``qpid.max_size``: most body bytes those messages hold; -1 or 0: no
            limit.
        policy_type: what a send past either limit does (``PolicyType``); ``None``: Qpid's
            default, ``FLOW_TO_DISK`` for a durable queue, ``REJECT`` for a non-durable one.
            A message exactly at a limit is accepted; one more is past it.
        alternate_address: where rejected messages, and messages still on the queue when it
            is deleted, go (Qpid's alternate exchange, Qpid queues "Rejected and orphaned
            messages"): routed as a send to it is; it must exist at declare. ``None``: rejected
            messages go to the dead-letter address if one is set, orphaned ones are deleted.
        qpid_lvq: a Qpid last-value queue keyed by the ``qpid.LVQ_key`` property
            (``QpidLvq``); not with ``last_value_key`` (Artemis's kind). Kept in RAM whole,
            as Artemis last-value queues are.
        filter: an Artemis filter expression (``engine.filters.expression``; the JMS selector
            grammar over properties and headers, e.g. ``"color = 'red' AND weight > 10"``): only
            messages it matches enter the queue; the others are not routed to it (on an
            anycast address another queue whose filter matches takes them; a message no queue
            takes is dropped, as Artemis drops one with no matching binding). ``None``: all.
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
    persist_last_node: bool = False
    auto_delete: bool = False
    no_local: bool = False
    auto_delete_delay_ms: int = 0
    max_count: int = -1
    max_size: int = -1
    policy_type: Optional[PolicyType] = None
    qpid_lvq: Optional[QpidLvq] = None
    alternate_address: Optional[str] = None
    filter: Optional[str] = None

    @property
    def limited(self) -> bool:
        """Whether ``max_count`` or ``max_size`` bounds the queue."""
        return self.max_count > 0 or self.max_size > 0

    @property
    def effective_policy(self) -> PolicyType:
        """``policy_type``, or Qpid's default for the queue's durability."""
        if self.policy_type is not None:
            return PolicyType(self.policy_type)
        return PolicyType.FLOW_TO_DISK if self.durable else PolicyType.REJECT

    def to_record(self) -> Dict[str, Any]:
        """The settings journaled in QUEUE_ADD (everything but name, address, routing type)."""
        return {"durable": self.durable, "max_consumers": self.max_consumers,
                "exclusive": bool(self.exclusive), "auto_created": self.auto_created,
                "ring_size": -1 if self.ring_size is None else self.ring_size,
                "last_value_key": self.last_value_key,
                "non_destructive": bool(self.non_destructive),
                **({"persist_last_node": True} if self.persist_last_node else {}),
                **({"auto_delete": True} if self.auto_delete else {}),
                **({"no_local": True} if self.no_local else {}),
                **({"auto_delete_delay": self.auto_delete_delay_ms}
                   if self.auto_delete_delay_ms else {}),
                **({"max_count": self.max_count} if self.max_count > 0 else {}),
                **({"max_size": self.max_size} if self.max_size > 0 else {}),
                **({"policy_type": PolicyType(self.policy_type).value}
                   if self.policy_type is not None else {}),
                **({"qpid_lvq": QpidLvq(self.qpid_lvq).value}
                   if self.qpid_lvq is not None else {}),
                **({"alt": self.alternate_address} if self.alternate_address else {}),
                **({"filter": self.filter} if self.filter else {})}

    @classmethod
    def from_record(cls, name: str, address: str, routing_type: str,
                    cfg: Mapping[str, Any]) -> "QueueConfig":
        """Rebuild from a QUEUE_ADD or QUEUE_UPDATE record."""
        return cls(name, address, RoutingType(routing_type), bool(cfg.get("durable", True)),
                   int(cfg.get("max_consumers", -1)), bool(cfg.get("exclusive", False)),
                   bool(cfg.get("auto_created", False)), int(cfg.get("ring_size", -1)),
                   cfg.get("last_value_key"), False, bool(cfg.get("non_destructive", False)),
                   bool(cfg.get("persist_last_node", False)), bool(cfg.get("auto_delete", False)),
                   bool(cfg.get("no_local", False)), int(cfg.get("auto_delete_delay", 0)),
                   int(cfg.get("max_count", -1)), int(cfg.get("max_size", -1)),
                   PolicyType(cfg["policy_type"]) if cfg.get("policy_type") else None,
                   QpidLvq(cfg["qpid_lvq"]) if cfg.get("qpid_lvq") else None,
                   cfg.get("alt") or None, cfg.get("filter") or None)


@dataclass(frozen=True)
class DeletedQueue:
    """A deleted queue as management still shows it (Qpid queues "Deleting Queues": the
    management object remains, with a timestamp of when it was deleted). The newest 100 are
    kept; durable queues' entries survive restarts (journaled with the deletion), the others
    last as long as the broker object.

    Attributes:
        name, address, routing_type, durable: the queue's.
        deleted_at: ms since the epoch, from the broker's clock.
    """

    name: str
    address: str
    routing_type: RoutingType
    durable: bool
    deleted_at: int


@dataclass(frozen=True)
class QueueInfo:
    """Management view of one queue (Artemis queue control attributes).

    message_count counts messages on the queue including those in delivery; delivering_count those
    handed to consumers and not yet acked; scheduled_count those held for later delivery.
    messages_added / messages_acknowledged / messages_killed / messages_expired / messages_replaced
    count since the broker opened (killed: dead-lettered or rejected; replaced: removed by a ring,
    Artemis ring_size or a Qpid ring policy, or by a newer message with the same last-value key, as
    Artemis counts AckReason.REPLACED). paged_count: messages routed to the queue while its address
    pages, not on the queue yet (Artemis ring queues §4: counted in message_count, not against a
    ring size). max_count, max_size, policy_type: the Qpid size limits (-1: none) and the policy in
    force (``PolicyType`` value; ``None`` when the queue has no limit). qpid_lvq: the Qpid
    last-value flavour (``QpidLvq`` value) or ``None``. alternate_address: where its rejected and
    orphaned messages go, or ``None``. filter: its filter expression, or ``None``.
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
    paged_count: int = 0
    persist_last_node: bool = False
    auto_delete: bool = False
    no_local: bool = False
    auto_delete_delay_ms: int = 0
    max_count: int = -1
    max_size: int = -1
    policy_type: Optional[str] = None
    qpid_lvq: Optional[str] = None
    alternate_address: Optional[str] = None
    messages_replaced: int = 0
    filter: Optional[str] = None

    @classmethod
    def of(cls, c: QueueConfig, messages: int, delivering: int, scheduled: int, consumers: int,
           added: int, acknowledged: int, killed: int, expired: int, paged: int,
           replaced: int = 0) -> "QueueInfo":
        """The view of a queue of configuration ``c`` holding those counts."""
        return cls(c.name, c.address, RoutingType(c.routing_type), c.durable, messages,
                   delivering, scheduled, consumers, added, acknowledged, killed, expired,
                   c.max_consumers, bool(c.exclusive), c.auto_created,
                   -1 if c.ring_size is None else c.ring_size, c.last_value_key,
                   bool(c.non_destructive), paged, c.persist_last_node, c.auto_delete,
                   c.no_local, c.auto_delete_delay_ms, c.max_count if c.max_count > 0 else -1,
                   c.max_size if c.max_size > 0 else -1,
                   c.effective_policy.value if c.limited else None,
                   None if c.qpid_lvq is None else QpidLvq(c.qpid_lvq).value,
                   c.alternate_address, replaced, c.filter or None)


@dataclass(frozen=True)
class AddressInfo:
    """Management view of one address (Artemis AddressControl): routing types, queue names,
    and what it holds against its address-full settings (Artemis ring queues §4).

    Attributes:
        number_of_messages: messages it holds on its queues (ready or in delivery; each
            message once however many queues hold it), paged ones excluded.
        address_size: their body bytes (what ``max_size_bytes`` bounds).
        paging: whether it pages (PAGE policy: it was full, and paged messages are left).
        paged_count, paged_bytes: messages it holds as paged, and their body bytes.
        dropped_count: messages dropped because it was full (DROP policy) since open.
        full_policy: its ``address_full_policy`` value ("PAGE", "DROP", "BLOCK", "FAIL").
        max_size_bytes, max_size_messages: its limits (-1: none).
    """

    name: str
    routing_types: Tuple[RoutingType, ...]
    queues: Tuple[str, ...]
    auto_created: bool
    number_of_messages: int = 0
    address_size: int = 0
    paging: bool = False
    paged_count: int = 0
    paged_bytes: int = 0
    dropped_count: int = 0
    full_policy: str = "PAGE"
    max_size_bytes: int = -1
    max_size_messages: int = -1


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


@dataclass(frozen=True)
class ScheduledMessage:
    """A message in a queue's scheduled buffer, as management lists it (Artemis
    listScheduledMessages).

    Attributes:
        message: the message (body, properties, ids, times).
        scheduled_delivery_time: when it is due, ms since the epoch.
        delivery_count: times it was delivered before (a redelivery delay brought it here).
        queue: the queue whose buffer holds it.
    """

    message: Message
    scheduled_delivery_time: int
    delivery_count: int
    queue: str
