"""The asyncio facade: ``await session.send(...)``, ``await consumer.receive()``.

The locked parts run in the event loop thread (they only append to the journal's open batch);
waiting for durability awaits the journal ticket, so thousands of tasks share one group commit
without a thread each. The sends and the acks the tasks make in one iteration of the loop are
done together at its end (``engine.loopbatch``: one lock and one journal write for many), in the
order they were made. ``receive`` waits on a future the broker resolves from whichever thread makes a
message available.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Optional, Sequence

from .loopbatch import batches
from .paging.addressfull import deadline_of, timed_out
from .model import Message
from .queues.queue import MessageRef
from .consumer import Consumer, Delivery
from .session import Session
from .values import check_timeout
from mqstore.journal import Ticket


class _AsyncWaiter:
    """A consumer awaiting a message (asyncio flavour). Woken from its loop's own thread (a
    send or ack in another task) it resolves its future at once; from another thread, through
    ``call_soon_threadsafe`` (which costs a write to the loop's self-pipe)."""

    def __init__(self, consumer: Consumer, loop: asyncio.AbstractEventLoop) -> None:
        self.consumer = consumer
        self.loop = loop
        self.thread = threading.get_ident()  # the loop's: receive runs in it
        self.future: "asyncio.Future[None]" = loop.create_future()
        self.got = None
        self.done = False

    def wants(self) -> bool:
        return not self.done and not self.consumer.closed and self.consumer.has_credit()

    def give(self, ref: MessageRef, ticket: Optional[Ticket]) -> None:
        self.got = (ref, ticket)
        self.done = True
        self.wake()

    def wake(self) -> None:
        if threading.get_ident() == self.thread:
            self._wake()  # callbacks run later, from the loop: safe with the lock held
        else:
            self.loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if not self.future.done():
            self.future.set_result(None)


class AsyncConsumer:
    """``await consumer.receive(timeout)``; wraps a ``Consumer``."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    async def receive(self, timeout: Optional[float] = None) -> Optional[Delivery]:
        """A ``Delivery``, or ``None`` after ``timeout`` seconds (forever when ``None``).

        A receive that is cancelled (``task.cancel()``, an outer ``asyncio.wait_for``) hands
        nothing out and loses nothing: a message it had taken already waits in the consumer's
        prefetch buffer (``engine.delivery.prefetch``) for the next receive, or goes back to the
        queue with its delivery count as it was when the consumer closes.

        Raises:
            InvalidArgumentError: ``timeout`` is not None or seconds >= 0 (nothing taken).
            CancelledError: the task was cancelled (nothing handed out).
        """
        timeout = check_timeout(timeout)
        c = self.consumer
        loop = asyncio.get_running_loop()
        got, waiter = c._take_or_wait(lambda: _AsyncWaiter(c, loop))
        try:
            if waiter is not None:
                # a timeout resolves the future empty (cheaper than asyncio.timeout's
                # cancellation, which a receive pays for on every wait)
                timer = None if timeout is None else \
                    waiter.loop.call_later(timeout, waiter._wake)
                try:
                    await waiter.future
                finally:
                    if timer is not None:
                        timer.cancel()
                got = c._stop_waiting(waiter)
                if got is None:
                    return None
            await c.session.broker.storage.wait_async(got[1])
        except asyncio.CancelledError:
            got = got or (c._stop_waiting(waiter) if waiter is not None else None)
            if got is not None:
                c._keep_for_later(*got)
            raise
        return c._finish(got[0])

    async def ack(self, delivery: Delivery) -> None:
        """Acknowledge without blocking the event loop (awaits durability only with the
        session's ``block_on_acknowledge``, as ``Delivery.ack``). Outside a transaction the
        ack is settled at the end of this iteration of the loop, with the other tasks' acks of
        the iteration (one journal write for them all), and this returns once it is: the
        message has left its queue.

        Raises:
            IllegalStateError: already settled, or the session is closed (at once).
            BrokerFailedError: the broker failed (the delivery stays marked settled, as
                ``Delivery.ack``'s does).
        """
        s = self.consumer.session
        broker = s.broker
        with broker.lock:
            if not s._settle_mark(delivery, "acked"):
                return  # acked in the transaction, at its commit
        loop = asyncio.get_running_loop()
        ticket = await batches(loop).acks.add(loop, broker, delivery._ref)
        if s.block_on_acknowledge:
            await broker.storage.wait_async(ticket)

    async def reject(self, delivery: Delivery) -> None:
        """Reject without blocking the event loop."""
        s = self.consumer.session
        await s.broker.storage.wait_async(s._settle_begin(delivery, "rejected"))

    async def release(self, delivery: Delivery) -> None:
        """Give the message back unsettled (``Delivery.release``) without blocking the
        event loop."""
        s = self.consumer.session
        await s.broker.storage.wait_async(s._release_begin(delivery))

    def close(self) -> None:
        """Close the consumer (unacked deliveries go back to the queue)."""
        self.consumer.close()


class AsyncSession:
    """An asyncio view of a ``Session``. Create with ``AsyncSession(broker.session())``."""

    def __init__(self, session: Session) -> None:
        self.session = session

    async def send(self, destination: str, message: Message,
                   timeout: Optional[float] = None) -> None:
        """Send one message; returns when it is durable. On a full BLOCK address it awaits
        room (``timeout`` seconds; ``None``: as long as it takes) without blocking the loop.
        Outside a transaction the message is placed at the end of this iteration of the loop,
        with the other tasks' sends of the iteration, in the order they were made (a send
        cancelled meanwhile is placed all the same, as a send placed at once would be).

        Raises:
            As ``Session.send``.
        """
        await self.send_many(destination, [message], timeout)

    async def send_many(self, destination: str, messages: Sequence[Message],
                        timeout: Optional[float] = None) -> None:
        """Send messages with one wait (``Session.send_many``; BLOCK awaits room).

        Raises:
            As ``Session.send_many``.
        """
        s = self.session
        broker = s.broker
        dest, pending = s._prepared(destination, messages)
        deadline = deadline_of(check_timeout(timeout))
        loop = asyncio.get_running_loop()
        ticket = None
        if not s.transacted:  # placed with the other sends of this loop iteration
            ticket, pending = await batches(loop).sends.add(loop, s, dest, pending)
            if not pending:
                await broker.storage.wait_async(ticket)
                return
        while True:
            with broker.lock:
                got, pending = s._send_some(dest, pending)
                room = broker.room.future(loop) if pending else None
            ticket = got or ticket
            if room is None:
                break
            left = None if deadline is None else deadline - time.monotonic()
            try:
                if left is not None and left <= 0:
                    raise asyncio.TimeoutError
                await asyncio.wait_for(room, left)
            except asyncio.TimeoutError:
                with broker.lock:
                    got, pending = s._send_some(dest, pending)
                ticket = got or ticket
                break
        await broker.storage.wait_async(ticket)
        if pending:
            raise timed_out(dest.address, len(pending), len(messages), timeout)

    def create_consumer(self, queue: str, window: int = 1000,
                        selector: Optional[str] = None, prefetch: int = 0) -> AsyncConsumer:
        """An ``AsyncConsumer`` on a queue or FQQN, with an optional selector and prefetch (as
        ``Session.create_consumer``)."""
        return AsyncConsumer(self.session.create_consumer(queue, window, selector, prefetch))

    async def commit(self) -> None:
        """Commit the transaction (one TX record)."""
        await self.session.broker.storage.wait_async(self.session._commit_begin())

    def rollback(self) -> None:
        """Roll the transaction back (nothing to wait for)."""
        self.session.rollback()

    def close(self) -> None:
        """Close the session."""
        self.session.close()

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
