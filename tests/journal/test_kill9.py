"""kill -9 of a real writer process at random moments, 50 cycles on one directory: each after
a random number of batches it reported durable (a state, whatever the machine's load).

After each kill the journal is reopened: its records must be exactly 0..m-1 in order (a prefix
of what was appended, no duplicates) and contain every number the child reported durable.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from mqstore.journal import Journal, JournalOptions
from tests.journal.crashkit import kill_after_lines

CYCLES = 50
ROOT = str(Path(__file__).resolve().parents[2])


def test_kill9_cycles(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    rng = random.Random(9)
    reported = -1
    env = dict(os.environ, PYTHONPATH=ROOT)
    total_torn = 0
    for cycle in range(CYCLES):
        child = subprocess.Popen([sys.executable, "-m", "tests.journal.kill_child", d,
                                  str(cycle)], stdout=subprocess.PIPE, cwd=ROOT, env=env)
        assert child.stdout is not None
        assert child.stdout.readline().startswith(b"start")
        for line in kill_after_lines(child, rng.randint(1, 150)):  # batches made durable
            if line.startswith("durable"):
                reported = max(reported, int(line.split()[1]))
        with Journal.open(d, JournalOptions(segment_size=256 * 1024)) as j:
            numbers = [r.payload["n"] for r in j.records()]
            total_torn += j.report.torn_bytes
        assert numbers == list(range(len(numbers))), f"cycle {cycle}: not a prefix"
        assert len(numbers) > reported, f"cycle {cycle}: lost {reported} reported durable"
    assert reported > 100  # the children really wrote
