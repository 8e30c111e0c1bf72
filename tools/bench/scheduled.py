"""``mqstore bench scheduled``: RAM and speed with many scheduled messages, one run.

Every phase runs in a fresh child process, so each RSS figure is that phase's own. For each
size N, on an injected clock:

- fill: N durable 100-byte messages sent in batches of 1,000 to one queue, each scheduled at a
  different time in the next day (in an order that is not due order); the send rate, RSS after
  filling and the part of it that is the process's own memory (anon: not the index pages LMDB
  maps in, which are the kernel's page cache), the references the broker holds in RAM
  (``statistics().memory.references``), the queue's ``scheduled_count``; then the child kills
  itself with SIGKILL;
- reopen: seconds to open after the kill and RSS after it; then the clock moves past the last
  due time and every message is received and acked in batches of 100: the rate, and the largest
  RSS (and anon RSS) while draining, next to the same drain of a plain (never scheduled)
  backlog of the same size in a new store on the same disk, measured right after in the same
  process (the disk's fsync rate moves 10x within minutes: only rates side by side compare).
  The drained order is checked to be due order.

Target (issue 13): "a million scheduled messages cost no more RAM than the budget": the
process's own memory (anon RSS) while sending or draining the largest size exceeds that of the
smallest by less than the memory budget (64 MiB), draining them takes no more of it than
draining a plain backlog of the same size (within 10%), and no reference is in RAM while
scheduled. The bench holds no per-message state of its own (due times are computed, the drained
order is checked as it comes), so the figures are the broker's.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .memory import _child_json, child_main, peak_mb, rss_mb, rss_split_mb

T0 = 1_700_000_000_000  # the injected clock's start, ms since the epoch
DAY = 86_400_000
BODY = os.urandom(100)


def _due(i: int, n: int) -> int:
    """The due time of the i-th of N messages sent: N distinct times in the next day, in an
    order that is not due order (a stride permutation: no list of N held by the bench, whose
    own RAM would count in the figures)."""
    stride = next(p for p in (1_000_003, 1_000_033, 1_000_037) if math.gcd(p, n) == 1)
    return T0 + 1 + (((i * stride) % n) * DAY) // max(n, 1)


def child_fill(directory: str, n: int) -> Dict[str, Any]:
    """Send N scheduled messages, measure, SIGKILL."""
    from mqstore.engine import Broker, Message, QueueConfig
    b = Broker.open(directory, expiry_scan_ms=0, clock=lambda: T0)
    b.create_address("q")
    b.create_queue(QueueConfig("q", "q"))
    start = time.perf_counter()
    with b.session() as s:
        for i in range(0, n, 1000):
            due = [_due(k, n) for k in range(i, min(i + 1000, n))]
            s.send_many("q", [Message(BODY, {"at": at}, scheduled_delivery_time=at)
                              for at in due])
    out = {"fill_rate": n / (time.perf_counter() - start), "rss_mb": rss_mb(),
           "anon_mb": rss_split_mb().get("anon", 0.0),
           "peak_mb": peak_mb(), "references": b.statistics().memory.references,
           "scheduled": b.queue_info("q").scheduled_count}
    print(json.dumps(out), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    return out  # pragma: no cover


def _drain(b: Any, out: Dict[str, Any], prefix: str) -> Tuple[int, bool]:
    """Receive and ack everything on queue ``q``; how many, and whether their due times
    (property ``at``) came in order."""
    seen, last, in_order = 0, -1, True
    most = rss_mb()
    most_anon = rss_split_mb().get("anon", 0.0)
    start = time.perf_counter()
    with b.session() as s:
        c = s.create_consumer("q", window=1000)
        while True:
            got = c.receive_many(100, timeout=0)
            if not got:
                break
            for d in got:
                at = int(d.message.properties.get("at", 0))
                in_order = in_order and at >= last
                last = at
            seen += len(got)
            s.ack_many(got)
            if seen % 10_000 < 100:
                most = max(most, rss_mb())
                most_anon = max(most_anon, rss_split_mb().get("anon", 0.0))
    out[prefix + "drain_rate"] = seen / (time.perf_counter() - start)
    out[prefix + "drain_rss_mb"] = max(most, rss_mb())
    out[prefix + "drain_anon_mb"] = max(most_anon, rss_split_mb().get("anon", 0.0))
    return seen, in_order


def child_drain(directory: str, n: int) -> Dict[str, Any]:
    """Reopen after the kill, move the clock past every due time, drain; then the same drain
    of a plain backlog of N in a new store next to it."""
    from mqstore.engine import Broker, Message, QueueConfig
    now = [T0]
    start = time.perf_counter()
    b = Broker.open(directory, expiry_scan_ms=0, clock=lambda: now[0])
    out: Dict[str, Any] = {"open_s": time.perf_counter() - start, "rss_mb": rss_mb(),
                           "scheduled": b.queue_info("q").scheduled_count}
    now[0] = T0 + DAY + 1
    seen, in_order = _drain(b, out, "scheduled_")
    out["in_due_order"] = in_order and seen == n
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
            fill = _child_json(__name__, "fill", os.path.join(tmp, "s"), size)
            progress(f"{size:,} scheduled messages: reopening and draining")
            drain = _child_json(__name__, "drain", os.path.join(tmp, "s"), size)
            rows.append({"size": size, "fill": fill, "drain": drain})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return rows


if __name__ == "__main__":
    child_main(CHILDREN)
