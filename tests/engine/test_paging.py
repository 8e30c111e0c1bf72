"""The live index and the RAM budget (issue 12): a backlog costs disk, not RAM; the head is read
back from the index in order; an index commit writes what changed, not the whole state."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.engine import Broker, Message, QueueConfig, RoutingType
from mqstore.engine.errors import InvalidArgumentError
from mqstore.journal import JournalOptions

OPTS = JournalOptions(segment_size=256 * 1024)
BUDGET = 64 * 1024  # a head of about 13 references per queue


def open_broker(d: Path, **kw) -> Broker:
    return Broker.open(str(d / "s"), journal_options=OPTS, expiry_scan_ms=0,
                       memory_budget=BUDGET, **kw)


def fill(b: Broker, address: str, n: int, batch: int = 100) -> None:
    with b.session() as s:
        for start in range(0, n, batch):
            s.send_many(address, [Message(b"%d" % i, {"i": i})
                                  for i in range(start, min(n, start + batch))])


def drain(b: Broker, queue: str) -> list:
    got = []
    with b.session() as s:
        c = s.create_consumer(queue, window=50)
        while (batch := c.receive_many(50, timeout=0)):
            got += [int(d.message.body) for d in batch]
            s.ack_many(batch)
            assert b.statistics().memory.references <= b.budget.head_max + 50
    return got


def test_a_backlog_stays_in_the_index_and_comes_back_in_order(tmp_path: Path) -> None:
    b = open_broker(tmp_path)
    b.create_address("q")
    b.create_queue(QueueConfig("q", "q"))
    fill(b, "q", 3000)
    stats = b.statistics().memory
    assert b.queue_info("q").message_count == 3000
    assert stats.references <= b.budget.head_max and stats.paged_out >= 3000 - b.budget.head_max
    assert stats.used <= BUDGET
    with b.session() as s:  # a browser reads past the head, in order, without holding it
        assert [int(m.message.body) for m in s.create_browser("q")] == list(range(3000))
    assert b.statistics().memory.references <= b.budget.head_max
    assert drain(b, "q") == list(range(3000))
    b.close()


def test_reopen_reads_no_message_and_counts_from_the_index(tmp_path: Path) -> None:
    b = open_broker(tmp_path)
    b.create_address("q")
    b.create_queue(QueueConfig("q", "q"))
    fill(b, "q", 2000)
    b.close()
    b = open_broker(tmp_path)
    try:
        assert b.recovery_report.index == "used"
        assert b.queue_info("q").message_count == 2000
        assert b.statistics().memory.references == 0  # nothing read yet
        assert drain(b, "q") == list(range(2000))
        assert b.queue_info("q").message_count == 0
    finally:
        b.close()


def test_multicast_is_stored_once_and_each_queue_pages_on_its_own(tmp_path: Path) -> None:
    b = open_broker(tmp_path)
    b.create_address("t", {RoutingType.MULTICAST})
    for q in ("t1", "t2"):
        b.create_queue(QueueConfig(q, "t", RoutingType.MULTICAST))
    fill(b, "t", 1000)
    assert b.statistics().messages == 1000
    assert drain(b, "t1") == list(range(1000))
    assert b.statistics().messages == 1000  # t2 still references every one
    b.close()
    b = open_broker(tmp_path)
    try:
        assert b.queue_info("t1").message_count == 0
        assert drain(b, "t2") == list(range(1000))
        assert b.statistics().messages == 0
    finally:
        b.close()


def test_cancelled_deliveries_and_a_ring_on_a_paging_queue(tmp_path: Path) -> None:
    b = open_broker(tmp_path)
    b.create_address("q")
    b.create_queue(QueueConfig("q", "q"))
    b.create_address("r")
    b.create_queue(QueueConfig("r", "r", ring_size=500))
    fill(b, "q", 600)
    fill(b, "r", 600)
    assert b.queue_info("r").message_count == 500  # the ring counts what is in the index
    with b.session() as s:
        c = s.create_consumer("q", window=200)
        first = c.receive_many(200, timeout=0)
        assert [int(d.message.body) for d in first] == list(range(200))
        c.close()  # back to the head, delivery counts kept, in order
    with b.session() as s:
        c = s.create_consumer("q", window=600)
        again = c.receive_many(600, timeout=0)
        got = [int(d.message.body) for d in again]
        while len(got) < 600 and (more := c.receive_many(600, timeout=0)):
            again += more
            got += [int(d.message.body) for d in more]
        assert got == list(range(600))
        assert [d.delivery_count for d in again[:200]] == [2] * 200
        assert all(d.delivery_count == 1 for d in again[200:])
        s.ack_many(again)
    assert drain(b, "r") == list(range(100, 600))
    b.close()


def test_an_index_commit_writes_what_changed_not_the_state(tmp_path: Path) -> None:
    b = open_broker(tmp_path, checkpoint_records=0)
    b.create_address("q")
    b.create_queue(QueueConfig("q", "q"))
    fill(b, "q", 5000)
    b.checkpoint()
    before = b.statistics().index_entries_written
    with b.session() as s:
        s.send("q", Message(b"one more"))
    b.checkpoint()
    written = b.statistics().index_entries_written - before
    assert 0 < written < 20, written  # the message, its reference, order, queue, meta
    b.close()


def test_a_budget_below_the_minimum_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        Broker.open(str(tmp_path / "s"), memory_budget=100)
    with pytest.raises(InvalidArgumentError):
        Broker.open(str(tmp_path / "s"), memory_budget="64M")  # type: ignore[arg-type]
