"""The two kinds of link a served connection has, over the engine's asyncio API.

``Inbound``: a client's sender link. Each complete transfer becomes one ``AsyncSession.send``
(the sends of one loop iteration share one journal write and one fsync); the transfer is settled
``accepted`` only once the message is durable, or ``rejected`` with the error's condition when
the store refuses it (nothing stored). Credit is kept topped up to ``CREDIT``.

``Outbound``: a client's receiver link, an mqstore consumer. The link's credit says how many
messages may be handed out: a task receives one message per unit of credit and transfers it.
The client's outcome settles it: ``accepted`` acks, ``rejected`` rejects (the address's
dead-letter settings), ``released`` and ``modified`` give it back (``Delivery.release``: with its
delivery count, so ``max-delivery-attempts`` applies). A link whose sender settles on its side
(at-most-once) is acked as it is sent. A client whose link asks for receiver-settle-mode
``second`` gets its transfers settled only once their outcome is durable: its consumer is on an
engine session with ``block_on_acknowledge``. When the link closes, what the client had not settled
goes back to the queue, as a closed consumer's deliveries do.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, Dict, Optional, Set

from proton import Delivery as Transfer
from proton import Link, Message as AmqpMessage

from mqstore.engine import AsyncConsumer, AsyncSession, Delivery
from mqstore.journal import MqStoreError

from .conditions import condition_of
from .convert import UnsupportedBodyError, delivery_to_amqp, to_store
from .wire import tag_of

log = logging.getLogger("mqstore.serve")

CREDIT = 100  # transfers a client may send ahead of their settlement, per link


class Inbound:
    """A client's sender link: its transfers are sent to ``destination`` (``None``: each
    message's ``to`` address, the anonymous relay).

    Args:
        wire: the connection's ``ProtonWire`` (``pump()`` after touching proton objects).
        link: the proton receiver link (ours).
        session: the engine session the sends go through.
    """

    def __init__(self, wire: Any, link: Link, session: AsyncSession,
                 destination: Optional[str]) -> None:
        self.wire = wire
        self.link = link
        self.session = session
        self.destination = destination
        self.tasks: Set["asyncio.Task[None]"] = set()
        link.flow(CREDIT)

    def on_transfer(self, transfer: Transfer) -> None:
        """A transfer arrived (complete or not)."""
        if transfer.aborted:  # the client gave up on it midway: nothing to store
            transfer.settle()
            return
        if transfer.partial or not transfer.readable:
            return  # more frames to come
        link = self.link
        data = link.recv(transfer.pending)
        link.advance()
        try:
            amqp = AmqpMessage()
            amqp.decode(data)
            message = to_store(amqp)
            destination = self.destination or amqp.address
            if not destination:
                raise UnsupportedBodyError("to", "the link has no target address and the "
                                           "message no 'to' address")
        except UnsupportedBodyError as exc:
            self._settle(transfer, exc, "amqp:not-implemented")
            return
        except MqStoreError as exc:
            self._settle(transfer, exc)
            return
        except Exception as exc:  # noqa: BLE001 - proton's decode errors: a bad message
            self._settle(transfer, exc, "amqp:decode-error")
            return
        task = asyncio.ensure_future(self._send(transfer, destination, message))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _send(self, transfer: Transfer, destination: str, message: Any) -> None:
        try:
            await self.session.send(destination, message)
        except MqStoreError as exc:
            self._settle(transfer, exc)
        else:
            self._settle(transfer, None)

    def _settle(self, transfer: Transfer, error: Optional[BaseException],
                condition: Optional[str] = None) -> None:
        if self.wire.closed:
            return
        if error is None:
            transfer.update(Transfer.ACCEPTED)
        else:
            transfer.local.condition = condition_of(error, condition)
            transfer.update(Transfer.REJECTED)
        transfer.settle()
        link = self.link
        if link.state & Link.LOCAL_ACTIVE and link.credit < CREDIT // 2:
            link.flow(CREDIT - link.credit)
        self.wire.pump()

    async def drain(self) -> None:
        """Wait for the sends under way (before the session closes)."""
        if self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)


class Outbound:
    """A client's receiver link on an mqstore consumer.

    Args:
        wire: the connection's ``ProtonWire``.
        link: the proton sender link (ours).
        consumer: the engine consumer it hands out from.
    """

    _tags = itertools.count(1)

    def __init__(self, wire: Any, link: Link, consumer: AsyncConsumer) -> None:
        self.wire = wire
        self.link = link
        self.consumer = consumer
        self.presettled = link.snd_settle_mode == Link.SND_SETTLED
        self.unsettled: Dict[str, Delivery] = {}
        self.settling: Set["asyncio.Task[None]"] = set()
        self._credit = asyncio.Event()
        self._task: Optional["asyncio.Task[None]"] = asyncio.ensure_future(self._run())

    def on_flow(self) -> None:
        """The client changed the link's credit (or asked to drain it)."""
        self._credit.set()

    async def _run(self) -> None:
        link = self.link
        try:
            while True:
                if link.credit <= 0:
                    self._credit.clear()
                    await self._credit.wait()
                    continue
                if self.settling:  # outcomes received first: a released message is back
                    # at the head before the next one is taken, as an embedded release
                    await asyncio.gather(*list(self.settling), return_exceptions=True)
                    continue
                drain = link.drain_mode
                delivery = await self.consumer.receive(0 if drain else None)
                if delivery is None:  # draining and nothing left: the credit is used up
                    link.drained()
                    self.wire.pump()
                    self._credit.clear()
                    await self._credit.wait()
                    continue
                if not link.state & Link.LOCAL_ACTIVE:  # closed meanwhile: it goes back
                    await self.consumer.release(delivery)
                    return
                self._transfer(delivery)
                # what else is there at once goes out with it: one write to the socket
                while link.credit > 0 and not self.settling and not link.drain_mode:
                    more = await self.consumer.receive(0)
                    if more is None:
                        break
                    if not link.state & Link.LOCAL_ACTIVE:
                        await self.consumer.release(more)
                        break
                    self._transfer(more)
                self.wire.pump()
        except asyncio.CancelledError:
            raise
        except MqStoreError as exc:  # the broker failed or closed: the link ends with it
            link.condition = condition_of(exc)
            link.close()
            self.wire.pump()

    def _transfer(self, delivery: Delivery) -> None:
        tag = str(next(self._tags))
        link = self.link
        transfer = link.delivery(tag)
        link.send(delivery_to_amqp(delivery).encode())
        link.advance()
        if self.presettled:
            transfer.settle()
            self._settle_later(delivery, Transfer.ACCEPTED)
        else:
            self.unsettled[tag] = delivery

    def on_outcome(self, transfer: Transfer) -> None:
        """The client settled or gave an outcome for one of our transfers. A client that
        settles first (AMQP's receiver-settle-mode ``first``, the default) is settled at once
        and its outcome applied after; one that waits for us (mode ``second``: a session
        with ``block_on_acknowledge``) is settled once the outcome is durable."""
        state = transfer.remote_state
        if not state and not transfer.settled:
            return
        delivery = self.unsettled.pop(tag_of(transfer), None)
        waits = not transfer.settled
        if not waits:
            transfer.settle()
        if delivery is not None:
            self._settle_later(delivery, state, transfer if waits else None)
        elif waits:
            transfer.settle()

    def _settle_later(self, delivery: Delivery, state: int,
                      then: Optional[Transfer] = None) -> None:
        task = asyncio.ensure_future(self._settle(delivery, state, then))
        self.settling.add(task)
        task.add_done_callback(self.settling.discard)

    async def _settle(self, delivery: Delivery, state: int, then: Optional[Transfer]) -> None:
        try:
            if state == Transfer.ACCEPTED:
                await self.consumer.ack(delivery)
            elif state == Transfer.REJECTED:
                await self.consumer.reject(delivery)
            else:  # released, modified, or settled with no outcome: it goes back
                await self.consumer.release(delivery)
        except MqStoreError as exc:  # settled already (the consumer closed meanwhile)
            log.debug("settling a served delivery: %s", exc)
        if then is not None and not self.wire.closed:
            then.settle()  # the client's wait ends: its outcome is durable
            self.wire.pump()

    async def close(self) -> None:
        """Stop handing out, let the outcomes already received take effect, then close the
        consumer: what the client had not settled goes back to its queue."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.settling:
            await asyncio.gather(*list(self.settling), return_exceptions=True)
        self.consumer.close()
