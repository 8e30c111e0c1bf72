"""The report's figures at any size: Spark's tables equal the one-process reference
(``tools.figures.plain_figures``) on a store with every record kind, on the same store with
damaged records, and on a Parquet export; live and dead bytes per segment equal the journal's
own accounting; ``record_bytes`` adds up to the segments' bytes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Dict, List

import pytest
from click.testing import CliRunner

from mqstore.tools.cli import main
from mqstore.tools.figures import TABLES, plain_figures
from mqstore.tools.offline import OfflineStore, iter_entries
from tests.tools.richstore import build_rich

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = str(tmp_path_factory.mktemp("rich") / "store")
    build_rich(d)
    return d


def norm(rows: List[Dict[str, Any]]) -> List[tuple]:
    return sorted(tuple(sorted((k, repr(v)) for k, v in r.items())) for r in rows)


def spark_tables(spark: Any, source: str) -> Dict[str, List[Dict[str, Any]]]:
    from mqstore.tools.spark.figures import figures
    from mqstore.tools.spark.report import load_entries
    entries, _what = load_entries(spark, source)
    tables, held = figures(entries.cache())
    try:
        return {name: [r.asDict() for r in df.collect()] for name, df in tables.items()}
    finally:
        for df in held:
            df.unpersist()


def assert_same(spark_side: Dict[str, List[Dict[str, Any]]],
                plain: Dict[str, List[Dict[str, Any]]]) -> None:
    for name in TABLES:
        assert norm(spark_side[name]) == norm(plain[name]), name


def test_every_table_equals_the_reference_and_segments_the_journals_accounting(
        spark: Any, rich: str) -> None:
    rows = list(iter_entries(rich))
    kinds = {r["record_kind"] for r in rows}
    assert {"MESSAGE", "ACK", "DELIVERY", "DUE", "DEPAGE", "SETTINGS", "QUEUE_DEL"} <= kinds
    assert any(r["transaction_id"] is not None for r in rows)
    plain = plain_figures(rows)
    assert_same(spark_tables(spark, rich), plain)
    with OfflineStore(rich, liveness=True) as offline:
        journal = {s["segment"]: s for s in offline.segment_rows()}
        queues = {q["queue"]: q["messages"] for q in offline.queue_rows()}
    assert len(journal) >= 3
    for s in plain["segment_bytes"]:  # the engine's own liveness, record for record
        j = journal[s["segment"]]
        assert (s["records"], s["live_records"], s["bytes"], s["live_bytes"]) == \
            (j["records"], j["live_records"], j["bytes"], j["live_bytes"]), s["segment"]
    assert {q["queue"]: q["unacked"] for q in plain["unacked_per_queue"]} == \
        {q: n for q, n in queues.items() if n}
    reasons = {(r["queue"], r["reason"]) for r in plain["acks_by_reason"]}
    for seen in (("ring", "evicted"), ("lvq", "replaced"), ("work", "expired"),
                 ("work", "killed"), ("work", "rejected"), ("work", "acked"),
                 ("temp2", "orphaned")):
        assert seen in reasons, seen
    activity = {a["queue"]: a for a in plain["queue_activity"]}
    assert activity["work"]["dead_lettered"] == 3 and activity["work"]["redelivered"] >= 3


def test_record_bytes_add_up_to_each_segments_records(rich: str) -> None:
    from mqstore.journal.format import SEGMENT_HEADER_SIZE
    from mqstore.tools.segments import segment_files
    rows = list(iter_entries(rich))
    for f in segment_files(rich):
        records = {r["offset"]: r["record_bytes"] for r in rows if r["segment"] == f.sequence}
        data = Path(f.path).read_bytes()
        end = max(records) + records[max(records)]
        assert sum(records.values()) == end - SEGMENT_HEADER_SIZE  # back to back, none missed
        assert not any(data[end:])  # nothing after the last record: all of them counted


def test_damaged_records_are_bytes_apart_and_the_rest_still_equals(
        spark: Any, rich: str, tmp_path: Path) -> None:
    d = str(tmp_path / "damaged")
    shutil.copytree(rich, d)
    seg = sorted(Path(d, "journal").glob("*.seg"))[1]
    raw = bytearray(seg.read_bytes())
    raw[700] ^= 0xFF
    raw[5000:5004] = b"\xff\xff\xff\x7f"  # a length no frame has: resynchronised after
    seg.write_bytes(bytes(raw))
    rows = list(iter_entries(d))
    assert any(not r["crc_ok"] for r in rows)
    plain = plain_figures(rows)
    damaged = {s["segment"]: s["damaged_bytes"] for s in plain["segment_bytes"]}
    assert damaged[int(seg.name.split(".")[0])] > 0
    assert_same(spark_tables(spark, d), plain)


def test_report_on_a_parquet_export_equals_the_reference_on_its_segments(
        spark: Any, rich: str, tmp_path: Path) -> None:
    from mqstore.tools.spark.report import run_report
    out = tmp_path / "parquet"
    result = CliRunner().invoke(main, ["export", "--parquet", rich, str(out)])
    assert result.exit_code == 0, result.output
    sealed = {int(n.split("-")[0]) for n in os.listdir(out)}
    rows = [r for r in iter_entries(rich) if r["segment"] in sealed]
    assert_same(spark_tables(spark, str(out)), plain_figures(rows))
    report = run_report(spark, str(out), str(tmp_path / "report"))
    assert report.source.startswith("Parquet export")
    assert "Parquet export of the sealed segments" in Path(report.html).read_text()
    cli = CliRunner().invoke(main, ["spark-report", str(out), "--out", str(tmp_path / "r2"),
                                    "--master", "local[1]"])
    assert cli.exit_code == 0, cli.output
    assert (tmp_path / "r2" / "report.html").exists()


def test_backlog_along_the_journal_ends_at_each_queues_unacked(
        spark: Any, rich: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also: the report's tables as written equal the reference when its shuffles are cut
    wide (as for a 100M-record journal), and the caller's session keeps its own setting."""
    from mqstore.tools.spark import report as job
    from mqstore.tools.spark.report import backlog_levels, run_report
    out = tmp_path / "report"
    before = spark.conf.get("spark.sql.shuffle.partitions")
    rows = list(iter_entries(rich))
    monkeypatch.setattr(job, "ROWS_PER_TASK", len(rows) // 9)
    result = run_report(spark, rich, str(out))
    assert spark.conf.get("spark.sql.shuffle.partitions") == before
    assert_same({name: [r.asDict() for r in spark.read.parquet(str(out / name)).collect()]
                 for name in TABLES}, plain_figures(rows))
    along = [r.asDict() for r in spark.read.parquet(str(out / "activity_over_journal")).collect()]
    backlog = [r.asDict() for r in spark.read.parquet(str(out / "backlog_over_journal")).collect()]
    levels = backlog_levels(backlog, along)
    ends = {q: points[-1][1] for q, points in levels.items()}
    assert ends.pop("temp") == 0 and ends.pop("temp2") == 0  # deleted: their messages went
    assert {q: n for q, n in ends.items() if n} == result.unacked
    last = max(a["lsn_from"] for a in along)
    assert all(points[-1][0] == last for points in levels.values())  # carried to the end
    assert sum(a["sends"] for a in along) == result.kinds["MESSAGE"]
    page = Path(result.html).read_text()
    for title in ("record bytes by kind", "acks by reason", "queue activity",
                  "sends, deliveries and acks along the journal"):
        assert title in page


def test_an_export_with_files_from_before_record_bytes_is_refused(rich: str,
                                                                  tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from mqstore import MqStoreError
    from mqstore.tools.spark.report import load_entries
    out = tmp_path / "parquet"
    assert CliRunner().invoke(main, ["export", "--parquet", rich, str(out)]).exit_code == 0
    first = sorted(out.glob("*.parquet"))[0]
    pq.write_table(pq.read_table(first).drop(["record_bytes"]), first)  # as an older version
    with pytest.raises(MqStoreError, match="1 file.* without the record_bytes column"):
        load_entries(None, str(out))  # refused before any Spark job
