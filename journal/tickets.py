"""Tickets and batches: how callers wait for durability without a thundering herd.

Every append joins the currently open ``Batch``; the group-commit writer takes the whole batch,
writes it with one write and one fdatasync per segment, then completes it. Threads wait on the
batch's own ``threading.Event`` (so a flush wakes exactly the waiters of that batch), and asyncio
tasks await futures that are resolved with one ``call_soon_threadsafe`` per event loop per batch.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Dict, Generator, List, Optional, Tuple

from journal.errors import JournalFailedError
from journal.segment import Location


class Batch:
    """Records that are written and synced together (internal to the journal).

    Attributes:
        frames: (segment sequence, offset, frame bytes) in LSN order.
        nbytes: total frame bytes.
        last_lsn: LSN of the newest record in the batch.
    """

    __slots__ = ("frames", "nbytes", "last_lsn", "_event", "_error", "_lock", "_loops")

    def __init__(self) -> None:
        self.frames: List[Tuple[int, int, bytes]] = []
        self.nbytes = 0
        self.last_lsn = 0
        self._event = threading.Event()
        self._error: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._loops: Dict[asyncio.AbstractEventLoop, List["asyncio.Future[None]"]] = {}

    def done(self) -> bool:
        """Whether the batch is complete (durable, or failed)."""
        return self._event.is_set()

    def complete(self, error: Optional[BaseException] = None) -> None:
        """Mark the batch durable (``error`` is ``None``) or failed, and wake its waiters."""
        with self._lock:
            self._error = error
            self._event.set()
            loops, self._loops = self._loops, {}
        for loop, futures in loops.items():
            try:
                loop.call_soon_threadsafe(_resolve, futures, error)
            except RuntimeError:  # the loop was closed; nobody waits there any more
                pass

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until complete; raise ``JournalFailedError`` if the batch failed.

        Returns:
            ``True`` when complete, ``False`` when ``timeout`` (seconds) passed first.
        """
        if not self._event.wait(timeout):
            return False
        if self._error is not None:
            raise JournalFailedError(self._error)
        return True

    def future(self) -> "asyncio.Future[None]":
        """An asyncio future of the running loop, resolved when the batch completes."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if not self._event.is_set():
                self._loops.setdefault(loop, []).append(fut)
                return fut
        _resolve([fut], self._error)
        return fut


def _resolve(futures: List["asyncio.Future[None]"], error: Optional[BaseException]) -> None:
    for fut in futures:
        if fut.done():
            continue
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(JournalFailedError(error))


class Ticket:
    """The promise of one append (or of a whole ``append_many`` call).

    Attributes:
        lsn: the record's LSN (for a batch append, the last record's).
        location: where the record is (segment, offset, length); for a batch append, the last.
        locations: the locations of every record of the call, in order.

    ``wait()`` blocks a thread; ``await ticket`` suspends a task; both raise
    ``JournalFailedError`` when the write or fsync covering the record failed, in which case the
    record is not durable and never will be reported so.
    """

    __slots__ = ("lsn", "locations", "_batch")

    def __init__(self, lsn: int, locations: List[Location], batch: Batch) -> None:
        self.lsn = lsn
        self.locations = locations
        self._batch = batch

    @property
    def location(self) -> Location:
        """Location of the (last) record of this ticket."""
        return self.locations[-1]

    def done(self) -> bool:
        """Whether the fsync covering this ticket finished (successfully or not)."""
        return self._batch.done()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until durable. Returns ``False`` on timeout (seconds); raises
        ``JournalFailedError`` if the batch failed."""
        return self._batch.wait(timeout)

    def __await__(self) -> Generator[None, None, None]:
        return self._batch.future().__await__()
