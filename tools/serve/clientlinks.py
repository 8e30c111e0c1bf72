"""The client's links to a served store (``tools.serve.client``'s parts, in its event loop):
``SenderLink`` sends a session's messages to one destination and resolves each send's future
with the server's outcome; ``RemoteConsumer`` grants credit for what its ``receive`` calls ask
for and hands out ``RemoteDelivery`` objects, whose ``ack``, ``reject`` and ``release`` send the
AMQP outcome (and, with ``block_on_acknowledge``, wait for the server's settlement once
durable). Split from ``client`` so that each module has one job: this one the links, that one
the connection and its sessions."""

from __future__ import annotations

import asyncio
import collections
import itertools
from typing import Any, Deque, Dict, List, Optional, Tuple

from proton import Delivery as Transfer
from proton import Link, Message as AmqpMessage, Terminus

from mqstore.engine import IllegalStateError, Message
from mqstore.journal import MqStoreError

from .conditions import error_of
from .convert import received
from .wire import tag_of

CONNECT_TIMEOUT = 30.0  # seconds to connect, to open a link, to get a drain's answer


class SenderLink:
    """One sender link of a session, to one destination (in the loop)."""

    _tags = itertools.count(1)

    def __init__(self, client: Any, link: Link) -> None:
        # client: the connection's handler (``client._Client``: its loop, wire and links)
        self.client = client
        self.link = link
        self.opened: "asyncio.Future[None]" = client.loop.create_future()
        self.waiting: Dict[str, "asyncio.Future[None]"] = {}
        self.queued: Deque[Tuple[str, bytes]] = collections.deque()  # waiting for credit
        self.error: Optional[MqStoreError] = None

    def on_open(self) -> None:
        if self.link.remote_target.type == Terminus.UNSPECIFIED:
            return  # refused: the close with its reason follows
        if not self.opened.done():
            self.opened.set_result(None)

    def send(self, payload: bytes) -> "asyncio.Future[None]":
        tag = str(next(self._tags))
        fut: "asyncio.Future[None]" = self.client.loop.create_future()
        if self.error is not None:
            fut.set_exception(self.error)
            return fut
        self.waiting[tag] = fut
        self.queued.append((tag, payload))
        self.on_flow()
        return fut

    def on_flow(self) -> None:
        link = self.link
        sent = False
        while self.queued and link.credit > 0:
            tag, payload = self.queued.popleft()
            link.delivery(tag)
            link.send(payload)
            link.advance()
            sent = True
        if sent:
            self.client.wire.pump()

    def on_delivery(self, transfer: Transfer) -> None:
        if not transfer.updated and not transfer.settled:
            return
        fut = self.waiting.pop(tag_of(transfer), None)
        state, condition = transfer.remote_state, transfer.remote.condition
        transfer.settle()
        if fut is None or fut.done():
            return
        if state == Transfer.ACCEPTED:
            fut.set_result(None)
        else:
            fut.set_exception(error_of(condition, "the server did not take the message"))

    def on_close(self, error: MqStoreError) -> None:
        self.error = error
        if not self.opened.done():
            self.opened.set_exception(error)
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(error)
        self.waiting.clear()


class RemoteDelivery:
    """A message received from a served store; settle it with ``ack``, ``reject`` or
    ``release`` (as ``mqstore.Delivery``).

    Attributes:
        message: the ``Message`` (body, properties, the broker's message id...).
        delivery_count: deliveries of it so far, this one included.
        queue: the source the consumer was made on.
        state: ``delivered``, ``acked``, ``rejected`` or ``released``.
    """

    def __init__(self, consumer: "RemoteConsumer", transfer: Transfer, message: Message,
                 delivery_count: int) -> None:
        self._consumer = consumer
        self._transfer = transfer
        self.message = message
        self.delivery_count = delivery_count
        self.queue = consumer.queue
        self.state = "delivered"

    @property
    def redelivered(self) -> bool:
        """Whether this message was delivered before."""
        return self.delivery_count > 1

    def ack(self) -> None:
        """Accept it: the message leaves its queue (durable at the server's next group
        commit).

        Raises:
            IllegalStateError: already settled. ConnectionLostError.
        """
        self._consumer._settle(self, Transfer.ACCEPTED, "acked")

    def reject(self) -> None:
        """Reject it: the address's dead-letter settings apply (as ``Delivery.reject``)."""
        self._consumer._settle(self, Transfer.REJECTED, "rejected")

    def release(self) -> None:
        """Give it back unsettled (as ``Delivery.release``: with its delivery count)."""
        self._consumer._settle(self, Transfer.RELEASED, "released")


class RemoteConsumer:
    """Receives from a queue (or a topic subscription) of a served store; made by
    ``RemoteSession.create_consumer`` or ``create_subscriber``."""

    # session: the ``client.RemoteSession`` that made it (its loop thread and connection)
    def __init__(self, session: Any, link: Link, queue: str, window: int,
                 prefetch: int) -> None:
        self.session = session
        self.link = link
        self.queue = queue
        self.window = window
        self.prefetch = prefetch
        self.closed = False
        self._loop = session._loop
        self._client = session._client
        self.opened: "asyncio.Future[None]" = self._loop.loop.create_future()
        self._buffer: Deque[RemoteDelivery] = collections.deque()
        self._unsettled = 0
        self._arrived: Optional["asyncio.Future[None]"] = None
        self._error: Optional[MqStoreError] = None
        # block_on_acknowledge: outcomes sent and not yet settled by the server (durable)
        self._confirms: Dict[str, "asyncio.Future[None]"] = {}

    # -- in the loop --------------------------------------------------------------------------
    def on_open(self) -> None:
        if self.link.remote_source.type == Terminus.UNSPECIFIED:
            return  # refused: the close with its reason follows
        if not self.opened.done():
            self.opened.set_result(None)

    def on_delivery(self, transfer: Transfer) -> None:
        waiting = self._confirms.get(tag_of(transfer)) if self._confirms else None
        if waiting is not None:
            if transfer.settled:  # the server has our outcome durable
                del self._confirms[tag_of(transfer)]
                transfer.settle()
                if not waiting.done():
                    waiting.set_result(None)
            return
        if transfer.partial or not transfer.readable:
            return
        data = self.link.recv(transfer.pending)
        self.link.advance()
        amqp = AmqpMessage()
        amqp.decode(data)
        self._buffer.append(RemoteDelivery(self, transfer, received(amqp),
                                           int(amqp.delivery_count) + 1))
        self._unsettled += 1
        self._wake()

    def on_flow(self) -> None:
        if self.link.credit == 0:
            self._wake()  # a drain ended

    def on_close(self, error: MqStoreError) -> None:
        self._error = error
        if not self.opened.done():
            self.opened.set_exception(error)
        for fut in self._confirms.values():
            if not fut.done():
                fut.set_exception(error)
        self._confirms.clear()
        self._wake()

    def _wake(self) -> None:
        fut, self._arrived = self._arrived, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _grant(self, wanted: int, drain: bool) -> "asyncio.Future[None]":
        """Credit for ``wanted`` more messages (within the window), and the future of the
        next arrival (or the end of the drain)."""
        link = self.link
        room = self.window - self._unsettled - len(self._buffer) - link.credit
        more = max(0, min(wanted, room))
        if drain:
            link.drain(more)
        elif more:
            link.flow(more)
        self._client.wire.pump()
        self._arrived = self._loop.loop.create_future()
        return self._arrived

    # -- the caller's thread ------------------------------------------------------------------
    def receive(self, timeout: Optional[float] = None) -> Optional[RemoteDelivery]:
        """The next message, or ``None`` after ``timeout`` seconds (``None``: wait as long as
        it takes; 0: only what the server has at once, asked with an AMQP drain).

        Raises:
            IllegalStateError: closed. ConnectionLostError, or the server's error when it
            ended the consumer.
        """
        got = self.receive_many(1, timeout)
        return got[0] if got else None

    def receive_nowait(self) -> Optional[RemoteDelivery]:
        """``receive(0)``."""
        return self.receive(0)

    def receive_many(self, max_messages: int, timeout: Optional[float] = None
                     ) -> List[RemoteDelivery]:
        """Up to ``max_messages`` messages: waits for the first (as ``receive``), then takes
        what has arrived with it."""
        if self.closed:
            raise IllegalStateError("the consumer is closed")
        wanted = max_messages + self.prefetch

        async def take() -> List[RemoteDelivery]:  # in the loop, start to end
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + timeout
            first = True
            while True:
                if self._buffer:
                    n = min(max_messages, len(self._buffer))
                    return [self._buffer.popleft() for _ in range(n)]
                if self._error is not None:
                    raise self._error
                fut = self._grant(wanted - self.link.credit if first else 0,
                                  drain=timeout == 0)
                first = False
                if timeout == 0:
                    left: Optional[float] = CONNECT_TIMEOUT  # the drain's answer
                else:
                    left = None if deadline is None else max(0.0, deadline - loop.time())
                try:
                    await asyncio.wait_for(fut, left)
                except asyncio.TimeoutError:
                    return []
                if timeout == 0:
                    return [self._buffer.popleft()] if self._buffer else []
        result: List[RemoteDelivery] = self._loop.run(take())
        return result

    def _settle(self, delivery: RemoteDelivery, state: int, name: str) -> None:
        async def settle() -> None:
            if delivery.state != "delivered":
                raise IllegalStateError(f"the delivery is {delivery.state} already")
            confirm = self._settle_here(delivery, state, name)
            if confirm is not None:
                await confirm
        self._loop.run(settle())

    def _settle_here(self, delivery: RemoteDelivery, state: int, name: str
                     ) -> Optional["asyncio.Future[None]"]:
        """Send ``delivery``'s outcome (in the loop); in a session with
        ``block_on_acknowledge``, the future of the server's settlement (once durable)."""
        if self._error is not None:
            raise self._error
        transfer = delivery._transfer
        transfer.update(state)
        delivery.state = name
        self._unsettled -= 1
        confirm = None
        if self.session.block_on_acknowledge:
            confirm = self._loop.loop.create_future()
            self._confirms[tag_of(transfer)] = confirm
        else:
            transfer.settle()
        self._client.wire.pump()
        return confirm

    def close(self) -> None:
        """Close the consumer: what it received and did not settle goes back to the queue on
        the server. Safe to call twice."""
        if self.closed:
            return
        self.closed = True

        def step() -> None:
            for d in self._buffer:
                d._transfer.update(Transfer.RELEASED)
                d._transfer.settle()
                d.state = "released"
            self._buffer.clear()
            self._client.links.pop(self.link, None)
            if self.link.state & Link.LOCAL_ACTIVE:
                self.link.close()
            self._client.wire.pump()
        self._loop.call(step)
