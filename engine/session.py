"""Sessions: the client-side unit of work of the broker (consumers and deliveries are
``engine.consumer``'s).

A ``Session`` sends and creates consumers; a transacted one makes its sends and acks visible
and durable together on ``commit()`` (one TX record) and undoes them on ``rollback()``, which
returns every message received in the transaction to the head of its queue, delivery count kept
(Artemis ring queues, Messages in Delivery & Rollbacks). A session can declare and delete
queues as a Qpid session does (``declare_queue``, ``delete_queue``; exclusive ownership in
``engine.routing.exclusive``). It keeps what its consumers handed out, which its deliveries settle
through (``_settle``, ``_release_begin``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from .routing.core import BrokerCore
from .routing import autocreate
from .delivery import settle as ops
from .delivery.acks import settle_acked
from .routing import exclusive as _exclusive
from .routing import subscriptions
from .routing.deadletter import move_out
from .paging.addressfull import deadline_of, timed_out
from .errors import (IllegalStateError, InvalidArgumentError, QueueNotFoundError,
                     ResourceLimitError)
from .filters.expression import Filter, parse_filter
from .model import Message, QueueConfig, QueueInfo
from .addressing.names import (FQQN_SEPARATOR, MULTICAST_PREFIX, Destination, parse_destination,
                    queue_reference)
from .delivery.browser import Browser
from .consumer import DEFAULT_WINDOW, Consumer, Delivery
from .routing.placement import must_wait
from .routing.route import check_sendable
from .queues.queue import Queue
from .values import TIME_MAX, check_bool, check_int, check_timeout
from mqstore.journal import Ticket
from mqstore.recovery.schema import AckReason

_ACKED, _REJECTED = AckReason.ACKED.value, AckReason.REJECTED.value  # (read once: calls)


class Session:
    """A unit of work with the broker. Create with ``Broker.session(transacted=...)``.

    Acknowledgements: by default (Artemis's ``blockOnAcknowledge=false``) ``Delivery.ack`` and
    ``ack_many`` return once the ack is journaled in the journal's open batch; the journal's
    writer thread flushes that batch at once (its next group commit), and the ack is durable
    at the latest when any later wait on the same broker returns (a durable send, another
    session's blocking ack: batches become durable in journal order). A crash before then can
    only bring the message back (with the count of its last durable DELIVERY record, maybe
    not flagged redelivered); it is never lost. With ``block_on_acknowledge=True`` they return
    once the ack record is durable. The message leaves its queue at once either way. Rejects,
    releases and commits always wait.
    """

    def __init__(self, broker: BrokerCore, transacted: bool,
                 block_on_acknowledge: bool = False) -> None:
        self.broker = broker
        self.transacted = transacted
        self.block_on_acknowledge = block_on_acknowledge
        self.closed = False
        self.connection: Optional[Any] = None  # engine.connection.Connection, when made by one
        self.consumers: List[Consumer] = []
        self.received: Dict[int, Delivery] = {}
        self._tx_sends: List[Tuple[Destination, Message]] = []

    # -- sending ------------------------------------------------------------------------------
    def send(self, destination: str, message: Message, timeout: Optional[float] = None
             ) -> None:
        """Send one message to an address (``[anycast://|multicast://]address`` or
        ``address::queue``). Returns once it is durable (durable message on durable queues).
        A full address applies its ``address_full_policy`` (Artemis ring queues §4): PAGE stores the
        message as paged, DROP drops it (counted in ``address_info``), FAIL raises, BLOCK
        waits for room up to ``timeout`` seconds (``None``: as long as it takes).

        Raises:
            InvalidNameError, AddressNotFoundError, QueueNotFoundError, RoutingTypeError,
                InvalidArgumentError (a message field of the wrong type or range, checked at
                the send), RecordTooLargeError, AddressFullError (FAIL; BLOCK past
                ``timeout``), QueueFullError (a queue's Qpid size limit refuses it,
                ``QueueConfig.policy_type``): nothing sent, the session goes on.
                IllegalStateError: closed. BrokerFailedError.
        """
        self.send_many(destination, [message], timeout)

    def send_many(self, destination: str, messages: Sequence[Message],
                  timeout: Optional[float] = None) -> None:
        """Send messages in order with one wait for all of them (one group commit). On a
        BLOCK address that fills up meanwhile, the messages before the one that found it
        full are sent; the rest wait for room (``timeout`` seconds for all of them).

        Raises:
            As ``send``. AddressFullError (BLOCK past ``timeout``): the messages before the
                first one that waited were sent and are durable; ``sent`` on the error says
                how many.
        """
        dest, pending = self._prepared(destination, messages)
        deadline = deadline_of(check_timeout(timeout))
        broker = self.broker
        ticket = None
        with broker.lock:
            while True:
                got, pending = self._send_some(dest, pending)
                ticket = got or ticket
                if not pending or not broker.room.wait(deadline):
                    break
            if pending:  # the wait ended at the deadline: one more look
                got, pending = self._send_some(dest, pending)
                ticket = got or ticket
        broker.storage.wait(ticket)
        if pending:
            raise timed_out(dest.address, len(pending), len(messages), timeout)

    def _prepared(self, destination: str, messages: Sequence[Message]
                  ) -> Tuple[Destination, List[Message]]:
        """The destination parsed and private, validated copies of the messages."""
        dest = parse_destination(destination, self.broker.settings.syntax)
        check_sendable(self.broker, dest.address)
        return dest, [m.checked() for m in messages]

    def _send_some(self, dest: Destination, messages: List[Message]
                   ) -> Tuple[Optional[Ticket], List[Message]]:
        """The locked part of a send (lock held): sends what the address-full policies let
        through; returns the ticket to wait on (or ``None``) and the messages that wait for
        room on a full BLOCK address. A transacted session only checks: its sends are routed
        at commit."""
        broker = self.broker
        self._check()
        autocreate.for_send(broker, dest)
        if self.transacted:
            if must_wait(broker, dest, messages):
                return None, messages
            self._tx_sends.extend((dest, m) for m in messages)
            return None, []
        return ops.send(broker, dest, messages, self)

    # -- consuming ----------------------------------------------------------------------------
    def create_consumer(self, queue: str, window: int = DEFAULT_WINDOW,
                        selector: Optional[str] = None, prefetch: int = 0) -> Consumer:
        """A consumer on a queue (name, or FQQN ``address::queue``; Artemis addressing §4.7).

        Args:
            window: most deliveries the consumer may hold unacked (credit), at least 1.
            selector: an Artemis filter expression (``engine.filters.expression``; JMS selector
                syntax over properties and headers): the consumer receives only the messages it
                matches, in queue order (priority, then FIFO); the rest stay on the queue for
                other consumers (Artemis ``createConsumer(queue, filter)``, a JMS message
                selector). ``None`` or blank: every message.
            prefetch: messages a receive may take ahead, beyond those it returns, within the
                window, so that a backlog is read with one DELIVERY write and one wait per
                ``prefetch + 1`` messages (Qpid's prefetch; ``engine.delivery.prefetch`` says what
                happens to them at close and after a crash). 0 (the default): none.

        Raises:
            QueueNotFoundError, InvalidNameError, ResourceLimitError (max-consumers reached),
            InvalidArgumentError (window not an int >= 1, prefetch not an int >= 0;
            ``FilterSyntaxError``: a selector that does not parse), IllegalStateError.
            Nothing is created then.
        """
        check_int("window", window, 1, TIME_MAX)
        check_int("prefetch", prefetch, 0, TIME_MAX)
        flt = parse_filter(selector, "selector")
        if isinstance(queue, str) and queue.startswith(MULTICAST_PREFIX) and \
                FQQN_SEPARATOR not in queue:  # a topic consumer: a subscription of its own
            dest = parse_destination(queue, self.broker.settings.syntax)
            return self.create_subscriber(dest.address, window=window, selector=selector,
                                          prefetch=prefetch)
        q = self._resolve_queue(queue, create=True)
        return self._attach(q, window, flt, prefetch)

    def create_subscriber(self, address: str, subscription: Optional[str] = None, *,
                          durable: bool = False, shared: bool = False,
                          selector: Optional[str] = None,
                          window: int = DEFAULT_WINDOW, prefetch: int = 0) -> Consumer:
        """A topic subscriber on multicast address ``address``: it gets its own copy of every
        message sent there from now on, on a subscription queue (Artemis addressing §4.6, §4.15;
        ``engine.routing.subscriptions``). ``create_consumer("multicast://address")`` makes a
        non-durable one.

        Args:
            subscription: the subscription's name (durable or shared ones; for a durable
                non-shared one the queue is ``client_id.subscription``, the client id coming
                from ``broker.connection(client_id=...)``; without a name, the address).
            durable: keep messages while no subscriber is attached, across restarts, until
                ``unsubscribe`` (JMS durable subscriber). Else the queue goes with its last
                consumer.
            shared: several consumers share the subscription's messages (JMS 2 shared
                subscription); else one consumer at a time (max-consumers 1).
            selector: the subscription queue's filter: only matching messages are copied to
                it. Subscribing again with another selector replaces an idle durable
                subscription (its messages go).
            window, prefetch: as ``create_consumer``'s.

        Raises:
            AddressNotFoundError, RoutingTypeError (not multicast), InvalidArgumentError (a
            durable non-shared subscription without client id, a shared one without a name, a
            bad selector, window or prefetch), QueueInUseError (the durable subscription is
            attached to with another address or selector), ResourceLimitError (a non-shared
            subscription already has its consumer), IllegalStateError.
        """
        check_int("window", window, 1, TIME_MAX)
        check_int("prefetch", prefetch, 0, TIME_MAX)
        check_bool("durable", durable)
        check_bool("shared", shared)
        parse_filter(selector, "selector")
        client_id = self.connection.client_id if self.connection is not None else None
        with self.broker.lock:
            self._check()
            q = subscriptions.subscribe(self.broker, client_id, address, subscription,
                                        durable, shared, selector)
            return self._attach(q, window, None, prefetch)

    def unsubscribe(self, subscription: str) -> None:
        """Delete durable subscription ``subscription`` (``client_id.subscription`` for this
        session's client id, else the shared one of that name) and its messages (JMS
        ``Session.unsubscribe``).

        Raises:
            QueueNotFoundError, QueueInUseError (a subscriber is attached), IllegalStateError.
        """
        client_id = self.connection.client_id if self.connection is not None else None
        with self.broker.lock:
            self._check()
            subscriptions.unsubscribe(self.broker, client_id, subscription)

    def _attach(self, q: Queue, window: int, flt: Optional[Filter], prefetch: int = 0
                ) -> Consumer:
        """A new consumer of ``q`` (max-consumers and exclusive ownership checked)."""
        with self.broker.lock:
            self._check()
            _exclusive.check_use(self.broker, self, q)
            if 0 <= q.config.max_consumers <= len(q.consumers):
                raise ResourceLimitError(
                    f"queue {q.name!r} on address {q.config.address!r} has its "
                    f"max-consumers ({q.config.max_consumers}) already",
                    hint="close one of its consumers first" if q.config.max_consumers else
                    "max-consumers 0: no consumer may attach (Artemis addressing §4.10)")
            c = Consumer(self, q, window, flt, prefetch)
            q.consumers.append(c)
            q.had_consumer = True
            q.auto_delete_at = None  # a delayed auto-delete is off: it is in use again
            self.consumers.append(c)
            return c

    def create_browser(self, queue: str, selector: Optional[str] = None) -> Browser:
        """A browser over a queue: look at its messages without acquiring them; with
        ``selector`` (an Artemis filter expression), only those it matches (a JMS
        QueueBrowser with a message selector).

        Raises:
            QueueNotFoundError, InvalidNameError, IllegalStateError; InvalidArgumentError
            (``FilterSyntaxError``): a selector that does not parse.
        """
        flt = parse_filter(selector, "selector")
        q = self._resolve_queue(queue)
        with self.broker.lock:
            self._check()
            _exclusive.check_use(self.broker, self, q)
            return Browser(self, q, flt)

    # -- declaring (Qpid) ---------------------------------------------------------------------
    def declare_queue(self, config: QueueConfig, exclusive: bool = False) -> QueueInfo:
        """Declare a queue as a Qpid session does: create it unless it exists (then it is
        used as it is); ``exclusive``: this session owns it until it closes (Qpid queues, see
        ``engine.routing.exclusive``), and an auto-delete one is deleted at that close.

        Raises:
            ExclusiveQueueError: another session owns it (this session is ended first). As
            ``Broker.create_queue`` for a new queue. IllegalStateError: closed.
        """
        check_bool("exclusive", exclusive)
        broker = self.broker
        with broker.lock:
            self._check()
            queue = broker.queues.get(config.name)
            if queue is None:
                broker.create_queue(config)
                queue = broker.find_queue(config.name)
            else:
                _exclusive.check_use(broker, self, queue)
            if exclusive:
                _exclusive.claim(broker, self, queue)
            return queue.info()

    def delete_queue(self, name: str, if_empty: bool = False, if_unused: bool = False) -> None:
        """Delete a queue from this session: as ``Broker.delete_queue``, and the only way to
        delete a queue this session declared exclusive.

        Raises:
            ExclusiveQueueError: another session owns it (this session is ended first). As
            ``Broker.delete_queue``.
        """
        check_bool("if_empty", if_empty)
        check_bool("if_unused", if_unused)
        with self.broker.lock:
            self._check()
            _exclusive.delete(self.broker, self, name, if_empty, if_unused)

    def _resolve_queue(self, text: str, create: bool = False) -> Queue:
        syntax = self.broker.settings.syntax
        if isinstance(text, str) and text.startswith(FQQN_SEPARATOR):  # ``::queue``
            with self.broker.lock:
                self._check()
                return self.broker.find_queue(queue_reference(text, syntax)[1])
        dest = parse_destination(text, syntax)
        if dest.params and not create:
            raise InvalidArgumentError("queue", f"{text!r}: parameters configure a queue "
                                       f"created for a consumer or a send; a browser creates "
                                       f"none")
        with self.broker.lock:
            self._check()
            q = autocreate.for_consume(self.broker, dest) if create else \
                self.broker.find_queue(dest.queue or dest.address)
            if dest.queue is not None and q.config.address != dest.address:
                raise QueueNotFoundError(dest.queue, dest.address)
            return q

    # -- settling -----------------------------------------------------------------------------
    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        """Acknowledge several deliveries with one journal write and one wait (in a
        transacted session they are acked at commit; no wait unless the session was made with
        ``block_on_acknowledge=True``: see ``Session``).

        Raises:
            IllegalStateError: one of them is already settled; then none is acked.
        """
        broker = self.broker
        with broker.lock:
            self._check()
            for d in deliveries:
                if d.state != "delivered":
                    raise IllegalStateError("a delivery in the batch is already settled")
            if self.transacted:
                for d in deliveries:
                    object.__setattr__(d, "state", "acked-in-tx")
                    object.__setattr__(d, "_reason", _ACKED)
                return
            for d in deliveries:
                object.__setattr__(d, "state", "settled")
                self._forget(d)
            ticket = settle_acked(broker, [d._ref for d in deliveries])
        broker.storage.after_ack(ticket, self.block_on_acknowledge)

    def _settle(self, d: Delivery, reason: str) -> None:
        self.broker.storage.wait(self._settle_begin(d, reason))

    def _settle_begin(self, d: Delivery, reason: str) -> Optional[Ticket]:
        broker = self.broker
        with broker.lock:
            if not self._settle_mark(d, reason):
                return None
            queue = d._ref.queue
            if reason == _REJECTED and not queue.non_destructive and \
                    ops.in_delivery(d._ref):
                queue.settle(d._ref)
                ticket = move_out(broker, [(d._ref, reason)])
            else:
                ticket = ops.settle(broker, [(d._ref, reason)])
            ops.serve_waiters(broker, queue)
            autocreate.maybe_delete(broker, queue)
            return ticket

    def _settle_mark(self, d: Delivery, reason: str) -> bool:
        """The session's part of settling ``d`` (lock held): mark it settled and forget it (in
        a transacted session: settled at commit); whether the broker's part is still to do.
        Raises ``IllegalStateError`` (``d`` unchanged): settled already, or session closed."""
        self._check_unsettled(d, "settled again")
        if self.transacted:
            object.__setattr__(d, "state", "acked-in-tx")
            object.__setattr__(d, "_reason", reason)
            return False
        object.__setattr__(d, "state", "settled")
        self._forget(d)
        return True

    def _check_unsettled(self, d: Delivery, verb: str) -> None:
        """Raise unless ``d`` may be settled or released now (lock held)."""
        self.broker.storage.check_open()
        if d.state != "delivered":
            raise IllegalStateError(f"the delivery is {d.state}; it cannot be {verb}")
        if self.closed:
            raise IllegalStateError("the session is closed")

    def _release_begin(self, d: Delivery) -> Optional[Ticket]:
        broker = self.broker
        with broker.lock:
            self._check_unsettled(d, "released")
            object.__setattr__(d, "state", "released")
            self._forget(d)
            return ops.cancel(broker, [d._ref])

    def _forget(self, d: Delivery) -> None:
        key, received = id(d), self.received  # (tests, not calls: once per message acked)
        if d._consumer is not None and key in d._consumer.unacked:  # O(1), not a look in
            del d._consumer.unacked[key]  # every consumer of the session
        if key in received:
            del received[key]

    # -- transactions -------------------------------------------------------------------------
    def commit(self) -> None:
        """Make the transaction's sends and acks durable and visible together (one TX record).

        Raises:
            IllegalStateError: not transacted, or closed. Routing errors (an address deleted
                since the send), AddressFullError, QueueFullError (a queue's Qpid size limit
                refuses one of its sends): nothing of the transaction is applied; it stays
                open.
        """
        self.broker.storage.wait(self._commit_begin())

    def _commit_begin(self) -> Optional[Ticket]:
        broker = self.broker
        with broker.lock:
            self._check()
            if not self.transacted:
                raise IllegalStateError("commit on a non-transacted session")
            acked = [d for d in self.received.values() if d.state == "acked-in-tx"]
            ticket = ops.commit(broker, self._tx_sends, [(d._ref, d._reason) for d in acked],
                                self)
            self._tx_sends = []
            for d in acked:
                object.__setattr__(d, "state", "settled")
                self._forget(d)
            for c in self.consumers:
                ops.serve_waiters(broker, c.queue)
            for d in acked:
                autocreate.maybe_delete(broker, d._ref.queue)
            return ticket

    def rollback(self) -> None:
        """Discard the transaction's sends and return every message received in it (acked in
        it or not) to the head of its queue, in the reverse order of consumption.

        Raises:
            IllegalStateError: not transacted, or closed.
        """
        with self.broker.lock:
            self._check()
            if not self.transacted:
                raise IllegalStateError("rollback on a non-transacted session; use recover()")
            self._tx_sends = []
            ticket = self._cancel_received()
        self.broker.storage.wait(ticket)  # what the queues' policies decided is durable on return

    def recover(self) -> None:
        """Non-transacted sessions: return every unacked received message to its queue head
        (JMS ``Session.recover``)."""
        with self.broker.lock:
            self._check()
            ticket = self._cancel_received()
        self.broker.storage.wait(ticket)

    def _cancel_received(self) -> Optional[Ticket]:
        taken = self.take_unsettled()
        ticket = ops.cancel(self.broker, [d._ref for d in taken])
        for queue in {id(d._ref.queue): d._ref.queue for d in taken}.values():
            autocreate.maybe_delete(self.broker, queue)  # an auto-delete queue now idle
        return ticket

    def take_unsettled(self) -> List[Delivery]:
        """Mark every unsettled delivery of this session rolled back and forget it (lock held);
        the caller cancels their references (``Broker.close`` does so for all sessions at
        once, in consumption order, as reopening after a crash does)."""
        pending = [d for d in self.received.values() if d.state in ("delivered", "acked-in-tx")]
        for d in pending:
            object.__setattr__(d, "state", "rolled back")
            self._forget(d)
        return pending

    def _check(self) -> None:
        self.broker.storage.check_open()
        if self.closed:
            raise IllegalStateError("the session is closed")

    def close(self) -> None:
        """Roll back an open transaction, close every consumer. Safe to call twice."""
        ticket = None
        with self.broker.lock:
            if self.closed:
                return
            if self.transacted and not self.broker.storage.failed:
                self._tx_sends = []
                ticket = self._cancel_received()
            for c in list(self.consumers):
                c.close()
            self.closed = True
            _exclusive.session_closed(self.broker, self)
            if self in self.broker.sessions:
                self.broker.sessions.remove(self)
        if not self.broker.storage.failed:
            self.broker.storage.wait(ticket)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
