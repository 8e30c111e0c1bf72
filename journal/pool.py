"""The next segment's file, zero-filled ahead of need.

A new segment must be preallocated (zeros written over the whole file and made durable) before
records go into it, and doing all of that at the roll stalls every appender: 64 MiB of zeros
and their fdatasync take 50-200 ms on this machine kind. Artemis avoids the stall by opening its
next journal file ahead of need; so does mqstore. ``NextSegmentFile`` writes the zeros of the
next segment into ``next.seg.tmp`` one ``CHUNK`` at a time, and asks the OS to start writing
each chunk back at once (``FileSystem.start_writeback``), so at the roll only the header, one
fdatasync that finds little left to write, the rename and the directory fsync remain
(``writer.create_segment``).

The writer takes a step after a batch's fdatasync and before it wakes the batch's waiters,
whenever the zeros are not yet twice ahead of the active segment's fill (``wanted``). The
waiters cannot run yet anyway, so the step (about 80 us for 256 KiB) competes with nobody, and
the writeback it starts overlaps the appenders' next round rather than this batch's fdatasync.
Measured alternatives were slower: a step while appenders run waits for the GIL (~0.5 ms) and
delays the next batch; a helper thread stepping during the batch's fdatasync slows that
fdatasync by ~150 us (both write to the same disk). A journal that appends nothing builds
nothing; ``take`` writes whatever chunks are still missing. Steps happen only under the
writer's flush lock, at fixed points of a flush, so crash and fault tests see the same file
system operations in every run.

Crash safety is the same as for a segment created at the roll: the file has a ``.seg.tmp`` name
until it holds a durable header, and opening a journal removes every ``.seg.tmp`` file.
"""

from __future__ import annotations

from typing import Optional, Tuple

from .fs import FileSystem
from .segment import TMP_SUFFIX, join

NEXT_NAME = "next" + TMP_SUFFIX
CHUNK = 256 << 10  # bytes of zeros per step (one batch of 256 KiB records needs one step)


class NextSegmentFile:
    """The zero-filled file the next segment will be made from (internal to the writer, used
    under its flush lock).

    Args:
        fs: the file-system seam.
        directory: the journal directory.
        size: the segment size in bytes.

    Attributes:
        path: where the file is built (``<directory>/next.seg.tmp``).
        broken: a step failed; the journal then creates segments whole at the roll, which
            reports the error there if the file system still fails.
    """

    def __init__(self, fs: FileSystem, directory: str, size: int) -> None:
        self._fs = fs
        self._size = size
        self.path = join(directory, NEXT_NAME)
        self._handle = -1
        self._done = 0  # bytes of zeros written
        self._zeros = bytes(min(CHUNK, size))
        self.broken = False

    def wanted(self, filled: int) -> bool:
        """Whether a step is due now that the active segment holds ``filled`` bytes: the file
        is not complete, no step failed, and its zeros are not yet twice ahead of the active
        segment's fill (so small batches step about once per 128 KiB of records, not every
        batch, while the file is still complete before the roll)."""
        return not self.broken and self._done < min(self._size, 2 * filled)

    def step(self) -> None:
        """Write the next chunk of zeros (creating the file first) and start its writeback.
        An ``OSError`` marks the file broken, removes it as far as it can, and is not raised:
        nothing durable depends on this file yet."""
        try:
            self._step()
        except OSError:
            self.broken = True
            self._discard()

    def take(self) -> Optional[Tuple[int, str]]:
        """Complete the file (any chunks still missing are written now) and hand it over:
        its open handle and its path, for the caller to write the header, fdatasync and
        rename (under the same flush lock, so no step starts a new file meanwhile). The next
        step starts a new file.

        Returns:
            ``(handle, path)``, or ``None`` when the file is broken or completing it fails
            (the caller then creates the segment itself and meets the error there if the
            file system still fails).
        """
        if self.broken:
            return None
        try:
            while self._handle < 0 or self._done < self._size:
                self._step()
        except OSError:
            self.broken = True
            self._discard()
            return None
        handle, self._handle, self._done = self._handle, -1, 0
        return handle, self.path

    def close(self) -> None:
        """Close and remove the file, ignoring errors (no directory fsync: a file left behind
        is removed at the next open)."""
        self._discard()

    def _discard(self) -> None:
        handle, self._handle, self._done = self._handle, -1, 0
        try:
            if handle >= 0:
                self._fs.close(handle)
            if self._fs.exists(self.path):
                self._fs.unlink(self.path)
        except OSError:
            pass

    def _step(self) -> None:
        fs = self._fs
        if self._handle < 0:
            if fs.exists(self.path):
                fs.unlink(self.path)
            self._handle = fs.open(self.path, create=True)
            self._done = 0
        n = min(len(self._zeros), self._size - self._done)
        fs.pwrite(self._handle, self._zeros[:n] if n < len(self._zeros) else self._zeros,
                  self._done)
        fs.start_writeback(self._handle, self._done, n)
        self._done += n
