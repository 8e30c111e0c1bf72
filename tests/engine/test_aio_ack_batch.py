"""asyncio acks made in one event-loop iteration are settled together (``engine.loopbatch``,
issue 38): what a user sees is the same as one ack after another: when an ``await ack`` returns
its message has left the queue; with ``block_on_acknowledge`` it is durable then; a delivery
acked twice fails at once; acks on two brokers each reach their own; a cancelled ack is
settled all the same; in a transaction an ack waits for the commit."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import List, Tuple

import pytest

from mqstore.engine import Broker, IllegalStateError, Message, QueueConfig
from mqstore.engine.aio import AsyncConsumer, AsyncSession
from mqstore.engine.consumer import Delivery
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex

OPTS = JournalOptions(segment_size=1 << 20, max_record_size=8 * 1024)


def open_broker(directory: str, **kw: object) -> Broker:
    b = Broker.open(directory, journal_options=OPTS, expiry_scan_ms=0, **kw)  # type: ignore
    if "a" not in b.address_names():
        b.create_address("a")
        b.create_queue(QueueConfig("a", "a"))
    return b


def fill(b: Broker, n: int) -> None:
    with b.session() as s:
        s.send_many("a", [Message(b"%03d" % i) for i in range(n)])


async def received(b: Broker, n: int, sessions: int = 4, block: bool = False
                   ) -> List[Tuple[AsyncConsumer, Delivery]]:
    """``n`` deliveries, spread over ``sessions`` sessions' consumers."""
    consumers = [AsyncSession(b.session(block_on_acknowledge=block)).create_consumer("a")
                 for _ in range(sessions)]
    out = []
    for i in range(n):
        c = consumers[i % sessions]
        d = await c.receive(5)
        assert d is not None
        out.append((c, d))
    return out


def bodies(b: Broker) -> List[bytes]:
    with b.session() as s:
        return [m.message.body for m in s.create_browser("a")]


def test_acks_of_many_tasks_each_see_their_message_gone_when_awaited() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    b = open_broker("/s", fs=fs, index=index)
    fill(b, 40)
    seen: List[int] = []

    async def ack_then_look(c: AsyncConsumer, d: Delivery) -> None:
        await c.ack(d)
        seen.append(b.queue_info("a").message_count)

    async def main() -> None:
        got = await received(b, 30, block=True)
        await asyncio.gather(*[ack_then_look(c, d) for c, d in got])

    asyncio.run(main())
    assert seen == [10] * 30  # every ack of the iteration applied when the first await returns
    assert b.queue_info("a").delivering_count == 0
    crashed = fs.crash(keep=0), index.crash(random.Random(1))  # every await had returned
    b.close()
    b = open_broker("/s", fs=crashed[0], index=crashed[1])
    assert bodies(b) == [b"%03d" % i for i in range(30, 40)]  # the acks were durable
    b.close()


def test_a_delivery_acked_twice_in_one_iteration_fails_at_once(tmp_path: Path) -> None:
    b = open_broker(str(tmp_path / "s"))
    fill(b, 2)

    async def main() -> None:
        (c, d), (c2, d2) = await received(b, 2, sessions=2)
        first = asyncio.ensure_future(c.ack(d))
        await asyncio.sleep(0)  # the first ack is made; it awaits the end of the iteration
        assert not first.done()
        with pytest.raises(IllegalStateError):
            await c.ack(d)  # the first is not settled yet, but the delivery is taken
        await asyncio.gather(first, c2.ack(d2))

    asyncio.run(main())
    assert bodies(b) == [] and b.queue_info("a").delivering_count == 0
    b.close()


def test_acks_on_two_brokers_in_one_iteration_each_reach_their_own(tmp_path: Path) -> None:
    b1, b2 = open_broker(str(tmp_path / "1")), open_broker(str(tmp_path / "2"))
    fill(b1, 5)
    fill(b2, 5)

    async def main() -> None:
        got = await received(b1, 3) + await received(b2, 2)
        await asyncio.gather(*[c.ack(d) for c, d in got])

    asyncio.run(main())
    assert bodies(b1) == [b"003", b"004"] and bodies(b2) == [b"002", b"003", b"004"]
    for b in (b1, b2):
        b.close()
    b1 = open_broker(str(tmp_path / "1"))  # a clean close: the acks are in the journal
    assert bodies(b1) == [b"003", b"004"]
    b1.close()


def test_a_cancelled_ack_is_settled_as_one_settled_at_once_is(tmp_path: Path) -> None:
    b = open_broker(str(tmp_path / "s"))
    fill(b, 2)

    async def main() -> None:
        (c, d), = await received(b, 1)
        task = asyncio.ensure_future(c.ack(d))
        await asyncio.sleep(0)  # the ack is made: the task awaits the end of the iteration
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        (c2, d2), = await received(b, 1)
        assert d2.message.body == b"001"  # the first was not given out again
        await c2.ack(d2)

    asyncio.run(main())
    assert bodies(b) == [] and b.queue_info("a").delivering_count == 0
    b.close()


def test_in_a_transaction_an_ack_waits_for_the_commit(tmp_path: Path) -> None:
    b = open_broker(str(tmp_path / "s"))
    fill(b, 3)

    async def main() -> None:
        s = AsyncSession(b.session(transacted=True))
        c = s.create_consumer("a")
        for _ in range(3):
            d = await c.receive(5)
            assert d is not None
            await c.ack(d)
        assert b.queue_info("a").message_count == 3  # nothing settled before the commit
        await s.commit()

    asyncio.run(main())
    assert bodies(b) == []
    b.close()
