"""The journal: an append-only log of typed records in CRC-framed segments, with group commit.

``Journal.open`` recovers the log (``journal.opening``), then ``append``/``append_many`` assign
LSNs and frames under one lock and hand them to the group-commit writer (``journal.writer``);
the returned ``Ticket`` completes after the fdatasync that covers it. Records are read back by
location (``read``) or in LSN order (``records``). Upper layers report dead records
(``mark_dead``, ``mark_dead_after`` for tombstones such as acks that must outlive their target)
and the journal deletes segments with no live record and compacts mostly-dead ones
(``journal.compaction``). The journal never interprets payloads.

The facade holds the state (one lock, the segment table, the LSN counters, the open batch)
that every append path and the open procedure share; the work itself is in ``opening``,
``manifest``, ``staging``, ``writer``, ``liveness``, ``compaction``, ``relocations`` and, for
reading records back, the ``reading`` mixin.
"""

from __future__ import annotations

import threading
import time
from asyncio import CancelledError, get_running_loop
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .errors import (DirectoryLockedError, InvalidRecordError, JournalBehindError,
                     JournalClosedError, JournalFailedError, JournalIOError, ReadOnlyError)
from .codec import pack_records, parent_of
from .format import FRAME_OVERHEAD, encode_frame
from .fs import FileSystem, OsFileSystem
from .options import JournalOptions, JournalStatistics
from .liveness import Liveness
from .manifest import SegmentManifest, reconcile
from .opening import (OpenReport, SkippedRange, elapsed_since, list_segment_paths,
                      load_segments, log, log_open)
from .reading import JournalReading
from .segment import Location, SegmentInfo, SegmentSummary, join, segment_name
from .staging import AsyncStager, account_run, place_records
from . import relocations
from .tickets import Batch, Ticket, collateral_cancel
from .pool import NextSegmentFile
from .writer import GroupCommitWriter, create_segment, new_generation

LOCK_FILE = "journal.lock"
SEQUENCE_STRIDE = 1 << 20  # fresh segments; compaction outputs take numbers in between


class Journal(JournalReading):
    """An open journal directory. Use ``Journal.open``; thread-safe; close with ``close()``."""

    def __init__(self, fs: FileSystem, directory: str, options: JournalOptions) -> None:
        self._fs = fs
        self._dir = directory
        self._options = options
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._space = threading.Condition(self._lock)
        self._segments: Dict[int, SegmentInfo] = {}
        self._open = Batch()
        self._taken: Optional[Batch] = None  # the newest batch swapped out of ``_open``
        self._stopping = False
        self._closed = False
        self._failure: Optional[BaseException] = None
        self._next_lsn = 1
        self._durable_lsn = 0
        self._lock_handle: Optional[int] = None
        self._writable = False
        self._writer_idle = False
        self._max_frame = options.max_frame()
        self._lead: Optional[Callable[[Batch], None]] = None
        self._writer: Optional[GroupCommitWriter] = None
        self._active: SegmentInfo
        self.liveness = Liveness(self)
        self.manifest: Optional[SegmentManifest] = None
        self.relocation_files: List[str] = []  # journal.relocations, until forget_relocations
        self._stager = AsyncStager(self)
        self._stages = self._stager.stages
        self.report: OpenReport

    # -- opening -----------------------------------------------------------------------------
    @classmethod
    def open(cls, directory: str, options: Optional[JournalOptions] = None,
             fs: Optional[FileSystem] = None,
             trusted: Optional[Iterable[SegmentSummary]] = None,
             proven_lsn: int = 0) -> "Journal":
        """Open (creating when missing) the journal in ``directory`` and recover its log.

        Args:
            directory: the journal directory (created 0700 when missing, unless read-only).
            options: settings; defaults when ``None``.
            fs: the file-system seam; ``OsFileSystem()`` when ``None``.
            trusted: summaries of sealed segments (from ``catalogue()`` of an earlier open,
                kept by an index the caller validated): those segments are not scanned again.
            proven_lsn: records up to this LSN are known durable (an index checkpoint covers
                them): damage before it is corruption, never a torn tail to drop, and a journal
                ending before it is refused (ignored with ``salvage``).

        Returns:
            The open journal; ``journal.report`` says what recovery found.

        Raises:
            DirectoryLockedError: another opener holds the directory.
            CorruptJournalError: damage that is not a torn tail (names file and offset), a
                file shorter than it was created, a damaged segment manifest or a segment file
                it does not list. MissingSegmentError (a CorruptJournalError): a segment file
                the manifest lists is missing, or the manifest of a listed journal.
                JournalBehindError (a CorruptJournalError): the journal ends before
                ``proven_lsn``. Nothing is deleted, truncated or rewritten in these cases.
            JournalIOError: an OS error; nothing was changed beyond the recovery steps done.
        """
        options = options or JournalOptions()
        fs = fs or OsFileSystem()
        journal = cls(fs, directory, options)
        try:
            journal._open_log({s.sequence: s for s in trusted or ()}, proven_lsn)
        except OSError as exc:
            journal._release()
            raise JournalIOError(directory, "open", exc) from exc
        except BaseException:
            journal._release()
            raise
        return journal

    def _open_log(self, trusted: Dict[int, SegmentSummary], proven_lsn: int) -> None:
        from .compaction import resolve_pending  # compaction builds on this module

        start = time.monotonic()
        opts, fs = self._options, self._fs
        proven_lsn = 0 if opts.salvage else proven_lsn  # salvage opens what is there
        if not opts.read_only:
            if not fs.exists(self._dir):
                fs.mkdir(self._dir)
                fs.fsync_dir(parent_of(self._dir))
            try:
                self._lock_handle = fs.lock(join(self._dir, LOCK_FILE))
            except BlockingIOError:
                path = join(self._dir, LOCK_FILE)
                raise DirectoryLockedError(path, fs.lock_holder(path)) from None
        elif not fs.exists(self._dir):
            raise JournalIOError(self._dir, "open", FileNotFoundError(2, "no such directory"))
        pending = resolve_pending(fs, self._dir, opts.read_only)
        paths = list_segment_paths(fs, self._dir, pending.overrides, pending.excluded)
        listed = reconcile(fs, self._dir, paths, opts.read_only, opts.salvage,
                           (pending.excluded, set(pending.overrides)))
        self.manifest = listed.manifest
        self.relocation_files = [r.name for r in relocations.load(fs, self._dir)]
        loaded = load_segments(fs, self._dir, listed.paths, opts.max_frame(), opts.read_only,
                               opts.salvage, trusted, proven_lsn)
        loaded.skipped[:0] = [SkippedRange(p, 0, 0, "segment file missing")
                              for p in listed.missing]
        loaded.skipped += [SkippedRange(p, 0, 0, "segment file not in the manifest (set aside as "
                                                "*.seg.unlisted)")
                           for p in listed.unlisted]
        for info in loaded.segments:
            self._segments[info.sequence] = info
            self.liveness.watch(info)
        last = loaded.segments[-1] if loaded.segments else None
        self._next_lsn = (last.last_lsn + 1) if last else 1
        if proven_lsn >= self._next_lsn:
            raise JournalBehindError(last.path if last else self._dir, last.end if last else 0,
                                     proven_lsn, self._next_lsn - 1)
        self._durable_lsn = self._next_lsn - 1
        if last is not None and not opts.read_only:
            fs.fdatasync(last.handle)  # what a killed process left in the page cache
        if last is None:
            last = self._reserve_segment(SEQUENCE_STRIDE)
            if not opts.read_only:  # a new journal's first segment exists once open returns
                create_segment(fs, self._dir, last, opts.segment_size, opts.preallocate,
                               manifest=self.manifest)
        self._active = last
        self.report = OpenReport(len(loaded.segments), loaded.records, self._next_lsn - 1,
                                 loaded.torn_bytes, loaded.unproven, loaded.torn_offset,
                                 tuple(loaded.skipped), pending.action, pending.removed,
                                 elapsed_since(start), loaded.trusted)
        log_open(self._dir, self.report, opts.read_only)
        if not opts.read_only:
            ahead = NextSegmentFile(self._fs, self._dir, opts.segment_size) \
                if opts.preallocate and opts.preallocate_ahead else None
            self._writer = GroupCommitWriter(self, opts.sync_policy == "sync", opts.batch_bytes,
                                             opts.max_delay_ms / 1000.0, ahead)
            self._writer.current = self._active if self._active.handle >= 0 else None
            self._lead = self._writer.lead
            self._writable = True
            self._writer.start()

    def _reserve_segment(self, sequence: int) -> SegmentInfo:
        info = SegmentInfo(sequence, new_generation(), self._next_lsn,
                           join(self._dir, segment_name(sequence)), last_lsn=self._next_lsn - 1)
        self._segments[sequence] = info
        self.liveness.watch(info)
        return info

    # -- appending ---------------------------------------------------------------------------
    def append(self, kind: int, payload: Any) -> Ticket:
        """Append one record; return at once with a ``Ticket`` to wait on.

        Args:
            kind: record kind, 1..255 (the meaning belongs to the caller).
            payload: any msgpack-serialisable value (dicts, lists, bytes, str, int...).

        Raises:
            InvalidRecordError: bad kind or unserialisable payload; nothing written.
            RecordTooLargeError: the frame exceeds ``max_frame()``; nothing written.
            JournalFailedError: the journal is fail-stopped. JournalClosedError, ReadOnlyError.
        """
        data = self._encode(kind, payload)
        flen = len(data) + FRAME_OVERHEAD
        with self._lock:
            if not self._writable or self._open.nbytes > self._options.max_pending_bytes:
                self._admit()
            seg = self._active
            if seg.end + flen > self._options.segment_size:
                seg = self._roll()
            lsn = self._next_lsn
            self._next_lsn = lsn + 1
            off = seg.end
            batch = self._open
            account_run(batch, seg, encode_frame(kind, lsn, seg.generation, self._durable_lsn,
                                                 data), off, off + flen, 1, lsn)
            batch.count += 1
            if self._writer_idle and (self._lead is None or
                                      batch.nbytes >= self._options.batch_bytes):
                self._wake_writer()
        return Ticket(lsn, (seg.sequence, off, flen), batch, self)

    def _encode(self, kind: int, payload: Any) -> bytes:
        """The packed payload of a record to append, checked (kind 1..255, frame size).

        Raises:
            InvalidRecordError, RecordTooLargeError: nothing is written.
        """
        return pack_records([(kind, payload)], self._max_frame, FRAME_OVERHEAD)[0][1]

    def _admit(self) -> None:
        """Slow path of an append (lock held): refuse when not writable, wait for space."""
        self._check_writable()
        while self._open.nbytes > self._options.max_pending_bytes and self._failure is None:
            self._work.notify()
            self._space.wait()
        self._check_writable()

    def _roll(self) -> SegmentInfo:
        seg = self._active = self._reserve_segment(
            (self._active.sequence // SEQUENCE_STRIDE + 1) * SEQUENCE_STRIDE)
        return seg

    def append_many(self, records: Iterable[Tuple[int, Any]]) -> Ticket:
        """Append records in order, as one unit of waiting: the ticket completes when all are
        durable (they share at most one fdatasync per segment touched).

        Raises:
            the same as ``append``; if any record is invalid, none is written.
        """
        encoded = pack_records(records if isinstance(records, (list, tuple)) else
                               list(records), self._max_frame, FRAME_OVERHEAD)
        if not encoded:
            raise InvalidRecordError("append_many needs at least one record")
        locations, batch = place_records(self, encoded)
        return Ticket(batch.last_lsn, locations, batch, self)

    async def append_async(self, kind: int, payload: Any) -> Location:
        """Append one record from asyncio and wait until it is durable (policy ``sync``: after
        the fdatasync covering it; ``async``: after the write).

        The records appended by the tasks of one event-loop iteration are placed together
        (``journal.staging``): one lock, one shared future and one writer wake-up for all of
        them. LSNs follow call order within a loop.

        Args:
            kind: record kind, 1..255. payload: any msgpack-serialisable value.

        Returns:
            The record's ``Location`` (segment, offset, length in bytes).

        Raises:
            InvalidRecordError, RecordTooLargeError: at once, nothing staged.
            JournalFailedError: the write or fsync covering the record failed (it is not
                durable and never will be reported so). JournalClosedError, ReadOnlyError.
            CancelledError: the task was cancelled; it takes effect once the record's batch
                completes (the record stays appended: an append cannot be taken back).
        """
        data = self._encode(kind, payload)
        if not self._writable:
            self._check_writable()
        loop = get_running_loop()
        stage = self._stages.get(loop) or self._stager.open(loop)
        records = stage.records
        index = len(records)
        records.append((kind, data))
        try:
            await stage.future
        except CancelledError:
            if not collateral_cancel():
                raise
            await self._stager.rewait(stage)
        return stage.locations[index]

    def _before_wait(self, batch: Batch) -> None:
        """A thread is about to wait for ``batch``: flush it here when nobody is flushing
        (leader-based group commit), else make sure the writer thread is awake."""
        if self._lead is not None:
            self._lead(batch)
        else:
            self._kick()

    def _kick(self) -> None:
        """Wake the writer thread if it is idle and records are pending. (An unlocked read of
        the flag is safe: a writer not idle looks for pending records before it sleeps.)"""
        if not self._writer_idle:
            return
        with self._lock:
            if self._writer_idle and self._open.frames:
                self._wake_writer()

    def _wake_writer(self) -> None:
        """Notify the idle writer (lock held); it counts as busy until it waits again, so
        the appends and awaits that follow do not notify it again."""
        self._writer_idle = False
        self._work.notify()

    def _check_writable(self) -> None:
        if self._closed or self._stopping:
            raise JournalClosedError()
        if self._options.read_only:
            raise ReadOnlyError(self._dir)
        if self._failure is not None:
            raise JournalFailedError(self._failure)

    def _mark_durable(self, lsn: int) -> None:
        with self._lock:
            self._durable_lsn = max(self._durable_lsn, lsn)

    def _fail(self, exc: OSError, batch: Batch) -> None:
        """Fail-stop: complete ``batch`` and every later one with the error."""
        error = JournalIOError(self._dir, "write or fsync", exc)
        log.error("journal %s failed (every later write fails until the store is reopened): "
                  "%s", self._dir, exc)
        with self._lock:
            self._failure = error
            self._writable = False
            later, self._open = self._open, Batch()
            self._space.notify_all()
            self._work.notify_all()
        batch.complete(error)
        later.complete(error)

    def wait_durable(self, timeout: Optional[float] = None) -> bool:
        """Wait until everything appended so far is durable.

        Returns:
            ``False`` if ``timeout`` seconds passed first.

        Raises:
            JournalFailedError: the journal failed before that.
        """
        with self._lock:
            if self._failure is not None:
                raise JournalFailedError(self._failure)
            if self._open.frames:
                batch: Optional[Batch] = self._open
                if self._writer_idle:
                    self._wake_writer()
            else:  # the newest batch taken to be written may still be on its way to the disk
                batch = self._taken  # (batches complete in order: the newest one, the last)
        return batch.wait(timeout) if batch is not None else True

    def sync(self) -> None:
        """Wait until everything appended so far is written and fdatasynced, whatever the sync
        policy (under ``async`` an index checkpoint needs this: it must never cover records a
        power loss can still take back).

        Raises:
            JournalFailedError: the journal failed (the fdatasync's error fail-stops it).
        """
        self.wait_durable()
        if self._writer is not None and self._options.sync_policy != "sync":
            self._writer.sync_current()

    # -- liveness ----------------------------------------------------------------------------
    def mark_dead(self, locations: Iterable[Location]) -> None:
        """Report records dead (an acked message, a deleted queue's declaration...). Segments
        whose records are all dead are deleted. Unknown locations are ignored."""
        self.liveness.mark_dead(locations)

    def mark_dead_after(self, location: Location, targets: Sequence[Location]) -> None:
        """Report a tombstone dead once every target's segment is gone (an ack must outlive
        the record it cancels, or replay would resurrect that record)."""
        self.liveness.mark_dead_after(location, targets)

    def apply_liveness(self, facts: Iterable[Tuple[Any, Optional[Sequence[Location]],
                                                   Optional[Location], Sequence[Location]]]
                       ) -> None:
        """``mark_dead`` and ``mark_dead_after`` of many facts, in order, with one lock and one
        reclaim: each fact is ``(tag, locations, tombstone, targets)``: ``locations`` (unless
        ``None``) are dead, then, unless ``tombstone`` is ``None``,
        ``mark_dead_after(tombstone, targets)``; ``tag`` is the caller's (ignored: the
        engine's is the LSN of the write that caused the fact)."""
        self.liveness.apply(facts)

    def relocations(self) -> List[relocations.Relocation]:
        """The moves of the compactions whose relocation files are still here (no checkpoint
        after them has called ``forget_relocations`` yet), oldest first: an open whose index
        predates one maps its locations through it (``journal.relocations``)."""
        return relocations.load(self._fs, self._dir)

    def forget_relocations(self) -> None:
        """An index checkpoint taken after every compaction so far is durable: their
        relocation files go. Costs nothing when there are none.

        Raises:
            JournalIOError: an unlink or directory fsync failed (the files stay; harmless).
        """
        if not self.relocation_files or self._options.read_only:
            return
        names, self.relocation_files = self.relocation_files, []
        try:
            relocations.remove(self._fs, self._dir, names)
        except OSError as exc:
            self.relocation_files = names + self.relocation_files
            raise JournalIOError(self._dir, "remove relocation files", exc) from exc

    def compact(self, force: bool = False, record_moves: bool = False) -> "CompactionReport":
        """Compact sealed segments when the thresholds say so (always with ``force``).
        ``record_moves``: first write where each record goes to a relocation file, kept until
        ``forget_relocations`` (for a caller whose index names records by location and
        checkpoints it after the compaction: ``journal.relocations``).

        Returns:
            A ``CompactionReport``; its ``relocations`` map old to new record locations, which
            the caller must apply to any index it keeps.
        """
        from .compaction import compact
        return compact(self, force, record_moves)

    # -- state -------------------------------------------------------------------------------
    @property
    def directory(self) -> str:
        """The journal directory."""
        return self._dir

    @property
    def options(self) -> JournalOptions:
        """The options the journal was opened with."""
        return self._options

    @property
    def next_lsn(self) -> int:
        """The LSN the next append gets."""
        return self._next_lsn

    @property
    def durable_lsn(self) -> int:
        """The highest LSN known durable."""
        return self._durable_lsn

    def statistics(self) -> JournalStatistics:
        """A snapshot of the journal's counters."""
        with self._lock:
            infos = list(self._segments.values())
            w = self._writer
            return JournalStatistics(
                len(infos), sum(s.count for s in infos), sum(s.live_count for s in infos),
                sum(s.total_bytes for s in infos), sum(s.live_bytes for s in infos),
                self._next_lsn, self._durable_lsn, w.batches if w else 0,
                w.records if w else 0, w.fsyncs if w else 0, self._failure is not None)

    def close(self) -> None:
        """Flush what was appended (waiting for its fsync), stop the writer, release the lock.
        Safe to call twice; after a failure it closes without flushing."""
        if self._closed:
            return
        with self._lock:
            self._stopping = True
            self._writable = False
            self._work.notify_all()
        if self._writer is not None:
            self._writer.join()
        self._closed = True
        self._release()

    def _release(self) -> None:
        for info in self._segments.values():
            if info.handle >= 0:
                try:
                    self._fs.close(info.handle)
                except OSError:
                    pass
                info.handle = -1
        if self._lock_handle is not None:
            self._fs.unlock(self._lock_handle)
            self._lock_handle = None

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


from .compaction import CompactionReport  # noqa: E402  (re-export for type hints)
