"""``mqstore add queue`` / ``mqstore del queue`` (qpid-config style, seed 002) on a closed store:
the change is made through the broker and survives; a refused command changes no byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

from click.testing import CliRunner

from mqstore.engine import Broker, Message, QueueConfig, RoutingType
from tests.tools.test_cli import digest
from mqstore.tools.cli import main


def run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def build(d: Path) -> None:
    with Broker.open(str(d)) as b:
        b.create_address("jobs")
        b.create_queue(QueueConfig("jobs", "jobs"))
        with b.session() as s:
            s.send("jobs", Message(b"x"))


def add_then_refuse(d: Path, good: List[str], bad: List[str], says: str) -> None:
    """``mqstore add queue`` with ``good`` arguments succeeds; with ``bad`` ones it fails,
    saying ``says``, and changes no byte of the store."""
    got = run("add", "queue", str(d), *good)
    assert got.exit_code == 0, got.output
    before = digest(d)
    refused = run("add", "queue", str(d), *bad)
    assert refused.exit_code == 1 and says in refused.output
    assert digest(d) == before


def test_add_queue_creates_what_was_asked(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    got = run("add", "queue", str(d), "audit", "--address", "events", "--routing-type",
              "multicast", "--ring-size", "5", "--last-value-key", "k", "--cluster-durable",
              "--max-consumers", "2")
    assert got.exit_code == 0, got.output
    assert "created" in got.output
    assert run("add", "queue", str(d), "more", "--address", "jobs").exit_code == 0
    with Broker.open(str(d)) as b:
        audit = b.queue_info("audit")
        assert (audit.address, audit.routing_type, audit.durable, audit.ring_size,
                audit.last_value_key, audit.max_consumers, audit.persist_last_node) == \
            ("events", RoutingType.MULTICAST, True, 5, "k", 2, True)
        assert b.address_info("jobs").queues == ("jobs", "more")
    before = digest(d)
    again = run("add", "queue", str(d), "audit")
    assert again.exit_code == 1 and "exists already" in again.output
    bad = run("add", "queue", str(d), "x y")  # a name the naming rules refuse
    assert bad.exit_code == 1 and "invalid name" in bad.output
    assert digest(d) == before


def test_del_queue_checks_then_deletes_and_lists_it(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    before = digest(d)
    refused = run("del", "queue", str(d), "jobs", "--if-empty")
    assert refused.exit_code == 1 and "not empty" in refused.output
    missing = run("del", "queue", str(d), "nope")
    assert missing.exit_code == 1 and "nope" in missing.output
    assert digest(d) == before
    done = run("del", "queue", str(d), "jobs", "--if-unused")
    assert done.exit_code == 0 and "1 message" in done.output
    assert json.loads(run("queues", str(d), "--json").output) == []
    assert [r["queue"] for r in json.loads(run("queues", str(d), "--deleted", "--json").output)] \
        == ["jobs"]


def test_a_store_in_use_is_refused_unchanged(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    with Broker.open(str(d)):
        got = run("del", "queue", str(d), "jobs")
        assert got.exit_code == 1 and "error" in got.output
        assert run("add", "queue", str(d), "other").exit_code == 1
    with Broker.open(str(d)) as b:
        assert b.queue_names() == ["jobs"] and b.queue_info("jobs").message_count == 1


def test_add_queue_with_qpid_size_limits_and_list_them(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    got = run("add", "queue", str(d), "capped", "--max-queue-count", "2", "--max-queue-size",
              "100", "--policy-type", "ring")
    assert got.exit_code == 0, got.output
    assert run("add", "queue", str(d), "plain", "--max-queue-count", "1").exit_code == 0
    before = digest(d)
    bad = run("add", "queue", str(d), "odd", "--policy-type", "spill")
    assert bad.exit_code == 2 and digest(d) == before  # click refuses it before anything
    rows = {r["queue"]: r for r in json.loads(run("queues", str(d), "--json").output)}
    assert (rows["capped"]["max_count"], rows["capped"]["max_size"],
            rows["capped"]["policy_type"]) == (2, 100, "ring")
    assert rows["plain"]["policy_type"] == "flow_to_disk"  # Qpid's default for durable ones
    assert rows["jobs"]["policy_type"] is None and rows["jobs"]["max_count"] == -1
    with Broker.open(str(d)) as b:
        info = b.queue_info("capped")
        assert (info.max_count, info.max_size, info.policy_type) == (2, 100, "ring")
        with b.session() as s:
            s.send_many("capped", [Message(b"1"), Message(b"2"), Message(b"3")])
            assert b.queue_info("capped").message_count == 2  # the ring removed the oldest


def test_add_qpid_last_value_queue_and_refuse_what_does_not_combine(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    assert run("add", "queue", str(d), "prices", "--last-value-queue", "--routing-type",
               "multicast").exit_code == 0
    assert run("add", "queue", str(d), "quotes", "--address", "prices", "--routing-type",
               "multicast", "--last-value-queue-no-browse").exit_code == 0
    before = digest(d)
    both = run("add", "queue", str(d), "x", "--last-value-queue", "--last-value-queue-no-browse")
    assert both.exit_code == 2
    mixed = run("add", "queue", str(d), "y", "--last-value-queue", "--last-value-key", "k")
    assert mixed.exit_code == 1 and "not both" in mixed.output
    capped = run("add", "queue", str(d), "z", "--last-value-queue", "--max-queue-count", "3")
    assert capped.exit_code == 1 and "not supported" in capped.output
    assert digest(d) == before  # refused before the store was opened
    rows = {r["queue"]: r for r in json.loads(run("queues", str(d), "--json").output)}
    assert rows["prices"]["qpid_lvq"] == "last_value_queue"
    assert rows["quotes"]["qpid_lvq"] == "last_value_queue_no_browse"
    with Broker.open(str(d)) as b:
        with b.session() as s:
            s.send_many("prices", [Message(b"1", {"qpid.LVQ_key": "RHT"}),
                                   Message(b"2", {"qpid.LVQ_key": "RHT"})])
            assert [m.message.body for m in s.create_browser("prices")] == [b"2"]
            assert [m.message.body for m in s.create_browser("quotes")] == [b"2"]


def test_add_queue_with_an_alternate_address_then_delete_it(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    before = digest(d)
    missing = run("add", "queue", str(d), "work", "--alternate-address", "parked")
    assert missing.exit_code == 1 and "no address 'parked'" in missing.output
    assert digest(d) == before
    assert run("add", "queue", str(d), "parked").exit_code == 0
    assert run("add", "queue", str(d), "work", "--alternate-address", "parked").exit_code == 0
    rows = {r["queue"]: r for r in json.loads(run("queues", str(d), "--json").output)}
    assert rows["work"]["alternate_address"] == "parked"
    with Broker.open(str(d)) as b:
        with b.session() as s:
            s.send_many("work", [Message(b"a"), Message(b"b")])
    gone = run("del", "queue", str(d), "work")  # its messages are orphaned: re-routed
    assert gone.exit_code == 0 and "2 message(s) went to alternate address 'parked'" in \
        gone.output
    with Broker.open(str(d)) as b:
        with b.session() as s:
            assert [m.message.body for m in s.create_browser("parked")] == [b"a", b"b"]


def test_queues_qpid_lists_the_seed_columns(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    got = run("queues", str(d), "--qpid", "--format", "tsv")
    assert got.exit_code == 0, got.output
    lines = got.output.splitlines()
    assert lines[0].split("\t") == ["durable", "auto_delete", "exclusive", "bindings", "bytes",
                                    "queue"]
    assert lines[1].split("\t") == ["Y", "N", "N", "1", "1", "jobs"]  # as qpid-config


def test_export_import_keeps_qpid_queues_and_in_place_positions(tmp_path: Path) -> None:
    from mqstore.engine import PolicyType
    from mqstore.engine.model import QPID_LVQ_KEY, QpidLvq

    d = tmp_path / "s"
    with Broker.open(str(d)) as b:
        b.create_address("parked")
        b.create_queue(QueueConfig("parked", "parked"))
        b.create_address("prices")
        b.create_queue(QueueConfig("prices", "prices", qpid_lvq=QpidLvq.LVQ,
                                   alternate_address="parked"))
        b.create_address("capped")
        b.create_queue(QueueConfig("capped", "capped", max_count=2, max_size=64,
                                   policy_type=PolicyType.RING_STRICT))
        with b.session() as s:
            s.send_many("prices", [Message(b"A1", {QPID_LVQ_KEY: "A"}),
                                   Message(b"B1", {QPID_LVQ_KEY: "B"}),
                                   Message(b"A2", {QPID_LVQ_KEY: "A"})])  # in A1's place
            s.send_many("capped", [Message(b"1"), Message(b"2"), Message(b"3")])
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run("export", str(d), str(first)).exit_code == 0
    assert run("import", str(first), str(tmp_path / "copy")).exit_code == 0
    assert run("export", str(tmp_path / "copy"), str(second)).exit_code == 0
    assert first.read_bytes() == second.read_bytes()
    with Broker.open(str(tmp_path / "copy")) as b:
        info = b.queue_info("capped")
        assert (info.max_count, info.max_size, info.policy_type) == (2, 64, "ring_strict")
        assert b.queue_info("prices").alternate_address == "parked"
        with b.session() as s:
            assert [m.message.body for m in s.create_browser("prices")] == [b"A2", b"B1"]
            assert [m.message.body for m in s.create_browser("capped")] == [b"2", b"3"]
            s.send("prices", Message(b"B2", {QPID_LVQ_KEY: "B"}))  # still a Qpid LVQ
            s.create_consumer("prices").receive(1).reject()  # to the alternate address
            assert [m.message.body for m in s.create_browser("parked")] == [b"A2"]


def test_add_queue_with_a_filter_and_list_it(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    add_then_refuse(d, ["reds", "--address", "jobs", "--filter", "color = 'red'"],
                    ["blues", "--address", "jobs", "--filter", "color ="],
                    "not an Artemis filter expression")
    listed = run("queues", str(d), "--columns", "queue,filter", "--json")
    assert {"queue": "reds", "filter": "color = 'red'"} in json.loads(listed.output)
    with Broker.open(str(d)) as b, b.session() as s:
        for color in ("red", "blue", "blue", "red"):  # anycast: round-robin where it matches
            s.send("jobs", Message(b"", {"color": color}))
        assert b.queue_info("reds").message_count == 1
        assert b.queue_info("jobs").message_count == 1 + 3


def test_add_queue_on_a_wildcard_address_takes_what_its_matches_get(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    add_then_refuse(d, ["every-job", "--address", "jobs.#", "--routing-type", "multicast"],
                    ["x", "--address", "jobs#"], "invalid name")  # '#' not a whole word
    with Broker.open(str(d)) as b:
        b.create_address("jobs.eu", {RoutingType.MULTICAST})
        with b.session() as s:
            s.send("jobs.eu", Message(b"eu"))
            s.send("jobs", Message(b"p2p"))  # 'jobs.#' matches 'jobs', anycast only: no copy
        with b.session() as s:
            assert [m.message.body for m in s.create_browser("every-job")] == [b"eu"]
