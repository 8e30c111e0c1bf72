"""The group-commit writer and segment creation: the durability order, written once.

``create_segment`` is the only code that brings a segment file into being: it writes the
preallocated zeros and the header to a ``.seg.tmp`` file, fdatasyncs it, renames it to its final
name, fsyncs the directory and lists it in the segment manifest (``journal.manifest``), so a
segment under its final name always has a valid header, a durable directory entry and a manifest
entry before any record is written to it.

``GroupCommitWriter`` is the one thread that writes records. It takes the whole open batch, and
for each segment the batch touches: creates the segment if needed, writes the batch's frames for
it with one ``pwrite``, and fdatasyncs it (always when the batch moves on to a new segment, so a
sealed segment is durable before its successor exists; otherwise when the policy is ``sync``).
Only then is the batch completed and its waiters woken. Any ``OSError`` makes the journal
fail-stop: the batch and every later one complete with the error and are never reported durable.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Dict, List, Optional, Tuple

from . import seeded_bugs
from .core import JournalCore
from .errors import JournalFailedError
from .format import SEGMENT_FLAG_LISTED, SEGMENT_HEADER_SIZE, SegmentHeader
from .fs import FileSystem
from .manifest import SegmentManifest
from .pool import NextSegmentFile
from .segment import TMP_SUFFIX, SegmentInfo, join, segment_name
from .tickets import Batch


ZERO_CHUNK = 1 << 20
IDLE_POLL_S = 0.002  # an idle writer looks for records nobody waits on this often at first,
IDLE_MAX_S = 0.05    # then less and less often while it finds none, down to this: an idle
# journal wakes 20 times a second, not 500 (records somebody waits on wake it at once)


def new_generation() -> int:
    """A random nonzero 64-bit generation id for a new segment file."""
    while True:
        gen = secrets.randbits(64)
        if gen:
            return gen


def create_segment(fs: FileSystem, directory: str, info: SegmentInfo, size: int,
                   preallocate: bool, flags: int = 0,
                   prepared: Optional[NextSegmentFile] = None,
                   manifest: Optional[SegmentManifest] = None) -> None:
    """Create the file of ``info`` durably and set ``info.handle``.

    Args:
        fs: the file-system seam.
        directory: the journal directory.
        info: the segment (sequence, generation, first_lsn set; handle -1).
        size: segment size in bytes (zeros written up to it when ``preallocate``).
        preallocate: write zeros over the whole file first (faster fdatasync on overwrite).
        flags: header flags.
        prepared: the zero-filled file built ahead (``journal.pool``), used when
            ``preallocate``: only the header, its fdatasync and the renames remain to do.
        manifest: the journal's segment manifest; the segment is listed there last.

    Raises:
        OSError: from the seam; the journal turns it into fail-stop.
    """
    taken = prepared.take() if preallocate and prepared is not None else None
    if taken is not None:
        handle, tmp = taken
    else:
        tmp = join(directory, segment_name(info.sequence, TMP_SUFFIX))
        if fs.exists(tmp):
            fs.unlink(tmp)
        handle = fs.open(tmp, create=True)
    try:
        if preallocate and taken is None:
            zeros = bytes(min(ZERO_CHUNK, size))
            for off in range(0, size, ZERO_CHUNK):
                fs.pwrite(handle, zeros[:min(ZERO_CHUNK, size - off)], off)
        header = SegmentHeader(info.sequence, info.generation, int(time.time() * 1000),
                               info.first_lsn, flags | SEGMENT_FLAG_LISTED,
                               size if preallocate else 0)
        fs.pwrite(handle, header.encode(), 0)
        fs.fdatasync(handle)
        fs.rename(tmp, info.path)
        if not seeded_bugs.active("no_dir_fsync"):
            fs.fsync_dir(directory)
        if manifest is not None:
            manifest.add(info.sequence)
    except BaseException:
        fs.close(handle)
        raise
    info.handle = handle
    info.written = SEGMENT_HEADER_SIZE


class GroupCommitWriter:
    """The writer of one journal (internal): a thread, plus leader flushes by waiting callers.

    A batch is flushed by whoever holds ``_flush_lock`` first: the writer thread, or (policy
    ``sync``, no gathering delay) a thread waiting on a ticket whose batch nobody has taken yet,
    which then flushes it itself and saves the hand-off to the writer thread. Batches are taken
    and flushed under ``_flush_lock``, so they reach the disk in LSN order.

    Args:
        journal: the owning journal; the writer uses its lock, conditions, segment table, fs.
        sync: fdatasync every batch (``True``, policy ``sync``) or leave it to the OS (``async``).
        batch_bytes: flush as soon as this many bytes are pending.
        max_delay_s: how long to gather a batch before flushing (0 flushes at once; batches
            still form while the previous fdatasync runs).
        next_file: the next segment's file, zero-filled a chunk per batch (``journal.pool``),
            or ``None`` to create each segment whole at the roll.
    """

    def __init__(self, journal: JournalCore, sync: bool, batch_bytes: int,
                 max_delay_s: float, next_file: Optional[NextSegmentFile] = None) -> None:
        self._j = journal
        self.next_file = next_file
        self._sync = sync
        self._batch_bytes = batch_bytes
        self._max_delay = max_delay_s
        self._flush_lock = threading.Lock()
        self.batches = 0
        self.records = 0
        self.fsyncs = 0
        self.current: Optional[SegmentInfo] = None
        self.lead = self._lead if sync and max_delay_s <= 0 else None
        self._thread = threading.Thread(target=self._run, name="mqstore-journal-writer",
                                        daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait for the thread to end (after the journal asked it to stop)."""
        self._thread.join(timeout)

    def _run(self) -> None:
        j = self._j
        ahead = self.next_file
        try:
            poll = IDLE_POLL_S
            while True:
                with j._lock:
                    while not j._open.frames and not j._stopping and j._failure is None:
                        j._writer_idle = True
                        woken = j._work.wait(poll)
                        poll = IDLE_POLL_S if woken else min(poll * 2, IDLE_MAX_S)
                    j._writer_idle = False
                    if j._failure is not None or (j._stopping and not j._open.frames):
                        return
                with self._flush_lock:
                    batch = self._take()
                    if batch is not None:
                        self._flush_and_complete(batch)
                        poll = IDLE_POLL_S
        finally:
            if ahead is not None:
                with self._flush_lock:
                    ahead.close()

    def _take(self) -> Optional[Batch]:
        """Swap out the open batch (after the gathering delay); ``None`` when empty."""
        j = self._j
        with j._lock:
            if self._max_delay > 0 and not j._stopping:
                deadline = time.monotonic() + self._max_delay
                while j._open.nbytes < self._batch_bytes and not j._stopping:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    j._work.wait(left)
            if not j._open.frames or j._failure is not None:
                return None
            batch, j._open = j._open, Batch()
            j._taken = batch
            j._space.notify_all()
            return batch

    def _lead(self, batch: Batch) -> None:
        """Flush ``batch`` in the calling thread if nobody has taken it and nobody is flushing."""
        if not self._flush_lock.acquire(blocking=False):
            return
        try:
            j = self._j
            with j._lock:
                if j._open is not batch or j._failure is not None:
                    return
                j._open = Batch()
                j._taken = batch
                j._space.notify_all()
            self._flush_and_complete(batch)
        finally:
            self._flush_lock.release()
        with j._lock:  # records that arrived meanwhile: their waiters may not lead
            if j._open.frames and j._writer_idle:
                j._wake_writer()

    def _flush_and_complete(self, batch: Batch) -> None:
        try:
            self.flush(batch)
        except OSError as exc:
            self._j._fail(exc, batch)
            return
        ahead = self.next_file
        if ahead is not None and self.current is not None and ahead.wanted(self.current.written):
            ahead.step()  # one chunk, while the batch's waiters cannot run yet (journal.pool)
        self._j._mark_durable(batch.last_lsn)
        self.batches += 1
        self.records += batch.count
        batch.complete()

    def sync_current(self) -> None:
        """fdatasync the segment being written (policy ``async``: records written so far become
        durable). An ``OSError`` fail-stops the journal.

        Raises:
            JournalFailedError: the fdatasync failed.
        """
        with self._flush_lock:
            info = self.current
            if info is None or info.handle < 0:
                return
            try:
                self._j._fs.fdatasync(info.handle)
                self.fsyncs += 1
            except OSError as exc:
                self._j._fail(exc, Batch())
                raise JournalFailedError(self._j._failure or exc) from exc

    def flush(self, batch: Batch) -> None:
        """Write and sync one batch: the durability order of the journal.

        For each run of frames of one segment, in LSN order: seal the previous segment (durable
        before its successor is created), create the segment file if new, write the run with one
        ``pwrite``, fdatasync it (policy ``sync``).

        Raises:
            OSError: from the seam; nothing of the batch may then be reported durable.
        """
        j = self._j
        runs: List[Tuple[int, int, List[bytes]]] = []
        for seq, off, frame in batch.frames:
            if runs and runs[-1][0] == seq:
                runs[-1][2].append(frame)
            else:
                runs.append((seq, off, [frame]))
        segments: Dict[int, SegmentInfo] = j._segments
        for seq, off, frames in runs:
            info = segments[seq]
            prev = self.current
            if prev is not None and prev is not info and not prev.sealed:
                if not self._sync:
                    j._fs.fdatasync(prev.handle)
                    self.fsyncs += 1
                prev.sealed = True
            if info.handle < 0:
                create_segment(j._fs, j._dir, info, j._options.segment_size,
                               j._options.preallocate, prepared=self.next_file,
                               manifest=j.manifest)
            self.current = info
            data = frames[0] if len(frames) == 1 else b"".join(frames)  # (no 256 KiB copy)
            j._fs.pwrite(info.handle, data, off)
            if seeded_bugs.active("ack_before_fsync"):
                j._mark_durable(batch.last_lsn)
                batch.complete()
            if self._sync:
                j._fs.fdatasync(info.handle)
                self.fsyncs += 1
            info.written = off + len(data)
