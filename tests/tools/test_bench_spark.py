"""``mqstore bench spark`` prints each query's wall and CPU seconds and the LSN range's CPU
share against its target (the runs themselves are the benchmark's, not the tests')."""

from __future__ import annotations

import dataclasses

from click.testing import CliRunner

from mqstore.tools.bench import spark as bench_spark
from mqstore.tools.cli import main


def _figures(range_cpu: float) -> bench_spark.SparkFigures:
    return bench_spark.SparkFigures(
        records=2_001_004, rows=2_001_004, bytes=336_000_000, plain_s=3.4, spark_s=5.2,
        spark_kinds_s=2.9, spark_range_s=0.4, range_rows=20_010, parquet_export_s=5.1,
        parquet_bytes=60_000_000, parquet_s=0.9, plain_cpu=3.3, spark_cpu=10.4, kinds_cpu=5.5,
        range_cpu=range_cpu, parquet_range_s=0.3)


def test_the_command_prints_cpu_and_the_ranges_share(monkeypatch) -> None:
    for range_cpu, verdict in ((0.31, "ok"), (0.95, "ABOVE")):
        monkeypatch.setattr(bench_spark, "run",
                            lambda records, master, d, progress, c=range_cpu: _figures(c))
        out = CliRunner().invoke(main, ["bench", "spark"], env={"COLUMNS": "100"}).output
        assert f"CPU: {range_cpu / 10.4:.3f} (target <= 0.05: {verdict})" in out, out
        for text in ("CPU s", "10.4", "384,808", "20,010"):
            assert text in out, text


def test_a_journal_of_one_segment_says_it_has_no_parquet_copy(monkeypatch) -> None:
    one = dataclasses.replace(_figures(0.31), parquet_bytes=0, parquet_export_s=0.1,
                              parquet_s=0.0, parquet_range_s=0.0)
    monkeypatch.setattr(bench_spark, "run", lambda records, master, d, progress: one)
    out = CliRunner().invoke(main, ["bench", "spark"], env={"COLUMNS": "100"}).output
    assert "Parquet copy: none" in out and "the same groupBy on it" not in out, out
