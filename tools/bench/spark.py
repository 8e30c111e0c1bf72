"""``mqstore bench spark``: Spark scan rows/s on local[2] against the plain single-process reader,
over a journal of at least 2 million records, in one run.

The journal is written straight through the journal API with the engine's record schema (an
address, a multicast queue with three subscriptions, small messages, acks), so it reads like a
real store without the cost of building it through the broker.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Callable, Optional

from mqstore.journal import Journal, JournalOptions
from mqstore.recovery import schema
from mqstore.recovery.schema import RecordKind

from .proctree import Timed


@dataclass(frozen=True)
class SparkFigures:
    """Rows, seconds and rows/s of both readers, and the journal's size."""

    records: int
    rows: int
    bytes: int
    plain_s: float
    spark_s: float
    spark_kinds_s: float = 0.0
    spark_range_s: float = 0.0  # an LSN range holding 1% of the records, every column
    range_rows: int = 0
    parquet_export_s: float = 0.0  # export --parquet of the sealed segments (one process)
    parquet_bytes: int = 0
    parquet_s: float = 0.0  # the every-column query's groupBy on the Parquet copy (0: a
    # journal of one segment has no sealed segment to export)
    # CPU seconds (user + system) of this process and its descendants (the JVM, the Python
    # workers) during each query: the figure the disk's speed swings do not move
    plain_cpu: float = 0.0
    spark_cpu: float = 0.0
    kinds_cpu: float = 0.0
    range_cpu: float = 0.0
    parquet_range_s: float = 0.0  # the LSN range's query on the Parquet copy

    @property
    def plain_rate(self) -> float:
        return self.rows / self.plain_s

    @property
    def spark_rate(self) -> float:
        return self.rows / self.spark_s


def build_journal(directory: str, records: int, progress: Callable[[int], None]) -> int:
    """Write about ``records`` records (messages and acks); return the number written."""
    j = Journal.open(os.path.join(directory, "journal"), JournalOptions(sync_policy="async"))
    j.append_many([(RecordKind.ADDRESS_ADD, schema.address_add(1, "orders", ["multicast"], False))]
                  + [(RecordKind.QUEUE_ADD, schema.queue_add(q, f"sub{q}", "orders",
                                                             "multicast", {})) for q in (2, 3, 4)])
    written, mid, batch = 4, 100, []
    while written < records:
        for _ in range(1000):
            mid += 1
            batch.append((RecordKind.MESSAGE, schema.message(
                mid, "orders", [2, 3, 4], b"x" * 100, {"customer": f"c{mid % 97}", "n": mid},
                1_700_000_000_000 + mid * 1000, 0, 4)))
            if mid % 2:
                batch.append((RecordKind.ACK, schema.ack(2, mid, "acked")))
        j.append_many(batch)
        written += len(batch)
        batch = []
        progress(written)
    j.close()
    return written


def run(records: int, master: str, directory: Optional[str],
        progress: Callable[[str], None]) -> SparkFigures:
    """Build the journal, time the plain reader, then Spark (session started beforehand)."""
    from ..spark.columns import plain_scan
    from ..spark.report import spark_session
    from ..spark import read_journal

    tmp = tempfile.mkdtemp(prefix="mqstore-spark-bench-", dir=directory)
    before = os.environ.get("MQSTORE_CATALOGUE")
    os.environ["MQSTORE_CATALOGUE"] = os.path.join(tmp, "catalogue")  # not the user's cache
    try:
        written = build_journal(tmp, records, lambda n: None)
        size = sum(os.path.getsize(os.path.join(tmp, "journal", f))
                   for f in os.listdir(os.path.join(tmp, "journal")))
        progress(f"journal written: {written:,} records")
        with Timed() as plain:
            rows = plain_scan(tmp)
        progress(f"plain reader: {rows:,} rows")
        spark = spark_session(master, "mqstore-bench")
        try:
            # warm the Python workers and the JVM's JIT on the same query over one segment
            from ..spark.source import list_segments
            read_journal(spark, tmp, segments=[list_segments(tmp)[0][0]]).groupBy(
                "record_kind").count().collect()
            with Timed() as full:
                got = read_journal(spark, tmp).groupBy("record_kind").count().collect()
            with Timed() as kinds_only:
                kinds = read_journal(spark, tmp, columns=["record_kind"]).groupBy(
                    "record_kind").count().collect()
            lo = written // 2
            with Timed() as in_range_t:
                in_range = read_journal(spark, tmp, lsn_min=lo, lsn_max=lo + written // 100 - 1
                                        ).groupBy("record_kind").count().collect()
            from ..parquet_export import export_parquet
            parquet = os.path.join(tmp, "parquet")
            with Timed() as export:
                exported = export_parquet(tmp, parquet).written
            parquet_bytes = sum(os.path.getsize(os.path.join(parquet, f))
                                for f in os.listdir(parquet))
            parquet_s = parquet_range_s = 0.0  # one segment: nothing sealed to query
            if exported:
                from pyspark.sql import functions as F
                with Timed() as t:
                    spark.read.parquet(parquet).groupBy("record_kind").count().collect()
                parquet_s = t.wall
                with Timed() as t:
                    spark.read.parquet(parquet).where(F.col("lsn").between(
                        lo, lo + written // 100 - 1)).groupBy("record_kind").count().collect()
                parquet_range_s = t.wall
        finally:
            spark.stop()
        assert sum(r["count"] for r in got) == rows, "Spark and the plain reader disagree"
        assert sorted(map(tuple, kinds)) == sorted(map(tuple, got)), "projection changed rows"
        range_rows = sum(r["count"] for r in in_range)
        return SparkFigures(written, rows, size, plain.wall, full.wall, kinds_only.wall,
                            in_range_t.wall, range_rows, export.wall, parquet_bytes,
                            parquet_s, plain.cpu, full.cpu, kinds_only.cpu, in_range_t.cpu,
                            parquet_range_s)
    finally:
        if before is None:
            os.environ.pop("MQSTORE_CATALOGUE", None)
        else:
            os.environ["MQSTORE_CATALOGUE"] = before
        shutil.rmtree(tmp, ignore_errors=True)
