"""``Journal.append_async`` (staged appends) and awaiting tickets from asyncio."""

from __future__ import annotations

import asyncio
from typing import List

import pytest

from mqstore.journal import (InvalidRecordError, Journal, JournalFailedError, JournalOptions,
                             RecordTooLargeError, SimulatedFileSystem)
from mqstore.journal.segment import Location

SMALL = JournalOptions(segment_size=8192)


def test_staged_appends_are_durable_in_call_order_across_segment_rolls() -> None:
    fs = SimulatedFileSystem()
    j = Journal.open("/j", SMALL, fs=fs)

    async def main() -> List[Location]:
        async def one(i: int) -> Location:
            return await j.append_async(1, {"i": i, "pad": "x" * 100})
        return list(await asyncio.gather(*(one(i) for i in range(300))))

    locations = asyncio.run(main())
    assert len({loc.segment for loc in locations}) > 3  # stages rolled segments midway
    assert [j.read(loc).payload["i"] for loc in locations] == list(range(300))
    assert [j.read(loc).lsn for loc in locations] == sorted(j.read(loc).lsn for loc in locations)
    assert j.statistics().batches < 300 / 10  # tasks of one loop iteration share a batch
    j.close()
    after = Journal.open("/j", SMALL, fs=fs.crash())  # everything unsynced is lost
    assert [r.payload["i"] for r in after.records()] == list(range(300))
    after.close()


def test_bad_input_raises_in_the_caller_and_stages_nothing() -> None:
    fs = SimulatedFileSystem()
    j = Journal.open("/j", SMALL, fs=fs)

    async def main() -> None:
        with pytest.raises(InvalidRecordError):
            await j.append_async(0, "bad kind")
        with pytest.raises(InvalidRecordError):
            await j.append_async(1, object())
        with pytest.raises(RecordTooLargeError):
            await j.append_async(1, "x" * 9000)
        await j.append_async(1, "good")

    asyncio.run(main())
    assert [r.payload for r in j.records()] == ["good"]
    j.close()


def test_cancelling_one_waiter_leaves_the_others_waiting() -> None:
    fs = SimulatedFileSystem()
    # the writer gathers for 200 ms, so every task is still waiting when one is cancelled
    j = Journal.open("/j", JournalOptions(segment_size=1 << 20, max_delay_ms=200), fs=fs)

    async def main() -> List[object]:
        staged = [asyncio.create_task(j.append_async(1, f"s{i}")) for i in range(4)]
        tickets = [j.append(1, f"t{i}") for i in range(4)]

        async def wait(t: object) -> str:
            await t  # type: ignore[misc]
            return "durable"

        awaited = [asyncio.create_task(wait(t)) for t in tickets]
        await asyncio.sleep(0.02)
        staged[1].cancel()
        awaited[2].cancel()
        return list(await asyncio.gather(*staged, *awaited, return_exceptions=True))

    out = asyncio.run(main())
    assert isinstance(out[1], asyncio.CancelledError)
    assert isinstance(out[6], asyncio.CancelledError)
    assert [type(x).__name__ for i, x in enumerate(out[:4]) if i != 1] == ["Location"] * 3
    assert [x for i, x in enumerate(out[4:]) if i != 2] == ["durable"] * 3
    j.close()
    # the cancelled appends were not taken back: an append cannot be
    payloads = [r.payload for r in Journal.open("/j", fs=fs.crash()).records()]
    assert sorted(payloads) == sorted([f"s{i}" for i in range(4)] + [f"t{i}" for i in range(4)])


def test_a_failed_fsync_fails_every_task_of_the_stage() -> None:
    fs = SimulatedFileSystem()
    j = Journal.open("/j", SMALL, fs=fs)
    j.append(1, "durable").wait()

    async def main() -> List[object]:
        fs.fail_at = fs.op_count + 2  # the pwrite succeeds, its fdatasync fails
        return list(await asyncio.gather(*(j.append_async(1, f"lost{i}") for i in range(5)),
                                         return_exceptions=True))

    out = asyncio.run(main())
    assert all(isinstance(x, JournalFailedError) for x in out)
    with pytest.raises(JournalFailedError):
        asyncio.run(j.append_async(1, "refused"))
    j.close()
    after = Journal.open("/j", SMALL, fs=fs.crash())
    assert [r.payload for r in after.records()] == ["durable"]
    after.close()
