"""The mqstore data commands, driven through click's test runner on stores built by the
engine: read-only commands change no byte; damage is found and named; export/import round-trip."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from pathlib import Path
from typing import Dict

import pytest
from click.testing import CliRunner

from mqstore.engine import Broker
from mqstore.journal import Journal, JournalOptions
from mqstore.recovery import RecordKind
from tests.recovery.test_index import OPTS, build
from mqstore.tools.cli import main


def digest(d: Path) -> Dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


def run(*args: str) -> "object":
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    d = tmp_path / "store"
    build(str(d), rounds=2)
    return d


def test_read_only_commands_change_no_byte(store: Path, tmp_path: Path) -> None:
    before = digest(store)
    for args in (["print", str(store)], ["print", str(store), "--json", "--body"],
                 ["queues", str(store)], ["queues", str(store), "--json"],
                 ["addresses", str(store), "--json"], ["check", str(store)],
                 ["export", str(store), str(tmp_path / "out.jsonl")]):
        result = run(*args)
        assert result.exit_code == 0, (args, result.output)
    assert digest(store) == before


def delivered_before(store: Path, queue: str) -> int:
    """Messages on ``queue`` a consumer had before (the listing's "delivering" offline), as
    a browser sees them."""
    with Broker.open(str(store), journal_options=OPTS) as b:
        with b.session() as s:
            return sum(1 for d in s.create_browser(queue) if d.delivery_count > 0)


def test_listings(store: Path) -> None:
    queues = json.loads(run("queues", str(store), "--json").output)
    by = {q["queue"]: q for q in queues}
    assert by["orders"]["messages"] > 0 and by["orders"]["delivering"] >= 10
    assert by["orders"]["delivering"] == delivered_before(store, "orders")
    assert by["audit"]["routing_type"] == "multicast"
    assert by["orders"]["consumers_at_last_close"] == 0
    addrs = json.loads(run("addresses", str(store), "--json").output)
    assert {a["address"] for a in addrs} == {"orders", "events"}
    events = next(a for a in addrs if a["address"] == "events")  # JSON lists, not joined text
    assert events["routing_types"] == ["multicast"] and events["queues"] == ["audit", "billing"]
    assert isinstance(events["messages"], int) and isinstance(events["paging"], bool)
    rows = [json.loads(x) for x in run("print", str(store), "--json", "--kind", "MESSAGE",
                                       "--queue", "orders").output.splitlines()]
    assert rows and all(r["record_kind"] == "MESSAGE" and "orders" in r["queue"] for r in rows)
    one = rows[0]["message_id"]
    only = run("print", str(store), "--json", "--message-id", str(one)).output.splitlines()
    assert all(json.loads(x)["message_id"] == one for x in only)
    text = run("print", str(store), "--body", "--lsn-from", "1", "--lsn-to", "20").output
    assert "body: o0-0" in text


def test_corrupt_segment_is_named_and_flagged(store: Path) -> None:
    seg = sorted((store / "journal").glob("*.seg"))[0]
    raw = bytearray(seg.read_bytes())
    offset = 64 + 300  # inside the first records of the first (sealed) segment
    raw[offset] ^= 0xFF
    seg.write_bytes(bytes(raw))
    result = run("check", str(store), "--json")
    assert result.exit_code == 1
    errors = [f for f in json.loads(result.output) if f["level"] == "error"]
    assert errors and errors[0]["path"] == str(seg)
    assert errors[0]["offset"] is not None and errors[0]["offset"] <= offset
    printed = run("print", str(store), "--json")
    assert printed.exit_code == 1
    bad = [json.loads(x) for x in printed.output.splitlines() if '"crc_ok": false' in x]
    assert bad and bad[0]["offset"] == errors[0]["offset"] and bad[0]["error"]
    refused = run("recover", str(store))  # a full verification finds it and refuses
    assert refused.exit_code == 1 and str(errors[0]["offset"]) in refused.output
    rec = run("recover", str(store), "--salvage")
    assert rec.exit_code == 0 and "skipped by salvage" in rec.output


@pytest.mark.parametrize("with_index", [True, False])
def test_a_malformed_record_is_named_by_check_and_refused_by_recover(
        store: Path, with_index: bool) -> None:
    if not with_index:
        for p in (store / "index").iterdir():
            p.unlink()
    with Journal.open(str(store / "journal"), JournalOptions()) as j:
        bad = j.append(int(RecordKind.ACK), [1, 2]).location  # CRC-valid, not an ACK's map
    kept = store if with_index else store / "journal"  # (an index may be created anew)
    before = digest(kept)
    result = run("check", str(store), "--json")
    assert result.exit_code == 1
    errors = [f for f in json.loads(result.output) if f["level"] == "error"]
    assert len(errors) == 1 and errors[0]["offset"] == bad.offset
    assert errors[0]["path"].endswith(".seg") and "malformed record" in errors[0]["message"]
    refused = run("recover", str(store))
    assert refused.exit_code == 1 and "malformed record" in refused.output
    assert digest(kept) == before


def test_torn_tail_is_a_warning_and_recover_truncates_it(store: Path) -> None:
    j = Journal.open(str(store / "journal"), JournalOptions(read_only=True))
    last = j.segments()[-1]
    seg, end = Path(last.path), last.end  # (not where the zeros start: a record may end in one)
    j.close()
    raw = bytearray(seg.read_bytes())
    raw[end:end + 100] = os.urandom(100)  # a torn write after the last record
    seg.write_bytes(bytes(raw))
    result = run("check", str(store), "--json")
    findings = json.loads(result.output)
    assert result.exit_code == 0
    assert any(f["level"] == "warning" and "torn tail" in f["message"] for f in findings)
    rec = run("recover", str(store))
    assert rec.exit_code == 0
    assert "torn tail truncated (bytes) │ 100" in rec.output.replace("  ", " ") or \
        "100" in rec.output
    assert run("check", str(store)).exit_code == 0
    assert "torn tail" not in run("check", str(store)).output


def test_export_import_round_trip(store: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run("export", str(store), str(first)).exit_code == 0
    assert run("import", str(first), str(tmp_path / "copy")).exit_code == 0
    assert run("export", str(tmp_path / "copy"), str(second)).exit_code == 0
    assert first.read_bytes() == second.read_bytes()
    assert len(first.read_text().splitlines()) > 100
    seen = []
    for d in (store, tmp_path / "copy"):  # the same queues in the same order (priorities)
        with Broker.open(str(d), journal_options=OPTS) as b, b.session() as s:
            seen.append({q: [(m.message.body, m.message.priority, m.delivery_count)
                             for m in s.create_browser(q)]
                         for q in ("orders", "audit", "billing")})
    assert seen[0] == seen[1] and len({p for _b, p, _n in seen[0]["orders"]}) > 1
    again = run("import", str(first), str(tmp_path / "copy"))
    assert again.exit_code == 1  # not into a store that exists


def test_recover_rebuild_and_compact(store: Path) -> None:
    result = run("recover", str(store), "--rebuild-index")
    assert result.exit_code == 0 and "rebuilt" in result.output
    with Broker.open(str(store)) as b:
        with b.session() as s:
            c = s.create_consumer("orders")
            while (d := c.receive(0.05)) is not None:
                d.ack()
    result = run("compact", str(store), "--force")
    assert result.exit_code == 0 and "before" in result.output and "after" in result.output


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    """A missing argument, a bad value and a directory that is not a store are the same kind
    of mistake: exit 2, the usage line, and nothing printed or created first."""
    assert run("print").exit_code == 2
    (tmp_path / "plain").mkdir()
    for where in ("nothing", "plain"):
        d = str(tmp_path / where)
        for args in (["print", d], ["queues", d], ["addresses", d], ["check", d],
                     ["recover", d], ["compact", d], ["export", d, str(tmp_path / "o.jsonl")],
                     ["browse", d, "q"], ["settings", d, "a"], ["scheduled", d, "q"],
                     ["spark-report", d, "--out", str(tmp_path / "report")]):
            result = CliRunner().invoke(main, args)
            assert result.exit_code == 2, (args, result.output)
            assert result.output.startswith("Usage:") and "no mqstore journal" in result.output
    assert not (tmp_path / "nothing").exists() and not (tmp_path / "o.jsonl").exists()
    assert not (tmp_path / "report").exists()
    assert run("print", str(tmp_path / "plain"), "--lsn-from", "x").exit_code == 2


def test_version() -> None:
    from importlib.metadata import version
    result = run("--version")
    assert result.exit_code == 0 and result.output.split() == ["mqstore", version("mqstore")]


def test_listings_in_a_pipe_are_tab_separated_with_chosen_columns(store: Path) -> None:
    lines = run("queues", str(store)).output.splitlines()  # not a terminal: tsv
    header, rows = lines[0].split("\t"), [x.split("\t") for x in lines[1:]]
    assert header == ["queue", "address", "routing_type", "messages", "paged", "delivering",
                      "scheduled", "bytes"]
    by = {r[0]: dict(zip(header, r)) for r in rows}
    assert by["audit"]["routing_type"] == "multicast"
    assert by["orders"]["delivering"] == str(delivered_before(store, "orders"))
    got = run("queues", str(store), "--columns", "messages,queue").output.splitlines()
    assert got[0] == "messages\tqueue" and len(got) == len(lines)
    addrs = run("addresses", str(store), "--format", "tsv", "--columns", "address,queues")
    assert "events\taudit,billing" in addrs.output.splitlines()
    bad = CliRunner().invoke(main, ["queues", str(store), "--columns", "queue,nope"])
    assert bad.exit_code == 2 and "nope" in bad.output and "last_value_key" in bad.output


def test_json_listings_have_real_types(store: Path) -> None:
    rows = json.loads(run("queues", str(store), "--format", "json").output)
    q = next(r for r in rows if r["queue"] == "orders")
    assert q["ring_size"] == -1 and q["last_value_key"] is None and q["durable"] is True
    assert json.loads(run("queues", str(store), "--json").output) == rows
    few = json.loads(run("queues", str(store), "--json", "--columns", "queue").output)
    assert few == [{"queue": r["queue"]} for r in rows]


def test_a_table_at_80_columns_cuts_nothing(store: Path) -> None:
    out = CliRunner().invoke(main, ["queues", str(store), "--format", "table"],
                             env={"COLUMNS": "80"}).output
    assert "…" not in out and max(len(x) for x in out.splitlines()) <= 80
    for name in ("orders", "audit", "billing"):
        assert name in out


def test_print_of_an_lsn_range_gives_the_rows_of_the_full_print(store: Path) -> None:
    """The range is read from the segments that can hold it (one pass, names included) and
    gives exactly the rows a full print has in it, queue names and all."""
    full = [json.loads(x) for x in run("print", str(store), "--json").output.splitlines()]
    assert len({r["segment"] for r in full}) >= 3  # the range below is in a later segment
    lsns = sorted(r["lsn"] for r in full if r["lsn"] is not None)
    lo, hi = lsns[len(lsns) // 2], lsns[len(lsns) // 2 + 40]
    part = [json.loads(x) for x in run("print", str(store), "--json", "--lsn-from", str(lo),
                                       "--lsn-to", str(hi)).output.splitlines()]
    assert part == [r for r in full if r["lsn"] is not None and lo <= r["lsn"] <= hi]
    first = min(r["segment"] for r in full)
    named = [r for r in part if r["record_kind"] in ("MESSAGE", "ACK")]
    assert named and all(r["segment"] != first for r in named)  # far from the QUEUE_ADDs
    for r in named:  # names from the queues' QUEUE_ADD records in the first segment
        assert set(r["queue"].split(",")) <= {"orders", "audit", "billing"}, r
    acks = [json.loads(x) for x in run("print", str(store), "--json", "--kind", "ack",
                                       "--lsn-from", str(lo)).output.splitlines()]
    assert acks == [r for r in full if r["record_kind"] == "ACK" and r["lsn"] >= lo]


def test_print_seeks_by_segment_and_lsn_and_says_what_it_read(store: Path) -> None:
    """--segment gives exactly that segment's rows of the full print (queue names from the
    segments before it); an LSN range inside one segment scans only that segment; the table
    shows message times as ISO-8601 UTC and ends with a summary on stderr."""
    full = [json.loads(x) for x in run("print", str(store), "--json").output.splitlines()]
    sequences = sorted({r["segment"] for r in full})
    assert len(sequences) >= 3
    middle = sequences[1]
    part = [json.loads(x) for x in run("print", str(store), "--json", "--segment",
                                       str(middle)).output.splitlines()]
    assert part and part == [r for r in full if r["segment"] == middle]
    assert any(r["queue"] for r in part)  # named, though the QUEUE_ADDs are before it
    one = next(r for r in part[1:] if r["record_kind"] == "MESSAGE" and r["timestamp"])
    result = CliRunner().invoke(main, ["print", str(store), "--lsn-from", str(one["lsn"]),
                                       "--lsn-to", str(one["lsn"])])
    assert result.exit_code == 0
    count = sum(1 for r in full if r["lsn"] == one["lsn"])  # a transaction's entries share it
    assert f"{count} entries shown (0 damaged) from 1 segment(s) scanned" in result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 + count and "TIME" in lines[0]
    iso = datetime.datetime.fromtimestamp(one["timestamp"] / 1000, datetime.timezone.utc)
    assert iso.isoformat(timespec="milliseconds") in lines[1]
    everything = CliRunner().invoke(main, ["print", str(store)])
    assert f"from {len(sequences)} segment(s) scanned" in everything.stderr


def test_print_ranges_across_segment_boundaries_equal_the_full_print(store: Path) -> None:
    """A range starting just before, at and just after the first LSN of each segment gives
    the full print's rows in it: seeking never skips a segment that holds one of them."""
    full = [json.loads(x) for x in run("print", str(store), "--json").output.splitlines()]
    for seq in sorted({r["segment"] for r in full})[1:]:
        first = min(r["lsn"] for r in full if r["segment"] == seq and r["lsn"] is not None)
        for lo in (first - 1, first, first + 1):
            got = [json.loads(x) for x in run("print", str(store), "--json", "--lsn-from",
                                              str(lo), "--lsn-to", str(lo + 2)
                                              ).output.splitlines()]
            want = [r for r in full if r["lsn"] is not None and lo <= r["lsn"] <= lo + 2]
            assert got == want and want, (seq, lo)
