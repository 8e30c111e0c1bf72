"""Deleting queues (seed 002 "Deleting Queues"): the ifEmpty and ifUnused checks, and deleted
queues staying visible to management with the time they were deleted, across restarts, index
rebuilds, compaction and crashes."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import List, Tuple

import pytest

from mqstore.engine import (Broker, DeletedQueue, Message, QueueConfig, QueueInUseError,
                            QueueNotEmptyError, QueueNotFoundError, RoutingType)
from mqstore.engine.errors import InvalidArgumentError
from mqstore.journal import JournalOptions, SimulatedFileSystem
from mqstore.recovery import MemoryIndex
from mqstore.recovery.entries import KEEP_DELETED

T0 = 1_700_000_000_000
OPTS = JournalOptions(segment_size=16 * 1024)


def listed(b: Broker) -> List[Tuple[str, int, bool]]:
    return [(d.name, d.deleted_at, d.durable) for d in b.deleted_queues()]


def test_if_empty_and_if_unused_refuse_and_change_nothing(tmp_path: Path) -> None:
    now = [T0]
    with Broker.open(str(tmp_path / "s"), clock=lambda: now[0]) as b:
        b.create_address("jobs")
        b.create_queue(QueueConfig("jobs", "jobs"))
        b.create_queue(QueueConfig("later", "jobs"))
        with b.session() as s:
            s.send("jobs::jobs", Message(b"1"))
            s.send("jobs::later", Message(b"2", delivery_delay=60_000))  # scheduled only
            with pytest.raises(QueueNotEmptyError) as err:
                b.delete_queue("jobs", if_empty=True)
            assert err.value.messages == 1 and "jobs" in str(err.value)
            with pytest.raises(QueueNotEmptyError):
                b.delete_queue("later", if_empty=True)  # a scheduled message counts
            c = s.create_consumer("jobs")
            for flags in ({}, {"if_unused": True}):
                with pytest.raises(QueueInUseError) as used:
                    b.delete_queue("jobs", **flags)
                assert used.value.consumers == 1
            c.receive(1).ack()
            with pytest.raises(QueueInUseError):  # empty, but still subscribed
                b.delete_queue("jobs", if_empty=True, if_unused=True)
            c.close()
        with pytest.raises(InvalidArgumentError):
            b.delete_queue("jobs", if_empty="yes")  # type: ignore[arg-type]
        assert b.queue_names() == ["jobs", "later"] and b.deleted_queues() == []
        now[0] = T0 + 5
        b.delete_queue("jobs", if_empty=True, if_unused=True)
        with pytest.raises(QueueNotFoundError):
            b.delete_queue("jobs")
        assert b.deleted_queues() == [DeletedQueue("jobs", "jobs", RoutingType.ANYCAST, True,
                                                   T0 + 5)]


def test_deleted_queues_stay_listed_across_reopen_rebuild_and_compaction(tmp_path: Path
                                                                        ) -> None:
    d = str(tmp_path / "s")
    now = [T0]
    with Broker.open(d, journal_options=OPTS, clock=lambda: now[0]) as b:
        b.create_address("t", {RoutingType.MULTICAST})
        b.create_queue(QueueConfig("audit", "t", RoutingType.MULTICAST))
        b.create_queue(QueueConfig("mem", "t", RoutingType.MULTICAST, durable=False))
        b.create_queue(QueueConfig("keep", "t", RoutingType.MULTICAST))
        with b.session() as s:
            s.send_many("t", [Message(b"x" * 200) for _ in range(50)])
        now[0] = T0 + 1000
        b.delete_queue("audit")
        now[0] = T0 + 2000
        b.delete_queue("mem")
        assert listed(b) == [("audit", T0 + 1000, True), ("mem", T0 + 2000, False)]
        with b.session() as s:  # the queue's records and messages become dead: compact them
            s.send_many("t", [Message(b"y" * 200) for _ in range(100)])
            c = s.create_consumer("keep")
            s.ack_many(c.receive_many(150, timeout=1))
        assert b.compact(force=True).compacted
    expect = [("audit", T0 + 1000, True)]  # the transient queue's entry is gone
    for rebuild in (False, True):
        if rebuild:
            shutil.rmtree(os.path.join(d, "index"))
        with Broker.open(d, journal_options=OPTS, clock=lambda: now[0]) as b:
            assert b.recovery_report.rebuilt == rebuild
            assert listed(b) == expect
            assert "audit" not in b.queue_names()
            b.create_queue(QueueConfig("audit", "t", RoutingType.MULTICAST))  # a new one
            now[0] += 1000
            b.delete_queue("audit")
            expect.append(("audit", now[0], True))
            assert listed(b) == expect


def test_only_the_newest_deletions_are_kept_and_the_rest_reclaimed() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()
    now = [T0]

    def open_() -> Broker:
        return Broker.open("/s", fs=fs, index=index, journal_options=JournalOptions(
            segment_size=4096), clock=lambda: now[0])

    total = KEEP_DELETED + 7
    with open_() as b:
        b.create_address("a")
        for i in range(total):
            now[0] = T0 + i
            b.create_queue(QueueConfig(f"q{i}", "a"))
            b.delete_queue(f"q{i}")
        expect = [(f"q{i}", T0 + i, True) for i in range(7, total)]
        assert listed(b) == expect
    with open_() as b:
        assert listed(b) == expect
    index.tables = {name: {} for name in index.tables}  # rebuild from the journal
    with open_() as b:
        assert b.recovery_report.rebuilt
        assert listed(b) == expect


def test_a_deletion_is_durable_when_delete_queue_returns() -> None:
    fs, index = SimulatedFileSystem(), MemoryIndex()

    def open_() -> Broker:
        return Broker.open("/s", fs=fs, index=index, clock=lambda: T0)

    b = open_()
    b.create_address("a")
    b.create_queue(QueueConfig("q", "a"))
    b.delete_queue("q")
    fs = fs.crash(keep=0)  # power cut: nothing unsynced survives
    index = index.crash(random.Random(1))
    b2 = open_()
    try:
        assert listed(b2) == [("q", T0, True)]
    finally:
        b2.close()
