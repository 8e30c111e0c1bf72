"""``mqstore bench selectors`` (issue 15, seed 003) at small sizes."""

from __future__ import annotations

from pathlib import Path


def test_bench_selectors_reads_each_row_about_once(tmp_path: Path) -> None:
    """``mqstore bench selectors`` at small sizes: every matching message drained, the index
    read about once per queued message (the figures themselves are the command's to print)."""
    from mqstore.tools.bench.selectors import run as bench
    rows = bench([3000, 6000], str(tmp_path), 50)
    assert [r["deliveries"] for r in rows] == [60, 120]
    assert [r["plain"] for r in rows] == [60, 120]
    assert all(r["rows_per_message"] < 1.5 for r in rows), rows
