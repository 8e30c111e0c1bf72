"""``mqstore spark-report``: the inspection job over a store's journal (or a Parquet export of
it), on Spark, at any journal size.

The journal is read once: its entries are persisted on the executors' disks and every table is
computed from that copy by Spark (``tools.spark.figures``, whose rules ``tools.figures`` gives),
so the driver holds only the tables' results (a row per segment, queue, address, hour and
stretch of the journal), whatever the journal's size. Nothing is recovered on the driver: live
and dead bytes come from the records' own acks.

Tables (Parquet, in OUT): ``records_by_kind`` (entries and damaged entries per kind);
``messages_per_address_hour`` (MESSAGE entries by address and hour of their timestamp, UTC);
``segment_bytes``, ``bytes_by_kind``, ``bytes_by_address``, ``unacked_per_queue``,
``queue_activity``, ``acks_by_reason``, ``oldest_unacked_messages`` (``tools.figures``);
``activity_over_journal`` and ``backlog_over_journal`` (sends, deliveries and acks along the
journal, ``tools.spark.figures.over_journal``). Plots (PNG, matplotlib; a day per point over
spans of more than two weeks, a log scale when one series dominates) and ``report.html`` (Jinja2,
``tools.spark.page``: a headline with the store, its size, the time span, damaged entries and
when the report was made; times in ISO-8601 UTC, ages in human units) tie them together.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from mqstore.journal import MqStoreError

from ..figures import STUCK_PER_QUEUE


@dataclass
class ReportResult:
    """Where the report went and its headline figures (bytes are record bytes)."""

    out: str
    html: str
    rows: int
    kinds: Dict[str, int]
    damaged: int
    unacked: Dict[str, int]
    reclaimable_bytes: int
    seconds: float
    live_bytes: int = 0
    source: str = "journal"


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


def is_parquet_export(path: str) -> bool:
    """Whether ``path`` is a directory ``mqstore export --parquet`` wrote (and not a store)."""
    from ..parquet_export import exported
    return (os.path.isdir(path) and not os.path.isdir(os.path.join(path, "journal"))
            and bool(exported(path)))


def load_entries(spark: Any, source: str) -> Tuple[Any, str]:
    """The entries the report reads, with the columns it needs, and what they are: a store's
    journal (every segment), or a Parquet export (its sealed segments).

    Raises:
        MqStoreError: ``source`` is neither (one line), or an export made before the
            ``record_bytes`` column existed.
    """
    from .figures import COLUMNS
    from .source import read_journal
    if not is_parquet_export(source):
        return read_journal(spark, source, columns=COLUMNS), "journal"
    import pyarrow.parquet as pq
    from ..parquet_export import exported, file_name
    older = sorted(name for name in (file_name(seq, gen) for seq, gen in exported(source))
                   if "record_bytes" not in pq.read_schema(os.path.join(source, name)).names)
    if older:  # (footers only) a rerun of an older export added files with the new column
        raise MqStoreError(f"the Parquet export at {source} has {len(older)} file(s) without "
                           f"the record_bytes column, the first {older[0]}",
                           hint="export again into a new directory with this version")
    df = spark.read.option("pathGlobFilter", "*.parquet").parquet(source)
    return df.select(*COLUMNS), "Parquet export of the sealed segments"


class _Tables:
    """Writes each table as Parquet in ``out`` and reads back the written rows (small: the
    table's own rows), so nothing is computed twice."""

    def __init__(self, spark: Any, out: str) -> None:
        self.spark = spark
        self.out = out

    def __call__(self, name: str, df: Any, *order: str) -> List[Dict[str, Any]]:
        path = os.path.join(self.out, name)
        df.write.mode("overwrite").parquet(path)
        rows = [r.asDict() for r in self.spark.read.parquet(path).collect()]
        return sorted(rows, key=lambda r: tuple((r[k] is None, r[k]) for k in order))


ROWS_PER_TASK = 4_000_000  # entries per shuffle task, at most, in the report's joins


def run_report(spark: Any, store: str, out: str) -> ReportResult:
    """Run the job on an existing session; write tables, plots and the HTML report to ``out``.

    Args:
        store: a store directory, or a directory ``mqstore export --parquet`` wrote.

    Raises:
        MqStoreError: ``store`` is neither (nothing is written then).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from .figures import figures, over_journal

    start = time.monotonic()
    entries, source = load_entries(spark, store)
    os.makedirs(out, exist_ok=True)
    entries = entries.persist(StorageLevel.DISK_ONLY)  # the one read of the journal
    held = [entries]
    partitions: Optional[str] = None
    try:
        table = _Tables(spark, out)
        by_kind = table("records_by_kind", entries.groupBy("record_kind").agg(
            F.count("*").alias("entries"),
            F.sum(F.when(~F.col("crc_ok"), 1).otherwise(0)).alias("damaged")), "record_kind")
        kinds = {r["record_kind"]: r["entries"] for r in by_kind}
        partitions = spark.conf.get("spark.sql.shuffle.partitions")
        # a shuffle task of at most ~4M entries: joins and sorts of a 100M-entry journal then
        # spill in slices the heap holds (4 tasks of 25M each thrashed); small journals keep
        # the session's setting, restored afterwards since the session may be the caller's
        spark.conf.set("spark.sql.shuffle.partitions",
                       str(max(int(partitions), -(-sum(kinds.values()) // ROWS_PER_TASK))))
        msgs = entries.where(F.col("record_kind") == "MESSAGE")
        hours = table("messages_per_address_hour", msgs.where(F.col("timestamp").isNotNull())
                      .withColumn("hour", F.date_trunc("hour", F.timestamp_millis("timestamp")))
                      .groupBy("address", "hour").count(), "address", "hour")
        tables, more = figures(entries)
        held += more
        got = {name: table(name, df, *df.columns[:3]) for name, df in tables.items()}
        views = over_journal(entries)
        along = table("activity_over_journal", views[0], "bucket") if views else []
        queues = table("backlog_over_journal", views[1], "queue", "bucket") if views else []
        span = msgs.agg(F.min("timestamp"), F.max("timestamp")).first()
    finally:
        for df in held:
            df.unpersist()
        if partitions is not None:
            spark.conf.set("spark.sql.shuffle.partitions", partitions)
    now_ms = int(time.time() * 1000)
    segments = got["segment_bytes"]
    total = sum(s["bytes"] for s in segments)
    live = sum(s["live_bytes"] for s in segments)
    damaged_bytes = sum(s["damaged_bytes"] for s in segments)
    headline = [("store", os.path.abspath(store)),
                ("read from", source),
                ("journal", f"{total + damaged_bytes:,} bytes of records in "
                            f"{len(segments)} segments"),
                ("live", f"{live:,} bytes; {total - live:,} dead bytes compaction would reclaim"),
                ("messages sent", f"from {_iso(span[0])} to {_iso(span[1])} (UTC)"),
                ("entries", f"{sum(kinds.values()):,}"),
                ("damaged entries", f"{kinds.get('DAMAGED', 0):,} "
                                    f"({damaged_bytes:,} bytes)"),
                ("generated at", _iso(now_ms))]
    unacked_rows = [_aged(r, now_ms) for r in got["unacked_per_queue"]]
    stuck_rows = [_aged(r, now_ms) for r in got["oldest_unacked_messages"]]
    _plots(out, kinds, hours, segments, unacked_rows, along, queues)
    page = _html(out, store, headline, kinds, hours, got, unacked_rows, stuck_rows, along)
    return ReportResult(out, page, sum(kinds.values()), kinds, kinds.get("DAMAGED", 0),
                        {r["queue"]: r["unacked"] for r in got["unacked_per_queue"]},
                        total - live, time.monotonic() - start, live, source)


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


def _dominated(totals: Dict[Any, int]) -> bool:
    """Whether one series is over 100 times another: the small ones would lie flat on a linear
    axis, so the plot takes a log scale."""
    return bool(totals) and max(totals.values()) > 100 * max(1, min(totals.values()))


def _plots(out: str, kinds: Dict[str, int], hours: List[Dict[str, Any]],
           segments: List[Dict[str, Any]], unacked: List[Dict[str, Any]],
           along: List[Dict[str, Any]], backlog: List[Dict[str, Any]]) -> List[str]:
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
    if _dominated(kinds):
        ax.set_yscale("log")
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
    if _dominated(totals):
        ax.set_yscale("log")
    ax.set_title(f"messages per address per {'day' if daily else 'hour'} "
                 f"(message timestamp, UTC)")
    ax.legend(loc="upper right", fontsize=8)
    save(fig, "messages_per_hour.png")
    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = [str(s["segment"]) for s in segments]
    bottom = [0.0] * len(segments)
    for key, label, color in (("live_bytes", "live", "#70ad47"),
                              ("dead_bytes", "dead (reclaimable)", "#c00000"),
                              ("damaged_bytes", "damaged", "#7f7f7f")):
        values = [s[key] / 1e6 for s in segments]
        ax.bar(labels, values, bottom=bottom, label=label, color=color)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("MB")
    ax.set_title("live, dead and damaged record bytes per segment")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", rotation=30)
    if len(labels) > 30:  # a label per segment would overlap
        ax.set_xticks(range(0, len(labels), max(1, len(labels) // 15)))
    save(fig, "segment_bytes.png")
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.barh([u["queue"] for u in unacked], [u["unacked"] for u in unacked], color="#ed7d31")
    ax.set_title("unacknowledged messages per queue")
    save(fig, "unacked_per_queue.png")
    fig, (top, bottom_ax) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    x = [a["lsn_from"] for a in along]
    for key, color in (("sends", "#4472c4"), ("deliveries", "#ed7d31"), ("acks", "#70ad47")):
        top.plot(x, [a[key] for a in along], label=key, lw=0.9, color=color)
    top.set_title("sends, deliveries and acks along the journal (per stretch of LSNs)")
    top.legend(fontsize=8)
    peaks = {}
    for q, points in backlog_levels(backlog, along).items():
        peaks[q] = max(1, max(p for _x, p in points))
        bottom_ax.step([p[0] for p in points], [p[1] for p in points], where="post", label=q,
                       lw=0.9)
    if _dominated(peaks):
        bottom_ax.set_yscale("symlog")
    bottom_ax.set_title("backlog per queue along the journal (sent minus acked)")
    bottom_ax.set_xlabel("LSN")
    if peaks:
        bottom_ax.legend(fontsize=7, ncol=2)
    save(fig, "activity_over_journal.png")
    return files


def backlog_levels(backlog: List[Dict[str, Any]], along: List[Dict[str, Any]]
                   ) -> Dict[str, List[Tuple[int, int]]]:
    """Each queue's backlog along the journal, from the backlog rows of
    ``tools.spark.figures.over_journal``: (first LSN of the stretch, references sent minus
    acked by its end), back to 0 where the queue was deleted, carried to the journal's last
    stretch."""
    edges = {a["bucket"]: a["lsn_from"] for a in along}
    last = max(edges) if edges else 0
    steps: Dict[str, List[Dict[str, Any]]] = {}
    for r in backlog:
        steps.setdefault(r["queue"], []).append(r)
    levels: Dict[str, List[Tuple[int, int]]] = {}
    for q, rows in steps.items():
        level, points = 0, []
        for r in sorted(rows, key=lambda r: r["bucket"]):
            level = 0 if r["deleted"] else level + r["added"] - r["acked"]
            points.append((edges.get(r["bucket"], r["bucket"]), level))
        if rows and max(r["bucket"] for r in rows) < last:
            points.append((edges[last], level))
        levels[q] = points
    return levels


def _html(out: str, store: str, headline: List[Any], kinds: Dict[str, int],
          hours: List[Dict[str, Any]], got: Dict[str, List[Dict[str, Any]]],
          unacked: List[Dict[str, Any]], stuck: List[Dict[str, Any]],
          along: List[Dict[str, Any]]) -> str:
    """Write ``report.html`` (``tools.spark.page``); returns its path."""
    from .page import render, section
    kind_rows = [{"kind": k, "entries": v} for k, v in sorted(kinds.items())]
    hour_rows = [{"address": h["address"], "hour": _iso(int(h["hour"].timestamp() * 1000)),
                  "messages": h["count"]} for h in hours]
    along_rows = [{"lsn_from": a["lsn_from"], "lsn_to": a["lsn_to"],
                   "newest send": _iso(a["sent_ms"]), "sends": a["sends"],
                   "deliveries": a["deliveries"], "acks": a["acks"]} for a in along]
    sections = [
        section("entries by kind", kind_rows, "records_by_kind.png", "records_by_kind"),
        section("record bytes by kind", got["bytes_by_kind"], "", "bytes_by_kind",
                "a transaction's record counts as TX, whatever it holds"),
        section("record bytes by address", got["bytes_by_address"], "", "bytes_by_address",
                "records holding messages sent to the address"),
        section("messages per address over time", hour_rows, "messages_per_hour.png",
                "messages_per_address_hour", limit=24),
        section("live and dead bytes per segment", got["segment_bytes"], "segment_bytes.png",
                "segment_bytes", "dead bytes are what compaction would reclaim; live means "
                "still needed by the rules of the acks the journal holds"),
        section("unacknowledged messages per queue", unacked, "unacked_per_queue.png",
                "unacked_per_queue", "age: of the oldest, at the time the report was made; "
                "pinned_from: the oldest segment one of them keeps (compaction cannot reclaim "
                "it); live_bytes: their records' bytes (a message on two queues counts twice)"),
        section(f"the oldest unacknowledged messages of each queue (up to {STUCK_PER_QUEUE})",
                stuck, "", "oldest_unacked_messages"),
        section("queue activity", got["queue_activity"], "", "queue_activity",
                "redelivered: messages delivered more than once; dead_lettered: acked with "
                "reason killed, past their max delivery attempts"),
        section("acks by reason", got["acks_by_reason"], "", "acks_by_reason"),
        section("sends, deliveries and acks along the journal", along_rows,
                "activity_over_journal.png", "activity_over_journal",
                "records carry no time: each stretch of LSNs is timed by the newest send in it; "
                "the backlog is the running sum of sends minus acks per queue", limit=20)]
    page = os.path.join(out, "report.html")
    with open(page, "w", encoding="utf-8") as f:
        f.write(render(headline, os.path.abspath(store), sections))
    return page


def report(store: str, out: str, master: str = "local[*]") -> ReportResult:
    """Run the report on a session of ``master``: a new one, stopped at the end, or the one
    already active in this process (a notebook's, a test's), left running (``master`` does
    not apply to it then)."""
    from pyspark.sql import SparkSession
    existing = SparkSession.getActiveSession()
    spark = existing or spark_session(master, "mqstore-report")
    try:
        return run_report(spark, store, out)
    finally:
        if existing is None:
            spark.stop()


__all__ = ["report", "run_report", "spark_session", "ReportResult", "load_entries"]
