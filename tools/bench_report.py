"""``mqstore bench report``: ``mqstore spark-report`` at several journal sizes, in one run: wall
time (also as a ratio to a plain one-process scan of the same journal, since the disk's speed
varies), and the peak resident memory of the driver's Python process and of the JVM (in local
mode the JVM is the driver and the executors), sampled from ``/proc`` (Linux).

The journals are ``tools.bench_spark.build_journal``'s: messages to three subscriptions, half of
them acked on one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional


@dataclass(frozen=True)
class ReportFigures:
    """One size's run: records, journal bytes, seconds, peaks in bytes."""

    records: int
    journal_bytes: int
    report_s: float
    plain_s: float
    driver_peak: int  # the driver's Python process
    jvm_peak: int  # the JVM (driver and executors in local mode)
    workers_peak: int  # Spark's Python workers, summed at each sample


def _rss(pid: int) -> int:
    """Resident bytes of one process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _children(pid: int) -> List[int]:
    out: List[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class _Sampler(threading.Thread):
    """Samples the process tree under ``pid`` every ``every`` seconds; keeps the peaks."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.peaks: Dict[str, int] = {"driver": 0, "jvm": 0, "workers": 0}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            tree, todo = [], [self.pid]
            while todo:
                p = todo.pop()
                tree.append(p)
                todo += _children(p)
            jvm = workers = 0
            for p in tree[1:]:
                if "java" in _cmdline(p).split(" ")[0]:
                    jvm += _rss(p)
                else:
                    workers += _rss(p)
            sample = {"driver": _rss(self.pid), "jvm": jvm, "workers": workers}
            for k, v in sample.items():
                self.peaks[k] = max(self.peaks[k], v)
            self.done.wait(self.every)


def run(sizes: List[int], master: str, directory: Optional[str],
        progress: Callable[[str], None]) -> List[ReportFigures]:
    """Build each journal, scan it once in one process, then time ``mqstore spark-report`` on
    it in a child process (a new Spark session each), sampling memory."""
    from .bench_spark import build_journal
    from .spark.columns import plain_scan
    out = []
    for size in sizes:
        tmp = tempfile.mkdtemp(prefix="mqstore-report-bench-", dir=directory)
        try:
            written = build_journal(tmp, size, lambda n: None)
            journal = os.path.join(tmp, "journal")
            size_b = sum(os.path.getsize(os.path.join(journal, f)) for f in os.listdir(journal))
            progress(f"{written:,} records written; plain scan")
            t0 = time.perf_counter()
            plain_scan(tmp)
            plain_s = time.perf_counter() - t0
            progress(f"{written:,} records: spark-report")
            t0 = time.perf_counter()
            child = subprocess.Popen(
                [sys.executable, "-m", "mqstore.tools.cli", "spark-report", tmp,
                 "--out", os.path.join(tmp, "report"), "--master", master],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                env=dict(os.environ, MQSTORE_CATALOGUE=os.path.join(tmp, "catalogue")))
            sampler = _Sampler(child.pid)
            sampler.start()
            log, _ = child.communicate()
            report_s = time.perf_counter() - t0
            sampler.done.set()
            sampler.join()
            if child.returncode != 0:
                raise RuntimeError(f"spark-report failed on {written:,} records:\n"
                                   + log.decode(errors="replace")[-3000:])
            p = sampler.peaks
            out.append(ReportFigures(written, size_b, report_s, plain_s, p["driver"], p["jvm"],
                                     p["workers"]))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out
