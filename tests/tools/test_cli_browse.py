"""The operator's views of one queue and one address on a closed store: ``browse`` (the
messages in the order consumers get them), the oldest message and the last run's counters in
``queues``, and the effective address settings with where each comes from; all read-only."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, List

from click.testing import CliRunner

from mqstore import AddressSettings, Broker, Message, QueueConfig
from mqstore.tools.cli import main
from tests.tools.test_cli import digest

NOON = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def run_json(*args: str) -> List[Dict[str, Any]]:
    result = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def build(d: Path, close: bool = True) -> None:
    clock = [NOON]
    b = Broker.open(str(d), clock=lambda: clock[0], expiry_scan_ms=0,
                    address_settings={"jobs.#": AddressSettings(max_delivery_attempts=3,
                                                                dead_letter_address="DLA"),
                                      "jobs.urgent": AddressSettings(max_delivery_attempts=7)})
    b.create_address("jobs.urgent")
    b.create_queue(QueueConfig("urgent", "jobs.urgent"))
    s = b.session()
    for i in range(6):
        clock[0] = NOON + i * 1000
        s.send("jobs.urgent", Message(b"job %d" % i, {"n": i}, priority=9 if i == 4 else 4))
    c = s.create_consumer("urgent")
    first = c.receive(timeout=1)
    assert first is not None and first.message.body == b"job 4"  # priority 9 first
    first.ack()
    taken = c.receive(timeout=1)
    assert taken is not None and taken.message.body == b"job 0"
    if not close:
        b._opened.release()  # what kill -9 leaves: no close, no counters recorded
        return
    c.close()  # job 0 goes back to the head, delivered once
    s.close()
    b.close()


def test_browse_lists_the_queue_head_first_without_taking_anything(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    before = digest(d)
    rows = run_json("browse", str(d), "urgent", "--body")
    assert [r["body"] for r in rows] == ["job 0", "job 1", "job 2", "job 3", "job 5"]
    assert rows[0]["delivery_count"] == 1 and rows[1]["delivery_count"] == 0
    assert rows[0]["properties"] == {"n": 0} and rows[0]["bytes"] == 5
    assert rows[1]["sent_ms"] == NOON + 1000 and rows[1]["sent"] == "2023-11-14T22:13:21Z"
    assert rows[1]["age_s"] >= int(time.time() - (NOON + 1000) / 1000) - 1
    assert [r["message_id"] for r in run_json("browse", str(d), "urgent", "--limit", "2")] \
        == [r["message_id"] for r in rows[:2]]
    missing = CliRunner().invoke(main, ["browse", str(d), "nope"])
    assert missing.exit_code == 1 and "no durable queue 'nope'" in missing.output
    assert digest(d) == before


def test_queues_show_the_oldest_message_and_the_last_runs_counters(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    (row,) = run_json("queues", str(d))
    assert row["oldest"] == "2023-11-14T22:13:20Z"  # job 0, back at the head
    assert row["oldest_age_s"] >= int(time.time() - NOON / 1000) - 1
    assert row["oldest_age"].endswith("h") and "d" in row["oldest_age"]
    assert (row["added_last_run"], row["acked_last_run"], row["killed_last_run"]) == (6, 1, 0)
    with Broker.open(str(d), expiry_scan_ms=0) as b, b.session() as s:  # a second run
        s.create_consumer("urgent").receive(timeout=1).ack()  # type: ignore[union-attr]
    (row,) = run_json("queues", str(d))
    assert (row["added_last_run"], row["acked_last_run"]) == (0, 1)  # that run's, not totals


def test_after_a_crash_the_counters_are_unknown_not_stale(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d, close=False)
    (row,) = run_json("queues", str(d))
    assert row["added_last_run"] is None and row["acked_last_run"] is None
    assert row["messages"] == 5 and row["oldest"] == "2023-11-14T22:13:20Z"


def test_settings_show_each_effective_value_and_its_match(tmp_path: Path) -> None:
    d = tmp_path / "s"
    build(d)
    before = digest(d)
    rows = {r["setting"]: r for r in run_json("settings", str(d), "jobs.urgent")}
    assert (rows["max_delivery_attempts"]["value"], rows["max_delivery_attempts"]["from"]) == \
        (7, "jobs.urgent")
    assert (rows["dead_letter_address"]["value"], rows["dead_letter_address"]["from"]) == \
        ("DLA", "jobs.#")
    assert rows["address_full_policy"]["from"] is None  # the default
    other = {r["setting"]: r for r in run_json("settings", str(d), "jobs.later")}
    assert (other["max_delivery_attempts"]["value"], other["max_delivery_attempts"]["from"]) \
        == (3, "jobs.#")
    assert digest(d) == before
