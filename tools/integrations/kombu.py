"""A kombu transport on an mqstore store: ``kombu.Connection("mqstore:///path/to/store")``, so a
Celery app runs its workers on mqstore with no server (``broker_url = "mqstore:///..."``).

Importing this module registers the ``mqstore`` alias with kombu. It is kombu's virtual
transport (the one the filesystem and SQLAlchemy transports use) over the mqstore API:

- a kombu queue is an anycast mqstore address and queue of the same name: durable unless
  declared ``durable=False`` or ``auto_delete`` (those hold nothing after a restart); a
  message with ``delivery_mode`` 2 (kombu's default) is durable: ``publish`` returns once it
  is (the fsync that covers it);
- a message taken by a consumer is in delivery in mqstore until kombu acks it: ``ack`` is
  mqstore's ack (durable at the journal's next group commit, as the broker's default);
  ``reject(requeue=True)``, a closed channel and a crashed process all give the message back
  instead of losing it, which kombu's in-memory bookkeeping alone could not (Celery's
  ``acks_late`` means something here). A requeue and a closed channel mark it redelivered
  (``delivery_info["redelivered"]``); after a crashed process it is marked so when the store
  is opened with ``transport_options={"open": {"persist_delivery_count_before_delivery":
  True}}`` (each delivery journaled first, as RabbitMQ records deliveries), else it comes
  back with the count of its last return (the broker's default, Artemis's); ``reject()``
  without requeue applies the address's dead-letter settings;
- exchanges and bindings are kombu's own (in process), as for every virtual transport.

The URL's path is the store directory: ``mqstore:///var/lib/app/store`` (absolute),
``mqstore://data/store`` (relative; a host part ``localhost`` is ignored, as Celery adds it),
or ``transport_options={"directory": ...}``. One process
opens a store once; its connections share the open broker (``Broker.open`` options may be
given as ``transport_options={"open": {...}}``), which is closed with the last of them, or
by ``close_stores()`` (also at exit).
"""

from __future__ import annotations

import atexit
import base64
import binascii
import logging
import threading
import uuid
from queue import Empty
from typing import Any, Dict, Optional, Tuple

from kombu.transport import TRANSPORT_ALIASES, virtual
from kombu.utils.json import dumps, loads

from mqstore.engine import Broker, Message, QueueConfig, QueueNotFoundError, RoutingType
from mqstore.engine.errors import AddressNotFoundError, BrokerFailedError
from mqstore.journal import MqStoreError

TRANSPORT_ALIASES["mqstore"] = "mqstore.tools.integrations.kombu:Transport"

log = logging.getLogger("mqstore.kombu")
_lock = threading.Lock()
_open: Dict[str, Tuple[Broker, int]] = {}  # directory -> (broker, connections using it)


def _acquire(directory: str, options: Dict[str, Any]) -> Broker:
    with _lock:
        broker, users = _open.get(directory, (None, 0))
        if broker is None:
            broker = Broker.open(directory, **options)
        _open[directory] = (broker, users + 1)
        return broker


def _release(directory: str) -> None:
    with _lock:
        broker, users = _open.get(directory, (None, 0))
        if broker is None:
            return
        if users > 1:
            _open[directory] = (broker, users - 1)
            return
        del _open[directory]
    broker.close()


def close_stores() -> int:
    """Close every store the transport opened in this process, whatever connections still
    use it (a Celery app's pools keep some after ``app.close()``); their channels fail from
    then on. Runs at interpreter exit. Returns how many were closed."""
    with _lock:
        brokers = [broker for broker, _users in _open.values()]
        _open.clear()
    for broker in brokers:
        broker.close()
    return len(brokers)


atexit.register(close_stores)


class QoS(virtual.QoS):
    """kombu's unacked-message bookkeeping, settling each message in mqstore too."""

    def ack(self, delivery_tag: str) -> None:
        self.channel._settle(delivery_tag, "ack")
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self.channel._settle(delivery_tag, "release" if requeue else "reject")
        self._quick_ack(delivery_tag)  # (mqstore gives it back: no kombu restore)

    def restore_unacked(self) -> list:
        """Give every unacked message back to its queue (mqstore redelivers it)."""
        self._flush()
        for tag in list(self._delivered):
            self.channel._settle(tag, "release")
        self._delivered.clear()
        return []


class Channel(virtual.Channel):
    """One kombu channel: one mqstore session, a consumer per queue it reads."""

    QoS = QoS
    do_restore = True

    def __init__(self, connection: Any, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self._broker: Broker = connection.broker
        self._session = self._broker.session()
        self._consumers_by_queue: Dict[str, Any] = {}
        self._held: Dict[str, Any] = {}  # delivery tag -> mqstore Delivery
        self._held_lock = threading.Lock()
        self._no_ack: set = set()  # queues consumed with no_ack: settled as they are taken

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        durable = bool(kwargs.get("durable", True)) and not kwargs.get("auto_delete")
        broker = self._broker
        if queue in broker.queue_names():
            return
        if queue not in broker.address_names():
            broker.create_address(queue, {RoutingType.ANYCAST})
        try:
            broker.create_queue(QueueConfig(queue, queue, RoutingType.ANYCAST,
                                            durable=durable))
        except MqStoreError:
            if queue not in broker.queue_names():  # (not one created meanwhile)
                raise

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return queue in self._broker.queue_names()

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        consumer = self._consumers_by_queue.pop(queue, None)
        if consumer is not None:
            consumer.close()
        try:
            self._broker.delete_queue(queue)
            if not self._broker.address_info(queue).queues:  # (unless others use it)
                self._broker.delete_address(queue)
        except (QueueNotFoundError, AddressNotFoundError):
            pass

    def _put(self, queue: str, message: Dict[str, Any], **kwargs: Any) -> None:
        props = message.get("properties") or {}
        priority = props.get("priority") or 0
        msg = Message(dumps(message).encode("utf-8"), durable=props.get("delivery_mode", 2) == 2,
                      priority=min(max(int(priority), 0), 9))
        try:
            self._session.send(queue, msg)
        except AddressNotFoundError:  # as the other virtual transports: made on first use
            self._new_queue(queue)
            self._session.send(queue, msg)

    def _get(self, queue: str, timeout: Optional[float] = None) -> Dict[str, Any]:
        consumer = self._consumers_by_queue.get(queue)
        if consumer is None:
            if not self._has_queue(queue):
                raise Empty()
            consumer = self._consumers_by_queue[queue] = self._session.create_consumer(queue)
        while True:
            delivery = consumer.receive(0)
            if delivery is None:
                raise Empty()
            payload, why = _decoded(delivery.message.body)
            if payload is not None:
                break
            self._set_aside(queue, delivery, why)  # and go on with the next one
        tag = str(uuid.uuid4())  # one per delivery: a redelivery is another
        props = payload.setdefault("properties", {})
        props["delivery_tag"] = tag
        if delivery.delivery_count > 1:  # (what AMQP's redelivered flag says)
            payload["redelivered"] = True
            props.setdefault("delivery_info", {})["redelivered"] = True
        with self._held_lock:
            self._held[tag] = delivery
        if queue in self._no_ack:
            self._settle(tag, "ack")
        return payload

    def _set_aside(self, queue: str, delivery: Any, why: str) -> None:
        """A message on ``queue`` that is not a kombu message (another client's, or damaged):
        handing it to kombu would raise in the worker, which restarts, takes it again and dies
        again while the tasks behind it wait. Rejected when the queue's dead-letter rules
        give it somewhere to go (its alternate address, else the dead-letter address of its
        address settings, with a queue); else moved to ``<queue>.undecodable`` (created
        anycast and durable when missing): sent there durably, then acked, so a crash between
        the two leaves it in both places, never in neither. Logged at WARNING either way."""
        broker = self._broker
        target = _dead_letter_target(broker, queue)
        if target is not None:
            log.warning("kombu queue %r: message %d is not a kombu message (%s); rejected to "
                        "%r", queue, delivery.message.message_id, why, target)
            delivery.reject()
            return
        aside = f"{queue}{UNDECODABLE_SUFFIX}"
        if aside not in broker.queue_names():
            self._new_queue(aside)
        msg = delivery.message
        props = dict(msg.properties)
        props.update({"_AMQ_ORIG_ADDRESS": msg.address or queue, "_AMQ_ORIG_QUEUE": queue,
                      "mqstore_undecodable": why[:200]})
        self._session.send(aside, Message(msg.body, props, durable=msg.durable,
                                          priority=msg.priority))
        delivery.ack()
        log.warning("kombu queue %r: message %d is not a kombu message (%s); moved to %r",
                    queue, delivery.message.message_id, why, aside)

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        if no_ack:
            self._no_ack.add(queue)
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        message = super().basic_get(queue, no_ack, **kwargs)
        if message is not None and no_ack:
            self._settle(message.delivery_tag, "ack")
        return message

    def _settle(self, tag: str, how: str) -> None:
        with self._held_lock:
            delivery = self._held.pop(tag, None)
        if delivery is not None:
            getattr(delivery, how)()

    def _size(self, queue: str) -> int:
        try:
            info = self._broker.queue_info(queue)
        except QueueNotFoundError:
            return 0
        return info.message_count - info.delivering_count

    def _purge(self, queue: str) -> int:
        try:
            return self._broker.purge_queue(queue)
        except QueueNotFoundError:
            return 0

    def close(self) -> None:
        super().close()  # unacked messages back (QoS.restore_unacked)
        try:
            self._session.close()  # (and whatever its consumers still held)
        except MqStoreError:
            pass


UNDECODABLE_SUFFIX = ".undecodable"
"""Where a kombu queue's messages that are not kombu messages go when its dead-letter rules
give them nowhere: ``<queue>.undecodable``."""


def _decoded(body: bytes) -> Tuple[Optional[Dict[str, Any]], str]:
    """``body`` as kombu's message (the JSON object ``_put`` wrote), or ``None`` and why not:
    not UTF-8, not JSON, not an object, ``properties``/``headers``/``delivery_info`` not
    objects, a ``body`` that is not a string, or one that does not decode by its
    ``body_encoding``."""
    try:
        payload = loads(body)
    except (UnicodeDecodeError, ValueError, TypeError) as exc:
        return None, f"not kombu's JSON: {type(exc).__name__}: {str(exc)[:80]}"
    if not isinstance(payload, dict):
        return None, f"a JSON {type(payload).__name__}, not an object"
    props = payload.setdefault("properties", {})
    if not isinstance(props, dict) or not isinstance(props.get("delivery_info", {}), dict):
        return None, "its properties are not an object"
    if not isinstance(payload.get("headers") or {}, dict):
        return None, "its headers are not an object"
    inner = payload.get("body")
    if inner is not None and not isinstance(inner, (str, bytes)):
        return None, "its body is not a string"
    if inner and props.get("body_encoding") == "base64":
        try:
            base64.b64decode(inner, validate=True)
        except (binascii.Error, ValueError):
            return None, "its body is not the base64 it says it is"
    return payload, ""


def _dead_letter_target(broker: Broker, queue: str) -> Optional[str]:
    """Where a reject of a message on ``queue`` sends it: its alternate address, else its
    address settings' dead-letter address, when that address exists with a queue; else
    ``None`` (a reject would drop it)."""
    try:
        info = broker.queue_info(queue)
        target = info.alternate_address or broker.address_settings(
            info.address).dead_letter_address
        if target and broker.address_info(target).queues:
            return target
    except MqStoreError:
        pass
    return None


class Transport(virtual.Transport):
    """kombu's transport class for ``mqstore://`` URLs (see the module docstring)."""

    Channel = Channel
    driver_type = driver_name = "mqstore"
    polling_interval = 0.05  # seconds between polls of an idle queue
    connection_errors = virtual.Transport.connection_errors + (BrokerFailedError,)
    channel_errors = virtual.Transport.channel_errors + (MqStoreError,)

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        options = client.transport_options or {}
        vhost = (client.virtual_host or "").strip("/")
        host = client.hostname if client.hostname not in (None, "", "localhost") else None
        # (Celery fills in "localhost" for a URL without a host: not a directory here)
        self.directory: str = options.get("directory") or (
            f"{host}/{vhost}" if host else f"/{vhost}")
        self.open_options: Dict[str, Any] = dict(options.get("open", {}))
        self.broker: Optional[Broker] = None

    def establish_connection(self) -> Any:
        if self.broker is None:
            self.broker = _acquire(self.directory, self.open_options)
        return super().establish_connection()

    def close_connection(self, connection: Any) -> None:
        super().close_connection(connection)
        if self.broker is not None:
            self.broker = None
            _release(self.directory)

    def driver_version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version
        try:
            return version("mqstore")
        except PackageNotFoundError:
            return "unknown"
