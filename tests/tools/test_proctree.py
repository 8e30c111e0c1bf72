"""``tools.bench.proctree``: CPU seconds of a process tree, read from /proc, count a live child's own
work and the work of a grandchild that has ended (what a Spark Python worker does)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mqstore.tools.bench import proctree

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_cpu_seconds_count_the_child_and_a_grandchild_that_ended() -> None:
    code = ("import subprocess, sys, time\n"
            f"subprocess.run([sys.executable, '-c', {BURN.format(s=0.6)!r}])\n"
            + BURN.format(s=0.3) + "time.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        while proctree.cpu_seconds(child.pid) < 0.85 and time.monotonic() < deadline:
            time.sleep(0.05)
        got = proctree.cpu_seconds(child.pid)
        assert 0.85 <= got < 5.0, got
        assert proctree.tree(child.pid) == [child.pid]  # the grandchild has ended
        assert proctree.cpu_seconds(2 ** 22 + 7) == 0.0  # past pid_max: no such process
    finally:
        child.kill()
        child.wait()
