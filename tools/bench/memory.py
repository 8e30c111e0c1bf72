"""``mqstore bench memory``: RAM, reopen time and throughput with large backlogs, one run.

Every phase runs in a fresh child process, so each RSS figure is that phase's own. Messages are
1 KiB durable messages. For each backlog size, on one queue and spread over 100 queues:

- fill: the backlog is sent in batches of 1,000; RSS after filling (also split into the
  process's own memory and the file pages mapped in: LMDB's map), peak RSS;
- on the backlog: 20,000 more sends, then 20,000 receive+acks from the head (batches of 100),
  with the largest RSS seen while draining; then the same on an empty queue of a new store on
  the same disk, in the same process, right after (the disk's fsync rate moves 10x within
  minutes, and right after gigabytes were written the kernel writes the zeros of new segment
  files several times slower: only rates measured side by side compare); then the child kills
  itself with SIGKILL;
- reopen after the kill: seconds to open with the index, RSS after it, and both rates again
  (backlog, then an empty store), as a store that was not just filled sees them;
- (one queue) rebuild: the index deleted, seconds to open, as records/s against a plain
  read + CRC + unpack loop over the same segment files, and the peak RSS of the rebuild.

Targets (issue 12): RSS <= 300 MB at every size; RSS at the largest size <= 1.5x RSS at the
smallest; reopen <= 3 s; rebuild >= 0.5 of the plain loop at 10M (at small sizes most records
are the rate runs' deliveries and acks, which the Python fold takes: about 0.18 of the plain
loop); backlog rates >= 0.8 of empty.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

BODY = os.urandom(1024)
SPOT = 20_000  # messages sent, then received and acked, for the throughput figures


def rss_mb() -> float:
    """Resident set size of this process now, MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def rss_split_mb() -> Dict[str, float]:
    """This process's resident memory now, MB, split into its own (``anon``: heap, Python
    objects) and file-backed pages mapped in (``file``: LMDB's map, shared libraries), from
    ``/proc/self/status``; empty where that file does not exist."""
    out: Dict[str, float] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _sep, value = line.partition(":")
                if key in ("RssAnon", "RssFile"):
                    out[key[3:].lower()] = int(value.split()[0]) / 1e3
    except OSError:
        pass
    return out


def peak_mb() -> float:
    """Peak resident set size of this process, MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def _queues(n: int) -> List[str]:
    return ["q"] if n == 1 else [f"q{i:03d}" for i in range(n)]


def _rates(broker: Any, queues: List[str], out: Dict[str, Any], prefix: str) -> None:
    """Send SPOT messages, then receive+ack SPOT, spread over ``queues``; rates in ``out``."""
    from mqstore.engine import Message
    per = SPOT // len(queues)
    with broker.session() as s:
        start = time.perf_counter()
        for name in queues:
            for _ in range(per // 100):
                s.send_many(name, [Message(BODY) for _ in range(100)])
        out[f"{prefix}send_rate"] = per * len(queues) / (time.perf_counter() - start)
        draining = rss_mb()
        start = time.perf_counter()
        for name in queues:
            c = s.create_consumer(name, window=1000)
            got = 0
            while got < per:
                batch = c.receive_many(min(100, per - got), timeout=5)
                s.ack_many(batch)
                got += len(batch)
                draining = max(draining, rss_mb())
            c.close()
        out[f"{prefix}receive_rate"] = per * len(queues) / (time.perf_counter() - start)
        out[f"{prefix}draining_rss_mb"] = draining


def _empty_rates(directory: str, out: Dict[str, Any]) -> None:
    """Send and receive+ack rates on the one queue of a new store at ``directory``, in
    ``out`` as ``empty_send_rate`` and ``empty_receive_rate``."""
    from mqstore.engine import Broker, QueueConfig
    with Broker.open(directory, expiry_scan_ms=0) as b:
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))
        _rates(b, ["q"], out, "empty_")
    shutil.rmtree(directory, ignore_errors=True)


def child_fill(directory: str, n: int, nqueues: int) -> Dict[str, Any]:
    """Fill ``n`` messages over ``nqueues`` queues, measure on the backlog, then SIGKILL."""
    from mqstore.engine import Broker, Message, QueueConfig
    out: Dict[str, Any] = {}
    b = Broker.open(directory, expiry_scan_ms=0)
    queues = _queues(nqueues)
    for name in queues:
        b.create_address(name)
        b.create_queue(QueueConfig(name, name))
    start = time.perf_counter()
    with b.session() as s:
        sent = 0
        while sent < n:
            k = min(1000, n - sent)
            s.send_many(queues[(sent // 1000) % nqueues], [Message(BODY) for _ in range(k)])
            sent += k
    out["fill_rate"] = n / (time.perf_counter() - start)
    out["rss_mb"] = rss_mb()
    out["rss_split_mb"] = rss_split_mb()
    out["peak_mb"] = peak_mb()
    _rates(b, queues, out, "backlog_")
    _empty_rates(directory.rstrip("/") + "-empty", out)
    out["memory"] = b.statistics().memory.__dict__
    out["count"] = sum(b.queue_info(q).message_count for q in queues)
    print(json.dumps(out), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    return out  # pragma: no cover


def child_reopen(directory: str) -> Dict[str, Any]:
    """Open (after the kill) and measure; close cleanly."""
    from mqstore.engine import Broker
    start = time.perf_counter()
    b = Broker.open(directory, expiry_scan_ms=0)
    out = {"open_s": time.perf_counter() - start, "rss_mb": rss_mb(), "peak_mb": peak_mb(),
           "rss_split_mb": rss_split_mb(),
           "index": b.recovery_report.index,
           "count": sum(b.queue_info(q).message_count for q in b.queue_names())}
    _rates(b, sorted(b.queue_names()), out, "backlog_")
    b.close()
    _empty_rates(directory.rstrip("/") + "-empty", out)
    return out


def child_rebuild(directory: str) -> Dict[str, Any]:
    """Delete the index, open (a rebuild), and run the plain loop over the same segments."""
    from mqstore.engine import Broker
    shutil.rmtree(os.path.join(directory, "index"))
    start = time.perf_counter()
    b = Broker.open(directory, expiry_scan_ms=0)
    elapsed = time.perf_counter() - start
    records = b.recovery_report.replayed_records
    out = {"rebuild_s": elapsed, "rebuild_rate": records / elapsed, "records": records,
           "index": b.recovery_report.index, "peak_mb": peak_mb()}
    b.close()
    out["plain_rate"] = plain_scan(os.path.join(directory, "journal"))
    return out


def plain_scan(journal_dir: str) -> float:
    """Records/s of a plain read + CRC + unpack loop over a journal's segment files."""
    import msgpack
    from mqstore.journal.crc import crc32c
    header = struct.Struct("<IBBHQQQ")
    n, start = 0, time.perf_counter()
    for name in sorted(os.listdir(journal_dir)):
        if not name.endswith(".seg"):
            continue
        with open(os.path.join(journal_dir, name), "rb") as f:
            buf = f.read()
        off = 64
        while off + 32 <= len(buf):
            flen = header.unpack_from(buf, off)[0]
            if flen == 0 or off + flen > len(buf):
                break
            if crc32c(memoryview(buf)[off:off + flen - 4]) == \
                    int.from_bytes(buf[off + flen - 4:off + flen], "little"):
                msgpack.unpackb(buf[off + 32:off + flen - 4], raw=False)
                n += 1
            off += flen
    return n / (time.perf_counter() - start)


CHILDREN: Dict[str, Callable[..., Dict[str, Any]]] = {
    "fill": child_fill, "reopen": child_reopen, "rebuild": child_rebuild}


def _child_json(module: str, kind: str, *args: Any) -> Dict[str, Any]:
    """Run ``python -m module kind args...`` and return the last JSON line it printed.

    Raises:
        RuntimeError: it printed none (its stderr's end is in the message).
    """
    proc = subprocess.run([sys.executable, "-m", module, kind, *[str(a) for a in args]],
                          capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"bench child {kind} failed: {proc.stderr[-2000:]}")
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def child_main(children: Dict[str, Callable[..., Any]]) -> None:
    """A bench child's entry point (``_child_json``'s other side): ``python -m module kind
    args...`` runs ``children[kind](args[0], *ints)`` and prints its result as one JSON line."""
    result = children[sys.argv[1]](sys.argv[2], *[int(a) for a in sys.argv[3:]])
    print(json.dumps(result), flush=True)


def _child(kind: str, *args: Any) -> Dict[str, Any]:
    return _child_json("mqstore.tools.bench.memory", kind, *args)


@dataclass(frozen=True)
class Row:
    """The figures of one backlog size and layout."""

    size: int
    queues: int
    fill: Dict[str, Any]
    reopen: Dict[str, Any]
    rebuild: Optional[Dict[str, Any]]

    def ratio(self, phase: str, rate: str) -> float:
        """``rate`` (``send_rate``, ``receive_rate``) on the backlog / on the empty store
        measured next to it, in ``phase`` (``fill``, ``reopen``)."""
        got = getattr(self, phase)
        return float(got["backlog_" + rate] / got["empty_" + rate])


def run(sizes: List[int], directory: Optional[str], progress: Callable[[str], None]
        ) -> List[Row]:
    """Every size, one queue then 100 queues."""
    rows = []
    for size in sizes:
        for nq in (1, 100):
            tmp = tempfile.mkdtemp(prefix="mqstore-bench-mem-", dir=directory)
            try:
                progress(f"{size:,} messages, {nq} queue(s): filling")
                fill = _child("fill", os.path.join(tmp, "s"), size, nq)
                progress(f"{size:,} messages, {nq} queue(s): reopening")
                reopen = _child("reopen", os.path.join(tmp, "s"))
                rebuild = None
                if nq == 1:
                    progress(f"{size:,} messages: rebuilding the index")
                    rebuild = _child("rebuild", os.path.join(tmp, "s"))
                rows.append(Row(size, nq, fill, reopen, rebuild))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return rows


if __name__ == "__main__":
    child_main(CHILDREN)
