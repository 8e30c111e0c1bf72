"""Floors for ``mqstore bench e2e``: what its ``batch`` and ``async`` workloads could reach with
a broker that cost nothing, measured in the same run.

- ``batch`` floor: per message, the API's ``Message`` built and checked, and the journal's
  own two records (one like a MESSAGE with the 1 KiB body, one like an ACK), appended 100 at a
  time with one wait each, as ``send_many`` and ``ack_many`` do. No broker: no routing, queue,
  delivery, in-memory image, liveness or index. The broker's batch path cannot cost less, so
  its CPU per message and its rate against sqlite3 are bounded by this one's.
- ``async`` floor: 256 asyncio producers and 256 asyncio consumers as in ``async``, with no
  storage at all: a producer puts the message on an ``asyncio.Queue`` and awaits a future that
  the next loop turn resolves (a group commit that costs nothing), a consumer awaits the queue
  with the same 0.5 s timeout as the real receive. Acks cost nothing. This is the most this
  process model (one CPython event loop doing both sides) can move, whatever the broker.

Both are figures of this machine's Python, not of mqstore: they say how much of a target is
left for the broker to spend.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, List, Tuple

from mqstore.engine import Message
from mqstore.journal import Journal, JournalOptions
from mqstore.recovery.schema import RecordKind

from .proctree import Timed

FLOOR_BATCH = "floor: journal + API, no broker"
FLOOR_ASYNC = "floor: asyncio, no storage"


def batch_floor(directory: str, n: int, body: bytes, batch: int) -> Tuple[int, Timed]:
    """``n`` messages (rounded up to whole batches of ``batch``) through the journal alone:
    returns the count and its ``Timed`` (wall and CPU seconds)."""
    journal = Journal.open(os.path.join(directory, "journal"), JournalOptions())
    mid = 0
    done = 0
    try:
        with Timed() as t:
            while done < n:
                messages = [Message(body).checked() for _ in range(batch)]
                first = mid + 1
                records: List[Any] = []
                for m in messages:
                    mid += 1
                    records.append((int(RecordKind.MESSAGE),
                                    {"mid": mid, "addr": "bench", "q": [1], "body": m.body,
                                     "ts": m.timestamp}))
                journal.append_many(records).wait()
                journal.append_many([(int(RecordKind.ACK), {"q": 1, "m": i, "r": 0})
                                     for i in range(first, mid + 1)]).wait()
                done += batch
    finally:
        journal.close()
    return done, t


def async_floor(n: int, body: bytes, tasks: int) -> Tuple[int, Timed]:
    """``n`` messages (rounded down to ``tasks`` producers' equal shares; as many consumers)
    through asyncio alone: returns the count and its ``Timed``."""
    per_task = max(1, n // tasks)
    total = per_task * tasks

    async def main() -> None:
        loop = asyncio.get_running_loop()
        queue: "asyncio.Queue[bytes]" = asyncio.Queue()
        pending: List["asyncio.Future[None]"] = []
        left = [total]

        def commit() -> None:
            for fut in pending:
                fut.set_result(None)
            pending.clear()

        async def durable() -> None:
            fut = loop.create_future()
            if not pending:
                loop.call_soon(commit)
            pending.append(fut)
            await fut

        async def produce() -> None:
            for _ in range(per_task):
                queue.put_nowait(body)
                await durable()

        async def consume() -> None:
            while True:
                try:
                    await asyncio.wait_for(queue.get(), 0.5)
                except asyncio.TimeoutError:
                    continue
                left[0] -= 1
                if left[0] == 0:
                    done.set()

        done = asyncio.Event()
        receivers = [asyncio.ensure_future(consume()) for _ in range(tasks)]
        await asyncio.gather(*[produce() for _ in range(tasks)])
        await finish(done, receivers)  # the clock stops at the last message, as in ``async``

    with Timed() as t:
        asyncio.run(main())
    return total, t


async def finish(done: asyncio.Event, consumers: List["asyncio.Future[None]"]) -> None:
    """Wait until ``done`` is set (the last message was consumed), then cancel the consumer
    tasks, which loop on receives with a timeout (a cancelled receive hands nothing out). A
    consumer that fails first raises its error here instead of leaving the wait hanging."""
    waiting = asyncio.ensure_future(done.wait())
    try:
        finished, _ = await asyncio.wait([waiting, *consumers],
                                         return_when=asyncio.FIRST_COMPLETED)
        for task in finished:
            if task is not waiting:
                task.result()
    finally:
        for task in [waiting, *consumers]:
            task.cancel()
        await asyncio.gather(waiting, *consumers, return_exceptions=True)
