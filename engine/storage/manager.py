"""The broker's storage as the engine's modules use it (Artemis's StorageManager).

``StorageManager`` wraps ``Persistence`` (append and fold, checkpoints) with the broker's
fail-stop rule: the first journal error (a failed write or sync) stops the broker, and every
later call raises ``BrokerFailedError`` until a reopen recovers from the journal. A damaged
index found at run time is not such an error: the index is a cache of the journal, so it is
rebuilt from the journal while the broker runs and the step that met the damage goes on;
only a rebuild that fails (or damage met again at once) stops the broker. The engine's modules write
records with ``write`` (lock held, so LSN order is state-change order), wait for their durability
with ``wait`` outside the lock, and take fresh ids with ``next_id``. The ``Broker`` keeps one as
``broker.storage``; its public API shows none of this.
"""

from __future__ import annotations

from typing import Any, Callable, List, NoReturn, Optional, TypeVar

from ..paging.addressfull import Room
from ..errors import BrokerFailedError, IllegalStateError
from .persistence import IndexRebuildError, Persistence
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
        """Run a storage step; a journal error makes the broker fail-stop. A step that reads
        the index and finds it damaged runs again once the index is rebuilt
        (``index_damaged``): ``fn`` must be a read, or ``Persistence.write`` (which rebuilds
        itself when its fold meets damage, and never raises ``IndexInvalidError``).

        Raises:
            BrokerFailedError: the step raised a JournalError, or the index could not be
                rebuilt (the broker is failed from now on). IllegalStateError: it raced
                ``close``.
            RecordTooLargeError, InvalidRecordError: a record the journal refused before
                placing anything (too large for a frame, not serialisable): bad input, not a
                storage failure; nothing was written and the broker goes on (the engine
                writes before it changes what it holds, so nothing changed either).
        """
        again = False
        while True:
            try:
                return fn(*args)
            except (RecordTooLargeError, InvalidRecordError):
                raise
            except JournalError as exc:
                self._journal_failed(exc)
            except IndexRebuildError as exc:  # Persistence.write's own rebuild failed
                self._rebuild_failed(exc)
            except IndexInvalidError as exc:
                self.index_damaged(exc, again)  # rebuilt: run the step again on the new index
                again = True

    def repairing(self, fn: Callable[..., T], *args: Any) -> Optional[T]:
        """Run a step that changes the image to agree with records already journaled (the
        relocations of a compaction): if it meets a damaged index, the index is rebuilt from
        the journal, which holds what the step was to do, and the step is not run again.

        Returns:
            ``fn``'s result, or ``None`` when the rebuild took its place.

        Raises:
            BrokerFailedError: as ``guard``.
        """
        try:
            return fn(*args)
        except JournalError as exc:
            self._journal_failed(exc)
        except IndexInvalidError as exc:
            self.index_damaged(exc)
        return None

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

    def index_damaged(self, exc: IndexInvalidError, again: bool = False) -> None:
        """What the index holds is damaged (found at run time: a CRC that does not match, a
        reference to a message it does not hold): rebuild it from the journal now
        (``Persistence.rebuild_index``), and the broker goes on; nothing is lost, the journal
        has it all. The caller then reads again.

        Args:
            again: the caller's read met damage again right after a rebuild: then it is not
                the index file's, a rebuild cannot cure it.

        Raises:
            BrokerFailedError: ``again``, or the rebuild failed. The index is marked damaged
                (the next open rebuilds it); ``exc`` (or the rebuild's failure) is the cause.
            IllegalStateError: the broker is closed.
        """
        p = self.persistence
        if self.closed:
            raise IllegalStateError("the broker is closed") from exc
        if again:
            p.index.mark_damaged(exc.reason)
            self._fail(exc)
        try:
            p.rebuild_index(exc.reason)
        except IndexRebuildError as failed:
            self._rebuild_failed(failed)

    def _rebuild_failed(self, failed: IndexRebuildError) -> NoReturn:
        """Fail-stop after a rebuild that failed: as the journal's failure when the journal
        stopped it, else with the rebuild's error as the cause."""
        if isinstance(failed.cause, JournalError):
            self._journal_failed(failed.cause)
        self._fail(failed)

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

    def after_ack(self, ticket: Optional[Ticket], wait: bool) -> None:
        """After an ack's write: ``wait`` for it (a session's ``block_on_acknowledge``), else
        return at once, having applied the liveness facts of earlier writes that are durable
        by now (records dead, segments reclaimed), as a wait would apply them; that costs one
        comparison when there are none.

        Raises:
            BrokerFailedError: as ``wait``.
        """
        if wait:
            self.wait(ticket)
        else:
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
