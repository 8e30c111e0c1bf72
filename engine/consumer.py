"""Consumers and the deliveries they hand out: the receiving side of a ``Session``.

``Consumer.receive()`` waits for a message (``receive_nowait()`` does not); a consumer's window
bounds the deliveries it holds unacked and those it prefetched (``engine.delivery.prefetch``).
``Consumer.close()`` cancels what it holds unacked back to the queue, and what it prefetched. A
``Delivery`` is one message handed out: it settles (ack, reject, release) through its session,
which keeps what was received (``engine.session``).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

from .routing import autocreate
from .delivery import settle as ops
from .errors import IllegalStateError, MqStoreError
from .filters.expression import Filter
from .model import Message, ReceivedMessage
from .routing.placement import body_of
from .delivery.prefetch import Prefetch
from .queues.queue import MessageRef, Queue
from .queues.selection import Selection
from .values import TIME_MAX, check_int, check_timeout
from .routing.core import BrokerCore
from mqstore.journal import Ticket
from mqstore.recovery.schema import AckReason


class Owner(Protocol):
    """What a consumer and its deliveries need of the session that owns them
    (``engine.session.Session``): its broker, whether it is closed, the deliveries it
    received and not settled (by ``id``), and its settle steps. Typed here so that neither
    module imports the other."""

    broker: BrokerCore
    closed: bool
    block_on_acknowledge: bool
    received: Dict[int, "Delivery"]

    def _settle(self, d: "Delivery", reason: str) -> None: ...

    def _settle_begin(self, d: "Delivery", reason: str) -> Optional[Ticket]: ...

    def _release_begin(self, d: "Delivery") -> Optional[Ticket]: ...

DEFAULT_WINDOW = 1000
_ACKED = AckReason.ACKED.value  # read once: an enum member's value costs calls


class Delivery(ReceivedMessage):
    """A message handed to a consumer; settle it with ``ack()`` or ``reject()``.

    Raises (from ack/reject):
        IllegalStateError: already settled, rolled back, or its consumer or session closed.
    """

    def __init__(self, message: Message, delivery_count: int, queue: str, ref: MessageRef,
                 session: Owner, consumer: Optional["Consumer"] = None) -> None:
        object.__setattr__(self, "message", message)
        object.__setattr__(self, "delivery_count", delivery_count)
        object.__setattr__(self, "queue", queue)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_consumer", consumer)  # whose unacked it is in
        object.__setattr__(self, "state", "delivered")

    __eq__ = object.__eq__  # a delivery is itself, not its contents
    __hash__ = object.__hash__

    def ack(self) -> None:
        """Acknowledge: the message leaves the queue (at commit, in a transacted session).
        Returns once the ack is journaled (durable at the journal's next group commit), by
        default; in a session made with ``block_on_acknowledge=True``, once it is durable
        (``Session``)."""
        s = self._session
        s.broker.storage.after_ack(s._settle_begin(self, _ACKED), s.block_on_acknowledge)

    def reject(self) -> None:
        """Reject: the message leaves the queue and is not redelivered; it goes to the
        dead-letter address when one is set, else it is dropped and counted in
        ``messages_killed``."""
        self._session._settle(self, AckReason.REJECTED.value)

    def release(self) -> None:
        """Give the message back unsettled (AMQP "released"; a nack that is not a
        rejection): it returns to the head of its queue with its delivery count, or, when the
        address settings give a ``redelivery_delay``, waits that long in the queue's
        scheduled buffer first (Artemis redelivery delay). Not counted as rejected; it
        reaches the dead-letter address only after ``max_delivery_attempts`` deliveries. At
        once, also in a transacted session. Returns once the return is durable."""
        self._session.broker.storage.wait(self._session._release_begin(self))


class _Waiter:
    """A consumer blocked in ``receive`` (thread flavour)."""

    def __init__(self, consumer: "Consumer") -> None:
        self.consumer = consumer
        self.got: Optional[Tuple[MessageRef, Optional[Ticket]]] = None
        self.done = False
        self.event = threading.Event()

    def wants(self) -> bool:
        return not self.done and not self.consumer.closed and self.consumer.has_credit()

    def give(self, ref: MessageRef, ticket: Optional[Ticket]) -> None:
        self.got = (ref, ticket)
        self.done = True
        self.event.set()

    def wake(self) -> None:
        self.event.set()


class Consumer:
    """Receives from one queue (name or FQQN ``address::queue``). Create with
    ``Session.create_consumer``."""

    def __init__(self, session: Owner, queue: Queue, window: int,
                 selector: Optional[Filter] = None, prefetch: int = 0) -> None:
        self.session = session
        self.queue = queue
        self.window = window
        self.closed = False
        self.unacked: Dict[int, Delivery] = {}
        # taken ahead of the receives (engine.delivery.prefetch)
        self.prefetched = Prefetch(prefetch)
        self.waiting: List[Any] = []
        # non-destructive queues: per priority lane, the arrival number of the last one seen
        self.cursor: Dict[int, int] = {}
        # with a selector: its target list on the queue (``engine.queues.selection``)
        self.selection: Optional[Selection] = None
        if selector is not None:
            self.selection = Selection(selector)
            if not queue.non_destructive:
                self.selection.attach(queue)

    @property
    def selector(self) -> Optional[str]:
        """The consumer's selector (Artemis filter expression), or ``None``."""
        return None if self.selection is None else self.selection.filter.text

    def has_credit(self) -> bool:
        """Whether the window allows one more delivery (prefetched ones count)."""
        return len(self.unacked) + len(self.prefetched) < self.window

    def _take_now(self, wanted: int, held: int = 0
                  ) -> Tuple[List[MessageRef], Optional[Ticket]]:
        """Up to ``wanted`` references ready now (lock held), prefetched ones first, within
        the window less ``held`` the caller took already; and the ticket to wait on."""
        room = self.window - len(self.unacked) - len(self.prefetched) - held
        return self.prefetched.take(self.session.broker, self.queue, self, wanted, room)

    def receive(self, timeout: Optional[float] = None) -> Optional[Delivery]:
        """Wait up to ``timeout`` seconds (forever when ``None``) for a message.

        Returns:
            A ``Delivery``, or ``None`` on timeout.

        Raises:
            IllegalStateError: the consumer, session or broker is closed.
            InvalidArgumentError: ``timeout`` is not None or seconds >= 0 (nothing taken).
        """
        got = self._next(check_timeout(timeout))
        if got is None:
            return None
        self.session.broker.storage.wait(got[1])  # the DELIVERY record is durable first
        return self._finish(got[0])

    def _next(self, timeout: Optional[float]) -> Optional[Tuple[MessageRef, Optional[Ticket]]]:
        """The next reference taken for this consumer and the ticket of its DELIVERY record
        (not waited on yet), waiting up to ``timeout`` seconds for one; ``None`` on
        timeout."""
        got, waiter = self._take_or_wait(lambda: _Waiter(self))
        if waiter is not None:
            waiter.event.wait(timeout)
            got = self._stop_waiting(waiter)
        return got

    def _take_or_wait(self, make: Callable[[], Any]
                      ) -> Tuple[Optional[Tuple[MessageRef, Optional[Ticket]]], Any]:
        """Take the head now (and the ticket to wait on), or register a waiter, made by
        ``make()`` only then, to be handed the next message. Returns ``(taken, None)`` or
        ``(None, waiter)``."""
        broker = self.session.broker
        with broker.lock:
            self._check()
            refs, ticket = self._take_now(1)
            if not refs:
                waiter = make()
                self.queue.waiters.append(waiter)
                self.waiting.append(waiter)
                return None, waiter
            return (refs[0], ticket), None

    def _keep_for_later(self, ref: MessageRef, ticket: Optional[Ticket]) -> None:
        """A reference taken for a receive that did not hand it out (cancelled): first in the
        prefetch buffer, for the next receive, or back to the queue at close."""
        self._keep_all_for_later([ref], ticket)

    def _keep_all_for_later(self, refs: List[MessageRef], ticket: Optional[Ticket]) -> None:
        """``_keep_for_later`` for references taken together, kept in their order."""
        broker = self.session.broker
        with broker.lock:
            for ref in reversed(refs):
                self.prefetched.keep(ref, ticket)
            if not self.closed:
                return
            try:  # closed meanwhile: back to the queue now
                ops.cancel(broker, self.prefetched.drain(), delayed=False)
            except MqStoreError:
                pass  # the broker closed or failed: a reopen ends the delivery

    def _stop_waiting(self, waiter: Any) -> Optional[Tuple[MessageRef, Optional[Ticket]]]:
        with self.session.broker.lock:
            waiter.done = True
            if waiter in self.waiting:
                self.waiting.remove(waiter)
            return waiter.got

    def receive_many(self, max_messages: int, timeout: Optional[float] = None
                     ) -> List[Delivery]:
        """Take up to ``max_messages`` (bounded by the window) that are ready now (prefetched
        ones first), with one journal write and one wait; when none is, wait up to
        ``timeout`` seconds for one, then take the rest that are ready with it: one wait for
        durability in either case.

        Returns:
            The deliveries in queue order; empty on timeout.

        Raises:
            InvalidArgumentError: ``max_messages`` not an int >= 1, or ``timeout`` not None
                or seconds >= 0 (nothing received).
        """
        check_int("max_messages", max_messages, 1, TIME_MAX)
        timeout = check_timeout(timeout)
        broker = self.session.broker
        with broker.lock:
            self._check()
            refs, ticket = self._take_now(max_messages)
        if refs:  # ready now: one DELIVERY write and one wait for all of them
            broker.storage.wait(ticket)
            return self._finish_all(refs)
        got = self._next(timeout)
        if got is None:
            return []
        first, first_ticket = got
        refs, ticket = [], None
        with broker.lock:  # the rest; closed meanwhile: the first one alone is handed out
            try:
                self._check()
                if max_messages > 1:
                    refs, ticket = self._take_now(max_messages - 1, held=1)
            except IllegalStateError:
                pass
        broker.storage.wait(ticket)  # journal order: it covers the first one too,
        broker.storage.wait(first_ticket)  # which then returns at once
        return self._finish_all([first] + refs)

    def receive_nowait(self) -> Optional[Delivery]:
        """A message if one is ready now, else ``None``."""
        return self.receive(0)

    def _finish(self, ref: MessageRef) -> Delivery:
        """Build the delivery once its DELIVERY record is durable (``_finish_all``)."""
        return self._finish_all([ref])[0]

    def _finish_all(self, refs: List[MessageRef]) -> List[Delivery]:
        """Build the deliveries of ``refs`` (taken for this consumer, in order) once their
        DELIVERY records are durable.

        Raises:
            IllegalStateError (BrokerFailedError after a failure): the consumer, its session
                or the broker closed while they were in flight (taken, not handed out yet,
                where ``close`` does not see them). They are then kept as a cancelled
                receive's are: back to the queue head in order when the consumer is closed,
                else in its prefetch buffer (a closed broker's reopen ends the delivery).
        """
        broker = self.session.broker
        with broker.lock:
            try:
                self._check()
            except MqStoreError:
                self._keep_all_for_later(refs, None)
                raise
            out = []
            name, session = self.queue.name, self.session
            unacked, received = self.unacked, session.received
            for ref in refs:
                msg = ref.msg
                body = msg.body if msg.body is not None else body_of(broker, msg)
                d = Delivery(msg.to_message(body), ref.delivery_count, name, ref, session, self)
                key = id(d)
                unacked[key] = received[key] = d
                out.append(d)
        return out

    def _check(self) -> None:
        self.session.broker.storage.check_open()
        if self.closed or self.session.closed:
            raise IllegalStateError("the consumer is closed")

    def close(self) -> None:
        """Cancel unacked deliveries back to the queue head and stop receiving."""
        broker = self.session.broker
        with broker.lock:
            if self.closed:
                return
            self.closed = True
            for waiter in self.waiting:
                waiter.done = True
                waiter.wake()
            self.waiting = []
            if self.selection is not None:
                self.selection.detach(self.queue)
            released = self.queue.groups.release(self)  # its groups go to the next ones
            if self in self.queue.consumers:
                active = self.queue.config.exclusive and ops.may_receive(self.queue, self)
                self.queue.consumers.remove(self)
                if active and self.queue.consumers:  # an exclusive queue's next consumer
                    ops.serve_waiters(broker, self.queue)
            pending = [d for d in self.unacked.values() if d.state == "delivered"]
            for d in pending:
                object.__setattr__(d, "state", "cancelled")
                self.session.received.pop(id(d), None)
            self.unacked = {k: d for k, d in self.unacked.items() if d.state == "acked-in-tx"}
            # never handed out: back first, so the unacked ones end up in front of them
            ahead = ops.cancel(broker, self.prefetched.drain(), delayed=False)
            ticket = ops.cancel(broker, [d._ref for d in pending]) or ahead
            if released:
                ops.serve_waiters(broker, self.queue)
            autocreate.maybe_delete(broker, self.queue)
        broker.storage.wait(ticket)
