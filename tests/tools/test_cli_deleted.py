"""``mqstore queues --deleted``: deleted durable queues with the time each was deleted (seed 002
"Deleting Queues"), read-only."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from mqstore.engine import Broker, QueueConfig
from tests.tools.test_cli import digest
from mqstore.tools.cli import main

NOON = 1_700_000_000_000


def test_queues_deleted_lists_them_and_changes_nothing(tmp_path: Path) -> None:
    d = tmp_path / "s"
    clock = [NOON]
    with Broker.open(str(d), clock=lambda: clock[0]) as b:
        b.create_address("jobs")
        for name in ("a", "b", "mem"):
            b.create_queue(QueueConfig(name, "jobs", durable=name != "mem"))
        for name in ("b", "mem"):
            clock[0] += 1500
            b.delete_queue(name)
    before = digest(d)
    rows = json.loads(CliRunner().invoke(main, ["queues", str(d), "--deleted", "--json"]).output)
    assert rows == [{"queue": "b", "address": "jobs", "routing_type": "anycast",
                     "deleted": "2023-11-14T22:13:21.500+00:00", "deleted_ms": NOON + 1500}]
    text = CliRunner().invoke(main, ["queues", str(d), "--deleted"]).output.splitlines()
    assert text[0].split("\t") == ["queue", "address", "routing_type", "deleted"]
    live = json.loads(CliRunner().invoke(main, ["queues", str(d), "--json"]).output)
    assert [q["queue"] for q in live] == ["a"]
    assert digest(d) == before
