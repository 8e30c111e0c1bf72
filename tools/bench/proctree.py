"""A process and its descendants, read from ``/proc`` (Linux): resident memory per role and CPU
seconds, for the Spark benchmarks, where the work runs in a JVM (the driver and, in local mode,
the executors) and in Python workers, none of them the calling process.

On another platform every figure reads 0 (the benchmarks say so rather than fail), but
``Timed``, which falls back to this process's own CPU time.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Dict, List

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def rss(pid: int) -> int:
    """Resident bytes of one process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def children(pid: int) -> List[int]:
    """The live children of ``pid`` (every thread's), [] once it is gone."""
    out: List[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def tree(pid: int) -> List[int]:
    """``pid`` first, then its live descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children(p)
    return out


def cmdline(pid: int) -> str:
    """The command line of ``pid``, arguments joined by spaces ("" once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def is_jvm(pid: int) -> bool:
    return "java" in cmdline(pid).split(" ")[0]


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of ``pid`` and its descendants: the live ones' own, plus
    what each has collected from children that ended (a Python worker that exits is counted in
    the daemon that forked it)."""
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the command: state is field 3, utime..cstime are fields 14-17
        total += sum(int(x) for x in fields[11:15])
    return total / _TICKS


class Timed:
    """``with Timed() as t:`` gives ``t.wall`` and ``t.cpu`` (seconds) of the block: CPU of this
    process and its descendants on Linux, of this process alone elsewhere."""

    @staticmethod
    def _cpu() -> float:
        if os.path.exists("/proc/self/stat"):
            return cpu_seconds(os.getpid())
        return time.process_time()

    def __enter__(self) -> "Timed":
        self.t0, self.c0 = time.perf_counter(), self._cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = self._cpu() - self.c0


class Sampler(threading.Thread):
    """Samples the process tree under ``pid`` every ``every`` seconds and keeps the peak
    resident bytes of the process itself (``driver``), of its JVMs (``jvm``) and of every
    other descendant summed (``workers``). ``done.set()`` then ``join()`` to stop it."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.peaks: Dict[str, int] = {"driver": 0, "jvm": 0, "workers": 0}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            jvm = workers = 0
            for p in tree(self.pid)[1:]:
                if is_jvm(p):
                    jvm += rss(p)
                else:
                    workers += rss(p)
            sample = {"driver": rss(self.pid), "jvm": jvm, "workers": workers}
            for k, v in sample.items():
                self.peaks[k] = max(self.peaks[k], v)
            self.done.wait(self.every)
