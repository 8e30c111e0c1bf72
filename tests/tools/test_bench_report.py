"""``mqstore bench report``: the memory sampler sees a child's resident memory through /proc,
and the command prints time, ratio and peaks per journal size (the report runs themselves are
the benchmark's, not the tests')."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from mqstore.tools.bench import proctree, report as bench_report
from mqstore.tools.cli import main


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_sampler_sees_the_childs_peak_and_its_children() -> None:
    code = ("import subprocess, sys, time; b = bytearray(80 << 20); "
            "c = subprocess.Popen([sys.executable, '-c', "
            "'b = bytearray(40 << 20); import time; time.sleep(1.0)']); time.sleep(1.2); c.wait()")
    child = subprocess.Popen([sys.executable, "-c", code])
    sampler = proctree.Sampler(child.pid, every=0.05)
    sampler.start()
    child.wait()
    sampler.done.set()
    sampler.join()
    assert sampler.peaks["driver"] >= 80 << 20
    assert sampler.peaks["workers"] >= 40 << 20  # a descendant that is not a JVM


def test_the_command_prints_each_size_and_the_drivers_growth(monkeypatch) -> None:
    rows = [bench_report.ReportFigures(2_001_004, 336_000_000, 84.1, 3.6, 136 << 20, 2339 << 20,
                                       1128 << 20, 5.1, 69.7),
            bench_report.ReportFigures(10_000_504, 1_678_000_000, 232.2, 15.9, 140 << 20,
                                       3023 << 20, 1155 << 20, 25.1, 0.0)]
    monkeypatch.setattr(bench_report, "run", lambda sizes, master, d, progress: rows)
    out = CliRunner().invoke(main, ["bench", "report"], env={"COLUMNS": "80"}).output
    for text in ("2,001,004", "10,000,504", "84.1", "23.4", "69.7", "2,339", "3,023"):
        assert text in out, text
    assert "1.03 (journal 5x larger)" in out
    assert max(len(line) for line in out.splitlines()) <= 80
