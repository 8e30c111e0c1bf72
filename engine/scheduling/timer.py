"""The broker's scheduler: when scheduled messages come due, something must put them on their queues
even if no consumer asks (Artemis ring queues §3). ``Scheduler`` owns the thread that does it and
the management steps on scheduled buffers; the decisions themselves are ``engine.scheduling.due``'s.

The thread sleeps until the earliest due time of any queue (at most a minute, so a clock
injected for tests never leaves it asleep for long) and is woken when a message is scheduled.
Due messages are also put on their queue at each receive from it and at open, so the thread
only matters for consumers asleep in ``receive``. The same thread runs delayed Qpid
auto-deletes when they are due (``engine.routing.autocreate.run_due_auto_deletes``).
"""

from __future__ import annotations

import threading
import weakref
from typing import Callable, List, Optional

from ..routing.autocreate import run_due_auto_deletes
from ..routing.core import BrokerCore
from ..errors import BrokerFailedError, IllegalStateError, MessageNotFoundError
from ..model import ScheduledMessage
from ..routing.placement import body_of
from ..queues.queue import Queue
from .due import promote_due
from ..values import TIME_MAX, check_int
from mqstore.journal import Ticket

MAX_SLEEP = 60.0  # seconds


class Scheduler:
    """Due scheduled messages of one broker onto their queues.

    Args:
        broker: the broker (its lock guards every step here); it must also have ``closed``
            and ``check_open``.
    """

    def __init__(self, broker: BrokerCore) -> None:
        self._broker = weakref.ref(broker)  # the thread must not keep a dropped broker alive
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def broker(self) -> BrokerCore:
        """The broker (it owns this scheduler, so it is alive while its methods are called)."""
        broker = self._broker()
        if broker is None:
            raise IllegalStateError("the broker is gone")
        return broker

    def start(self) -> None:
        """Start the thread (once, after the broker opened)."""
        self._thread = threading.Thread(target=self._run, name="mqstore-scheduler",
                                        daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Look at the due times again (a message was scheduled, or the broker closes)."""
        self._wake.set()

    def _run(self) -> None:
        while True:  # holds the broker only while it looks: one never closed can be collected
            broker = self._broker()
            if broker is None:
                return
            with broker.lock:
                try:
                    broker.storage.check_open()
                except (BrokerFailedError, IllegalStateError):
                    return
                times = [t for q in broker.queues.values()
                         for t in (q.scheduled.next_due(), q.auto_delete_at) if t is not None]
            delay = MAX_SLEEP if not times else (min(times) - broker.now_ms()) / 1000.0
            del broker
            if delay > 0:
                self._wake.wait(min(delay, MAX_SLEEP))
                self._wake.clear()
                continue
            try:
                self.deliver_due()
            except (BrokerFailedError, IllegalStateError):
                return

    def deliver_due(self) -> int:
        """Put every scheduled message due now on the head of its queue; wait for the DUE
        records. Returns how many came due.

        Raises:
            BrokerFailedError, IllegalStateError (closed).
        """
        broker = self.broker
        count = 0
        while True:  # one step per queue at a time: the lock is let go between steps
            ticket, stepped = None, 0
            with broker.lock:
                broker.storage.check_open()
                now = broker.now_ms()
                for queue in list(broker.queues.values()):
                    nxt = queue.scheduled.next_due()
                    if nxt is not None and nxt <= now:
                        n, t = promote_due(broker, queue, now, steps=1)
                        stepped, ticket = stepped + n, t or ticket
            broker.storage.wait(ticket)
            count += stepped
            if not stepped:
                with broker.lock:  # delayed Qpid auto-deletes that are due
                    run_due_auto_deletes(broker, broker.now_ms())
                return count

    def listing(self, queue: str, limit: int) -> List[ScheduledMessage]:
        """Up to ``limit`` messages of ``queue``'s scheduled buffer, in due order.

        Raises:
            QueueNotFoundError. InvalidArgumentError: limit not an int >= 0.
        """
        check_int("limit", limit, 0, TIME_MAX)
        broker = self.broker
        with broker.lock:
            broker.storage.check_open()
            q = broker.find_queue(queue)
            return [ScheduledMessage(ref.msg.to_message(body_of(broker, ref.msg)), at,
                                     ref.delivery_count, q.name)
                    for at, ref in q.scheduled.listing(limit)]

    def step(self, queue: str, message_id: int,
             fn: Callable[[BrokerCore, Queue, int], Optional[Ticket]]) -> None:
        """Run a management step on message ``message_id`` of ``queue``'s scheduled buffer
        (``engine.scheduling.due.deliver_now`` or ``remove_scheduled``) and wait for it.

        Raises:
            QueueNotFoundError. MessageNotFoundError: not scheduled there; nothing changed.
            InvalidArgumentError: message_id not an int >= 0.
        """
        check_int("message_id", message_id, 0, TIME_MAX)
        broker = self.broker
        with broker.lock:
            broker.storage.check_open()
            q = broker.find_queue(queue)
            try:
                ticket = fn(broker, q, message_id)
            except KeyError:
                raise MessageNotFoundError(message_id, queue) from None
        broker.storage.wait(ticket)


__all__ = ["MAX_SLEEP", "Scheduler"]
