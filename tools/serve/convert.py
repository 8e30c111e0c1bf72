"""AMQP 1.0 messages (``proton.Message``) to and from mqstore's ``Message``, as Artemis maps them.

Into the store (a transfer from a client):

- body: a data section or an amqp-value of binary is kept as the bytes; an amqp-value string is
  kept as its UTF-8 bytes and marked with the property ``BODY_TYPE`` = ``"string"``, so that it
  goes out as the same string. Other bodies (maps, lists, numbers, sequences) are refused with
  ``amqp:not-implemented``: nothing is stored.
- header: ``durable``; ``priority`` (AMQP's 0-255; above 9 counts as 9, the JMS range mqstore
  keeps); ``ttl`` (ms) gives the expiration when the properties section has no
  ``absolute-expiry-time``.
- properties section: ``creation-time`` is the timestamp (ms since the epoch), ``absolute-expiry-
  time`` the expiration, ``group-id`` the message group (``_AMQ_GROUP_ID``). The broker assigns
  the message id, as Artemis does for its own; the client's ``message-id`` is not kept.
- application properties: the message's properties; AMQP's typed numbers become int or float,
  symbols and UUIDs str. A value of another type is refused (``amqp:invalid-field``).
- message annotations Artemis reads: ``x-opt-delivery-time`` (ms since the epoch) is the
  scheduled delivery time, ``x-opt-delivery-delay`` (ms) the delivery delay.

Out of the store (a delivery to a client): the same fields back, a bytes body as a data
section, ``delivery-count`` the deliveries before this one and ``first-acquirer`` when this is
the first, ``message-id`` the broker's id (a ulong).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Dict, Optional

from proton import Message as AmqpMessage
from proton import symbol, ulong

from mqstore.engine import Delivery, InvalidArgumentError, Message

BODY_TYPE = "_AMQ_AMQP_BODY"  # "string": the body was an amqp-value string (its UTF-8 here)
DELIVERY_TIME = "x-opt-delivery-time"
DELIVERY_DELAY = "x-opt-delivery-delay"
GROUP_ID = "_AMQ_GROUP_ID"


class UnsupportedBodyError(InvalidArgumentError):
    """An AMQP body mqstore does not store (a map, a list, a number...): the transfer is
    rejected with ``amqp:not-implemented``."""


def _plain(name: str, value: Any) -> Any:
    """An application property value as mqstore keeps it (str, int, float, bool, bytes,
    None), from AMQP's typed values.

    Raises:
        InvalidArgumentError: a value of another type (a map, a list, a described value).
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    raise InvalidArgumentError("properties", f"{name!r}: a {type(value).__name__} value; an "
                               f"application property is a string, number, boolean, binary "
                               f"or null")


def to_store(amqp: AmqpMessage, now_ms: Optional[int] = None) -> Message:
    """The mqstore ``Message`` of an AMQP message received from a client.

    Args:
        amqp: the decoded message.
        now_ms: the time a ``ttl`` counts from (ms since the epoch; default: now).

    Raises:
        UnsupportedBodyError: a body other than binary or a string.
        InvalidArgumentError: a property value mqstore does not keep, a field out of range.
    """
    body = amqp.body
    props: Dict[str, Any] = {}
    if isinstance(body, str):
        data = body.encode("utf-8")
        props[BODY_TYPE] = "string"
    elif isinstance(body, (bytes, bytearray, memoryview)):
        data = bytes(body)
    elif body is None:
        data = b""
    else:
        raise UnsupportedBodyError("body", f"an AMQP body of type {type(body).__name__}: mqstore "
                                   f"stores binary (data) and string bodies")
    given: Dict[Any, Any] = amqp.properties or {}
    for key, value in given.items():
        props[str(key)] = _plain(str(key), value)
    if amqp.group_id:
        props[GROUP_ID] = str(amqp.group_id)
    expiration = 0
    if amqp.expiry_time:
        expiration = int(amqp.expiry_time * 1000)
    elif amqp.ttl:
        base = now_ms if now_ms is not None else int(time.time() * 1000)
        expiration = base + int(amqp.ttl * 1000)
    annotations: Dict[Any, Any] = amqp.annotations or {}
    scheduled = annotations.get(DELIVERY_TIME)
    delay = annotations.get(DELIVERY_DELAY)
    return Message(data, props, durable=bool(amqp.durable), priority=min(int(amqp.priority), 9),
                   expiration=expiration,
                   timestamp=int(amqp.creation_time * 1000) if amqp.creation_time else 0,
                   scheduled_delivery_time=int(scheduled) if scheduled else 0,
                   delivery_delay=int(delay) if delay and not scheduled else 0)


def to_amqp(message: Message, delivery_count: int) -> AmqpMessage:
    """The AMQP message a client receives for a stored message delivered for the
    ``delivery_count``-th time (1: the first)."""
    props = dict(message.properties)
    kind = props.pop(BODY_TYPE, None)
    group = props.pop(GROUP_ID, None)
    amqp = AmqpMessage()
    if kind == "string":
        amqp.body = message.body.decode("utf-8", "replace")
    else:
        amqp.body = message.body
        amqp.inferred = True  # bytes as a data section, not an amqp-value of binary
    amqp.properties = props or None  # type: ignore[assignment]
    amqp.durable = message.durable
    amqp.priority = message.priority
    amqp.id = ulong(message.message_id)
    if message.timestamp:
        amqp.creation_time = message.timestamp / 1000.0
    if message.expiration:
        amqp.expiry_time = message.expiration / 1000.0
    if group is not None:
        amqp.group_id = group
    amqp.delivery_count = max(0, delivery_count - 1)
    amqp.first_acquirer = delivery_count <= 1
    if message.address:
        amqp.address = message.address
    return amqp


def delivery_to_amqp(delivery: Delivery) -> AmqpMessage:
    """``to_amqp`` of an engine delivery."""
    return to_amqp(delivery.message, delivery.delivery_count)


def for_send(message: Message) -> AmqpMessage:
    """The AMQP message a client of ``mqstore.connect`` sends for ``message`` (``to_amqp``'s
    fields, without the broker's id and count, with the scheduling annotations)."""
    amqp = to_amqp(message, 1)
    amqp.id = None
    amqp.delivery_count = 0
    amqp.first_acquirer = False
    amqp.address = None  # type: ignore[assignment]
    if message.group_id is not None:
        amqp.group_id = message.group_id
    annotations: Dict[Any, Any] = {}
    if message.scheduled_delivery_time:
        annotations[symbol(DELIVERY_TIME)] = message.scheduled_delivery_time
    elif message.delivery_delay:
        annotations[symbol(DELIVERY_DELAY)] = message.delivery_delay
    amqp.annotations = annotations or None  # type: ignore[assignment]
    return amqp


def received(amqp: AmqpMessage) -> Message:
    """The ``Message`` a client of ``mqstore.connect`` receives: ``to_store``'s, with the
    broker's message id and the address it was sent to.

    Raises:
        As ``to_store``.
    """
    message = to_store(amqp)
    message.message_id = int(amqp.id) if isinstance(amqp.id, int) else 0
    message.address = str(amqp.address or "")
    return message
