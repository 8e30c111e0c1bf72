"""The report's figures as Spark DataFrames, from a DataFrame of journal entries (the
``mqjournal`` source, or a Parquet export of it): the rules and tables of ``tools.figures``,
computed by joins and aggregations on the executors, so the driver holds only the results.

Every function takes ``entries`` with at least the columns of ``COLUMNS``. ``figures`` returns
the tables of ``tools.figures.TABLES`` with exactly their columns; ``over_journal`` the
report's views along the journal. Shuffles and joins run on the
executors; the walk of pinning chains (``tools.figures.pinned``) runs per segment in an RDD
partition, holding one segment's links at a time.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

from ..figures import CONFIG_KINDS, KILLED, STUCK_PER_QUEUE, TABLES

COLUMNS = ["segment", "offset", "lsn", "record_kind", "transaction_id", "message_id", "address",
           "queue", "timestamp", "delivery_count", "properties", "crc_ok", "record_bytes"]


def _deleted(ok: Any) -> Any:
    """Each deleted queue's newest QUEUE_DEL LSN: q, deleted_lsn (a few rows)."""
    from pyspark.sql import functions as F
    return (ok.where((F.col("record_kind") == "QUEUE_DEL") & F.col("queue").isNotNull())
            .groupBy(F.col("queue").alias("q")).agg(F.max("lsn").alias("deleted_lsn")))


def _refs(entries: Any) -> Any:
    """Every message reference with its fate: segment, offset, lsn, message_id, q, timestamp,
    record_bytes, live."""
    from pyspark.sql import functions as F
    ok = entries.where(F.col("crc_ok"))
    refs = (ok.where(F.col("record_kind") == "MESSAGE")
            .withColumn("q", F.explode(F.split(F.coalesce("queue", F.lit("")), ",")))
            .where(F.col("q") != "")
            .select("segment", "offset", "lsn", "message_id", "q", "timestamp", "record_bytes"))
    acked = (ok.where(F.col("record_kind") == "ACK")
             .select(F.col("queue").alias("q"), "message_id").distinct()
             .withColumn("acked", F.lit(True)))
    return (refs.join(acked, ["q", "message_id"], "left")
            .join(F.broadcast(_deleted(ok)), "q", "left")
            .withColumn("live", F.col("acked").isNull() & (
                F.col("deleted_lsn").isNull() | (F.col("deleted_lsn") < F.col("lsn"))))
            .drop("acked", "deleted_lsn"))


def _walk_segments(rows: Iterator[Any]) -> Iterator[Tuple[int, int]]:
    """An RDD partition of (segment, src, dst) rows sorted by segment (a root when ``dst`` is
    null, else a link from the record at ``src`` to the one at ``dst``) to the (segment,
    offset) of every live record among them (``tools.figures.pinned``), holding one
    segment's links at a time."""
    from mqstore.tools.figures import pinned
    seg: Optional[int] = None
    roots: List[int] = []
    edges: List[Tuple[int, int]] = []
    for s, src, dst in rows:
        if s != seg:
            if seg is not None:
                yield from ((seg, off) for off in pinned(roots, edges))
            seg, roots, edges = s, [], []
        if dst is None:
            roots.append(src)
        else:
            edges.append((src, dst))
    if seg is not None:
        yield from ((seg, off) for off in pinned(roots, edges))


def figures(entries: Any) -> Tuple[Dict[str, Any], List[Any]]:
    """Every table of ``tools.figures.TABLES`` as a DataFrame (lazy: nothing runs yet; persist
    ``entries`` first, since each table reads it), and the intermediate DataFrames persisted
    (on the executors' disks) for them: unpersist those when the tables are written."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window
    refs = _refs(entries).persist(StorageLevel.DISK_ONLY)
    ok = entries.where(F.col("crc_ok"))
    kind = F.col("record_kind")
    live_refs = (refs.groupBy("q", "message_id").agg(F.max("live").alias("live"))
                 .where(F.col("live")).select("q", "message_id"))
    # records live by their own rows (acks aside): a MESSAGE record with a live reference, the
    # newest DELIVERY and the DUE rows of live references, configuration records by their rules
    deliveries = ok.where(kind == "DELIVERY").select(
        "segment", "offset", F.col("queue").alias("q"), "message_id", "lsn")
    newest = deliveries.groupBy("q", "message_id").agg(F.max("lsn").alias("lsn"))
    own_deliveries = (deliveries.join(newest, ["q", "message_id", "lsn"], "left_semi")
                      .join(live_refs, ["q", "message_id"], "left_semi"))
    own_due = (ok.where(kind == "DUE")
               .select("segment", "offset", F.col("queue").alias("q"), "message_id")
               .join(live_refs, ["q", "message_id"], "left_semi"))
    settings = (ok.where(kind == "SETTINGS").groupBy("address")
                .agg(F.max("lsn").alias("newest_settings"),
                     F.collect_set("segment").alias("settings_segments")))
    config = (ok.where(kind.isin("QUEUE_ADD", "SETTINGS", *CONFIG_KINDS))
              .withColumn("q", F.col("queue"))
              .join(F.broadcast(settings), "address", "left")
              .join(F.broadcast(_deleted(ok)), "q", "left"))
    config_live = (F.when(kind == "QUEUE_ADD", F.col("deleted_lsn").isNull()
                          | (F.col("deleted_lsn") < F.col("lsn")))
                   .when(kind == "SETTINGS", (F.col("newest_settings") == F.col("lsn")) & (
                       F.col("properties").isNotNull()
                       | (F.size(F.array_remove("settings_segments", F.col("segment"))) > 0)))
                   .otherwise(F.lit(True)))
    own = (refs.where(F.col("live")).select("segment", "offset")
           .union(own_deliveries.select("segment", "offset"))
           .union(own_due.select("segment", "offset"))
           .union(config.where(F.coalesce(config_live, F.lit(False)))
                  .select("segment", "offset")))
    # acks link records: an ack keeps its record live while the record whose message it
    # cancels is live (or in another segment). Only records holding both messages and acks
    # (TX records) can pass that on, so only links into them go through the walk.
    targets = ok.where(kind == "MESSAGE").select(
        "message_id", F.col("segment").alias("t_segment"), F.col("offset").alias("t_offset"))
    links = (ok.where(kind == "ACK").select("segment", "offset", "message_id")
             .join(targets, "message_id"))
    mixed = (ok.where((kind == "ACK") & F.col("transaction_id").isNotNull())
             .select("segment", F.col("offset").alias("t_offset")).distinct())
    same = links.where((F.col("t_segment") == F.col("segment"))
                       & (F.col("t_offset") != F.col("offset")))
    into_plain = same.join(mixed, ["segment", "t_offset"], "left_anti")
    own_as_target = own.select("segment", F.col("offset").alias("t_offset"))
    roots = (own.union(links.where(F.col("t_segment") != F.col("segment"))
                       .select("segment", "offset"))
             .union(into_plain.join(own_as_target, ["segment", "t_offset"], "left_semi")
                    .select("segment", "offset")))
    walk_in = (same.join(mixed, ["segment", "t_offset"], "left_semi")
               .select("segment", F.col("offset").alias("src"), F.col("t_offset").alias("dst"))
               .union(roots.join(mixed.withColumnRenamed("t_offset", "offset"),
                                 ["segment", "offset"], "left_semi")
                      .select("segment", F.col("offset").alias("src"),
                              F.lit(None).cast("long").alias("dst"))))
    walked = entries.sparkSession.createDataFrame(
        walk_in.repartition("segment").sortWithinPartitions("segment").rdd
        .mapPartitions(_walk_segments), "segment long, offset long")
    # one aggregation per record: its facts, and a live mark from each reason it is live
    special = (F.when(F.col("transaction_id").isNotNull(), F.lit("TX"))
               .when(kind.isin("DUE", "DEPAGE"), kind))
    facts = ok.select("segment", "offset", F.col("record_bytes").alias("bytes"),
                      special.alias("special"), kind.alias("first"),
                      F.when(kind.isin("MESSAGE", "DEPAGE"), F.col("address")).alias("address"),
                      F.lit(None).cast("boolean").alias("live"))
    marks = roots.union(walked).withColumn("live", F.lit(True))
    records = (facts.unionByName(marks, allowMissingColumns=True)
               .groupBy("segment", "offset")
               .agg(F.first("bytes", ignorenulls=True).alias("bytes"),
                    F.max("special").alias("special"),
                    F.first("first", ignorenulls=True).alias("first"),
                    F.first("address", ignorenulls=True).alias("address"),
                    F.coalesce(F.max("live"), F.lit(False)).alias("live"))
               .withColumn("kind", F.coalesce("special", "first"))
               .withColumn("live_bytes", F.when(F.col("live"), F.col("bytes")).otherwise(0))
               .persist(StorageLevel.DISK_ONLY))
    damaged = (entries.where(~F.col("crc_ok")).groupBy("segment", "offset")
               .agg(F.first("record_bytes").alias("b"))
               .groupBy("segment").agg(F.sum("b").alias("damaged_bytes")))
    segs = (records.groupBy("segment")
            .agg(F.count("*").alias("records"),
                 F.sum(F.col("live").cast("long")).alias("live_records"),
                 F.sum("bytes").alias("bytes"), F.sum("live_bytes").alias("live_bytes"))
            .join(damaged, "segment", "full")
            .na.fill(0, ["records", "live_records", "bytes", "live_bytes", "damaged_bytes"])
            .withColumn("dead_bytes", F.col("bytes") - F.col("live_bytes")))

    def totals(key: str) -> Any:
        return (records.where(F.col(key).isNotNull()).groupBy(key)
                .agg(F.count("*").alias("records"), F.sum("bytes").alias("bytes"),
                     F.sum("live_bytes").alias("live_bytes")))

    waiting = refs.where(F.col("live"))
    unacked = (waiting.groupBy(F.col("q").alias("queue"))
               .agg(F.count("*").alias("unacked"), F.min("timestamp").alias("oldest_ms"),
                    F.max("timestamp").alias("newest_ms"),
                    F.sum("record_bytes").alias("live_bytes"),
                    F.min("segment").alias("pinned_from")))
    first = Window.partitionBy("q").orderBy(F.col("timestamp").asc_nulls_last(), "message_id")
    stuck = (waiting.withColumn("rank", F.row_number().over(first))
             .where(F.col("rank") <= STUCK_PER_QUEUE)
             .select(F.col("q").alias("queue"), "message_id", "timestamp", "segment"))
    acks = (ok.where(kind == "ACK")
            .groupBy("queue", F.coalesce(F.col("properties")["reason"], F.lit(""))
                     .alias("reason")).agg(F.count("*").alias("acks")))
    counts = (ok.where((kind == "DELIVERY") & F.col("delivery_count").isNotNull())
              .groupBy("queue", "message_id").agg(F.max("delivery_count").alias("n"))
              .groupBy("queue").agg(F.sum((F.col("n") > 1).cast("long")).alias("redelivered"),
                                    F.max("n").alias("max_delivery_count")))
    sent = refs.groupBy(F.col("q").alias("queue")).agg(F.count("*").alias("sent"))
    acked = acks.groupBy("queue").agg(
        F.sum("acks").alias("acked"),
        F.sum(F.when(F.col("reason") == KILLED, F.col("acks")).otherwise(0))
        .alias("dead_lettered"))
    activity = (sent.join(acked, "queue", "full").join(counts, "queue", "full")
                .na.fill(0, ["sent", "acked", "redelivered", "dead_lettered"]))
    out = {"segment_bytes": segs, "bytes_by_kind": totals("kind"),
           "bytes_by_address": totals("address"), "unacked_per_queue": unacked,
           "queue_activity": activity, "acks_by_reason": acks,
           "oldest_unacked_messages": stuck}
    return {name: df.select(*TABLES[name]) for name, df in out.items()}, [refs, records]


def over_journal(entries: Any, buckets: int = 200) -> Optional[Tuple[Any, Any]]:
    """The report's two views along the journal, its LSN range cut into ``buckets`` equal
    stretches (one small job finds the range; ``None`` when no entry has an LSN):

    - activity: sends, deliveries and acks per stretch, each timed by the newest send time (ms
      since the epoch) of the messages in it (records carry no time of their own; ``None``
      when it holds no message). Columns: bucket, lsn_from, lsn_to, sent_ms, sends,
      deliveries, acks.
    - backlog: references added and acked per queue per stretch, and whether the queue was
      deleted in it (its references go with it); the driver's running sum of added minus
      acked, back to 0 at a deletion, is each queue's backlog along the journal. Columns:
      bucket, queue, added, acked, deleted.
    """
    from pyspark.sql import functions as F
    ok = entries.where(F.col("crc_ok") & F.col("lsn").isNotNull())
    lo, hi = ok.agg(F.min("lsn"), F.max("lsn")).first()
    if lo is None:
        return None
    width = max(1, -(-(hi - lo + 1) // buckets))
    bucket = ((F.col("lsn") - lo) / width).cast("long").alias("bucket")
    kind = F.col("record_kind")
    activity = (ok.select(bucket, "lsn", "record_kind", "timestamp")
                .groupBy("bucket")
                .agg(F.min("lsn").alias("lsn_from"), F.max("lsn").alias("lsn_to"),
                     F.max(F.when(kind == "MESSAGE", F.col("timestamp"))).alias("sent_ms"),
                     F.sum((kind == "MESSAGE").cast("long")).alias("sends"),
                     F.sum((kind == "DELIVERY").cast("long")).alias("deliveries"),
                     F.sum((kind == "ACK").cast("long")).alias("acks"))
                .orderBy("bucket"))
    added = (ok.where(kind == "MESSAGE")
             .select(bucket, F.explode(F.split(F.coalesce("queue", F.lit("")), ","))
                     .alias("queue"))
             .where(F.col("queue") != "").groupBy("bucket", "queue")
             .agg(F.count("*").alias("added")))
    acked = (ok.where(kind == "ACK").select(bucket, "queue")
             .groupBy("bucket", "queue").agg(F.count("*").alias("acked")))
    deleted = (ok.where((kind == "QUEUE_DEL") & F.col("queue").isNotNull())
               .select(bucket, "queue").groupBy("bucket", "queue")
               .agg(F.count("*").alias("deleted")))
    key = ["bucket", "queue"]
    backlog = (added.join(acked, key, "full").join(deleted, key, "full")
               .na.fill(0, ["added", "acked", "deleted"]).orderBy("queue", "bucket"))
    return activity, backlog
