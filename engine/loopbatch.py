"""What the tasks of one asyncio event-loop iteration do together, at the iteration's end: their
sends (``SendBatch``: one lock, route and journal write per destination) and their acks
(``AckBatch``: one lock and one journal write of ACK records per broker), each in the order they
were made. Each task awaits a future that gets its own outcome. One pair of batches per loop
(``batches``), held weakly by the loop: a closed loop is freed with its batches.
"""

from __future__ import annotations

import asyncio
import weakref
from itertools import groupby
from typing import Any, List, Optional, Tuple

from .addressing.names import Destination
from .delivery.acks import settle_acked
from .errors import MqStoreError
from .model import Message
from .queues.queue import MessageRef
from .session import Session
from mqstore.journal import Ticket

Outcome = Tuple[Optional[Ticket], List[Message]]  # a send's ticket and what waits for room


class SendBatch:
    """The sends the tasks of one event-loop iteration make (``AsyncSession.send``), placed
    together at the end of the iteration: one broker lock, one route and one journal write (one
    fold) per destination for all of them, instead of one each (issue 38; the journal already
    shares one fsync among them). Each send keeps its own outcome: when placing a destination's
    sends together raises (a routing error, a record too large, a full FAIL address), nothing
    of them was placed, and each is placed alone, as it would have been without the batch, its
    error going to its own task. Sends are placed in the order they were made, whether or not
    the task that made one is cancelled meanwhile (as a send placed at once is not undone by a
    cancelled wait)."""

    def __init__(self) -> None:
        # (no reference to the loop: the loop is the key that holds this batch, weakly)
        self.items: List[Tuple[Session, Destination, List[Message], "asyncio.Future[Outcome]"]] = []

    def add(self, loop: asyncio.AbstractEventLoop, session: Session, dest: Destination,
            messages: List[Message]) -> "asyncio.Future[Outcome]":
        """Queue a send of checked ``messages`` on ``loop`` (the running one); the future gets
        its outcome."""
        if not self.items:
            loop.call_soon(self.flush)
        future: "asyncio.Future[Outcome]" = loop.create_future()
        self.items.append((session, dest, messages, future))
        return future

    def flush(self) -> None:
        items, self.items = self.items, []
        if not items:
            return
        try:  # runs of sends to one destination of one broker
            for (broker, dest), run in groupby(items, lambda item: (item[0].broker, item[1])):
                with broker.lock:
                    self._place(broker, dest, list(run))
        except BaseException as exc:  # noqa: BLE001 - never leave a send's task waiting
            for _s, _d, _m, future in items:
                if not future.done():
                    future.set_exception(exc)

    @staticmethod
    def _place(broker: Any, dest: Destination,
               run: List[Tuple[Session, Destination, List[Message], "asyncio.Future[Outcome]"]]
               ) -> None:
        if len(run) > 1 and not broker.owners:  # (no-local queues would need each sender)
            try:
                for session, _d, _m, _f in run:
                    session._check()
                ticket, blocked = run[0][0]._send_some(dest, [m for item in run
                                                              for m in item[2]])
            except MqStoreError:
                pass  # each alone below: its own outcome
            else:
                waiting = {id(m) for m in blocked}
                for _s, _d, messages, future in run:
                    if not future.done():
                        future.set_result((ticket, [m for m in messages if id(m) in waiting]))
                return
        for session, _d, messages, future in run:
            try:
                outcome = session._send_some(dest, messages)
            except MqStoreError as exc:
                if not future.done():
                    future.set_exception(exc)
            else:
                if not future.done():
                    future.set_result(outcome)


class AckBatch:
    """The acks the tasks of one event-loop iteration make (``AsyncConsumer.ack``, outside a
    transaction), settled together at the end of the iteration: per broker, one lock and one
    journal write of all their ACK records (``delivery.acks.settle_acked``, as
    ``Session.ack_many``), instead of one each. Each ack's session part (the check that the
    delivery may be settled, its state) is done when it is made; the task awaits the write's
    ticket, which its future gets at the end of the iteration (or the error the settle
    raised). An ack is settled whether or not its task is cancelled meanwhile."""

    def __init__(self) -> None:
        self.items: List[Tuple[Any, MessageRef, "asyncio.Future[Optional[Ticket]]"]] = []

    def add(self, loop: asyncio.AbstractEventLoop, broker: Any, ref: MessageRef
            ) -> "asyncio.Future[Optional[Ticket]]":
        """Queue the settle of ``ref`` (acked; its delivery marked settled) on ``loop``."""
        if not self.items:
            loop.call_soon(self.flush)
        future: "asyncio.Future[Optional[Ticket]]" = loop.create_future()
        self.items.append((broker, ref, future))
        return future

    def flush(self) -> None:
        items, self.items = self.items, []
        try:
            for broker, group in groupby(items, lambda item: item[0]):  # runs on one broker
                run = list(group)
                try:
                    with broker.lock:
                        ticket = settle_acked(broker, [ref for _b, ref, _f in run])
                    broker.storage.after_ack(ticket, False)  # earlier durable facts applied
                except MqStoreError as exc:
                    for _b, _r, future in run:
                        if not future.done():
                            future.set_exception(exc)
                else:
                    for _b, _r, future in run:
                        if not future.done():
                            future.set_result(ticket)
        except BaseException as exc:  # noqa: BLE001 - never leave an ack's task waiting
            for _b, _r, future in items:
                if not future.done():
                    future.set_exception(exc)


class Batches:
    """One loop's batches."""

    __slots__ = ("sends", "acks")

    def __init__(self) -> None:
        self.sends = SendBatch()
        self.acks = AckBatch()


_batches: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Batches]" = \
    weakref.WeakKeyDictionary()


def batches(loop: asyncio.AbstractEventLoop) -> Batches:
    """``loop``'s batches (made at its first use; no reference to the loop is kept)."""
    got = _batches.get(loop)
    if got is None:
        got = _batches[loop] = Batches()
    return got
