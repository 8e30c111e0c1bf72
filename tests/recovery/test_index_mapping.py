"""The index gives back the pages of its own memory map only (``LmdbIndex._unmap``): two stores
in one process whose paths end the same way (``/x/tmp/s`` and ``/tmp/s``) once made the second
madvise(MADV_DONTNEED) the whole span between the two maps, zeroing the process's heap (a
segfault, found running Celery on a relative store path)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from mqstore.engine import Broker, Message, QueueConfig
from mqstore.recovery.index import mapped_ranges

ROOT = Path(__file__).resolve().parents[2]


def paths(tmp_path: Path) -> tuple:
    """Two store directories, the first's path ending with the whole of the second's."""
    second = tmp_path / "s"
    first = tmp_path / "other" / str(second).lstrip("/")
    return str(first), str(second)


def test_a_store_maps_only_its_own_index_file(tmp_path: Path) -> None:
    first, second = paths(tmp_path)
    a, b = Broker.open(first), Broker.open(second)
    try:
        mine = mapped_ranges(os.path.join(second, "index", "data.mdb"))
        theirs = mapped_ranges(os.path.join(first, "index", "data.mdb"))
        assert mine and theirs
        assert all(hi <= lo2 or hi2 <= lo for lo, hi in mine for lo2, hi2 in theirs)
    finally:
        a.close()
        b.close()


def test_two_stores_with_paths_ending_alike_work_side_by_side(tmp_path: Path) -> None:
    first, second = paths(tmp_path)
    script = textwrap.dedent(f"""
        from mqstore.engine import Broker, Message, QueueConfig
        brokers = [Broker.open({first!r}), Broker.open({second!r})]
        for round in range(3):
            for b in brokers:
                if round == 0:
                    b.create_address("q")
                    b.create_queue(QueueConfig("q", "q"))
                with b.session() as s:
                    s.send_many("q", [Message(b"x" * 100) for _ in range(200)])
                b.checkpoint()
        for b in brokers:
            assert b.queue_info("q").message_count == 600
            b.close()
        print("ok")
    """)
    got = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert got.returncode == 0 and got.stdout.strip() == "ok", got.stderr[-2000:]
    with Broker.open(first) as b:  # and both stores are whole
        assert b.queue_info("q").message_count == 600
    with Broker.open(second) as b, b.session() as s:
        s.send("q", Message(b"more"))
        assert b.queue_info("q").message_count == 601
        assert QueueConfig  # (imported for the child's sake too)
