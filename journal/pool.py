"""The next segment's file, zero-filled ahead of need while the writer is idle.

A new segment must be preallocated (zeros written over the whole file and made durable) before
records go into it, and doing all of that at the roll stalls every appender: 64 MiB of zeros
and their fdatasync take 50-200 ms on this machine kind. Artemis avoids the stall by opening its
next journal file ahead of need; so does mqstore. ``NextSegmentFile`` writes the zeros of the
next segment into ``next.seg.tmp`` one ``CHUNK`` at a time, whenever the group-commit writer has
no batch to flush, and asks the OS to start writing each chunk back at once
(``FileSystem.start_writeback``), so at the roll only the header, one fdatasync that finds
little left to write, the rename and the directory fsync remain (``writer.create_segment``).

Crash safety is the same as for a segment created at the roll: the file has a ``.seg.tmp`` name
until it holds a durable header, and opening a journal removes every ``.seg.tmp`` file.
"""

from __future__ import annotations

from journal.fs import FileSystem
from journal.segment import TMP_SUFFIX, join

NEXT_NAME = "next" + TMP_SUFFIX
CHUNK = 256 << 10  # bytes of zeros per idle step (about 50 us of the writer's own time)


class NextSegmentFile:
    """The zero-filled file the next segment will be made from (internal to the writer).

    Used by one thread at a time (the writer's flush lock serialises ``step`` and ``take``).

    Args:
        fs: the file-system seam.
        directory: the journal directory.
        size: the segment size in bytes.

    Attributes:
        path: where the file is built (``<directory>/next.seg.tmp``).
        broken: a step failed; the journal then creates segments at the roll, which reports
            the error there if the file system still fails.
    """

    def __init__(self, fs: FileSystem, directory: str, size: int) -> None:
        self._fs = fs
        self._size = size
        self.path = join(directory, NEXT_NAME)
        self._handle = -1
        self._done = 0  # bytes of zeros written
        self._zeros = bytes(min(CHUNK, size))
        self.broken = False

    def wanted(self) -> bool:
        """Whether idle steps remain (the file is not complete, and no step failed)."""
        return not self.broken and (self._handle < 0 or self._done < self._size)

    def step(self) -> None:
        """Write the next chunk of zeros (creating the file first) and start its writeback.
        An ``OSError`` marks the file broken, removes it as far as it can, and is not raised:
        nothing durable depends on this file yet."""
        try:
            self._step()
        except OSError:
            self.broken = True
            self.discard()

    def take(self) -> int:
        """Complete the file (any chunks still missing are written now) and hand over its open
        handle; the next ``step`` starts a new file.

        Raises:
            OSError: from the seam (the caller's roll fails as a creation at the roll would).
        """
        while self._handle < 0 or self._done < self._size:
            self._step()
        handle, self._handle, self._done = self._handle, -1, 0
        return handle

    def discard(self) -> None:
        """Close and remove the file, ignoring errors (on close of the journal, or after a
        failed step). No directory fsync: a file left behind is removed at the next open."""
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
