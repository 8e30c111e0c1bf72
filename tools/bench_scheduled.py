"""``mqstore bench scheduled``: RAM and speed with many scheduled messages, one run.

Every phase runs in a fresh child process, so each RSS figure is that phase's own. For each
size N, on an injected clock:

- fill: N durable 100-byte messages sent in batches of 1,000 to one queue, each scheduled at a
  different time in the next day (in an order that is not due order); the send rate, RSS after
  filling, the references the broker holds in RAM (``statistics().memory.references``), the
  queue's ``scheduled_count``; then the child kills itself with SIGKILL;
- reopen: seconds to open after the kill and RSS after it; then the clock moves past the last
  due time and every message is received and acked in batches of 100: the rate, and the largest
  RSS while draining, next to the same drain of a plain (never scheduled) backlog of the same
  size in a new store on the same disk, measured right after in the same process (the disk's
  fsync rate moves 10x within minutes: only rates side by side compare). The drained order is
  checked to be due order.

Target (issue 13): "a million scheduled messages cost no more RAM than the budget": RSS at the
largest size <= 1.5x RSS at the smallest, no reference in RAM while scheduled.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

from tools.bench_memory import _child_json, peak_mb, rss_mb

T0 = 1_700_000_000_000  # the injected clock's start, ms since the epoch
DAY = 86_400_000
BODY = os.urandom(100)


def _times(n: int) -> List[int]:
    """N distinct due times in the next day, in a shuffled order (seeded)."""
    rng = random.Random(n)
    times = [T0 + 1 + (i * DAY) // max(n, 1) for i in range(n)]
    rng.shuffle(times)
    return times


def child_fill(directory: str, n: int) -> Dict[str, Any]:
    """Send N scheduled messages, measure, SIGKILL."""
    from engine import Broker, Message, QueueConfig
    b = Broker.open(directory, expiry_scan_ms=0, clock=lambda: T0)
    b.create_address("q")
    b.create_queue(QueueConfig("q", "q"))
    times = _times(n)
    start = time.perf_counter()
    with b.session() as s:
        for i in range(0, n, 1000):
            s.send_many("q", [Message(BODY, {"at": at}, scheduled_delivery_time=at)
                              for at in times[i:i + 1000]])
    out = {"fill_rate": n / (time.perf_counter() - start), "rss_mb": rss_mb(),
           "peak_mb": peak_mb(), "references": b.statistics().memory.references,
           "scheduled": b.queue_info("q").scheduled_count}
    print(json.dumps(out), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    return out  # pragma: no cover


def _drain(b: Any, out: Dict[str, Any], prefix: str) -> List[int]:
    """Receive and ack everything on queue ``q``; the due times seen, in order."""
    seen: List[int] = []
    most = rss_mb()
    start = time.perf_counter()
    with b.session() as s:
        c = s.create_consumer("q", window=1000)
        while True:
            got = c.receive_many(100, timeout=0)
            if not got:
                break
            seen += [int(d.message.properties.get("at", 0)) for d in got]
            s.ack_many(got)
            if len(seen) % 10_000 < 100:
                most = max(most, rss_mb())
    out[prefix + "drain_rate"] = len(seen) / (time.perf_counter() - start)
    out[prefix + "drain_rss_mb"] = max(most, rss_mb())
    return seen


def child_drain(directory: str, n: int) -> Dict[str, Any]:
    """Reopen after the kill, move the clock past every due time, drain; then the same drain
    of a plain backlog of N in a new store next to it."""
    from engine import Broker, Message, QueueConfig
    now = [T0]
    start = time.perf_counter()
    b = Broker.open(directory, expiry_scan_ms=0, clock=lambda: now[0])
    out: Dict[str, Any] = {"open_s": time.perf_counter() - start, "rss_mb": rss_mb(),
                           "scheduled": b.queue_info("q").scheduled_count}
    now[0] = T0 + DAY + 1
    seen = _drain(b, out, "scheduled_")
    out["in_due_order"] = seen == sorted(seen) and len(seen) == n
    b.close()
    plain = directory.rstrip("/") + "-plain"
    with Broker.open(plain, expiry_scan_ms=0) as p:
        p.create_address("q")
        p.create_queue(QueueConfig("q", "q"))
        with p.session() as s:
            for i in range(0, n, 1000):
                s.send_many("q", [Message(BODY) for _ in range(min(1000, n - i))])
        _drain(p, out, "plain_")
    shutil.rmtree(plain, ignore_errors=True)
    out["peak_mb"] = peak_mb()
    return out


CHILDREN: Dict[str, Callable[..., Dict[str, Any]]] = {"fill": child_fill, "drain": child_drain}


def run(sizes: List[int], directory: Optional[str], progress: Callable[[str], None]
        ) -> List[Dict[str, Any]]:
    """Every size: fill (then SIGKILL), reopen and drain."""
    rows = []
    for size in sizes:
        tmp = tempfile.mkdtemp(prefix="mqstore-bench-sched-", dir=directory)
        try:
            progress(f"{size:,} scheduled messages: filling")
            fill = _child_json("tools.bench_scheduled", "fill", os.path.join(tmp, "s"), size)
            progress(f"{size:,} scheduled messages: reopening and draining")
            drain = _child_json("tools.bench_scheduled", "drain", os.path.join(tmp, "s"), size)
            rows.append({"size": size, "fill": fill, "drain": drain})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return rows


if __name__ == "__main__":
    result = CHILDREN[sys.argv[1]](sys.argv[2], *[int(a) for a in sys.argv[3:]])
    print(json.dumps(result), flush=True)
