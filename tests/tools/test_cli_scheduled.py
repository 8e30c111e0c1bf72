"""Scheduled messages through the operator's commands: listed, printed, counted, exported and
imported with their due times, and checked; read-only commands change no byte."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from mqstore.engine import Broker, Message, QueueConfig, RoutingType
from tests.tools.test_cli import digest
from mqstore.tools.cli import main

NOON = 1_700_000_000_000


def run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def build(d: Path) -> None:
    clock = [NOON]
    with Broker.open(str(d), clock=lambda: clock[0], expiry_scan_ms=0) as b:
        b.create_address("jobs")
        b.create_queue(QueueConfig("jobs", "jobs"))
        b.create_address("fan", [RoutingType.MULTICAST])
        b.create_queue(QueueConfig("f1", "fan", RoutingType.MULTICAST))
        b.create_queue(QueueConfig("f2", "fan", RoutingType.MULTICAST))
        with b.session() as s:
            s.send("jobs", Message(b"now"))
            for i in (3, 1, 2):
                s.send("jobs", Message(b"j%d" % i, {"n": i},
                                       scheduled_delivery_time=NOON + i * 1000))
            s.send("fan", Message(b"f", delivery_delay=5000))
        clock[0] = NOON + 1000
        b.deliver_scheduled()  # j1 joins the head of jobs: a DUE record


def test_scheduled_listing_counts_print_and_check(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    before = digest(d)
    rows = json.loads(run("scheduled", str(d), "jobs", "--json").output)
    assert [(r["due_ms"], r["properties"]) for r in rows] == [(NOON + 2000, {"n": 2}),
                                                             (NOON + 3000, {"n": 3})]
    assert rows[0]["due"].startswith("2023-11-14T22:13:22.000")
    assert len(json.loads(run("scheduled", str(d), "jobs", "--json", "--limit", "1").output)) == 1
    text = run("scheduled", str(d), "f2").output.splitlines()  # not a terminal: tsv
    assert text[0].split("\t") == ["message_id", "due", "delivery_count", "bytes", "properties"]
    assert len(text) == 2
    missing = run("scheduled", str(d), "nope")
    assert missing.exit_code == 1 and "no durable queue 'nope'" in missing.output
    queues = {q["queue"]: q for q in json.loads(run("queues", str(d), "--json").output)}
    assert (queues["jobs"]["messages"], queues["jobs"]["scheduled"]) == (4, 2)
    assert (queues["f1"]["scheduled"], queues["f2"]["scheduled"]) == (1, 1)
    printed = [json.loads(x) for x in run("print", str(d), "--json").output.splitlines()]
    sched = {r["message_id"]: r["scheduled_time"] for r in printed
             if r["record_kind"] == "MESSAGE"}
    assert sorted(t for t in sched.values() if t) == [NOON + 1000, NOON + 2000, NOON + 3000,
                                                       NOON + 5000]
    due = [r for r in printed if r["record_kind"] == "DUE"]
    assert len(due) == 1 and due[0]["queue"] == "jobs" and sched[due[0]["message_id"]] == \
        NOON + 1000
    assert "scheduled_time=" in run("print", str(d)).output
    assert run("check", str(d)).exit_code == 0
    assert digest(d) == before


def test_export_import_keeps_due_times_and_order(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run("export", str(d), str(first)).exit_code == 0
    lines = [json.loads(x) for x in first.read_text().splitlines()]
    assert [m.get("scheduled") for m in lines if m["type"] == "message"] == \
        [None, None, {"jobs": NOON + 3000}, {"jobs": NOON + 2000},
         {"f1": NOON + 5000, "f2": NOON + 5000}]  # j1 (on the head) first, then journal order
    assert run("import", str(first), str(tmp_path / "copy")).exit_code == 0
    assert run("export", str(tmp_path / "copy"), str(second)).exit_code == 0
    assert first.read_bytes() == second.read_bytes()
    clock = [NOON + 10_000]
    with Broker.open(str(tmp_path / "copy"), clock=lambda: clock[0], expiry_scan_ms=0) as b:
        with b.session() as s:
            c = s.create_consumer("jobs")
            got = []
            while (m := c.receive_nowait()) is not None:
                got.append(m.message.body)
        assert got == [b"j1", b"j2", b"j3", b"now"]


def test_bench_scheduled_measures_a_due_order_drain(tmp_path: Path) -> None:
    """``mqstore bench scheduled`` at small sizes: every message scheduled (none held in RAM),
    drained in due order after a SIGKILL and reopen; the RAM figures are there."""
    from mqstore.tools.bench.scheduled import run as bench

    rows = bench([300, 700], str(tmp_path), lambda _m: None)
    for row in rows:
        assert row["fill"]["scheduled"] == row["size"]
        assert row["fill"]["references"] == 0
        assert row["drain"]["scheduled"] == row["size"] and row["drain"]["in_due_order"]
        assert row["fill"]["anon_mb"] > 0 and row["drain"]["scheduled_drain_anon_mb"] > 0
    assert os.listdir(tmp_path) == []  # the scratch stores are removed
