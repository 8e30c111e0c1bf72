"""Placing records in the open batch, and staged appends for asyncio.

``place_records`` gives packed records their LSNs, frames and locations under the journal lock
once (``append_many`` and the stages use it).


``Journal.append_async`` is the asyncio way to append and wait: each call packs its payload at
once (so a bad payload raises in the caller, nothing staged) and joins the *stage* of its event
loop; the first call of a loop iteration schedules the stage's placement with ``call_soon``, so
it runs after every task that was ready in that iteration has appended. Placement takes the
journal lock once for the whole stage (``place_records``), wakes the
writer thread, and attaches the stage's one ``SharedFuture`` to the batch, resolved by one
``call_soon_threadsafe`` after the fdatasync that covers it. N tasks appending in the same
iteration thus cost one lock, one future and one wake-up in all, not N of each. A task whose
shared future was cancelled by another task's cancellation waits again on a fresh one
(``LoopStage.renew``).

Order and durability are the journal's: LSNs follow placement order (the call order within a
loop); nothing is reported durable before the covering fdatasync; a failed write fails every
task of the stage with ``JournalFailedError``.
"""

from __future__ import annotations

import asyncio
from typing import Dict, List, Optional, Tuple

from .core import JournalCore
from .errors import JournalError
from .format import encode_run
from .segment import Location, SegmentInfo
from .tickets import Batch, collateral_cancel


class LoopStage:
    """The records staged by one event loop in one iteration (internal).

    Attributes:
        records: (kind, packed payload) in call order.
        future: resolved when every record is durable (or failed).
        locations: the records' locations, set at placement.
        batch: the batch the records were placed in (``None`` before placement).
    """

    __slots__ = ("records", "future", "locations", "batch")

    def __init__(self, future: "asyncio.Future[None]") -> None:
        self.records: List[Tuple[int, bytes]] = []
        self.future = future
        self.locations: List[Location] = []
        self.batch: Optional[Batch] = None

    def renew(self) -> None:
        """Replace a cancelled shared future with a fresh one, attached to the batch when the
        stage is placed already (placement attaches whatever future is current)."""
        if not self.future.cancelled():
            return
        self.future = self.future.get_loop().create_future()
        if self.batch is not None:
            self.batch.attach(self.future)


class AsyncStager:
    """The open stage of every event loop appending to one journal (internal).

    Each loop touches only its own entry, from its own thread, so no lock is needed.
    """

    def __init__(self, journal: JournalCore) -> None:
        self._journal = journal
        self.stages: Dict[asyncio.AbstractEventLoop, LoopStage] = {}

    def open(self, loop: asyncio.AbstractEventLoop) -> LoopStage:
        """Open the stage of ``loop`` (the running loop, which has none open) and schedule its
        placement for the end of the current iteration."""
        stage = self.stages[loop] = LoopStage(loop.create_future())
        loop.call_soon(self._place, loop, stage)
        return stage

    @staticmethod
    async def rewait(stage: LoopStage) -> None:
        """Wait again, on a fresh future, after another task's cancellation cancelled the
        stage's shared future; a cancellation of this task itself propagates."""
        while True:
            stage.renew()
            try:
                await stage.future
                return
            except asyncio.CancelledError:
                if not collateral_cancel():
                    raise

    def _place(self, loop: asyncio.AbstractEventLoop, stage: LoopStage) -> None:
        del self.stages[loop]
        try:
            stage.locations, batch = place_records(self._journal, stage.records, wake=True)
        except JournalError as exc:
            if not stage.future.done():
                stage.future.set_exception(exc)
            return
        stage.batch = batch
        batch.attach(stage.future)


def place_records(j: JournalCore, encoded: List[Tuple[int, bytes]], wake: bool = False
                  ) -> Tuple[List[Location], Batch]:
    """Give packed records their LSNs and frames in the open batch, under the lock once.

    Args:
        encoded: (kind, packed payload) pairs, already checked (kind, size).
        wake: always wake an idle writer (callers that cannot lead a flush themselves).

    Returns:
        The records' locations, and the batch whose completion makes them durable.

    Raises:
        JournalClosedError, ReadOnlyError, JournalFailedError: nothing placed.
    """
    size_limit = j._options.segment_size
    with j._lock:
        j._admit()
        batch = j._open
        locations: List[Location] = []
        first = j._next_lsn
        synced = j._durable_lsn
        done, total = 0, len(encoded)
        while True:
            seg = j._active
            lsn = first + done
            upto = encode_run(buf := bytearray(), encoded, done, lsn, seg.generation, synced,
                              seg.end, size_limit, seg.sequence, locations, Location)
            account_run(batch, seg, buf, seg.end, seg.end + len(buf), upto - done,
                       first + upto - 1)
            done = upto
            j._next_lsn = first + done  # (also the first LSN of a rolled segment)
            if done == total:
                break
            j._roll()
        batch.count += total
        if j._writer_idle and (wake or j._lead is None or
                               batch.nbytes >= j._options.batch_bytes):
            j._wake_writer()
    return locations, batch


def account_run(batch: Batch, seg: SegmentInfo, buf: bytes, start: int, end: int,
               count: int, last_lsn: int) -> None:
    """Hand the ``count`` frames encoded into ``buf`` for ``seg`` (file offsets ``start``
    to ``end``, LSNs up to ``last_lsn``) to the batch and account for them in the segment
    (lock held)."""
    if not count:
        return
    batch.frames.append((seg.sequence, start, buf))
    batch.nbytes += end - start
    seg.count += count
    seg.end = end
    seg.total_bytes += end - start
    seg.last_lsn = batch.last_lsn = last_lsn
