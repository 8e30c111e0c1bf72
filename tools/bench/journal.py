"""``mqstore bench journal``: the journal's durable throughput as ratios to raw limits, one run.

Everything is measured in one run on the same disk, because this machine's fsync rate moves
10x within minutes (REFERENCE.md): the raw fdatasync probe runs right before the figures it
scales. Payloads are 1 KiB. Figures: raw 1 KiB overwrite + fdatasync ops/s; a plain Python loop
(msgpack + CRC-32C + 1 MiB buffered write + fdatasync every 1000 records) records/s; the journal's
durable appends with 1/4/16/64 threads and 1/16/256 asyncio tasks, with p50/p99 latency; replay
scan records/s against a plain read + CRC + unpack loop over the same number of records.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

import msgpack

from mqstore.journal import Journal, JournalOptions
from mqstore.journal.crc import crc32c

PAYLOAD = {"body": os.urandom(1024 - 10)}


@dataclass(frozen=True)
class Figure:
    """One measured figure: name, rate per second, unit, latencies in ms (or None)."""

    name: str
    rate: float
    unit: str
    p50_ms: Optional[float] = None
    p99_ms: Optional[float] = None


def raw_fdatasync(directory: str, seconds: float) -> Figure:
    """1 KiB overwrite of a pre-zeroed file + fdatasync, ops/s."""
    path = os.path.join(directory, "raw.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, bytes(16 << 20))
        os.fsync(fd)
        block = os.urandom(1024)
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds and n < 16 * 1024 - 1:
            os.pwrite(fd, block, n * 1024)
            os.fdatasync(fd)
            n += 1
        return Figure("raw 1 KiB overwrite + fdatasync", n / (time.perf_counter() - start),
                      "ops/s")
    finally:
        os.close(fd)
        os.unlink(path)


def fdatasync_probe(parent: str, seconds: float = 1.0) -> float:
    """The disk's fdatasync rate now (ops/s: 1 KiB overwrite + fdatasync, ``bench journal``'s
    probe), measured in a temporary directory under ``parent`` (removed after): the disk's
    rate swings 10x within minutes, so throughput is reported as a ratio to it."""
    os.makedirs(parent, exist_ok=True)
    where = tempfile.mkdtemp(prefix=".mqstore-probe-", dir=parent)
    try:
        return raw_fdatasync(where, seconds).rate
    finally:
        shutil.rmtree(where, ignore_errors=True)


def plain_loop(directory: str, records: int, sync_every: int = 1000) -> Figure:
    """msgpack + CRC-32C + 1 MiB buffered write + fdatasync every ``sync_every`` records."""
    path = os.path.join(directory, "plain.bin")
    packer = msgpack.Packer(use_bin_type=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    buf = bytearray()
    start = time.perf_counter()
    for i in range(records):
        data = packer.pack(PAYLOAD)
        buf += len(data).to_bytes(4, "little") + data + crc32c(data).to_bytes(4, "little")
        if len(buf) >= 1 << 20:
            os.write(fd, buf)
            buf.clear()
        if (i + 1) % sync_every == 0:
            os.write(fd, buf)
            buf.clear()
            os.fdatasync(fd)
    os.write(fd, buf)
    os.fdatasync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return Figure(f"plain loop, fdatasync every {sync_every}", records / elapsed, "records/s")


def plain_scan(directory: str) -> Figure:
    """Read + CRC check + unpack of the plain loop's file."""
    path = os.path.join(directory, "plain.bin")
    start = time.perf_counter()
    with open(path, "rb") as f:
        data = f.read()
    off, n = 0, 0
    while off < len(data):
        size = int.from_bytes(data[off:off + 4], "little")
        body = data[off + 4:off + 4 + size]
        assert crc32c(body) == int.from_bytes(data[off + 4 + size:off + 8 + size], "little")
        msgpack.unpackb(body)
        off += size + 8
        n += 1
    os.unlink(path)
    return Figure("plain scan: read + CRC + unpack", n / (time.perf_counter() - start),
                  "records/s")


def _fresh(directory: str, name: str) -> Journal:
    path = os.path.join(directory, name)
    shutil.rmtree(path, ignore_errors=True)
    j = Journal.open(path, JournalOptions())
    j.append(1, PAYLOAD).wait()  # create (zero-fill) the first segment before timing
    return j


def journal_threads(directory: str, threads: int, seconds: float) -> Figure:
    """Durable appends (append + wait) from ``threads`` threads."""
    j = _fresh(directory, f"threads{threads}")
    latencies: List[List[float]] = [[] for _ in range(threads)]
    stop = time.perf_counter() + seconds

    def work(mine: List[float]) -> None:
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            j.append(1, PAYLOAD).wait()
            mine.append(time.perf_counter() - t0)

    start = time.perf_counter()
    pool = [threading.Thread(target=work, args=(latencies[i],)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - start
    j.close()
    return _figure(f"journal, {threads} thread(s)", latencies, elapsed)


def journal_tasks(directory: str, tasks: int, seconds: float) -> Figure:
    """Durable appends (``await journal.append_async(...)``) from ``tasks`` asyncio tasks."""
    j = _fresh(directory, f"tasks{tasks}")
    latencies: List[List[float]] = [[] for _ in range(tasks)]

    async def work(mine: List[float], stop: float) -> None:
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            await j.append_async(1, PAYLOAD)
            mine.append(time.perf_counter() - t0)

    async def main() -> None:
        stop = time.perf_counter() + seconds
        await asyncio.gather(*(work(latencies[i], stop) for i in range(tasks)))

    start = time.perf_counter()
    asyncio.run(main())
    elapsed = time.perf_counter() - start
    j.close()
    return _figure(f"journal, {tasks} asyncio task(s)", latencies, elapsed)


def _figure(name: str, latencies: List[List[float]], elapsed: float) -> Figure:
    flat = sorted(x for part in latencies for x in part)
    p99 = flat[min(len(flat) - 1, int(len(flat) * 0.99))] if flat else 0.0
    return Figure(name, len(flat) / elapsed, "records/s",
                  statistics.median(flat) * 1000 if flat else None, p99 * 1000)


def journal_replay(directory: str, records: int) -> Figure:
    """Open a journal of ``records`` 1 KiB records and iterate them with payload decoding."""
    j = _fresh(directory, "replay")
    for _ in range(records // 1000):
        j.append_many([(1, PAYLOAD)] * 1000)
    j.close()
    start = time.perf_counter()
    j = Journal.open(os.path.join(directory, "replay"), JournalOptions(read_only=True))
    n = sum(1 for r in j.records() if r.payload is not None)
    elapsed = time.perf_counter() - start
    j.close()
    return Figure("journal replay: open + scan + unpack", n / elapsed, "records/s")


def run(directory: Optional[str], seconds: float, records: int,
        progress: Callable[[str], None]) -> List[Figure]:
    """Run every figure in order (each probe right before what it scales)."""
    tmp = tempfile.mkdtemp(prefix="mqstore-bench-", dir=directory)
    figures: List[Figure] = []
    try:
        steps: List[Callable[[], Figure]] = [
            lambda: raw_fdatasync(tmp, seconds),
            lambda: journal_threads(tmp, 1, seconds),
            lambda: plain_loop(tmp, records),
        ]
        steps += [lambda n=n: journal_tasks(tmp, n, seconds) for n in (256, 16, 1)]
        steps += [lambda n=n: journal_threads(tmp, n, seconds) for n in (4, 16, 64)]
        steps += [lambda: plain_scan(tmp), lambda: journal_replay(tmp, records),
                  lambda: raw_fdatasync(tmp, seconds)]
        for fn in steps:
            fig = fn()
            progress(fig.name)
            figures.append(fig)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return figures


def ratios(figures: List[Figure]) -> List[tuple]:
    """(what, ratio, target or None) for the issue's targets, from figures of one run."""
    by = {f.name: f.rate for f in figures}
    raw = next(f.rate for f in figures if f.name.startswith("raw"))
    plain = next(f.rate for f in figures if f.name.startswith("plain loop"))
    scan = next(f.rate for f in figures if f.name.startswith("plain scan"))
    return [
        ("1 thread durable appends / raw fdatasync", by["journal, 1 thread(s)"] / raw, 0.8),
        ("256 asyncio tasks / plain loop", by["journal, 256 asyncio task(s)"] / plain, 0.4),
        ("64 threads / plain loop", by["journal, 64 thread(s)"] / plain, None),
        ("journal replay / plain scan", by["journal replay: open + scan + unpack"] / scan, None),
    ]
