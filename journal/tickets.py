"""Tickets and batches: how callers wait for durability without a thundering herd.

Every append joins the currently open ``Batch``; the group-commit writer takes the whole batch,
writes it with one write and one fdatasync per segment, then completes it. Threads wait on the
batch's own ``threading.Event`` (so a flush wakes exactly the waiters of that batch), and asyncio
tasks await futures shared by every task of one event loop (one per batch, or one per loop
iteration for ``Journal.append_async``), resolved with one ``call_soon_threadsafe`` per loop.

Cancelling one waiting task cancels the future it shares with the others; those others see a
``CancelledError`` while they are not being cancelled themselves (``Task.cancelling() == 0``)
and wait again on a fresh future (``wait_shared``), so only the cancelled task stops waiting.
Its record stays appended either way: an append cannot be taken back.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Dict, Generator, List, Optional, Tuple, Union

from .errors import JournalFailedError
from .segment import Location


class Batch:
    """Records that are written and synced together (internal to the journal).

    Attributes:
        frames: (segment sequence, offset, bytes of one or more consecutive frames) in LSN
            order.
        count: number of records.
        nbytes: total frame bytes.
        last_lsn: LSN of the newest record in the batch.
    """

    __slots__ = ("frames", "count", "nbytes", "last_lsn", "_event", "_error", "_lock", "_loops",
                 "_attached")

    def __init__(self) -> None:
        self.frames: List[Tuple[int, int, bytes]] = []
        self.count = 0
        self.nbytes = 0
        self.last_lsn = 0
        self._event = threading.Event()
        self._error: Optional[BaseException] = None
        self._lock = threading.Lock()
        self._loops: Dict[asyncio.AbstractEventLoop, "asyncio.Future[None]"] = {}
        self._attached: List["asyncio.Future[None]"] = []

    def done(self) -> bool:
        """Whether the batch is complete (durable, or failed)."""
        return self._event.is_set()

    def complete(self, error: Optional[BaseException] = None) -> None:
        """Mark the batch durable (``error`` is ``None``) or failed, and wake its waiters."""
        with self._lock:
            self._error = error
            self._event.set()
            loops, self._loops = self._loops, {}
            attached, self._attached = self._attached, []
        by_loop: Dict[asyncio.AbstractEventLoop, List["asyncio.Future[None]"]] = {}
        for fut in list(loops.values()) + attached:
            by_loop.setdefault(fut.get_loop(), []).append(fut)
        for loop, futs in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve_all, futs, error)
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
        """The future of the running loop for this batch, resolved when the batch completes
        (one future per loop per batch, shared by every task awaiting the batch there)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self._event.is_set():
                fut = self._loops.get(loop)
                if fut is None or fut.cancelled():
                    fut = self._loops[loop] = loop.create_future()
                return fut
        fut = loop.create_future()
        _resolve(fut, self._error)
        return fut

    def attach(self, fut: "asyncio.Future[None]") -> None:
        """Resolve ``fut`` (of the running loop) when the batch completes: at once if it has."""
        with self._lock:
            if not self._event.is_set():
                self._attached.append(fut)
                return
        _resolve(fut, self._error)


def _resolve(fut: "asyncio.Future[None]", error: Optional[BaseException]) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(JournalFailedError(error))


def _resolve_all(futs: List["asyncio.Future[None]"], error: Optional[BaseException]) -> None:
    for fut in futs:
        _resolve(fut, error)


class Ticket:
    """The promise of one append (or of a whole ``append_many`` call).

    Attributes:
        lsn: the record's LSN (for a batch append, the last record's).

    ``wait()`` blocks a thread; ``await ticket`` suspends a task; both raise
    ``JournalFailedError`` when the write or fsync covering the record failed, in which case the
    record is not durable and never will be reported so.
    """

    __slots__ = ("lsn", "_locs", "_batch", "_journal")

    def __init__(self, lsn: int, locations: Union[Tuple[int, int, int], List[Location]],
                 batch: Batch, journal: Any = None) -> None:
        self.lsn = lsn
        self._locs = locations  # a (segment, offset, length) triple for one record
        self._batch = batch
        self._journal = journal

    @property
    def location(self) -> Location:
        """Location (segment, offset, length) of the (last) record of this ticket."""
        locs = self._locs
        return locs[-1] if isinstance(locs, list) else Location(*locs)

    @property
    def locations(self) -> List[Location]:
        """The locations of every record of the call, in order."""
        locs = self._locs
        return locs if isinstance(locs, list) else [Location(*locs)]

    def done(self) -> bool:
        """Whether the fsync covering this ticket finished (successfully or not)."""
        return self._batch.done()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until durable. Returns ``False`` on timeout (seconds); raises
        ``JournalFailedError`` if the batch failed. When no flush is under way the calling
        thread flushes the batch itself (leader-based group commit)."""
        batch = self._batch
        if not batch.done() and self._journal is not None:
            self._journal._before_wait(batch)
        return batch.wait(timeout)

    def __await__(self) -> Generator[Any, None, None]:
        batch = self._batch
        if not batch.done() and self._journal is not None:
            self._journal._kick()
        while True:
            try:
                return (yield from batch.future().__await__())
            except asyncio.CancelledError:
                if not collateral_cancel():
                    raise


def collateral_cancel() -> bool:
    """Whether a ``CancelledError`` just caught while awaiting a shared future hit a task that
    nobody cancelled (another task's cancellation cancelled the shared future): it should
    wait again."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() == 0
