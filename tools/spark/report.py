"""``mqstore spark-report``: the inspection job over a store's journal, on Spark.

Tables (Parquet, in OUT): ``records_by_kind``; ``messages_per_address_hour`` (MESSAGE entries
by address and hour of their timestamp, UTC); ``segment_bytes`` (live and dead bytes per segment:
what compaction would reclaim, computed by an offline recovery on the driver);
``unacked_per_queue`` (messages on each live queue with no ACK, the oldest's age);
``oldest_unacked_messages`` (the oldest few of each queue, with their message ids). Plots (PNG,
matplotlib; a day per point over spans of more than two weeks, a log scale when one address
dominates) and ``report.html`` (Jinja2, ``tools.spark.page``: a headline with the store, its
size, the time span, damaged entries and when the report was made; times in ISO-8601 UTC, ages
in human units) tie them together; a summary table is printed.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional


@dataclass
class ReportResult:
    """Where the report went and its headline figures."""

    out: str
    html: str
    rows: int
    kinds: Dict[str, int]
    damaged: int
    unacked: Dict[str, int]
    reclaimable_bytes: int
    seconds: float


def spark_session(master: str, app: str = "mqstore") -> Any:
    """A SparkSession set up for the Python data source on this machine or a cluster."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    return (SparkSession.builder.master(master).appName(app)
            .config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", "4")
            .getOrCreate())


def run_report(spark: Any, store: str, out: str) -> ReportResult:
    """Run the job on an existing session; write tables, plots and the HTML report to ``out``."""
    from pyspark.sql import functions as F

    from ..offline import OfflineStore
    from . import read_journal

    start = time.monotonic()
    os.makedirs(out, exist_ok=True)
    df = read_journal(spark, store, columns=["record_kind", "crc_ok"])
    by_kind = df.groupBy("record_kind").agg(F.count("*").alias("entries"),
                                            F.sum(F.when(~F.col("crc_ok"), 1).otherwise(0))
                                            .alias("damaged"))
    by_kind.write.mode("overwrite").parquet(os.path.join(out, "records_by_kind"))
    kinds = {r["record_kind"]: r["entries"] for r in by_kind.collect()}
    msgs = read_journal(spark, store, kinds=["MESSAGE"],
                        columns=["address", "queue", "message_id", "timestamp"])
    per_hour = (msgs.where(F.col("timestamp").isNotNull())
                .withColumn("hour", F.date_trunc("hour", F.timestamp_millis("timestamp")))
                .groupBy("address", "hour").count().orderBy("address", "hour"))
    per_hour.write.mode("overwrite").parquet(os.path.join(out, "messages_per_address_hour"))
    with OfflineStore(store, liveness=True) as offline:
        segments = offline.segment_rows()
        live_queues = {q.name for q in offline.image.queues.values()}
    seg_df = spark.createDataFrame(segments, "segment long, records long, live_records long, "
                                             "bytes long, live_bytes long, dead_bytes long")
    seg_df.write.mode("overwrite").parquet(os.path.join(out, "segment_bytes"))
    acks = read_journal(spark, store, kinds=["ACK"], columns=["queue", "message_id"])
    on_queue = (msgs.withColumn("queue", F.explode(F.split("queue", ",")))
                .where(F.col("queue").isin(sorted(live_queues) or ["\u0000"])))
    waiting = on_queue.join(acks, ["queue", "message_id"], "left_anti")
    unacked = (waiting.groupBy("queue").agg(F.count("*").alias("unacked"),
                                            F.min("timestamp").alias("oldest_ms"),
                                            F.max("timestamp").alias("newest_ms"))
               .orderBy("queue"))
    unacked.write.mode("overwrite").parquet(os.path.join(out, "unacked_per_queue"))
    from pyspark.sql.window import Window
    first = Window.partitionBy("queue").orderBy("timestamp", "message_id")
    stuck = (waiting.withColumn("rank", F.row_number().over(first))
             .where(F.col("rank") <= STUCK_PER_QUEUE).drop("rank", "address")
             .orderBy("queue", "timestamp", "message_id"))
    stuck.write.mode("overwrite").parquet(os.path.join(out, "oldest_unacked_messages"))
    span = msgs.agg(F.min("timestamp"), F.max("timestamp")).collect()[0]
    now_ms = int(time.time() * 1000)
    unacked_rows = [_aged(r.asDict(), now_ms) for r in unacked.collect()]
    stuck_rows = [_aged(r.asDict(), now_ms) for r in stuck.collect()]
    hours = [r.asDict() for r in per_hour.collect()]
    _plots(out, kinds, hours, segments, unacked_rows)
    headline = [("store", os.path.abspath(store)),
                ("journal", f"{sum(s['bytes'] for s in segments):,} bytes of records in "
                            f"{len(segments)} segments"),
                ("messages sent", f"from {_iso(span[0])} to {_iso(span[1])} (UTC)"),
                ("entries", f"{sum(kinds.values()):,}"),
                ("damaged entries", f"{kinds.get('DAMAGED', 0):,}"),
                ("generated at", _iso(now_ms))]
    page = _html(out, store, headline, kinds, hours, segments, unacked_rows, stuck_rows)
    return ReportResult(out, page, sum(kinds.values()), kinds, kinds.get("DAMAGED", 0),
                        {r["queue"]: r["unacked"] for r in unacked_rows},
                        sum(s["dead_bytes"] for s in segments), time.monotonic() - start)


STUCK_PER_QUEUE = 5  # the oldest unacked messages listed per queue


def _iso(ms: Optional[int]) -> str:
    """ms since the epoch as ISO-8601 UTC to the second; "-" for none."""
    from ..offline import iso_ms
    return iso_ms(ms, short=True) if ms is not None else "-"


def _aged(row: Dict[str, Any], now_ms: int) -> Dict[str, Any]:
    """A row with its ms timestamps as ISO times and its oldest message's age in human units
    (``2d 4h``), for the page."""
    from ..offline import age_s, human_age
    out = {k: v for k, v in row.items() if k not in ("oldest_ms", "newest_ms", "timestamp")}
    oldest = row.get("oldest_ms", row.get("timestamp"))
    if "timestamp" in row:
        out["sent"] = _iso(row["timestamp"])
    else:
        out["oldest"], out["newest"] = _iso(row["oldest_ms"]), _iso(row["newest_ms"])
    out["age"] = human_age(age_s(oldest, now_ms / 1000)) if oldest is not None else "-"
    return out


def _plots(out: str, kinds: Dict[str, int], hours: List[Dict[str, Any]],
           segments: List[Dict[str, Any]], unacked: List[Dict[str, Any]]) -> List[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    files = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), dpi=90)
        plt.close(fig)
        files.append(name)

    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = sorted(kinds, key=lambda k: -kinds[k])
    ax.bar(names, [kinds[k] for k in names], color="#4472c4")
    ax.set_title("journal entries by kind")
    ax.tick_params(axis="x", rotation=30)
    save(fig, "records_by_kind.png")
    fig, ax = plt.subplots(figsize=(9, 3.5))
    times = [h["hour"] for h in hours]
    daily = bool(times) and (max(times) - min(times)).days > 14  # hours would be a solid band
    totals: Dict[str, int] = {}
    for address in sorted({h["address"] for h in hours}):
        buckets: Dict[Any, int] = {}
        for h in hours:
            if h["address"] == address:
                when = h["hour"].date() if daily else h["hour"]
                buckets[when] = buckets.get(when, 0) + h["count"]
        totals[address] = sum(buckets.values())
        ax.plot(sorted(buckets), [buckets[k] for k in sorted(buckets)], label=address, lw=0.8)
    if totals and max(totals.values()) > 100 * max(1, min(totals.values())):
        ax.set_yscale("log")  # one address dominates: the others would lie flat on the axis
    ax.set_title(f"messages per address per {'day' if daily else 'hour'} "
                 f"(message timestamp, UTC)")
    ax.legend(loc="upper right", fontsize=8)
    save(fig, "messages_per_hour.png")
    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = [str(s["segment"]) for s in segments]
    ax.bar(labels, [s["live_bytes"] / 1e6 for s in segments], label="live", color="#70ad47")
    ax.bar(labels, [s["dead_bytes"] / 1e6 for s in segments],
           bottom=[s["live_bytes"] / 1e6 for s in segments], label="dead (reclaimable)",
           color="#c00000")
    ax.set_ylabel("MB")
    ax.set_title("live and dead record bytes per segment")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", rotation=30)
    save(fig, "segment_bytes.png")
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.barh([u["queue"] for u in unacked], [u["unacked"] for u in unacked], color="#ed7d31")
    ax.set_title("unacknowledged messages per queue")
    save(fig, "unacked_per_queue.png")
    return files


def _html(out: str, store: str, headline: List[Any], kinds: Dict[str, int],
          hours: List[Dict[str, Any]], segments: List[Dict[str, Any]],
          unacked: List[Dict[str, Any]], stuck: List[Dict[str, Any]]) -> str:
    """Write ``report.html`` (``tools.spark.page``); returns its path."""
    from .page import render, section
    kind_rows = [{"kind": k, "entries": v} for k, v in sorted(kinds.items())]
    hour_rows = [{"address": h["address"], "hour": _iso(int(h["hour"].timestamp() * 1000)),
                  "messages": h["count"]} for h in hours]
    sections = [
        section("entries by kind", kind_rows, "records_by_kind.png", "records_by_kind"),
        section("messages per address over time", hour_rows, "messages_per_hour.png",
                "messages_per_address_hour", limit=24),
        section("live and dead bytes per segment", segments, "segment_bytes.png",
                "segment_bytes", "dead bytes are what compaction would reclaim"),
        section("unacknowledged messages per queue", unacked, "unacked_per_queue.png",
                "unacked_per_queue", "age: of the oldest, at the time the report was made"),
        section(f"the oldest unacknowledged messages of each queue (up to {STUCK_PER_QUEUE})",
                stuck, "", "oldest_unacked_messages")]
    page = os.path.join(out, "report.html")
    with open(page, "w", encoding="utf-8") as f:
        f.write(render(headline, os.path.abspath(store), sections))
    return page


def report(store: str, out: str, master: str = "local[*]") -> ReportResult:
    """Start a session, run the report, stop the session."""
    spark = spark_session(master, "mqstore-report")
    try:
        return run_report(spark, store, out)
    finally:
        spark.stop()


__all__ = ["report", "run_report", "spark_session", "ReportResult", "Optional"]
