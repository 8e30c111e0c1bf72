"""``mqstore spark-report``: the inspection job over a store's journal, on Spark.

Tables (Parquet, in OUT): ``records_by_kind``; ``messages_per_address_hour`` (MESSAGE entries
by address and hour of their timestamp, UTC); ``segment_bytes`` (live and dead bytes per segment:
what compaction would reclaim, computed by an offline recovery on the driver);
``unacked_per_queue`` (messages on each live queue with no ACK, and their age). Plots (PNG,
matplotlib) and ``report.html`` tie them together; a summary table is printed.
"""

from __future__ import annotations

import html
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
    unacked = (on_queue.join(acks, ["queue", "message_id"], "left_anti")
               .groupBy("queue").agg(F.count("*").alias("unacked"),
                                     F.min("timestamp").alias("oldest_ms"),
                                     F.max("timestamp").alias("newest_ms")))
    newest = msgs.agg(F.max("timestamp")).collect()[0][0] or 0
    now_ms = int(time.time() * 1000)
    unacked = (unacked.withColumn("oldest_age_hours", (F.lit(now_ms) - F.col("oldest_ms")) / 3.6e6)
               .withColumn("oldest_age_vs_newest_hours",
                           (F.lit(newest) - F.col("oldest_ms")) / 3.6e6).orderBy("queue"))
    unacked.write.mode("overwrite").parquet(os.path.join(out, "unacked_per_queue"))
    unacked_rows = [r.asDict() for r in unacked.collect()]
    hours = [r.asDict() for r in per_hour.collect()]
    plots = _plots(out, kinds, hours, segments, unacked_rows)
    page = _html(out, store, kinds, hours, segments, unacked_rows, plots)
    return ReportResult(out, page, sum(kinds.values()), kinds, kinds.get("DAMAGED", 0),
                        {r["queue"]: r["unacked"] for r in unacked_rows},
                        sum(s["dead_bytes"] for s in segments), time.monotonic() - start)


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
    for address in sorted({h["address"] for h in hours}):
        pts = [h for h in hours if h["address"] == address]
        ax.plot([p["hour"] for p in pts], [p["count"] for p in pts], label=address, lw=0.8)
    ax.set_title("messages per address per hour (message timestamp, UTC)")
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


def _table(rows: List[Dict[str, Any]], limit: int = 50) -> str:
    if not rows:
        return "<p>(none)</p>"
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in cols) + "</tr>"
                   for r in rows[:limit])
    more = f"<p>({len(rows) - limit} more rows in the Parquet table)</p>" \
        if len(rows) > limit else ""
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def _html(out: str, store: str, kinds: Dict[str, int], hours: List[Dict[str, Any]],
          segments: List[Dict[str, Any]], unacked: List[Dict[str, Any]], plots: List[str]
          ) -> str:
    kind_rows = [{"kind": k, "entries": v} for k, v in sorted(kinds.items())]
    parts = [f"<h1>mqstore journal report</h1><p>store: {html.escape(os.path.abspath(store))}"
             f"</p>", "<h2>entries by kind</h2>", _table(kind_rows),
             '<img src="records_by_kind.png">', "<h2>messages per address per hour</h2>",
             '<img src="messages_per_hour.png">', _table(hours, 24),
             "<h2>live and dead bytes per segment</h2>", '<img src="segment_bytes.png">',
             _table(segments), "<h2>unacknowledged messages per queue</h2>",
             '<img src="unacked_per_queue.png">', _table(unacked)]
    page = os.path.join(out, "report.html")
    with open(page, "w", encoding="utf-8") as f:
        f.write("<!doctype html><meta charset=utf-8><title>mqstore report</title><style>"
                "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
                "td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px}</style>"
                + "".join(parts))
    return page


def report(store: str, out: str, master: str = "local[*]") -> ReportResult:
    """Start a session, run the report, stop the session."""
    spark = spark_session(master, "mqstore-report")
    try:
        return run_report(spark, store, out)
    finally:
        spark.stop()


__all__ = ["report", "run_report", "spark_session", "ReportResult", "Optional"]
