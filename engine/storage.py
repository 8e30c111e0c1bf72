"""The broker's storage as the engine's modules use it (Artemis's StorageManager).

``StorageManager`` wraps ``Persistence`` (append and fold, checkpoints) with the broker's
fail-stop rule: the first storage error (a failed write or sync, a damaged index found at run
time) stops the broker, and every later call raises ``BrokerFailedError`` until a reopen
recovers from the journal. The engine's modules write records with ``write`` (lock held, so LSN
order is state-change order), wait for their durability with ``wait`` outside the lock, and take
fresh ids with ``next_id``. The ``Broker`` keeps one as ``broker.storage``; its public API shows
none of this.
"""

from __future__ import annotations

from typing import Any, Callable, List, NoReturn, Optional, TypeVar

from .addressfull import Room
from .errors import BrokerFailedError, IllegalStateError
from .persistence import Persistence
from mqstore.journal import InvalidRecordError, JournalError, RecordTooLargeError, Ticket
from mqstore.recovery.errors import IndexInvalidError

T = TypeVar("T")


class StorageManager:
    """Writes, waits and ids of one open broker, with its fail-stop state.

    Attributes:
        persistence: the journal, image and index.
        failure: the storage error that stopped the broker (``None``: running).
        closed: the broker was closed (a storage error racing ``close`` is not a failure).
    """

    def __init__(self, persistence: Persistence, room: Room) -> None:
        self.persistence = persistence
        self._room = room
        self.failure: Optional[BaseException] = None
        self.closed = False
        self._last: Optional[Ticket] = None  # the last write's ticket

    @property
    def failed(self) -> bool:
        """Whether the broker stopped after a storage failure (fail-stop)."""
        return self.failure is not None

    def check_open(self) -> None:
        """Raise when the broker is closed or failed (lock held or not).

        Raises:
            BrokerFailedError: after a storage failure (its cause attached).
            IllegalStateError: the broker is closed.
        """
        if self.failure is not None:
            raise BrokerFailedError(self.failure)
        if self.closed:
            raise IllegalStateError("the broker is closed")

    def guard(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a storage step; a storage error makes the broker fail-stop.

        Raises:
            BrokerFailedError: the step raised a JournalError or IndexInvalidError (the broker
                is failed from now on). IllegalStateError: it raced ``close``.
            RecordTooLargeError, InvalidRecordError: a record the journal refused before
                placing anything (too large for a frame, not serialisable): bad input, not a
                storage failure; nothing was written and the broker goes on (the engine
                writes before it changes what it holds, so nothing changed either).
        """
        try:
            return fn(*args)
        except (RecordTooLargeError, InvalidRecordError):
            raise
        except JournalError as exc:
            self._journal_failed(exc)
        except IndexInvalidError as exc:
            self.index_damaged(exc)

    def guard_journal(self, fn: Callable[..., T], *args: Any) -> T:
        """``guard`` for a step whose ``IndexInvalidError`` is the caller's to see (an index
        write it asked for: the index is not damaged, only not written): only a
        ``JournalError`` fail-stops.

        Raises:
            BrokerFailedError, IllegalStateError: as ``guard``. IndexInvalidError: as raised.
        """
        try:
            return fn(*args)
        except JournalError as exc:
            self._journal_failed(exc)

    def _journal_failed(self, exc: JournalError) -> NoReturn:
        if self.closed:  # an operation raced close(): not a storage failure
            raise IllegalStateError("the broker is closed") from exc
        self._fail(exc)

    def _fail(self, exc: BaseException) -> NoReturn:
        self.failure = exc
        raise BrokerFailedError(exc) from exc

    def index_damaged(self, exc: IndexInvalidError) -> NoReturn:
        """What the index holds is damaged (found at run time): fail-stop, and the next open
        rebuilds the index from the journal (nothing is lost: the journal has it all).

        Raises:
            BrokerFailedError: always, with ``exc`` as its cause.
        """
        self.persistence.index.mark_damaged(exc.reason)
        self._fail(exc)

    def write(self, records: List[tuple]) -> Ticket:
        """Journal records and fold them (broker lock held); fail-stop on storage errors.
        Senders waiting for room on a full address look again (an ack may have made some); an
        index checkpoint runs when one is due (its failure is logged and retried, not raised).

        Raises:
            BrokerFailedError, IllegalStateError: as ``guard``; nothing was written then.
        """
        p = self.persistence
        ticket = self.guard(p.write, records)
        self._last = ticket
        self._room.notify()
        if p.checkpoint_due():
            self.guard(p.checkpoint_quietly)
        return ticket

    def wait(self, ticket: Optional[Ticket]) -> None:
        """Wait until ``ticket``'s records are durable (outside the lock); ``None``: nothing
        to wait for.

        Raises:
            BrokerFailedError: the write or its fdatasync failed (the broker is failed).
        """
        if ticket is None:
            return
        self.guard(ticket.wait)
        self.persistence.after_wait()

    async def wait_async(self, ticket: Optional[Ticket]) -> None:
        """``wait`` for asyncio: awaits the ticket without blocking the event loop."""
        if ticket is None:
            return
        try:
            await ticket
        except JournalError as exc:
            self._journal_failed(exc)
        self.persistence.after_wait()

    def next_id(self) -> int:
        """A fresh id for an address, queue, message or transaction (lock held)."""
        image = self.persistence.image
        ident = image.next_id
        image.next_id += 1
        return ident

    def max_frame(self) -> int:
        """The largest record the journal takes, in bytes (what a batch of records is cut to)."""
        return self.persistence.journal.options.max_frame()

    def covering(self, lsn: int) -> Optional[Ticket]:
        """A ticket whose completion proves every record up to ``lsn`` durable (lock held):
        the last write's, since tickets complete in journal order. ``None`` when that write
        does not reach ``lsn`` (the caller then journals what it needs a ticket for)."""
        last = self._last
        return last if last is not None and last.lsn >= lsn else None

    def durable_lsn(self) -> int:
        """The LSN up to which every record is durable."""
        return self.persistence.journal.durable_lsn

    def last_lsn(self) -> int:
        """The LSN of the last record written (durable or not)."""
        return self.persistence.journal.next_lsn - 1
