"""asyncio sends made in one event-loop iteration are placed together (``engine.aio``, issue 38):
what a user sees is the same as one send after another: every message there, in the order the
sends were made, each durable when its ``await`` returns; a send that fails fails alone (its
own error, the others placed); a send to another broker or another address is placed there;
a cancelled send's message is placed all the same (as one placed at once is)."""

from __future__ import annotations

import asyncio
import gc
import random
import weakref
from pathlib import Path
from typing import List

import pytest

from mqstore.engine import Broker, IllegalStateError, Message, QueueConfig
from mqstore.engine.aio import AsyncSession
from mqstore.journal import JournalOptions, RecordTooLargeError, SimulatedFileSystem
from mqstore.recovery import MemoryIndex

OPTS = JournalOptions(segment_size=1 << 20, max_record_size=8 * 1024)


def open_broker(d: Path) -> Broker:
    b = Broker.open(str(d), journal_options=OPTS, expiry_scan_ms=0)
    for name in ("a", "b"):
        if name not in b.address_names():
            b.create_address(name)
            b.create_queue(QueueConfig(name, name))
    return b


def bodies(b: Broker, queue: str) -> List[bytes]:
    with b.session() as s:
        return [m.message.body for m in s.create_browser(queue)]


def test_sends_of_many_tasks_keep_their_order_and_are_durable_when_awaited() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    b = Broker.open("/s", fs=fs, index=index, journal_options=OPTS, expiry_scan_ms=0)
    for name in ("a", "b"):
        b.create_address(name)
        b.create_queue(QueueConfig(name, name))

    async def main() -> None:
        sessions = [AsyncSession(b.session()) for _ in range(3)]
        await asyncio.gather(*[sessions[i % 3].send("a" if i % 4 else "b",
                                                    Message(b"%03d" % i))
                               for i in range(60)])

    asyncio.run(main())
    assert bodies(b, "a") == [b"%03d" % i for i in range(60) if i % 4]
    assert bodies(b, "b") == [b"%03d" % i for i in range(60) if not i % 4]
    crashed = fs.crash(keep=0), index.crash(random.Random(1))  # every await had returned
    b.close()
    b = Broker.open("/s", fs=crashed[0], index=crashed[1], journal_options=OPTS,
                    expiry_scan_ms=0)
    assert bodies(b, "a") == [b"%03d" % i for i in range(60) if i % 4]
    assert bodies(b, "b") == [b"%03d" % i for i in range(60) if not i % 4]
    b.close()


def test_a_send_that_fails_fails_alone(tmp_path: Path) -> None:
    b = open_broker(tmp_path / "s")
    closed = b.session()

    async def main() -> List[object]:
        ok, big = AsyncSession(b.session()), AsyncSession(b.session())
        gone = AsyncSession(closed)
        closed.close()
        return await asyncio.gather(ok.send("a", Message(b"first")),
                                    big.send("a", Message(b"x" * 20_000)),
                                    gone.send("a", Message(b"from a closed session")),
                                    ok.send("a", Message(b"last")),
                                    return_exceptions=True)

    results = asyncio.run(main())
    assert results[0] is None and results[3] is None
    assert isinstance(results[1], RecordTooLargeError)
    assert isinstance(results[2], IllegalStateError)
    assert bodies(b, "a") == [b"first", b"last"]
    b.close()


def test_sends_to_two_brokers_in_one_iteration_each_reach_their_own(tmp_path: Path) -> None:
    one, two = open_broker(tmp_path / "one"), open_broker(tmp_path / "two")

    async def main() -> None:
        s1, s2 = AsyncSession(one.session()), AsyncSession(two.session())
        await asyncio.gather(s1.send("a", Message(b"1")), s2.send("a", Message(b"2")),
                             s1.send("a", Message(b"3")))

    asyncio.run(main())
    assert bodies(one, "a") == [b"1", b"3"] and bodies(two, "a") == [b"2"]
    one.close()
    two.close()


def test_a_cancelled_send_is_placed_as_one_placed_at_once_is(tmp_path: Path) -> None:
    b = open_broker(tmp_path / "s")

    async def main() -> None:
        s = AsyncSession(b.session())
        task = asyncio.ensure_future(s.send("a", Message(b"cancelled")))
        await asyncio.sleep(0)  # the task runs up to its wait for the batch
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await s.send("a", Message(b"next"))

    asyncio.run(main())
    assert bodies(b, "a") == [b"cancelled", b"next"]
    b.close()


def test_a_closed_event_loop_is_not_kept_alive_by_its_batch(tmp_path: Path) -> None:
    b = open_broker(tmp_path / "s")
    loop = asyncio.new_event_loop()
    loop.run_until_complete(AsyncSession(b.session()).send("a", Message(b"x")))
    loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None  # (an application that runs asyncio.run often leaks no loops)
    assert bodies(b, "a") == [b"x"]
    b.close()
