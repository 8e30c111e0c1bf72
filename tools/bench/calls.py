"""``mqstore bench calls``: Python function calls per message on the engine's batch path (the
step count issue 38 drives down; its target is <= 80 send+deliver+ack), and CPU per message,
measured in one run.

The workload is the one ``bench e2e`` batches: durable 1 KiB messages, ``send_many`` of 100,
``receive_many`` and ``ack_many`` until the 100 are back, on a store on tmpfs when the machine
has one (what is counted is the engine's work, not the disk's). It runs once unprofiled (CPU
time per message) and once under cProfile (its total calls divided by the messages, and the
functions that make most of them). Both settings of ``persist_delivery_count_before_delivery``
are measured, since each journals a different number of records per message.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

BATCH = 100
BODY = b"x" * 1024
WARMUP = 2000  # messages sent and acked before anything is measured


@dataclass(frozen=True)
class CallsFigure:
    """One setting's figures.

    Attributes:
        persist: ``persist_delivery_count_before_delivery``. messages: how many were counted.
        calls_per_message: cProfile's total calls / messages. cpu_us: process CPU time per
            message without the profiler, µs. top: the functions with the most calls, as
            ``(calls per message, "module:line(function)")``, most first.
    """

    persist: bool
    messages: int
    calls_per_message: float
    cpu_us: float
    top: List[Tuple[float, str]]


def _scratch(directory: Optional[str]) -> str:
    base = directory or ("/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    return tempfile.mkdtemp(prefix="mq-calls-", dir=base)


def measure(messages: int, persist: bool, directory: Optional[str] = None,
            top: int = 12) -> CallsFigure:
    """Figures of the batch path for ``messages`` messages (a multiple of 100; at least 100)
    with ``persist_delivery_count_before_delivery=persist``, in a scratch store that is
    removed afterwards."""
    from mqstore.engine import Broker, Message, QueueConfig

    n = max(BATCH, messages - messages % BATCH)
    tmp = _scratch(directory)
    try:
        b = Broker.open(os.path.join(tmp, "s"), expiry_scan_ms=0,
                        persist_delivery_count_before_delivery=persist)
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))

        def run(count: int) -> None:
            with b.session() as s:
                c = s.create_consumer("q")
                for _ in range(count // BATCH):
                    s.send_many("q", [Message(BODY) for _ in range(BATCH)])
                    got = 0
                    while got < BATCH:
                        ds = c.receive_many(BATCH - got, timeout=1)
                        s.ack_many(ds)
                        got += len(ds)

        run(WARMUP)
        start = time.process_time()
        run(n)
        cpu = time.process_time() - start
        profile = cProfile.Profile()
        profile.enable()
        run(n)
        profile.disable()
        b.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    stats = pstats.Stats(profile)
    rows = sorted(((calls, func) for func, (_cc, calls, _tt, _ct, _callers)
                   in stats.stats.items()),  # type: ignore[attr-defined]
                  key=lambda row: -row[0])[:top]
    named = [(calls / n, f"{os.path.basename(f[0])}:{f[1]}({f[2]})") for calls, f in rows]
    return CallsFigure(persist, n, stats.total_calls / n,  # type: ignore[attr-defined]
                       cpu / n * 1e6, named)


def run(messages: int, directory: Optional[str], top: int,
        progress: Callable[[str], None]) -> List[CallsFigure]:
    """Both settings, the default (False, Artemis's) first."""
    out = []
    for persist in (False, True):
        progress(f"persist_delivery_count_before_delivery={persist}")
        out.append(measure(messages, persist, directory, top))
    return out
