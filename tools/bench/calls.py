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
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

from mqstore.compiled import build

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


def workload(broker: Any, count: int) -> None:
    """``count`` messages (a multiple of 100) through queue ``q`` of ``broker``:
    ``send_many`` of 100, then ``receive_many`` and ``ack_many`` until the 100 are back."""
    from mqstore.engine import Message

    with broker.session() as s:
        c = s.create_consumer("q")
        for _ in range(count // BATCH):
            s.send_many("q", [Message(BODY) for _ in range(BATCH)])
            got = 0
            while got < BATCH:
                ds = c.receive_many(BATCH - got, timeout=1)
                s.ack_many(ds)
                got += len(ds)


def instructions(messages: int, persist: bool, directory: Optional[str] = None,
                 valgrind: str = "valgrind") -> float:
    """CPU instructions per message on the same workload, counted by valgrind's callgrind
    (every thread; repeatable where CPU time is not, so a change is measured without the
    disk's or the machine's noise): a child process runs ``messages`` (a multiple of 100),
    another none, after the same warm-up; the difference over ``messages``. The child's index
    is in memory (LMDB's map does not fit valgrind's address space); the journal is on
    ``directory`` (default: tmpfs when there is one).

    Raises:
        FileNotFoundError: ``valgrind`` is not installed.
        RuntimeError: a child failed (its last output lines said why).
    """
    totals = []
    for n in (0, messages):
        tmp = _scratch(directory)
        try:
            done = subprocess.run([valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null",
                                   sys.executable, "-m", "mqstore.tools.bench.calls", str(n),
                                   "1" if persist else "0", tmp],
                                  capture_output=True, text=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        found = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode != 0 or found is None:
            raise RuntimeError(f"the counted child failed: {done.stderr[-800:]}")
        totals.append(int(found.group(1)))
    return (totals[1] - totals[0]) / messages


def _child(messages: int, persist: bool, directory: str) -> None:
    """``instructions``'s child: the warm-up and ``messages`` more, index in memory."""
    from mqstore.engine import Broker, QueueConfig
    from mqstore.recovery import MemoryIndex

    b = Broker.open(os.path.join(directory, "s"), expiry_scan_ms=0, index=MemoryIndex(),
                    persist_delivery_count_before_delivery=persist)
    b.create_address("q")
    b.create_queue(QueueConfig("q", "q"))
    workload(b, WARMUP)
    workload(b, messages)
    b.close()


def measure(messages: int, persist: bool, directory: Optional[str] = None,
            top: int = 12) -> CallsFigure:
    """Figures of the batch path for ``messages`` messages (a multiple of 100; at least 100)
    with ``persist_delivery_count_before_delivery=persist``, in a scratch store that is
    removed afterwards."""
    from mqstore.engine import Broker, QueueConfig

    n = max(BATCH, messages - messages % BATCH)
    tmp = _scratch(directory)
    try:
        b = Broker.open(os.path.join(tmp, "s"), expiry_scan_ms=0,
                        persist_delivery_count_before_delivery=persist)
        b.create_address("q")
        b.create_queue(QueueConfig("q", "q"))

        def run(count: int) -> None:
            workload(b, count)

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


def show(console: Any, messages: int, directory: Optional[str], top: int,
         count_instructions: bool) -> None:
    """``mqstore bench calls``'s output on ``console`` (a rich ``Console``): per setting, the
    functions called most, then one line of figures each (never wrapped: what a script
    greps), then, with ``count_instructions``, one line of ``instructions`` each."""
    from rich.table import Table

    with console.status("measuring...") as status:
        figures = run(messages, directory, top, lambda m: status.update(m))
    for f in figures:
        t = Table(title=f"persist_delivery_count_before_delivery={f.persist}: the functions "
                        f"called most")
        t.add_column("calls/msg", justify="right", no_wrap=True)
        t.add_column("function")
        for calls, name in f.top:
            t.add_row(f"{calls:.1f}", name)
        console.print(t)
    if build() == "compiled":
        console.print("this install is compiled (mypyc): cProfile does not see the compiled "
                      "modules' functions, so the calls are the interpreted ones only; "
                      "MQSTORE_PURE=1 mqstore bench calls counts every step (the pure build)",
                      soft_wrap=True)
    for f in figures:
        console.print(f"persist_delivery_count_before_delivery={f.persist}"
                      f"{' (the default)' if not f.persist else ''}: "
                      f"{f.calls_per_message:.0f} calls per message"
                      f"{' (target <= 80)' if not f.persist else ''}, "
                      f"{f.cpu_us:.1f} µs CPU per message without the profiler, "
                      f"{f.messages:,} messages", soft_wrap=True)
    if count_instructions:
        n = max(BATCH, messages - messages % BATCH)
        for persist in (False, True):
            with console.status(f"callgrind, persist={persist}..."):
                count = instructions(n, persist, directory)
            console.print(f"persist_delivery_count_before_delivery={persist}: "
                          f"{count:,.0f} instructions per message (valgrind callgrind, every "
                          f"thread, index in memory), {n:,} messages", soft_wrap=True)


if __name__ == "__main__":  # instructions' child: MESSAGES PERSIST(0/1) DIRECTORY
    _child(int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3])
