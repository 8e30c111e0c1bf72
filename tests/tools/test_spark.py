"""Journal segments as a Spark source: the same entries as the plain reader, damage as rows,
filter pushdown, the PySpark 4.3.0 reuse case, byte-range splits, and the report."""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Dict

import pytest

from tests.recovery.test_index import build
from mqstore.tools.spark.columns import plain_scan

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = str(tmp_path_factory.mktemp("spark") / "store")
    build(d, rounds=3)
    return d


def plain_counts(d: str) -> Dict[str, int]:
    counts: Counter = Counter()
    plain_scan(d, on_batch=lambda cols: counts.update(cols["record_kind"]))
    return dict(counts)


def spark_counts(df) -> Dict[str, int]:  # type: ignore[no-untyped-def]
    return {r["record_kind"]: r["count"] for r in df.groupBy("record_kind").count().collect()}


def test_counts_by_kind_equal_the_plain_reader(spark, store: str) -> None:
    from mqstore.tools.spark import read_journal
    df = spark.read.format("mqjournal").load(store)
    expected = plain_counts(store)
    assert spark_counts(df) == expected
    assert spark_counts(read_journal(spark, store)) == expected
    assert expected["MESSAGE"] > 100 and expected["ACK"] > 50 and "DAMAGED" not in expected
    row = read_journal(spark, store, kinds=["MESSAGE"], body=True).first()
    assert row["body"] and row["body_size"] == len(row["body"]) and row["crc_ok"]
    assert isinstance(row["properties"], dict)


def test_byte_range_splits_cover_every_record_once(spark, store: str) -> None:
    whole = spark.read.format("mqjournal").option("pushdown", "false").load(store)
    split = (spark.read.format("mqjournal").option("pushdown", "false")
             .option("split_bytes", "3000").load(store))
    assert split.rdd.getNumPartitions() > whole.rdd.getNumPartitions()
    key = ["segment", "offset", "record_kind", "message_id"]
    a = sorted(tuple(r) for r in whole.select(*key).collect())
    b = sorted(tuple(r) for r in split.select(*key).collect())
    assert a == b


def test_corrupt_record_is_a_row_not_a_failure(spark, tmp_path: Path) -> None:
    from mqstore.tools.spark import read_journal
    d = str(tmp_path / "store")
    build(d, rounds=1)
    seg = sorted(Path(d, "journal").glob("*.seg"))[0]
    raw = bytearray(seg.read_bytes())
    raw[400] ^= 0xFF
    seg.write_bytes(bytes(raw))
    df = read_journal(spark, d)
    bad = df.where("crc_ok = false").collect()
    assert len(bad) == 1 and bad[0]["error"] and bad[0]["offset"] <= 400
    assert bad[0]["segment"] == int(seg.name.split(".")[0])
    good = df.where("crc_ok").count()
    assert good == sum(v for k, v in plain_counts(d).items() if k != "DAMAGED")


def test_filter_pushdown_prunes_and_spark_rechecks(spark, store: str) -> None:
    df = spark.read.format("mqjournal").load(store)  # pushdown on in this session
    acks = df.where("record_kind = 'ACK' and lsn > 50")
    plan = acks._jdf.queryExecution().optimizedPlan().toString()
    assert "record_kind" in plan  # still evaluated by Spark
    got = acks.count()
    expected = sum(1 for r in spark.read.format("mqjournal").option("pushdown", "false")
                   .load(store).collect() if r["record_kind"] == "ACK" and r["lsn"] > 50)
    assert got == expected > 0
    segs = sorted(r[0] for r in df.select("segment").distinct().collect())
    assert df.where(f"segment = {segs[0]}").select("segment").distinct().count() == 1


def test_the_helper_answers_right_after_a_filtered_query(spark, store: str) -> None:
    """PySpark 4.3.0 reuses a pushed-down read for a later query on the same DataFrame."""
    from mqstore.tools.spark import read_journal
    df = read_journal(spark, store)
    total = df.count()
    filtered = df.where("record_kind = 'ACK'").count()
    assert 0 < filtered < total
    assert df.count() == total  # not the filtered count
    assert spark_counts(df) == plain_counts(store)
    only = read_journal(spark, store, kinds=["ACK"])  # pruning by argument: a fresh load
    assert only.count() == filtered and only.count() == filtered


def test_report(spark, store: str, tmp_path: Path) -> None:
    from mqstore.tools.offline import OfflineStore
    from mqstore.tools.spark.report import run_report
    out = str(tmp_path / "report")
    result = run_report(spark, store, out)
    with OfflineStore(store, liveness=True) as offline:
        expected = {q["queue"]: q["messages"] for q in offline.queue_rows()}
        journal = offline.segment_rows()
    assert result.unacked == expected
    # what compaction would reclaim: the engine's own accounting, computed without a recovery
    assert result.reclaimable_bytes == sum(s["dead_bytes"] for s in journal) > 0
    segs = spark.read.parquet(os.path.join(out, "segment_bytes")).collect()
    assert sorted((r["segment"], r["live_bytes"], r["dead_bytes"]) for r in segs) == \
        sorted((s["segment"], s["live_bytes"], s["dead_bytes"]) for s in journal)
    for name in ("records_by_kind", "messages_per_address_hour", "segment_bytes",
                 "unacked_per_queue", "bytes_by_kind", "bytes_by_address", "queue_activity",
                 "acks_by_reason", "activity_over_journal", "backlog_over_journal"):
        assert os.path.isdir(os.path.join(out, name))
    for png in ("records_by_kind.png", "messages_per_hour.png", "segment_bytes.png",
                "unacked_per_queue.png", "activity_over_journal.png"):
        assert os.path.getsize(os.path.join(out, png)) > 1000
    page = Path(result.html).read_text()
    assert "unacknowledged messages per queue" in page
    hours = spark.read.parquet(os.path.join(out, "messages_per_address_hour"))
    assert hours.groupBy().sum("count").collect()[0][0] == result.kinds["MESSAGE"]
    # the headline, ISO times and human ages, not epoch milliseconds or fractional hours
    assert os.path.abspath(store) in page and "generated at" in page
    assert "damaged entries" in page and re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", page)
    assert not re.search(r"<td[^>]*>\d{13}</td>", page)  # no raw ms timestamps
    # the oldest unacked messages, with ids: the heads of the queues as browse shows them
    stuck = spark.read.parquet(os.path.join(out, "oldest_unacked_messages")).collect()
    with OfflineStore(store) as offline:
        for queue in expected:
            heads = sorted((r["sent_ms"], r["message_id"])
                           for r in offline.browse_rows(queue, 10**6))[:5]
            got = sorted((r["timestamp"], r["message_id"]) for r in stuck if r["queue"] == queue)
            assert got == heads, queue
    for mid in {r["message_id"] for r in stuck}:
        assert f">{mid}<" in page


def test_header_only_projection_gives_the_same_counts(spark, store: str) -> None:
    from mqstore.tools.spark import read_journal
    full = spark_counts(read_journal(spark, store))
    narrow = spark_counts(read_journal(spark, store, columns=["record_kind", "lsn"]))
    assert narrow == full


def test_an_lsn_range_plans_only_the_segments_that_can_hold_it(spark, store: str) -> None:
    """LSN pruning from the segments' headers: a range just before, at and just after the
    start of each segment plans exactly the segments holding its records (one or two), and
    reads the same rows as the full scan has in it."""
    from mqstore.tools.spark import read_journal
    from mqstore.tools.spark.source import _reader_classes
    reader_class = _reader_classes()[0]
    key = ["segment", "offset", "lsn", "record_kind", "queue"]  # names from earlier segments
    rows = [tuple(r) for r in read_journal(spark, store, columns=key).collect()]
    assert any(r[4] and not r[4].startswith("#") for r in rows)
    sequences = sorted({r[0] for r in rows})
    assert len(sequences) >= 3
    for seq in sequences[1:]:
        first = min(r[2] for r in rows if r[0] == seq and r[2] is not None)
        for lo in (first - 1, first, first + 1):
            hi = lo + 1
            want = sorted(r for r in rows if r[2] is not None and lo <= r[2] <= hi)
            reader = reader_class(store, {"lsn_min": str(lo), "lsn_max": str(hi)}, None)
            planned = {split.sequence for p in reader.partitions() for split in p.value.splits}
            assert planned == {r[0] for r in want}, (seq, lo, planned)
            got = read_journal(spark, store, columns=key, lsn_min=lo, lsn_max=hi).collect()
            assert sorted(tuple(r) for r in got) == want
    everything = reader_class(store, {}, None)
    assert {s.sequence for p in everything.partitions() for s in p.value.splits} == \
        set(sequences)


def test_a_path_without_a_store_is_one_line_not_a_spark_traceback(spark, tmp_path: Path) -> None:
    from mqstore import MqStoreError
    from mqstore.tools.spark import read_journal
    with pytest.raises(MqStoreError, match="no mqstore journal at"):
        read_journal(spark, str(tmp_path))


def test_queue_names_are_read_by_the_executors_not_the_driver(spark, store: str,
                                                              monkeypatch) -> None:
    """read_journal has the executors walk the segments for QUEUE_ADD records and hands the
    map to the source, whose planning then reads no segment body on the driver."""
    import json
    from mqstore.tools.spark import read_journal, source
    segments = source.list_segments(store)
    names = source.queue_names_on_executors(spark, store, segments)
    assert names and names == source.queue_names_at(store, segments)

    def driver_pass(*_args: object) -> None:
        raise AssertionError("the driver read segment bodies for queue names")

    monkeypatch.setattr(source, "queue_names_at", driver_pass)
    reader = source._reader_classes()[0](store, {"queue_names": json.dumps(names)}, None)
    parts = reader.partitions()
    assert parts and all(p.value.names == names for p in parts)
    queues = {r["queue"] for r in read_journal(spark, store, kinds=["ACK"]).collect()}
    assert queues and queues <= set(names.values())


def test_a_second_query_takes_sealed_segments_names_from_the_catalogue(
        spark, tmp_path: Path, monkeypatch) -> None:
    """The catalogue caches each sealed segment's names by (sequence, generation, size,
    mtime): a second query has the executors walk only the newest segment; a sealed segment
    changed since (here damaged) is walked again."""
    from mqstore.tools.spark import read_journal, source
    d = str(tmp_path / "store")
    build(d, rounds=2)
    monkeypatch.setenv("MQSTORE_CATALOGUE", str(tmp_path / "catalogue"))
    walked: list = []
    real = source.names_by_segment

    def recording(spark_, root, segments):  # type: ignore[no-untyped-def]
        walked.append(sorted(s[0] for s in segments))
        return real(spark_, root, segments)

    monkeypatch.setattr(source, "names_by_segment", recording)
    everything = [s[0] for s in source.list_segments(d)]
    assert len(everything) >= 3
    cols = ["segment", "offset", "record_kind", "queue"]
    first = sorted(map(repr, read_journal(spark, d, columns=cols).collect()))
    again = sorted(map(repr, read_journal(spark, d, columns=cols).collect()))
    assert first == again and "queue='orders'" in " ".join(first)
    assert walked == [everything, [everything[-1]]]
    seg = sorted(Path(d, "journal").glob("*.seg"))[0]
    raw = bytearray(seg.read_bytes())
    raw[-1] ^= 0  # same bytes, new modification time: read again, names unchanged
    seg.write_bytes(bytes(raw))
    read_journal(spark, d, kinds=["QUEUE_ADD"]).collect()
    assert walked[-1] == [everything[0], everything[-1]]
