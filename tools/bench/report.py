"""``mqstore bench report``: ``mqstore spark-report`` at several journal sizes, in one run: wall
time (also as a ratio to a plain one-process scan of the same journal, since the disk's speed
varies), and the peak resident memory of the driver's Python process and of the JVM (in local
mode the JVM is the driver and the executors), sampled from ``/proc`` (Linux); then the same
report on a Parquet export of the journal's sealed segments, and the export's own time.

The journals are ``tools.bench.spark.build_journal``'s: messages to three subscriptions, half of
them acked on one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from .proctree import Sampler


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
    export_s: float = 0.0  # ``export --parquet`` of the sealed segments, one process
    parquet_report_s: float = 0.0  # the report on that export (0: nothing sealed to export)


def _timed_report(source: str, out: str, master: str) -> Tuple[float, Dict[str, int]]:
    """Run ``mqstore spark-report`` on ``source`` in a child process (its own Spark session;
    the catalogue next to ``out``), sampling memory; (seconds, peaks in bytes)."""
    t0 = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "mqstore.tools.cli", "spark-report", source, "--out", out,
         "--master", master], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=dict(os.environ, MQSTORE_CATALOGUE=out + ".catalogue"))
    sampler = Sampler(child.pid)
    sampler.start()
    log, _ = child.communicate()
    seconds = time.perf_counter() - t0
    sampler.done.set()
    sampler.join()
    if child.returncode != 0:
        raise RuntimeError(f"spark-report failed on {source}:\n"
                           + log.decode(errors="replace")[-3000:])
    return seconds, dict(sampler.peaks)


def run(sizes: List[int], master: str, directory: Optional[str],
        progress: Callable[[str], None]) -> List[ReportFigures]:
    """Build each journal, scan it once in one process, then time ``mqstore spark-report`` on
    it in a child process (a new Spark session each), sampling memory."""
    from .spark import build_journal
    from ..spark.columns import plain_scan
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
            report_s, peaks = _timed_report(tmp, os.path.join(tmp, "report"), master)
            progress(f"{written:,} records: export --parquet, and the report on it")
            from ..parquet_export import export_parquet
            parquet = os.path.join(tmp, "parquet")
            t0 = time.perf_counter()
            written_files = export_parquet(tmp, parquet).written
            export_s = time.perf_counter() - t0
            parquet_s = 0.0  # a journal of one segment has no sealed segment to export
            if written_files:
                parquet_s, _ = _timed_report(parquet, os.path.join(tmp, "report2"), master)
            out.append(ReportFigures(written, size_b, report_s, plain_s, peaks["driver"],
                                     peaks["jvm"], peaks["workers"], export_s, parquet_s))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out
