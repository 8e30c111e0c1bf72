"""``mqstore bench selectors``: what a consumer selector costs on a queue larger than its RAM head
(ActiveMQ massive queues: a selector must not read the backlog again for every delivery), as ratios
measured in one run.

For each backlog size: a durable queue on a small RAM budget (so it pages: a head of a few
hundred references, the rest in the live index) gets that many 200-byte messages, one in
``every`` of them red. A consumer with the selector ``color = 'red'`` then takes and acks
every red one; next to it, a plain consumer takes and acks as many from the head. Figures are
process CPU time (the disk's fsync rate, which swings 10x, does not enter them) and the index
rows read while the selector drained its messages.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

from mqstore.engine import Broker, Message, QueueConfig

BUDGET = 4 << 20  # bytes: far smaller than the backlogs, so the queue pages
BATCH = 1000


def _fill(b: Broker, size: int, every: int) -> None:
    with b.session() as s:
        for start in range(0, size, BATCH):
            s.send_many("a", [Message(b"x" * 200,
                                      {"color": "red" if i % every == every // 2 else "blue"})
                              for i in range(start, min(size, start + BATCH))])


def _drain(b: Broker, selector: Optional[str], limit: int) -> int:
    """Take and ack up to ``limit`` messages (all matching ones with a selector)."""
    taken = 0
    with b.session() as s:
        c = s.create_consumer("q", window=BATCH, selector=selector)
        while taken < limit:
            got = c.receive_many(min(100, limit - taken), timeout=0)
            if not got:
                break
            s.ack_many(got)
            taken += len(got)
    return taken


def run(sizes: List[int], directory: Optional[str], every: int = 100,
        progress: Callable[[str], None] = lambda _m: None) -> List[Dict[str, Any]]:
    """One row per backlog size: deliveries, CPU µs per delivery with the selector and
    without, index rows read by the selector per message of the backlog."""
    rows = []
    for size in sizes:
        where = tempfile.mkdtemp(prefix="mqstore-bench-sel-", dir=directory)
        try:
            with Broker.open(where, memory_budget=BUDGET, expiry_scan_ms=0) as b:
                b.create_address("a")
                b.create_queue(QueueConfig("q", "a"))
                progress(f"{size:,}: filling")
                _fill(b, size, every)
                reader = b.queues["q"].reader
                assert reader is not None
                progress(f"{size:,}: the selector drains its messages")
                read0, t0 = reader.rows_read, time.process_time()
                reds = _drain(b, "color = 'red'", size)
                sel_cpu, sel_rows = time.process_time() - t0, reader.rows_read - read0
                progress(f"{size:,}: a plain consumer takes as many")
                t0 = time.process_time()
                plain = _drain(b, None, reds)
                plain_cpu = time.process_time() - t0
            rows.append({"size": size, "deliveries": reds, "plain": plain,
                         "selector_us": sel_cpu / max(reds, 1) * 1e6,
                         "plain_us": plain_cpu / max(plain, 1) * 1e6,
                         "rows_per_message": sel_rows / size})
        finally:
            shutil.rmtree(where, ignore_errors=True)
    return rows
