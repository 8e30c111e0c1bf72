"""The engine's write path to storage, written once.

Every durable state change goes through ``Persistence.write``: the caller (holding the broker
lock, so LSN order is state-change order) appends records and folds them into the image at
once; the liveness facts the fold produces (records now dead) are held back until the journal
says the records that caused them are durable, because a message's segment must not be reclaimed
before its ack is on disk. Callers wait on the returned ticket outside the lock and only then
release effects (return from send, hand out a delivery). ``checkpoint`` commits what changed in
the image since the last commit, with the journal's liveness changes and its segment catalogue,
to the index at one durable LSN (O(changes), issue 12) and moves the reclaim horizon there.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple

from mqstore.journal import Journal, JournalError, Location, Ticket
from ..paging.memory import give_back_memory
from mqstore.recovery import IndexStore, StoreImage, rebuild, write_index
from mqstore.recovery.errors import IndexInvalidError
from mqstore.recovery.schema import body_in

log = logging.getLogger("mqstore.engine")  # the engine layer's logger

READ_CACHE = 8  # decoded records kept for body reads
MAX_BACKOFF_DOUBLINGS = 6  # failed checkpoints back off to at most 64 x checkpoint_records
OVERLAY_PER_RECORD = 4  # changed index entries per record a checkpoint is due after (a plain
# MESSAGE record changes two: its message and its reference)
OVERLAY_CHECK = 16  # writes between two counts of the overlay (``checkpoint_due``)


class DeferredSink:
    """Liveness facts held until the record that caused them is durable, then given to the
    journal in the order they came (``Journal.apply_liveness``). Facts are added with the
    broker lock held; ``release`` may run in any thread: a list's append and a deletion of its
    first items are each atomic, and the lock orders the releases."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        # (LSN of the write that caused it, dead locations or None, tombstone or None, its
        # targets): ``Journal.apply_liveness``'s facts
        self._pending: List[Tuple[int, Optional[Sequence[Location]], Optional[Location],
                                  Sequence[Location]]] = []
        self.lsn = 0
        self._lock = threading.Lock()

    def mark_dead(self, locations: Sequence[Location]) -> None:
        self._pending.append((self.lsn, list(locations), None, ()))

    def mark_dead_after(self, location: Location, targets: Sequence[Location]) -> None:
        pending, lsn = self._pending, self.lsn
        if pending and pending[-1][0] == lsn and pending[-1][2] is None:
            # one fact with the dead ones just before it (an ACK's: its message's record
            # died, and the ACK waits for it)
            pending[-1] = (lsn, pending[-1][1], location, list(targets))
        else:
            pending.append((lsn, None, location, list(targets)))

    def release(self) -> None:
        """Apply every held fact whose record is durable now."""
        durable = self._journal.durable_lsn
        pending = self._pending
        if not pending or pending[0][0] > durable:
            return
        with self._lock:
            n, end = len(pending), 0
            while end < n and pending[end][0] <= durable:
                end += 1
            if end:
                ready = pending[:end]
                del pending[:end]
                self._journal.apply_liveness(ready)


class IndexRebuildError(Exception):
    """Rebuilding a damaged index from the journal while the broker ran failed (internal:
    the ``StorageManager`` fail-stops with it).

    Attributes:
        reason: the damage that asked for the rebuild. cause: what stopped the rebuild.
    """

    def __init__(self, reason: str, cause: BaseException) -> None:
        super().__init__(f"the index was damaged ({reason}) and rebuilding it from the "
                         f"journal failed: {cause}")
        self.reason = reason
        self.cause = cause


class Persistence:
    """Journal + image + index of one open broker (internal to the engine).

    Args:
        journal: the open journal.
        image: the recovered image, kept up to date by every write.
        index: where checkpoints go.
        checkpoint_records: take a checkpoint after this many records (0: only on demand).
    """

    def __init__(self, journal: Journal, image: StoreImage, index: IndexStore,
                 checkpoint_records: int) -> None:
        self.journal = journal
        self.image = image
        self.index = index
        self.sink = DeferredSink(journal)
        self.checkpoint_records = checkpoint_records
        self.since_checkpoint = 0
        self._writes = 0  # checkpoint_due's calls (it counts the overlay at every 16th)
        self.last_checkpoint_lsn = 0
        self.checkpoint_failures = 0
        self.last_checkpoint_error = ""
        # after failed checkpoints in a row, the next automatic one waits for this many
        # records (doubling, up to MAX_BACKOFF_DOUBLINGS times); 0: none failed
        self.failed_in_a_row = 0
        self.retry_after = 0
        self.index_rebuilds = 0  # rebuilds while running (damage found after the open)
        self.last_index_rebuild = ""  # why the last one ran
        self._cache: "OrderedDict[Location, Any]" = OrderedDict()

    def write(self, records: Sequence[Tuple[int, Dict[str, Any]]]) -> Ticket:
        """Append records in order and fold them into the image (broker lock held).

        Raises:
            JournalFailedError and the journal's other errors; on any error nothing of
            ``records`` was appended or folded.
        """
        ticket = self.journal.append_many(records)
        # the facts the fold reports wait for the whole write (its records become durable
        # together: one LSN to compare for all)
        self.sink.lsn = ticket.lsn
        try:
            self.image.apply_many(records, ticket.locations, ticket.lsn - len(records) + 1,
                                  self.sink)
        except IndexInvalidError as exc:  # a damaged index value read by the fold: the
            # records are appended, and the image rebuilt from the journal holds them whole
            self.rebuild_index(exc.reason)
            return ticket
        self.since_checkpoint += len(records)
        return ticket

    def rebuild_index(self, reason: str) -> int:
        """Rebuild the index and the image from the journal while the broker runs (broker
        lock held, so nothing is appended meanwhile), because what the index holds was found
        damaged (``reason``): a CRC that does not match, a reference to a message it does not
        hold. Waits until everything appended is durable, empties the index, replays the whole
        journal into it (``recovery.rebuild``, the open's rebuild), commits it at the
        journal's end as a checkpoint does and makes the live image the rebuilt one
        (``StoreImage.take``): the engine's queues, consumers and deliveries go on unchanged,
        as they were built from the same records. Costs a full replay (an open's rebuild
        time) with the lock held.

        Returns:
            The records replayed.

        Raises:
            IndexRebuildError: the rebuild failed (the journal's read or sync, the index's
                write); the index is marked damaged, so the next open rebuilds it, and the
                caller fail-stops.
        """
        j = self.journal
        live = j.liveness
        log.warning("the index is damaged (%s): rebuilding it from the journal while the "
                    "broker runs", reason)
        try:
            j.sync()
            self.sink.release()
            lsn = j.next_lsn - 1
            live.deferred = True
            try:
                fresh, replayed = rebuild(j, self.index)
                fresh.last_lsn = max(fresh.last_lsn, lsn)
                write_index(self.index, fresh, j, {})
            finally:
                live.deferred = False
            self.image.take(fresh)
        except Exception as exc:  # noqa: BLE001 - whatever stopped it, the index is unusable
            self.index.mark_damaged(reason)
            raise IndexRebuildError(reason, exc) from exc
        self.index_rebuilds += 1
        self.last_index_rebuild = reason
        self._after_commit(lsn)
        log.warning("index rebuilt from the journal: %d records replayed", replayed)
        return replayed

    def after_wait(self) -> None:
        """Call after waiting on a ticket: applies liveness facts that are now durable."""
        self.sink.release()

    def checkpoint_due(self) -> bool:
        """Whether enough records were written since the last checkpoint, or the image holds
        more changed entries than those records would make (a record that moves many
        references, a DUE or a TX record, changes more than one entry): the changes held in
        RAM stay bounded by ``OVERLAY_PER_RECORD`` x ``checkpoint_records``."""
        n = self.checkpoint_records
        if n <= 0:
            return False
        if self.retry_after:  # the last ones failed: back off, whatever piles up meanwhile
            return self.since_checkpoint >= self.retry_after
        if n <= self.since_checkpoint:
            return True
        # the overlay is counted at every OVERLAY_CHECK-th write, not at each (asyncio's
        # sends write one record each): it may pass its bound by what those writes change
        self._writes += 1
        return self._writes % OVERLAY_CHECK == 0 and \
            sum(len(t.dirty) for t in self.image.tables.all()) >= OVERLAY_PER_RECORD * n

    def checkpoint(self, extras: Optional[Dict[str, Any]] = None) -> int:
        """Commit the image's changes to the index at the current durable end (broker lock
        held: nothing changes meanwhile). Costs one journal sync and one index transaction
        holding what changed since the last commit.

        Returns:
            The checkpoint's LSN.

        Raises:
            IndexInvalidError: the index write failed (the changes stay for the next try).
            JournalError: the journal sync failed.
        """
        self.journal.sync()
        self.sink.release()
        lsn = self.journal.next_lsn - 1
        self.image.last_lsn = max(self.image.last_lsn, lsn)
        write_index(self.index, self.image, self.journal, extras or {})
        self._after_commit(lsn)
        return lsn

    def _after_commit(self, lsn: int) -> None:
        """The index holds everything up to ``lsn`` (durable): relocation files go, the
        reclaim horizon moves there, the back-off ends."""
        try:  # this index knows where compaction moved things
            self.journal.forget_relocations()
        except JournalError as exc:  # left: an index newer than them ignores them
            log.warning("%s", exc)
        give_back_memory()
        self.journal.liveness.horizon = lsn
        self.journal.liveness.reclaim()
        self.since_checkpoint = 0
        self.last_checkpoint_lsn = lsn
        self.failed_in_a_row = self.retry_after = 0

    def checkpoint_or_raise(self, extras: Optional[Dict[str, Any]] = None) -> int:
        """``checkpoint`` for a caller that asked for one: an index failure is counted as
        ``checkpoint_quietly`` counts it (and backs off the automatic ones the same way), then
        raised as ``IndexInvalidError``; nothing else changed, the broker goes on.

        Raises:
            IndexInvalidError: the index write failed (an ``OSError`` is wrapped).
            JournalError: the journal sync failed (the caller fail-stops).
        """
        try:
            return self.checkpoint(extras)
        except (IndexInvalidError, OSError) as exc:
            self._checkpoint_failed(exc)
            if isinstance(exc, IndexInvalidError):
                raise
            raise IndexInvalidError(f"index write failed: {exc}") from exc

    def _checkpoint_failed(self, exc: BaseException) -> None:
        self.checkpoint_failures += 1
        self.last_checkpoint_error = str(exc)
        self.since_checkpoint = 0
        self.failed_in_a_row += 1
        self.retry_after = max(1, self.checkpoint_records) << min(self.failed_in_a_row - 1,
                                                                   MAX_BACKOFF_DOUBLINGS)

    def checkpoint_quietly(self, extras: Optional[Dict[str, Any]] = None) -> int:
        """``checkpoint``, but an index failure (ENOSPC, a damaged LMDB file...) is logged,
        counted in ``checkpoint_failures``/``last_checkpoint_error`` and retried with a
        back-off (after ``checkpoint_records`` records, then twice, four times... as many, up
        to 64 times, while it keeps failing; a success ends the back-off), never raised: the
        index is a cache, and what the caller did is already durable in the journal
        (issue 11). The reclaim horizon stays where the last good checkpoint put it.

        Returns:
            The checkpoint's LSN, or 0 when it failed.

        Raises:
            JournalError: the journal itself failed (the caller fail-stops).
        """
        try:
            return self.checkpoint_or_raise(extras)
        except IndexInvalidError as exc:
            log.warning("index checkpoint failed (retried after %d more records; the journal "
                        "holds everything): %s", self.retry_after, exc)
            return 0

    def read_body(self, mid: int) -> bytes:
        """The body of durable message ``mid``, read from its record (broker lock held).
        Decoded records are kept in a small LRU cache: a TX record holds a whole batch, and
        consumers read a batch in order, so it is decoded once, not once per message.

        Raises:
            KeyError: the image does not hold ``mid``. The journal's read errors.
        """
        msg = self.image.message(mid)
        if msg is None:
            raise KeyError(mid)
        payload = self._cache.get(msg.location)
        if payload is None:
            payload = self.journal.read(msg.location).payload
            self._cache[msg.location] = payload
            if len(self._cache) > READ_CACHE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(msg.location)
        return body_in(payload, msg.slot)
