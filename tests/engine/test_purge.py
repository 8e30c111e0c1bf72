"""Purging a queue (issue 15 management; Artemis removeAllMessages, Qpid purge, RabbitMQ
queue.purge): every message no consumer holds goes (ready, in the index, scheduled, paged),
those in delivery stay; the removals are journaled before it returns, and a crash at any point
leaves each message removed or still there, never duplicated."""

from __future__ import annotations

import random
from pathlib import Path
from typing import List

import pytest

from mqstore.engine import (AddressSettings, Broker, Message, QueueConfig, QueueNotFoundError,
                            RoutingType)
from mqstore.engine.paging.memory import MIN_BUDGET
from mqstore.journal import JournalOptions, MqStoreError, SimulatedFileSystem
from mqstore.recovery import MemoryIndex

OPTS = JournalOptions(segment_size=4096, max_record_size=2000)
NOW = 1_700_000_000_000


def bodies(b: Broker, queue: str) -> List[bytes]:
    with b.session() as s:
        return [m.message.body for m in s.create_browser(queue)]


def test_purge_removes_what_no_consumer_holds(tmp_path: Path) -> None:
    now = [NOW]
    settings = {"a": AddressSettings(max_size_messages=60)}
    with Broker.open(str(tmp_path / "s"), memory_budget=MIN_BUDGET, clock=lambda: now[0],
                     address_settings=settings, journal_options=OPTS) as b:
        b.create_address("a", {RoutingType.MULTICAST})
        b.create_queue(QueueConfig("q", "a", RoutingType.MULTICAST))
        b.create_queue(QueueConfig("other", "a", RoutingType.MULTICAST))
        with b.session() as s:
            s.send_many("a", [Message(b"m%d" % i, durable=i % 3 > 0) for i in range(50)])
            s.send("a", Message(b"later", scheduled_delivery_time=NOW + 60_000))
            s.send_many("a", [Message(b"p%d" % i) for i in range(20)])  # some page
            held = s.create_consumer("q").receive_many(3, timeout=0)
            info = b.queue_info("q")
            assert info.paged_count > 0 and info.scheduled_count == 1
            assert b.purge_queue("a::q") == info.message_count - 3
            info = b.queue_info("q")
            assert (info.message_count, info.delivering_count, info.scheduled_count,
                    info.paged_count, info.messages_killed) == (3, 3, 0, 0, 68)
            assert bodies(b, "q") == []
            assert b.queue_info("other").message_count == 71  # it keeps its copies
            assert len(bodies(b, "other")) == 70  # (a browser does not see a scheduled one)
            held[0].ack()
            held[1].release()  # back on the queue: a purge never touched it
            assert bodies(b, "q") == [b"m1"]
            s.send("a", Message(b"after"))
            assert bodies(b, "q") == [b"m1", b"after"]
        with pytest.raises(QueueNotFoundError):
            b.purge_queue("nope")
        with pytest.raises(QueueNotFoundError):
            b.purge_queue("other::q")
        assert b.purge_queue("::q") == 3  # m1, after, and m2 its session's close gave back
        assert b.queue_info("q").message_count == 0


def test_a_purge_survives_a_restart_and_an_index_rebuild(tmp_path: Path) -> None:
    d = str(tmp_path / "s")
    with Broker.open(d, journal_options=OPTS) as b:
        b.create_address("a")
        b.create_queue(QueueConfig("q", "a"))
        with b.session() as s:
            s.send_many("a", [Message(b"x" * 100) for _ in range(200)])
        assert b.purge_queue("q") == 200
    import shutil
    for rebuild in (False, True):
        if rebuild:
            shutil.rmtree(str(tmp_path / "s" / "index"))
        with Broker.open(d, journal_options=OPTS) as b:
            assert b.recovery_report.rebuilt == rebuild
            assert b.queue_info("q").message_count == 0


@pytest.mark.parametrize("seed", range(6))
def test_a_crash_during_a_purge_removes_each_message_once_or_not_at_all(seed: int) -> None:
    """The disk fails at a random operation of a purge that takes several records, then the
    power goes with a random part of what was not synced (the last write torn): every message
    is there or removed, none twice, and those left are in their order (priorities too)."""
    rng = random.Random(seed)
    fs, index = SimulatedFileSystem(), MemoryIndex()
    b = Broker.open("/s", fs=fs, index=index, journal_options=OPTS)
    b.create_address("a")
    b.create_queue(QueueConfig("q", "a"))
    with b.session() as s:
        s.send_many("a", [Message(b"%d" % i, priority=rng.choice([0, 4, 9]))
                          for i in range(300)])
        want = bodies(b, "q")
    fs.fail_at, fs.fail_sticky = fs.op_count + rng.randrange(1, 30), True
    try:
        b.purge_queue("q")
    except MqStoreError:  # the broker fail-stopped part way
        pass
    crashed = fs.crash(keep=rng.randrange(fs.unsynced_count() + 1), tear="sector", rng=rng)
    with Broker.open("/s", fs=crashed, index=index.crash(rng), journal_options=OPTS) as b2:
        left = bodies(b2, "q")
        assert len(left) == len(set(left))
        assert left == [x for x in want if x in set(left)]
        assert b2.queue_info("q").message_count == len(left)
